// capture-sampling: a thread the probe samples (SIGPROF, capture_sample) while it cycles through places:
// pure managed code; P/Invoked native code (the probe's profharness_capture_spin); and runtime helper code:
// small allocations (allocation helpers), reference stores (the write barrier), a contended Monitor, JIT of
// new methods (a fresh DynamicMethod every 8 rounds), interface dispatch through many implementations
// (virtual stub dispatch), and GC.Collect(0) on this very thread (the collector runs here): the methods of
// _common/Places.cs but native code. All of it below a 70-frame-deep managed recursion.
//
// The sampled thread ("sampled") runs Run -> Deep x70 (_common/Recursion.cs) -> Work. Work reports, in the
// mark "capture.stack" (payload {"name": "sampled", "stack": [...], "phases": [...]}), its own stack leaf
// first (reflection: the managed frames on the stack whatever place a sample lands in) and the phases it
// cycles through, in order of their number: each with the place it stands for and the callees that may sit
// above Work there (the scenario's methods: Enter and the Places method of the phase, and namespace prefixes
// for the CoreLib code those call, Enter's Volatile.Write among them). Before each phase it stores the
// phase's number in a pinned cell whose address it gave the probe (profharness_capture_phase_cell); the
// probe's signal handler reads the cell at the instant, so each capture says which phase the thread was in
// by the scenario's own account. Then it marks "capture.register" (the plan registers the thread there),
// says it is ready and loops over the phases until Main sets stop.
// Main waits (bounded) for ready, marks "capture.sample" (the plan's sampling runs there, on a profiler
// thread, and returns when it is done), stops the threads, joins them (bounded) and marks "done".
// Exit code 0 when the sampled thread got ready and ended; 1 otherwise.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Scenarios
{
    public static class CaptureSampling
    {
        const string TargetName = "sampled";
        const int Depth = 70;
        const string Self = "ProfHarness.Scenarios.CaptureSampling::";
        const string Place = "ProfHarness.Places::";
        static int stop;
        static int ready;
        static long rounds;
        static readonly Places places = new Places();
        // The phase cell (pinned: its address does not move) the probe's handler reads at each sample.
        static readonly int[] phaseCell = new int[1];
        static GCHandle phasePin;

        // Phase numbers: the index into Phases.
        const int PhaseManaged = 0, PhaseNative = 1, PhaseAlloc = 2, PhaseWriteBarrier = 3, PhaseMonitor = 4,
            PhaseJit = 5, PhaseDispatch = 6, PhaseGc = 7;

        // {place, callees above Work (the scenario's methods), prefix of the CoreLib code they call ("" for none)}
        static readonly string[][] Phases = {
            new[] { "managed", Place + "BusyManaged", "" },
            new[] { "native", "", "" },
            new[] { "helper:alloc", Place + "Allocate", "" },
            // object[] stores check the element type first (8.0: CoreLib's CastHelpers.StelemRef)
            new[] { "helper:write-barrier", Place + "StoreReferences",
                "System.Runtime.CompilerServices.CastHelpers::" },
            new[] { "helper:monitor", Place + "Contend", "System.Threading." },
            new[] { "helper:jit", Place + "JitNewMethod", "System." },
            new[] { "helper:dispatch", Place + "Dispatch,ProfHarness.Square::Area,ProfHarness.Rect::Area,"
                + "ProfHarness.Tri::Area,ProfHarness.Disc::Area,ProfHarness.Hex::Area", "" },
            new[] { "helper:gc", Place + "Collect", "System.GC::" },
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
            var holder = Threads.StartBackground(places.Hold, null);
            var sampled = Threads.StartBackground(Run, TargetName);
            bool wasReady = Threads.AwaitReady(ref ready, 10000);
            if (wasReady)
            {
                Thread.Sleep(20);  // let the sampled thread get into its loop
                Probe.Mark("capture.sample", new JsonObject().Add("target", TargetName).ToString());
            }
            Volatile.Write(ref stop, 1);
            places.Release();
            bool ended = sampled.Join(10000);
            bool holderEnded = holder.Join(10000);
            Probe.Mark("done", new JsonObject().Add("ready", wasReady).Add("ended", ended)
                .Add("holderEnded", holderEnded).Add("rounds", Volatile.Read(ref rounds)).ToString());
            return wasReady && ended ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Recursion.Deep(Depth, Work); }

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
        static long Work()
        {
            profharness_capture_phase_cell(phasePin.AddrOfPinnedObject());
            Probe.Mark("capture.stack", new JsonObject().Add("name", TargetName)
                .Raw("stack", StackReport.CallerStackJson()).Raw("phases", PhasesJson()).ToString());
            Probe.Mark("capture.register", new JsonObject().Add("name", TargetName).ToString());
            Volatile.Write(ref ready, 1);
            Places p = places;
            long n = 0, total = 0;
            while (Volatile.Read(ref stop) == 0)
            {
                Enter(PhaseManaged);
                total += p.BusyManaged(20000);
                Enter(PhaseNative);
                total += profharness_capture_spin(20000);
                Enter(PhaseAlloc);
                total += p.Allocate(200);
                Enter(PhaseWriteBarrier);
                total += p.StoreReferences(4000);
                Enter(PhaseMonitor);
                total += p.Contend(4);
                if ((n & 7) == 0)
                {
                    Enter(PhaseJit);
                    total += p.JitNewMethod(n);
                }
                Enter(PhaseDispatch);
                total += p.Dispatch(4000);
                if ((n & 31) == 0)
                {
                    Enter(PhaseGc);
                    total += p.Collect();
                }
                n++;
            }
            Enter(PhaseManaged);
            Volatile.Write(ref rounds, n);
            return total & 1;
        }
    }
}
