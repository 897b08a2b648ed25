"""Asynchronous DoStackSnapshot on live runtimes: cross-thread walks and walks from a signal handler.

The ``async-walks`` scenario parks a target thread (the plan's ``target``, "spinner") in Spin -> Level1 ->
Level2 -> Level3 -> Park, where it spins in a pure managed loop. Before spinning, Park reports its own
stack through reflection (mark ``target.stack``, the ground truth) and marks ``target.register`` (the probe
stores its ThreadID, pthread and gettid). At the main thread's mark ``walk.target`` the probe
(``experiments_async.cpp``) runs the plan's entries:

* ``cross-running``: the main (managed) thread walks the running target, no suspension;
* ``cross-suspended-managed``: the main thread tries ICorProfilerInfo10::SuspendRuntime, then walks;
* ``native-thread``: a new native thread (never ran managed code) makes the DSS-25 warm-up walk of the
  running target, then suspends the runtime, walks the target and resumes;
* ``signal-unseeded`` / ``signal-seeded``: a native thread sends SIGUSR2 to the target; the handler, on
  the target thread, calls DoStackSnapshot(NULL thread) without a seed / seeded with a CONTEXT built from
  its ucontext_t (contextSize 8192, above every runtime's sizeof(CONTEXT)).

Each judge builds the model's input from independent inputs (the reflection stack; the plan entry: the
target, whether the walk is seeded, infoFlags, clientData; the situation the experiment sets up) and
compares the runtime's answer with :mod:`clr_model.stacksnapshot` (through the stack adapter,
:mod:`conformance.adapters.stack`, with the runtime's sizeof(CONTEXT) from
:func:`~conformance.adapters.stack.platform_for`) or :mod:`clr_model.async_safety`. Functions are identified
by (module file name, metadata token) (:mod:`conformance.adapters.identity`); addresses are not compared.

Which unmanaged code is on top: a thread stopped by SuspendRuntime waits in the runtime's suspension code;
a thread walked from inside a signal handler has the runtime's own DoStackSnapshot and the handler above the
interrupted frame. Both are modelled as CLR helper code on top (``UnmanagedFrame(kind="helper")``): the case
where the page allows an unseeded walk to skip top managed frames (DSS-20) and uses a seed (DSS-08). Below
the first frame a managed thread's stack ends in the runtime's native thread start, modelled as one native
frame. Every judge lists every disagreement of its clause, one stable line each (walk, clause, frame index).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clr_model.async_safety import (
    DoStackSnapshotBegin,
    DoStackSnapshotEnd,
    Event,
    ManagedCodeRan,
    ProfilerThreadCreated,
    ResumeThread,
    SuspendThread,
)
from clr_model.async_safety import check as safety_check
from clr_model.context import runtime_context_size
from clr_model.hresults import format_hresult, hresult_failed
from clr_model.stacksnapshot import (
    Os,
    ThreadModel,
    ThreadState,
    author_violations,
    seed_for,
    snapshot,
)
from conformance.adapters import stack as walks
from conformance.adapters.identity import FunctionIdentities, ObservedNames
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, Trace
from conformance.suite.registry import JudgeFn, experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = [
    "ASYNC_WALKS",
    "GroundTruth",
    "ground_truth",
    "judge_dss02",
    "judge_dss06",
    "judge_dss08",
    "judge_dss09",
    "judge_dss13",
    "judge_dss18",
    "judge_dss20",
    "judge_dss22",
    "judge_dss25",
    "judge_dss28",
    "thread_model",
]

SCENARIO = "async-walks"
STACK_MARK = "target.stack"

# experiment entry ids of the scenario's plan.json
CROSS_RUNNING = "cross-running"
CROSS_SUSPENDED_MANAGED = "cross-suspended-managed"
NATIVE_THREAD = "native-thread"
SIGNAL_UNSEEDED = "signal-unseeded"
SIGNAL_SEEDED = "signal-seeded"
REGISTER = "register-spinner"

#: the clauses of the model's walk comparison that judge which frames are reported, in which order
_SEQUENCE_CLAUSES = frozenset({"DSS-03", "DSS-08", "DSS-15", "DSS-16", "DSS-20", "DSS-30"})

#: stable thread numbers for the async_safety events (the rules compare identities only; lines stay stable)
_WALKER, _TARGET, _MAIN = 1, 2, 3

ASYNC_WALKS = experiment("async-walks", scenario=SCENARIO, timeout_s=60.0)


# --------------------------------------------------------------------------------------------------
# Ground truth and the model's thread


@dataclass(frozen=True)
class GroundTruth:
    """The target's own stack (leaf first) from its ``target.stack`` mark."""

    name: str
    frames: tuple[walks.ReflectionFrame, ...]
    seq: int

    def label(self, index: int) -> str:
        return self.frames[index].label


def ground_truth(trace: Trace, name: str) -> GroundTruth:
    """The reflection stack the thread ``name`` reported about itself."""
    for mark in trace.marks(STACK_MARK):
        where = f"{trace.path}: mark {STACK_MARK} (seq {mark.seq})"
        try:
            payload = json.loads(mark.payload or "")
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{where}: payload is not JSON ({exc})") from exc
        if not isinstance(payload, dict) or payload.get("name") != name:
            continue
        stack = payload.get("stack")
        if not isinstance(stack, list) or not stack:
            raise HarnessError(f"{where}: 'stack' must be a non-empty list")
        return GroundTruth(name=name, frames=walks.reflection_frames(stack, f"{where} stack"), seq=mark.seq)
    raise HarnessError(
        f"{trace.path}: no {STACK_MARK} mark for thread {name!r} (the scenario's ground truth)"
    )


def thread_model(truth: GroundTruth, ids: FunctionIdentities | None = None) -> ThreadModel:
    """The target as the model sees it: CLR helper code on top, its managed frames, the native start."""
    return walks.thread_from_reflection(
        truth.frames, ids if ids is not None else FunctionIdentities(), helper_on_top=True
    )


def _target(ev: Evidence, entry: str) -> str:
    target = walks.WalkRequest.from_plan(ev.plan, entry).get("target")
    if not isinstance(target, str) or not target:
        raise walks.WalkInputError(f"plan entry {entry!r}: args.target (the thread to walk) is missing")
    return target


def _walk_name(entry: str, role: str | None) -> str:
    return f"{entry} ({role})" if role and role != entry else entry


def _compare(
    ev: Evidence, entry: str, state: ThreadState, *, role: str | None = None, os: Os = Os.UNIX
) -> tuple[GroundTruth, walks.WalkComparison]:
    """Plan entry ``entry``'s walk (``role``) against the model: the target's reflection stack with helper
    code on top, seeded (the documented seed procedure: the first managed frame) when the plan says so."""
    trace = ev.trace
    request = walks.WalkRequest.from_plan(ev.plan, entry)
    truth = ground_truth(trace, _target(ev, entry))
    walk = walks.need_walk(trace, entry, role)
    ids = FunctionIdentities()
    thread = thread_model(truth, ids)
    seeded = request.get("seed") is True
    # the seed's size as planned when the plan names it; else the probe's own buffer size (8192)
    planned = request.context_size(runtime_context_size(ev.runtime.version)) if seeded else None
    size = planned if planned is not None else int(walk.arg("contextSize") or 0) if seeded else 0
    platform = walks.platform_for(ev.runtime.version, os)
    seed = seed_for(thread) if seeded else None
    model_input = request.model_input(walk, thread, state, platform, seed=seed, context_size=size)
    names = ObservedNames.from_trace(trace)
    return truth, walks.compare_walk(
        _walk_name(entry, role), walk, model_input, ids, names, planned_context_size=planned
    )


def _require_seeded(ev: Evidence, entry: str, seeded: bool) -> None:
    """Z7: the signal walks' judges rely on the plan entry's seed (a seeded / an unseeded walk)."""
    request = walks.WalkRequest.from_plan(ev.plan, entry)
    request.require(request.get("seed") is seeded, f"args.seed {str(seeded).lower()}")


def _lines(*checks: walks.WalkComparison) -> list[str]:
    return [line for c in checks for line in c.lines()]


def _bracket(lines: Sequence[str]) -> str:
    """The first disagreement for the one-line observed text."""
    if not lines:
        return ""
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return f" [{lines[0]}{more}]"


def _judgement(
    lines: Sequence[str],
    observed: str,
    expected: str,
    evidence: Sequence[int],
    picture_of: walks.WalkComparison | None = None,
) -> Judgement:
    picture = picture_of.picture() if picture_of is not None else ()
    return Judgement.from_disagreements(
        lines, observed=observed + _bracket(lines), expected=expected, evidence=evidence, picture=picture
    )


def _both(
    truth: GroundTruth,
    first: walks.WalkComparison,
    second: walks.WalkComparison,
    observed: tuple[str, str],
    expected: tuple[str, str],
) -> Judgement:
    """Two walks of the target, every disagreement of either; the texts name each walk (``observed``,
    ``expected``: the two names in each text), the picture is the second's."""
    return _judgement(
        _lines(first, second),
        f"{observed[0]}: {first.observed_text}; {observed[1]}: {second.observed_text}",
        f"{expected[0]}: {first.expected_text}; {expected[1]}: {second.expected_text}",
        (truth.seq, *first.walk.seqs, *second.walk.seqs),
        second,
    )


def _async_judge(clause: str, what: str, *uses: str) -> Callable[[JudgeFn], JudgeFn]:
    """Register a judge of ``clause`` on the async-walks run, reading the plan entries ``uses``."""
    return judge(clause, ASYNC_WALKS, what=what, uses=uses)


# --------------------------------------------------------------------------------------------------
# Judges


@_async_judge("DSS-02", "walk of a running other thread: the CLR suspends it (page)", CROSS_RUNNING)
def judge_dss02(ev: Evidence) -> Judgement:
    """DSS-02 as the page says it: another thread's ThreadID -> the CLR suspends it, walks, resumes."""
    truth, check = _compare(ev, CROSS_RUNNING, ThreadState.OTHER_SUSPENDED_BY_CLR, os=Os.WINDOWS)
    unix_platform = walks.platform_for(ev.runtime.version, Os.UNIX)
    unix = snapshot(check.input.model_copy(update={"platform": unix_platform}))
    return _judgement(
        check.lines(),
        f"walk of the running target {truth.name} from the main thread: {check.observed_text}",
        f"the CLR suspends the target and walks it: {check.expected_text}"
        f" (the model's Unix profile: {format_hresult(unix.hresult)})",
        (truth.seq, *check.walk.seqs),
        check,
    )


@_async_judge("DSS-06", "a CONTEXT seed's registers start the walk (signal handler)", SIGNAL_SEEDED)
def judge_dss06(ev: Evidence) -> Judgement:
    """DSS-06: the seed is a Win32-layout CONTEXT (the PAL's AMD64 CONTEXT on Linux, built from the
    interrupted ucontext) of contextSize bytes; the runtime reads the walk's start from its registers, so the
    seeded walk starts at the frame those registers describe (the same observation as DSS-08)."""
    seen = judge_dss08(ev)
    return seen.model_copy(
        update={
            "observed": f"PAL AMD64 CONTEXT seed: {seen.observed}",
            "expected": f"the CONTEXT's registers seed the walk: {seen.expected}",
        }
    )


#: the probe's defaults for async_signal_walk's args (experiments_async.cpp) when the plan leaves them out
_REQUIRE_MANAGED_TOP, _MAX_ATTEMPTS = True, 20


def _interrupted_in_leaf(ev: Evidence, entry: str, truth: GroundTruth) -> tuple[bool, str, int]:
    """Did the signal interrupt the target in its leaf frame? GetFunctionFromIP(interrupted ip), the
    function named by (module, token) where the probe resolved it, else by token.

    Y3: a missing GetFunctionFromIP record is an input error (never "not in the leaf"). An interrupted ip
    outside managed code counts as "not in the leaf" only when the probe was allowed to stop there: the
    plan's ``requireManagedTop`` is false, or its ``pthread_kill`` record shows it ran out of retries (all
    the plan's ``maxAttempts`` made, every earlier ip skipped); otherwise it is an input error naming the
    contradiction."""
    trace = ev.trace
    calls = trace.calls("GetFunctionFromIP", entry)
    if not calls:
        raise HarnessError(
            f"{trace.path}: experiment {entry}: no GetFunctionFromIP record for the interrupted ip"
        )
    call = calls[-1]
    func_id = int(call.out.get("functionId") or 0)
    if hresult_failed(call.hr) or func_id == 0:
        answer = f"GetFunctionFromIP {format_hresult(call.hr)}" + ("" if func_id else ", FunctionID 0")
        request = walks.WalkRequest.from_plan(ev.plan, entry)
        require = request.get("requireManagedTop", _REQUIRE_MANAGED_TOP)
        max_attempts = request.number("maxAttempts", _MAX_ATTEMPTS)
        if require is False:
            return (
                False,
                f"the interrupted ip is not managed code ({answer}; requireManagedTop false)",
                call.seq,
            )
        kills = trace.calls("pthread_kill", entry)
        if not kills:
            raise HarnessError(f"{trace.path}: experiment {entry}: no pthread_kill record")
        out = kills[-1].out
        attempts, skipped = out.get("attempts"), out.get("skippedIps")
        if (
            isinstance(attempts, int)
            and attempts >= max_attempts
            and isinstance(skipped, list)
            and len(skipped) == attempts - 1
        ):
            return (
                False,
                f"the interrupted ip is not managed code ({answer}) after {attempts} attempts",
                call.seq,
            )
        shown = len(skipped) if isinstance(skipped, list) else "no"
        raise HarnessError(
            f"{trace.path}: experiment {entry}: the interrupted ip is not managed code ({answer}), yet the"
            f" probe was to resend the signal until it was (requireManagedTop) and its pthread_kill record"
            f" (seq {kills[-1].seq}) shows {attempts} of {max_attempts} attempts with {shown} skipped ip(s)"
        )
    leaf = truth.frames[0]
    key = ObservedNames.from_trace(trace).keys.get(func_id)
    token = int(call.out.get("token") or 0)
    if (key is not None and key != leaf.key) or (key is None and token != leaf.token):
        return False, f"the interrupted ip is in token {token:#x}, not the leaf {leaf.label}", call.seq
    return True, "", call.seq


@_async_judge("DSS-08", "seeded signal-handler walk starts at the seed's frame", SIGNAL_SEEDED)
def judge_dss08(ev: Evidence) -> Judgement:
    """DSS-08: with helper code on top, the seeded walk starts at the seed's frame (Park)."""
    _require_seeded(ev, SIGNAL_SEEDED, True)
    truth, check = _compare(ev, SIGNAL_SEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    in_leaf, why, fseq = _interrupted_in_leaf(ev, SIGNAL_SEEDED, truth)
    evidence = (truth.seq, *check.walk.seqs, fseq)
    if not in_leaf:
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"the seed is not in the leaf frame: {why}",
            expected=f"a seed at {truth.label(0)}",
            evidence=evidence,
        )
    return _judgement(
        check.lines(),
        f"signal handler walk seeded at {truth.label(0)} (contextSize "
        f"{check.walk.arg('contextSize')}): {check.observed_text}",
        f"the walk starts at the seed's frame: {check.expected_text}",
        evidence,
        check,
    )


@_async_judge("DSS-09", "asynchronous walk with the seed the rule asks for", SIGNAL_SEEDED, SIGNAL_UNSEEDED)
def judge_dss09(ev: Evidence) -> Judgement:
    """DSS-09 (author rule, checked live from the runtime's side): the walk the rule asks for (seeded) gives
    the stack; the validator flags the unseeded one, and the runtime does not deliver it either."""
    truth, seeded = _compare(ev, SIGNAL_SEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    _, unseeded = _compare(ev, SIGNAL_UNSEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    rule_seeded = author_violations(seeded.input)
    rule_unseeded = author_violations(unseeded.input)
    if rule_seeded or not any(v.clause == "DSS-09" for v in rule_unseeded):
        raise HarnessError(
            "DSS-09: the model's author rule does not separate the seeded and unseeded walks"
            " (the plan entries' args.seed)"
        )
    return _judgement(
        seeded.lines(),
        f"seeded (rule followed): {seeded.observed_text}; unseeded ({rule_unseeded[0]}): "
        f"{unseeded.observed_text}",
        f"seeded: {seeded.expected_text}",
        (truth.seq, *seeded.walk.seqs, *unseeded.walk.seqs),
        seeded,
    )


@_async_judge("DSS-13", "other threads: E_NOTIMPL running, stack under SuspendRuntime (model)",
              CROSS_RUNNING, NATIVE_THREAD)
def judge_dss13(ev: Evidence) -> Judgement:
    """DSS-13 (ambiguity): the model's choice on Unix: a running other thread -> E_NOTIMPL; a walk while the
    runtime is suspended (SuspendRuntime) -> the target's stack."""
    truth, running = _compare(ev, CROSS_RUNNING, ThreadState.OTHER_SUSPENDED_BY_CLR)
    _, suspended = _compare(ev, NATIVE_THREAD, ThreadState.OTHER_RUNTIME_SUSPENDED, role="suspended")
    names = ("running target", "under SuspendRuntime")
    return _both(truth, running, suspended, names, names)


@_async_judge("DSS-18", "asynchronous walks: other thread and signal-hijacked own thread",
              NATIVE_THREAD, SIGNAL_SEEDED)
def judge_dss18(ev: Evidence) -> Judgement:
    """DSS-18: both kinds of asynchronous walk give the target's stack: another thread (runtime suspended)
    and the current thread hijacked by a signal (seeded from the interrupted context)."""
    truth, other = _compare(ev, NATIVE_THREAD, ThreadState.OTHER_RUNTIME_SUSPENDED, role="suspended")
    _, hijacked = _compare(ev, SIGNAL_SEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    return _both(
        truth,
        other,
        hijacked,
        ("other thread (runtime suspended)", "own thread from a signal handler (seeded)"),
        ("other thread", "signal handler"),
    )


@_async_judge("DSS-20", "unseeded asynchronous walks skip only top managed frames",
              NATIVE_THREAD, SIGNAL_UNSEEDED)
def judge_dss20(ev: Evidence) -> Judgement:
    """DSS-20: unseeded asynchronous walks may skip managed frames at the top, never others. Checked on the
    walk under SuspendRuntime and on the unseeded signal-handler walk (a failed walk that delivers nothing
    skips nothing: DSS-28 judges its HRESULT)."""
    truth, other = _compare(ev, NATIVE_THREAD, ThreadState.OTHER_RUNTIME_SUSPENDED, role="suspended")
    _, signal = _compare(ev, SIGNAL_UNSEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    lines = other.lines()
    signal_note = ""
    if hresult_failed(signal.walk.hr) and not signal.walk.frames:
        signal_note = " (failed, nothing delivered)"
    else:
        # callbacks delivered: they must form one of the walks DSS-20 allows, whatever the HRESULT
        ids = [o.func_id for o in signal.observed]
        allowed = [[c.func_id for c in alt.callbacks] for alt in signal.snapshot.alternatives]
        if ids not in allowed:
            shown = signal.observed_text.split(": ", 1)[-1]
            lines.append(
                f"{signal.name}: DSS-20: the delivered callbacks ({shown}) are not the target's stack less"
                " some top managed frames"
            )
            lines.extend(f"{signal.name}: {v}" for v in signal.violations if v.clause in _SEQUENCE_CLAUSES)
    return _judgement(
        lines,
        f"under SuspendRuntime: {other.observed_text}; signal handler, no seed: {signal.observed_text}"
        f"{signal_note}",
        f"{other.expected_text}; a suffix of the stack that may lack top managed frames only",
        (truth.seq, *other.walk.seqs, *signal.walk.seqs),
        other,
    )


@_async_judge("DSS-28", "unseeded signal-handler walk: error or incomplete walk", SIGNAL_UNSEEDED)
def judge_dss28(ev: Evidence) -> Judgement:
    """DSS-28 (ambiguity): model choice: an unseeded asynchronous walk is no error, it may be incomplete."""
    _require_seeded(ev, SIGNAL_UNSEEDED, False)
    truth, check = _compare(ev, SIGNAL_UNSEEDED, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    in_leaf, why, fseq = _interrupted_in_leaf(ev, SIGNAL_UNSEEDED, truth)
    if not in_leaf:
        # the signal landed in runtime code (a helper or stub), not in the spinning managed frame
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"the signal did not interrupt the leaf managed frame: {why}",
            expected=f"a signal interrupting {truth.label(0)}",
            evidence=(truth.seq, *check.walk.seqs, fseq),
        )
    return _judgement(
        check.lines(),
        f"unseeded DoStackSnapshot(NULL) from a signal handler interrupting {truth.label(0)}: "
        f"{check.observed_text}",
        f"not an error, possibly incomplete: {check.expected_text}",
        (truth.seq, *check.walk.seqs),
        check,
    )


# --------------------------------------------------------------------------------------------------
# Thread suspension rules (async_safety)


def _thread_created(trace: Trace, entry: str) -> CallRecord:
    found = trace.calls("ProfilerThreadCreated", entry)
    if not found:
        raise HarnessError(f"{trace.path}: experiment {entry}: no ProfilerThreadCreated record")
    return found[0]


def _registered(ev: Evidence, target: str) -> CallRecord:
    """The target's registration (the plan entry ``register-spinner`` names the thread it registers)."""
    name = walks.WalkRequest.from_plan(ev.plan, REGISTER).get("name")
    if name != target:
        raise walks.WalkInputError(f"plan entry {REGISTER!r} registers {name!r}, not the target {target!r}")
    for call in ev.trace.calls("GetCurrentThreadID", REGISTER):
        value = call.out.get("threadId")
        if isinstance(value, int) and value > 0:
            return call
    raise HarnessError(
        f"{ev.trace.path}: experiment {REGISTER}: the target thread {target!r} was never registered"
    )


def _describe(walk: walks.TraceWalk, names: ObservedNames) -> str:
    """A walk as the probe resolved it (no ground truth needed): HRESULT and callbacks."""
    labels = [
        names.labels.get(f.funcId, "[unknown function]") if f.funcId else "[unmanaged]" for f in walk.frames
    ]
    return walks.summary(walk.hr, labels)


def _suspend_call(trace: Trace, entry: str) -> CallRecord | None:
    found = trace.calls("SuspendRuntime", entry)
    return found[-1] if found else None


def native_thread_events(trace: Trace) -> tuple[list[Event], list[int], CallRecord | None, walks.TraceWalk]:
    """The native-thread experiment as an async_safety event sequence (+ the seqs it came from, the
    SuspendRuntime call, the warm-up walk). Threads: 1 the native walker, 2 the target."""
    created = _thread_created(trace, NATIVE_THREAD)
    events: list[Event] = [ProfilerThreadCreated(thread=_WALKER)]
    seqs = [created.seq]
    warm = walks.need_walk(trace, NATIVE_THREAD, "warmup")
    events += [
        DoStackSnapshotBegin(by=_WALKER, target=_TARGET),
        DoStackSnapshotEnd(by=_WALKER, target=_TARGET, frames=len(warm.frames), hr=warm.hr),
    ]
    seqs.append(warm.call.seq)
    suspend = _suspend_call(trace, NATIVE_THREAD)
    if suspend is not None and not hresult_failed(suspend.hr):
        walk = walks.need_walk(trace, NATIVE_THREAD, "suspended")
        events += [
            SuspendThread(by=_WALKER, target=_TARGET),
            DoStackSnapshotBegin(by=_WALKER, target=_TARGET),
            DoStackSnapshotEnd(by=_WALKER, target=_TARGET, frames=len(walk.frames), hr=walk.hr),
            ResumeThread(by=_WALKER, target=_TARGET),
        ]
        seqs += [suspend.seq, walk.call.seq]
    return events, seqs, suspend, warm


@_async_judge("DSS-22", "SuspendRuntime from a managed vs a never-managed thread",
              CROSS_SUSPENDED_MANAGED, NATIVE_THREAD, REGISTER)
def judge_dss22(ev: Evidence) -> Judgement:
    """DSS-22: only a thread that never ran managed code may suspend: the model (async_safety) flags the
    main thread's SuspendRuntime and not the native thread's; the runtime refuses and accepts accordingly.
    Which thread ran managed code comes from the plan (``walker``: "self" = the main thread at a mark)."""
    trace = ev.trace
    managed = _suspend_call(trace, CROSS_SUSPENDED_MANAGED)
    native = _suspend_call(trace, NATIVE_THREAD)
    if managed is None or native is None:
        raise HarnessError(
            f"{trace.path}: SuspendRuntime records of {CROSS_SUSPENDED_MANAGED} and {NATIVE_THREAD} needed"
        )
    created = _thread_created(trace, NATIVE_THREAD)
    _registered(ev, _target(ev, NATIVE_THREAD))
    problems: list[str] = []
    parts: list[str] = []
    for entry, call in ((CROSS_SUSPENDED_MANAGED, managed), (NATIVE_THREAD, native)):
        walker = walks.WalkRequest.from_plan(ev.plan, entry).get("walker")
        who = "main thread" if walker == "self" else "native thread"
        start: Event = (
            ManagedCodeRan(thread=_MAIN) if walker == "self" else ProfilerThreadCreated(thread=_MAIN)
        )
        flagged = any(
            v.clause == "DSS-22" for v in safety_check([start, SuspendThread(by=_MAIN, target=_TARGET)])
        )
        accepted = not hresult_failed(call.hr)
        parts.append(f"{who}: SuspendRuntime {format_hresult(call.hr)}")
        if accepted == flagged:
            problems.append(
                f"{entry}: the model {'flags' if flagged else 'allows'} the {who}'s suspension, the runtime "
                f"{'accepted' if accepted else 'refused'} it ({format_hresult(call.hr)})"
            )
    return _judgement(
        problems,
        "; ".join(parts),
        "refused for the thread that ran managed code (DSS-22 violation), accepted for the never-managed"
        " thread",
        (managed.seq, created.seq, native.seq),
    )


@_async_judge("DSS-25", "profiler thread: warm-up walk of a running thread, then suspend",
              NATIVE_THREAD, REGISTER)
def judge_dss25(ev: Evidence) -> Judgement:
    """DSS-25: a profiler-created thread's warm-up walk of a running thread succeeds with >= 1 frame, so the
    documented procedure (warm up, then suspend) can be followed: async_safety finds no DSS-25 violation."""
    trace = ev.trace
    target = _target(ev, NATIVE_THREAD)
    truth = ground_truth(trace, target)
    _registered(ev, target)
    created = _thread_created(trace, NATIVE_THREAD)
    events, seqs, suspend, warm = native_thread_events(trace)
    lines: list[str] = []
    if hresult_failed(warm.hr) or not warm.frames:
        lines.append(
            f"{NATIVE_THREAD} (warmup): DSS-25: the warm-up walk of the running {target} returned "
            f"{format_hresult(warm.hr)} with {len(warm.frames)} callback(s), the procedure needs success with"
            " at least one"
        )
    legend = f" (thread {_WALKER}: the native walker, thread {_TARGET}: {target})"
    lines += [f"{NATIVE_THREAD}: {v}{legend}" for v in safety_check(events) if v.clause == "DSS-25"]
    names = ObservedNames.from_trace(trace)
    after = ""
    if suspend is not None:
        walk = walks.find_walk(trace, NATIVE_THREAD, "suspended")
        after = f"; SuspendRuntime {format_hresult(suspend.hr)}" + (
            f", then {_describe(walk, names)}" if walk else ""
        )
    return _judgement(
        lines,
        f"warm-up walk of running {target} from a native thread (GetCurrentThreadID "
        f"{format_hresult(created.hr)}): {_describe(warm, names)}{after}",
        "the warm-up walk succeeds with >= 1 frame, after which the thread may suspend "
        "(async_safety: no DSS-25 violation)",
        (truth.seq, *seqs, *warm.seqs),
    )
