// capture-cpu: a fixed amount of CPU-bound managed work on one thread, measured by the app itself, for
// bench/sampling.py (issue 8): the same work sampled at 100 Hz (capture_sample) and unsampled (the plan
// without its capture_sample entry), so the difference is what sampling costs the sampled thread.
//
// The work thread ("sampled") runs Run -> Deep x32 (_common/Recursion.cs) -> Work. Work marks
// "capture.register" (the plan registers the thread there), warms the work up, says it is ready and waits for
// Main's go. Main sets go and
// at once marks "capture.sample" (the plan's sampling runs there on a profiler thread and returns when it is
// done; unsampled, nothing runs there). On go, Work writes 1 into the pinned phase cell the probe's handler
// reads (profharness_capture_phase_cell), so a sample taken during the measured work says phase 1 and one
// taken before or after says 0; then it runs `chunks` calls of Mix (a xorshift loop of ChunkIterations steps:
// no allocation, no call, no system call), measuring the whole with Stopwatch, the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) and the process's (CLOCK_PROCESS_CPUTIME_ID), writes 0 into the cell and waits
// (sleeping) until Main says stop, so it is alive for every sample the plan asked for.
// `chunks` is $PROFHARNESS_CPU_CHUNKS (a positive integer), else DefaultChunks.
// Main, once sampling returned and the work is done, stops and joins the thread (bounded) and marks
// "cpu.work" with {"chunks", "chunkIterations", "depth", "wallNs", "threadCpuNs", "processCpuNs",
// "checksum"} (checksum: the work's result, the same for the same chunks) and "done".
// Exit code 0 when the work ran and the thread ended; 1 otherwise (2: a bad $PROFHARNESS_CPU_CHUNKS).
using System;
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class CaptureCpu
    {
        const string TargetName = "sampled";
        const int Depth = 32;
        const int DefaultChunks = 800;
        const int ChunkIterations = 1000000;
        const int ClockProcessCpu = 2;  // CLOCK_PROCESS_CPUTIME_ID
        const int ClockThreadCpu = 3;   // CLOCK_THREAD_CPUTIME_ID
        // The warm-up calls Mix this long, so tiered compilation (8.0: tier 0 with OSR, then tier 1 after 30
        // calls and a 100 ms quiet delay) has put its final code in place before the measured work.
        const int WarmUpMs = 400;

        [StructLayout(LayoutKind.Sequential)]
        struct Timespec
        {
            public long Seconds;
            public long Nanoseconds;
        }

        [DllImport("libc.so.6", EntryPoint = "clock_gettime")]
        static extern int clock_gettime(int clock, out Timespec value);

        [DllImport("profharness_probe")]
        static extern void profharness_capture_phase_cell(IntPtr cell);

        static int chunks = DefaultChunks;
        static int stop, ready, go, finished;
        static long wallNs, threadCpuNs, processCpuNs, checksum;
        // The phase cell (pinned: its address does not move) the probe's handler reads at each sample.
        static readonly int[] phaseCell = new int[1];
        static GCHandle phasePin;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            string text = Environment.GetEnvironmentVariable("PROFHARNESS_CPU_CHUNKS");
            if (text != null && (!int.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out chunks)
                                 || chunks <= 0))
            {
                Console.Error.WriteLine("capture-cpu: PROFHARNESS_CPU_CHUNKS=" + text + ": not a positive integer");
                return 2;
            }
            Probe.Mark("begin");
            phasePin = GCHandle.Alloc(phaseCell, GCHandleType.Pinned);
            var worker = Threads.StartBackground(Run, TargetName);
            bool wasReady = Threads.AwaitReady(ref ready, 30000);
            if (wasReady)
            {
                Volatile.Write(ref go, 1);
                Probe.Mark("capture.sample", new JsonObject().Add("target", TargetName).ToString());
            }
            // the work may outlast the sampling (bounded: a minute beyond the sampling)
            var clock = Stopwatch.StartNew();
            while (wasReady && Volatile.Read(ref finished) == 0 && clock.ElapsedMilliseconds < 60000)
                Thread.Sleep(2);
            bool workDone = Volatile.Read(ref finished) != 0;
            Volatile.Write(ref stop, 1);
            bool ended = worker.Join(10000);
            if (workDone)
            {
                Probe.Mark("cpu.work", new JsonObject().Add("chunks", chunks)
                    .Add("chunkIterations", ChunkIterations).Add("depth", Depth)
                    .Add("wallNs", wallNs).Add("threadCpuNs", threadCpuNs).Add("processCpuNs", processCpuNs)
                    .Add("checksum", checksum).ToString());
            }
            Probe.Mark("done", new JsonObject().Add("ready", wasReady).Add("workDone", workDone)
                .Add("ended", ended).ToString());
            return wasReady && workDone && ended ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Recursion.Deep(Depth, Work); }

        static long Now(int clockId)
        {
            Timespec t;
            if (clock_gettime(clockId, out t) != 0)
                return -1;
            return t.Seconds * 1000000000L + t.Nanoseconds;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Work()
        {
            profharness_capture_phase_cell(phasePin.AddrOfPinnedObject());
            Probe.Mark("capture.register", new JsonObject().Add("name", TargetName).ToString());
            long sum = 0;
            var warm = Stopwatch.StartNew();  // warm-up: tiering, caches, the clocks' P/Invoke stubs
            for (int i = 0; warm.ElapsedMilliseconds < WarmUpMs; i++)
                sum += Mix(i, 10000);
            Now(ClockThreadCpu);
            Now(ClockProcessCpu);
            Volatile.Write(ref ready, 1);
            while (Volatile.Read(ref go) == 0)
                Thread.Sleep(0);

            Volatile.Write(ref phaseCell[0], 1);
            long cpu0 = Now(ClockThreadCpu), proc0 = Now(ClockProcessCpu);
            var watch = Stopwatch.StartNew();
            long result = 0;
            for (int i = 0; i < chunks; i++)
                result += Mix(i, ChunkIterations);
            watch.Stop();
            long cpu1 = Now(ClockThreadCpu), proc1 = Now(ClockProcessCpu);
            Volatile.Write(ref phaseCell[0], 0);

            wallNs = (long)(watch.ElapsedTicks * (1e9 / Stopwatch.Frequency));
            threadCpuNs = cpu0 < 0 || cpu1 < 0 ? -1 : cpu1 - cpu0;
            processCpuNs = proc0 < 0 || proc1 < 0 ? -1 : proc1 - proc0;
            checksum = result;
            Volatile.Write(ref finished, 1);
            while (Volatile.Read(ref stop) == 0)
                Thread.Sleep(1);
            return sum & 1;
        }

        // The work: a xorshift64 sequence, n steps, folded into a sum.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Mix(long seed, int n)
        {
            ulong x = (ulong)seed * 0x9E3779B97F4A7C15UL + 1;
            ulong acc = 0;
            for (int i = 0; i < n; i++)
            {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                acc += x;
            }
            return (long)(acc & 0x7FFFFFFFFFFFFFFFUL);
        }
    }
}
