"""Clauses of ``DoStackSnapshot.md`` (ICorProfilerInfo2::DoStackSnapshot).

Every normative sentence of the page is a clause; where the page is unclear or contradicts itself the
clause is an ``ambiguity`` with the open ``question`` and, where the model has to decide, its
``model_choice`` (what the model does and why). Runtime facts cited in a choice come from
dotnet/runtime ``src/coreclr/vm/proftoeeinterfaceimpl.cpp`` (ProfToEEInterfaceImpl::DoStackSnapshot and
ProfilerStackWalkCallback) and ``src/coreclr/inc/corerror.xml``.
"""

from __future__ import annotations

from clr_model.catalog.base import Clause, Document, Kind, Layer

_DOC = Document.DO_STACK_SNAPSHOT
_M, _L, _E, _V = Layer.MODEL, Layer.LIVE, Layer.EMU, Layer.VALIDATOR

_PARAMS = "Parameters"
_REMARKS = "Remarks"
_SYNC = "Synchronous Stack Walk"
_ASYNC = "Asynchronous Stack Walk"


def _c(
    id: str,
    title: str,
    paraphrase: str,
    section: str,
    kind: Kind,
    layers: set[Layer],
    quote: str,
    question: str | None = None,
    model_choice: str | None = None,
) -> Clause:
    return Clause(
        id=id,
        title=title,
        paraphrase=paraphrase,
        document=_DOC,
        section=section,
        kind=kind,
        layers=frozenset(layers),
        quote=quote,
        question=question,
        model_choice=model_choice,
    )


CLAUSES: tuple[Clause, ...] = (
    _c(
        "DSS-01",
        "NULL thread: current thread",
        "Passing NULL (0) as `thread` walks the stack of the calling thread.",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L},
        "Passing null in `thread` yields a snapshot of the current thread.",
    ),
    _c(
        "DSS-02",
        "other thread: CLR suspends, walks, resumes",
        "Passing the ThreadID of another thread makes the CLR suspend that thread, take the snapshot and "
        "resume it; the profiler does not have to suspend it.",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L},
        "If a `ThreadID` of a different thread is passed, the common language runtime (CLR) suspends that "
        "thread, performs the snapshot, and resumes.",
        model_choice="On the WINDOWS platform profile the model walks a running other thread (the CLR "
        "suspends it). On the UNIX profile the runtime cannot suspend an arbitrary thread "
        "(no PLATFORM_SUPPORTS_SAFE_THREADSUSPEND): the model returns E_NOTIMPL with no callback unless "
        "the runtime is suspended (ICorProfilerInfo10::SuspendRuntime), which is what "
        "ProfToEEInterfaceImpl::DoStackSnapshot does; this is a platform divergence from the page, "
        "recorded, not hidden.",
    ),
    _c(
        "DSS-03",
        "one callback per managed frame / unmanaged run",
        "The CLR calls StackSnapshotCallback once for each managed frame and once for each run of "
        "consecutive unmanaged frames; never more, never fewer.",
        _REMARKS,
        Kind.INVARIANT,
        {_M, _L, _E},
        "Before the CLR returns from that call, it calls your `StackSnapshotCallback` several times, once "
        "for each managed frame (or run of unmanaged frames) on the stack.",
    ),
    _c(
        "DSS-04",
        "clientData passed through",
        "The `clientData` pointer given to DoStackSnapshot reaches every StackSnapshotCallback unchanged.",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L},
        "A pointer to the client data, which is passed straight through to the `StackSnapshotCallback` "
        "callback function.",
    ),
    _c(
        "DSS-05",
        "infoFlags decide per-frame data",
        "`infoFlags` (COR_PRF_SNAPSHOT_INFO) decides what each callback gets: COR_PRF_SNAPSHOT_DEFAULT "
        "(0) no register context (context NULL, contextSize 0), COR_PRF_SNAPSHOT_REGISTER_CONTEXT (1) a "
        "CONTEXT for every frame (contextSize = the runtime's sizeof(CONTEXT)).",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L},
        "A value of the COR_PRF_SNAPSHOT_INFO enumeration, which specifies the amount of data to be "
        "passed back for each frame by `StackSnapshotCallback`.",
    ),
    _c(
        "DSS-06",
        "context is a Win32 CONTEXT seed",
        "`context` points to a Win32 CONTEXT (the CPU registers at one moment) that seeds the walk; "
        "`contextSize` is the size of that structure.",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L},
        "A pointer to a Win32 `CONTEXT` structure, which is used to seed the stack walk.",
    ),
    _c(
        "DSS-07",
        "seed ignored unless helper code on top",
        "When the top of the stack is not unmanaged CLR helper code, a seed does not change the walk: "
        "it starts where it would start without one.",
        _PARAMS,
        Kind.INVARIANT,
        {_M, _L, _E},
        "The seed helps the CLR determine where to begin the stack walk, if the top of the stack is "
        "unmanaged helper code; otherwise, the seed is ignored.",
    ),
    _c(
        "DSS-08",
        "seed starts the walk below helper code",
        "When the top of the stack is unmanaged CLR helper code, the walk begins at the seed's frame: the "
        "first callback is the seed's frame, frames above it are not reported.",
        _PARAMS,
        Kind.ORDERING,
        {_M, _L, _E},
        "The seed helps the CLR determine where to begin the stack walk, if the top of the stack is "
        "unmanaged helper code",
    ),
    _c(
        "DSS-09",
        "asynchronous walk needs a seed",
        "A profiler doing an asynchronous walk must supply a seed (the Asynchronous section narrows this to "
        "stacks whose top is CLR helper code, see DSS-28).",
        _PARAMS,
        Kind.AUTHOR_RULE,
        {_M, _L},
        "A seed must be supplied for an asynchronous walk.",
    ),
    _c(
        "DSS-10",
        "synchronous walk: no seed, no suspension",
        "A synchronous walk needs neither a seed nor a suspension: NULL context and NULL thread give the "
        "complete stack of the current thread.",
        _SYNC,
        Kind.INVARIANT,
        {_M, _L},
        "It does not require seeding or suspending.",
    ),
    _c(
        "DSS-11",
        "COR_PRF_SNAPSHOT_CONTEXT does not exist",
        "The page makes `context` valid only with a COR_PRF_SNAPSHOT_CONTEXT flag in `infoFlags`, but "
        "COR_PRF_SNAPSHOT_INFO defines only DEFAULT (0), REGISTER_CONTEXT (1) and X86_OPTIMIZED (2).",
        _PARAMS,
        Kind.AMBIGUITY,
        {_M, _L},
        "The `context` parameter is valid only if the COR_PRF_SNAPSHOT_CONTEXT flag was passed in the "
        "`infoFlags` parameter.",
        question="Which flag makes `context` valid: is COR_PRF_SNAPSHOT_CONTEXT meant to be "
        "COR_PRF_SNAPSHOT_REGISTER_CONTEXT (an input flag doubling as an output flag), or is a seed valid "
        "whatever `infoFlags` says?",
        model_choice="A non-NULL seed is honoured whatever `infoFlags` holds; REGISTER_CONTEXT only "
        "decides the per-frame output contexts (DSS-05). No such flag exists, and the runtime reads the "
        "seed without looking at `infoFlags`; tying the seed to REGISTER_CONTEXT would make seeded walks "
        "without per-frame contexts impossible, which the Asynchronous section does not suggest.",
    ),
    _c(
        "DSS-12",
        "contextSize other than sizeof(CONTEXT)",
        "The page says only that `contextSize` is the size of the CONTEXT; it does not say what happens "
        "when it differs from the runtime's sizeof(CONTEXT), nor that it must match.",
        _PARAMS,
        Kind.AMBIGUITY,
        {_M, _L},
        "The size of the `CONTEXT` structure, which is referenced by the `context` parameter.",
        question="Is a seed whose `contextSize` is smaller (or larger) than the runtime's CONTEXT rejected, "
        "truncated, or read in full anyway? The PAL CONTEXT grows between runtime versions (3.1: 1232 "
        "bytes, later runtimes append XSTATE/AVX/AVX-512 state), so a profiler cannot know the size.",
        model_choice="A seed shorter than the runtime's CONTEXT is undefined (the runtime does not check "
        "`contextSize` and reads sizeof(CONTEXT) bytes): the model raises ContextTooSmall naming DSS-12 "
        "instead of inventing a result. A larger `contextSize` is accepted (the layouts are "
        "prefix-compatible, the tail is ignored). With a NULL context `contextSize` is ignored. "
        "Per-frame contexts handed out carry the runtime's own sizeof(CONTEXT).",
    ),
    _c(
        "DSS-13",
        "other threads: suspended already, or by the CLR?",
        "Parameters say the CLR suspends another thread itself; Remarks say other threads can be walked "
        "only if the target is already suspended.",
        _REMARKS,
        Kind.AMBIGUITY,
        {_M, _L, _V},
        "Snapshots can be taken of other threads only if the target thread is suspended at the time.",
        question="Must the profiler suspend the target before a cross-thread walk (Remarks), or does "
        "the CLR suspend it (Parameters)? Is a walk of a running other thread an error?",
        model_choice="The model follows Parameters (the more specific sentence about the argument): on "
        "WINDOWS a running target is suspended by the CLR and walked; a target the profiler suspended is "
        "walked the same way. On UNIX a cross-thread walk succeeds only while the runtime is suspended, "
        "else E_NOTIMPL (see DSS-02).",
    ),
    _c(
        "DSS-14",
        "callbacks before DoStackSnapshot returns",
        "Every StackSnapshotCallback of a walk happens before DoStackSnapshot returns, on the walking "
        "thread; none arrives afterwards.",
        _REMARKS,
        Kind.ORDERING,
        {_M, _L},
        "Before the CLR returns from that call, it calls your `StackSnapshotCallback` several times",
    ),
    _c(
        "DSS-15",
        "unmanaged run: one callback, FunctionID 0",
        "A run of unmanaged frames is reported as one callback with FunctionID 0 (its context, if "
        "requested, is where the profiler can start its own native unwind); the CLR does not break it "
        "down: the profiler walks unmanaged frames itself.",
        _REMARKS,
        Kind.INVARIANT,
        {_M, _L},
        "When unmanaged frames are encountered, you must walk them yourself.",
    ),
    _c(
        "DSS-16",
        "leaf first, main last",
        "Frames are reported in the reverse of push order: the leaf (last pushed) first, the first pushed "
        "(main) last.",
        _REMARKS,
        Kind.ORDERING,
        {_M, _L, _E},
        "The order in which the stack is walked is the reverse of how the frames were pushed onto the "
        "stack: leaf (last-pushed) frame first, main (first-pushed) frame last.",
    ),
    _c(
        "DSS-17",
        "synchronous walk defined",
        "A synchronous walk is a walk of the current thread made from inside an ICorProfilerCallback "
        "method, with NULL thread and NULL context.",
        _SYNC,
        Kind.INVARIANT,
        {_M, _L},
        "You just call `DoStackSnapshot` from within your `ICorProfilerCallback` method, passing null in "
        "the `context` and `thread` parameters.",
    ),
    _c(
        "DSS-18",
        "asynchronous walk defined",
        "An asynchronous walk is a walk of another thread, or of the current thread outside any callback "
        "(by hijacking its instruction pointer, e.g. from a signal handler).",
        _ASYNC,
        Kind.INVARIANT,
        {_M, _L},
        "An asynchronous stack walk entails walking the stack of a different thread, or walking the stack "
        "of the current thread, not in response to a callback, but by hijacking the current thread's "
        "instruction pointer.",
    ),
    _c(
        "DSS-19",
        "GetFunctionFromIP: 0 for unmanaged code",
        "In the seed procedure, GetFunctionFromIP returns FunctionID 0 for an instruction pointer in "
        "unmanaged code; the profiler walks down to the first managed frame and seeds from its registers.",
        _ASYNC,
        Kind.INVARIANT,
        {_M, _L, _V},
        "determine whether the register context points to unmanaged code by calling "
        "ICorProfilerInfo::GetFunctionFromIP — if it returns a `FunctionID` equal to zero, the frame is "
        "unmanaged code.",
    ),
    _c(
        "DSS-20",
        "no seed: may skip top managed frames",
        "An asynchronous walk without a seed may skip managed frames at the top of the stack (an "
        "incomplete walk); it may not skip any other frame, and what it does report is in order.",
        _ASYNC,
        Kind.INVARIANT,
        {_M, _L},
        "If you do not supply a seed, `DoStackSnapshot` might skip managed frames at the top of the stack "
        "and, consequently, will give you an incomplete stack walk.",
    ),
    _c(
        "DSS-21",
        "seed outside JIT/NGEN code: UNMANAGED_CTX",
        "A seed that does not point into JIT-compiled or NGEN code makes DoStackSnapshot fail with "
        "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX (0x8013135F) without any callback.",
        _ASYNC,
        Kind.RETURN_CODE,
        {_M, _L},
        "If you do supply a seed, it must point to JIT-compiled or Native Image Generator "
        "(Ngen.exe)-generated code; otherwise, `DoStackSnapshot` returns the failure code, "
        "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX.",
    ),
    _c(
        "DSS-22",
        "only a never-managed thread suspends",
        "When the profiler suspends threads itself, only a thread that has never run managed code may "
        "suspend another thread.",
        _ASYNC,
        Kind.AUTHOR_RULE,
        {_M, _L, _V},
        "When you directly suspend threads, remember that only a thread that has never run managed code "
        "can suspend another thread.",
    ),
    _c(
        "DSS-23",
        "ThreadDestroyed blocks until the walk ends",
        "The profiler's ThreadDestroyed callback for thread T must not return while a walk of T is in "
        "progress (and T must not be walked afterwards).",
        _ASYNC,
        Kind.AUTHOR_RULE,
        {_M, _V},
        "Always block in your ICorProfilerCallback::ThreadDestroyed callback until that thread's stack "
        "walk is complete.",
    ),
    _c(
        "DSS-24",
        "no lock across a GC-triggering call",
        "A profiler thread must not hold a lock while it calls into a CLR function that can trigger a "
        "garbage collection.",
        _ASYNC,
        Kind.AUTHOR_RULE,
        {_M, _V},
        "Do not hold a lock while your profiler calls into a CLR function that can trigger a garbage "
        "collection.",
    ),
    _c(
        "DSS-25",
        "profiler thread: warm-up walk first",
        "A thread the profiler created must first call DoStackSnapshot on a separate target thread "
        "without suspending it; once such a call succeeds and reports at least one frame, that thread "
        "may suspend targets and walk them.",
        _ASYNC,
        Kind.AUTHOR_RULE,
        {_M, _L},
        "To avoid this deadlock, make an initial call into `DoStackSnapshot` from your profiler-created "
        "thread to walk a separate target thread, but do not suspend the target thread first.",
    ),
    _c(
        "DSS-26",
        "callback failure or S_FALSE",
        "The page does not say what happens when StackSnapshotCallback returns S_FALSE or a failure HRESULT.",
        _REMARKS,
        Kind.AMBIGUITY,
        {_M, _L},
        "",
        question="Does a StackSnapshotCallback returning S_FALSE or a failure stop the walk, and what does "
        "DoStackSnapshot return then?",
        model_choice="Any return other than S_OK (S_FALSE included) stops the walk after that callback; no "
        "further callback happens and DoStackSnapshot returns CORPROF_E_STACKSNAPSHOT_ABORTED "
        "(0x80131361, corerror.xml: 'Stackwalking callback requested the walk to abort'). The code exists "
        "for exactly this case, and the runtime's ProfilerStackWalkCallback continues only on S_OK and "
        "maps the abort to that code.",
    ),
    _c(
        "DSS-27",
        "invalid infoFlags",
        "The page does not say what happens for `infoFlags` bits COR_PRF_SNAPSHOT_INFO does not define "
        "(or X86_OPTIMIZED on other architectures).",
        _PARAMS,
        Kind.AMBIGUITY,
        {_M, _L},
        "",
        question="Are undefined `infoFlags` bits ignored or rejected, and with which HRESULT?",
        model_choice="Rejected with E_INVALIDARG before any callback: the usual COM answer for an argument "
        "outside its enumeration, and what the runtime does. Valid bits: REGISTER_CONTEXT (1) everywhere; "
        "X86_OPTIMIZED (2) on x86 only.",
    ),
    _c(
        "DSS-28",
        "seed required always, or only below helper code?",
        "Parameters require a seed for every asynchronous walk; the Asynchronous section requires one only "
        "when the top of the stack is CLR helper code (not P/Invoke or COM).",
        _ASYNC,
        Kind.AMBIGUITY,
        {_M, _L},
        "An asynchronous walk requires a seed if the top of the stack is unmanaged code that is not part "
        "of a platform invoke (PInvoke) or COM call, but helper code in the CLR itself.",
        question="Is an unseeded asynchronous walk an error, or a walk that may be incomplete?",
        model_choice="Not an error: the model walks without a seed and allows the incompleteness DSS-20 "
        "describes (skipped managed frames at the top, only when helper code is on top). The later, "
        "more specific section describes the consequence of a missing seed instead of a failure code.",
    ),
    _c(
        "DSS-29",
        "invalid seed when the seed would be ignored",
        "DSS-07 says a seed is ignored unless helper code is on top; DSS-21 says a seed outside JIT/NGEN "
        "code fails with CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX.",
        _ASYNC,
        Kind.AMBIGUITY,
        {_M, _L},
        "otherwise, the seed is ignored.",
        question="Is an invalid seed rejected even when the top of the stack is not helper code, or "
        "ignored like any other seed there?",
        model_choice="The model's exact answer is CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX (DSS-21 is about "
        "the seed itself and names a code). When the top of the stack is native or P/Invoke code its "
        "conformance predicate also accepts the unseeded walk (the runtime discards the seed of a thread "
        "in preemptive mode before checking it). With managed code or helper code on top only the error "
        "conforms.",
    ),
    _c(
        "DSS-30",
        "unmanaged code above the first managed frame",
        "The page says a run of unmanaged frames gets a callback, but not whether unmanaged code at the "
        "very top of the stack (the leaf side, above any managed frame) counts as such a run.",
        _REMARKS,
        Kind.AMBIGUITY,
        {_M, _L},
        "once for each managed frame (or run of unmanaged frames) on the stack.",
        question="Is unmanaged code that the walk starts in (native code or a P/Invoke target on top of "
        "the stack, the CLR's own helper code) reported as a FunctionID 0 callback?",
        model_choice="The model reports an unmanaged run only below a managed frame (unmanaged code that "
        "called into managed code): that is where the runtime has a transition frame to report, and a "
        "run on top has no managed caller context to seed a native unwind from. CLR helper code on top "
        "is never reported. A FunctionID 0 callback for native or P/Invoke code on top is accepted by "
        "the conformance predicate as the other reading.",
    ),
)
