"""Issue 19's acceptance on profilers nobody here wrote against the rules: the fixtures of
``profilers/docs/`` were written from Microsoft's profiling documentation alone (their header comments quote
what they follow), and run on apps of ``apps/`` on both bundled runtimes.

Each false-positive class the issue names has its fixture here and must now be clean (notes allowed where
the issue says "a note"), each missed class is found, and every finding names the profiler's own source
line. What is expected comes from the fixture's source (the line of its faulty call, found by text) and the
app's ground truth (its exit code, how long it runs), never from what the validator printed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.core import runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator import api as validator
from conformance.validator.report import render_text
from conformance.validator.result import Group, ValidationResult
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_profiler, same_source

DOCS = PROFILERS / "docs"
APPS = Path(__file__).resolve().parent / "apps"


def source_line(fixture: str, text: str) -> int:
    """The 1-based line of ``profilers/docs/<fixture>.cpp`` holding ``text`` (exactly one)."""
    lines = (DOCS / f"{fixture}.cpp").read_text().splitlines()
    (found,) = [n for n, line in enumerate(lines, 1) if text in line]
    return found


def compile_app(name: str) -> Path:
    """The app ``apps/NAME/app.cs``, compiled for the reference runtime."""
    folder = APPS / name
    scenario = scenarios.Scenario(
        name=name, folder=folder, sources=[folder / "app.cs"], plan={"version": 1},
        description=f"docfixtures app {name}",
    )  # fmt: skip
    return scenarios.compile_scenario(scenario, runner.reference_runtime())


@pytest.fixture(scope="module")
def apps() -> Callable[[str], Path]:
    built: dict[str, Path] = {}

    def app(name: str) -> Path:
        if name not in built:
            built[name] = compile_app(name)
        return built[name]

    return app


def validate(fixture: str, app: Path | None, runtimes: list[Runtime], **options: Any) -> ValidationResult:
    """``fixture`` validated on ``app`` (None: the workload ``options`` name) on every runtime."""
    so = build_profiler(DOCS / f"{fixture}.cpp", "validator-docs", [DOCS])
    result = validator.validate(so, FIXTURE_CLSID, app=app, **options)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    return result


def versions(runtimes: list[Runtime]) -> list[str]:
    return sorted(rt.version for rt in runtimes)


def notes(result: ValidationResult) -> list[Group]:
    return [g for g in result.groups if g.note]


@pytest.mark.live
@pytest.mark.parametrize(
    ("fixture", "app", "noted"),
    [
        # "QueryInterface inside a GC callback": no document forbids it -> a note at most
        ("qi_in_gc", "basic", {"VAL-QI-IN-GC"}),
        # "NULL tailcall hook": 4,131 tail calls on 8.0 without a fault -> a note at most
        ("null_tailcall", "basic", {"VAL-NULL-TAILCALL"}),
        # WithInfo hooks as ordinary C++ functions (fprintf, GetFunctionEnter3Info): checked as slow hooks
        ("withinfo_hooks", "basic", set()),
        ("sampler_signal", "basic", set()),
        ("minimal", "basic", set()),
    ],
)
def test_correct_document_written_profilers_have_no_findings(
    fixture: str, app: str, noted: set[str], apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    result = validate(fixture, apps(app), runtimes)
    text = render_text(result, verbose=True)
    assert all(r.outcome == "ok" for r in result.runs), text
    assert result.findings == [], text
    assert {g.clause for g in notes(result)} <= noted, text
    for group in notes(result):  # a note still says where: the profiler's own line
        assert group.site is not None and same_source(group.site.file, DOCS / f"{fixture}.cpp"), group


@pytest.mark.live
@pytest.mark.parametrize(
    ("fixture", "app", "summary"),
    [
        # exceptions by type, the catching method named in ExceptionCatcherEnter (basic throws and catches)
        ("exception_tracker", "basic", "[exception_tracker]   caught "),
        # per-GC generation bounds at start and finish, ObjectsAllocatedByClass named after the GC
        ("gc_census", "heapchurn", "[gc_census]   gc#"),
        # every JIT-compiled method named in JITCompilationFinished
        ("method_namer", "basic", "[method_namer]    1. "),
        # code ranges and IL maps (GetCodeInfo2 / GetILToNativeMapping two-pass, every tier's code), its own
        # IP lookups agreeing with GetFunctionFromIP
        ("jit_code_map", "basic", "jit_code_map: methods="),
        # thread lifetimes, OS thread ids, runtime suspensions timed
        ("thread_census", "heapchurn", "thread_census: created="),
        # modules, assemblies, app domains and classes named (every name and array two-pass), each asked
        # about in its ...Finished callback
        ("module_inventory", "basic", "module_inventory: modules="),
        # strings and arrays inspected in ObjectAllocated (GetStringLayout2, GetArrayObjectInfo), bytes moved
        ("object_inspector", "heapchurn", "object_inspector: objects="),
        # ObjectReferences and RootReferences2 kept as they come, classes named in GarbageCollectionFinished
        ("heap_graph", "heapchurn", "heap_graph:"),
        # exception stacks: a synchronous walk in ExceptionThrown, every frame named inside its callback
        ("exception_stacks", "basic", "exception_stacks: exceptions="),
        # survivors of every GC copied in MovedReferences2/SurvivingReferences2, sampled in
        # GarbageCollectionFinished (GetObjectSize2, IsFrozenObject, EnumerateObjectReferences), then named
        ("survivor_census", "heapchurn", "survivor_census: gcs="),
        # ELT v3 WithInfo hooks in assembly saving every register, arguments and return values read with
        # GetFunction*3Info, GetFunctionInfo2 given the frame info those hand out, inside the same hook
        ("arg_logger", "basic", "arg_logger: calls="),
        # static fields read at the moments the documents allow, managed/unmanaged transitions counted
        ("statics_and_transitions", "basic", "statics_and_transitions: classes="),
        # runtime pauses timed by reason, suspended threads walked in RuntimeSuspendFinished and by its own
        # SuspendRuntime sampler
        ("pause_profiler", "heapchurn", "pause_profiler: suspensions="),
        # method coverage by IL rewriting in JITCompilationStarted (each methodDef once), an instrumented
        # code map, GetILToNativeMapping in JITCompilationFinished
        ("coverage_probe", "basic", "coverage_probe: methods="),
        # each exception followed through its search and unwind passes, its type and Message read
        ("exception_flow", "basic", "exception_flow: exceptions=9"),
        # handles, finalization, roots by kind, classes surviving several GCs (IDs carried through moves)
        ("leak_detector", "heapchurn", "leak_detector: gcs="),
        # the runtime's identity, the event mask with its high flags, loads named in their ...Finished
        # callbacks; on 8.0 an EventPipe provider of its own, a session, one event written per assembly
        ("startup_telemetry", "basic", "startup_telemetry: modules="),
        # every 10 ms from its own thread: SuspendRuntime, every mapped thread walked, ResumeRuntime
        ("wall_clock_sampler", "long", "wall_clock_sampler: samples="),
        # a static call graph of the app's module from metadata and IL bodies, the JIT's inlining decisions
        ("call_graph_builder", "basic", "call_graph_builder: methods="),
        # dynamic instrumentation: RequestReJIT from its own thread, a counter prologue through the function
        # control in GetReJITParameters, GetReJITIDs, RequestRevert with a status array
        ("rejit_probe_agent", "basic", "rejit_probe_agent: requested="),
        # sampled objects' contents (arrays, strings, boxes, fields) read in GarbageCollectionStarted, carried
        # through every GC's moves and read again in GarbageCollectionFinished
        ("object_content_sampler", "heapchurn", "object_content_sampler: samples="),
        # features switched on and off from its own thread (GetEventMask2 then SetEventMask2), the thread
        # stopped and joined at the start of Shutdown, which then only releases
        pytest.param("eventmask", "basic", "[eventmask] shutdown: windows=", marks=pytest.mark.long),
        # inventories from its own thread with EnumModules, EnumJITedFunctions2 and EnumThreads (Next, Skip,
        # Reset, Clone, GetCount, Release); its thread joined in Shutdown
        pytest.param("late_inventory", "basic", "[late-inventory] summary (", marks=pytest.mark.long),
        # a SuspendRuntime sampler whose thread calls InitializeCurrentThread once, before its first
        # suspension; IPs mapped to IL offsets with GetCodeInfo4 and GetILToNativeMapping3
        ("ilmap", "basic", "[ilmap] summary: jit="),
        # FinalizeableObjectQueued and ObjectAllocated by class, classes described in ClassLoadFinished
        # (GetClassLayout, GetStringLayout2, GetBoxClassLayout, two-pass): 195k records a run, nightly
        pytest.param("finalization_monitor", "basic", "[finmon] summary: runtime=", marks=pytest.mark.long),
        # generations of the objects ObjectReferences hands out, judged at GarbageCollectionFinished; on 8.0
        # the non-GC heap (Info14 EnumerateNonGCObjects, GetNonGCHeapBounds): nightly
        pytest.param("nongcheap", "basic", "[nongcheap] shutdown: runtime", marks=pytest.mark.long),
        # every ICorProfilerInfo version probed through Initialize's IUnknown (each released), then the newest
        # kept; GetRuntimeInformation, Info11's environment, startup-only and high flags in one SetEventMask2
        ("startupconfig", "basic", "[startupconfig] summary: interfaces="),
        # HandleCreated/HandleDestroyed, handle targets read after each GC, Info13 handles of its own
        pytest.param("gchandle_tracker", "basic", "[gchandles] summary (CoreCLR", marks=pytest.mark.long),
        # thread lifetimes, names, OS ids and suspensions (RuntimeThreadSuspended/Resumed, by reason)
        pytest.param("threadtimeline", "basic", "[threadtimeline] summary: threads=", marks=pytest.mark.long),
        # JIT, ReadyToRun and dynamic-method code counted; dynamic methods named with GetDynamicFunctionInfo
        pytest.param("dynamicmethods", "basic", "[dynmethods] summary runtime=", marks=pytest.mark.long),
        # first-chance exceptions: type, Message read through GetClassLayout/GetStringLayout2, the throwing
        # stack walked in ExceptionThrown and named inside the walk, where it was caught
        pytest.param("errortracker", "basic", "[errortracker] summary: thrown=9", marks=pytest.mark.long),
    ],
)
def test_correct_profilers_written_without_the_rules_are_clean_and_did_their_work(
    fixture: str, app: str, summary: str, apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """Written from the documents by a helper that saw none of the validator's rules (profilers/docs/
    README.md): clean on both runtimes, and not for want of running: each printed its Shutdown summary with
    what it counted (a line only a profiler whose callbacks ran and whose names resolved prints). The `long`
    app runs 2 s."""
    result = validate(fixture, apps(app), runtimes, env={"PROFHARNESS_APP_SECONDS": "2"})
    text = render_text(result, verbose=True)
    assert all(r.outcome == "ok" for r in result.runs), text
    assert result.findings == [] and notes(result) == [], text
    for run in result.runs:
        stderr = (Path(run.trace).parent / "stderr.txt").read_text(errors="replace")
        assert summary in stderr, (run.runtime, stderr[-2000:])


@pytest.mark.live
@pytest.mark.parametrize(
    ("fixture", "app", "clause", "line"),
    [
        # its MovedReferences2 handling keeps a moved sample's old ObjectID; found where that ID is used
        ("survivor_sampler", "heapchurn", "MR2-17", "HRESULT hr = info->GetObjectGeneration(id, &range);"),
        # a baseline ForceGC inside ModuleLoadFinished
        ("heap_snapshots", "long", "FGC-01", "info->ForceGC();  // BUG:"),
        # COR_PRF_ENABLE_OBJECT_ALLOCATED added by SetEventMask a second after Initialize
        ("late_alloc_sampling", "long", "INI-01", "// BUG: immutable flag set after Initialize"),
        # a walk of its own thread inside ObjectAllocated seeded with the profiler's getcontext()
        ("allocation_site_sampler", "heapchurn", "DSS-19", "info_->DoStackSnapshot(0, OnFrame"),
        # GetFunctionInfo2 in the leave hook given the frame info FunctionEnter2 received
        ("method_timing_tracer", "heapchurn", "FE2-05", "g_info->GetFunctionInfo2(f.fn, f.enterFrame"),
        # GetClassFromObject of each moved block's old address inside MovedReferences2
        ("gc_compaction_stats", "heapchurn", "MR2-09", "info_->GetClassFromObject(oldStart[i], &cls);"),
        # GetClassFromObject of a pinned root inside RootReferences2
        ("handle_root_tracker", "heapchurn", "RRF-01", "HRESULT hr = info_->GetClassFromObject(ref, &cls);"),
        # GetClassIDInfo of the class ClassLoadStarted hands out, inside it (to time the app's own classes)
        ("class_layout_inspector", "basic", "LDS-04",
         "HRESULT hr = info_->GetClassIDInfo(classId, &moduleId, &typeDef);"),
        # GetILToNativeMapping3's size query given a NULL map and a non-zero cMap
        ("jit_tiering_monitor", "basic", "BUF-04",
         "HRESULT hr = info_->GetILToNativeMapping3(start, kMapSizeHint, &needed, nullptr);"),
        # the same exception stacks, each frame named after DoStackSnapshot returned with the frameInfo its
        # callback was given
        ("exception_stacks_deferred", "basic", "SSC-01",
         "f.hr = st.info->GetFunctionInfo2(f.func, f.frameInfo, &f.cls, &f.mod, &f.tok, 0, &n, nullptr);"),
        # large objects' lifetimes (Info13 weak handles); survivors split by generation with
        # GetObjectGeneration inside MovedReferences2 (and SurvivingReferences2, GCS-01, the same line); 845k
        # records a run: nightly (gc_move_class_histogram holds MR2-09 in every run)
        pytest.param("loh_retention_monitor", "heapchurn", "MR2-09",
                     "HRESULT hr = info_->GetObjectGeneration(start[i], &range);", marks=pytest.mark.long),
        # slow calls' generic instantiations resolved in the leave hook, with the frame info
        # GetFunctionEnter3Info handed out in the enter hook (found where GetFunctionInfo2 is called with it)
        ("slow_call_tracer", "basic", "FE3-01",
         "if (failed(g_info->GetFunctionInfo2(r->fid, frame, &cls, &mod, &tok, 0, &n, nullptr)))"),
        # a thread's application domain asked inside ThreadDestroyed, of the thread destroyed
        ("thread_domain_census", "basic", "THD-01", "HRESULT hr = info_->GetThreadAppDomain(tid, &ad);"),
        # JIT time charged to the calling frame: the walk callback keeps the frameInfo, GetFunctionInfo2 after
        pytest.param("jit_cost_attributor", "basic", "SSC-01",
                     "HRESULT fi = info_->GetFunctionInfo2(tf.func, tf.frameInfo, &cls, &caller.first",
                     marks=pytest.mark.long),
        # coverage per generic instantiation: each FunctionID's compilation rewrites the shared methodDef's IL
        ("instantiation_coverage", "basic", "REJIT-01",
         "HRESULT hr = info_->SetILFunctionBody(mod, tok, raw->body);"),
        # the catch clause's native address asked in ExceptionSearchCatcherFound, before the clause is entered
        ("catch_site_reporter", "basic", "EXC-01",
         "HRESULT hr = info_->GetNotifiedExceptionClauseInfo(&clause);"),
        # the class a GC handle holds asked inside RootReferences2
        pytest.param("gc_root_attribution", "heapchurn", "RRF-01",
                     "HRESULT hr = info_->GetClassFromObject(refs[i], &held);", marks=pytest.mark.long),
        # framework or application code decided early: GetAssemblyInfo inside AssemblyLoadStarted
        ("assembly_inventory", "basic", "LDS-02", "HRESULT hr = info_->GetAssemblyInfo(id, 0, &cch, nullptr"),
        # a SIGPROF sampler keyed by OS thread: GetThreadInfo of the ThreadID ThreadDestroyed hands out
        pytest.param("cpu_hotspot_sampler", "basic", "THD-01",
                     "HRESULT hr = info_->GetThreadInfo(threadId, &os);", marks=pytest.mark.long),
        # a call counter's first wave of ReJIT requested inside ModuleLoadFinished, on the loader's thread
        ("modload_rejit_call_counter", "basic", "REJIT-09",
         "HRESULT hr = info_->RequestReJIT(static_cast<ULONG>(found.size()), mods.data(), found.data());"),
        # moved bytes charged to the class of each range's first object, asked inside MovedReferences2
        pytest.param("gc_move_class_histogram", "heapchurn", "MR2-09",
                     "if (failed(info_->GetClassFromObject(olds[i], &cls))) cls = 0;",
                     marks=pytest.mark.long),
        # a final census of modules, JIT-compiled functions and threads named inside Shutdown
        ("census_in_shutdown", "basic", "SHD-02",
         "if (failed(info->GetModuleInfo(mid, &base, 128, &len, name, &asmId))) return \"?\";"),
        # class names and layouts of finalized objects resolved inside Shutdown for its report: nightly
        # (census_in_shutdown holds the same clause in every run)
        pytest.param("shutdown_name_resolution", "basic", "SHD-02",
                     "if (prof_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {", marks=pytest.mark.long),
        # a start-up mapper swapped for the app's with a second SetFunctionIDMapper in ModuleLoadFinished
        ("idmapper_set_twice", "basic", "MAP-01",
         "HRESULT hr = info_->SetFunctionIDMapper(&HotPath::AppMapper);"),
        # its sampler thread's InitializeCurrentThread made lazily, right after its first SuspendRuntime
        ("initthread_while_suspended", "basic", "ICT-01", "initHr_ = p4_->InitializeCurrentThread();"),
        # each object's generation asked inside the ObjectReferences heap walk
        pytest.param("objgen_in_heapwalk", "basic", "ORF-01",
                     "HRESULT hr = g.info->GetObjectGeneration(objectId, &where);", marks=pytest.mark.long),
        # COR_PRF_HIGH_DISABLE_TIERED_COMPILATION (immutable) added by SetEventMask2 in AssemblyLoadFinished
        pytest.param("late_tiering_switch", "basic", "INI-01",
                     "g.info->SetEventMask2(low, high | COR_PRF_HIGH_DISABLE_TIERED_COMPILATION)",
                     marks=pytest.mark.long),
        # each handle target's generation asked inside RootReferences2: nightly (gc_root_attribution holds
        # RRF-01 in every run)
        pytest.param("rootref_generation_census", "basic", "RRF-01",
                     "HRESULT hr = g_info->GetObjectGeneration(refs[i], &range);", marks=pytest.mark.long),
        # GetThreadInfo of the thread ThreadDestroyed hands out: nightly (thread_domain_census holds THD-01)
        pytest.param("destroyed_threadinfo", "basic", "THD-01", "HRESULT hr = prof_->GetThreadInfo(t, &os);",
                     marks=pytest.mark.long),
        # dynamic methods (IL stubs) named like ordinary ones, through GetTokenAndMetaDataFromFunction
        ("dynamic_token_lookup", "basic", "DYN-01",
         "HRESULT hr = pi->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok);"),
        # exception fingerprints: frames named after DoStackSnapshot returned, with the walk's frameInfo:
        # nightly (exception_stacks_deferred holds SSC-01 in every run)
        pytest.param("deferred_frameinfo", "basic", "SSC-01",
                     "if (failed(prof_->GetFunctionInfo2(fid, frameInfo, &cls, &m, &tok, 0, &nargs, nullptr",
                     marks=pytest.mark.long),
    ],
)
def test_faulty_profilers_written_without_the_rules_are_found_at_their_line(
    fixture: str, app: str, clause: str, line: str, apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """Written with one deliberate, realistic bug each by a helper that saw none of the validator's rules
    (profilers/docs/README.md): each is found on both runtimes with the clause of the sentence it breaks, at
    the profiler's own line (found in its text, never taken from the report)."""
    result = validate(fixture, apps(app), runtimes, env={"PROFHARNESS_APP_SECONDS": "2"})
    text = render_text(result, verbose=True)
    assert all(r.outcome == "ok" for r in result.runs), text
    at = source_line(fixture, line)
    found = [g for g in result.findings if g.clause == clause and g.site is not None and g.site.line == at]
    assert found and found[0].runtimes == versions(runtimes), text
    assert same_source(found[0].site.file if found[0].site else None, DOCS / f"{fixture}.cpp"), found[0]


@pytest.mark.live
def test_FE2_12_an_elt_timing_profiler_calling_clock_gettime_from_its_hooks_is_a_note_not_a_finding(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """eltmapper's FunctionEnter2/Leave2/Tailcall2 stubs save every register and call C++ that reads
    clock_gettime: the page forbids managed calls and managed allocation, which clock_gettime is neither.
    The call out is told (FE2-12, a note), never failed; the run still did its work."""
    result = validate("eltmapper", apps("basic"), runtimes)
    text = render_text(result, verbose=True)
    assert all(r.outcome == "ok" for r in result.runs), text
    assert result.findings == [], text
    assert {g.clause for g in notes(result)} == {"FE2-12"}, text
    assert all("clock_gettime" in g.first.message for g in notes(result)), text
    for run in result.runs:
        stderr = (Path(run.trace).parent / "stderr.txt").read_text(errors="replace")
        assert "[eltmapper] shutdown: mapped=" in stderr, (run.runtime, stderr[-2000:])


@pytest.mark.live
def test_TOK_01_a_lookup_by_token_inside_ClassLoadFinished_is_a_note_at_its_line(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """callee_prebinder (written from the documents, its bug of its author's choosing) asks
    GetFunctionFromTokenAndTypeArgs for the methods of each class inside ClassLoadFinished; the page calls
    that dangerous "during loading of modules or types" when the function is not loaded yet, which a
    recording cannot tell: a note (TOK-01) at its line on both runtimes, no finding."""
    result = validate("callee_prebinder", apps("basic"), runtimes)
    text = render_text(result, verbose=True)
    assert all(r.outcome == "ok" for r in result.runs) and result.findings == [], text
    at = source_line("callee_prebinder", "HRESULT hr = info_->GetFunctionFromTokenAndTypeArgs(mod, mb, cls")
    (group,) = [g for g in notes(result) if g.clause == "TOK-01"]
    assert group.site is not None and group.site.line == at and group.runtimes == versions(runtimes), text
    assert "ClassLoadFinished" in group.occurrences[0].message and group.quote and group.fix, group


def test_ORF_01_inspecting_inside_ObjectReferences_names_the_objectreferences_clause(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """objrefs_inspector calls GetClassFromObject inside ObjectReferences (ObjectReferences page:
    "profilers must not attempt to inspect objects during an ObjectReferences call"): ORF-01 at both
    calls, not MR2-09."""
    result = validate("objrefs_inspector", apps("basic"), runtimes)
    text = render_text(result)
    assert {g.clause for g in result.findings} == {"ORF-01"}, text
    lines = {source_line("objrefs_inspector", "GetClassFromObject(objectId, &srcClass)"),
             source_line("objrefs_inspector", "GetClassFromObject(refIds[i], &dstClass)")}  # fmt: skip
    assert {g.site.line for g in result.findings if g.site} == lines, text
    for group in result.findings:
        assert group.runtimes == versions(runtimes) and group.count >= 2 and group.quote and group.fix, group


@pytest.mark.live
def test_VAL_CRASH_an_app_exit_code_is_shown_and_is_no_crash(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """exit3 returns 3 from Main; log_flush_thread's detached flusher thread never calls the profiling API:
    exit 3 in the runs table, no VAL-CRASH, and the thread alive at Shutdown a note naming its start
    routine (the lambda BufferedLog::Start gives std::thread) in the fixture's own source."""
    result = validate("log_flush_thread", apps("exit3"), runtimes)
    text = render_text(result)
    assert [(r.outcome, r.exit_code) for r in result.runs] == [("exited", 3)] * len(runtimes), text
    assert result.findings == [], text
    (note,) = notes(result)
    assert note.clause == "VAL-THREAD-AT-SHUTDOWN" and note.runtimes == versions(runtimes), text
    assert "BufferedLog::Start" in note.first.message and "no profiling API call" in note.first.message
    assert note.site is not None and same_source(note.site.file, DOCS / "log_flush_thread.cpp"), note
    assert " 3 " in next(line for line in text.splitlines() if "exited" in line)


@pytest.mark.live
def test_VAL_HANG_an_app_running_longer_than_the_hang_limit_is_no_hang(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """The long app runs 6 s (PROFHARNESS_APP_SECONDS) with a 2 s hang limit: nothing stays open that long,
    so there is no VAL-HANG and the run ends by itself."""
    result = validate(
        "log_flush_thread", apps("long"), runtimes, env={"PROFHARNESS_APP_SECONDS": "6"}, hang_s=2.0
    )
    text = render_text(result)
    assert [r.outcome for r in result.runs] == ["ok"] * len(runtimes), text
    assert all(r.seconds >= 6 for r in result.runs), text
    assert result.findings == [], text
    assert {g.clause for g in notes(result)} == {"VAL-THREAD-AT-SHUTDOWN"}, text


@pytest.mark.live
def test_VAL_HANG_the_run_time_limit_says_so_and_blames_no_callback(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """The long app asked to run 60 s under a 4 s run limit (``timeout_s``, the CLI's --timeout) and the
    default hang limit: the harness stops it, the run says it reached its time limit, and nothing is blamed
    on a callback or call (none was open)."""
    result = validate(
        "minimal", apps("long"), runtimes, env={"PROFHARNESS_APP_SECONDS": "60"}, timeout_s=4.0
    )
    text = render_text(result)
    assert [r.outcome for r in result.runs] == ["hung"] * len(runtimes), text
    assert all(r.seconds < 30 for r in result.runs), text
    assert result.findings == [], text
    assert len([n for n in result.notes if "time limit" in n]) == len(runtimes), result.notes


@pytest.mark.live
def test_FE2_07_fast_path_hooks_written_as_C_functions_are_found_at_their_code(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """call_counter (profilers/docs/README.md) registers its FunctionEnter3/Leave3/Tailcall3 hooks as ordinary
    System V C functions, which clobber rdi (and rax, rdx): JIT code keeps live values in those registers
    across the fast path's call, and both runtimes crash after the first hook returns. The hook checker holds
    a fast-path hook to every register (FunctionEnter3.md: the execution engine saves none): each of the three
    is an FE2-07 finding at its own code, on both runtimes; the crash, whose stack holds no profiler frame, is
    a note, or a VAL-CRASH finding when it comes while a hook is open on the crashing thread (seen once on
    3.1.23 in a full parallel run: "SIGSEGV in FunctionEnter3", IP 0), which blames the same profiler."""
    result = validate("call_counter", apps("basic"), runtimes)
    text = render_text(result, verbose=True)
    hooks = {
        g.site.function
        for g in result.findings
        if g.clause == "FE2-07" and g.site is not None and g.runtimes == versions(runtimes)
        and same_source(g.site.file, DOCS / "call_counter.cpp")
    }
    assert hooks == {"OnEnter3", "OnLeave3", "OnTailcall3"}, text
    assert {g.clause for g in result.findings} - {"VAL-CRASH"} == {"FE2-07"}, text
