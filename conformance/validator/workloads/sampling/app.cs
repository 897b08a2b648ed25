// sampling: the workload of `validate --walk-quality` (issue 24 part 4): one busy thread ("sampled") that
// cycles, below a 70-frame managed recursion (Run -> Deep x70 -> Work), through the places of the probe's
// capture-sampling scenario: managed code, native code (libc strlen over 64 KiB of unmanaged memory), small
// allocations, reference stores (the write barrier), a Monitor a second thread keeps taking, a new
// DynamicMethod JIT-compiled every 8 rounds, interface dispatch over five implementations, and a gen-0 GC every
// 32 rounds (the methods of scenarios/_common/Places.cs, but its own native code). It runs
// PROFHARNESS_APP_SECONDS seconds (3 when unset), then stops and joins both threads.
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
        static IntPtr text;
        static readonly Places places = new Places();

        [DllImport("libc", EntryPoint = "strlen")]
        static extern IntPtr strlen(IntPtr s);

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
            text = Marshal.AllocHGlobal(65536);
            for (int i = 0; i < 65535; i++)
                Marshal.WriteByte(text, i, (byte)'a');
            Marshal.WriteByte(text, 65535, 0);
            ProfHarness.Probe.Mark("workload.begin");
            // The holder runs Places.Hold, the other side of the contended Monitor: a sampler's timer lands there
            // too; its samples have none of Work's methods on the stack, which tells them apart (it waits in
            // Thread.SpinWait, the runtime's spin loop: a version that waited in managed code made the holder
            // contend for the lock most of its time instead).
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
                total += Native(4);
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
        static long Native(int times)
        {
            long sum = 0;
            for (int i = 0; i < times; i++)
                sum += (long)strlen(text);
            return sum;
        }
    }
}
