// gc-loop: compacting GCs every 50 ms for up to 30 s, so a test can SIGKILL it in the middle of its run.
using System;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class GcLoop
    {
        public static int Main()
        {
            object[] keep = new object[1000];
            for (int round = 0; round < 600; round++)
            {
                for (int i = 0; i < 10000; i++)
                {
                    object o = new byte[32];
                    if (i % 10 == 0) keep[(i / 10) % keep.Length] = o;
                }
                GC.Collect(2, GCCollectionMode.Forced, true, true);
                Probe.Mark("gc.round", round.ToString());
                Thread.Sleep(50);
            }
            return 0;
        }
    }
}
