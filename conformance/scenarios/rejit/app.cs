// rejit: ground truth for the ReJIT protocol (issue 25 part 4). RejitTargets holds one method of each shape the
// experiments ask the runtime to recompile: Normal (plain, never inlined), Generic<T> (called with int and
// string: two instantiations, one methodDef), Inlinee (small, called only through Caller), Loop (a long loop:
// on 8.0 its tier-0 code is left for an on-stack-replacement version while it runs), Late (first called after
// the request: ReJIT before the first call) and Never (never asked for, then reverted).
// Marks, in order: "rejit.warm" after the first round of calls (every target but Late and Never has run),
// "rejit.request" (the plan's RequestReJIT), "rejit.called" after the second round (Late's first call
// included), "rejit.again" (a second RequestReJIT of Normal), "rejit.called-again" after Normal ran again,
// "rejit.revert" (RequestRevert of Normal and Never), "rejit.done" after Normal ran once more; then the
// inlining phases: "rejit.inline-request" (rejit-inlined's RequestReJIT of Inlinee alone), "rejit.inline-called"
// after two more calls of Caller, "rejit.inliners" (its RequestReJITWithInliners of Inlinee),
// "rejit.inliners-called" after two more. The payloads carry the calls' results (the same every round: the
// recompiled versions compute what the originals do). Every target is called a few times only (under the 30
// calls that start tiering up a method), so no tier-up comes between the phases.
using System;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class RejitTargets
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Normal(int x)
        {
            return x * 3 + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static string Generic<T>(T value)
        {
            return "<" + value + ">";
        }

        public static int Inlinee(int x)
        {
            return x + 7;
        }

        // Inlinee is inlined only where Caller is optimized (tier 1; mcs cannot write AggressiveOptimization):
        // rejit-inlined runs with tiered compilation off, so Caller's first compilation inlines it
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Caller(int x)
        {
            return Inlinee(x) * 2;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long Loop(int n)
        {
            long sum = 0;
            for (int i = 0; i < n; i++)
                sum += i % 7;
            return sum;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Late(int x)
        {
            return x - 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Never(int x)
        {
            return x ^ 5;
        }
    }

    public static class Rejit
    {
        const int LoopCount = 2000000;

        static string Round()
        {
            return RejitTargets.Normal(4) + "," + RejitTargets.Generic(5) + "," + RejitTargets.Generic("s") + ","
                + RejitTargets.Caller(6) + "," + RejitTargets.Loop(LoopCount);
        }

        public static int Main()
        {
            string first = Round();
            Probe.Mark("rejit.warm", first);
            Probe.Mark("rejit.request");
            string second = Round() + "," + RejitTargets.Late(9);
            Probe.Mark("rejit.called", second);
            Probe.Mark("rejit.again");
            Probe.Mark("rejit.called-again", RejitTargets.Normal(7).ToString());
            Probe.Mark("rejit.revert");
            Probe.Mark("rejit.done", RejitTargets.Normal(8) + "," + RejitTargets.Never(1));
            Probe.Mark("rejit.inline-request");
            Probe.Mark("rejit.inline-called", (RejitTargets.Caller(1) + RejitTargets.Caller(2)).ToString());
            Probe.Mark("rejit.inliners");
            Probe.Mark("rejit.inliners-called", (RejitTargets.Caller(3) + RejitTargets.Caller(4)).ToString());
            return second.StartsWith(first) ? 0 : 1;
        }
    }
}
