"""Judges of conformance.checks.buffers: synthetic traces (conforming and doctored) and one live run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.checks import buffers
from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import RECORD_ADAPTER, Trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

S_OK = 0
E_INVALIDARG = 0x80070057
INSUFFICIENT = 0x8007007A
SENTINEL = "cd"

MODULE_PATH = "/tmp/run/app.dll"
CLASS_ARGS = [0x7F0000001000, 0x7F0000002000, 0x7F0000003000]

Call = dict[str, Any]


def _wide(text: str) -> list[str]:
    raw = (text + "\x00").encode("utf-16-le")
    return [raw[i : i + 2].hex() for i in range(0, len(raw), 2)]


def _ids(values: list[int]) -> list[str]:
    return [v.to_bytes(8, "little").hex() for v in values]


def conforming_calls(method: str, data: list[str], wide: bool, extra: int = 3) -> list[Call]:
    """What a method that follows the page exactly records: S_OK, total, min(total, size) elements; a cut
    string keeps a NUL in its last written element. Written here as an implementation, not via the model."""
    total = len(data)
    esize = len(data[0]) // 2 if data else 2
    sizes = [(0, False), (0, True)]
    for n in (1, total - 1, total, total + extra):
        if n >= 0 and (n, True) not in sizes:
            sizes.append((n, True))
    sizes.append((total, False))  # the caller-error call (NULL, n > 0)
    calls: list[Call] = []
    for n, present in sizes:
        if not present and n > 0:
            calls.append(
                {
                    "method": method,
                    "size": n,
                    "present": False,
                    "hr": E_INVALIDARG,
                    "pc": None,
                    "esize": esize,
                    "elems": [],
                    "wide": wide,
                }
            )
            continue
        fill = data[: min(n, total)] if present else []
        if wide and present and 0 < n < total:
            fill = [*data[: n - 1], "0000"]
        calls.append(
            {
                "method": method,
                "size": n,
                "present": present,
                "hr": S_OK,
                "pc": total,
                "esize": esize,
                "elems": fill,
                "wide": wide,
            }
        )
    return calls


def make_trace(calls: list[Call], truth: dict[str, Any] | None = None) -> Trace:
    records: list[dict[str, Any]] = [{"seq": 0, "kind": "header", "os_tid": 1, "probe": "test", "pid": 1}]
    if truth is not None:
        records.append(
            {"seq": 1, "kind": "mark", "os_tid": 1, "name": "expect.buffers", "payload": json.dumps(truth)}
        )
    for call in calls:
        n, esize = call["size"], call["esize"]
        elems = list(call["elems"])
        hexs = "".join(elems) + SENTINEL * esize * (n - len(elems)) if call["present"] else None
        out: dict[str, Any] = {
            "pcBufferMax": call["pc"],
            "pcBufferMaxB": call["pc"],
            "hrB": call["hr"],
            "changed": call.get("changed", len(elems)),
            "extent": len(elems),
            "guardIntact": call.get("guard", True),
            "hex": hexs,
        }
        if call["wide"]:
            nul = next((i for i, e in enumerate(elems) if e == "0000"), None)
            out["text"] = "" if call["present"] else None
            out["nulAt"] = nul
        records.append(
            {
                "seq": len(records),
                "kind": "call",
                "os_tid": 1,
                "name": call["method"],
                "experiment": f"buf-{call['method']}",
                "args": {
                    "target": {},
                    "cBufferSizeStart": n,
                    "bufferPresent": call["present"],
                    "elementSize": esize,
                    "guardElements": 4,
                },
                "out": out,
                "hr": call["hr"],
            }
        )
    return Trace(path=Path("synthetic.jsonl"), records=[RECORD_ADAPTER.validate_python(r) for r in records])


def base_calls() -> list[Call]:
    return [
        *conforming_calls("GetModuleInfo", _wide(MODULE_PATH), wide=True),
        *conforming_calls("GetAssemblyInfo", _wide("app"), wide=True),
        *conforming_calls("GetClassIDInfo2", _ids(CLASS_ARGS), wide=False),
        *conforming_calls("GetCodeInfo2", ["00100000000000002000000000000000"], wide=False),
    ]


TRUTH = {"frame": "Pick", "modulePath": MODULE_PATH, "assemblyName": "app", "classTypeArgs": CLASS_ARGS}

JUDGES: dict[str, Callable[[Evidence], Judgement]] = {
    "BUF-01": buffers.judge_buf01,
    "BUF-02": buffers.judge_buf02,
    "BUF-03": buffers.judge_buf03,
    "BUF-04": buffers.judge_buf04,
    "BUF-05": buffers.judge_buf05,
    "BUF-09": buffers.judge_buf09,
    "BUF-10": buffers.judge_buf10,
}


def plan_for(calls: list[Call]) -> dict[str, Any]:
    """The scenario's plan (as the harness writes it), cut to the methods ``calls`` holds (all, if none)."""
    plan = effective_plan(buffers.BUFFERS_BASIC.build(), load_scenario(buffers.SCENARIO))
    methods = {c["method"] for c in calls}
    if methods:
        plan["experiments"] = [e for e in plan["experiments"] if e["args"]["method"] in methods]
    return plan


def judge(
    clause: str, calls: list[Call], truth: dict[str, Any] | None = TRUTH, plan: dict[str, Any] | None = None
) -> Judgement:
    runtime = Runtime(version="8.0.4", host=Path("/x/dotnet"), framework_dir=Path("/x/fx"), source="test")
    plan = plan_for(calls) if plan is None else plan
    return JUDGES[clause](Evidence(trace=make_trace(calls, truth), runtime=runtime, plan=plan))


def find(calls: list[Call], method: str, size: int, present: bool = True) -> Call:
    return next(c for c in calls if c["method"] == method and c["size"] == size and c["present"] is present)


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_conforming_trace_conforms_BUF_01_02_03_04_05_09_10(clause: str) -> None:
    result = judge(clause, base_calls())
    assert result.status is Status.CONFORMS, result.observed
    assert result.evidence
    assert result.disagreements == ()


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_BUF_target_method_missing_is_not_applicable_with_the_reason(clause: str) -> None:
    """Issue 7 finding 1: with the scenario's target method renamed the probe records no buffer call; every
    BUF clause must say why it was not judged (n/a, which the suite fails), never conform."""
    result = judge(clause, [], {})
    assert result.status is Status.NOT_APPLICABLE
    assert result.observed.startswith("no buffer_probe call recorded for any of the 12 planned methods")
    assert "the frame 'Pick' the plan names was never on the stack" in result.observed


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_BUF_a_planned_method_never_recorded_is_an_error(clause: str) -> None:
    calls = base_calls()
    plan = plan_for([*calls, *conforming_calls("GetClassLayout", ["00"], wide=False)])
    result = judge(clause, calls, plan=plan)
    assert result.status is Status.ERROR
    assert "planned but never recorded: GetClassLayout (buf-GetClassLayout)" in result.observed


def test_BUF_judges_are_registered_with_the_plan_entries_they_read() -> None:
    experiment = buffers.BUFFERS_BASIC.build()
    plan_ids = {e["id"] for e in plan_for([])["experiments"]}
    for j in experiment.judges:
        assert j.uses == buffers.PLAN_ENTRIES
        assert set(j.uses) == plan_ids


@pytest.mark.clause("BUF-01")
def test_BUF_01_guard_written_diverges() -> None:
    calls = base_calls()
    find(calls, "GetModuleInfo", 0)["guard"] = False  # the runtime's NUL pre-store into a 0-element buffer
    result = judge("BUF-01", calls)
    assert result.status is Status.DIVERGES
    assert "GetModuleInfo size=0 (buffer): wrote past element 0" in result.observed
    assert result.disagreements == ("GetModuleInfo size=0 (buffer): wrote past element 0",)
    assert judge("BUF-03", calls).status is Status.CONFORMS


@pytest.mark.clause("BUF-01")
def test_BUF_01_guard_becomes_written_beyond() -> None:
    trace = make_trace([dict(find(base_calls(), "GetCodeInfo2", 1), guard=False)], None)
    (group,) = buffers.collect(trace)
    assert group.calls[0].observed().written_beyond == 1
    assert buffers.collect(make_trace(base_calls(), None))[0].calls[1].observed().written_beyond == 0


def test_observed_call_marks_elements_past_extent_untouched() -> None:
    call = dict(find(base_calls(), "GetClassIDInfo2", 6))
    (group,) = buffers.collect(make_trace([call], None))
    observed = group.calls[0].observed()
    assert observed.content == (*CLASS_ARGS, None, None, None)
    assert observed.elements_written == 3 and observed.pc_buffer_max == 3


@pytest.mark.clause("BUF-02")
def test_BUF_02_clamped_count_diverges() -> None:
    calls = base_calls()
    find(calls, "GetClassIDInfo2", 1)["pc"] = 1  # number copied instead of the total
    result = judge("BUF-02", calls)
    assert result.status is Status.DIVERGES
    assert "GetClassIDInfo2 size=1 (buffer): *pcBufferMax=1, expected the total 3" in result.observed


@pytest.mark.clause("BUF-02")
def test_BUF_02_total_checked_against_scenario_truth() -> None:
    calls = [c for c in base_calls() if c["method"] == "GetAssemblyInfo"]
    # A runtime consistent with itself but wrong about the total: "app" + NUL is 4, it says 5 everywhere.
    wrong = conforming_calls("GetAssemblyInfo", [*_wide("app"), "0000"], wide=True)
    assert judge("BUF-02", calls).status is Status.CONFORMS
    result = judge("BUF-02", wrong)
    assert result.status is Status.DIVERGES
    assert "GetAssemblyInfo size=0 (NULL): *pcBufferMax=5, expected the total 4" in result.observed


@pytest.mark.clause("BUF-02")
def test_BUF_02_a_uniform_plus_one_in_GetCodeInfo2s_count_is_BUF_02_not_BUF_03() -> None:
    """A runtime that says one code region more than it has, at every size (NULL, 0 included), and writes
    the regions it has: the probe sizes the buffer from that count, so the call at size ``needed`` leaves
    its last element untouched. What it wrote is the answer; the count is what is wrong."""
    regions = ["00100000000000002000000000000000", "00200000000000001000000000000000"]
    calls = conforming_calls("GetCodeInfo2", [*regions, "00300000000000001000000000000000"], wide=False)
    for call in calls:
        if call["present"]:
            call["elems"] = regions[: min(len(regions), call["size"])]
    assert [(c["size"], c["pc"], len(c["elems"])) for c in calls if c["present"]] == [
        (0, 3, 0), (1, 3, 1), (2, 3, 2), (3, 3, 2), (6, 3, 2)
    ]  # fmt: skip
    truth = {"frame": "Pick"}  # GetCodeInfo2: self-consistency only
    result = judge("BUF-02", calls, truth)
    assert result.status is Status.DIVERGES
    assert result.disagreements == tuple(
        f"GetCodeInfo2 size={n} ({'buffer' if present else 'NULL'}): *pcBufferMax=3, expected the total 2"
        for n, present in ((0, False), (0, True), (1, True), (2, True), (3, True), (6, True))
    )
    for clause in ("BUF-01", "BUF-03", "BUF-05", "BUF-09", "BUF-10"):
        assert judge(clause, calls, truth).status is Status.CONFORMS, clause


@pytest.mark.clause("BUF-03")
def test_BUF_03_too_few_elements_diverges() -> None:
    calls = base_calls()
    total = len(_wide(MODULE_PATH))
    cut = find(calls, "GetModuleInfo", total - 1)
    cut["elems"] = ["0000"]  # only the NUL, as GetModuleInfo does
    result = judge("BUF-03", calls)
    assert result.status is Status.DIVERGES
    assert f"elements written, expected min(total, size) = {total - 1}" in result.observed


@pytest.mark.clause("BUF-03")
def test_BUF_03_content_compared_byte_for_byte() -> None:
    calls = base_calls()
    cut = find(calls, "GetClassIDInfo2", 2)
    cut["elems"] = [cut["elems"][0], "ff" * 8]  # right count, wrong second element
    result = judge("BUF-03", calls)
    assert result.status is Status.DIVERGES
    assert "element 1 = 0xffffffffffffffff, expected 0x7f0000002000" in result.observed


@pytest.mark.clause("BUF-03")
def test_BUF_03_full_answer_checked_against_scenario_classids() -> None:
    other = conforming_calls("GetClassIDInfo2", _ids([1, 2, 3]), wide=False)
    result = judge("BUF-03", other)
    assert result.status is Status.DIVERGES
    # one line for the one fact (no ClassID values: they differ between runs), not one per size
    assert result.disagreements == (
        "GetClassIDInfo2: element 0 differs from the scenario's class type arguments (RuntimeTypeHandle)",
    )
    assert judge("BUF-03", other, truth={}).status is Status.CONFORMS  # consistent with itself


@pytest.mark.clause("BUF-04")
def test_BUF_04_null_zero_rejected_diverges() -> None:
    calls = base_calls()
    find(calls, "GetCodeInfo2", 0, present=False)["hr"] = E_INVALIDARG
    result = judge("BUF-04", calls)
    assert result.status is Status.DIVERGES and "GetCodeInfo2 size=0 (NULL)" in result.observed


@pytest.mark.clause("BUF-05")
def test_BUF_05_failure_on_complete_answer_diverges() -> None:
    calls = base_calls()
    find(calls, "GetCodeInfo2", 1)["hr"] = 0x80004005
    result = judge("BUF-05", calls)
    assert (
        result.status is Status.DIVERGES
        and "GetCodeInfo2 size=1 (buffer): returned 0x80004005" in result.observed
    )


@pytest.mark.clause("BUF-09")
def test_BUF_09_insufficient_buffer_diverges() -> None:
    calls = base_calls()
    find(calls, "GetAssemblyInfo", 3)["hr"] = INSUFFICIENT
    result = judge("BUF-09", calls)
    assert result.status is Status.DIVERGES and "0x8007007A" in result.observed


@pytest.mark.clause("BUF-09")
def test_BUF_09_truncated_string_without_nul_diverges() -> None:
    calls = base_calls()
    find(calls, "GetAssemblyInfo", 3)["elems"] = _wide("app")[:3]  # "app" cut without a terminator
    result = judge("BUF-09", calls)
    assert result.status is Status.DIVERGES
    assert "element 2 = 0x70: the string is not NUL-terminated" in result.observed
    assert judge("BUF-03", calls).status is Status.CONFORMS  # the termination is BUF-09's question


@pytest.mark.clause("BUF-03", "BUF-09")
def test_BUF_03_BUF_09_insufficient_buffer_with_lone_nul() -> None:
    """GetModuleInfo's pattern: 0x8007007A and a NUL stored in element 0 of a too-small buffer. One
    element written of the size-1 that fit (BUF-03) and an error HRESULT (BUF-09); nothing past the
    buffer (BUF-01)."""
    calls = base_calls()
    total = len(_wide(MODULE_PATH))
    for n in (1, total - 1):
        cut = find(calls, "GetModuleInfo", n)
        cut["hr"], cut["elems"] = INSUFFICIENT, ["0000"]
    b03, b09 = judge("BUF-03", calls), judge("BUF-09", calls)
    assert b03.status is Status.DIVERGES
    assert f"size={total - 1} (buffer): 1 elements written, expected min(total, size)" in b03.observed
    assert b09.status is Status.DIVERGES
    assert "size=1 (buffer): returned 0x8007007A HRESULT_ERROR_INSUFFICIENT_BUFFER for a too-small" in (
        b09.observed
    )
    assert judge("BUF-01", calls).status is Status.CONFORMS
    assert judge("BUF-05", calls).status is Status.CONFORMS


@pytest.mark.clause("BUF-09")
def test_BUF_09_count_without_nul_against_truth_is_buf09_not_buf02() -> None:
    calls = conforming_calls("GetAssemblyInfo", _wide("app")[:3], wide=True)  # counts 3 for "app"
    result = judge("BUF-09", calls)
    assert result.status is Status.DIVERGES
    assert "*pcBufferMax=3 leaves out the NUL terminator, expected 4" in result.observed
    assert judge("BUF-02", calls).status is Status.CONFORMS


@pytest.mark.clause("BUF-09")
def test_BUF_09_count_without_nul_diverges() -> None:
    # A runtime that counts 3 for "app" (no NUL) and fills exactly that.
    calls = conforming_calls("GetAssemblyInfo", _wide("app")[:3], wide=True)
    result = judge("BUF-09", calls, truth={})
    assert result.status is Status.DIVERGES and "count includes the NUL" in result.observed


@pytest.mark.clause("BUF-10")
def test_BUF_10_size_zero_error_diverges() -> None:
    calls = base_calls()
    find(calls, "GetCodeInfo2", 0)["hr"] = INSUFFICIENT
    result = judge("BUF-10", calls)
    assert result.status is Status.DIVERGES
    assert "GetCodeInfo2 size=0 (buffer): returned 0x8007007A" in result.observed


@pytest.mark.clause("BUF-10")
def test_BUF_10_null_call_without_total_diverges() -> None:
    calls = base_calls()
    first = find(calls, "GetCodeInfo2", 0, present=False)
    first["hr"], first["pc"] = INSUFFICIENT, None
    assert judge("BUF-10", calls).status is Status.DIVERGES
    assert judge("BUF-02", calls).status is Status.DIVERGES
    assert "*pcBufferMax was not set" in judge("BUF-02", calls).observed


@pytest.mark.clause("BUF-04", "BUF-10")
def test_BUF_04_null_zero_argument_error_is_buf04_not_buf10() -> None:
    calls = base_calls()
    first = find(calls, "GetCodeInfo2", 0, present=False)
    first["hr"], first["pc"] = E_INVALIDARG, None
    result = judge("BUF-04", calls)
    assert result.status is Status.DIVERGES and "the legal (NULL, 0) form rejected" in result.observed
    assert judge("BUF-10", calls).status is Status.CONFORMS
    assert judge("BUF-02", calls).status is Status.DIVERGES
    # without a total the clauses that need one cannot judge GetCodeInfo2: said, never a conformance
    assert judge("BUF-05", calls).disagreements == (
        "GetCodeInfo2: (NULL, 0) returned 0x80070057 E_INVALIDARG without *pcBufferMax: cannot be judged",
    )


# --- the scenario's truth (issue 7 finding 6) ---------------------------------------------------------


def _domain_calls(name: str) -> list[Call]:
    return conforming_calls("GetAppDomainInfo", _wide(name), wide=True)


@pytest.mark.clause("BUF-02", "BUF-03")
def test_BUF_02_03_app_domain_name_is_checked_against_the_scenarios_friendly_name() -> None:
    """Finding 6: the scenario's AppDomain name was read and ignored; a runtime answering another name
    consistently at every size passed. Now its full answer is compared with the scenario's."""
    truth = {**TRUTH, "appDomainName": "app"}
    assert judge("BUF-03", _domain_calls("app"), truth).status is Status.CONFORMS
    b03 = judge("BUF-03", _domain_calls("clrhost"), truth)
    b02 = judge("BUF-02", _domain_calls("clrhost"), truth)
    assert b03.status is Status.DIVERGES and b02.status is Status.DIVERGES
    assert b03.disagreements == (
        "GetAppDomainInfo: answers 'clrhost', the scenario's AppDomain.CurrentDomain.FriendlyName is 'app'",
    )
    assert b02.disagreements == (
        "GetAppDomainInfo: the total is 8, the scenario's AppDomain.CurrentDomain.FriendlyName gives 4",
    )
    # the protocol itself is fine: the other clauses conform
    for clause in ("BUF-01", "BUF-05", "BUF-09", "BUF-10"):
        assert judge(clause, _domain_calls("clrhost"), truth).status is Status.CONFORMS


@pytest.mark.clause("BUF-03")
def test_BUF_03_runtime_version_against_environment_version_where_comparable() -> None:
    calls = conforming_calls("GetRuntimeInformation", _wide("8.0.4"), wide=True)
    assert judge("BUF-03", calls, {**TRUTH, "runtimeVersion": "8.0.4"}).status is Status.CONFORMS
    wrong = judge("BUF-03", calls, {**TRUTH, "runtimeVersion": "8.0.5"})
    assert wrong.disagreements == (
        "GetRuntimeInformation: answers '8.0.4', the scenario's Environment.Version is '8.0.5'",
    )
    # 3.1 answers "v4.0.30319", which Environment.Version (3.1.23) cannot give: said, not compared
    old = conforming_calls("GetRuntimeInformation", _wide("v4.0.30319"), wide=True)
    result = judge("BUF-03", old, {**TRUTH, "runtimeVersion": "3.1.23"})
    assert result.status is Status.CONFORMS
    said = "self-consistency only: GetRuntimeInformation (before .NET 5 the CLR 4 compatibility version, not "
    assert said + "Environment.Version 3.1.23)" in result.observed


@pytest.mark.clause("BUF-02", "BUF-03")
def test_BUF_02_03_app_domains_holding_the_module_and_class_layout_from_the_scenario() -> None:
    domain = 0x5600_0000_1000
    two = conforming_calls("GetAppDomainsContainingModule", _ids([domain, domain + 8]), wide=False)
    result = judge("BUF-02", two, {**TRUTH, "appDomainsHoldingModule": 1})
    assert result.disagreements == (
        "GetAppDomainsContainingModule: the total is 2, the scenario's app domains holding the assembly "
        "gives 1",
    )
    one = conforming_calls("GetAppDomainsContainingModule", _ids([domain]), wide=False)
    ok = judge("BUF-02", one, {**TRUTH, "appDomainsHoldingModule": 1})
    assert ok.status is Status.CONFORMS
    assert "GetAppDomainsContainingModule (AppDomainIDs; their number is the scenario's)" in ok.observed
    fields = [{"name": "First", "token": 0x04000001, "offset": 24}, {"name": "Second", "token": 0x04000002,
                                                                      "offset": 8}]
    layout = conforming_calls("GetClassLayout", ["0100000418000000", "0200000408000000"], wide=False)
    assert judge("BUF-03", layout, {**TRUTH, "fields": fields}).status is Status.CONFORMS
    fields[1]["offset"] = 16  # the scenario measured another offset
    bad = judge("BUF-03", layout, {**TRUTH, "fields": fields})
    assert bad.disagreements == (
        "GetClassLayout: the elements are not the scenario's instance fields (FieldInfo.MetadataToken, "
        "offset)",
    )


def test_BUF_self_consistency_only_is_said_where_no_truth_can_exist() -> None:
    result = judge("BUF-05", base_calls())
    assert result.status is Status.CONFORMS
    assert "self-consistency only: GetCodeInfo2 (code regions)" in result.observed
    assert "3 methods against the scenario's truth" in result.observed


def test_BUF_disagreement_lines_do_not_depend_on_the_path_length() -> None:
    """A path's length differs between machines: its sizes and counts are written relative to needed and
    the total, its characters left out, so an expectation pins the same lines everywhere."""
    lines = []
    for path in ("/tmp/run/app.dll", "/home/someone/longer/runs/app.dll"):
        calls = conforming_calls("GetModuleInfo", _wide(path), wide=True)
        total = len(_wide(path))
        for n in (1, total - 1):
            cut = find(calls, "GetModuleInfo", n)
            cut["hr"], cut["elems"] = INSUFFICIENT, ["0000"]
        truth = {**TRUTH, "modulePath": path}
        lines.append([judge(c, calls, truth).disagreements for c in ("BUF-03", "BUF-09")])
    assert lines[0] == lines[1]
    assert lines[0][0] == (
        "GetModuleInfo size=needed-1 (buffer): 1 elements written, expected min(total, size) = total-1",
        "GetModuleInfo size=needed-1 (buffer): an element differs from the full answer's prefix",
    )


def test_BUF_truth_mark_missing_or_malformed_is_a_one_line_harness_error() -> None:
    with pytest.raises(HarnessError, match=r"expected one mark 'expect\.buffers'"):
        judge("BUF-02", base_calls(), None)
    with pytest.raises(HarnessError, match=r"classTypeArgs: expected a list of non-negative integers"):
        judge("BUF-02", base_calls(), {"classTypeArgs": [1, -2]})


def test_experiment_registered() -> None:
    experiment = buffers.BUFFERS_BASIC.build()
    assert experiment.scenario == "buffers-basic"
    assert {j.clause for j in experiment.judges} == set(JUDGES)


@pytest.mark.live
@pytest.mark.clause("BUF-01", "BUF-02", "BUF-03", "BUF-04", "BUF-05", "BUF-09", "BUF-10")
def test_live_BUF_01_02_03_04_05_09_10_as_documented_or_expected(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(sorted(JUDGES), runtimes)
