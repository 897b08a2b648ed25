// sampling: the workload of `validate --walk-quality` (issue 24 part 4): one busy thread ("sampled") that
// cycles, below a 70-frame managed recursion (Run -> Deep x70 -> Work), through the places of the probe's
// capture-sampling scenario: managed code, native code (profharness_capture_spin, the probe's own spin,
// which the proxy in the probe's seat exports too), small allocations, reference stores (the write
// barrier), a Monitor a second thread keeps taking, a new DynamicMethod JIT-compiled every 8 rounds,
// interface dispatch over five implementations, and a gen-0 GC every 32 rounds (the methods of
// scenarios/_common/Places.cs and the same native spin: the two sides' samples fall in the same places,
// issue 24). It runs PROFHARNESS_APP_SECONDS seconds (3 when unset), then stops and joins both threads.
// Marks: "workload.begin", "workload.end" (payload: rounds). Exit code 0 when both threads ended.
using System;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Workloads
{
    public static class Sampling
    {
        const int Depth = 70;
        static int stop;
        static long rounds;
        static readonly Places places = new Places();

        [DllImport("profharness_probe")]
        static extern long profharness_capture_spin(long iterations);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            double seconds = 3.0;
            string given = Environment.GetEnvironmentVariable("PROFHARNESS_APP_SECONDS");
            if (given != null && (!double.TryParse(given, NumberStyles.Float, CultureInfo.InvariantCulture,
                    out seconds) || !(seconds > 0)))
            {
                Console.Error.WriteLine("sampling: PROFHARNESS_APP_SECONDS=" + given + ": not a positive number");
                return 2;
            }
            ProfHarness.Probe.Mark("workload.begin");
            // The holder runs Places.Hold, the other side of the contended Monitor: asleep with the lock and
            // without it, so a CPU-time timer seldom lands there; its samples have none of Work's methods on the
            // stack, which tells them apart.
            var holder = new Thread(places.Hold) { IsBackground = true, Name = "holder" };
            var sampled = new Thread(Run) { IsBackground = true, Name = "sampled" };
            holder.Start();
            sampled.Start();
            Thread.Sleep(TimeSpan.FromSeconds(seconds));
            Volatile.Write(ref stop, 1);
            places.Release();
            bool ended = sampled.Join(30000) & holder.Join(30000);
            ProfHarness.Probe.Mark("workload.end", "{\"rounds\": " + Volatile.Read(ref rounds) + "}");
            return ended ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Recursion.Deep(Depth, Work); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Work()
        {
            Places p = places;
            long n = 0, total = 0;
            while (Volatile.Read(ref stop) == 0)
            {
                total += p.BusyManaged(20000);
                total += Native(20000);
                total += p.Allocate(200);
                total += p.StoreReferences(4000);
                total += p.Contend(4);
                if ((n & 7) == 0)
                    total += p.JitNewMethod(n);
                total += p.Dispatch(4000);
                if ((n & 31) == 0)
                    total += p.Collect();
                n++;
            }
            Volatile.Write(ref rounds, n);
            return total & 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Native(long iterations)
        {
            return profharness_capture_spin(iterations);  // the probe's scenario spins 20000 too
        }
    }
}
