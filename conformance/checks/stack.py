"""Same-thread DoStackSnapshot checks (area "stack"): one run of the ``stack-walks`` scenario per runtime.

Every judge builds the model's input (:class:`clr_model.stacksnapshot.SnapshotInput`) from independent
inputs and compares the live walk with it through the stack adapter (:mod:`conformance.adapters.stack`):

* the thread: the scenario's own reflection stack (marks ``walk-now``, ``walk-reverse``, ``expect.throw``;
  payload ``{"stack", "above", "nativeAfter"}``, see the scenario), where a P/Invoke method is unmanaged
  code, the frames the probe's walk also sees above the mark (``above``: ``Probe.Mark`` and its P/Invoke
  target), native code between ``nativeAfter`` and the next frame (reverse P/Invoke) and after each index of
  the optional ``dispatched`` (a frame the runtime's native code called: an exception filter funclet, as the
  program declares it from its own structure; StackTrace shows no frame there), CLR helper code on top
  for walks from ExceptionThrown, and the host's native code that calls ``Main`` at the bottom;
* what the harness asked for: the plan entry of the walk (infoFlags, clientData, the callback's replies
  ``abortAt`` / ``abortReply``, the seed's kind, its contextSize by name: "zero", "small" (16), "runtime-1",
  "runtime", "larger" (runtime + 256)); only what the plan leaves to the probe (its default clientData, the
  seed's registers) comes from the call record; a recorded contextSize other than the planned one is a
  DSS-12 disagreement of every clause judging the walk;
* the runtime's sizeof(CONTEXT) from the runtime version (:func:`clr_model.context.runtime_context_size`).

A judge that relies on a property of a plan entry (the infoFlags of ``now-default`` / ``now-regctx``, the
callback's replies of the abort entries, the seeds' kinds, the sizes' names) checks that the entry has it:
a plan that stops exercising the clause is an input error naming the entry, never a quiet verdict.

Managed frames are identified by (module file name, metadata token) (:mod:`conformance.adapters.identity`).
Addresses are not predicted, except for DSS-05: a per-frame CONTEXT's rip must be that frame's ip.
Every judge lists every disagreement of its clause, one stable line each (walk, clause, frame index).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clr_model.context import runtime_context_size
from clr_model.errors import ModelError
from clr_model.hresults import HResult, hresult_failed, name_of
from clr_model.stacksnapshot import (
    COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    COR_PRF_SNAPSHOT_X86_OPTIMIZED,
    ManagedFrame,
    Platform,
    Seed,
    ThreadModel,
    ThreadState,
    UnmanagedFrame,
    Violation,
    function_from_ip,
)
from conformance.adapters.identity import FunctionIdentities, ObservedNames, short_label
from conformance.adapters.stack import (
    ReflectionFrame,
    TraceWalk,
    WalkComparison,
    WalkInputError,
    WalkRequest,
    compare_walk,
    need_walk,
    platform_for,
    reflection_frames,
    thread_from_reflection,
)
from conformance.core.trace import Trace
from conformance.suite.registry import JudgeFn, experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = ["STACK_WALKS", "JudgeInputError"]

STACK_WALKS = experiment("stack-walks", scenario="stack-walks")

_S_OK = int(HResult.S_OK)

#: a missing mark, call record or plan entry: an error verdict, one line
JudgeInputError = WalkInputError


# --------------------------------------------------------------------------------------------------
# Ground truth from the scenario


@dataclass(frozen=True)
class Ground:
    """The scenario's reflection stack at one mark."""

    mark: str
    seq: int
    frames: tuple[ReflectionFrame, ...]
    above: tuple[ReflectionFrame, ...]
    native_after: int
    #: frames the runtime's native code called (an exception filter funclet), as the program declares them
    dispatched: tuple[int, ...] = ()


def _ground(trace: Trace, mark: str) -> Ground:
    marks = trace.marks(mark)
    if not marks or not marks[0].payload:
        raise JudgeInputError(f"{trace.path}: no mark {mark!r} with a payload")
    where = f"{trace.path}: mark {mark!r} (seq {marks[0].seq})"
    try:
        data = json.loads(marks[0].payload)
        stack, above, native_after = data["stack"], data.get("above", []), int(data["nativeAfter"])
        dispatched = tuple(int(i) for i in data.get("dispatched", []))
    except (ValueError, KeyError, TypeError) as exc:
        raise JudgeInputError(f"{where}: bad payload ({exc})") from exc
    return Ground(
        mark,
        marks[0].seq,
        reflection_frames(stack, f"{where} stack"),
        reflection_frames(above, f"{where} above"),
        native_after,
        dispatched,
    )


def _require(ev: Evidence, entry: str, lacks: str, ok: Callable[[WalkRequest], bool]) -> None:
    """Z7: the judge relies on ``ok`` of plan entry ``entry``; without it, an input error naming both."""
    request = WalkRequest.from_plan(ev.plan, entry)
    request.require(ok(request), lacks)


def _flags(request: WalkRequest) -> int:
    return request.number("infoFlags", -1)


def _require_default_and_regctx(ev: Evidence) -> None:
    """``now-default`` walks with COR_PRF_SNAPSHOT_DEFAULT, ``now-regctx`` with REGISTER_CONTEXT."""
    _require(ev, "now-default", "infoFlags COR_PRF_SNAPSHOT_DEFAULT", lambda r: _flags(r) == 0)
    _require(
        ev,
        "now-regctx",
        "infoFlags COR_PRF_SNAPSHOT_REGISTER_CONTEXT",
        lambda r: _flags(r) == COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    )


def _require_seed(ev: Evidence, entry: str, kind: str) -> None:
    _require(ev, entry, f"args.seed {kind!r}", lambda r: r.get("seed") == kind)


# --------------------------------------------------------------------------------------------------
# One walk compared with the model


def _platform(evidence: Evidence) -> Platform:
    return platform_for(evidence.runtime.version)


#: plan ``contextSize`` names of seeds shorter than the runtime's CONTEXT (the others are "runtime", "larger")
_SHORT_SIZES = frozenset({"zero", "runtime-1", "small"})


def _seed(walk: TraceWalk, request: WalkRequest) -> Seed | None:
    """The seed the plan asked for, with the registers the probe put in it (per-run addresses)."""
    kind = request.get("seed")
    if kind is None:
        return None
    ctx = walk.arg("context")
    if not isinstance(ctx, dict) or "rip" not in ctx or "rsp" not in ctx:
        raise JudgeInputError(f"DoStackSnapshot seq {walk.call.seq}: the seed's registers are not recorded")
    # "captured": a managed frame's CONTEXT from the capture walk (JIT code); "native" and "zero" point at a
    # probe function / address 0 (DSS-21: not JIT/NGEN code)
    return Seed(ip=int(ctx["rip"]), sp=int(ctx["rsp"]), in_managed_code=kind == "captured")


def _unchecked_size(size: int, runtime_size: int) -> int:
    """DSS-12 model_choice: the runtime does not check contextSize and reads sizeof(CONTEXT) bytes, so a
    seed whose contextSize is short behaves as a full one (the probe's seed buffer is always large enough)."""
    return max(size, runtime_size)


def compare(
    ev: Evidence,
    entry: str,
    mark: str,
    *,
    in_callback: bool = False,
    context_size_rule: Callable[[int, int], int] | None = None,
) -> WalkComparison:
    """Plan entry ``entry``'s walk against the model built from the mark's ground truth and the plan.

    ``in_callback``: the walk runs inside ExceptionThrown (CLR helper code on top, synchronous); else
    inside the probe's mark export (its P/Invoke target and ``Probe.Mark`` on top)."""
    trace = ev.trace
    request = WalkRequest.from_plan(ev.plan, entry)
    walk = need_walk(trace, entry)
    ground = _ground(trace, mark)
    ids = FunctionIdentities()
    thread = thread_from_reflection(
        ground.frames,
        ids,
        above=() if in_callback else ground.above,
        helper_on_top=in_callback,
        native_after=ground.native_after,
        dispatched=ground.dispatched,
        where=f"{trace.path}: mark {mark!r} (seq {ground.seq})",
    )
    platform = _platform(ev)
    # Y2: the planned size (by name, from the runtime's sizeof(CONTEXT)), never the probe's account of it
    planned = request.context_size(runtime_context_size(ev.runtime.version))
    size = planned if planned is not None else int(walk.arg("contextSize", 0))
    if context_size_rule is not None:
        size = context_size_rule(size, platform.runtime_context_size)
    state = ThreadState.CURRENT_IN_CALLBACK if in_callback else ThreadState.CURRENT_OUTSIDE_CALLBACK
    seed = _seed(walk, request)
    model_input = request.model_input(walk, thread, state, platform, seed=seed, context_size=size)
    return compare_walk(
        entry, walk, model_input, ids, ObservedNames.from_trace(trace), planned_context_size=planned
    )


def _at_mark(ev: Evidence, entry: str, mark: str = "walk-now", **kw: Any) -> WalkComparison:
    return compare(ev, entry, mark, **kw)


def _at_throw(ev: Evidence, entry: str, **kw: Any) -> WalkComparison:
    return compare(ev, entry, "expect.throw", in_callback=True, **kw)


def _verdict(
    checks: Sequence[WalkComparison],
    relevant: Sequence[str] | None,
    extra: Sequence[tuple[WalkComparison, Violation]] = (),
    *,
    picture_of: WalkComparison | None = None,
) -> Judgement:
    """Diverges when any walk has a violation of a ``relevant`` clause (None = any) or an extra problem;
    every one becomes a disagreement line."""
    lines: list[str] = []
    for c in checks:
        lines.extend(c.lines(relevant))
    lines.extend(f"{c.name}: {v}" for c, v in extra)
    observed = "; ".join(f"{c.name}: {c.observed_text}" for c in checks)
    expected = "; ".join(f"{c.name}: {c.expected_text}" for c in checks)
    evidence = tuple(seq for c in checks for seq in c.walk.seqs)
    pic = tuple((picture_of or checks[0]).picture()) if checks else ()
    return Judgement.from_disagreements(
        lines, observed=_first_then(lines, observed), expected=expected, evidence=evidence, picture=pic
    )


def _first_then(lines: Sequence[str], observed: str) -> str:
    """The observed line, led by the first disagreement (and how many more) when there is one."""
    if not lines:
        return observed
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return f"{lines[0]}{more} | {observed}"


def _walks_judge(clause: str, what: str, *uses: str) -> Callable[[JudgeFn], JudgeFn]:
    """Register a judge of ``clause`` on the stack-walks run reading the plan entries ``uses``; a model
    error becomes a one-line harness error naming the judge."""

    def add(fn: JudgeFn) -> JudgeFn:
        @functools.wraps(fn)
        def run(ev: Evidence) -> Judgement:
            try:
                return fn(ev)
            except ModelError as exc:
                raise JudgeInputError(f"{fn.__name__}: the model rejected the input: {exc}") from exc

        return judge(clause, STACK_WALKS, what=what, uses=uses)(run)

    return add


# --------------------------------------------------------------------------------------------------
# Judges


@_walks_judge("DSS-01", "NULL thread: the walk equals the mark's reflection stack", "now-default")
def judge_dss01(ev: Evidence) -> Judgement:
    """NULL thread: the walk is the calling thread's own stack (the reflection stack of the mark)."""
    return _verdict([_at_mark(ev, "now-default")], None)


@_walks_judge("DSS-03", "one callback per managed frame and per unmanaged run (reverse P/Invoke)",
              "reverse-regctx", "now-default")
def judge_dss03(ev: Evidence) -> Judgement:
    checks = [_at_mark(ev, "reverse-regctx", "walk-reverse"), _at_mark(ev, "now-default")]
    return _verdict(checks, ("DSS-03", "DSS-15", "DSS-16"))


@_walks_judge("DSS-04", "clientData reaches every callback unchanged (DEFAULT and REGISTER_CONTEXT walks)",
              "now-default", "now-regctx")
def judge_dss04(ev: Evidence) -> Judgement:
    _require_default_and_regctx(ev)
    return _verdict([_at_mark(ev, "now-default"), _at_mark(ev, "now-regctx")], ("DSS-04",))


def _rip_problems(check: WalkComparison) -> list[tuple[WalkComparison, Violation]]:
    """REGISTER_CONTEXT: the model gives each managed frame a CONTEXT holding that frame's registers."""
    if not check.input.info_flags & COR_PRF_SNAPSHOT_REGISTER_CONTEXT:
        return []
    return [
        (
            check,
            Violation(
                clause="DSS-05",
                message=f"the CONTEXT's rip is not the ip of {short_label(check.ids.label(obs.func_id))}",
                index=i,
            ),
        )
        for i, obs in enumerate(check.observed)
        if obs.func_id and obs.context is not None and obs.context.ip != obs.ip
    ]


@_walks_judge("DSS-05", "DEFAULT: no context; REGISTER_CONTEXT: sizeof(CONTEXT), rip == ip per frame",
              "now-default", "now-regctx")
def judge_dss05(ev: Evidence) -> Judgement:
    if runtime_context_size(ev.runtime.version) is None:
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"sizeof(CONTEXT) of runtime {ev.runtime.version} is not known to the harness",
            expected="a runtime listed in clr_model.context.RUNTIME_CONTEXT_LAYOUTS",
        )
    _require_default_and_regctx(ev)
    default, regctx = _at_mark(ev, "now-default"), _at_mark(ev, "now-regctx")
    return _verdict([default, regctx], ("DSS-05",), _rip_problems(regctx), picture_of=regctx)


@_walks_judge("DSS-07", "a managed frame's CONTEXT as seed, P/Invoke on top: seed ignored, same frames",
              "now-seed-managed")
def judge_dss07(ev: Evidence) -> Judgement:
    _require_seed(ev, "now-seed-managed", "captured")
    return _verdict([_at_mark(ev, "now-seed-managed")], None)


@_walks_judge("DSS-10", "synchronous walk at ExceptionThrown, NULL thread and context: S_OK, complete",
              "throw-sync")
def judge_dss10(ev: Evidence) -> Judgement:
    return _verdict([_at_throw(ev, "throw-sync")], None)


@_walks_judge("DSS-11", "seed with infoFlags 0 (no context flag) below helper code is still honoured",
              "throw-seed-native")
def judge_dss11(ev: Evidence) -> Judgement:
    """No COR_PRF_SNAPSHOT_CONTEXT: a seed with infoFlags 0 (no context flag at all), below helper code;
    the model honours it whatever infoFlags says."""
    _require_seed(ev, "throw-seed-native", "native")
    _require(ev, "throw-seed-native", "infoFlags COR_PRF_SNAPSHOT_DEFAULT", lambda r: _flags(r) == 0)
    return _verdict([_at_throw(ev, "throw-seed-native")], None)


_SIZE_ENTRIES = ("now-size-zero", "now-size-runtime-1", "now-size-small", "now-size-larger")


@_walks_judge("DSS-12", "seed with contextSize 0, sizeof-1, 16, sizeof+256", *_SIZE_ENTRIES)
def judge_dss12(ev: Evidence) -> Judgement:
    checks: list[WalkComparison] = []
    for entry in _SIZE_ENTRIES:
        name = entry.removeprefix("now-size-")
        sized = WalkRequest.from_plan(ev.plan, entry)
        sized.require(sized.get("contextSize") == name, f"args.contextSize {name!r}")
        _require_seed(ev, entry, "captured")
        short = WalkRequest.from_plan(ev.plan, entry).get("contextSize") in _SHORT_SIZES
        checks.append(_at_mark(ev, entry, context_size_rule=_unchecked_size if short else None))
    return _verdict(checks, None)


@_walks_judge("DSS-14", "all callbacks inside the call, on the calling thread, before the return",
              "now-default", "throw-sync")
def judge_dss14(ev: Evidence) -> Judgement:
    """Every callback before DoStackSnapshot returns: frame records delivered inside the call, on the
    calling OS thread, before the call's return; as many as the model's callbacks."""
    checks = [_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")]
    extra: list[tuple[WalkComparison, Violation]] = []

    def problem(c: WalkComparison, index: int | None, message: str) -> None:
        extra.append((c, Violation(clause="DSS-14", message=message, index=index)))

    for c in checks:
        call = c.walk.call
        ret = call.out.get("returnOrder")
        for f in c.walk.frames:
            raw = f.model_dump()
            if raw.get("inCall") is not True:
                problem(c, f.index, "the callback was not delivered inside DoStackSnapshot")
            if raw.get("cbOsTid") is not None and raw.get("cbOsTid") != call.os_tid:
                problem(c, f.index, "the callback ran on another OS thread than the call")
            if ret is not None and raw.get("cbOrder") is not None and int(raw["cbOrder"]) >= int(ret):
                problem(c, f.index, "the callback was delivered after DoStackSnapshot returned")
        predicted = len(c.snapshot.exact.callbacks)
        if len(c.walk.frames) != predicted:
            problem(c, None, f"{len(c.walk.frames)} callbacks before the return, the model has {predicted}")
    return _verdict(checks, ("DSS-14",), extra)


@_walks_judge("DSS-15", "managed -> native -> managed: one FunctionID 0 callback for the native run",
              "reverse-regctx")
def judge_dss15(ev: Evidence) -> Judgement:
    check = _at_mark(ev, "reverse-regctx", "walk-reverse")
    predicted = check.snapshot.exact.callbacks
    # the model must see an unmanaged run between managed frames, or this scenario shows nothing
    if not any(c.func_id == 0 and 0 < i < len(predicted) - 1 for i, c in enumerate(predicted)):
        raise JudgeInputError(
            "DSS-15: the model's thread at mark 'walk-reverse' has no unmanaged run between managed frames"
            " (the scenario's ground truth shows no reverse P/Invoke)"
        )
    return _verdict([check], ("DSS-15", "DSS-03"))


@_walks_judge("DSS-16", "leaf first: order equals the reflection order", "now-default", "throw-sync")
def judge_dss16(ev: Evidence) -> Judgement:
    checks = [_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")]
    return _verdict(checks, ("DSS-16", "DSS-03", "DSS-15"))


@_walks_judge("DSS-17", "synchronous walks from ExceptionThrown and from Initialize",
              "throw-sync", "init-walk")
def judge_dss17(ev: Evidence) -> Judgement:
    """Synchronous walks from inside callbacks: ExceptionThrown (a full stack) and Initialize (no managed
    frame yet: S_OK and no callback)."""
    throw = _at_throw(ev, "throw-sync")
    request = WalkRequest.from_plan(ev.plan, "init-walk")
    walk = need_walk(ev.trace, "init-walk")
    no_frames = ThreadModel(frames=())
    model_input = request.model_input(walk, no_frames, ThreadState.CURRENT_IN_CALLBACK, _platform(ev))
    init = compare_walk(
        "init-walk (Initialize)", walk, model_input, FunctionIdentities(), ObservedNames.from_trace(ev.trace)
    )
    return _verdict([throw, init], None)


@_walks_judge("DSS-19", "GetFunctionFromIP: 0 for native code, the FunctionID for managed ips", "now-from-ip")
def judge_dss19(ev: Evidence) -> Judgement:
    """GetFunctionFromIP: 0 for a probe function's address, the walked FunctionID for a managed frame's ip.

    One disagreement line per (walk, ip kind): the probe's native ip, and each frame's ip by index."""
    trace = ev.trace
    entry = "now-from-ip"
    walk_name = WalkRequest.from_plan(ev.plan, entry).at.removeprefix("mark:") or entry
    walk = need_walk(trace, entry)
    calls = trace.calls("GetFunctionFromIP", entry)
    natives = [c for c in calls if c.args.get("what") == "native"]
    if not natives:
        raise JudgeInputError(f"{trace.path}: no GetFunctionFromIP call for the probe's native address")
    ids = FunctionIdentities()
    if walk_name == "walk-now":
        ground = _ground(trace, "walk-now")
        thread_from_reflection(ground.frames, ids, above=ground.above)  # names the functions
    names = ObservedNames.from_trace(trace)
    frames: list[ManagedFrame | UnmanagedFrame] = [
        UnmanagedFrame(kind="native", ip=int(natives[0].args["ip"]), sp=0)
    ]
    by_ip: dict[int, tuple[int, str]] = {}
    for f in walk.frames:
        label = short_label(ids.label(ids.observed(f.funcId, names)))
        by_ip.setdefault(f.ip, (f.index, label))
        if f.funcId:
            frames.append(ManagedFrame(function_id=f.funcId, ip=f.ip, sp=0))
        else:
            frames.append(UnmanagedFrame(kind="native", ip=f.ip, sp=0))
    thread = ThreadModel(frames=tuple(frames))
    lines: list[str] = []
    parts: list[str] = []
    for c in calls:
        ip = int(c.args["ip"])
        want = function_from_ip(thread, ip)
        got = c.out.get("functionId")
        hr = c.hr & 0xFFFFFFFF
        ok = hr == _S_OK and got == want
        if c.args.get("what") == "native":
            kind, want_text = "native ip of the probe", "FunctionID 0"
        else:
            index, label = by_ip.get(ip, (-1, "?"))
            kind = f"ip of frame #{index}, {label}"
            want_text = "FunctionID 0" if want == 0 else f"the walked FunctionID of {label}"
        if c.args.get("what") == "native" or not ok:
            parts.append(
                f"{c.args.get('what')} ip {ip:#x}: {name_of(hr) or f'{hr:#010x}'}, FunctionID "
                + ("not written" if got is None else f"{int(got):#x}")
            )
        if not ok:
            if hr != _S_OK:
                got_text = name_of(hr) or f"{hr:#010x}"
            elif got is None:
                got_text = "S_OK without writing the FunctionID"
            else:
                got_text = "S_OK with FunctionID 0" if int(got) == 0 else "S_OK with another FunctionID"
            lines.append(
                f"{walk_name}: GetFunctionFromIP({kind}) returned {got_text}, expected S_OK with {want_text}"
            )
    managed = sum(1 for c in calls if c.args.get("what") == "frame")
    observed = f"{len(calls)} calls ({managed} frame ips): " + "; ".join(parts[:3])
    expected = (
        "S_OK; FunctionID 0 for the probe's native address and each unmanaged run,"
        " the walked FunctionID for each managed frame"
    )
    seqs = tuple([*walk.seqs, *(c.seq for c in calls)])
    return Judgement.from_disagreements(
        lines, observed=_first_then(lines, observed), expected=expected, evidence=seqs
    )


@_walks_judge("DSS-21", "seed pointing at a probe function, helper code on top: UNMANAGED_CTX",
              "throw-seed-native")
def judge_dss21(ev: Evidence) -> Judgement:
    _require_seed(ev, "throw-seed-native", "native")
    return _verdict([_at_throw(ev, "throw-seed-native")], None)


@_walks_judge("DSS-26", "callback returns E_FAIL / S_FALSE at frame 2", "now-abort-efail", "now-abort-sfalse")
def judge_dss26(ev: Evidence) -> Judgement:
    """The callback's replies (abortAt, abortReply) come from the plan entries, never from the probe's
    record of what it did: a probe that never aborts gives a full walk where the model stops at frame 2."""
    for entry, want_failure, reply in (
        ("now-abort-efail", True, "a failure HRESULT"),
        ("now-abort-sfalse", False, "S_FALSE"),
    ):
        abort = WalkRequest.from_plan(ev.plan, entry)
        abort.require(abort.number("abortAt", -1) >= 0, "args.abortAt (the frame whose callback aborts)")
        hr = abort.number("abortReply", _S_OK)
        abort.require(hresult_failed(hr) if want_failure else hr == 1, f"args.abortReply {reply}")
    return _verdict([_at_mark(ev, "now-abort-efail"), _at_mark(ev, "now-abort-sfalse")], None)


@_walks_judge("DSS-27", "infoFlags X86_OPTIMIZED on AMD64, and an undefined bit",
              "now-flags-x86", "now-flags-undefined")
def judge_dss27(ev: Evidence) -> Judgement:
    _require(
        ev,
        "now-flags-x86",
        "infoFlags COR_PRF_SNAPSHOT_X86_OPTIMIZED",
        lambda r: _flags(r) == COR_PRF_SNAPSHOT_X86_OPTIMIZED,
    )
    defined = COR_PRF_SNAPSHOT_REGISTER_CONTEXT | COR_PRF_SNAPSHOT_X86_OPTIMIZED
    _require(ev, "now-flags-undefined", "an undefined infoFlags bit", lambda r: _flags(r) & ~defined > 0)
    return _verdict([_at_mark(ev, "now-flags-x86"), _at_mark(ev, "now-flags-undefined")], None)


@_walks_judge("DSS-29", "zeroed seed: P/Invoke on top and helper code on top",
              "now-seed-zero", "throw-seed-zero")
def judge_dss29(ev: Evidence) -> Judgement:
    _require_seed(ev, "now-seed-zero", "zero")
    _require_seed(ev, "throw-seed-zero", "zero")
    return _verdict([_at_mark(ev, "now-seed-zero"), _at_throw(ev, "throw-seed-zero")], None)


@_walks_judge("DSS-30", "unmanaged code on top (P/Invoke target, CLR helper): no leading FunctionID 0",
              "now-default", "throw-sync")
def judge_dss30(ev: Evidence) -> Judgement:
    """Unmanaged code on top (the probe's P/Invoke target at a mark, CLR helper code at ExceptionThrown):
    the model reports no FunctionID 0 callback for it (its DSS-30 choice; a leading run for P/Invoke code is
    accepted as the other reading, one for helper code is not)."""
    return _verdict([_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")], None)
