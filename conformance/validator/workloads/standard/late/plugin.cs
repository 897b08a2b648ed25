// late.dll: the assembly the standard workload loads late (Assembly.LoadFrom after a third of its run): a
// module load, its classes and methods compiled long after startup.
namespace ProfHarness.Late
{
    public static class Plugin
    {
        static long Add(long a, long b) { return a + b; }

        public static long Run(int n)
        {
            long sum = 0;
            for (int i = 0; i < n; i++)
                sum = Add(sum, i);
            return sum;
        }
    }
}
