// Threads: a scenario's own threads, started in the background and awaited until they say they are ready.
using System.Diagnostics;
using System.Threading;

namespace ProfHarness
{
    public static class Threads
    {
        /// <summary>Starts body on a background thread called name (null: left unnamed).</summary>
        public static Thread StartBackground(ThreadStart body, string name)
        {
            var thread = new Thread(body);
            thread.IsBackground = true;
            if (name != null)
                thread.Name = name;
            thread.Start();
            return thread;
        }

        /// <summary>Waits, sleeping 1 ms at a time for at most timeoutMs, until ready is not 0; true when it
        /// is.</summary>
        public static bool AwaitReady(ref int ready, int timeoutMs)
        {
            var clock = Stopwatch.StartNew();
            while (Volatile.Read(ref ready) == 0 && clock.ElapsedMilliseconds < timeoutMs)
                Thread.Sleep(1);
            return Volatile.Read(ref ready) != 0;
        }
    }
}
