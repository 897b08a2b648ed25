// proxy_loop: bench/proxy.py's callback-heavy workload for the verdict (issue 23): the course of the
// validator's basic workload (conformance/validator/workloads/basic/app.cs: threads started and ended,
// exceptions thrown and caught, 4,000 survivors among garbage moved by two forced compacting gen-2 GCs, a
// chain of small methods) run PROFHARNESS_BENCH_ROUNDS times (20 when unset) in one process, so that the
// callbacks, not the process's start-up, are most of what a run costs. Exit code 0 when every round's
// survivors kept their contents.
using System;
using System.Collections.Generic;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Threading;

namespace ProfHarness.Bench
{
    public sealed class Kept
    {
        public long Tag;
        public byte[] Pad;
    }

    public static class ProxyLoop
    {
        const int Count = 4000;
        static readonly List<object> kept = new List<object>();
        static object sink;

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Leaf(long x) { return x * 3 + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Middle(long x) { return Leaf(x) + Leaf(x + 1); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Calls(int n)
        {
            long sum = 0;
            for (int i = 0; i < n; i++)
                sum += Middle(i);
            return sum;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Throw(int i)
        {
            throw new InvalidOperationException("bench " + i);
        }

        static void Worker()
        {
            sink = Calls(200);
            try
            {
                Throw(-1);
            }
            catch (InvalidOperationException e)
            {
                lock (kept)
                    kept.Add(e);
            }
        }

        // One course; true when its survivors kept their contents.
        static bool Round()
        {
            kept.Clear();
            for (int t = 0; t < 2; t++)
            {
                var thread = new Thread(Worker);
                thread.Start();
                thread.Join();
            }
            for (int i = 0; i < 3; i++)
            {
                try
                {
                    Throw(i);
                }
                catch (InvalidOperationException e)
                {
                    kept.Add(e);
                }
            }
            var survivors = new Kept[Count];
            for (int i = 0; i < Count; i++)
            {
                sink = new byte[64 + (i % 7) * 16];
                survivors[i] = new Kept { Tag = i + 1, Pad = new byte[16] };
            }
            sink = null;
            for (int c = 0; c < 2; c++)
            {
                GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;
                GC.Collect(2, GCCollectionMode.Forced, true, true);
            }
            long total = Calls(500);
            long tags = 0;
            for (int i = 0; i < Count; i++)
                tags += survivors[i].Tag;
            GC.KeepAlive(survivors);
            return tags == (long)Count * (Count + 1) / 2 && kept.Count == 5 && total > 0;
        }

        public static int Main()
        {
            int rounds;
            if (!int.TryParse(Environment.GetEnvironmentVariable("PROFHARNESS_BENCH_ROUNDS"), out rounds) || rounds < 1)
                rounds = 20;
            bool intact = true;
            for (int r = 0; r < rounds; r++)
                intact &= Round();
            return intact ? 0 : 1;
        }
    }
}
