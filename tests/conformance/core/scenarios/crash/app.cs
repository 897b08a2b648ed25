// crash: marks "crashing" and then fails fast (SIGABRT). Used to test how the runner reports a crash.
using System;

namespace ProfHarness.Scenarios
{
    public static class Crash
    {
        public static int Main()
        {
            Probe.Mark("crashing");
            Environment.FailFast("profharness crash scenario");
            return 0;
        }
    }
}
