// capture-sampling: a thread the probe samples (SIGPROF, capture_sample) while it cycles through places:
// pure managed code, P/Invoked native code (the probe's profharness_capture_spin) and an allocation loop
// (runtime allocation helpers), all below a 70-frame-deep managed recursion.
// The sampled thread ("sampled") runs Run -> Deep x70 -> Work. Work reports its own stack (mark
// "capture.stack", payload {"name": "sampled", "stack": [...leaf first, from reflection...]}: the managed
// frames on the stack whatever place a sample lands in), marks "capture.register" (the plan registers the
// thread there), says it is ready and loops over the three places until Main sets stop.
// Main waits (bounded) for ready, marks "capture.sample" (the plan's sampling runs there, on a profiler thread,
// and returns when it is done), stops the sampled thread, joins it (bounded) and marks "done".
// Exit code 0 when the sampled thread got ready and ended; 1 otherwise.
using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class CaptureSampling
    {
        const string TargetName = "sampled";
        const int Depth = 70;
        static int stop;
        static int ready;
        static long rounds;
        static object keep;

        [DllImport("profharness_probe")]
        static extern long profharness_capture_spin(long iterations);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Probe.Mark("begin");
            var sampled = new Thread(Run);
            sampled.IsBackground = true;
            sampled.Name = TargetName;
            sampled.Start();
            var clock = Stopwatch.StartNew();
            while (Volatile.Read(ref ready) == 0 && clock.ElapsedMilliseconds < 10000)
                Thread.Sleep(1);
            bool wasReady = Volatile.Read(ref ready) != 0;
            if (wasReady)
            {
                Thread.Sleep(20);  // let the sampled thread get into its loop
                Probe.Mark("capture.sample", new JsonObject().Add("target", TargetName).ToString());
            }
            Volatile.Write(ref stop, 1);
            bool ended = sampled.Join(10000);
            Probe.Mark("done", new JsonObject().Add("ready", wasReady).Add("ended", ended)
                .Add("rounds", Volatile.Read(ref rounds)).ToString());
            return wasReady && ended ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Deep(Depth); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Deep(int n)
        {
            if (n == 0)
                return Work();
            return Deep(n - 1) + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Work()
        {
            Probe.Mark("capture.stack", new JsonObject().Add("name", TargetName)
                .Raw("stack", StackReport.CallerStackJson()).ToString());
            Probe.Mark("capture.register", new JsonObject().Add("name", TargetName).ToString());
            Volatile.Write(ref ready, 1);
            long n = 0, total = 0;
            while (Volatile.Read(ref stop) == 0)
            {
                total += BusyManaged(20000);
                total += profharness_capture_spin(20000);
                total += Allocate(200);
                n++;
            }
            Volatile.Write(ref rounds, n);
            return (int)(total & 1);
        }

        // Pure managed code: no calls, no allocation.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long BusyManaged(int iterations)
        {
            long x = 0;
            for (int i = 0; i < iterations; i++)
                x += i ^ (x >> 3);
            return x;
        }

        // Small allocations: the runtime's allocation helpers (and now and then a GC).
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Allocate(int count)
        {
            long sum = 0;
            for (int i = 0; i < count; i++)
            {
                var a = new byte[32 + (i & 63)];
                sum += a.Length;
                keep = a;
            }
            return sum;
        }
    }
}
