// hang-suspend: a profiler thread that never returns from SuspendRuntime, planted
// (tests/robustness/test_hangs.py). Main marks "faults.start" (the probe starts its sampler, whose first
// walk is of main), then calls HangSampled(): its enter hook asks the sampler for a walk of main and, in
// the planted plan, waits for it inside the hook, where the runtime cannot suspend main: the sampler's
// SuspendRuntime waits for main, main waits for the sampler. The body marks "sampled.wait" (the probe
// waits, bounded, until the walk is done). Then main marks "done" and exits 0.
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class HangSuspend
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void HangSampled()
        {
            Probe.Mark("sampled.wait");
        }

        public static int Main()
        {
            Probe.Mark("faults.start");
            HangSampled();
            Probe.Mark("done");
            return 0;
        }
    }
}
