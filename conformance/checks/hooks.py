"""FunctionEnter2 against reality: enter hooks over known calls of the hooks-enter scenario.

The probe (``experiments_hooks.cpp``) installs, at Initialize, a FunctionIDMapper2 that hooks only the
scenario module's functions and returns ``funcId ^ xor`` as clientData (``xor`` from the plan), and
FunctionEnter2/Leave2/Tailcall2 hooks through ICorProfilerInfo2::SetEnterLeaveFunctionHooks2. The enter hook
records funcId, clientData, func, argumentInfo, the argument ranges with the first bytes at each, and the
result of GetFunctionInfo2(funcId, func) called inside the hook; the records are written at the mark
``fe2.flush``. Each hooked mapping is a ``FunctionIDMapper2`` callback record (token from GetFunctionInfo,
asked without any frame information).

Ground truth comes from the scenario (``conformance/scenarios/hooks-enter``): mark ``fe2.calls`` lists the
methods it called, in order, with their reflection metadata tokens and the argument values and types.

The prediction comes from the model: :func:`clr_model.function_enter.check_hook_events` runs over the hook
events built from the trace, with the target of each entry taken from the scenario's call list (FE2-01),
the mapper's results from the probe's mapper (FE2-02), the hook's own GetFunctionInfo2 call and the
entered function's token (the scenario's reflection token, or the mapper's GetFunctionInfo token for the
other hooked functions) (FE2-03) and the event mask the plan asked for (FE2-04, both halves). For FE2-14
:func:`clr_model.function_enter.predict_argument_ranges` predicts the ranges from the scenario's declared
argument types and values and :func:`clr_model.function_enter.check_argument_info` compares the hook's.

Two runs per runtime: ``fe2-hooks-args`` (COR_PRF_ENABLE_FUNCTION_ARGS | COR_PRF_ENABLE_FRAME_INFO) and
``fe2-hooks-noargs`` (COR_PRF_ENABLE_FRAME_INFO only, so the runtime still takes its slow path and passes a
frame-info handle, but no argument information). The plan is the one the harness wrote (``Evidence.plan``:
the event mask, the ``xor`` of entry ``fe2-hooks``), never the probe's echo of it in the trace header.

Honest n/a: hooks never installed (no SetEnterLeaveFunctionHooks2, no entry) or refused, or an enter buffer
never flushed, make a clause not applicable with the reason (the suite fails it unless an expectation says
so); hooks installed but never called diverge on every clause, one line per call the scenario made. Each
judge lists every disagreement in ``Judgement.disagreements``, naming functions by the scenario's method
name (or metadata token) and calls by their position in the scenario's list, never by funcId or address.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from clr_model.errors import ModelError
from clr_model.flags import CorPrfMonitor
from clr_model.function_enter import (
    ARGUMENT_TYPE_SIZES,
    Argument,
    ArgumentPrediction,
    HookEvent,
    ObservedArgumentInfo,
    ObservedRange,
    check_argument_info,
    check_hook_events,
    predict_argument_ranges,
)
from clr_model.hresults import format_hresult, hresult_failed
from clr_model.violations import Violation
from conformance.core.errors import HarnessError
from conformance.core.trace import CallbackRecord, MarkRecord
from conformance.suite.registry import ExperimentSpec, JudgeFn, experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

SCENARIO = "hooks-enter"
#: the clientData the probe's mapper returns is funcId ^ XOR_MASK
XOR_MASK = 0x0FE6DFDBFF59B2E2
#: argument types a scenario may declare: those the model knows the size of
TYPE_SIZES = ARGUMENT_TYPE_SIZES

C, D, NA = Status.CONFORMS, Status.DIVERGES, Status.NOT_APPLICABLE


#: the plan entries the judges read: the hooks experiment (its ``xor``) and the event mask
USES = ("fe2-hooks", "event_mask")

# --- the experiments ----------------------------------------------------------------------------------
# The scenario's plan.json installs the hooks at Initialize with COR_PRF_ENABLE_FUNCTION_ARGS |
# COR_PRF_ENABLE_FRAME_INFO: the args run is that plan as it is; the noargs run differs only in its event mask
# (numbers until conformance.core.plans resolves symbolic flag names).

FE2_HOOKS_ARGS = experiment("fe2-hooks-args", scenario=SCENARIO)
FE2_HOOKS_NOARGS = experiment(
    "fe2-hooks-noargs",
    scenario=SCENARIO,
    plan_overlay={"event_mask": ["COR_PRF_MONITOR_ENTERLEAVE", "COR_PRF_ENABLE_FRAME_INFO"]},
)


# --- reading the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call the scenario made: method name, reflection token, (type, value) per argument."""

    method: str
    token: int
    args: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Mapped:
    seq: int
    func_id: int
    token: int
    returned: int


@dataclass(frozen=True)
class Enter:
    seq: int
    hook_index: int
    os_tid: int
    func_id: int
    client_data: int
    func: int
    #: argumentInfo and, when it is not NULL, what the hook read through it (the model's reading of it)
    arguments: ObservedArgumentInfo


@dataclass(frozen=True)
class FrameUse:
    seq: int
    hr: int
    token: int | None


@dataclass(frozen=True)
class HookRun:
    mark_seq: int
    calls: tuple[Call, ...]
    event_mask: int
    xor: int
    hooks_hr: int | None
    hooks_seq: int | None
    flushed: bool  # the probe wrote out its enter buffer (enter_leave_flush at mark fe2.flush)
    mappings: dict[int, Mapped]
    enters: tuple[Enter, ...]
    frame_uses: dict[int, FrameUse]  # hook_index -> GetFunctionInfo2 inside that hook


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HarnessError(f"{what}: expected an integer, got {value!r}")
    return value


def _calls(mark: MarkRecord) -> tuple[Call, ...]:
    where = f"mark {mark.name!r} (seq {mark.seq})"
    try:
        payload = json.loads(mark.payload or "")
        raw_calls = payload["calls"]
        calls = []
        for i, c in enumerate(raw_calls):
            args = []
            for j, a in enumerate(c["args"]):
                kind = a["type"]
                if kind not in TYPE_SIZES:
                    raise HarnessError(f"{where}: calls[{i}].args[{j}] has unknown type {kind!r}")
                args.append((str(kind), _int(a["value"], f"{where}: calls[{i}].args[{j}].value")))
            calls.append(Call(str(c["method"]), _int(c["token"], f"{where}: calls[{i}].token"), tuple(args)))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise HarnessError(f"{where}: payload is not a call list ({type(exc).__name__}: {exc})") from exc
    return tuple(calls)


def _xor_of(plan: Mapping[str, Any]) -> int:
    """The ``xor`` the plan gives the probe's mapper (plan entry ``fe2-hooks``, run enter_leave_hooks)."""
    for e in plan.get("experiments", []):
        if isinstance(e, dict) and e.get("run") == "enter_leave_hooks":
            return _int(e.get("args", {}).get("xor", XOR_MASK), "plan enter_leave_hooks args.xor")
    raise HarnessError(
        "the plan has no enter_leave_hooks experiment (entry fe2-hooks): nothing installs the hooks"
    )


def _enter(record: CallbackRecord) -> Enter:
    a = record.args
    where = f"seq {record.seq} FunctionEnter2"
    ranges: list[ObservedRange] = []
    try:
        for i, r in enumerate(a.get("ranges") or []):
            try:
                data = bytes.fromhex(str(r.get("bytes", "")))
            except ValueError as exc:
                raise HarnessError(f"{where}: ranges[{i}].bytes is not hex") from exc
            start = _int(r.get("startAddress"), f"{where}: ranges[{i}].startAddress")
            length = _int(r.get("length"), f"{where}: ranges[{i}].length")
            ranges.append(ObservedRange(start=start, length=length, data=data))
        arguments = ObservedArgumentInfo(
            argument_info=_int(a.get("argumentInfo"), f"{where}: argumentInfo"),
            num_ranges=_int(a["numRanges"], f"{where}: numRanges") if "numRanges" in a else None,
            total_size=_int(a["totalArgumentSize"], f"{where}: totalArgumentSize")
            if "totalArgumentSize" in a
            else None,
            ranges=tuple(ranges),
        )
    except ValidationError as exc:
        raise HarnessError(
            f"{where}: argument ranges are not addresses/lengths "
            f"({exc.error_count()} errors, first: {exc.errors()[0]['msg']})"
        ) from None
    return Enter(
        seq=record.seq,
        hook_index=_int(a.get("hook_index"), f"{where}: hook_index"),
        os_tid=_int(a.get("hook_os_tid", record.os_tid), f"{where}: hook_os_tid"),
        func_id=_int(a.get("funcId"), f"{where}: funcId"),
        client_data=_int(a.get("clientData"), f"{where}: clientData"),
        func=_int(a.get("func"), f"{where}: func"),
        arguments=arguments,
    )


def read_run(evidence: Evidence) -> HookRun:
    """Everything the FE2 judges need from one run; a malformed trace raises HarnessError naming it."""
    trace = evidence.trace
    plan = evidence.plan  # as the harness wrote it; never the probe's echo of it
    mark = trace.mark("fe2.calls")
    hooks_calls = trace.calls("SetEnterLeaveFunctionHooks2")
    mappings: dict[int, Mapped] = {}
    for cb in trace.callbacks():
        if cb.name in ("FunctionIDMapper", "FunctionIDMapper2"):
            where = f"seq {cb.seq} {cb.name}"
            fid = _int(cb.args.get("funcId"), f"{where}: funcId")
            mappings[fid] = Mapped(
                cb.seq,
                fid,
                _int(cb.args.get("token"), f"{where}: token"),
                _int(cb.args.get("returned"), f"{where}: returned"),
            )
    enters = sorted((_enter(cb) for cb in trace.callbacks("FunctionEnter2")), key=lambda e: e.hook_index)
    uses: dict[int, FrameUse] = {}
    for call in trace.calls("GetFunctionInfo2"):
        if call.args.get("inside_hook") and "hook_index" in call.args:
            token = call.out.get("token")
            uses[_int(call.args["hook_index"], f"seq {call.seq}: hook_index")] = FrameUse(
                call.seq, call.hr, token if isinstance(token, int) else None
            )
    return HookRun(
        mark_seq=mark.seq,
        calls=_calls(mark),
        event_mask=_int(plan.get("event_mask", 0), "plan event_mask"),
        xor=_xor_of(plan),
        hooks_hr=hooks_calls[0].hr if hooks_calls else None,
        hooks_seq=hooks_calls[0].seq if hooks_calls else None,
        flushed=bool(trace.calls("enter_leave_flush")),
        mappings=mappings,
        enters=tuple(enters),
        frame_uses=uses,
    )


def target_enters(run: HookRun) -> list[tuple[Enter, int]]:
    """The entries into the scenario's called methods, in hook order, each with its funcId's token.

    A funcId's token comes from the probe's mapper (GetFunctionInfo at JIT time, no frame involved); an entry
    whose funcId the mapper never saw has no token and is not a target."""
    wanted = {c.token for c in run.calls}
    out = []
    for e in run.enters:
        m = run.mappings.get(e.func_id)
        if m is not None and m.token in wanted:
            out.append((e, m.token))
    return out


def _unjudged(run: HookRun, clause: str, expected: str, *, needs_args: bool = False) -> Judgement | None:
    """The verdict when ``clause`` cannot be judged on this run's entries, else None.

    Not applicable when the hooks were never installed (the runtime was not exercised), when ``needs_args``
    and the event mask lacks COR_PRF_ENABLE_FUNCTION_ARGS, or when not one FunctionEnter2 was recorded and
    the probe never wrote its enter buffer out (nothing recorded to judge); diverges when the buffer was
    written out, yet the runtime never called the enter hook."""
    if run.hooks_hr is not None and hresult_failed(run.hooks_hr):
        return Judgement(
            status=NA,
            observed=f"SetEnterLeaveFunctionHooks2 failed: {format_hresult(run.hooks_hr)}; {clause} "
            "cannot be judged",
            expected="S_OK at Initialize (plan entry fe2-hooks)",
            evidence=(run.hooks_seq or 0,),
        )
    if run.hooks_hr is None and not run.enters:
        return Judgement(
            status=NA,
            observed=f"the probe never called SetEnterLeaveFunctionHooks2 (plan entry fe2-hooks) and no "
            f"FunctionEnter2 was recorded: {clause} cannot be judged",
            expected="the ELT hooks installed at Initialize",
            evidence=(run.mark_seq,),
        )
    if needs_args and not run.event_mask & CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS:
        return Judgement(
            status=NA,
            observed=f"event mask {run.event_mask:#x} has no COR_PRF_ENABLE_FUNCTION_ARGS",
            expected="argument ranges only with COR_PRF_ENABLE_FUNCTION_ARGS",
        )
    if run.enters:
        return None
    if run.flushed:
        observed = (
            f"SetEnterLeaveFunctionHooks2 returned S_OK, yet the runtime never called the enter hook: "
            f"0 FunctionEnter2 for the scenario's {len(run.calls)} calls"
        )
        lines = [f"call {k} {c.method}: no FunctionEnter2" for k, c in enumerate(run.calls, 1)]
    else:
        observed = (
            f"no FunctionEnter2 record and the probe never flushed its enter buffer (plan entry "
            f"fe2-flush at mark fe2.flush): {clause} cannot be judged"
        )
        lines = []
    return Judgement(
        status=D if run.flushed else NA,
        observed=observed,
        expected=expected,
        evidence=(run.mark_seq,),
        disagreements=tuple(lines),
    )


def _model_events(
    run: HookRun, enters: Sequence[Enter], targets: Mapping[int, int] | None = None, with_frames: bool = False
) -> tuple[list[HookEvent], list[int]]:
    """Model input: set_event_mask, the mapper's results, then enter [use_frame_info] leave per entry.

    ``targets``: hook_index -> the funcId the scenario says control passes to. Each entry carries the
    entered function's token from the mapper record (for the scenario's called methods that is the
    scenario's reflection token: :func:`target_enters` selects them by it). Returns the events and, for
    each, the trace seq that shows it."""
    events = [HookEvent(kind="set_event_mask", mask=run.event_mask)]
    seqs = [run.hooks_seq or 0]
    for m in run.mappings.values():
        events.append(HookEvent(kind="mapper", func_id=m.func_id, client_data=m.returned))
        seqs.append(m.seq)
    for e in enters:
        if e.func_id not in run.mappings:  # not recorded (not hooked): the mapper returned funcId ^ xor
            events.append(HookEvent(kind="mapper", func_id=e.func_id, client_data=e.func_id ^ run.xor))
            seqs.append(e.seq)
        target = targets.get(e.hook_index) if targets is not None else None
        mapped = run.mappings.get(e.func_id)
        events.append(
            HookEvent(
                kind="enter",
                thread=e.os_tid,
                func_id=e.func_id,
                client_data=e.client_data,
                func=e.func,
                argument_info=e.arguments.argument_info,
                target=target,
                token=mapped.token if mapped is not None else None,
            )
        )
        seqs.append(e.seq)
        use = run.frame_uses.get(e.hook_index)
        if with_frames and use is not None:
            events.append(
                HookEvent(
                    kind="use_frame_info",
                    thread=e.os_tid,
                    func=e.func,
                    api="GetFunctionInfo2",
                    hr=use.hr,
                    token=use.token,
                )
            )
            seqs.append(use.seq)
        events.append(HookEvent(kind="leave", thread=e.os_tid))
        seqs.append(e.seq)
    return events, seqs


def _violations(
    run: HookRun, clause: str, events: list[HookEvent], seqs: list[int]
) -> list[tuple[Violation, int]]:
    found = check_hook_events(events, event_mask=run.event_mask, mapper_installed=True)
    return [(v, seqs[v.index] if v.index is not None else 0) for v in found if v.clause == clause]


def _hex(token: int) -> str:
    return f"{token:#010x}"




def _who(run: HookRun, e: Enter) -> str:
    """A stable name for an entry's function: the scenario's method name, else its metadata token."""
    mapped = run.mappings.get(e.func_id)
    if mapped is None:
        return "a function the mapper never saw"
    names = {c.token: c.method for c in run.calls}
    return names.get(mapped.token, f"function {_hex(mapped.token)}")


def _by_seq(run: HookRun) -> dict[int, Enter]:
    """Entry of each enter record and of each in-hook GetFunctionInfo2 record, by trace seq."""
    out = {e.seq: e for e in run.enters}
    for e in run.enters:
        use = run.frame_uses.get(e.hook_index)
        if use is not None:
            out[use.seq] = e
    return out


def _stable(run: HookRun, found: list[tuple[Violation, int]], what: Callable[[Violation], str]) -> list[str]:
    """One line per violation, naming the entered function (no funcIds, addresses or hook positions)."""
    entries = _by_seq(run)
    lines = []
    for v, seq in found:
        e = entries.get(seq)
        lines.append(f"{_who(run, e) if e is not None else 'an entry'}: {what(v)}")
    return list(dict.fromkeys(lines))


# --- judges -------------------------------------------------------------------------------------------


def _fe2_judge(
    clause: str, what: str, experiment: ExperimentSpec = FE2_HOOKS_ARGS
) -> Callable[[JudgeFn], JudgeFn]:
    """Register a judge of ``clause`` on a hooks run; every one reads the plan entries :data:`USES`."""
    return judge(clause, experiment, what=what, uses=USES)


@_fe2_judge("FE2-01", "FunctionEnter2 funcId = the called method (reflection token, call order)")
def judge_fe2_01(evidence: Evidence) -> Judgement:
    """FE2-01: the entries into the called methods carry their funcIds, in the scenario's call order."""
    run = read_run(evidence)
    want = "entries into " + ", ".join(f"{c.method} {_hex(c.token)}" for c in run.calls)
    if (unjudged := _unjudged(run, "FE2-01", want)) is not None:
        return unjudged
    expected = [c.token for c in run.calls]
    found = target_enters(run)
    observed_tokens = [t for _, t in found]
    names = {c.token: c.method for c in run.calls}
    token_to_func = {m.token: m.func_id for m in run.mappings.values()}
    # Align the entries with the calls (a missing or extra entry is one disagreement, not a shift of all
    # the later ones); the model is told, for each aligned entry, where control passes (FE2-01).
    lines: list[str] = []
    targets: dict[int, int] = {}
    call_of: dict[int, int] = {}  # entry seq -> index of the call it is aligned with
    matcher = difflib.SequenceMatcher(a=expected, b=observed_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        paired = min(i2 - i1, j2 - j1) if tag in ("equal", "replace") else 0
        for i, j in zip(range(i1, i1 + paired), range(j1, j1 + paired), strict=True):
            entry = found[j][0]
            call_of[entry.seq] = i
            if run.calls[i].token in token_to_func:
                targets[entry.hook_index] = token_to_func[run.calls[i].token]
        lines += [f"call {i + 1} {run.calls[i].method}: no entry" for i in range(i1 + paired, i2)]
        lines += [
            f"entry into {names.get(observed_tokens[j], '?')}: no such call at that point"
            for j in range(j1 + paired, j2)
        ]
    events, seqs = _model_events(run, [e for e, _ in found], targets)
    bad = _violations(run, "FE2-01", events, seqs)
    for _v, seq in bad:
        if seq in call_of:
            i = call_of[seq]
            into = names.get(found[[e.seq for e, _ in found].index(seq)][1], "?")
            lines.append(f"call {i + 1} {run.calls[i].method}: the entry's funcId is {into}'s")
    picture = tuple(
        {"label": names.get(t, _hex(t)), "ok": i < len(expected) and t == expected[i]}
        for i, t in enumerate(observed_tokens)
    )
    ev = (run.mark_seq, *(e.seq for e, _ in found))
    got = ", ".join(f"{names.get(t, '?')} {_hex(t)}" for t in observed_tokens) or "none"
    observed = f"{len(found)} entries: {got}"
    if lines:
        observed = bad[0][0].message if bad else f"{len(found)} entries ({got})"
        ev += tuple(s for _, s in bad[:5])
    return Judgement.from_disagreements(lines, observed=observed, expected=want, evidence=ev, picture=picture)


@_fe2_judge("FE2-02", "clientData = the FunctionIDMapper2 result for funcId")
def judge_fe2_02(evidence: Evidence) -> Judgement:
    """FE2-02: every entry's clientData is what the mapper returned for its funcId (funcId ^ xor)."""
    run = read_run(evidence)
    expected = f"clientData = the mapper's result for funcId (funcId ^ {run.xor:#x}) on every entry"
    if (unjudged := _unjudged(run, "FE2-02", expected)) is not None:
        return unjudged
    events, seqs = _model_events(run, run.enters)
    bad = _violations(run, "FE2-02", events, seqs)
    # the mapper's own results against its documented rule: a probe bug must not pass as conformance
    wrong_mapper = [m for m in run.mappings.values() if m.returned != m.func_id ^ run.xor]
    n = len(run.enters)
    expected = f"clientData = the mapper's result for funcId (funcId ^ {run.xor:#x}) on all {n} entries"
    if wrong_mapper:
        m = wrong_mapper[0]
        return Judgement(
            status=Status.ERROR,
            observed=f"probe mapper returned {m.returned:#x} for {m.func_id:#x}",
            expected=expected,
            evidence=(m.seq,),
        )
    lines = _stable(run, bad, lambda v: "clientData is not the mapper's result for funcId")
    if bad:
        observed = f"{len(bad)} of {len(run.enters)} entries differ; first: {bad[0][0].message}"
        ev = tuple(s for _, s in bad[:20])
    else:
        observed = (
            f"{len(run.enters)} entries, {len(run.mappings)} mapped functions: "
            "clientData always the mapper's result"
        )
        ev = tuple(e.seq for e in run.enters[:20])
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=ev)


def _frame_info_problem(v: Violation) -> str:
    if "refused" in v.message:
        return f"GetFunctionInfo2 refused the hook's frame info: {v.message.rsplit(': ', 1)[-1]}"
    return "GetFunctionInfo2 with the hook's frame info names another function"


@_fe2_judge("FE2-03", "GetFunctionInfo2(funcId, func) inside the hook: S_OK, same token")
def judge_fe2_03(evidence: Evidence) -> Judgement:
    """FE2-03: GetFunctionInfo2(funcId, func) inside the hook accepts func and names the entered method."""
    run = read_run(evidence)
    expected = "S_OK and the entered method's token from GetFunctionInfo2(funcId, func) in every hook"
    if (unjudged := _unjudged(run, "FE2-03", expected)) is not None:
        return unjudged
    found = target_enters(run)
    events, seqs = _model_events(run, run.enters, with_frames=True)
    violations = _violations(run, "FE2-03", events, seqs)
    bad = [f"{v.message} (seq {s})" for v, s in violations]
    lines = _stable(run, violations, _frame_info_problem)
    if not found:
        bad.append("no entry into a called method")
        lines.append("no entry into any of the scenario's called methods")
    ev: list[int] = []
    for e in run.enters:
        use = run.frame_uses.get(e.hook_index)
        if use is None:  # the record the model needs is missing: the probe did not do its part
            bad.append(f"no GetFunctionInfo2 record for hook #{e.hook_index} (seq {e.seq})")
            lines.append(f"{_who(run, e)}: no in-hook GetFunctionInfo2 record")
            continue
        ev.append(use.seq)
        if not hresult_failed(use.hr) and use.token is None:
            bad.append(f"GetFunctionInfo2 in hook #{e.hook_index} succeeded without a token (seq {use.seq})")
            lines.append(f"{_who(run, e)}: GetFunctionInfo2 succeeded without a token")
    observed = (
        f"{len(bad)} problems; first: {bad[0]}"
        if bad
        else f"{len(ev)} in-hook GetFunctionInfo2 calls: S_OK, tokens match ({len(found)} into the called "
        "methods)"
    )
    evidence_seqs = tuple(ev[:20]) or (run.mark_seq,)
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=evidence_seqs)


@_fe2_judge("FE2-04", "argumentInfo present with COR_PRF_ENABLE_FUNCTION_ARGS")
@_fe2_judge("FE2-04", "argumentInfo NULL without COR_PRF_ENABLE_FUNCTION_ARGS", FE2_HOOKS_NOARGS)
def judge_fe2_04(evidence: Evidence) -> Judgement:
    """FE2-04: argumentInfo NULL without COR_PRF_ENABLE_FUNCTION_ARGS, present with it."""
    run = read_run(evidence)
    with_args = bool(run.event_mask & CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS)
    flag = (
        f"event mask {run.event_mask:#x} ({'with' if with_args else 'without'} COR_PRF_ENABLE_FUNCTION_ARGS)"
    )
    if with_args:
        expected = f"{flag}: argumentInfo non-NULL in every entry"
    else:
        expected = f"{flag}: argumentInfo NULL in every entry"
    if (unjudged := _unjudged(run, "FE2-04", expected)) is not None:
        return unjudged
    events, seqs = _model_events(run, run.enters)
    violations = _violations(run, "FE2-04", events, seqs)
    present = [e for e in run.enters if e.arguments.argument_info]
    observed = f"{flag}: argumentInfo non-NULL in {len(present)} of {len(run.enters)} entries"
    if violations:
        v, s = violations[0]
        observed += f"; first: {v.message} (seq {s})"
    lines = _stable(run, violations, lambda v: v.message)
    ev = tuple(e.seq for e in run.enters[:20])
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=ev)


def _predicted_args(call: Call) -> ArgumentPrediction:
    try:
        return predict_argument_ranges([Argument(type=k, value=v) for k, v in call.args])
    except ModelError as exc:
        raise HarnessError(f"mark fe2.calls: {call.method}: {exc}") from None


@_fe2_judge("FE2-14", "argument ranges hold the scenario's int/long arguments")
def judge_fe2_14(evidence: Evidence) -> Judgement:
    """FE2-14: the argument ranges locate the arguments: one range per argument, of the type's size, holding
    the value the scenario passed; totalArgumentSize is their sum."""
    run = read_run(evidence)
    expected = "one range per argument, sized by its type, holding the value passed: " + "; ".join(
        f"{c.method}({', '.join(str(v) for _, v in c.args)})" for c in run.calls
    )
    if (unjudged := _unjudged(run, "FE2-14", expected, needs_args=True)) is not None:
        return unjudged
    found = target_enters(run)
    bad: list[str] = []
    lines: list[str] = []
    if len(found) != len(run.calls):
        bad.append(f"{len(found)} entries into the called methods for {len(run.calls)} calls")
        lines += [f"call {k} {c.method}: no entry" for k, c in enumerate(run.calls, 1) if k > len(found)]
    picture = []
    for k, ((e, token), call) in enumerate(zip(found, run.calls, strict=False), 1):
        problems = []
        if token != call.token:
            problems.append(f"entry is {_hex(token)}, call is {call.method}")
        else:
            problems += [v.message for v in check_argument_info(e.arguments, _predicted_args(call))]
        picture.append(
            {"label": f"{call.method}({', '.join(str(v) for _, v in call.args)})", "ok": not problems}
        )
        bad += [f"{call.method} (seq {e.seq}): {p}" for p in problems]
        lines += [f"call {k} {call.method}: {p}" for p in problems]
    n = sum(len(c.args) for c in run.calls)
    # more entries than calls is a problem without a line of its own: the verdict follows the problems
    return Judgement(
        status=D if bad else C,
        observed=f"{len(bad)} problems; first: {bad[0]}" if bad
        else f"{n} arguments of {len(found)} calls read back from their ranges",
        expected=expected,
        evidence=(run.mark_seq, *(e.seq for e, _ in found)),
        picture=tuple(picture),
        disagreements=tuple(dict.fromkeys(lines)),
    )
