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
COR_PRF_ENABLE_REJIT.

What each judge expects comes from the plan the harness wrote (which methods each request names, which the
revert names, whether the flag was set) and the scenario's fixed course (which targets it calls after each
mark), never from the recorded callbacks themselves. The judges hold the runs to the catalog's clauses
directly (the ReJIT state-machine model of issue 25 part 2 is another branch's): one disagreement line per
departure, stable across runs (method names, counts, HRESULT names; no IDs or addresses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clr_model.flags import CorPrfMonitor
from clr_model.hresults import HResult, format_hresult, hresult_failed
from conformance.core.trace import CallbackRecord, CallRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = [
    "IN_CALLBACK",
    "NOT_ENABLED",
    "PROTOCOL",
    "judge_rejit05",
    "judge_rejit06",
    "judge_rejit07",
    "judge_rejit16",
    "judge_rejit18",
    "judge_rejit26",
    "judge_rejit28",
]

SCENARIO = "rejit"
#: the targets the scenario calls directly after the first request (Inlinee only through Caller, whose
#: optimized code may have inlined it: not a future invocation the page speaks of)
CALLED_AFTER_REQUEST = ("Normal", "Generic", "Loop", "Late")
#: the generic target and how many instantiations the scenario calls (int and string)
GENERIC, INSTANTIATIONS = "Generic", 2

REQUEST, AGAIN, REVERT = "rejit-request", "rejit-again", "rejit-revert"

PROTOCOL = experiment("rejit-protocol", scenario=SCENARIO)
IN_CALLBACK = experiment(
    "rejit-in-callback",
    scenario=SCENARIO,
    plan_overlay={
        "experiments": [
            {"id": REQUEST, "at": "JITCompilationStarted", "run": "rejit_request",
             "args": {"type": "ProfHarness.Scenarios.RejitTargets",
                      "methods": ["Normal", "Generic", "Inlinee", "Loop", "Late"], "thread": "here",
                      "untilModule": True}, "times": 0},
            {"id": "rejit-parameters", "at": "GetReJITParameters", "run": "rejit_parameters",
             "args": {"body": "prologue"}, "times": 0},
        ],
    },
)  # fmt: skip
NOT_ENABLED = experiment(
    "rejit-not-enabled",
    scenario=SCENARIO,
    plan_overlay={"event_mask": ["COR_PRF_MONITOR_JIT_COMPILATION"]},
)


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


def _requests(trace: Trace) -> dict[str, Request]:
    found: dict[str, Request] = {}
    for c in trace.of_kind(CallRecord):
        if c.experiment is None or not (c.name == "RequestReJIT" or c.name == "RequestRevert"):
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
    requested = set(_planned(ev.plan, REQUEST)) | set(_planned(ev.plan, AGAIN))
    asked = [m for m in _planned(ev.plan, REVERT) if revert.methods.get(m)]
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
    open_: dict[int, list[tuple[Any, Any]]] = {}
    lines = []
    for c in events:
        key = (c.args.get("functionId"), c.args.get("rejitId"))
        stack = open_.setdefault(c.os_tid, [])
        if c.name == "ReJITCompilationStarted":
            stack.append(key)
        elif key in stack:
            stack.remove(key)
        else:
            lines.append("a ReJITCompilationFinished without its ReJITCompilationStarted on its thread")
    if any(open_.values()):
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
