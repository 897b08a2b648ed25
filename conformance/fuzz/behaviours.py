"""What the fake runtime may do (issue 22): every behaviour of the fuzzer's world and of the native fake
runtime is one row here, with what it rests on: a live observation on the bundled runtimes (3.1.23 and
8.0.4, with the run that shows it) or a document sentence (quoted, from ``../shared/spec``) that allows it.

- :attr:`Basis.OBSERVED`: a real runtime does it (both worlds have it);
- :attr:`Basis.DOCUMENTED`: only a document allows it, no run showed it: the ``documented`` world has it,
  the ``observed`` world (``fuzz --world observed``) does not;
- :attr:`Basis.LIMITATION`: what the fake runtime does because it cannot do what a runtime does (a method
  it does not answer): listed so a finding resting on it can be recognised; both worlds have it.

The world's generator tags each choice with its row (:meth:`conformance.fuzz.world.World.behave`, which
refuses a row that is not here or not allowed in its world) and the native fake runtime's answers carry
``// behaviour: ID`` beside their code; tests hold both to this table and ``docs/fake-runtime.md`` to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "BEHAVIOURS", "DEFAULT_WORLD", "WORLDS", "Basis", "Behaviour", "allowed", "behaviour", "render_table",
]


class Basis(Enum):
    OBSERVED = "observed"
    DOCUMENTED = "documented"
    LIMITATION = "limitation"


#: The worlds ``fuzz --world`` chooses from; the default is the observed one (a fuzzer's findings on it
#: are findings a real runtime can give).
WORLDS = ("observed", "documented")
DEFAULT_WORLD = "observed"

BUFFERS = "caller-allocated-buffers.md"
MR2 = "MovedReferences2.md"
DSS = "DoStackSnapshot.md"


@dataclass(frozen=True)
class Behaviour:
    """One row: ``id``, what the fake runtime does, its basis, and the source: for a document the page
    (``doc``, in ``../shared/spec``) and its sentence (``quote``, verbatim); for an observation the runs
    that show it (``observed``)."""

    id: str
    what: str
    basis: Basis
    observed: str = ""
    doc: str = ""
    quote: str = ""

    def source(self) -> str:
        parts = []
        if self.observed:
            parts.append(f"observed: {self.observed}")
        if self.quote:
            parts.append(f'{self.doc}: "{self.quote}"')
        return "; ".join(parts)


_LIVE_GC = ("3.1.23 and 8.0.4: the docs fixture object_tracker.cpp under `validate --app heapchurn` "
            "(tests/conformance/validator/test_proxy_records.py; the proxy.ranges marks of its traces)")

_PROBE = ("3.1.23 and 8.0.4: the probe with the fuzz plan (conformance/fuzz/probe.py FUZZ_PLAN) on the "
          "stack-basic and gc-compact scenarios")
_VALIDATE_FUZZ_CORRECT = ("3.1.23 and 8.0.4: validate of tests/conformance/fuzz/profilers/correct.cpp (the "
                          "validate-basic scenario; its calls in the callbacks have the proxy record them)")

_IL_ONCE = ("3.1.23 and 8.0.4: validate of tests/conformance/validator/profilers/docs/il_rewriter_once.cpp "
            "on the standard workload")

_REJIT = ("3.1.23 and 8.0.4: validate of tests/conformance/validator/profilers/docs/rejit_rewriter.cpp on "
          "the standard workload")
#: the ReJIT pages (clr_model/catalog/rejit*.toml quote them; not in ../shared/spec)
REJIT_ERROR_PAGE = "ICorProfilerCallback4::ReJITError"
REQUEST_REVERT_PAGE = "ICorProfilerInfo4::RequestRevert"

BEHAVIOURS: tuple[Behaviour, ...] = (
    # --- callbacks and their order (conformance/fuzz/world.py) ----------------------------------------
    Behaviour("thread.create", "ThreadCreated, then ThreadAssignedToOSThread, on the new thread",
              Basis.OBSERVED, observed=_PROBE),
    Behaviour("thread.managed", "every callback but Initialize and Shutdown on a thread the runtime "
              "announced (ThreadCreated) and did not destroy: module loads come after a ThreadCreated",
              Basis.OBSERVED, observed=_PROBE + " (the ModuleLoadStarted records' ThreadIDs are created "
              "threads')"),
    Behaviour("thread.destroy", "ThreadDestroyed on a live thread; it makes no callback after it",
              Basis.OBSERVED, observed=_VALIDATE_FUZZ_CORRECT),
    Behaviour("module.load", "ModuleLoadStarted, ModuleLoadFinished (S_OK), ModuleAttachedToAssembly, in "
              "that order on one thread; the module's name, base and assembly fixed from then on",
              Basis.OBSERVED, observed=_PROBE + "; the double-pass GetModuleInfo answers of the validator's "
              "correct.cpp under validate (the same size twice)"),
    Behaviour("class.load", "ClassLoadStarted, ClassLoadFinished (S_OK) for a class of a loaded module",
              Basis.OBSERVED, observed=_VALIDATE_FUZZ_CORRECT + " (ClassLoadFinished, GetClassIDInfo S_OK); "
              + _PROBE + " (its counts record: 301 ClassLoadStarted and ClassLoadFinished on 8.0.4)"),
    Behaviour("jit", "JITCompilationStarted, JITCompilationFinished (S_OK, fIsSafeToBlock 1) for a method of "
              "a loaded class; its code range fixed from then on", Basis.OBSERVED,
              observed=_VALIDATE_FUZZ_CORRECT
              + " (JITCompilationFinished, GetTokenAndMetaDataFromFunction S_OK)"),
    Behaviour("alloc", "ObjectAllocated for each new object, on the allocating thread, at addresses no live "
              "object has", Basis.OBSERVED, observed=_LIVE_GC),
    Behaviour("alloc.huge", "objects of 4 GiB and more (a MovedReferences2 length over ULONG)",
              Basis.DOCUMENTED, doc=MR2, quote="because it can report larger ranges of objects whose lengths "
              "exceed what can be expressed in a ULONG"),
    Behaviour("alloc.far", "objects 2**32 or 2**40 bytes past the highest one (ranges far apart)",
              Basis.DOCUMENTED, doc=MR2, quote="each of which is the old (pre-garbage collection) starting "
              "address of a block of contiguous, live objects in memory"),
    Behaviour("exception.caught", "ExceptionThrown; ExceptionSearchFunctionEnter/Leave per managed frame up "
              "to the catcher; ExceptionSearchCatcherFound; ExceptionUnwindFunctionEnter/Leave per managed "
              "frame below it (the stack losing that frame); ExceptionCatcherEnter/Leave", Basis.OBSERVED,
              observed=_PROBE + " (8 search and unwind frames, then the catcher, at stack-basic's "
              "exception)"),
    Behaviour("stack.native-runs", "stacks with runs of unmanaged frames between managed ones "
              "(DoStackSnapshot reports each run as one frame with FunctionID 0)", Basis.OBSERVED, doc=DSS,
              observed="3.1.23 and 8.0.4: FunctionID 0 frames in the live suite's stack-walks "
              "scenario's walks "
              "(conformance/checks/stack.py)",
              quote="once for each managed frame (or run of unmanaged frames) on the stack"),
    Behaviour("names.ascii", "names of modules, classes and methods made of ASCII letters, digits, '.' and "
              "'_'", Basis.OBSERVED, observed="3.1.23 and 8.0.4: every module, class and method name of the "
              "validator's scenarios"),
    Behaviour("names.strings", "class, method and module names that are strings of the profiler's own "
              "read-only data (a dotted identifier, as a C# program may declare: an app names its types "
              "anything; `fuzz --no-strings` leaves them out)", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: GetTypeDefProps and GetMethodProps answer the app's own type (with "
              "its namespace) and method names verbatim (the validator's scenarios; the docs fixture "
              "object_tracker.cpp tracks classes by such a name under validate)"),
    Behaviour("names.app", "with `fuzz --app APP.dll`: the app's module first, its non-generic types "
              "(full name) loaded once each into it with their TypeDef tokens, their methods "
              "JIT-compiled once each with their MethodDef tokens", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: GetClassIDInfo and GetTokenAndMetaDataFromFunction answer the "
              "tokens of the app's own metadata, and a ClassID per non-generic type (the validator's "
              "scenarios)"),
    Behaviour("names.unicode", "names with Latin-1, BMP and non-BMP characters (UTF-16 surrogate pairs) in "
              "WCHAR buffers", Basis.DOCUMENTED, doc=BUFFERS, quote="The InfoBuffer parameter specifies the "
              "caller-allocated buffer."),
    Behaviour("names.grow", "a name answered longer on the fill than on the size query of a double-pass "
              "client (module, class and method names; no runtime changes one)", Basis.DOCUMENTED,
              doc=BUFFERS, quote="After this method returns, you must verify that InfoBuffer was large "
              "enough "
              "to contain the full name of the application domain."),
    # --- garbage collections ------------------------------------------------------------------------
    Behaviour("gc.plain", "a GC that moves nothing: RuntimeSuspendStarted (for GC), RuntimeSuspendFinished, "
              "GarbageCollectionStarted (induced), GarbageCollectionFinished, RuntimeResumeStarted, "
              "RuntimeResumeFinished, no MovedReferences2 (every GC of the live runs reported some)",
              Basis.DOCUMENTED, doc=MR2, quote="Called to report the new layout of objects in the heap as a "
              "result of a compacting garbage collection."),
    Behaviour("gc.compact", "a compacting GC: the suspension callbacks, GarbageCollectionStarted, "
              "MovedReferences2 (then MovedReferences) batches, GarbageCollectionFinished, the resumption "
              "callbacks; ranges of contiguous live objects, disjoint in old and in new space, objects in no "
              "range staying", Basis.OBSERVED, observed=_LIVE_GC + "; " + _PROBE),
    Behaviour("gc.batches", "several MovedReferences2 calls (batches) in one GC, every one speaking of "
              "pre-GC addresses", Basis.OBSERVED, observed=_LIVE_GC),
    Behaviour("gc.reuse", "compaction into addresses other objects left in the same GC (.NET 8 regions)",
              Basis.OBSERVED, observed=_LIVE_GC),
    Behaviour("gc.delta0", "ranges whose new start is their old start (delta 0) beside moved ones",
              Basis.OBSERVED, observed=_LIVE_GC),
    Behaviour("gc.order", "the ranges of a batch in any order, new space in another order than old space",
              Basis.OBSERVED, observed=_LIVE_GC + ": new starts out of the old starts' order in most GCs on "
              "both, old starts out of order in an induced GC on 8.0.4"),
    Behaviour("gc.batch-512", "MovedReferences2 batches of 512 ranges, the last one shorter", Basis.OBSERVED,
              observed=_LIVE_GC),
    Behaviour("gc.batch-small", "MovedReferences2 batches of 1 to 8 ranges", Basis.DOCUMENTED, doc=MR2,
              quote="The number of blocks of contiguous objects that moved as the result of the compacting "
              "garbage collection."),
    Behaviour("gc.top", "new blocks ending right below 2**64 (beyond any user-space address)",
              Basis.DOCUMENTED, doc=MR2, quote="each of which is the new (post-garbage collection) starting "
              "address of a block of contiguous, live objects in memory"),
    Behaviour("gc.mr2-failed", "after a MovedReferences2 that failed, no MovedReferences for that batch",
              Basis.OBSERVED, doc=MR2, observed="3.1.23 and 8.0.4: MR2-12's live check "
              "(conformance/checks/gc.py "
              "fail_mr2_plan)", quote="Profilers can return an HRESULT that indicates failure from the "
              "MovedReferences2 method, to avoid calling the second method."),
    # --- the native fake runtime's answers (conformance/native/fakeruntime/fakeruntime.cpp) ------------
    Behaviour("answer.buffer-size", "a buffer call with no buffer answers the whole size (a string's "
              "with its "
              "NUL) and S_OK", Basis.OBSERVED, doc=BUFFERS,
              observed="3.1.23 and 8.0.4: the correct.cpp fixture's size queries under validate; the buffer "
              "checks (conformance/checks/buffers.py, live suite)",
              quote="First call with a zero-length InfoBuffer parameter to obtain the correct buffer size."),
    Behaviour("answer.buffer-short-error", "GetModuleInfo/GetModuleInfo2 with a buffer too short (observed "
              "world): 0x8007007A (ERROR_INSUFFICIENT_BUFFER), only a NUL in element 0, the whole size",
              Basis.OBSERVED, observed="3.1.23 and 8.0.4: the live suite's buffers-basic scenario (the "
              "probe's "
              "short-buffer GetModuleInfo/GetModuleInfo2 calls answer 0x8007007A; "
              "conformance/checks/buffers.py)"),
    Behaviour("answer.buffer-short-truncate", "GetRuntimeInformation with a buffer too short: as much as "
              "fits (the string cut, with its NUL), the whole size, S_OK", Basis.OBSERVED, doc=BUFFERS,
              observed="8.0.4 (the version the fake runtime says it is): the live suite's buffers-basic "
              "scenario (GetRuntimeInformation answers S_OK)",
              quote="If any elements are returned, the method returns S_OK and sets pcBufferMax to the total "
              "number of elements available."),
    Behaviour("answer.buffer-short-documented", "GetModuleInfo/GetModuleInfo2 with a buffer too short "
              "(documented world): the name cut, the whole size, S_OK", Basis.DOCUMENTED, doc=BUFFERS,
              quote="If any elements are returned, the method returns S_OK and sets pcBufferMax to the total "
              "number of elements available."),
    Behaviour("answer.metadata-short", "IMetaDataImport names (GetScopeProps, GetTypeDefProps, "
              "GetMethodProps) "
              "with a buffer too short: the name cut, the whole size, CLDB_S_TRUNCATION (0x00131106)",
              Basis.LIMITATION, observed="not observed here and in no page of ../shared/spec: what "
              "dotnet/runtime's "
              "metadata reader returns (a success code, not S_OK)"),
    Behaviour("answer.world", "ICorProfilerInfo answers read from the world (modules, classes, functions, "
              "code ranges, threads, stacks, the heap, the event mask), S_OK", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: the probe's and the validator's records of the same calls"),
    Behaviour("answer.unknown-id", "an ID the world does not hold (a dead object, an unloaded thing): "
              "E_INVALIDARG and zeroed outputs", Basis.LIMITATION,
              observed="a runtime gives no defined answer (it may crash or answer garbage); the fake runtime "
              "answers the safe error, MR2-17 judges the call"),
    Behaviour("answer.not-implemented", "ICorProfilerInfo and IMetaDataImport methods the fake runtime does "
              "not answer: E_NOTIMPL", Basis.LIMITATION,
              observed="no runtime answers E_NOTIMPL for these: a profiler's handling of it is not judged"),
    Behaviour("answer.not-managed-thread", "GetCurrentThreadID and DoStackSnapshot on no managed thread: "
              "CORPROF_E_NOT_MANAGED_THREAD", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: the probe's calls from its own threads (live suite)"),
    Behaviour("answer.snapshot", "DoStackSnapshot: one StackSnapshotCallback per frame, leaf first, with the "
              "frame's context for REGISTER_CONTEXT; CORPROF_E_STACKSNAPSHOT_ABORTED when the callback does "
              "not return S_OK", Basis.OBSERVED, doc=DSS,
              observed="3.1.23 and 8.0.4: the DSS checks (conformance/checks/stack.py, live suite)",
              quote="it calls your `StackSnapshotCallback` several times, once for each managed frame "
              "(or run "
              "of unmanaged frames) on the stack"),
    # --- IL bodies (issue 25; conformance/fuzz/ilpool.py, the fake runtime's IL answers) ---------------
    Behaviour("il.body", "a method has a real IL body (System.Private.CoreLib's, with its MethodDef token: "
              "tiny and fat headers, locals, exception-handling sections), known from its "
              "JITCompilationStarted on: GetFunctionInfo answers its token there, GetILFunctionBody its "
              "header and size",
              Basis.OBSERVED, observed=_IL_ONCE + " (GetFunctionInfo and GetILFunctionBody S_OK inside "
              "JITCompilationStarted); tests/clr_model/test_il_corelib.py (every CoreLib body is a valid "
              "body)"),
    Behaviour("il.allocator", "GetILFunctionBodyAllocator answers an IMethodMalloc whose Alloc hands out "
              "zeroed memory that is never freed", Basis.OBSERVED, observed=_IL_ONCE + " (GetILFunctionBody"
              "Allocator S_OK, Alloc non-NULL)"),
    Behaviour("il.set", "SetILFunctionBody of a known method answers S_OK and keeps nothing the profiler "
              "could see (the body is recorded for the judge's IL checker)", Basis.OBSERVED,
              observed=_IL_ONCE + " (SetILFunctionBody S_OK for each first compilation)"),
    Behaviour("rejit.request", "RequestReJIT with COR_PRF_ENABLE_REJIT set answers S_OK and keeps the "
              "(module, methodDef) pairs for recompilation", Basis.OBSERVED,
              observed=_REJIT + " (RequestReJIT S_OK from the profiler's own thread)"),
    Behaviour("rejit.compile", "at the next JITCompilationFinished on a thread, per requested (module, "
              "methodDef) with compiled functions: GetReJITParameters once with an "
              "ICorProfilerFunctionControl (never freed), then ReJITCompilationStarted and "
              "ReJITCompilationFinished (S_OK) of each of its functions with a new ReJITID; a pair with no "
              "compiled function waits; none of this without ICorProfilerCallback4 or "
              "COR_PRF_MONITOR_JIT_COMPILATION", Basis.OBSERVED,
              observed=_REJIT + " (GetReJITParameters on an application thread, then the Started/Finished "
              "pairs of the recompiled methods)"),
    Behaviour("rejit.not-enabled", "RequestReJIT and RequestRevert without COR_PRF_ENABLE_REJIT: "
              "CORPROF_E_REJIT_NOT_ENABLED (0x8013137C)", Basis.LIMITATION,
              observed="not observed here and in no page of ../shared/spec: RequestReJIT's own page names "
              "the HRESULT (REJIT-05); the value is corerror.h's"),
    Behaviour("rejit.error", "RequestReJIT of a pair with a NULL methodDef or a token of another "
              "table (a TypeDef): S_OK, the pair not marked, and before RequestReJIT returns, on the calling "
              "thread, ReJITError(moduleId, methodId, functionId NULL, E_INVALIDARG)", Basis.OBSERVED,
              doc=REJIT_ERROR_PAGE,
              observed="3.1.23 and 8.0.4: the live suite's rejit-invalid-token experiment (ReJITError for "
              "methodDef 0 and 0x02000002, functionId 0, hrStatus 0x80070057, recorded on the requesting "
              "thread before its RequestReJIT returned)",
              quote="This value may be NULL if the failure occurred on a per-method basis instead of a "
              "per-instantiation basis (for example, if the profiler specified an invalid metadata token for "
              "the method to be recompiled)."),
    Behaviour("rejit.revert", "RequestRevert with COR_PRF_ENABLE_REJIT set: S_OK; the status entry S_OK "
              "for a pair with an active request (reverted: a pending recompilation is dropped, a later "
              "request recompiles anew) and, in the observed world, S_OK for a pair no request named too; a "
              "NULL status array accepted (nothing written)", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: the live suite's rejit-protocol experiment (RequestRevert S_OK, "
              "both entries S_OK, written by the runtime over the probe's fill: REJIT-16's expectation in "
              "conformance/expectations/common.toml)"),
    Behaviour("rejit.revert-documented", "RequestRevert of a pair no active request names (documented "
              "world): its status entry CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND, as 0x8013137D (dotnet/"
              "runtime's corerror.xml defines no such HRESULT: 0x8013137D is the gap between "
              "CORPROF_E_REJIT_NOT_ENABLED and CORPROF_E_FUNCTION_IS_COLLECTIBLE)",
              Basis.DOCUMENTED, doc=REQUEST_REVERT_PAGE, quote="The CLR could not revert the specified "
              "function, because a corresponding active recompilation request was not found."),
    Behaviour("rejit.revert-null", "RequestRevert of a pair with a NULL ModuleID or methodDef: E_INVALIDARG "
              "in its status entry", Basis.LIMITATION,
              observed="not observed here: the status the page's table gives it (E_INVALIDARG, 'The moduleID "
              "or methodDef parameter is NULL.'), in both worlds"),
    Behaviour("answer.mask", "callbacks made only for the event mask's bits; none of an interface the "
              "profiler does not implement", Basis.OBSERVED,
              observed="3.1.23 and 8.0.4: every validator run (a callback outside the mask is never "
              "recorded)"),
)

_BY_ID = {b.id: b for b in BEHAVIOURS}


def behaviour(behaviour_id: str) -> Behaviour:
    """The row ``behaviour_id`` (KeyError: the fake runtime does something the table does not list)."""
    return _BY_ID[behaviour_id]


def allowed(behaviour_id: str, world: str) -> bool:
    """Whether ``world`` (one of :data:`WORLDS`) has the behaviour ``behaviour_id``."""
    if world not in WORLDS:
        raise ValueError(f"world {world!r} is not one of {', '.join(WORLDS)}")
    return behaviour(behaviour_id).basis is not Basis.DOCUMENTED or world == "documented"


def render_table() -> str:
    """The table as ``docs/fake-runtime.md`` holds it (a test keeps the two equal)."""
    lines = ["| id | the fake runtime | basis | source |", "|---|---|---|---|"]
    for b in BEHAVIOURS:
        cells = [f"`{b.id}`", b.what, b.basis.value, b.source()]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
