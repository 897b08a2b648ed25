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
from conformance.core.plans import resolve_plan
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import read_trace
from conformance.suite.orchestrate import effective_plan
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


JUDGES: tuple[Callable[[Evidence], Judgement], ...] = (
    hooks.judge_fe2_01,
    hooks.judge_fe2_02,
    hooks.judge_fe2_03,
    hooks.judge_fe2_04,
    hooks.judge_fe2_14,
)


def plan_of(function_args: bool = True) -> dict[str, Any]:
    """The plan the harness writes for the args (or noargs) run: plan.json with the experiment's overlay."""
    experiment = hooks.FE2_HOOKS_ARGS if function_args else hooks.FE2_HOOKS_NOARGS
    return effective_plan(experiment.build(), load_scenario(hooks.SCENARIO))


def _records(function_args: bool = True) -> list[dict[str, Any]]:
    """A hooks-enter trace as the probe writes it: Main is entered first, then the five calls."""
    plan = plan_of(function_args)
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
    n = len(entries)
    recs.append(
        {
            "kind": "call",
            "name": "enter_leave_flush",
            "experiment": "fe2-flush",
            "args": {},
            "out": {"enters": n, "flushed": n, "dropped": 0},
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
    plan: dict[str, Any] | None = None,
) -> Judgement:
    path = tmp_path / "trace.jsonl"
    with path.open("w") as f:
        for seq, r in enumerate(records):
            f.write(json.dumps({"seq": seq, "os_tid": TID, "tid": None, **r}) + "\n")
    runtime = Runtime(version="9.9.9", host=tmp_path / "dotnet", framework_dir=tmp_path, source="synthetic")
    plan = plan_of(function_args) if plan is None else plan
    return fn(Evidence(trace=read_trace(path, strict=True), runtime=runtime, plan=plan))


# --- conforming traces ----------------------------------------------------------------------------------


@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_conforming_trace_conforms_on_every_clause(tmp_path: Path) -> None:
    records = _records()
    for fn in JUDGES:
        result = judge(tmp_path, fn, records)
        assert result.status is Status.CONFORMS, (fn.__name__, result.observed)
        assert result.evidence
        assert result.disagreements == ()


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
    assert result.disagreements == ("call 2 Targets::Mul: no entry",)  # one line, not a shift of the rest
    assert not all(p["ok"] for p in result.picture) or len(result.picture) != len(CALLS)


def test_FE2_01_calls_out_of_order_diverge(tmp_path: Path) -> None:
    records = _records()
    a, b = _entry(records, 2)["args"], _entry(records, 3)["args"]  # Mul and Five swapped
    a["funcId"], b["funcId"] = b["funcId"], a["funcId"]
    result = judge(tmp_path, hooks.judge_fe2_01, records)
    assert result.status is Status.DIVERGES
    assert result.disagreements, result.observed
    assert all(line.startswith(("call ", "entry into ")) for line in result.disagreements)


def test_FE2_02_client_data_not_the_mappers_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 3)["args"]["clientData"] += 1
    _entry(records, 0)["args"]["clientData"] += 1
    result = judge(tmp_path, hooks.judge_fe2_02, records)
    assert result.status is Status.DIVERGES
    assert "FE2-02" not in result.expected and "2 of 6" in result.observed
    assert result.disagreements == (  # every entry, named by the scenario's method or its token
        f"function {MAIN[0]:#010x}: clientData is not the mapper's result for funcId",
        "Targets::Five: clientData is not the mapper's result for funcId",
    )


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
    assert result.disagreements == (
        "Targets::Eight: GetFunctionInfo2 refused the hook's frame info: 0x80070057 E_INVALIDARG",
    )


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
    assert result.disagreements == (
        "Targets::Add: argumentInfo is non-NULL without COR_PRF_ENABLE_FUNCTION_ARGS",
    )


def test_FE2_04_null_argument_info_with_the_flag_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 5)["args"]["argumentInfo"] = 0
    assert judge(tmp_path, hooks.judge_fe2_04, records).status is Status.DIVERGES


def test_FE2_14_wrong_argument_value_diverges(tmp_path: Path) -> None:
    records = _records()
    _entry(records, 3)["args"]["ranges"][1]["bytes"] = (-3).to_bytes(4, "little", signed=True).hex()
    _entry(records, 5)["args"]["ranges"][0]["bytes"] = (101).to_bytes(4, "little", signed=True).hex()
    result = judge(tmp_path, hooks.judge_fe2_14, records)
    assert result.status is Status.DIVERGES
    assert "Five" in result.observed
    assert result.disagreements == (  # both calls, each with its own line
        "call 3 Targets::Five: arg 1 (int -2): range holds fdffffff, expected feffffff",
        "call 5 Targets::Add: arg 0 (int 100): range holds 65000000, expected 64000000",
    )
    assert [p["ok"] for p in result.picture] == [True, True, False, True, False]


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


def test_FE2_overlays_are_minimal_and_the_effective_plans_ask_for_the_right_flags() -> None:
    assert hooks.FE2_HOOKS_ARGS.plan_overlay is None  # the scenario's plan.json as it is
    assert hooks.FE2_HOOKS_NOARGS.plan_overlay == {
        "event_mask": ["COR_PRF_MONITOR_ENTERLEAVE", "COR_PRF_ENABLE_FRAME_INFO"]
    }
    assert resolve_plan(hooks.FE2_HOOKS_NOARGS.plan_overlay)["event_mask"] == 0x08001000
    assert plan_of(True)["event_mask"] == 0x0A001000  # ENTERLEAVE | FUNCTION_ARGS | FRAME_INFO
    assert plan_of(False)["event_mask"] == 0x08001000  # ENTERLEAVE | FRAME_INFO
    assert plan_of(False)["experiments"] == plan_of(True)["experiments"]


def test_FE2_registry_judges_and_uses() -> None:
    args, noargs = hooks.FE2_HOOKS_ARGS.build(), hooks.FE2_HOOKS_NOARGS.build()
    assert sorted(j.clause for j in args.judges) == FE2_CLAUSES
    assert [j.clause for j in noargs.judges] == ["FE2-04"]
    assert all(j.uses == ("fe2-hooks", "event_mask") for j in (*args.judges, *noargs.judges))


@pytest.mark.clause("FE2-04")
def test_FE2_judges_read_the_harness_plan_never_the_probes_echo(tmp_path: Path) -> None:
    """The header's plan echo says "with function args"; the plan the harness wrote says without: FE2-04
    judges by the latter (argumentInfo present everywhere is then a divergence)."""
    records = _records(function_args=True)
    result = judge(tmp_path, hooks.judge_fe2_04, records, function_args=False)
    assert result.status is Status.DIVERGES
    assert "without COR_PRF_ENABLE_FUNCTION_ARGS" in result.observed
    with pytest.raises(HarnessError, match="the plan has no enter_leave_hooks experiment"):
        judge(tmp_path, hooks.judge_fe2_01, records, plan={})  # no fallback to the echo


@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_hooks_installed_but_no_entry_recorded_diverges_on_every_clause(tmp_path: Path) -> None:
    """Issue 7 finding 1: with no enter records every FE2 clause went n/a. Hooks installed (S_OK) and the
    buffer flushed, yet no FunctionEnter2: every clause diverges with a line that says so."""
    records = [r for r in _records() if r.get("name") not in ("FunctionEnter2", "GetFunctionInfo2")]
    for fn in JUDGES:
        result = judge(tmp_path, fn, records)
        assert result.status is Status.DIVERGES, (fn.__name__, result.observed)
        assert "yet the runtime never called the enter hook: 0 FunctionEnter2" in result.observed
        assert result.disagreements[0] == "call 1 Targets::Add: no FunctionEnter2"
        assert len(result.disagreements) == len(CALLS)
    noargs = [r for r in _records(False) if r.get("name") not in ("FunctionEnter2", "GetFunctionInfo2")]
    assert judge(tmp_path, hooks.judge_fe2_04, noargs, function_args=False).status is Status.DIVERGES


@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_hooks_never_installed_is_not_applicable_with_the_reason(tmp_path: Path) -> None:
    """No SetEnterLeaveFunctionHooks2 and no entry: nothing was exercised; n/a (which the suite fails
    unless an expectation says so), never conforms."""
    drop = ("FunctionEnter2", "GetFunctionInfo2", "SetEnterLeaveFunctionHooks2")
    records = [r for r in _records() if r.get("name") not in drop]
    for fn in JUDGES:
        result = judge(tmp_path, fn, records)
        assert result.status is Status.NOT_APPLICABLE, (fn.__name__, result.observed)
        assert "the probe never called SetEnterLeaveFunctionHooks2 (plan entry fe2-hooks)" in result.observed


def test_FE2_entries_never_flushed_are_not_applicable(tmp_path: Path) -> None:
    drop = ("FunctionEnter2", "GetFunctionInfo2", "enter_leave_flush")
    records = [r for r in _records() if r.get("name") not in drop]
    for fn in JUDGES:
        result = judge(tmp_path, fn, records)
        assert result.status is Status.NOT_APPLICABLE
        assert "never flushed its enter buffer" in result.observed


# --- live ------------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.clause("FE2-01", "FE2-02", "FE2-03", "FE2-04", "FE2-14")
def test_FE2_live_suite_on_every_runtime(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(FE2_CLAUSES, runtimes)
