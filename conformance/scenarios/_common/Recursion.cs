// Recursion: a deep managed stack below a thread's work (capture-sampling, capture-cpu and the validator's
// sampling workload run their sampled thread's work so: Run -> Deep x(depth + 1) -> work).
using System;
using System.Runtime.CompilerServices;

namespace ProfHarness
{
    public static class Recursion
    {
        /// <summary>Calls work below n more frames of Deep; its result plus n.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long Deep(int n, Func<long> work)
        {
            if (n == 0)
                return work();
            return Deep(n - 1, work) + 1;
        }
    }
}
