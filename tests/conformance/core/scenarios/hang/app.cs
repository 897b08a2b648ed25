// hang: marks "hanging" and then never ends. Used to test the runner's watchdog.
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class Hang
    {
        public static int Main()
        {
            Probe.Mark("hanging");
            Thread.Sleep(Timeout.Infinite);
            return 0;
        }
    }
}
