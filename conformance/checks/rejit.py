"""The ReJIT protocol, live (issue 25 part 4): the ``rejit`` scenario's targets recompiled, recompiled again
and reverted, on every runtime.

The scenario (``conformance/scenarios/rejit``) calls its targets (a plain method, a generic one with two
instantiations, a small one reached only through a caller, a long loop: on 8.0 its tier-0 code is left for an
on-stack-replacement version while it runs) and marks each phase; the plan asks the probe
(``experiments_rejit.cpp``) for RequestReJIT of five targets at ``rejit.request`` (Late first runs after it:
ReJIT before the first call), a second RequestReJIT of Normal at ``rejit.again``, RequestRevert of Normal and
of Never (never requested) at ``rejit.revert``, and hands a rewritten body through the function control in
every GetReJITParameters. ``rejit-in-callback`` makes the first request from inside the JITCompilationStarted
of the app's first method instead (on that callback's thread); ``rejit-not-enabled`` runs the plan without
COR_PRF_ENABLE_REJIT. ``rejit-inlined`` runs with tiered compilation off (so Caller's first compilation is
optimized and inlines Inlinee, which the probe's JITInlining records prove: caller and callee by methodDef),
asks RequestReJIT of Inlinee alone at ``rejit.inline-request`` and RequestReJITWithInliners of Inlinee
(COR_PRF_REJIT_BLOCK_INLINING | COR_PRF_REJIT_INLINING_CALLBACKS) at ``rejit.inliners``, the app calling
Caller after each: REJIT-12 (a plain request does not reach the inlined copy: its inliner is not recompiled)
and REJIT-13 (the inliner is recompiled after RequestReJITWithInliners; dotnet/runtime#87418).

What each judge expects comes from the plan the harness wrote (which methods each request names, which the
revert names, whether the flag was set) and the scenario's fixed course (which targets it calls after each
mark), never from the recorded callbacks themselves. The protocol's model (clr_model/rejit.py) gives
REJIT-16's expected statuses (fed the plan's requests) and judges REJIT-28's Started/Finished pairs; the
others hold the runs to the catalog's clauses directly: one disagreement line per departure, stable across
runs (method names, counts, HRESULT names; no IDs or addresses).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clr_model import api, rejit
from clr_model.api import Fact
from clr_model.flags import CorPrfMonitor
from clr_model.hresults import HResult, format_hresult, hresult_failed
from conformance.core.scenarios import load_scenario
from conformance.core.trace import CallbackRecord, CallRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = [
    "INLINED",
    "INVALID_TOKEN",
    "IN_CALLBACK",
    "NOT_ENABLED",
    "PROTOCOL",
    "judge_rejit05",
    "judge_rejit06",
    "judge_rejit07",
    "judge_rejit12",
    "judge_rejit13",
    "judge_rejit16",
    "judge_rejit18",
    "judge_rejit26",
    "judge_rejit28",
    "judge_rejit29",
]

SCENARIO = "rejit"
#: the targets the scenario calls directly after the first request (Inlinee only through Caller, whose
#: optimized code may have inlined it: not a future invocation the page speaks of)
CALLED_AFTER_REQUEST = ("Normal", "Generic", "Loop", "Late")
#: the generic target and how many instantiations the scenario calls (int and string)
GENERIC, INSTANTIATIONS = "Generic", 2

REQUEST, AGAIN, REVERT = "rejit-request", "rejit-again", "rejit-revert"

_TARGETS = "ProfHarness.Scenarios.RejitTargets"


def _request(entry: str, at: str, methods: list[str], *, times: int = 1, **args: Any) -> dict[str, Any]:
    """A plan entry: at ``at``, the probe's rejit_request for ``methods`` of the scenario's targets (``args``:
    the rest of its arguments), ``times`` times (0: every time)."""
    return {"id": entry, "at": at, "run": "rejit_request",
            "args": {"type": _TARGETS, "methods": methods, **args}, "times": times}  # fmt: skip


def _scenario_entry(entry: str) -> dict[str, Any]:
    """A copy of the scenario plan's experiment entry ``entry`` (plan.json is where it is written), for an
    overlay that replaces the scenario's experiments and keeps that one."""
    (found,) = [e for e in load_scenario(SCENARIO).plan["experiments"] if e.get("id") == entry]
    return copy.deepcopy(found)


PROTOCOL = experiment("rejit-protocol", scenario=SCENARIO)
IN_CALLBACK = experiment(
    "rejit-in-callback",
    scenario=SCENARIO,
    plan_overlay={
        "experiments": [
            _request(REQUEST, "JITCompilationStarted", ["Normal", "Generic", "Inlinee", "Loop", "Late"],
                     times=0, thread="here", untilModule=True),
            _scenario_entry("rejit-parameters"),
        ],
    },
)  # fmt: skip
NOT_ENABLED = experiment(
    "rejit-not-enabled",
    scenario=SCENARIO,
    plan_overlay={"event_mask": ["COR_PRF_MONITOR_JIT_COMPILATION"]},
)

#: the inlining phases' plan entries, the inlined target and its caller
INLINE_REQUEST, INLINERS = "rejit-inline-request", "rejit-inliners"
INLINEE, INLINER = "Inlinee", "Caller"
#: RequestReJITWithInliners' dwRejitFlags: COR_PRF_REJIT_BLOCK_INLINING (0x1) |
#: COR_PRF_REJIT_INLINING_CALLBACKS (0x2) (the COR_PRF_REJIT_FLAGS page)
INLINERS_FLAGS = 0x3
INLINED = experiment(
    "rejit-inlined",
    scenario=SCENARIO,
    # tiered compilation off (3.1 reads COMPlus_, 8.0 both): Caller is optimized at its first compilation
    env={"DOTNET_TieredCompilation": "0", "COMPlus_TieredCompilation": "0"},
    plan_overlay={
        # what the scenario's plan records, and the inlining decisions (the proof that Inlinee was inlined)
        "record": [*load_scenario(SCENARIO).plan.get("record", []), "JITInlining"],
        "experiments": [
            _request(INLINE_REQUEST, "mark:rejit.inline-request", [INLINEE], thread="own"),
            _scenario_entry("rejit-parameters"),
            _request(INLINERS, "mark:rejit.inliners", [INLINEE], thread="own", inliners=INLINERS_FLAGS),
        ],
    },
)  # fmt: skip


# --- reading the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One rejit_request call record and what the plan asked of it."""

    entry: str
    seq: int
    revert: bool
    methods: dict[str, int]  # name -> methodDef (0: the metadata named none)
    hr: int
    statuses: tuple[int, ...]
    point: str = ""
    thread: str = ""
    #: what the probe put in each status entry before RequestRevert (an entry still holding it: not written)
    fill: int | None = None


def _planned(plan: Mapping[str, Any], entry: str) -> list[str]:
    """The method names the plan's entry asks for (what the experiment was told, not what it recorded)."""
    for e in plan.get("experiments", []):
        if isinstance(e, dict) and e.get("id") == entry:
            methods = e.get("args", {}).get("methods", [])
            return [m for m in methods if isinstance(m, str)]
    return []


#: the calls rejit_request makes: the API table's recompilation requests and reverts
_REQUESTS = api.names_with(Fact.REJIT_REQUEST, Fact.REVERTS)


def _requests(trace: Trace) -> dict[str, Request]:
    found: dict[str, Request] = {}
    for c in trace.of_kind(CallRecord):
        if c.experiment is None or c.name not in _REQUESTS:
            continue
        names = c.args.get("methods") or []
        tokens = c.args.get("tokens") or []
        raw_statuses = c.out.get("statuses") or []
        if not all(isinstance(v, int) for v in [*tokens, *raw_statuses]):
            continue  # a damaged record (a token or status not a number): no request to judge by
        methods = {str(n): int(t) for n, t in zip(names, tokens, strict=False)}
        statuses = tuple(int(s) for s in raw_statuses)
        fill = c.out.get("statusFill")
        found.setdefault(c.experiment, Request(c.experiment, c.seq, c.name == "RequestRevert", methods,
                                               int(c.hr), statuses, str(c.args.get("point", "")),
                                               str(c.args.get("thread", "")),
                                               fill if isinstance(fill, int) else None))  # fmt: skip
    return found


def _after(trace: Trace, seq: int, until_mark: str | None) -> list[CallbackRecord]:
    """The callbacks after ``seq`` and before the mark ``until_mark`` (None: the end)."""
    end = next((m.seq for m in trace.marks(until_mark) if m.seq > seq), None) if until_mark else None
    return [c for c in trace.of_kind(CallbackRecord) if c.seq > seq and (end is None or c.seq < end)]


def _of(callbacks: Sequence[CallbackRecord], name: str, token: int) -> list[CallbackRecord]:
    return [c for c in callbacks if c.name == name and c.args.get("methodId") == token]


def _missing(ev: Evidence, entry: str, expected: str) -> Judgement | None:
    """Not applicable when the plan's request was not made (the probe's record is missing) or named no
    method the metadata knows."""
    request = _requests(ev.trace).get(entry)
    if request is None:
        return Judgement(status=Status.NOT_APPLICABLE, observed=f"no {entry} call record", expected=expected)
    if not any(request.methods.values()):
        return Judgement(status=Status.NOT_APPLICABLE, observed=f"{entry}: the metadata named none of "
                         f"{sorted(request.methods)}", expected=expected)  # fmt: skip
    return None


def _hr(value: int) -> str:
    return format_hresult(value)


# --- judges ----------------------------------------------------------------------------------------------


def _future_invocations(ev: Evidence) -> Judgement:
    expected = ("every requested method the app calls after RequestReJIT S_OK is recompiled before its next "
                f"phase ends ({', '.join(CALLED_AFTER_REQUEST)}): GetReJITParameters and "
                "ReJITCompilationStarted")
    if (na := _missing(ev, REQUEST, expected)) is not None:
        return na
    request = _requests(ev.trace)[REQUEST]
    asked = [m for m in _planned(ev.plan, REQUEST) if m in CALLED_AFTER_REQUEST]
    lines: list[str] = []
    if hresult_failed(request.hr):
        lines.append(f"RequestReJIT answered {_hr(request.hr)}")
    after = _after(ev.trace, request.seq, "rejit.called")
    seen = []
    for method in asked:
        token = request.methods.get(method, 0)
        params = _of(after, "GetReJITParameters", token)
        started = _of(after, "ReJITCompilationStarted", token)
        if not params:
            lines.append(f"{method}: no GetReJITParameters before rejit.called")
        if not started:
            lines.append(f"{method}: no ReJITCompilationStarted before rejit.called")
        if params and started:
            seen.append(method)
    inlinee = request.methods.get("Inlinee", 0)
    inlined = len(_of(after, "ReJITCompilationStarted", inlinee))
    note = f"; Inlinee (only through Caller): {inlined} recompilation(s)"
    where = f"at {request.point} on {'its thread' if request.thread == 'here' else 'a thread of its own'}"
    return Judgement.from_disagreements(lines, observed=f"RequestReJIT {where} ({_hr(request.hr)}): "
                                       f"recompiled {', '.join(seen) or 'none'}{note}", expected=expected,
                                       evidence=(request.seq,))  # fmt: skip


@judge("REJIT-06", PROTOCOL, what="the requested methods called after RequestReJIT run recompiled versions "
       "(Late: its first call)", uses=(REQUEST,))  # fmt: skip
def judge_rejit06(ev: Evidence) -> Judgement:
    return _future_invocations(ev)


@judge("REJIT-06", IN_CALLBACK, what="the same, the request made inside JITCompilationStarted on its thread",
       uses=(REQUEST,))  # fmt: skip
def judge_rejit06_in_callback(ev: Evidence) -> Judgement:
    return _future_invocations(ev)


@judge("REJIT-07", PROTOCOL, what="a second RequestReJIT of a recompiled method recompiles it anew: new "
       "GetReJITParameters, a new ReJITID", uses=(REQUEST, AGAIN))  # fmt: skip
def judge_rejit07(ev: Evidence) -> Judgement:
    expected = "after the second request of each method the plan names again: one GetReJITParameters and a " \
               "ReJITCompilationStarted with a ReJITID none of its earlier recompilations had"
    if (na := _missing(ev, AGAIN, expected)) is not None:
        return na
    again = _requests(ev.trace)[AGAIN]
    lines = [f"the second RequestReJIT answered {_hr(again.hr)}"] if hresult_failed(again.hr) else []
    before = [c for c in ev.trace.callbacks("ReJITCompilationStarted") if c.seq < again.seq]
    after = _after(ev.trace, again.seq, "rejit.called-again")
    shown = []
    for method in _planned(ev.plan, AGAIN):
        token = again.methods.get(method, 0)
        old = {c.args.get("rejitId") for c in _of(before, "ReJITCompilationStarted", token)}
        new = {c.args.get("rejitId") for c in _of(after, "ReJITCompilationStarted", token)}
        params = _of(after, "GetReJITParameters", token)
        if not old:
            lines.append(f"{method}: never recompiled before the second request")
        if len(params) != 1:
            lines.append(f"{method}: {len(params)} GetReJITParameters after the second request, expected 1")
        if not new:
            lines.append(f"{method}: not recompiled after the second request")
        elif new & old:
            lines.append(f"{method}: recompiled after the second request under an earlier ReJITID")
        shown.append(f"{method}: {len(old)} earlier ReJITID(s), {len(new)} new, {len(params)} "
                     "GetReJITParameters")
    return Judgement.from_disagreements(lines, observed="; ".join(shown), expected=expected,
                                        evidence=(again.seq,))  # fmt: skip


@judge("REJIT-16", PROTOCOL, what="RequestRevert of a method never requested: its status is "
       "CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND (a failure); of an active one: S_OK",
       uses=(REQUEST, AGAIN, REVERT))  # fmt: skip
def judge_rejit16(ev: Evidence) -> Judgement:
    expected = ("per-method status: S_OK for a method a request of the plan named; a failure "
                "(CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND) for one no request named")
    if (na := _missing(ev, REVERT, expected)) is not None:
        return na
    revert = _requests(ev.trace)[REVERT]
    asked = [m for m in _planned(ev.plan, REVERT) if revert.methods.get(m)]
    # what each status should be: the protocol's model fed the plan's requests (clr_model/rejit.py)
    model = rejit.ReJITModel()
    for entry in (REQUEST, AGAIN):
        model.request("RequestReJIT", [(0, revert.methods[m]) for m in _planned(ev.plan, entry)
                                       if revert.methods.get(m)], callback=None)  # fmt: skip
    requested = {m for m in asked if model.revert_status((0, revert.methods[m])) == "S_OK"}
    if len(revert.statuses) != len(asked):
        return Judgement(status=Status.ERROR,
                         observed=f"{len(revert.statuses)} statuses for {len(asked)} methods",
                         expected=expected, evidence=(revert.seq,))  # fmt: skip
    lines, shown = [], []
    for method, status in zip(asked, revert.statuses, strict=True):
        if status == revert.fill:  # the runtime left the entry as the probe filled it
            shown.append(f"{method} not written")
            wanted = "S_OK" if method in requested else "a failure (CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND)"
            lines.append(f"{method} ({'requested' if method in requested else 'never requested'}): status "
                         f"entry not written by the runtime (still the probe's fill {_hr(status)}), expected "
                         f"{wanted}")
            continue
        shown.append(f"{method} {_hr(status)}")
        if method in requested and hresult_failed(status):
            lines.append(f"{method} (requested): status {_hr(status)}, expected S_OK")
        if method not in requested and not hresult_failed(status):
            lines.append(f"{method} (never requested): status {_hr(status)}, expected a failure "
                         "(CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND)")
    observed = f"RequestRevert {_hr(revert.hr)}: " + ", ".join(shown)
    return Judgement.from_disagreements(lines, observed=observed,
                                        expected=expected, evidence=(revert.seq,))  # fmt: skip


@judge("REJIT-18", PROTOCOL, what="one GetReJITParameters per requested method, for all its instantiations",
       uses=(REQUEST,))  # fmt: skip
def judge_rejit18(ev: Evidence) -> Judgement:
    expected = (f"one GetReJITParameters per method recompiled after the first request, {GENERIC} included "
                f"though the app runs {INSTANTIATIONS} instantiations of it")
    if (na := _missing(ev, REQUEST, expected)) is not None:
        return na
    request = _requests(ev.trace)[REQUEST]
    after = _after(ev.trace, request.seq, "rejit.called")
    lines, shown = [], []
    for method in _planned(ev.plan, REQUEST):
        token = request.methods.get(method, 0)
        functions = {c.args.get("functionId") for c in _of(after, "ReJITCompilationStarted", token)}
        params = len(_of(after, "GetReJITParameters", token))
        if functions and params != 1:
            lines.append(f"{method}: {params} GetReJITParameters for {len(functions)} recompiled function(s)")
        shown.append(f"{method} {params}/{len(functions)}")
    generic = request.methods.get(GENERIC, 0)
    instances = {c.args.get("functionId") for c in _of(after, "ReJITCompilationStarted", generic)}
    return Judgement.from_disagreements(lines, observed="GetReJITParameters/recompiled FunctionIDs: "
                                        + ", ".join(shown) + f" ({GENERIC}: {len(instances)} FunctionIDs)",
                                        expected=expected, evidence=(request.seq,))  # fmt: skip


@judge("REJIT-26", PROTOCOL, what="more than one Started/Finished pair for one request only in the page's "
       "class-constructor case", uses=(REQUEST,))  # fmt: skip
def judge_rejit26(ev: Evidence) -> Judgement:
    """The scenario's targets have no class constructor (RejitTargets declares none): the page's only reason
    for a second pair does not arise, so each recompiled FunctionID has one pair per ReJITID."""
    expected = "one ReJITCompilationStarted per (FunctionID, ReJITID): no target has a class constructor"
    starts = ev.trace.callbacks("ReJITCompilationStarted")
    if not starts:
        return Judgement(status=Status.NOT_APPLICABLE, observed="no recompilation", expected=expected)
    names: dict[Any, str] = {t: m for r in _requests(ev.trace).values() for m, t in r.methods.items() if t}
    counted: dict[tuple[Any, Any], list[CallbackRecord]] = {}
    for c in starts:
        counted.setdefault((c.args.get("functionId"), c.args.get("rejitId")), []).append(c)
    repeated = [group for group in counted.values() if len(group) > 1]
    lines = [f"{names.get(group[0].args.get('methodId'), 'a method')}: {len(group)} ReJITCompilationStarted "
             "for one FunctionID and ReJITID" for group in repeated]  # fmt: skip
    return Judgement.from_disagreements(lines, observed=f"{len(starts)} starts for {len(counted)} "
                                        "(FunctionID, ReJITID) pairs", expected=expected,
                                        evidence=tuple(c.seq for g in repeated for c in g))  # fmt: skip


@judge("REJIT-28", PROTOCOL, what="every ReJITCompilationFinished names the FunctionID and ReJITID a "
       "ReJITCompilationStarted on its thread announced", uses=(REQUEST,))  # fmt: skip
def judge_rejit28(ev: Evidence) -> Judgement:
    expected = ("each Finished follows a Started of the same (FunctionID, ReJITID) on its thread, none left "
                "open")
    events = [c for c in ev.trace.of_kind(CallbackRecord)
              if c.name == "ReJITCompilationStarted" or c.name == "ReJITCompilationFinished"]  # fmt: skip
    if not events:
        return Judgement(status=Status.NOT_APPLICABLE, observed="no recompilation", expected=expected)
    model = rejit.ReJITModel()  # the protocol's model judges the pairs (clr_model/rejit.py)
    lines = []
    for c in events:
        function, rejit_id = c.args.get("functionId"), c.args.get("rejitId")
        if not isinstance(function, int) or not isinstance(rejit_id, int):
            lines.append(f"a {c.name} without a FunctionID and ReJITID")
            continue
        # the model's messages name IDs; a judgement's lines stay stable across runs
        if c.name == "ReJITCompilationStarted":
            if model.rejit_started(function, rejit_id, thread=c.os_tid):
                lines.append("a ReJITCompilationStarted again before its Finished")
        elif model.rejit_finished(function, rejit_id, thread=c.os_tid):
            lines.append("a ReJITCompilationFinished without its ReJITCompilationStarted on its thread")
    if model.unfinished():
        lines.append("a ReJITCompilationStarted never finished")
    return Judgement.from_disagreements(lines, observed=f"{len(events)} recompilation callbacks",
                                        expected=expected)  # fmt: skip


@judge("REJIT-05", NOT_ENABLED, what="RequestReJIT without COR_PRF_ENABLE_REJIT: CORPROF_E_REJIT_NOT_ENABLED",
       uses=(REQUEST, "event_mask"))  # fmt: skip
def judge_rejit05(ev: Evidence) -> Judgement:
    raw = ev.plan.get("event_mask")
    if isinstance(raw, int):
        enabled, shown = bool(raw & CorPrfMonitor.COR_PRF_ENABLE_REJIT), f"0x{raw:08X}"
    else:
        flags = [str(f) for f in raw] if isinstance(raw, list) else []
        enabled, shown = "COR_PRF_ENABLE_REJIT" in flags, " | ".join(flags) or "none"
    wanted = HResult.CORPROF_E_REJIT_NOT_ENABLED
    expected = f"RequestReJIT answers {_hr(wanted)} (the plan's mask: {shown})"
    if enabled:
        return Judgement(status=Status.ERROR, observed="the plan sets COR_PRF_ENABLE_REJIT",
                         expected=expected)
    if (na := _missing(ev, REQUEST, expected)) is not None:
        return na
    request = _requests(ev.trace)[REQUEST]
    lines = [] if request.hr == wanted else [f"RequestReJIT answered {_hr(request.hr)}, expected "
                                             f"{_hr(wanted)}"]
    started = ev.trace.callbacks("ReJITCompilationStarted")
    if started:
        lines.append(f"{len(started)} ReJITCompilationStarted without the flag")
    return Judgement.from_disagreements(lines, observed=f"RequestReJIT {_hr(request.hr)}", expected=expected,
                                        evidence=(request.seq,))  # fmt: skip


# --- an invalid methodDef token (rejit-invalid-token) ------------------------------------------------------

#: what rejit-invalid-token asks for besides Normal: a NULL methodDef and a TypeDef token of the app (row 2:
#: row 1 is <Module>), neither a method the runtime can mark
INVALID_TOKENS = (0, 0x02000002)
INVALID_TOKEN = experiment(
    "rejit-invalid-token",
    scenario=SCENARIO,
    plan_overlay={
        "experiments": [
            _request(REQUEST, "mark:rejit.request", ["Normal"], rawTokens=list(INVALID_TOKENS), thread="own"),
            _scenario_entry("rejit-parameters"),
        ],
    },
)  # fmt: skip


@judge("REJIT-29", INVALID_TOKEN, what="RequestReJIT of an invalid methodDef token (NULL, a TypeDef): a "
       "ReJITError for it with functionId NULL (a per-method failure)", uses=(REQUEST,))  # fmt: skip
def judge_rejit29(ev: Evidence) -> Judgement:
    expected = (f"RequestReJIT of Normal and of the tokens {', '.join(f'0x{t:08X}' for t in INVALID_TOKENS)} "
                "(S_OK: an attempt for each): one ReJITError per invalid token, naming it, with functionId "
                "NULL, after the request's mark (during the call or later); Normal recompiled")
    if (na := _missing(ev, REQUEST, expected)) is not None:
        return na
    request = _requests(ev.trace)[REQUEST]
    lines = [f"RequestReJIT answered {_hr(request.hr)}"] if hresult_failed(request.hr) else []
    # the probe writes its call record when the call returns: ReJITErrors made inside it come before it
    marked = next((m.seq for m in ev.trace.marks("rejit.request")), -1)
    errors = [c for c in ev.trace.callbacks("ReJITError") if c.seq > marked]
    shown = []
    for token in INVALID_TOKENS:
        mine = [c for c in errors if c.args.get("methodId") == token]
        if not mine:
            lines.append(f"0x{token:08X}: no ReJITError")
        elif any(c.args.get("functionId") not in (0, None) for c in mine):
            lines.append(f"0x{token:08X}: a ReJITError with a functionId, expected NULL")
        statuses = sorted({_hr(int(c.args.get("hrStatus", 0))) for c in mine})
        shown.append(f"0x{token:08X}: {len(mine)} ReJITError ({', '.join(statuses) or 'none'})")
    after = _after(ev.trace, request.seq, "rejit.called")
    if not _of(after, "ReJITCompilationStarted", request.methods.get("Normal", 0)):
        lines.append("Normal: not recompiled")
    observed = f"RequestReJIT {_hr(request.hr)}; " + "; ".join(shown)
    return Judgement.from_disagreements(lines, observed=observed, expected=expected,
                                        evidence=(request.seq,))  # fmt: skip


# --- inlining (rejit-inlined) ----------------------------------------------------------------------------


def _inlined(ev: Evidence, request: Request) -> tuple[int, int, list[CallbackRecord]]:
    """Inlinee's and Caller's methodDefs (from the request's module: the metadata the probe read) and the
    JITInlining records of Inlinee into Caller before ``request``."""
    callee = request.methods.get(INLINEE, 0)
    inliner = _inliner_token(ev.trace, request)
    proofs = [c for c in ev.trace.callbacks("JITInlining") if c.seq < request.seq
              and c.args.get("calleeMethodId") == callee and callee
              and (inliner == 0 or c.args.get("callerMethodId") == inliner)]  # fmt: skip
    return callee, inliner, proofs


def _inliner_token(trace: Trace, request: Request) -> int:
    """Caller's methodDef, read from the JITInlining records (the probe resolves tokens only for the methods
    a request names): the one method of Inlinee's module that inlined it (0: none, or more than one; the
    scenario calls Inlinee only from Caller)."""
    callee = request.methods.get(INLINEE, 0)
    callers = {c.args.get("callerMethodId") for c in trace.callbacks("JITInlining")
               if callee and c.args.get("calleeMethodId") == callee
               and c.args.get("calleeModuleId") == c.args.get("callerModuleId")}  # fmt: skip
    only = next(iter(callers)) if len(callers) == 1 else None
    return only if isinstance(only, int) else 0


def _recompiled(callbacks: Sequence[CallbackRecord], token: int) -> str:
    params = len(_of(callbacks, "GetReJITParameters", token))
    started = len(_of(callbacks, "ReJITCompilationStarted", token))
    return f"{params} GetReJITParameters, {started} ReJITCompilationStarted"


@judge("REJIT-12", INLINED, what="RequestReJIT of a method its caller inlined does not recompile the inlined "
       "copy: the caller keeps running its old code (the page: block inlining or request the inliners)",
       uses=(INLINE_REQUEST,))  # fmt: skip
def judge_rejit12(ev: Evidence) -> Judgement:
    expected = (f"with {INLINER} compiled with {INLINEE} inlined (JITInlining), RequestReJIT of {INLINEE} "
                f"alone and two more calls of {INLINER}: {INLINER} is not recompiled (no "
                f"ReJITCompilationStarted of it), so the inlined copy of {INLINEE} keeps its original body")
    if (na := _missing(ev, INLINE_REQUEST, expected)) is not None:
        return na
    request = _requests(ev.trace)[INLINE_REQUEST]
    callee, inliner, proofs = _inlined(ev, request)
    if not proofs or not inliner:
        return Judgement(status=Status.NOT_APPLICABLE, observed=f"no JITInlining of {INLINEE} into {INLINER} "
                         "before the request: nothing was inlined", expected=expected,
                         evidence=(request.seq,))  # fmt: skip
    lines = [f"RequestReJIT answered {_hr(request.hr)}"] if hresult_failed(request.hr) else []
    after = _after(ev.trace, request.seq, "rejit.inline-called")
    if _of(after, "ReJITCompilationStarted", inliner):
        lines.append(f"{INLINER} (the inliner) recompiled after RequestReJIT of {INLINEE} alone")
    observed = (f"{len(proofs)} JITInlining of {INLINEE} into {INLINER}; RequestReJIT of {INLINEE} "
                f"({_hr(request.hr)}); then {INLINER}: {_recompiled(after, inliner)}; {INLINEE}: "
                f"{_recompiled(after, callee)}")
    return Judgement.from_disagreements(lines, observed=observed, expected=expected,
                                        evidence=(request.seq, *(c.seq for c in proofs[:1])))  # fmt: skip


@judge("REJIT-13", INLINED, what="RequestReJITWithInliners of an inlined method recompiles its inliner "
       "(COR_PRF_MONITOR_JIT_COMPILATION on, dotnet/runtime#87418)",
       uses=(INLINE_REQUEST, INLINERS))  # fmt: skip
def judge_rejit13(ev: Evidence) -> Judgement:
    expected = (f"after RequestReJITWithInliners of {INLINEE} (flags 0x{INLINERS_FLAGS:X}: block inlining, "
                f"inlining callbacks) and two more calls of {INLINER}, which inlined it: {INLINER} is "
                "recompiled (ReJITCompilationStarted), with its own GetReJITParameters")
    if (na := _missing(ev, INLINERS, expected)) is not None:
        return na
    requests = _requests(ev.trace)
    request = requests[INLINERS]
    first = requests.get(INLINE_REQUEST, request)
    callee, inliner, proofs = _inlined(ev, first)
    if not proofs or not inliner:
        return Judgement(status=Status.NOT_APPLICABLE, observed=f"no JITInlining of {INLINEE} into "
                         f"{INLINER}: nothing was inlined", expected=expected,
                         evidence=(request.seq,))  # fmt: skip
    lines = [f"RequestReJITWithInliners answered {_hr(request.hr)}"] if hresult_failed(request.hr) else []
    after = _after(ev.trace, request.seq, "rejit.inliners-called")
    if not _of(after, "ReJITCompilationStarted", inliner):
        lines.append(f"{INLINER} (the inliner) not recompiled after RequestReJITWithInliners of {INLINEE}")
    if not _of(after, "GetReJITParameters", inliner):
        lines.append(f"no GetReJITParameters for {INLINER} (COR_PRF_REJIT_INLINING_CALLBACKS was set)")
    observed = (f"RequestReJITWithInliners of {INLINEE} ({_hr(request.hr)}); then {INLINER}: "
                f"{_recompiled(after, inliner)}; {INLINEE}: {_recompiled(after, callee)}")
    return Judgement.from_disagreements(lines, observed=observed, expected=expected,
                                        evidence=(request.seq,))  # fmt: skip
