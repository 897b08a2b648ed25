// capture-sampling: a thread the probe samples (SIGPROF, capture_sample) while it cycles through places:
// pure managed code; P/Invoked native code (the probe's profharness_capture_spin); and runtime helper code:
// small allocations (allocation helpers), reference stores (the write barrier), a contended Monitor, JIT of
// new methods (a fresh DynamicMethod each round), interface dispatch through many implementations (virtual
// stub dispatch), and GC.Collect(0) on this very thread (the collector runs here). All of it below a
// 70-frame-deep managed recursion.
//
// The sampled thread ("sampled") runs Run -> Deep x70 -> Work. Work reports, in the mark "capture.stack"
// (payload {"name": "sampled", "stack": [...], "phases": [...]}), its own stack leaf first (reflection: the
// managed frames on the stack whatever place a sample lands in) and the phases it cycles through, in
// order of their number: each with the place it stands for and the callees that may sit above Work there
// (its own methods, Enter included, and namespace prefixes for the CoreLib code those call, Enter's
// Volatile.Write among them). Before each phase it stores the
// phase's number in a pinned cell whose address it gave the probe (profharness_capture_phase_cell); the
// probe's signal handler reads the cell at the instant, so each capture says which phase the thread was in
// by the scenario's own account. Then it marks "capture.register" (the plan registers the thread there),
// says it is ready and loops over the phases until Main sets stop.
// Main waits (bounded) for ready, marks "capture.sample" (the plan's sampling runs there, on a profiler
// thread, and returns when it is done), stops the threads, joins them (bounded) and marks "done".
// Exit code 0 when the sampled thread got ready and ended; 1 otherwise.
using System;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public interface IShape { long Area(long x); }
    public sealed class Square : IShape { public long Area(long x) { return x * x; } }
    public sealed class Rect : IShape { public long Area(long x) { return x * (x + 1); } }
    public sealed class Tri : IShape { public long Area(long x) { return x * x / 2; } }
    public sealed class Disc : IShape { public long Area(long x) { return 3 * x * x; } }
    public sealed class Hex : IShape { public long Area(long x) { return 2 * x * x + 1; } }

    public static class CaptureSampling
    {
        const string TargetName = "sampled";
        const int Depth = 70;
        const string Self = "ProfHarness.Scenarios.CaptureSampling::";
        static int stop;
        static int ready;
        static long rounds;
        static object keep;
        static readonly object gate = new object();
        static readonly object[] refs = new object[1024];
        static readonly IShape[] shapes = { new Square(), new Rect(), new Tri(), new Disc(), new Hex() };
        // The phase cell (pinned: its address does not move) the probe's handler reads at each sample.
        static readonly int[] phaseCell = new int[1];
        static GCHandle phasePin;

        // Phase numbers: the index into Phases.
        const int PhaseManaged = 0, PhaseNative = 1, PhaseAlloc = 2, PhaseWriteBarrier = 3, PhaseMonitor = 4,
            PhaseJit = 5, PhaseDispatch = 6, PhaseGc = 7;

        // {place, callees above Work (own methods), prefix of the CoreLib code they call ("" for none)}
        static readonly string[][] Phases = {
            new[] { "managed", Self + "BusyManaged", "" },
            new[] { "native", "", "" },
            new[] { "helper:alloc", Self + "Allocate", "" },
            // object[] stores check the element type first (8.0: CoreLib's CastHelpers.StelemRef)
            new[] { "helper:write-barrier", Self + "StoreReferences",
                "System.Runtime.CompilerServices.CastHelpers::" },
            new[] { "helper:monitor", Self + "Contend", "System.Threading." },
            new[] { "helper:jit", Self + "JitNewMethod", "System." },
            new[] { "helper:dispatch", Self + "Dispatch,ProfHarness.Scenarios.Square::Area,"
                + "ProfHarness.Scenarios.Rect::Area,ProfHarness.Scenarios.Tri::Area,"
                + "ProfHarness.Scenarios.Disc::Area,ProfHarness.Scenarios.Hex::Area", "" },
            new[] { "helper:gc", Self + "Collect", "System.GC::" },
        };

        [DllImport("profharness_probe")]
        static extern long profharness_capture_spin(long iterations);

        [DllImport("profharness_probe")]
        static extern void profharness_capture_phase_cell(IntPtr cell);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Probe.Mark("begin");
            phasePin = GCHandle.Alloc(phaseCell, GCHandleType.Pinned);
            var holder = Threads.StartBackground(Hold, null);
            var sampled = Threads.StartBackground(Run, TargetName);
            bool wasReady = Threads.AwaitReady(ref ready, 10000);
            if (wasReady)
            {
                Thread.Sleep(20);  // let the sampled thread get into its loop
                Probe.Mark("capture.sample", new JsonObject().Add("target", TargetName).ToString());
            }
            Volatile.Write(ref stop, 1);
            bool ended = sampled.Join(10000);
            bool holderEnded = holder.Join(10000);
            Probe.Mark("done", new JsonObject().Add("ready", wasReady).Add("ended", ended)
                .Add("holderEnded", holderEnded).Add("rounds", Volatile.Read(ref rounds)).ToString());
            return wasReady && ended ? 0 : 1;
        }

        // The other side of the contended Monitor: holds the lock for a while, again and again.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Hold()
        {
            while (Volatile.Read(ref stop) == 0)
            {
                lock (gate)
                {
                    Thread.SpinWait(100);
                }
                Thread.SpinWait(100);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Deep(Depth); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Deep(int n)
        {
            if (n == 0)
                return Work();
            return Deep(n - 1) + 1;
        }

        static string PhasesJson()
        {
            var list = new JsonArray();
            for (int i = 0; i < Phases.Length; i++)
            {
                var callees = new JsonArray();
                callees.Raw(Json.Str(Self + "Enter"));  // Work calls it between the phases
                foreach (string c in Phases[i][1].Split(','))
                    if (c.Length > 0)
                        callees.Raw(Json.Str(c));
                var prefixes = new JsonArray();
                if (Phases[i][2].Length > 0)
                    prefixes.Raw(Json.Str(Phases[i][2]));
                // Enter's own callee: Tier-0 code (3.1 compiles Enter so at first) calls Volatile.Write
                prefixes.Raw(Json.Str(EnterCallees));
                list.Raw(new JsonObject().Add("phase", i).Add("place", Phases[i][0])
                    .Raw("callees", callees.ToString()).Raw("calleePrefixes", prefixes.ToString()).ToString());
            }
            return list.ToString();
        }

        // The CoreLib code Enter calls (Volatile.Write, when Enter is Tier-0 code that does not inline it).
        const string EnterCallees = "System.Threading.Volatile::";

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Enter(int phase) { Volatile.Write(ref phaseCell[0], phase); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Work()
        {
            profharness_capture_phase_cell(phasePin.AddrOfPinnedObject());
            Probe.Mark("capture.stack", new JsonObject().Add("name", TargetName)
                .Raw("stack", StackReport.CallerStackJson()).Raw("phases", PhasesJson()).ToString());
            Probe.Mark("capture.register", new JsonObject().Add("name", TargetName).ToString());
            Volatile.Write(ref ready, 1);
            long n = 0, total = 0;
            while (Volatile.Read(ref stop) == 0)
            {
                Enter(PhaseManaged);
                total += BusyManaged(20000);
                Enter(PhaseNative);
                total += profharness_capture_spin(20000);
                Enter(PhaseAlloc);
                total += Allocate(200);
                Enter(PhaseWriteBarrier);
                total += StoreReferences(4000);
                Enter(PhaseMonitor);
                total += Contend(4);
                if ((n & 7) == 0)
                {
                    Enter(PhaseJit);
                    total += JitNewMethod(n);
                }
                Enter(PhaseDispatch);
                total += Dispatch(4000);
                if ((n & 31) == 0)
                {
                    Enter(PhaseGc);
                    total += Collect();
                }
                n++;
            }
            Enter(PhaseManaged);
            Volatile.Write(ref rounds, n);
            return (int)(total & 1);
        }

        // Pure managed code: no calls, no allocation.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long BusyManaged(int iterations)
        {
            long x = 0;
            for (int i = 0; i < iterations; i++)
                x += i ^ (x >> 3);
            return x;
        }

        // Small allocations: the runtime's allocation helpers (and now and then a GC).
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Allocate(int count)
        {
            long sum = 0;
            for (int i = 0; i < count; i++)
            {
                var a = new byte[32 + (i & 63)];
                sum += a.Length;
                keep = a;
            }
            return sum;
        }

        // Reference stores into an array of objects: each goes through the write barrier helper.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long StoreReferences(int count)
        {
            object[] r = refs;
            object[] s = shapes;
            for (int i = 0; i < count; i++)
                r[i & 1023] = s[i % 5];
            return r.Length;
        }

        // A Monitor the holder thread keeps taking: entering it waits (spin, then the runtime's wait).
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Contend(int times)
        {
            long got = 0;
            for (int i = 0; i < times; i++)
            {
                lock (gate)
                {
                    got++;
                }
            }
            return got;
        }

        // A new method each round: DynamicMethod + CreateDelegate + the first call JIT-compile it.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long JitNewMethod(long seed)
        {
            var dm = new DynamicMethod("Generated" + seed, typeof(long), new[] { typeof(long) },
                typeof(CaptureSampling).Module);
            ILGenerator il = dm.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            for (int i = 0; i < 64; i++)
            {
                il.Emit(OpCodes.Ldc_I8, seed + i);
                il.Emit((i & 1) == 0 ? OpCodes.Add : OpCodes.Xor);
            }
            il.Emit(OpCodes.Ret);
            var f = (Func<long, long>)dm.CreateDelegate(typeof(Func<long, long>));
            return f(seed);
        }

        // Interface calls over five implementations in turn: the runtime's dispatch stubs resolve them.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Dispatch(int count)
        {
            long sum = 0;
            IShape[] s = shapes;
            for (int i = 0; i < count; i++)
                sum += s[i % 5].Area(i);
            return sum;
        }

        // A gen0 collection on this thread: the collector runs here, in the runtime.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Collect()
        {
            GC.Collect(0);
            return GC.CollectionCount(0);
        }
    }
}
