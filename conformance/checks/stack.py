"""Same-thread DoStackSnapshot checks (area "stack"): one run of the ``stack-walks`` scenario per runtime.

Every judge builds the model's input (:class:`clr_model.stacksnapshot.SnapshotInput`) from independent
ground truth and asks :func:`clr_model.stacksnapshot.check_observed` about the live walk:

* the thread: the scenario's own reflection stack (marks ``walk-now``, ``walk-reverse``, ``expect.throw``;
  payload ``{"stack", "above", "nativeAfter"}``, see the scenario), where a P/Invoke method is unmanaged
  code, the frames the probe's walk also sees above the mark (``above``: ``Probe.Mark`` and its P/Invoke
  target), native code between ``nativeAfter`` and the next frame (reverse P/Invoke), CLR helper code on top
  for walks from ExceptionThrown, and the host's native code that calls ``Main`` at the bottom;
* the call's own arguments (infoFlags, clientData, the seed's registers, contextSize) from the call record;
* the runtime's sizeof(CONTEXT) from the runtime version (:data:`RUNTIME_CONTEXT_SIZES`, from pal.h).

Managed frames are identified by (module file name, metadata token): the model's FunctionIDs are numbers
given to the reflection frames, and an observed FunctionID is translated through what GetFunctionInfo said
about it (recorded in the walk's ``out.frames``). Addresses are not predicted (``compare_addresses=False``),
except for DSS-05: a per-frame CONTEXT's rip must be that frame's ip.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from clr_model.errors import ModelError
from clr_model.hresults import HResult, format_hresult
from clr_model.stacksnapshot import (
    COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    CallbackBehaviour,
    ContextTooSmall,
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
    check_observed,
    function_from_ip,
    snapshot,
)
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, FrameRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = ["RUNTIME_CONTEXT_SIZES", "runtime_context_size"]

#: The runtime's sizeof(CONTEXT) on Linux x64 by version prefix: pal.h of 3.1 ends the AMD64 CONTEXT at
#: LastExceptionFromRip (1232 bytes); 8.0's pal.h appends the XSTATE / AVX / AVX-512 tail (3104 bytes).
RUNTIME_CONTEXT_SIZES: dict[str, int] = {"3.": 1232, "8.": 3104}

_S_OK = int(HResult.S_OK)
_MAX_CHILD = 2**63  # model FunctionIDs for unknown observed functions start here (never a reflection id)


def runtime_context_size(version: str) -> int | None:
    for prefix, size in RUNTIME_CONTEXT_SIZES.items():
        if version.startswith(prefix):
            return size
    return None


class JudgeInputError(HarnessError):
    """The trace lacks what a judge needs (a mark, a call record): an error verdict, one line."""


# --------------------------------------------------------------------------------------------------
# Ground truth from the scenario


@dataclass
class Ground:
    """The scenario's reflection stack for one mark, turned into the model's thread."""

    mark: str
    seq: int
    frames: list[dict[str, Any]]
    above: list[dict[str, Any]]
    native_after: int


@dataclass
class Identities:
    """(module file name, token) <-> model FunctionID, and labels for pictures."""

    ids: dict[tuple[str, int], int] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)

    def of(self, module: str, token: int, label: str) -> int:
        key = (PurePosixPath(module).name, token)
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
            self.labels[self.ids[key]] = label
        return self.ids[key]


def _ground(trace: Trace, mark: str) -> Ground:
    marks = trace.marks(mark)
    if not marks or not marks[0].payload:
        raise JudgeInputError(f"{trace.path}: no mark {mark!r} with a payload")
    try:
        data = json.loads(marks[0].payload)
        return Ground(
            mark, marks[0].seq, list(data["stack"]), list(data.get("above", [])), int(data["nativeAfter"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise JudgeInputError(
            f"{trace.path}: mark {mark!r} (seq {marks[0].seq}): bad payload ({exc})"
        ) from exc


def _label(frame: dict[str, Any]) -> str:
    return f"{frame.get('type') or '?'}::{frame.get('method') or '?'}"


def _model_frame(frame: dict[str, Any], ident: Identities) -> ManagedFrame | UnmanagedFrame:
    if frame.get("pinvoke"):
        return UnmanagedFrame(kind="pinvoke", ip=0, sp=0)
    fid = ident.of(str(frame.get("module") or ""), int(frame.get("token") or 0), _label(frame))
    return ManagedFrame(function_id=fid, ip=0, sp=0)


def thread_model(ground: Ground, top: str, ident: Identities) -> ThreadModel:
    """The model's thread: ``top`` is "mark" (the walk runs inside the probe's mark export) or "helper"
    (inside a runtime callback: CLR helper code on top); the host's native code is at the bottom."""
    frames: list[ManagedFrame | UnmanagedFrame] = []
    if top == "mark":
        frames.extend(_model_frame(f, ident) for f in ground.above)
    else:
        frames.append(UnmanagedFrame(kind="helper", ip=0, sp=0))
    for i, f in enumerate(ground.frames):
        frames.append(_model_frame(f, ident))
        if i == ground.native_after:
            frames.append(UnmanagedFrame(kind="native", ip=0, sp=0))
    frames.append(UnmanagedFrame(kind="native", ip=0, sp=0))  # the host calling Main
    return ThreadModel(frames=tuple(frames))


# --------------------------------------------------------------------------------------------------
# Observed walks


@dataclass
class Walk:
    call: CallRecord
    frames: list[FrameRecord]

    @property
    def hr(self) -> int:
        return self.call.hr & 0xFFFFFFFF

    @property
    def seqs(self) -> list[int]:
        return [f.seq for f in self.frames] + [self.call.seq]

    def arg(self, name: str, default: Any = None) -> Any:
        return self.call.args.get(name, default)


def _walk(trace: Trace, experiment: str) -> Walk:
    """The experiment's walk (not its capture walk)."""
    calls = [c for c in trace.calls("DoStackSnapshot", experiment) if c.args.get("purpose") != "capture"]
    if not calls:
        raise JudgeInputError(f"{trace.path}: no DoStackSnapshot call record of experiment {experiment!r}")
    call = calls[0]
    return Walk(call, sorted(trace.frames(int(call.args.get("walk", -1))), key=lambda f: f.index))


def _function_names(trace: Trace) -> dict[int, tuple[str, int]]:
    """Observed FunctionID -> (module file name, token), from every resolved walk of the run."""
    out: dict[int, tuple[str, int]] = {}
    for call in trace.calls("DoStackSnapshot"):
        for fr in call.out.get("frames") or []:
            if fr.get("funcId") and fr.get("token") is not None and fr.get("module"):
                out[int(fr["funcId"])] = (PurePosixPath(str(fr["module"])).name, int(fr["token"]))
    return out


def observed_callbacks(
    walk: Walk, names: dict[int, tuple[str, int]], ident: Identities
) -> list[ObservedCallback]:
    out: list[ObservedCallback] = []
    for n, f in enumerate(walk.frames):
        fid = 0
        if f.funcId:
            key = names.get(f.funcId)
            fid = ident.ids.get(key, _MAX_CHILD + n) if key else _MAX_CHILD + n
        ctx = FrameContext(ip=f.context.rip, sp=f.context.rsp) if f.context is not None else None
        out.append(
            ObservedCallback(
                func_id=fid,
                ip=f.ip,
                client_data=f.clientData,
                context_size=f.contextSize,
                context=ctx,
                hr=f.hr,
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# Building the model input and comparing


@dataclass
class Check:
    """One walk compared with the model."""

    name: str
    walk: Walk
    input: SnapshotInput
    observed: list[ObservedCallback]
    violations: list[Violation]
    labels: dict[int, str]

    @property
    def expected_text(self) -> str:
        snap = snapshot(self.input)
        frames = _seq_text(snap.callbacks, self.labels)
        return f"{format_hresult(snap.hresult)}, {len(snap.callbacks)} callback(s) [{frames}]"

    @property
    def observed_text(self) -> str:
        frames = _seq_text(self.observed, self.labels)
        return f"{format_hresult(self.walk.hr)}, {len(self.observed)} callback(s) [{frames}]"

    def picture(self) -> list[dict[str, Any]]:
        snap = snapshot(self.input)
        expected = snap.callbacks
        bad = {v.index for v in self.violations if v.index is not None}
        pic = []
        for i, obs in enumerate(self.observed):
            ok = i < len(expected) and expected[i].func_id == obs.func_id and i not in bad
            pic.append({"label": _name(obs.func_id, self.labels), "ok": ok})
        return pic


def _name(fid: int, labels: dict[int, str]) -> str:
    if fid == 0:
        return "[unmanaged]"
    return labels.get(fid, "[unknown function]")


def _seq_text(callbacks: Sequence[ObservedCallback], labels: dict[int, str]) -> str:
    return ", ".join(_name(c.func_id, labels).split(".")[-1] for c in callbacks)


def _platform(evidence: Evidence) -> Platform:
    return Platform(os=Os.UNIX, context_size=runtime_context_size(evidence.runtime.version))


def _seed(walk: Walk, native_ip: int | None) -> Seed | None:
    ctx = walk.arg("context")
    if ctx is None:
        return None
    if not isinstance(ctx, dict) or "rip" not in ctx:
        raise JudgeInputError(f"DoStackSnapshot seq {walk.call.seq}: seed registers not recorded")
    rip = int(ctx["rip"])
    kind = walk.arg("seedKind")
    # "captured" seeds are a managed frame's CONTEXT from the capture walk (JIT code); "native" and "zero"
    # seeds point at a probe function / address 0 (DSS-21: not JIT/NGEN code).
    in_managed = kind == "captured" and rip != 0 and rip != native_ip
    return Seed(ip=rip, sp=int(ctx["rsp"]), in_managed_code=in_managed)


def compare(
    evidence: Evidence,
    experiment: str,
    mark: str,
    top: str,
    state: ThreadState,
    *,
    context_size_rule: Callable[[int, int], int] | None = None,
) -> Check:
    """Compare one experiment's walk with the model built from the mark's ground truth and the call's args."""
    trace = evidence.trace
    walk = _walk(trace, experiment)
    ident = Identities()
    thread = thread_model(_ground(trace, mark), top, ident)
    platform = _platform(evidence)
    seed = _seed(walk, walk.arg("nativeIp"))
    size = int(walk.arg("contextSize", 0))
    if context_size_rule is not None:
        size = context_size_rule(size, platform.runtime_context_size)
    reply = int(walk.arg("abortReply", 0)) & 0xFFFFFFFF
    abort_at = int(walk.arg("abortAt", -1))
    behaviour = CallbackBehaviour(returns=(*([_S_OK] * abort_at), reply) if abort_at >= 0 else ())
    inp = SnapshotInput(
        thread=thread,
        state=state,
        info_flags=int(walk.arg("infoFlags", 0)) & 0xFFFFFFFF,
        seed=seed,
        context_size=size,
        client_data=int(walk.arg("clientData", 0)) & (2**64 - 1),
        platform=platform,
        callback=behaviour,
    )
    observed = observed_callbacks(walk, _function_names(trace), ident)
    violations = check_observed(inp, observed, walk.hr, compare_addresses=False)
    return Check(experiment, walk, inp, observed, violations, dict(ident.labels))


def _verdict(
    checks: Sequence[Check],
    relevant: Iterable[str] | None,
    extra: Sequence[tuple[Check, str]] = (),
    *,
    picture_of: Check | None = None,
) -> Judgement:
    """Diverges when any check has a violation of a relevant clause (None = any) or an extra problem."""
    wanted = set(relevant) if relevant is not None else None
    problems: list[str] = []
    for c in checks:
        for v in c.violations:
            if wanted is None or v.clause in wanted:
                problems.append(f"{c.name}: {v}")
    problems.extend(f"{c.name}: {msg}" for c, msg in extra)
    observed = "; ".join(f"{c.name}: {c.observed_text}" for c in checks)
    expected = "; ".join(f"{c.name}: {c.expected_text}" for c in checks)
    evidence: list[int] = []
    for c in checks:
        evidence.extend(c.walk.seqs)
    pic = tuple((picture_of or checks[0]).picture()) if checks else ()
    if problems:
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{problems[0]}"
            + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
            + f" | {observed}",
            expected=expected,
            evidence=tuple(evidence),
            picture=pic,
        )
    return Judgement(
        status=Status.CONFORMS, observed=observed, expected=expected, evidence=tuple(evidence), picture=pic
    )


_MARK = (ThreadState.CURRENT_OUTSIDE_CALLBACK, "mark")  # walks from inside the probe's mark export
_CALLBACK = (ThreadState.CURRENT_IN_CALLBACK, "helper")  # walks from inside ExceptionThrown


def _at_mark(ev: Evidence, exp: str, mark: str = "walk-now", **kw: Any) -> Check:
    return compare(ev, exp, mark, _MARK[1], _MARK[0], **kw)


def _at_throw(ev: Evidence, exp: str, **kw: Any) -> Check:
    return compare(ev, exp, "expect.throw", _CALLBACK[1], _CALLBACK[0], **kw)


# --------------------------------------------------------------------------------------------------
# Judges


def judge_dss01(ev: Evidence) -> Judgement:
    """NULL thread: the walk is the calling thread's own stack (the reflection stack of the mark)."""
    return _verdict([_at_mark(ev, "now-default")], None)


def judge_dss16(ev: Evidence) -> Judgement:
    checks = [_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")]
    return _verdict(checks, {"DSS-16", "DSS-03", "DSS-15"})


def judge_dss03(ev: Evidence) -> Judgement:
    checks = [_at_mark(ev, "reverse-regctx", "walk-reverse"), _at_mark(ev, "now-default")]
    return _verdict(checks, {"DSS-03", "DSS-15", "DSS-16"})


def judge_dss15(ev: Evidence) -> Judgement:
    check = _at_mark(ev, "reverse-regctx", "walk-reverse")
    extra: list[tuple[Check, str]] = []
    predicted = snapshot(check.input).callbacks
    # the model must see an unmanaged run between managed frames, or this scenario shows nothing
    inner = [i for i, c in enumerate(predicted) if c.func_id == 0 and 0 < i < len(predicted) - 1]
    if not inner:
        extra.append(
            (check, "the model's thread has no unmanaged run between managed frames (scenario broken)")
        )
    return _verdict([check], {"DSS-15", "DSS-03"}, extra)


def judge_dss04(ev: Evidence) -> Judgement:
    return _verdict([_at_mark(ev, "now-default"), _at_mark(ev, "now-regctx")], {"DSS-04"})


def _rip_problems(check: Check) -> list[tuple[Check, str]]:
    """REGISTER_CONTEXT: the model gives each managed frame a CONTEXT holding that frame's registers."""
    out: list[tuple[Check, str]] = []
    if not check.input.info_flags & COR_PRF_SNAPSHOT_REGISTER_CONTEXT:
        return out
    for i, obs in enumerate(check.observed):
        if obs.func_id and obs.context is not None and obs.context.ip != obs.ip:
            out.append((check, f"callback {i}: context rip {obs.context.ip:#x} != ip {obs.ip:#x} (DSS-05)"))
    return out


def judge_dss05(ev: Evidence) -> Judgement:
    if runtime_context_size(ev.runtime.version) is None:
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"sizeof(CONTEXT) of runtime {ev.runtime.version} is not known to the harness",
            expected="a runtime listed in RUNTIME_CONTEXT_SIZES",
        )
    default, regctx = _at_mark(ev, "now-default"), _at_mark(ev, "now-regctx")
    return _verdict([default, regctx], {"DSS-05"}, _rip_problems(regctx), picture_of=regctx)


def judge_dss14(ev: Evidence) -> Judgement:
    """Every callback before DoStackSnapshot returns: frame records delivered inside the call, on the
    calling OS thread, before the call's return; as many as the model's callbacks."""
    checks = [_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")]
    extra: list[tuple[Check, str]] = []
    for c in checks:
        call = c.walk.call
        ret = call.out.get("returnOrder")
        for f in c.walk.frames:
            raw = f.model_dump()
            if raw.get("inCall") is not True:
                extra.append((c, f"callback {f.index} was not delivered inside DoStackSnapshot"))
            if raw.get("cbOsTid") is not None and raw.get("cbOsTid") != call.os_tid:
                extra.append(
                    (
                        c,
                        f"callback {f.index} ran on OS thread {raw.get('cbOsTid')},"
                        f" the call on {call.os_tid}",
                    )
                )
            if ret is not None and raw.get("cbOrder") is not None and int(raw["cbOrder"]) >= int(ret):
                extra.append((c, f"callback {f.index} delivered after DoStackSnapshot returned"))
        predicted = len(snapshot(c.input).callbacks)
        if len(c.walk.frames) != predicted:
            extra.append((c, f"{len(c.walk.frames)} callbacks before the return, the model has {predicted}"))
    return _verdict(checks, {"DSS-14"}, extra)


def judge_dss10(ev: Evidence) -> Judgement:
    return _verdict([_at_throw(ev, "throw-sync")], None)


def judge_dss17(ev: Evidence) -> Judgement:
    """Synchronous walks from inside callbacks: ExceptionThrown (a full stack) and Initialize (no managed
    frame yet: S_OK and no callback)."""
    throw = _at_throw(ev, "throw-sync")
    init_walk = _walk(ev.trace, "init-walk")
    inp = SnapshotInput(
        thread=ThreadModel(frames=()),
        state=ThreadState.CURRENT_IN_CALLBACK,
        info_flags=int(init_walk.arg("infoFlags", 0)),
        client_data=int(init_walk.arg("clientData", 0)),
        platform=_platform(ev),
    )
    ident = Identities()
    observed = observed_callbacks(init_walk, {}, ident)
    init = Check(
        "init-walk (Initialize)", init_walk, inp, observed, check_observed(inp, observed, init_walk.hr), {}
    )
    return _verdict([throw, init], None)


def judge_dss26(ev: Evidence) -> Judgement:
    return _verdict([_at_mark(ev, "now-abort-efail"), _at_mark(ev, "now-abort-sfalse")], None)


def judge_dss27(ev: Evidence) -> Judgement:
    return _verdict([_at_mark(ev, "now-flags-x86"), _at_mark(ev, "now-flags-undefined")], None)


def _unchecked_size(size: int, runtime_size: int) -> int:
    """DSS-12 model_choice: the runtime does not check contextSize and reads sizeof(CONTEXT) bytes, so a
    seed whose contextSize is short behaves as a full one (the probe's seed buffer is always large enough)."""
    return max(size, runtime_size)


def judge_dss12(ev: Evidence) -> Judgement:
    checks: list[Check] = []
    for size in ("zero", "runtime-1", "small", "larger"):
        walk = _walk(ev.trace, f"now-size-{size}")
        rule = (
            _unchecked_size if int(walk.arg("contextSize", 0)) < _platform(ev).runtime_context_size else None
        )
        try:
            checks.append(_at_mark(ev, f"now-size-{size}", context_size_rule=rule))
        except ContextTooSmall as exc:  # pragma: no cover - the rule above avoids it
            raise JudgeInputError(str(exc)) from exc
    return _verdict(checks, None)


def judge_dss07(ev: Evidence) -> Judgement:
    return _verdict([_at_mark(ev, "now-seed-managed")], None)


def judge_dss21(ev: Evidence) -> Judgement:
    return _verdict([_at_throw(ev, "throw-seed-native")], None)


def judge_dss29(ev: Evidence) -> Judgement:
    return _verdict([_at_mark(ev, "now-seed-zero"), _at_throw(ev, "throw-seed-zero")], None)


def judge_dss30(ev: Evidence) -> Judgement:
    """Unmanaged code on top (the probe's P/Invoke target at a mark, CLR helper code at ExceptionThrown):
    the model reports no FunctionID 0 callback for it (its DSS-30 choice; a leading run for P/Invoke code is
    accepted as the other reading, one for helper code is not)."""
    return _verdict([_at_mark(ev, "now-default"), _at_throw(ev, "throw-sync")], None)


def judge_dss11(ev: Evidence) -> Judgement:
    """No COR_PRF_SNAPSHOT_CONTEXT: a seed with infoFlags 0 (no context flag at all), below helper code;
    the model honours it whatever infoFlags says."""
    return _verdict([_at_throw(ev, "throw-seed-native")], None)


def judge_dss19(ev: Evidence) -> Judgement:
    """GetFunctionFromIP: 0 for a probe function's address, the walked FunctionID for a managed frame's ip."""
    trace = ev.trace
    walk = _walk(trace, "now-from-ip")
    calls = trace.calls("GetFunctionFromIP", "now-from-ip")
    natives = [c for c in calls if c.args.get("what") == "native"]
    if not natives:
        raise JudgeInputError(f"{trace.path}: no GetFunctionFromIP call for the probe's native address")
    frames: list[ManagedFrame | UnmanagedFrame] = [
        UnmanagedFrame(kind="native", ip=int(natives[0].args["ip"]), sp=0)
    ]
    for f in walk.frames:
        if f.funcId:
            frames.append(ManagedFrame(function_id=f.funcId, ip=f.ip, sp=0))
        else:
            frames.append(UnmanagedFrame(kind="native", ip=f.ip, sp=0))
    thread = ThreadModel(frames=tuple(frames))
    problems: list[str] = []
    parts: list[str] = []
    for c in calls:
        ip = int(c.args["ip"])
        want = function_from_ip(thread, ip)
        got = c.out.get("functionId")
        hr = c.hr & 0xFFFFFFFF
        ok = hr == _S_OK and got == want
        if c.args.get("what") == "native" or not ok:
            parts.append(
                f"{c.args.get('what')} ip {ip:#x}: {format_hresult(hr)}, FunctionID "
                + ("not written" if got is None else f"{int(got):#x}")
            )
        if not ok:
            problems.append(
                f"{c.args.get('what')} ip {ip:#x}: {format_hresult(hr)} and FunctionID "
                + ("not written" if got is None else f"{int(got):#x}")
                + f", the model says S_OK with {want:#x}"
            )
    managed = sum(1 for c in calls if c.args.get("what") == "frame")
    observed = f"{len(calls)} calls ({managed} frame ips): " + "; ".join(parts[:3])
    expected = (
        "S_OK; FunctionID 0 for the probe's native address and each unmanaged run,"
        " the walked FunctionID for each managed frame"
    )
    seqs = tuple([*walk.seqs, *(c.seq for c in calls)])
    if problems:
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{problems[0]} (+{len(problems) - 1} more) | {observed}",
            expected=expected,
            evidence=seqs,
        )
    return Judgement(status=Status.CONFORMS, observed=observed, expected=expected, evidence=seqs)


def _guard(fn: Callable[[Evidence], Judgement]) -> Callable[[Evidence], Judgement]:
    """Model errors become one-line harness errors naming the judge."""

    def run(ev: Evidence) -> Judgement:
        try:
            return fn(ev)
        except ModelError as exc:
            raise JudgeInputError(f"{fn.__name__}: the model rejected the input: {exc}") from exc

    run.__name__ = fn.__name__
    return run


_JUDGES: tuple[tuple[str, Callable[[Evidence], Judgement], str], ...] = (
    ("DSS-01", judge_dss01, "NULL thread: the walk equals the mark's reflection stack"),
    ("DSS-03", judge_dss03, "one callback per managed frame and per unmanaged run (reverse P/Invoke)"),
    (
        "DSS-04",
        judge_dss04,
        "clientData reaches every callback unchanged (DEFAULT and REGISTER_CONTEXT walks)",
    ),
    ("DSS-05", judge_dss05, "DEFAULT: no context; REGISTER_CONTEXT: sizeof(CONTEXT), rip == ip per frame"),
    ("DSS-07", judge_dss07, "a managed frame's CONTEXT as seed, P/Invoke on top: seed ignored, same frames"),
    ("DSS-10", judge_dss10, "synchronous walk at ExceptionThrown, NULL thread and context: S_OK, complete"),
    ("DSS-11", judge_dss11, "seed with infoFlags 0 (no context flag) below helper code is still honoured"),
    ("DSS-12", judge_dss12, "seed with contextSize 0, sizeof-1, 16, sizeof+256"),
    ("DSS-14", judge_dss14, "all callbacks inside the call, on the calling thread, before the return"),
    ("DSS-15", judge_dss15, "managed -> native -> managed: one FunctionID 0 callback for the native run"),
    ("DSS-16", judge_dss16, "leaf first: order equals the reflection order"),
    ("DSS-17", judge_dss17, "synchronous walks from ExceptionThrown and from Initialize"),
    ("DSS-19", judge_dss19, "GetFunctionFromIP: 0 for native code, the FunctionID for managed ips"),
    ("DSS-21", judge_dss21, "seed pointing at a probe function, helper code on top: UNMANAGED_CTX"),
    ("DSS-26", judge_dss26, "callback returns E_FAIL / S_FALSE at frame 2"),
    ("DSS-27", judge_dss27, "infoFlags X86_OPTIMIZED on AMD64, and an undefined bit"),
    ("DSS-29", judge_dss29, "zeroed seed: P/Invoke on top and helper code on top"),
    ("DSS-30", judge_dss30, "unmanaged code on top (P/Invoke target, CLR helper): no leading FunctionID 0"),
)

STACK_WALKS = experiment("stack-walks", scenario="stack-walks")
for _clause, _fn, _what in _JUDGES:
    judge(_clause, STACK_WALKS, what=_what)(_guard(_fn))
