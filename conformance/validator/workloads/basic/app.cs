// basic: the validator's short workload (the scenario validate-basic before workloads): gives a profiler
// behind the recording proxy every occasion the validator's rules watch. Two managed threads start, call
// methods and end (ThreadCreated/ThreadDestroyed);
// exceptions are thrown and caught (ExceptionThrown, with the exception objects kept alive); 4,000 small
// objects survive between garbage, then two blocking, compacting gen-2 collections move them
// (MovedReferences2); a chain of small methods runs (enter/leave hooks). Marks: "validate.begin",
// "validate.gc", "validate.end". Exit code 0 when the survivors kept their contents. plan.json is read only
// by the project's own probe when it is the profiler validated (GC, threads, exceptions, module loads, and a
// walk of its own stack at "validate.gc", which the proxy hands on to it); other profilers ignore it.
// One course; `--courses N` runs it N times in one process ("validate.gc" each time), so that the callbacks,
// not the process's start-up, are most of what a run costs (bench/proxy.py's loop workload; exit code 2 on
// other arguments).
using System;
using System.Collections.Generic;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public sealed class Kept
    {
        public long Tag;
        public byte[] Pad;
    }

    public static class ValidateBasic
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
            throw new InvalidOperationException("validate " + i);
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

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main(string[] args)
        {
            int courses = 1;
            if (args.Length > 0 && (args.Length != 2 || args[0] != "--courses" || !int.TryParse(args[1], out courses)
                    || courses < 1))
            {
                Console.Error.WriteLine("basic: usage: app.dll [--courses N] (N a whole number above 0)");
                return 2;
            }
            ProfHarness.Probe.Mark("validate.begin");
            bool intact = true;
            long total = 0;
            Kept[] survivors = null;
            for (int course = 0; course < courses; course++)
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
                survivors = new Kept[Count];
                for (int i = 0; i < Count; i++)
                {
                    sink = new byte[64 + (i % 7) * 16];
                    survivors[i] = new Kept { Tag = i + 1, Pad = new byte[16] };
                }
                sink = null;
                ProfHarness.Probe.Mark("validate.gc");
                for (int c = 0; c < 2; c++)
                {
                    GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;
                    GC.Collect(2, GCCollectionMode.Forced, true, true);
                }
                total += Calls(500);
                long tags = 0;
                for (int i = 0; i < Count; i++)
                    tags += survivors[i].Tag;
                intact &= tags == (long)Count * (Count + 1) / 2 && kept.Count == 5;
            }
            ProfHarness.Probe.Mark("validate.end", intact ? "intact" : "damaged");
            GC.KeepAlive(survivors);
            return intact && total > 0 ? 0 : 1;
        }
    }
}
