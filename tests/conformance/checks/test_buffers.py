"""Judges of conformance.checks.buffers: synthetic traces (conforming and doctored) and one live run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.checks import buffers
from conformance.core.runtimes import Runtime
from conformance.core.trace import RECORD_ADAPTER, Trace
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


def judge(clause: str, calls: list[Call], truth: dict[str, Any] | None = TRUTH) -> Judgement:
    runtime = Runtime(version="8.0.4", host=Path("/x/dotnet"), framework_dir=Path("/x/fx"), source="test")
    return JUDGES[clause](Evidence(trace=make_trace(calls, truth), runtime=runtime, plan={}))


def find(calls: list[Call], method: str, size: int, present: bool = True) -> Call:
    return next(c for c in calls if c["method"] == method and c["size"] == size and c["present"] is present)


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_conforming_trace_conforms_BUF_01_02_03_04_05_09_10(clause: str) -> None:
    result = judge(clause, base_calls())
    assert result.status is Status.CONFORMS, result.observed
    assert result.evidence


@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_empty_trace_is_not_applicable(clause: str) -> None:
    assert judge(clause, [], None).status is Status.NOT_APPLICABLE


@pytest.mark.clause("BUF-01")
def test_BUF_01_guard_written_diverges() -> None:
    calls = base_calls()
    find(calls, "GetModuleInfo", 0)["guard"] = False  # the runtime's NUL pre-store into a 0-element buffer
    result = judge("BUF-01", calls)
    assert result.status is Status.DIVERGES
    assert "GetModuleInfo size=0 (buffer): wrote past element 0" in result.observed
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
    assert "GetClassIDInfo2 size=1 (buffer): element 0 = 0x1, expected 0x7f0000001000" in result.observed
    assert judge("BUF-03", other, truth=None).status is Status.CONFORMS  # consistent with itself


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
    result = judge("BUF-09", calls, truth=None)
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


def test_experiment_registered() -> None:
    experiment = buffers.BUFFERS_BASIC
    assert experiment.scenario == "buffers-basic"
    assert {j.clause for j in experiment.judges} == set(JUDGES)


@pytest.mark.live
@pytest.mark.clause("BUF-01", "BUF-02", "BUF-03", "BUF-04", "BUF-05", "BUF-09", "BUF-10")
def test_live_BUF_01_02_03_04_05_09_10_as_documented_or_expected(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(sorted(JUDGES), runtimes)
