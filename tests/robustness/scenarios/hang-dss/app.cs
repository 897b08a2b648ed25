// hang-dss: the DoStackSnapshot page's deadlock, planted (tests/robustness/test_hangs.py). Main marks
// "faults.start" (the probe starts its sampler, whose first walk is of main), then a thread calls
// HangHolder(1000): its enter hook takes the probe's fault lock and asks the sampler for a walk of this
// thread; the body holds the lock for 1 s in Thread.Sleep and the leave hook releases it. The sampler
// suspends the runtime and walks the holder; in the planted plan its StackSnapshotCallback waits for the
// fault lock, which the suspended holder never releases. Main joins the holder, marks "done", exits 0.
using System.Runtime.CompilerServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class HangDss
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void HangHolder(int holdMs)
        {
            Thread.Sleep(holdMs);
        }

        static void Holder()
        {
            HangHolder(1000);
        }

        public static int Main()
        {
            Probe.Mark("faults.start");
            var holder = new Thread(Holder);
            holder.Start();
            holder.Join();
            Probe.Mark("done");
            return 0;
        }
    }
}
