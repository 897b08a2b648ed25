"""Asynchronous DoStackSnapshot on live runtimes: cross-thread walks and walks from a signal handler.

The ``async-walks`` scenario parks a target thread ("spinner") in Spin -> Level1 -> Level2 -> Level3 -> Park,
where it spins in a pure managed loop. Before spinning, Park reports its own stack through reflection (mark
``target.stack``, the ground truth) and marks ``target.register`` (the probe stores its ThreadID, pthread and
gettid). At the main thread's mark ``walk.target`` the probe (``experiments_async.cpp``):

* ``cross-running``: the main (managed) thread walks the running target, no suspension;
* ``cross-suspended-managed``: the main thread tries ICorProfilerInfo10::SuspendRuntime, then walks;
* ``native-thread``: a new native thread (never ran managed code) makes the DSS-25 warm-up walk of the
  running target, then suspends the runtime, walks the target and resumes;
* ``signal-unseeded`` / ``signal-seeded``: a native thread sends SIGUSR2 to the target; the handler, on
  the target thread, calls DoStackSnapshot(NULL thread) without a seed / seeded with a CONTEXT built from
  its ucontext_t (contextSize 8192, above every runtime's sizeof(CONTEXT)).

Each judge builds the model's input from the ground truth (the reflection stack, the call's arguments, the
situation the experiment set up) and compares the runtime's answer with :mod:`clr_model.stacksnapshot` or
:mod:`clr_model.async_safety`. Real FunctionIDs and addresses are unknown to the ground truth, so managed
frames get synthetic ids (their index + 1 in the reflection stack) and observed frames are mapped to them
by (token, type, method); addresses are not compared.

Which unmanaged code is on top: a thread stopped by SuspendRuntime waits in the runtime's suspension code;
a thread walked from inside a signal handler has the runtime's own DoStackSnapshot and the handler above the
interrupted frame. Both are modelled as CLR helper code on top (``UnmanagedFrame(kind="helper")``): the case
where the page allows an unseeded walk to skip top managed frames (DSS-20) and uses a seed (DSS-08). Below
the first frame a managed thread's stack ends in the runtime's native thread start, modelled as one native
frame.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from clr_model.hresults import HResult, format_hresult, hresult_failed
from clr_model.stacksnapshot import (
    FrameContext,
    ManagedFrame,
    ObservedCallback,
    Os,
    Platform,
    Seed,
    SnapshotInput,
    ThreadModel,
    ThreadState,
    UnmanagedFrame,
    Violation,
    author_violations,
    snapshot,
)
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, FrameRecord, ProbeErrorRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = [
    "TARGET",
    "GroundTruth",
    "LiveWalk",
    "ground_truth",
    "judge_dss02",
    "judge_dss08",
    "judge_dss09",
    "judge_dss13",
    "judge_dss18",
    "judge_dss20",
    "judge_dss22",
    "judge_dss25",
    "judge_dss28",
    "live_walk",
    "thread_model",
]

SCENARIO = "async-walks"
TARGET = "spinner"
STACK_MARK = "target.stack"
_S_OK = HResult.S_OK.value
_FOREIGN_ID_BASE = 1_000_000  # synthetic ids of observed frames that match no ground-truth frame

# experiment ids of the scenario's plan.json
CROSS_RUNNING = "cross-running"
CROSS_SUSPENDED_MANAGED = "cross-suspended-managed"
NATIVE_THREAD = "native-thread"
SIGNAL_UNSEEDED = "signal-unseeded"
SIGNAL_SEEDED = "signal-seeded"
REGISTER = "register-spinner"


# --------------------------------------------------------------------------------------------------
# Ground truth and observed walks


@dataclass(frozen=True)
class GroundTruth:
    """The target's own stack (leaf first) from its ``target.stack`` mark."""

    frames: tuple[dict[str, Any], ...]
    seq: int

    def key(self, index: int) -> tuple[int, str, str]:
        f = self.frames[index]
        return int(f.get("token") or 0), str(f.get("type")), str(f.get("method"))

    def label(self, index: int) -> str:
        f = self.frames[index]
        return f"{f.get('type')}::{f.get('method')}"


def ground_truth(trace: Trace, name: str = TARGET) -> GroundTruth:
    for mark in trace.marks(STACK_MARK):
        try:
            payload = json.loads(mark.payload or "")
        except json.JSONDecodeError as exc:
            raise HarnessError(
                f"{trace.path}: mark {STACK_MARK} (seq {mark.seq}): payload is not JSON ({exc})"
            ) from exc
        if not isinstance(payload, dict) or payload.get("name") != name:
            continue
        stack = payload.get("stack")
        if not isinstance(stack, list) or not stack or not all(isinstance(f, dict) for f in stack):
            raise HarnessError(
                f"{trace.path}: mark {STACK_MARK} (seq {mark.seq}): 'stack' must be a non-empty list"
            )
        return GroundTruth(frames=tuple(stack), seq=mark.seq)
    raise HarnessError(
        f"{trace.path}: no {STACK_MARK} mark for thread {name!r} (the scenario's ground truth)"
    )


def thread_model(truth: GroundTruth, *, top: str | None = "helper") -> ThreadModel:
    """The target as the model sees it: [unmanaged top], managed frames (synthetic ids), native start."""
    frames: list[ManagedFrame | UnmanagedFrame] = []
    if top is not None:
        frames.append(UnmanagedFrame.model_validate({"kind": top, "ip": 0x10, "sp": 0x100}))
    for i in range(len(truth.frames)):
        frames.append(ManagedFrame(function_id=i + 1, ip=0x1000 * (i + 1), sp=0x1000 * (i + 1) + 0x100))
    n = len(truth.frames) + 1
    frames.append(UnmanagedFrame(kind="native", ip=0x1000 * n, sp=0x1000 * n + 0x100))
    return ThreadModel(frames=tuple(frames))


def park_seed(truth: GroundTruth) -> Seed:
    """A seed at the leaf managed frame (Park, where the target spins): the model frame 1's registers."""
    return Seed(ip=0x1000, sp=0x1100, in_managed_code=True)


@dataclass(frozen=True)
class LiveWalk:
    """One DoStackSnapshot the probe recorded, with its frames and their ground-truth ids."""

    call: CallRecord
    frames: tuple[FrameRecord, ...]
    resolved: tuple[dict[str, Any], ...]

    @property
    def hr(self) -> int:
        return self.call.hr

    @property
    def client_data(self) -> int:
        return int(self.call.args.get("clientData") or 0)

    @property
    def info_flags(self) -> int:
        return int(self.call.args.get("infoFlags") or 0)

    @property
    def evidence(self) -> tuple[int, ...]:
        return (self.call.seq, *(f.seq for f in self.frames))

    def observed(self, truth: GroundTruth) -> list[ObservedCallback]:
        keys = {truth.key(i): i + 1 for i in range(len(truth.frames))}
        out: list[ObservedCallback] = []
        for index, frame in enumerate(self.frames):
            if frame.funcId == 0:
                fid = 0
            else:
                info = self.resolved[index] if index < len(self.resolved) else {}
                key = (int(info.get("token") or 0), str(info.get("type")), str(info.get("method")))
                fid = keys.get(key, _FOREIGN_ID_BASE + index)
            ctx = frame.context
            out.append(
                ObservedCallback(
                    func_id=fid,
                    ip=frame.ip,
                    client_data=frame.clientData,
                    context_size=frame.contextSize,
                    context=None if ctx is None else FrameContext(ip=ctx.rip, sp=ctx.rsp),
                    hr=frame.hr,
                )
            )
        return out

    def labels(self) -> list[str]:
        labels = []
        for index, frame in enumerate(self.frames):
            info = self.resolved[index] if index < len(self.resolved) else {}
            if frame.funcId == 0:
                labels.append("[unmanaged]")
            else:
                labels.append(f"{info.get('type') or '?'}::{info.get('method') or '?'}")
        return labels

    def describe(self) -> str:
        names = [label.rsplit("::", 1)[-1] for label in self.labels()]
        shown = " > ".join(names) if names else "no callback"
        return f"{format_hresult(self.hr)}, {len(self.frames)} callback(s): {shown}"


def live_walk(trace: Trace, experiment: str, role: str | None = None) -> LiveWalk | None:
    """The DoStackSnapshot call of ``experiment`` (with args.role == role when given), or None."""
    for call in trace.calls("DoStackSnapshot", experiment):
        if role is not None and call.args.get("role") != role:
            continue
        walk = call.args.get("walk")
        frames = tuple(trace.frames(int(walk))) if isinstance(walk, int) else ()
        resolved = call.out.get("frames") or []
        return LiveWalk(call=call, frames=frames, resolved=tuple(r for r in resolved if isinstance(r, dict)))
    return None


def _need(trace: Trace, experiment: str, role: str | None = None) -> LiveWalk:
    walk = live_walk(trace, experiment, role)
    if walk is None:
        problems = [p.what for p in trace.of_kind(ProbeErrorRecord) if p.where == experiment]
        why = "; ".join(problems) or "no DoStackSnapshot call record"
        raise HarnessError(f"{trace.path}: experiment {experiment}{f' ({role})' if role else ''}: {why}")
    return walk


def _suspend_call(trace: Trace, experiment: str) -> CallRecord | None:
    found = trace.calls("SuspendRuntime", experiment)
    return found[-1] if found else None


def _model_input(
    truth: GroundTruth, walk: LiveWalk, state: ThreadState, *, platform: Os = Os.UNIX, seeded: bool = False
) -> SnapshotInput:
    seed = park_seed(truth) if seeded else None
    return SnapshotInput(
        thread=thread_model(truth, top="helper"),
        state=state,
        info_flags=walk.info_flags,
        seed=seed,
        context_size=int(walk.call.args.get("contextSize") or 0) if seeded else 0,
        client_data=walk.client_data,
        platform=Platform(os=platform),
    )


def _compare(inp: SnapshotInput, walk: LiveWalk, truth: GroundTruth) -> list[Violation]:
    return snapshot(inp).conforms(walk.observed(truth), walk.hr, compare_addresses=False)


def _predicted(inp: SnapshotInput, truth: GroundTruth) -> str:
    snap = snapshot(inp)
    exact = snap.exact
    names = []
    for cb in exact.callbacks:
        names.append("[unmanaged]" if cb.func_id == 0 else truth.label(cb.func_id - 1).rsplit("::", 1)[-1])
    shown = " > ".join(names) if names else "no callback"
    extra = (
        f" (or up to {snap.may_skip_top_managed} top managed frame(s) skipped)"
        if snap.may_skip_top_managed
        else ""
    )
    return f"{format_hresult(exact.hresult)}, {len(exact.callbacks)} callback(s): {shown}{extra}"


def _picture(inp: SnapshotInput, walk: LiveWalk, truth: GroundTruth) -> tuple[dict[str, Any], ...]:
    """Observed frames, each ok when it sits where one of the model's allowed walks has it."""
    observed = walk.observed(truth)
    alternatives = [alt.callbacks for alt in snapshot(inp).alternatives]
    pictures = []
    for index, (label, obs) in enumerate(zip(walk.labels(), observed, strict=True)):
        ok = any(index < len(alt) and alt[index].func_id == obs.func_id for alt in alternatives)
        pictures.append({"label": label, "ok": ok})
    return tuple(pictures)


def _first(violations: Sequence[Violation]) -> str:
    return str(violations[0]) if violations else ""


# --------------------------------------------------------------------------------------------------
# Judges


def judge_dss02(ev: Evidence) -> Judgement:
    """DSS-02 as the page says it: another thread's ThreadID -> the CLR suspends it, walks, resumes."""
    trace = ev.trace
    truth = ground_truth(trace)
    walk = _need(trace, CROSS_RUNNING)
    inp = _model_input(truth, walk, ThreadState.OTHER_SUSPENDED_BY_CLR, platform=Os.WINDOWS)
    problems = _compare(inp, walk, truth)
    unix = snapshot(inp.model_copy(update={"platform": Platform(os=Os.UNIX)}))
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"walk of the running target {TARGET} from the main thread: {walk.describe()}"
        + (f" [{_first(problems)}]" if problems else ""),
        expected=f"the CLR suspends the target and walks it: {_predicted(inp, truth)}"
        f" (the model's Unix profile: {format_hresult(unix.hresult)})",
        evidence=(truth.seq, *walk.evidence),
        picture=_picture(inp, walk, truth),
    )


def judge_dss13(ev: Evidence) -> Judgement:
    """DSS-13 (ambiguity): the model's choice on Unix: a running other thread -> E_NOTIMPL; a walk while the
    runtime is suspended (SuspendRuntime) -> the target's stack."""
    trace = ev.trace
    truth = ground_truth(trace)
    running = _need(trace, CROSS_RUNNING)
    suspended = _need(trace, NATIVE_THREAD, "suspended")
    in_running = _model_input(truth, running, ThreadState.OTHER_SUSPENDED_BY_CLR)
    in_suspended = _model_input(truth, suspended, ThreadState.OTHER_RUNTIME_SUSPENDED)
    p1 = _compare(in_running, running, truth)
    p2 = _compare(in_suspended, suspended, truth)
    problems = [*p1, *p2]
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"running target: {running.describe()}; under SuspendRuntime: {suspended.describe()}"
        + (f" [{_first(problems)}]" if problems else ""),
        expected=f"running target: {_predicted(in_running, truth)}; under SuspendRuntime: "
        f"{_predicted(in_suspended, truth)}",
        evidence=(truth.seq, *running.evidence, *suspended.evidence),
        picture=_picture(in_suspended, suspended, truth),
    )


def judge_dss18(ev: Evidence) -> Judgement:
    """DSS-18: both kinds of asynchronous walk give the target's stack: another thread (runtime suspended)
    and the current thread hijacked by a signal (seeded from the interrupted context)."""
    trace = ev.trace
    truth = ground_truth(trace)
    other = _need(trace, NATIVE_THREAD, "suspended")
    hijacked = _need(trace, SIGNAL_SEEDED)
    in_other = _model_input(truth, other, ThreadState.OTHER_RUNTIME_SUSPENDED)
    in_hijacked = _model_input(truth, hijacked, ThreadState.CURRENT_SIGNAL_INTERRUPTED, seeded=True)
    problems = [*_compare(in_other, other, truth), *_compare(in_hijacked, hijacked, truth)]
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"other thread (runtime suspended): {other.describe()}; own thread from a signal handler "
        f"(seeded): {hijacked.describe()}" + (f" [{_first(problems)}]" if problems else ""),
        expected=f"other thread: {_predicted(in_other, truth)}; "
        f"signal handler: {_predicted(in_hijacked, truth)}",
        evidence=(truth.seq, *other.evidence, *hijacked.evidence),
        picture=_picture(in_hijacked, hijacked, truth),
    )


def _interrupted_in_leaf(trace: Trace, experiment: str, truth: GroundTruth) -> tuple[bool, str, int | None]:
    """Did the signal interrupt the target in its leaf frame (Park)? GetFunctionFromIP(interrupted ip)."""
    calls = trace.calls("GetFunctionFromIP", experiment)
    if not calls:
        return False, "no GetFunctionFromIP record for the interrupted ip", None
    call = calls[-1]
    token = int(call.out.get("token") or 0)
    leaf_token = truth.key(0)[0]
    if hresult_failed(call.hr) or int(call.out.get("functionId") or 0) == 0:
        return (
            False,
            f"the interrupted ip is not managed code (GetFunctionFromIP {format_hresult(call.hr)})",
            call.seq,
        )
    if token != leaf_token:
        return False, f"the interrupted ip is in token {token:#x}, not the leaf {truth.label(0)}", call.seq
    return True, "", call.seq


def judge_dss08(ev: Evidence) -> Judgement:
    """DSS-08: with helper code on top, the seeded walk starts at the seed's frame (Park)."""
    trace = ev.trace
    truth = ground_truth(trace)
    walk = _need(trace, SIGNAL_SEEDED)
    in_leaf, why, fseq = _interrupted_in_leaf(trace, SIGNAL_SEEDED, truth)
    evidence = (truth.seq, *walk.evidence, *((fseq,) if fseq is not None else ()))
    if not in_leaf:
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"the seed is not in the leaf frame: {why}",
            expected=f"a seed at {truth.label(0)}",
            evidence=evidence,
        )
    inp = _model_input(truth, walk, ThreadState.CURRENT_SIGNAL_INTERRUPTED, seeded=True)
    problems = _compare(inp, walk, truth)
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"signal handler walk seeded at {truth.label(0)} (contextSize "
        f"{walk.call.args.get('contextSize')}): {walk.describe()}"
        + (f" [{_first(problems)}]" if problems else ""),
        expected=f"the walk starts at the seed's frame: {_predicted(inp, truth)}",
        evidence=evidence,
        picture=_picture(inp, walk, truth),
    )


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


def judge_dss09(ev: Evidence) -> Judgement:
    """DSS-09 (author rule, checked live from the runtime's side): the walk the rule asks for (seeded) gives
    the stack; the validator flags the unseeded one, and the runtime does not deliver it either."""
    trace = ev.trace
    truth = ground_truth(trace)
    seeded = _need(trace, SIGNAL_SEEDED)
    unseeded = _need(trace, SIGNAL_UNSEEDED)
    in_seeded = _model_input(truth, seeded, ThreadState.CURRENT_SIGNAL_INTERRUPTED, seeded=True)
    in_unseeded = _model_input(truth, unseeded, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    rule_seeded = author_violations(in_seeded)
    rule_unseeded = author_violations(in_unseeded)
    if rule_seeded or not any(v.clause == "DSS-09" for v in rule_unseeded):
        raise HarnessError("DSS-09: the model's author rule does not separate the seeded and unseeded walks")
    problems = _compare(in_seeded, seeded, truth)
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"seeded (rule followed): {seeded.describe()}; unseeded ({rule_unseeded[0]}): "
        f"{unseeded.describe()}" + (f" [{_first(problems)}]" if problems else ""),
        expected=f"seeded: {_predicted(in_seeded, truth)}",
        evidence=(truth.seq, *seeded.evidence, *unseeded.evidence),
        picture=_picture(in_seeded, seeded, truth),
    )


def judge_dss20(ev: Evidence) -> Judgement:
    """DSS-20: unseeded asynchronous walks may skip managed frames at the top, never others. Checked on the
    walk under SuspendRuntime and on the unseeded signal-handler walk (a failed walk that delivers nothing
    skips nothing: DSS-28 judges its HRESULT)."""
    trace = ev.trace
    truth = ground_truth(trace)
    other = _need(trace, NATIVE_THREAD, "suspended")
    signal = _need(trace, SIGNAL_UNSEEDED)
    in_other = _model_input(truth, other, ThreadState.OTHER_RUNTIME_SUSPENDED)
    in_signal = _model_input(truth, signal, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    problems = list(_compare(in_other, other, truth))
    signal_note = ""
    if hresult_failed(signal.hr) and not signal.frames:
        signal_note = " (failed, nothing delivered)"
    else:
        # callbacks delivered: they must form one of the walks DSS-20 allows, whatever the HRESULT
        observed = signal.observed(truth)
        allowed = [alt.callbacks for alt in snapshot(in_signal).alternatives]
        if not any([c.func_id for c in alt] == [o.func_id for o in observed] for alt in allowed):
            problems.append(
                Violation(
                    clause="DSS-20",
                    message="the unseeded signal-handler walk is not the target's stack "
                    "less some top managed frames",
                )
            )
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"under SuspendRuntime: {other.describe()}; signal handler, no seed: {signal.describe()}"
        f"{signal_note}" + (f" [{_first(problems)}]" if problems else ""),
        expected=f"{_predicted(in_other, truth)}; "
        "a suffix of the stack that may lack top managed frames only",
        evidence=(truth.seq, *other.evidence, *signal.evidence),
        picture=_picture(in_other, other, truth),
    )


def judge_dss28(ev: Evidence) -> Judgement:
    """DSS-28 (ambiguity): model choice: an unseeded asynchronous walk is no error, it may be incomplete."""
    trace = ev.trace
    truth = ground_truth(trace)
    walk = _need(trace, SIGNAL_UNSEEDED)
    in_leaf, why, fseq = _interrupted_in_leaf(trace, SIGNAL_UNSEEDED, truth)
    if not in_leaf:
        # the signal landed in runtime code (a helper or stub), not in the spinning managed frame
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"the signal did not interrupt the leaf managed frame: {why}",
            expected=f"a signal interrupting {truth.label(0)}",
            evidence=(truth.seq, *walk.evidence, *((fseq,) if fseq is not None else ())),
        )
    inp = _model_input(truth, walk, ThreadState.CURRENT_SIGNAL_INTERRUPTED)
    problems = _compare(inp, walk, truth)
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed=f"unseeded DoStackSnapshot(NULL) from a signal handler interrupting {truth.label(0)}: "
        f"{walk.describe()}" + (f" [{_first(problems)}]" if problems else ""),
        expected=f"not an error, possibly incomplete: {_predicted(inp, truth)}",
        evidence=(truth.seq, *walk.evidence),
        picture=_picture(inp, walk, truth),
    )


def _thread_created(trace: Trace, experiment: str) -> CallRecord:
    found = trace.calls("ProfilerThreadCreated", experiment)
    if not found:
        raise HarnessError(f"{trace.path}: experiment {experiment}: no ProfilerThreadCreated record")
    return found[0]


def _target_id(trace: Trace) -> int:
    """The target's ThreadID as registered (the async_register_thread record)."""
    for call in trace.calls("GetCurrentThreadID", REGISTER):
        value = call.out.get("threadId")
        if isinstance(value, int) and value > 0:
            return value
    raise HarnessError(
        f"{trace.path}: experiment {REGISTER}: the target thread {TARGET!r} was never registered"
    )


def native_thread_events(trace: Trace) -> tuple[list[Event], list[int], CallRecord | None]:
    """The native-thread experiment as an async_safety event sequence (+ the seqs it came from)."""
    created = _thread_created(trace, NATIVE_THREAD)
    walker = created.os_tid
    target = _target_id(trace)
    events: list[Event] = [ProfilerThreadCreated(thread=walker)]
    seqs = [created.seq]
    warm = _need(trace, NATIVE_THREAD, "warmup")
    events += [
        DoStackSnapshotBegin(by=walker, target=target),
        DoStackSnapshotEnd(by=walker, target=target, frames=len(warm.frames), hr=warm.hr),
    ]
    seqs.append(warm.call.seq)
    suspend = _suspend_call(trace, NATIVE_THREAD)
    if suspend is not None and not hresult_failed(suspend.hr):
        walk = _need(trace, NATIVE_THREAD, "suspended")
        events += [
            SuspendThread(by=walker, target=target),
            DoStackSnapshotBegin(by=walker, target=target),
            DoStackSnapshotEnd(by=walker, target=target, frames=len(walk.frames), hr=walk.hr),
            ResumeThread(by=walker, target=target),
        ]
        seqs += [suspend.seq, walk.call.seq]
    return events, seqs, suspend


def judge_dss25(ev: Evidence) -> Judgement:
    """DSS-25: a profiler-created thread's warm-up walk of a running thread succeeds with >= 1 frame, so the
    documented procedure (warm up, then suspend) can be followed: async_safety finds no DSS-25 violation."""
    trace = ev.trace
    truth = ground_truth(trace)
    created = _thread_created(trace, NATIVE_THREAD)
    warm = _need(trace, NATIVE_THREAD, "warmup")
    events, seqs, suspend = native_thread_events(trace)
    violations = [v for v in safety_check(events) if v.clause == "DSS-25"]
    warm_ok = not hresult_failed(warm.hr) and len(warm.frames) >= 1
    after = ""
    if suspend is not None:
        walk = live_walk(trace, NATIVE_THREAD, "suspended")
        after = f"; SuspendRuntime {format_hresult(suspend.hr)}" + (
            f", then {walk.describe()}" if walk else ""
        )
    return Judgement(
        status=Status.CONFORMS if warm_ok and not violations else Status.DIVERGES,
        observed=f"warm-up walk of running {TARGET} from a native thread (GetCurrentThreadID "
        f"{format_hresult(created.hr)}): {warm.describe()}{after}"
        + (f" [{violations[0]}]" if violations else ""),
        expected="the warm-up walk succeeds with >= 1 frame, after which the thread may suspend "
        "(async_safety: no DSS-25 violation)",
        evidence=(truth.seq, *seqs, *warm.evidence),
    )


def judge_dss22(ev: Evidence) -> Judgement:
    """DSS-22: only a thread that never ran managed code may suspend: the model (async_safety) flags the
    main thread's SuspendRuntime and not the native thread's; the runtime refuses and accepts accordingly."""
    trace = ev.trace
    managed = _suspend_call(trace, CROSS_SUSPENDED_MANAGED)
    native = _suspend_call(trace, NATIVE_THREAD)
    if managed is None or native is None:
        raise HarnessError(
            f"{trace.path}: SuspendRuntime records of {CROSS_SUSPENDED_MANAGED} and {NATIVE_THREAD} needed"
        )
    created = _thread_created(trace, NATIVE_THREAD)
    target = _target_id(trace)
    rows: list[tuple[str, CallRecord, list[Event]]] = [
        (
            "main thread",
            managed,
            [ManagedCodeRan(thread=managed.os_tid), SuspendThread(by=managed.os_tid, target=target)],
        ),
        (
            "native thread",
            native,
            [ProfilerThreadCreated(thread=native.os_tid), SuspendThread(by=native.os_tid, target=target)],
        ),
    ]
    problems: list[str] = []
    parts: list[str] = []
    for who, call, events in rows:
        flagged = any(v.clause == "DSS-22" for v in safety_check(events))
        accepted = not hresult_failed(call.hr)
        parts.append(f"{who}: SuspendRuntime {format_hresult(call.hr)}")
        if accepted == flagged:
            problems.append(
                f"{who}: the model {'flags' if flagged else 'allows'} the suspension, the runtime "
                f"{'accepted' if accepted else 'refused'} it"
            )
    return Judgement(
        status=Status.DIVERGES if problems else Status.CONFORMS,
        observed="; ".join(parts) + (f" [{problems[0]}]" if problems else ""),
        expected="refused for the thread that ran managed code (DSS-22 violation), "
        "accepted for the never-managed thread",
        evidence=(managed.seq, created.seq, native.seq),
    )


_WHAT = "async-walks: cross-thread and signal-handler DoStackSnapshot against the model"

ASYNC_WALKS = experiment("async-walks", scenario=SCENARIO, timeout_s=60.0)
for _clause, _fn, _what in (
    ("DSS-02", judge_dss02, "walk of a running other thread: the CLR suspends it (page)"),
    ("DSS-06", judge_dss06, "a CONTEXT seed's registers start the walk (signal handler)"),
    ("DSS-08", judge_dss08, "seeded signal-handler walk starts at the seed's frame"),
    ("DSS-09", judge_dss09, "asynchronous walk with the seed the rule asks for"),
    ("DSS-13", judge_dss13, "other threads: E_NOTIMPL running, stack under SuspendRuntime (model)"),
    ("DSS-18", judge_dss18, "asynchronous walks: other thread and signal-hijacked own thread"),
    ("DSS-20", judge_dss20, "unseeded asynchronous walks skip only top managed frames"),
    ("DSS-22", judge_dss22, "SuspendRuntime from a managed vs a never-managed thread"),
    ("DSS-25", judge_dss25, "profiler thread: warm-up walk of a running thread, then suspend"),
    ("DSS-28", judge_dss28, "unseeded signal-handler walk: error or incomplete walk"),
):
    judge(_clause, ASYNC_WALKS, what=_what)(_fn)
