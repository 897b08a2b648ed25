"""conformance.checks.hooks: the FE2 judges on synthetic hooks-enter traces (conforming and doctored), and the
live suite for the FE2 clauses on every bundled runtime."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.checks import hooks
from conformance.core.errors import HarnessError
from conformance.core.paths import SCENARIOS_DIR
from conformance.core.runtimes import Runtime
from conformance.core.trace import read_trace
from conformance.suite.verdicts import Evidence, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

FE2_CLAUSES = ["FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14"]
XOR = hooks.XOR_MASK
TID = 4242

#: (method, token, funcId, args); the scenario's calls, in order (Add twice)
METHODS = {
    "Add": (0x06000001, 0x7000_1000),
    "Mul": (0x06000002, 0x7000_1028),
    "Five": (0x06000003, 0x7000_1050),
    "Eight": (0x06000004, 0x7000_1078),
}
MAIN = (0x06000007, 0x7000_2000)
CALLS: list[tuple[str, list[tuple[str, int]]]] = [
    ("Add", [("int", 3), ("int", 4)]),
    ("Mul", [("long", 5), ("long", 6)]),
    ("Five", [("int", 1), ("int", -2), ("int", 3), ("int", -4), ("int", 5)]),
    (
        "Eight",
        [
            ("int", 7),
            ("long", 8),
            ("int", -9),
            ("long", 10),
            ("int", 11),
            ("long", 12),
            ("int", 13),
            ("long", -14),
        ],
    ),
    ("Add", [("int", 100), ("int", -200)]),
]


def _ranges(args: list[tuple[str, int]]) -> list[dict[str, Any]]:
    out = []
    for j, (kind, value) in enumerate(args):
        size = hooks.TYPE_SIZES[kind]
        out.append(
            {
                "startAddress": 0x7FFF_0000 + 8 * j,
                "length": size,
                "bytes": value.to_bytes(size, "little", signed=True).hex(),
            }
        )
    return out


def _records(function_args: bool = True) -> list[dict[str, Any]]:
    """A hooks-enter trace as the probe writes it: Main is entered first, then the five calls."""
    plan = hooks.hooks_plan(function_args)
    recs: list[dict[str, Any]] = [
        {"kind": "header", "probe": "0.1.0", "pid": 1, "plan": plan},
        {
            "kind": "call",
            "name": "SetEventMask2",
            "args": {"dwEventsLow": plan["event_mask"]},
            "out": {},
            "hr": 0,
        },
        {
            "kind": "call",
            "name": "SetFunctionIDMapper2",
            "experiment": "fe2-hooks",
            "args": {},
            "out": {},
            "hr": 0,
        },
        {
            "kind": "call",
            "name": "SetEnterLeaveFunctionHooks2",
            "experiment": "fe2-hooks",
            "args": {},
            "out": {},
            "hr": 0,
        },
    ]
    for token, fid in [MAIN, *METHODS.values()]:
        recs.append(
            {
                "kind": "callback",
                "name": "FunctionIDMapper2",
                "hr": 0,
                "args": {"funcId": fid, "token": token, "returned": fid ^ XOR, "pbHookFunction": True},
            }
        )
    payload = {
        "calls": [
            {
                "method": f"Targets::{m}",
                "token": METHODS[m][0],
                "args": [{"type": k, "value": v} for k, v in a],
            }
            for m, a in CALLS
        ],
        "ok": True,
    }
    recs.append({"kind": "mark", "name": "fe2.calls", "payload": json.dumps(payload)})
    recs.append({"kind": "mark", "name": "fe2.flush", "payload": None})
    entries: list[tuple[tuple[int, int], list[tuple[str, int]]]] = [(MAIN, [])] + [
        (METHODS[m], a) for m, a in CALLS
    ]
    for i, ((token, fid), args) in enumerate(entries):
        enter: dict[str, Any] = {
            "funcId": fid,
            "clientData": fid ^ XOR,
            "func": 0x7FFE_0000 + 0x40 * i,
            "argumentInfo": 0,
            "hook_index": i,
            "hook_os_tid": TID,
        }
        if function_args:
            enter.update(
                argumentInfo=0x7FFD_0000 + 0x40 * i,
                numRanges=len(args),
                totalArgumentSize=sum(hooks.TYPE_SIZES[k] for k, _ in args),
                ranges=_ranges(args),
            )
        recs.append({"kind": "callback", "name": "FunctionEnter2", "args": enter, "hr": 0})
        recs.append(
            {
                "kind": "call",
                "name": "GetFunctionInfo2",
                "experiment": "fe2-flush",
                "args": {"funcId": fid, "frameInfo": enter["func"], "inside_hook": True, "hook_index": i},
                "out": {"token": token, "classId": 1, "moduleId": 2},
                "hr": 0,
            }
        )
    recs.append({"kind": "end"})
    return recs


def _entry(records: list[dict[str, Any]], hook_index: int) -> dict[str, Any]:
    for r in records:
        if r.get("name") == "FunctionEnter2" and r["args"]["hook_index"] == hook_index:
            return r
    raise AssertionError(f"no entry {hook_index}")


def _frame_use(records: list[dict[str, Any]], hook_index: int) -> dict[str, Any]:
    for r in records:
        if r.get("name") == "GetFunctionInfo2" and r["args"]["hook_index"] == hook_index:
            return r
    raise AssertionError(f"no GetFunctionInfo2 {hook_index}")


def judge(
    tmp_path: Path,
    fn: Callable[[Evidence], Judgement],
    records: list[dict[str, Any]],
    function_args: bool = True,
) -> Judgement:
    path = tmp_path / "trace.jsonl"
    with path.open("w") as f:
        for seq, r in enumerate(records):
            f.write(json.dumps({"seq": seq, "os_tid": TID, "tid": None, **r}) + "\n")
    runtime = Runtime(version="9.9.9", host=tmp_path / "dotnet", framework_dir=tmp_path, source="synthetic")
    return fn(
        Evidence(trace=read_trace(path, strict=True), runtime=runtime, plan=hooks.hooks_plan(function_args))
    )


# --- conforming traces ----------------------------------------------------------------------------------


@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_conforming_trace_conforms_on_every_clause(tmp_path: Path) -> None:
    records = _records()
    for fn in (
        hooks.judge_fe2_01,
        hooks.judge_fe2_02,
        hooks.judge_fe2_03,
        hooks.judge_fe2_04,
        hooks.judge_fe2_14,
    ):
        result = judge(tmp_path, fn, records)
        assert result.status is Status.CONFORMS, (fn.__name__, result.observed)
        assert result.evidence


def test_FE2_01_picture_names_the_calls_in_order(tmp_path: Path) -> None:
    result = judge(tmp_path, hooks.judge_fe2_01, _records())
    assert [p["label"] for p in result.picture] == [f"Targets::{m}" for m, _ in CALLS]
    assert all(p["ok"] for p in result.picture)


def test_FE2_04_no_args_run_conforms_with_null_argument_info(tmp_path: Path) -> None:
    result = judge(tmp_path, hooks.judge_fe2_04, _records(function_args=False), function_args=False)
    assert result.status is Status.CONFORMS
    assert "without COR_PRF_ENABLE_FUNCTION_ARGS" in result.observed


def test_FE2_14_not_applicable_without_function_args(tmp_path: Path) -> None:
    result = judge(tmp_path, hooks.judge_fe2_14, _records(function_args=False), function_args=False)
    assert result.status is Status.NOT_APPLICABLE


# --- doctored traces ------------------------------------------------------------------------------------


def test_FE2_01_caller_funcid_instead_of_callee_diverges(tmp_path: Path) -> None:
    records = _records()
    entry = _entry(records, 2)  # Mul
    entry["args"]["funcId"] = MAIN[1]
    entry["args"]["clientData"] = MAIN[1] ^ XOR
    result = judge(tmp_path, hooks.judge_fe2_01, records)
    assert result.status is Status.DIVERGES
    assert not all(p["ok"] for p in result.picture) or len(result.picture) != len(CALLS)


def test_FE2_01_calls_out_of_order_diverge(tmp_path: Path) -> None:
    records = _records()
    a, b = _entry(records, 2)["args"], _entry(records, 3)["args"]  # Mul and Five swapped
    a["funcId"], b["funcId"] = b["funcId"], a["funcId"]
    assert judge(tmp_path, hooks.judge_fe2_01, records).status is Status.DIVERGES


def test_FE2_02_client_data_not_the_mappers_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 3)["args"]["clientData"] += 1
    result = judge(tmp_path, hooks.judge_fe2_02, records)
    assert result.status is Status.DIVERGES
    assert "FE2-02" not in result.expected and "1 of 6" in result.observed


def test_FE2_02_client_data_equal_to_funcid_diverges_when_a_mapper_is_installed(tmp_path: Path) -> None:
    records = _records()
    entry = _entry(records, 1)
    entry["args"]["clientData"] = entry["args"]["funcId"]
    assert judge(tmp_path, hooks.judge_fe2_02, records).status is Status.DIVERGES


def test_FE2_02_a_probe_mapper_breaking_its_own_rule_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    records = _records()
    mapper = next(r for r in records if r.get("name") == "FunctionIDMapper2")
    mapper["args"]["returned"] += 2
    assert judge(tmp_path, hooks.judge_fe2_02, records).status is Status.ERROR


def test_FE2_03_frame_info_refused_inside_the_hook_diverges(tmp_path: Path) -> None:
    records = _records()
    _frame_use(records, 4)["hr"] = 0x80070057  # E_INVALIDARG
    result = judge(tmp_path, hooks.judge_fe2_03, records)
    assert result.status is Status.DIVERGES
    assert "E_INVALIDARG" in result.observed or "0x80070057" in result.observed


def test_FE2_03_frame_info_naming_another_method_diverges(tmp_path: Path) -> None:
    records = _records()
    _frame_use(records, 1)["out"]["token"] = METHODS["Mul"][0]
    assert judge(tmp_path, hooks.judge_fe2_03, records).status is Status.DIVERGES


def test_FE2_03_frame_info_naming_another_method_in_an_uncalled_hook_diverges(tmp_path: Path) -> None:
    records = _records()
    _frame_use(records, 0)["out"]["token"] = METHODS["Add"][0]  # hook 0 is Main's
    result = judge(tmp_path, hooks.judge_fe2_03, records)
    assert result.status is Status.DIVERGES
    assert f"the entered function is {MAIN[0]:#010x}" in result.observed


def test_FE2_04_argument_info_without_the_flag_diverges(tmp_path: Path) -> None:
    records = _records(function_args=False)
    _entry(records, 1)["args"]["argumentInfo"] = 0x7FFD_0040
    result = judge(tmp_path, hooks.judge_fe2_04, records, function_args=False)
    assert result.status is Status.DIVERGES
    assert "non-NULL in 1 of 6" in result.observed


def test_FE2_04_null_argument_info_with_the_flag_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 5)["args"]["argumentInfo"] = 0
    assert judge(tmp_path, hooks.judge_fe2_04, records).status is Status.DIVERGES


def test_FE2_14_wrong_argument_value_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 3)["args"]["ranges"][1]["bytes"] = (-3).to_bytes(4, "little", signed=True).hex()
    result = judge(tmp_path, hooks.judge_fe2_14, records)
    assert result.status is Status.DIVERGES
    assert "Five" in result.observed
    assert [p["ok"] for p in result.picture] == [True, True, False, True, True]


def test_FE2_14_wrong_range_length_or_count_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 2)["args"]["ranges"][0]["length"] = 4  # a long reported as 4 bytes
    assert judge(tmp_path, hooks.judge_fe2_14, records).status is Status.DIVERGES
    records = _records()
    _entry(records, 4)["args"]["numRanges"] = 6
    assert judge(tmp_path, hooks.judge_fe2_14, records).status is Status.DIVERGES
    records = _records()
    _entry(records, 1)["args"]["totalArgumentSize"] = 16
    assert judge(tmp_path, hooks.judge_fe2_14, records).status is Status.DIVERGES


def test_FE2_14_truncated_range_bytes_diverge(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 2)["args"]["ranges"][1]["bytes"] = "06"  # the probe read one byte of a long
    result = judge(tmp_path, hooks.judge_fe2_14, records)
    assert result.status is Status.DIVERGES
    assert "arg 1 (long 6)" in result.observed


def test_FE2_14_bad_ranges_or_values_are_one_line_harness_errors(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 1)["args"]["ranges"][0]["length"] = -4
    with pytest.raises(HarnessError, match=r"seq \d+ FunctionEnter2: argument ranges"):
        judge(tmp_path, hooks.judge_fe2_14, records)
    records = _records()
    mark = next(r for r in records if r.get("name") == "fe2.calls")
    payload = json.loads(mark["payload"])
    payload["calls"][0]["args"][0]["value"] = 2**40  # no int holds it
    mark["payload"] = json.dumps(payload)
    with pytest.raises(HarnessError, match=r"fe2\.calls: Targets::Add: arg 0: .*does not fit"):
        judge(tmp_path, hooks.judge_fe2_14, records)


def test_FE2_hooks_refused_make_every_clause_not_applicable(tmp_path: Path) -> None:
    records = _records()
    next(r for r in records if r.get("name") == "SetEnterLeaveFunctionHooks2")["hr"] = 0x80131363
    for fn in (
        hooks.judge_fe2_01,
        hooks.judge_fe2_02,
        hooks.judge_fe2_03,
        hooks.judge_fe2_04,
        hooks.judge_fe2_14,
    ):
        result = judge(tmp_path, fn, records)
        assert result.status is Status.NOT_APPLICABLE
        assert "SetEnterLeaveFunctionHooks2 failed" in result.observed


def test_FE2_bad_call_list_mark_is_a_one_line_harness_error(tmp_path: Path) -> None:
    records = _records()
    next(r for r in records if r.get("name") == "fe2.calls")["payload"] = '{"calls": [{"method": "x"}]}'
    with pytest.raises(HarnessError, match=r"fe2\.calls.*not a call list"):
        judge(tmp_path, hooks.judge_fe2_01, records)
    records = [r for r in _records() if r.get("name") != "fe2.calls"]
    with pytest.raises(HarnessError, match=r"expected one mark 'fe2\.calls'"):
        judge(tmp_path, hooks.judge_fe2_01, records)


def test_FE2_scenario_plan_json_is_the_args_plan() -> None:
    plan = json.loads((SCENARIOS_DIR / hooks.SCENARIO / "plan.json").read_text())
    assert plan == hooks.hooks_plan(function_args=True)
    assert hooks.hooks_plan(False)["event_mask"] == 0x08001000
    assert hooks.hooks_plan(True)["event_mask"] == 0x0A001000


# --- live ------------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_live_suite_on_every_runtime(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(FE2_CLAUSES, runtimes)
