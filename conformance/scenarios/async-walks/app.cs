// async-walks: a target thread parked in known managed frames, walked asynchronously from elsewhere.
// The target ("spinner") runs Spin -> Level1 -> Level2 -> Level3 -> Park. Park reports its own stack
// (mark "target.stack", payload {"name": "spinner", "stack": [...leaf first, from reflection...]}), marks
// "target.register" (the plan registers the thread's ThreadID / pthread / gettid there), says it is ready and
// spins in a pure managed loop (no calls, no allocation) until Main sets stop.
// Main waits (bounded) for ready, marks "walk.target" (the plan's cross-thread, native-thread and
// signal-handler walks run there, on the main thread), stops the spinner and joins it (bounded), marks "done".
// Exit code 0 when the spinner got ready and ended; 1 otherwise.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class AsyncWalks
    {
        const string TargetName = "spinner";
        static int stop;
        static int ready;
        static long spins;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Probe.Mark("begin");
            var spinner = Threads.StartBackground(Spin, TargetName);
            bool wasReady = Threads.AwaitReady(ref ready, 10000);
            if (wasReady)
            {
                // Let the spinner get into its loop before anything walks it.
                Thread.Sleep(20);
                Probe.Mark("walk.target", new JsonObject().Add("target", TargetName).ToString());
            }
            Volatile.Write(ref stop, 1);
            bool ended = spinner.Join(10000);
            Probe.Mark("done", new JsonObject().Add("ready", wasReady).Add("ended", ended)
                .Add("spins", Volatile.Read(ref spins)).ToString());
            return wasReady && ended ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Spin() { Level1(1); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level1(int depth) { return Level2(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level2(int depth) { return Level3(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level3(int depth) { return Park(depth + 1) + 1; }

        // (mcs rejects MethodImplOptions.AggressiveOptimization: on 8.0 the loop may move to an on-stack-
        // replacement version of Park, which is still Park's frame.)
        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Park(int depth)
        {
            Probe.Mark("target.stack", new JsonObject().Add("name", TargetName)
                .Raw("stack", StackReport.CallerStackJson()).ToString());
            Probe.Mark("target.register", new JsonObject().Add("name", TargetName).ToString());
            Volatile.Write(ref ready, 1);
            long n = 0;
            while (Volatile.Read(ref stop) == 0)
                n++;
            Volatile.Write(ref spins, n);
            return depth;
        }
    }
}
