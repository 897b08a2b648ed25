"""The ReJIT judges (conformance/checks/rejit.py) on synthetic probe traces shaped like the ``rejit``
scenario's runs: a lawful run conforms on every clause, and each clause goes red when its own part of the run
is broken (a copy of the lawful records with one thing changed). Live: the suite on both bundled runtimes,
every verdict as documented or as the expectation files say (REJIT-16 on both, REJIT-26 on 8.0.4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clr_model.hresults import HResult
from conformance.checks import rejit
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import read_trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

REJIT_CLAUSES = ("REJIT-05", "REJIT-06", "REJIT-07", "REJIT-12", "REJIT-13", "REJIT-16", "REJIT-18",
                 "REJIT-26", "REJIT-28", "REJIT-29")
MODULE = 0x7000
TOKENS = {"Normal": 0x06000001, "Generic": 0x06000002, "Inlinee": 0x06000003, "Caller": 0x06000004,
          "Loop": 0x06000005, "Late": 0x06000006, "Never": 0x06000007}  # fmt: skip
NOT_FOUND = 0x8013137D  # any failure will do: the judge wants "a failure"
Records = list[dict[str, Any]]


def _lawful() -> Records:
    """The records of a run that does what the pages say, in the scenario's order."""
    out: Records = []

    def add(kind: str, **fields: Any) -> None:
        out.append({"seq": len(out), "kind": kind, "os_tid": 1, "tid": 2, **fields})

    def request(entry: str, methods: list[str], *, revert: bool = False, statuses: list[int] | None = None,
                hr: int = 0) -> None:  # fmt: skip
        result: dict[str, Any] = {"elapsedMs": 1.0}
        if statuses is not None:
            result["statuses"] = statuses
        add("call", name="RequestRevert" if revert else "RequestReJIT", experiment=entry,
            args={"methods": methods, "tokens": [TOKENS[m] for m in methods], "moduleId": MODULE,
                  "thread": "own", "point": "mark:x"}, out=result, hr=hr)  # fmt: skip

    def recompile(method: str, function: int, rejit_id: int, *, params: bool = True) -> None:
        ids = {"moduleId": MODULE, "methodId": TOKENS[method]}
        if params:
            add("callback", name="GetReJITParameters", args={**ids, "pFunctionControl": 1})
        add("callback", name="ReJITCompilationStarted",
            args={"functionId": function, "rejitId": rejit_id, **ids})
        add("callback", name="ReJITCompilationFinished",
            args={"functionId": function, "rejitId": rejit_id, "hrStatus": 0, **ids})

    add("header", probe="0.1.0", pid=1)
    add("mark", name="rejit.warm", payload=None)
    add("mark", name="rejit.request", payload=None)
    request(rejit.REQUEST, ["Normal", "Generic", "Inlinee", "Loop", "Late"])
    recompile("Normal", 0x100, 2)
    recompile("Generic", 0x200, 3)
    recompile("Generic", 0x201, 3, params=False)  # the second instantiation: no second GetReJITParameters
    recompile("Inlinee", 0x300, 4)
    recompile("Loop", 0x500, 5)
    recompile("Late", 0x600, 6)
    add("mark", name="rejit.called", payload=None)
    add("mark", name="rejit.again", payload=None)
    request(rejit.AGAIN, ["Normal"])
    recompile("Normal", 0x100, 7)
    add("mark", name="rejit.called-again", payload=None)
    add("mark", name="rejit.revert", payload=None)
    request(rejit.REVERT, ["Normal", "Never"], revert=True, statuses=[0, NOT_FOUND])
    add("mark", name="rejit.done", payload=None)
    add("end")
    return out


def _evidence(tmp_path: Path, records: Records, experiment: Any = rejit.PROTOCOL) -> Evidence:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    runtime = Runtime(version="9.9.9", host=tmp_path / "dotnet", framework_dir=tmp_path, source="synthetic")
    plan = effective_plan(experiment.build(), load_scenario(rejit.SCENARIO))
    return Evidence(trace=read_trace(path, strict=True), runtime=runtime, plan=plan)


JUDGES: dict[str, Callable[[Evidence], Judgement]] = {
    "REJIT-06": rejit.judge_rejit06, "REJIT-07": rejit.judge_rejit07, "REJIT-16": rejit.judge_rejit16,
    "REJIT-18": rejit.judge_rejit18, "REJIT-26": rejit.judge_rejit26, "REJIT-28": rejit.judge_rejit28,
}  # fmt: skip


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_a_lawful_run_conforms(clause: str, tmp_path: Path) -> None:
    verdict = JUDGES[clause](_evidence(tmp_path, _lawful()))
    assert verdict.status is Status.CONFORMS, verdict


def _without(records: Records, drop: Callable[[dict[str, Any]], bool]) -> Records:
    return [r for r in records if not drop(r)]


def _is(r: dict[str, Any], name: str, method: str) -> bool:
    return r.get("name") == name and r.get("args", {}).get("methodId") == TOKENS[method]


def test_REJIT_06_a_late_method_never_recompiled_diverges(tmp_path: Path) -> None:
    records = _without(_lawful(), lambda r: r.get("args", {}).get("methodId") == TOKENS["Late"])
    verdict = rejit.judge_rejit06(_evidence(tmp_path, records))
    assert verdict.status is Status.DIVERGES
    assert verdict.disagreements == ("Late: no GetReJITParameters before rejit.called",
                                     "Late: no ReJITCompilationStarted before rejit.called")  # fmt: skip


def test_REJIT_07_a_second_request_under_the_old_rejit_id_diverges(tmp_path: Path) -> None:
    records = _lawful()
    for r in records:
        if r.get("args", {}).get("rejitId") == 7:
            r["args"]["rejitId"] = 2
    verdict = rejit.judge_rejit07(_evidence(tmp_path, records))
    assert verdict.disagreements == ("Normal: recompiled after the second request under an earlier ReJITID",)


def test_REJIT_16_a_never_requested_method_reverted_with_S_OK_diverges(tmp_path: Path) -> None:
    """What both bundled runtimes do (common.toml)."""
    records = _lawful()
    revert = next(r for r in records if r.get("name") == "RequestRevert")
    revert["out"]["statuses"] = [0, 0]
    verdict = rejit.judge_rejit16(_evidence(tmp_path, records))
    assert verdict.disagreements == ("Never (never requested): status 0x00000000 S_OK, expected a failure "
                                     "(CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND)",)  # fmt: skip


def test_REJIT_16_an_entry_the_runtime_never_wrote_is_told_from_its_S_OK(tmp_path: Path) -> None:
    """The probe fills the status array before RequestRevert (out statusFill): an entry still holding the
    fill was not written, for a requested method as for the other, never read as the fill's own value."""
    records = _lawful()
    revert = next(r for r in records if r.get("name") == "RequestRevert")
    revert["out"]["statusFill"] = 0x0DEFACED
    revert["out"]["statuses"] = [0x0DEFACED, 0x0DEFACED]
    verdict = rejit.judge_rejit16(_evidence(tmp_path, records))
    heads = [line.split(":")[0] for line in verdict.disagreements]
    assert heads == ["Normal (requested)", "Never (never requested)"]
    assert all("not written by the runtime" in line for line in verdict.disagreements)


def test_REJIT_18_a_second_GetReJITParameters_for_the_generic_diverges(tmp_path: Path) -> None:
    records = _lawful()
    at = next(k for k, r in enumerate(records) if _is(r, "ReJITCompilationStarted", "Generic")
              and r["args"]["functionId"] == 0x201)  # fmt: skip
    records.insert(at, {**records[at], "name": "GetReJITParameters"})
    for k, r in enumerate(records):
        r["seq"] = k
    verdict = rejit.judge_rejit18(_evidence(tmp_path, records))
    assert verdict.disagreements == ("Generic: 2 GetReJITParameters for 2 recompiled function(s)",)


def test_REJIT_26_and_28_a_repeated_pair_and_an_unmatched_finish(tmp_path: Path) -> None:
    records = _lawful()
    loop = [r for r in records if _is(r, "ReJITCompilationStarted", "Loop")
            or _is(r, "ReJITCompilationFinished", "Loop")]  # fmt: skip
    end = records.index(loop[-1]) + 1
    records[end:end] = [dict(r) for r in loop]  # the OSR-like second pair on 8.0.4
    for k, r in enumerate(records):
        r["seq"] = k
    assert rejit.judge_rejit26(_evidence(tmp_path, records)).disagreements == (
        "Loop: 2 ReJITCompilationStarted for one FunctionID and ReJITID",)
    assert rejit.judge_rejit28(_evidence(tmp_path, records)).status is Status.CONFORMS
    unmatched = _without(records, lambda r: _is(r, "ReJITCompilationStarted", "Late"))
    assert rejit.judge_rejit28(_evidence(tmp_path, unmatched)).disagreements == (
        "a ReJITCompilationFinished without its ReJITCompilationStarted on its thread",)
    elsewhere = [dict(r) for r in records]
    finished = next(r for r in elsewhere if _is(r, "ReJITCompilationFinished", "Normal"))
    finished["os_tid"] = 99  # the model holds the pair to the thread its Started came on
    assert rejit.judge_rejit28(_evidence(tmp_path, elsewhere)).disagreements == (
        "a ReJITCompilationFinished without its ReJITCompilationStarted on its thread",)


def test_REJIT_05_the_not_enabled_answer(tmp_path: Path) -> None:
    records = _lawful()
    request = next(r for r in records if r.get("experiment") == rejit.REQUEST)
    request["hr"] = int(HResult.CORPROF_E_REJIT_NOT_ENABLED)
    lawful = _without(records, lambda r: str(r.get("name", "")).startswith(("ReJIT", "GetReJIT")))
    assert rejit.judge_rejit05(_evidence(tmp_path, lawful, rejit.NOT_ENABLED)).status is Status.CONFORMS
    request["hr"] = 0
    verdict = rejit.judge_rejit05(_evidence(tmp_path, records, rejit.NOT_ENABLED))
    assert verdict.status is Status.DIVERGES and len(verdict.disagreements) == 2, verdict
    assert rejit.judge_rejit05(_evidence(tmp_path, records)).status is Status.ERROR  # the flag was set


def _inlined_run(*, inlined: bool = True, plain_reaches_caller: bool = False,
                 inliners_reach_caller: bool = True) -> Records:
    """The records of a rejit-inlined run: Caller inlines Inlinee (JITInlining, the probe's tokens), a plain
    RequestReJIT of Inlinee, Caller called, RequestReJITWithInliners of Inlinee, Caller called."""
    out: Records = []

    def add(kind: str, **fields: Any) -> None:
        out.append({"seq": len(out), "kind": kind, "os_tid": 1, "tid": 2, **fields})

    def request(entry: str, name: str) -> None:
        add("call", name=name, experiment=entry, hr=0, out={"elapsedMs": 1.0},
            args={"methods": ["Inlinee"], "tokens": [TOKENS["Inlinee"]], "moduleId": MODULE, "thread": "own",
                  "point": "mark:x"})  # fmt: skip

    def recompile(method: str, function: int, rejit_id: int) -> None:
        ids = {"moduleId": MODULE, "methodId": TOKENS[method]}
        add("callback", name="GetReJITParameters", args={**ids, "pFunctionControl": 1})
        pair = {"functionId": function, "rejitId": rejit_id, **ids}
        add("callback", name="ReJITCompilationStarted", args=pair)
        add("callback", name="ReJITCompilationFinished", args={**pair, "hrStatus": 0})

    add("header", probe="0.1.0", pid=1)
    if inlined:
        add("callback", name="JITInlining", args={
            "callerId": 0x400, "calleeId": 0x300, "pfShouldInline": 1, "callerModuleId": MODULE,
            "callerMethodId": TOKENS["Caller"], "calleeModuleId": MODULE,
            "calleeMethodId": TOKENS["Inlinee"]})
    add("mark", name="rejit.inline-request", payload=None)
    request(rejit.INLINE_REQUEST, "RequestReJIT")
    if plain_reaches_caller:
        recompile("Caller", 0x400, 2)
    add("mark", name="rejit.inline-called", payload=None)
    add("mark", name="rejit.inliners", payload=None)
    request(rejit.INLINERS, "RequestReJITWithInliners")
    if inliners_reach_caller:
        recompile("Caller", 0x400, 3)
        recompile("Inlinee", 0x300, 4)
    add("mark", name="rejit.inliners-called", payload=None)
    add("end")
    return out


def test_REJIT_12_and_13_a_lawful_inlined_run_conforms(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, _inlined_run(), rejit.INLINED)
    for verdict in (rejit.judge_rejit12(ev), rejit.judge_rejit13(ev)):
        assert verdict.status is Status.CONFORMS, verdict
    assert rejit.INLINED.env == {"DOTNET_TieredCompilation": "0", "COMPlus_TieredCompilation": "0"}


def test_REJIT_12_the_inliner_recompiled_by_a_plain_request_diverges(tmp_path: Path) -> None:
    verdict = rejit.judge_rejit12(_evidence(tmp_path, _inlined_run(plain_reaches_caller=True), rejit.INLINED))
    assert verdict.disagreements == ("Caller (the inliner) recompiled after RequestReJIT of Inlinee alone",)


def test_REJIT_13_the_inliner_left_alone_by_RequestReJITWithInliners_diverges(tmp_path: Path) -> None:
    records = _inlined_run(inliners_reach_caller=False)
    verdict = rejit.judge_rejit13(_evidence(tmp_path, records, rejit.INLINED))
    assert verdict.disagreements == (
        "Caller (the inliner) not recompiled after RequestReJITWithInliners of Inlinee",
        "no GetReJITParameters for Caller (COR_PRF_REJIT_INLINING_CALLBACKS was set)")


def test_REJIT_12_and_13_without_a_proof_of_inlining_are_not_applicable(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, _inlined_run(inlined=False), rejit.INLINED)
    assert rejit.judge_rejit12(ev).status is Status.NOT_APPLICABLE
    assert rejit.judge_rejit13(ev).status is Status.NOT_APPLICABLE


def _invalid_token_run(*, errors: bool) -> Records:
    """rejit-invalid-token's records: RequestReJIT of Normal and of the invalid tokens (named #raw<k>),
    Normal recompiled, and (``errors``) one per-method ReJITError per invalid token, made inside the call
    (before the probe's call record, which it writes when the call returns: what both runtimes do)."""
    records = _lawful()[:3]  # header, rejit.warm, rejit.request
    tokens = [TOKENS["Normal"], *rejit.INVALID_TOKENS]
    names = ["Normal", *(f"#raw{k}" for k in range(len(rejit.INVALID_TOKENS)))]
    if errors:
        records += [{"kind": "callback", "name": "ReJITError", "args": {
            "moduleId": MODULE, "methodId": t, "functionId": 0, "hrStatus": 0x80070057}}
            for t in rejit.INVALID_TOKENS]
    args = {"methods": names, "tokens": tokens, "moduleId": MODULE, "thread": "own", "point": "mark:x"}
    records.append({"kind": "call", "name": "RequestReJIT", "experiment": rejit.REQUEST, "hr": 0,
                    "out": {"elapsedMs": 1.0}, "args": args})
    ids = {"moduleId": MODULE, "methodId": TOKENS["Normal"]}
    records += [{"kind": "callback", "name": "GetReJITParameters", "args": {**ids, "pFunctionControl": 1}},
                {"kind": "callback", "name": "ReJITCompilationStarted",
                 "args": {"functionId": 0x100, "rejitId": 2, **ids}},
                {"kind": "mark", "name": "rejit.called", "payload": None}, {"kind": "end"}]
    return [{"os_tid": 1, "tid": 2, **r, "seq": k} for k, r in enumerate(records)]


def test_REJIT_29_a_per_method_ReJITError_per_invalid_token_conforms(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, _invalid_token_run(errors=True), rejit.INVALID_TOKEN)
    assert rejit.judge_rejit29(ev).status is Status.CONFORMS


def test_REJIT_29_silence_for_the_invalid_tokens_diverges(tmp_path: Path) -> None:
    """A runtime that answers S_OK and reports nothing for the invalid tokens (neither bundled one does)."""
    verdict = rejit.judge_rejit29(_evidence(tmp_path, _invalid_token_run(errors=False), rejit.INVALID_TOKEN))
    assert verdict.disagreements == ("0x00000000: no ReJITError", "0x02000002: no ReJITError")


@pytest.mark.live
@pytest.mark.clause(*REJIT_CLAUSES)
def test_REJIT_live_suite_on_every_runtime(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(REJIT_CLAUSES, runtimes)
