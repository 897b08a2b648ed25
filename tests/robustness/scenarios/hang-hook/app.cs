// hang-hook: a hook that blocks, planted (tests/robustness/test_hangs.py). Main marks "faults.start" and
// "gate.arm" (the control plan has a native thread open the probe's gate 100 ms later; the planted plan
// plans nothing there, so nobody ever opens it), then calls HangBlocked(21): its leave hook (FunctionLeave2)
// waits for the gate. Then main marks "done" and exits 0 when HangBlocked returned 42.
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class HangHook
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int HangBlocked(int x)
        {
            return x * 2;
        }

        public static int Main()
        {
            Probe.Mark("faults.start");
            Probe.Mark("gate.arm");
            int r = HangBlocked(21);
            Probe.Mark("done");
            return r == 42 ? 0 : 1;
        }
    }
}
