// standard: the validator's default workload: about PROFHARNESS_APP_SECONDS seconds (3 when unset) of what
// profilers hook, on ten long-lived managed threads (the main thread, a parked thread, eight workers) and
// short ones: allocation with forced compacting GCs of every generation (survivors replaced at random, so
// that objects slide onto the addresses of dead ones), exceptions caught by filters (catch ... when) through
// finally blocks, generic methods over reference and value types, methods called often enough to be
// recompiled at tier 1, methods with a hot loop called once (on-stack replacement where the runtime has it),
// P/Invoke into libc, async/await, threads created and ended, an assembly loaded late (late.dll, compiled
// beside the app, loaded with Assembly.LoadFrom after a third of the run), dynamic methods
// (DynamicMethod), deep recursion. Marks: "workload.begin", "workload.parked" (written by the parked thread
// from ParkThread > ParkOuter > ParkMiddle > ParkLeaf, where it then waits until "workload.unparked"),
// "workload.late",
// "workload.osr" (the hot loops ran), "workload.end" (payload: what each worker did). Exit code 0 when every
// check of the work held.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;

namespace ProfHarness.Workloads
{
    public sealed class Node
    {
        public long Value;
        public Node Next;
        public byte[] Pad;
    }

    public struct Pair<T>
    {
        public T First;
        public T Second;
    }

    public sealed class WorkloadException : Exception
    {
        public readonly int Code;
        public WorkloadException(int code) : base("workload " + code) { Code = code; }
    }

    public static class Standard
    {
        const int Workers = 8;
        static long deadlineMs;
        static readonly Stopwatch clock = Stopwatch.StartNew();
        static readonly long[] done = new long[Workers];
        static readonly string[] names = { "alloc", "exceptions", "generics", "recursion", "dynamic", "async",
                                           "pinvoke+threads", "tierup" };
        static volatile bool failed;
        static readonly ManualResetEventSlim release = new ManualResetEventSlim(false);
        static int parked;

        [DllImport("libc", EntryPoint = "getpid")]
        static extern int getpid();

        [DllImport("libc", EntryPoint = "strlen")]
        static extern IntPtr strlen(IntPtr s);

        static bool Running { get { return clock.ElapsedMilliseconds < deadlineMs; } }

        static void Fail(string what)
        {
            failed = true;
            Console.Error.WriteLine("standard: " + what);
        }

        // --- the parked thread: the ground truth of its manifest --------------------------------------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ParkLeaf()
        {
            // the parked thread marks itself: the proxy learns its ThreadID from the mark
            ProfHarness.Probe.Mark("workload.parked", new JsonObject().Add("thread", "parked")
                .Add("managedThreadId", Thread.CurrentThread.ManagedThreadId).ToString());
            Interlocked.Exchange(ref parked, 1);
            release.Wait();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ParkMiddle() { ParkLeaf(); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ParkOuter() { ParkMiddle(); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ParkThread() { ParkOuter(); }

        // --- allocation and compacting GCs --------------------------------------------------------------------
        static void Allocate()
        {
            var rng = new Random(7);
            var kept = new Node[4096];
            long checksum = 0, expected = 0;
            for (int i = 0; i < kept.Length; i++)
            {
                kept[i] = new Node { Value = i, Pad = new byte[16 + (i % 5) * 8] };
                expected += i;
            }
            long n = kept.Length;
            while (Running)
            {
                for (int k = 0; k < 2000; k++)
                {
                    int slot = rng.Next(kept.Length);
                    expected -= kept[slot].Value;
                    kept[slot] = new Node { Value = n, Pad = new byte[16 + (int)(n % 5) * 8] };
                    expected += n;
                    n++;
                    if ((k & 7) == 0)
                        GC.KeepAlive(new string('x', 32 + k % 64));
                }
                done[0]++;
                Thread.Sleep(5);
            }
            foreach (var node in kept)
                checksum += node.Value;
            if (checksum != expected)
                Fail("the survivors lost their values");
        }

        static int CollectAll()
        {
            int collections = 0;
            var list = new List<Node>();
            while (Running)
            {
                for (int g = 0; g <= GC.MaxGeneration && Running; g++)
                {
                    list.Clear();
                    for (int i = 0; i < 3000; i++)
                        list.Add(new Node { Value = i, Pad = (i & 1) == 0 ? new byte[24] : null });
                    for (int i = 0; i < list.Count; i += 2)
                        list[i] = null;  // holes between survivors
                    if (g == GC.MaxGeneration)
                        GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;
                    GC.Collect(g, GCCollectionMode.Forced, true, true);
                    collections++;
                    GC.KeepAlive(list);
                    Thread.Sleep(120);
                }
            }
            return collections;
        }

        // --- exceptions with filters and finally --------------------------------------------------------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Throw(int code)
        {
            throw new WorkloadException(code);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int ThrowThroughFinally(int code, ref int finallies)
        {
            try
            {
                Throw(code);
                return 0;
            }
            finally
            {
                finallies++;
            }
        }

        static bool Even(WorkloadException e) { return (e.Code & 1) == 0; }

        static void Exceptions()
        {
            int even = 0, odd = 0, finallies = 0, thrown = 0;
            while (Running)
            {
                for (int i = 0; i < 50; i++, thrown++)
                {
                    try
                    {
                        ThrowThroughFinally(i, ref finallies);
                    }
                    catch (WorkloadException e) when (Even(e))
                    {
                        even++;
                    }
                    catch (WorkloadException e) when (e.Code % 2 == 1)
                    {
                        odd++;
                    }
                }
                done[1]++;
                Thread.Sleep(10);
            }
            if (even + odd != thrown || finallies != thrown)
                Fail("exceptions: caught " + (even + odd) + ", finally " + finallies + " of " + thrown);
        }

        // --- generics -------------------------------------------------------------------------------------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static Pair<T> Swap<T>(Pair<T> p)
        {
            return new Pair<T> { First = p.Second, Second = p.First };
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Count<T>(List<T> items, Func<T, bool> keep)
        {
            int n = 0;
            foreach (var item in items)
                if (keep(item))
                    n++;
            return n;
        }

        static void Generics()
        {
            var ints = new List<int>();
            var strings = new List<string>();
            var longs = new Dictionary<long, Pair<string>>();
            for (int i = 0; i < 64; i++)
            {
                ints.Add(i);
                strings.Add("s" + i);
            }
            while (Running)
            {
                for (int i = 0; i < 200; i++)
                {
                    var a = Swap(new Pair<int> { First = i, Second = -i });
                    var b = Swap(new Pair<string> { First = "a", Second = "b" });
                    var c = Swap(new Pair<double> { First = i, Second = 0.5 });
                    var d = Swap(new Pair<object> { First = b.First, Second = null });
                    if (a.First != -i || b.First != "b" || c.Second != i || d.Second != (object)"b")
                        Fail("generics: a swap went wrong");
                    longs[i] = b;
                }
                if (Count(ints, x => x % 2 == 0) != 32 || Count(strings, s => s.Length == 2) != 10)
                    Fail("generics: a count went wrong");
                done[2]++;
                Thread.Sleep(5);
            }
        }

        // --- deep recursion -----------------------------------------------------------------------------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Recurse(int depth, long acc)
        {
            if (depth == 0)
            {
                Thread.Sleep(2);  // a while at the bottom: a sampler sees the deep stack
                return acc;
            }
            return Recurse(depth - 1, acc + depth) + 1;
        }

        static void Recursion()
        {
            const int depth = 600;
            while (Running)
            {
                long got = Recurse(depth, 0);
                if (got != (long)depth * (depth + 1) / 2 + depth)
                    Fail("recursion: " + got);
                done[3]++;
            }
        }

        // --- dynamic methods ----------------------------------------------------------------------------------
        static Func<long, long, long> MakeDynamic(int k)
        {
            var method = new DynamicMethod("Dynamic" + k, typeof(long), new[] { typeof(long), typeof(long) },
                                           typeof(Standard).Module);
            ILGenerator il = method.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            il.Emit(OpCodes.Ldc_I8, (long)k);
            il.Emit(OpCodes.Mul);
            il.Emit(OpCodes.Ldarg_1);
            il.Emit(OpCodes.Add);
            il.Emit(OpCodes.Ret);
            return (Func<long, long, long>)method.CreateDelegate(typeof(Func<long, long, long>));
        }

        static void Dynamic()
        {
            var made = new List<Func<long, long, long>>();
            int k = 0;
            while (Running)
            {
                if (made.Count < 16)
                    made.Add(MakeDynamic(++k));
                for (int i = 0; i < made.Count; i++)
                    if (made[i](10, i) != 10L * (i + 1) + i)
                        Fail("dynamic: method " + i);
                done[4]++;
                Thread.Sleep(20);
            }
        }

        // --- async/await ----------------------------------------------------------------------------------------
        static async Task<int> Step(int i)
        {
            await Task.Yield();
            await Task.Delay(1);
            return i * 2;
        }

        static async Task<int> Chain(int n)
        {
            int sum = 0;
            for (int i = 0; i < n; i++)
                sum += await Step(i);
            return sum;
        }

        static void Async()
        {
            while (Running)
            {
                if (Chain(10).Result != 90)
                    Fail("async: wrong sum");
                done[5]++;
            }
        }

        // --- P/Invoke, threads created and ended ------------------------------------------------------------
        static void PInvokeAndThreads()
        {
            int pid = getpid();
            IntPtr text = Marshal.StringToHGlobalAnsi("profharness");
            try
            {
                while (Running)
                {
                    for (int i = 0; i < 100; i++)
                        if (getpid() != pid || strlen(text) != (IntPtr)11)
                            Fail("pinvoke: libc answered otherwise");
                    int ran = 0;
                    var shortLived = new Thread(() => { Interlocked.Increment(ref ran); });
                    shortLived.Start();
                    shortLived.Join();
                    if (ran != 1)
                        Fail("threads: the short thread did not run");
                    done[6]++;
                    Thread.Sleep(30);
                }
            }
            finally
            {
                Marshal.FreeHGlobal(text);
            }
        }

        // --- tier-up: small methods called often (call counting, then a tier-1 recompilation) ----------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Hot1(long x) { return x * 31 + 7; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Hot2(long x) { return Hot1(x) ^ (x >> 3); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Hot3(long x) { return Hot2(x) + Hot1(x + 1); }

        static void TierUp()
        {
            long acc = 0;
            while (Running)
            {
                for (int i = 0; i < 500; i++)
                    acc += Hot3(i);
                done[7]++;
                Thread.Sleep(3);
            }
            GC.KeepAlive(acc);
        }

        // --- on-stack replacement: a hot loop in a method called once -------------------------------------------
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long LoopOnce(int n)
        {
            long acc = 0;
            for (int i = 0; i < n; i++)
                acc += (i ^ (acc >> 5)) & 0xff;
            return acc;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static double LoopOnceFloating(int n)
        {
            double acc = 0;
            for (int i = 1; i < n; i++)
                acc += 1.0 / i;
            return acc;
        }

        // --- the late assembly ------------------------------------------------------------------------------------
        static bool LoadLate()
        {
            string path = Path.Combine(AppContext.BaseDirectory, "late.dll");
            Assembly late = Assembly.LoadFrom(path);
            Type plugin = late.GetType("ProfHarness.Late.Plugin", true);
            object got = plugin.GetMethod("Run").Invoke(null, new object[] { 1000 });
            return (long)got == 1000L * 999 / 2;
        }

        static void Worker(object index)
        {
            int k = (int)index;
            try
            {
                switch (k)
                {
                    case 0: Allocate(); break;
                    case 1: Exceptions(); break;
                    case 2: Generics(); break;
                    case 3: Recursion(); break;
                    case 4: Dynamic(); break;
                    case 5: Async(); break;
                    case 6: PInvokeAndThreads(); break;
                    default: TierUp(); break;
                }
            }
            catch (Exception e)
            {
                Fail(names[k] + ": " + e);
            }
        }

        public static int Main()
        {
            double seconds;
            if (!double.TryParse(Environment.GetEnvironmentVariable("PROFHARNESS_APP_SECONDS"), NumberStyles.Float,
                                 CultureInfo.InvariantCulture, out seconds) || seconds <= 0)
                seconds = 3;
            deadlineMs = (long)(seconds * 1000);
            ProfHarness.Probe.Mark("workload.begin", new JsonObject().Add("name", "standard")
                                                       .Add("milliseconds", deadlineMs).ToString());
            var parkedThread = new Thread(ParkThread);
            parkedThread.Name = "parked";
            parkedThread.Start();
            var workers = new List<Thread>();
            for (int k = 0; k < Workers; k++)
            {
                var t = new Thread(Worker);
                t.Name = names[k];
                t.Start(k);
                workers.Add(t);
            }
            if (!ProfHarness.Threads.AwaitReady(ref parked, 5000))
                Fail("the parked thread did not park");
            long osr = LoopOnce(20000000);
            double harmonic = LoopOnceFloating(5000000);
            ProfHarness.Probe.Mark("workload.osr", new JsonObject().Add("loops", 2).ToString());
            if (osr < 0 || harmonic < 15)
                Fail("the hot loops computed nonsense");
            int collections = 0;
            bool lateLoaded = false;
            var gcThread = new Thread(() => { collections = CollectAll(); });
            gcThread.Name = "collector";
            gcThread.Start();
            while (Running)
            {
                if (!lateLoaded && clock.ElapsedMilliseconds >= deadlineMs / 3)
                {
                    lateLoaded = true;
                    if (LoadLate())
                        ProfHarness.Probe.Mark("workload.late", "late.dll");
                    else
                        Fail("late.dll computed nonsense");
                }
                Thread.Sleep(20);
            }
            gcThread.Join();
            foreach (var t in workers)
                t.Join();
            ProfHarness.Probe.Mark("workload.unparked");  // the parked thread leaves its frames after this
            release.Set();
            parkedThread.Join();
            var payload = new JsonObject();
            for (int k = 0; k < Workers; k++)
                payload.Add(names[k], done[k]);
            payload.Add("collections", collections).Add("late", lateLoaded).Add("ok", !failed);
            ProfHarness.Probe.Mark("workload.end", payload.ToString());
            foreach (var count in done)
                if (count == 0)
                    failed = true;
            return failed || !lateLoaded ? 1 : 0;
        }
    }
}
