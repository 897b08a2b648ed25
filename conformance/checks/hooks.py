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
frame-info handle, but no argument information).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from clr_model.errors import ModelError
from clr_model.flags import CorPrfMonitor
from clr_model.function_enter import (
    ARGUMENT_TYPE_SIZES,
    COR_PRF_ENABLE_FRAME_INFO,
    COR_PRF_ENABLE_FUNCTION_ARGS,
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
from conformance.core.trace import CallbackRecord, MarkRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

SCENARIO = "hooks-enter"
COR_PRF_MONITOR_ENTERLEAVE = int(CorPrfMonitor.COR_PRF_MONITOR_ENTERLEAVE)
#: the clientData the probe's mapper returns is funcId ^ XOR_MASK
XOR_MASK = 0x0FE6DFDBFF59B2E2
#: argument types a scenario may declare: those the model knows the size of
TYPE_SIZES = ARGUMENT_TYPE_SIZES

C, D, NA = Status.CONFORMS, Status.DIVERGES, Status.NOT_APPLICABLE


def hooks_plan(function_args: bool) -> dict[str, Any]:
    """The probe plan of one run: hooks at Initialize, the buffer written at mark fe2.flush."""
    mask = COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FRAME_INFO
    if function_args:
        mask |= COR_PRF_ENABLE_FUNCTION_ARGS
    return {
        "version": 1,
        "event_mask": mask,
        "event_mask_hi": 0,
        "record": [],
        "count": [],
        "experiments": [
            {
                "id": "fe2-hooks",
                "at": "Initialize",
                "run": "enter_leave_hooks",
                "args": {"module": "app.dll", "xor": XOR_MASK, "mapper": 2},
                "times": 1,
            },
            {"id": "fe2-flush", "at": "mark:fe2.flush", "run": "enter_leave_flush", "args": {}, "times": 0},
        ],
    }


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
class Range:
    start: int
    length: int
    data: bytes


@dataclass(frozen=True)
class Enter:
    seq: int
    hook_index: int
    os_tid: int
    func_id: int
    client_data: int
    func: int
    argument_info: int
    num_ranges: int | None
    total_size: int | None
    ranges: tuple[Range, ...]


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
    mappings: dict[int, Mapped]
    enters: tuple[Enter, ...]
    frame_uses: dict[int, FrameUse]  # hook_index -> GetFunctionInfo2 inside that hook


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HarnessError(f"{what}: expected an integer, got {value!r}")
    return value


def _mark(trace: Trace, name: str) -> MarkRecord:
    found = trace.marks(name)
    if len(found) != 1:
        raise HarnessError(
            f"{trace.path}: expected one mark {name!r}, found {len(found)} (did the scenario run?)"
        )
    return found[0]


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


def _plan_of(evidence: Evidence) -> Mapping[str, Any]:
    if evidence.plan:
        return evidence.plan
    header = evidence.trace.header
    return header.plan if header is not None else {}


def _xor_of(plan: Mapping[str, Any]) -> int:
    for e in plan.get("experiments", []):
        if isinstance(e, dict) and e.get("run") == "enter_leave_hooks":
            return _int(e.get("args", {}).get("xor", XOR_MASK), "plan enter_leave_hooks args.xor")
    raise HarnessError("the plan has no enter_leave_hooks experiment")


def _enter(record: CallbackRecord) -> Enter:
    a = record.args
    where = f"seq {record.seq} FunctionEnter2"
    ranges = []
    for i, r in enumerate(a.get("ranges") or []):
        try:
            data = bytes.fromhex(str(r.get("bytes", "")))
        except ValueError as exc:
            raise HarnessError(f"{where}: ranges[{i}].bytes is not hex") from exc
        ranges.append(
            Range(
                _int(r.get("startAddress"), f"{where}: ranges[{i}].startAddress"),
                _int(r.get("length"), f"{where}: ranges[{i}].length"),
                data,
            )
        )
    return Enter(
        seq=record.seq,
        hook_index=_int(a.get("hook_index"), f"{where}: hook_index"),
        os_tid=_int(a.get("hook_os_tid", record.os_tid), f"{where}: hook_os_tid"),
        func_id=_int(a.get("funcId"), f"{where}: funcId"),
        client_data=_int(a.get("clientData"), f"{where}: clientData"),
        func=_int(a.get("func"), f"{where}: func"),
        argument_info=_int(a.get("argumentInfo"), f"{where}: argumentInfo"),
        num_ranges=_int(a["numRanges"], f"{where}: numRanges") if "numRanges" in a else None,
        total_size=_int(a["totalArgumentSize"], f"{where}: totalArgumentSize")
        if "totalArgumentSize" in a
        else None,
        ranges=tuple(ranges),
    )


def read_run(evidence: Evidence) -> HookRun:
    """Everything the FE2 judges need from one run; a malformed trace raises HarnessError naming it."""
    trace = evidence.trace
    plan = _plan_of(evidence)
    mark = _mark(trace, "fe2.calls")
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


def _not_hooked(run: HookRun) -> Judgement | None:
    """Not applicable when the hooks could not be installed or never fired (nothing to judge)."""
    if run.hooks_hr is None:
        return Judgement(
            status=NA,
            observed="the probe never called SetEnterLeaveFunctionHooks2",
            expected="hooks installed at Initialize",
        )
    if hresult_failed(run.hooks_hr):
        return Judgement(
            status=NA,
            observed=f"SetEnterLeaveFunctionHooks2 failed: {format_hresult(run.hooks_hr)}",
            expected="S_OK at Initialize",
            evidence=(run.hooks_seq or 0,),
        )
    return None


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
                argument_info=e.argument_info,
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


# --- judges -------------------------------------------------------------------------------------------


def judge_fe2_01(evidence: Evidence) -> Judgement:
    """FE2-01: the entries into the called methods carry their funcIds, in the scenario's call order."""
    run = read_run(evidence)
    if (na := _not_hooked(run)) is not None:
        return na
    expected = [c.token for c in run.calls]
    found = target_enters(run)
    token_to_func = {m.token: m.func_id for m in run.mappings.values()}
    targets: dict[int, int] = {}
    for (e, _), call in zip(found, run.calls, strict=False):
        if call.token in token_to_func:
            targets[e.hook_index] = token_to_func[call.token]
    events, seqs = _model_events(run, [e for e, _ in found], targets)
    bad = _violations(run, "FE2-01", events, seqs)
    observed_tokens = [t for _, t in found]
    names = {c.token: c.method for c in run.calls}
    picture = tuple(
        {"label": names.get(t, _hex(t)), "ok": i < len(expected) and t == expected[i]}
        for i, t in enumerate(observed_tokens)
    )
    ev = (run.mark_seq, *(e.seq for e, _ in found))
    want = "entries into " + ", ".join(f"{c.method} {_hex(c.token)}" for c in run.calls)
    got = ", ".join(f"{names.get(t, '?')} {_hex(t)}" for t in observed_tokens) or "none"
    if observed_tokens == expected and not bad:
        return Judgement(
            status=C, observed=f"{len(found)} entries: {got}", expected=want, evidence=ev, picture=picture
        )
    why = bad[0][0].message if bad else f"{len(found)} entries ({got})"
    return Judgement(
        status=D, observed=why, expected=want, evidence=ev + tuple(s for _, s in bad[:5]), picture=picture
    )


def judge_fe2_02(evidence: Evidence) -> Judgement:
    """FE2-02: every entry's clientData is what the mapper returned for its funcId (funcId ^ xor)."""
    run = read_run(evidence)
    if (na := _not_hooked(run)) is not None:
        return na
    if not run.enters:
        return Judgement(
            status=D,
            observed="no FunctionEnter2 call at all",
            expected="one per hooked call",
            evidence=(run.mark_seq,),
        )
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
    if not bad:
        return Judgement(
            status=C,
            observed=f"{len(run.enters)} entries, {len(run.mappings)} mapped functions: "
            "clientData always the mapper's result",
            expected=expected,
            evidence=tuple(e.seq for e in run.enters[:20]),
        )
    return Judgement(
        status=D,
        observed=f"{len(bad)} of {len(run.enters)} entries differ; first: {bad[0][0].message}",
        expected=expected,
        evidence=tuple(s for _, s in bad[:20]),
    )


def judge_fe2_03(evidence: Evidence) -> Judgement:
    """FE2-03: GetFunctionInfo2(funcId, func) inside the hook accepts func and names the entered method."""
    run = read_run(evidence)
    if (na := _not_hooked(run)) is not None:
        return na
    found = target_enters(run)
    if not found:
        return Judgement(
            status=D,
            observed="no entry into a called method",
            expected="one per call",
            evidence=(run.mark_seq,),
        )
    events, seqs = _model_events(run, run.enters, with_frames=True)
    bad = [f"{v.message} (seq {s})" for v, s in _violations(run, "FE2-03", events, seqs)]
    ev: list[int] = []
    for e in run.enters:
        use = run.frame_uses.get(e.hook_index)
        if use is None:  # the record the model needs is missing: the probe did not do its part
            bad.append(f"no GetFunctionInfo2 record for hook #{e.hook_index} (seq {e.seq})")
            continue
        ev.append(use.seq)
        if not hresult_failed(use.hr) and use.token is None:
            bad.append(f"GetFunctionInfo2 in hook #{e.hook_index} succeeded without a token (seq {use.seq})")
    expected = "S_OK and the entered method's token from GetFunctionInfo2(funcId, func) in every hook"
    if not bad:
        return Judgement(
            status=C,
            observed=f"{len(ev)} in-hook GetFunctionInfo2 calls: S_OK, tokens match "
            f"({len(found)} into the called methods)",
            expected=expected,
            evidence=tuple(ev[:20]),
        )
    return Judgement(
        status=D, observed=f"{len(bad)} problems; first: {bad[0]}", expected=expected, evidence=tuple(ev[:20])
    )


def judge_fe2_04(evidence: Evidence) -> Judgement:
    """FE2-04: argumentInfo NULL without COR_PRF_ENABLE_FUNCTION_ARGS, present with it."""
    run = read_run(evidence)
    if (na := _not_hooked(run)) is not None:
        return na
    if not run.enters:
        return Judgement(
            status=D,
            observed="no FunctionEnter2 call at all",
            expected="one per hooked call",
            evidence=(run.mark_seq,),
        )
    with_args = bool(run.event_mask & COR_PRF_ENABLE_FUNCTION_ARGS)
    events, seqs = _model_events(run, run.enters)
    bad = [f"{v.message} (seq {s})" for v, s in _violations(run, "FE2-04", events, seqs)]
    present = [e for e in run.enters if e.argument_info]
    flag = (
        f"event mask {run.event_mask:#x} ({'with' if with_args else 'without'} COR_PRF_ENABLE_FUNCTION_ARGS)"
    )
    if with_args:
        expected = f"{flag}: argumentInfo non-NULL in every entry"
    else:
        expected = f"{flag}: argumentInfo NULL in every entry"
    observed = f"{flag}: argumentInfo non-NULL in {len(present)} of {len(run.enters)} entries"
    ev = tuple(e.seq for e in run.enters[:20])
    if not bad:
        return Judgement(status=C, observed=observed, expected=expected, evidence=ev)
    return Judgement(status=D, observed=f"{observed}; first: {bad[0]}", expected=expected, evidence=ev)


def _observed_args(e: Enter) -> ObservedArgumentInfo:
    try:
        return ObservedArgumentInfo(
            argument_info=e.argument_info,
            num_ranges=e.num_ranges,
            total_size=e.total_size,
            ranges=tuple(ObservedRange(start=r.start, length=r.length, data=r.data) for r in e.ranges),
        )
    except ValidationError as exc:
        raise HarnessError(
            f"seq {e.seq} FunctionEnter2: argument ranges are not addresses/lengths "
            f"({exc.error_count()} errors, first: {exc.errors()[0]['msg']})"
        ) from None


def _predicted_args(call: Call) -> ArgumentPrediction:
    try:
        return predict_argument_ranges([Argument(type=k, value=v) for k, v in call.args])
    except ModelError as exc:
        raise HarnessError(f"mark fe2.calls: {call.method}: {exc}") from None


def judge_fe2_14(evidence: Evidence) -> Judgement:
    """FE2-14: the argument ranges locate the arguments: one range per argument, of the type's size, holding
    the value the scenario passed; totalArgumentSize is their sum."""
    run = read_run(evidence)
    if (na := _not_hooked(run)) is not None:
        return na
    if not run.event_mask & COR_PRF_ENABLE_FUNCTION_ARGS:
        return Judgement(
            status=NA,
            observed=f"event mask {run.event_mask:#x} has no COR_PRF_ENABLE_FUNCTION_ARGS",
            expected="argument ranges only with COR_PRF_ENABLE_FUNCTION_ARGS",
        )
    found = target_enters(run)
    bad: list[str] = []
    if len(found) != len(run.calls):
        bad.append(f"{len(found)} entries into the called methods for {len(run.calls)} calls")
    picture = []
    for (e, token), call in zip(found, run.calls, strict=False):
        problems = []
        if token != call.token:
            problems.append(f"entry is {_hex(token)}, call is {call.method}")
        else:
            problems += [v.message for v in check_argument_info(_observed_args(e), _predicted_args(call))]
        picture.append(
            {"label": f"{call.method}({', '.join(str(v) for _, v in call.args)})", "ok": not problems}
        )
        bad += [f"{call.method} (seq {e.seq}): {p}" for p in problems]
    expected = "one range per argument, sized by its type, holding the value passed: " + "; ".join(
        f"{c.method}({', '.join(str(v) for _, v in c.args)})" for c in run.calls
    )
    ev = (run.mark_seq, *(e.seq for e, _ in found))
    if not bad:
        n = sum(len(c.args) for c in run.calls)
        return Judgement(
            status=C,
            observed=f"{n} arguments of {len(found)} calls read back from their ranges",
            expected=expected,
            evidence=ev,
            picture=tuple(picture),
        )
    return Judgement(
        status=D,
        observed=f"{len(bad)} problems; first: {bad[0]}",
        expected=expected,
        evidence=ev,
        picture=tuple(picture),
    )


# --- the experiments ----------------------------------------------------------------------------------

FE2_HOOKS_ARGS = experiment("fe2-hooks-args", scenario=SCENARIO, plan_overlay=hooks_plan(function_args=True))
for _clause, _fn, _what in (
    ("FE2-01", judge_fe2_01, "FunctionEnter2 funcId = the called method (reflection token, call order)"),
    ("FE2-02", judge_fe2_02, "clientData = the FunctionIDMapper2 result for funcId"),
    ("FE2-03", judge_fe2_03, "GetFunctionInfo2(funcId, func) inside the hook: S_OK, same token"),
    ("FE2-04", judge_fe2_04, "argumentInfo present with COR_PRF_ENABLE_FUNCTION_ARGS"),
    ("FE2-14", judge_fe2_14, "argument ranges hold the scenario's int/long argument values"),
):
    judge(_clause, FE2_HOOKS_ARGS, what=_what)(_fn)

FE2_HOOKS_NOARGS = experiment(
    "fe2-hooks-noargs", scenario=SCENARIO, plan_overlay=hooks_plan(function_args=False)
)
judge("FE2-04", FE2_HOOKS_NOARGS, what="argumentInfo NULL without COR_PRF_ENABLE_FUNCTION_ARGS")(judge_fe2_04)
