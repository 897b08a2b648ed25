"""conformance.core.plans: symbolic flag and HRESULT names in plans resolve to the numbers the probe reads;
every scenario plan is written with names and resolves to exactly the numbers it held before; unknown names
and wrong types are one-line HarnessErrors naming the plan, the key path, the name and the table."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from clr_model.flags import CorPrfHighMonitor, CorPrfMonitor, CorPrfSnapshotInfo
from clr_model.hresults import HResult, name_of
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, SCENARIOS_DIR
from conformance.core.plans import (
    HIGH_MONITOR,
    HRESULT,
    MONITOR,
    SNAPSHOT_INFO,
    SYMBOLIC_ARGS,
    SYMBOLIC_KEYS,
    flag_names,
    resolve_plan,
    resolve_value,
)

#: The numbers of every symbolic place in the scenario plans as they were before they used names (commit
#: eb59067, `git show eb59067:conformance/scenarios/<name>/plan.json`): an independent record, so a wrong
#: name (or a table change) that alters what the probe is asked to do fails here.
NUMERIC: dict[str, dict[str, Any]] = {
    "async-walks": {"event_mask": 268435456, "event_mask_hi": 0},
    "capture-cpu": {"event_mask": 268435456, "event_mask_hi": 0, "args": {"sample": {"infoFlags": 1}}},
    "capture-sampling": {"event_mask": 268566528, "event_mask_hi": 0, "args": {"sample": {"infoFlags": 1}}},
    "buffers-basic": {"event_mask": 268435520, "event_mask_hi": 0},
    "gc-compact": {"event_mask": 128, "event_mask_hi": 0},
    "gc-moves": {"event_mask": 128, "event_mask_hi": 0},
    "hooks-enter": {"event_mask": 167776256, "event_mask_hi": 0},
    # COR_PRF_ENABLE_REJIT 0x40000 | COR_PRF_MONITOR_JIT_COMPILATION 0x20 (corprof.idl)
    "rejit": {"event_mask": 262176, "event_mask_hi": 0},
    "stack-basic": {
        "event_mask": 268435520,
        "event_mask_hi": 0,
        "args": {"walk-default": {"infoFlags": 0}, "walk-register-context": {"infoFlags": 1}},
    },
    "stack-walks": {
        "event_mask": 268435520,
        "event_mask_hi": 0,
        "args": {
            "init-walk": {"infoFlags": 0},
            "now-default": {"infoFlags": 0},
            "now-regctx": {"infoFlags": 1},
            "now-abort-efail": {"infoFlags": 0, "abortReply": 2147500037},
            "now-abort-sfalse": {"infoFlags": 0, "abortReply": 1},
            "now-flags-x86": {"infoFlags": 2},
            "now-flags-undefined": {"infoFlags": 16},
            "now-seed-managed": {"infoFlags": 1},
            "now-size-zero": {"infoFlags": 1},
            "now-size-runtime-1": {"infoFlags": 1},
            "now-size-small": {"infoFlags": 1},
            "now-size-larger": {"infoFlags": 1},
            "now-seed-native": {"infoFlags": 1},
            "now-seed-native-noflag": {"infoFlags": 0},
            "now-seed-zero": {"infoFlags": 1},
            "reverse-regctx": {"infoFlags": 1},
            "throw-sync": {"infoFlags": 0},
            "throw-seed-native": {"infoFlags": 0},
            "throw-seed-zero": {"infoFlags": 0},
        },
    },
}


def scenario_plans() -> dict[str, dict[str, Any]]:
    """Every scenario's plan.json as written (not resolved)."""
    plans: dict[str, dict[str, Any]] = {}
    for path in sorted(SCENARIOS_DIR.glob("*/plan.json")):
        plans[path.parent.name] = json.loads(path.read_text(encoding="utf-8"))
    return plans


def numeric(name: str, written: dict[str, Any]) -> dict[str, Any]:
    """The written plan with NUMERIC's numbers put in its symbolic places."""
    expected = copy.deepcopy(written)
    numbers = NUMERIC[name]
    for key in SYMBOLIC_KEYS:
        if key in numbers:
            expected[key] = numbers[key]
    if "replies" in numbers:
        expected["replies"] = numbers["replies"]
    by_id = numbers.get("args", {})
    for entry in expected.get("experiments", []):
        entry.get("args", {}).update(by_id.get(entry["id"], {}))
    return expected


def test_numeric_record_covers_every_scenario_plan() -> None:
    assert set(scenario_plans()) == set(NUMERIC)


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_scenario_plan_resolves_to_the_numbers_it_held(name: str) -> None:
    written = scenario_plans()[name]
    assert resolve_plan(written, where=name) == numeric(name, written)


def _symbolic_places(plan: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    places: list[tuple[str, Any, Any]] = [
        (k, v, SYMBOLIC_KEYS[k]) for k, v in plan.items() if k in SYMBOLIC_KEYS
    ]
    places += [(f"replies.{c}", v, HRESULT) for c, v in plan.get("replies", {}).items()]
    for entry in plan.get("experiments", []):
        for arg, vocab in SYMBOLIC_ARGS.items():
            if arg in entry.get("args", {}):
                places.append((f"{entry['id']}.args.{arg}", entry["args"][arg], vocab))
    return places


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_scenario_plan_is_written_with_names(name: str) -> None:
    """A number stays only where no name can say it (e.g. infoFlags 16, an undefined bit on purpose)."""
    places = _symbolic_places(scenario_plans()[name])
    assert places
    for path, value, vocab in places:
        if isinstance(value, int):
            sayable = flag_names(vocab, value) if vocab.flags else name_of(value)
            assert sayable is None, f"{name}: {path} = {value} should be written as {sayable}"


def test_names_resolve_from_their_tables() -> None:
    plan = {
        "version": 1,
        "event_mask": ["COR_PRF_MONITOR_GC", "COR_PRF_ENABLE_STACK_SNAPSHOT"],
        "event_mask_hi": "COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS",
        "replies": {"MovedReferences2": "E_FAIL", "GarbageCollectionStarted": 1},
        "experiments": [
            {
                "id": "w",
                "at": "mark:x",
                "run": "stack_walk",
                "args": {
                    "infoFlags": ["COR_PRF_SNAPSHOT_REGISTER_CONTEXT"],
                    "abortReply": "CORPROF_E_DATAINCOMPLETE",
                    "seed": "captured",
                },
            },
            {"id": "n", "at": "mark:x", "run": "stack_walk", "args": {"infoFlags": 16}},
        ],
    }
    resolved = resolve_plan(plan)
    assert (
        resolved["event_mask"]
        == CorPrfMonitor.COR_PRF_MONITOR_GC | CorPrfMonitor.COR_PRF_ENABLE_STACK_SNAPSHOT
    )
    assert resolved["event_mask_hi"] == CorPrfHighMonitor.COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS
    assert resolved["replies"] == {"MovedReferences2": 0x80004005, "GarbageCollectionStarted": 1}
    args = resolved["experiments"][0]["args"]
    assert args == {"infoFlags": 1, "abortReply": int(HResult.CORPROF_E_DATAINCOMPLETE), "seed": "captured"}
    assert resolved["experiments"][1]["args"] == {"infoFlags": 16}
    assert plan["event_mask"] == ["COR_PRF_MONITOR_GC", "COR_PRF_ENABLE_STACK_SNAPSHOT"]  # input unchanged
    assert resolve_plan(resolved) == resolved  # idempotent: numbers pass unchanged
    assert json.loads(json.dumps(resolved)) == resolved


def test_zero_valued_names_and_empty_lists() -> None:
    assert resolve_value(MONITOR, ["COR_PRF_MONITOR_NONE"]) == 0
    assert resolve_value(HIGH_MONITOR, []) == 0
    assert resolve_value(SNAPSHOT_INFO, "COR_PRF_SNAPSHOT_DEFAULT") == 0


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (
            {"event_mask": ["COR_PRF_MONITOR_GC", "COR_PRF_MONITOR_GCC"]},
            "p.json: event_mask[1]: unknown COR_PRF_MONITOR flag name 'COR_PRF_MONITOR_GCC' "
            "(names: clr_model/flags.py CorPrfMonitor; did you mean COR_PRF_MONITOR_GC?)",
        ),
        (
            {"event_mask_hi": "GC_MOVED"},
            "p.json: event_mask_hi: unknown COR_PRF_HIGH_MONITOR flag name 'GC_MOVED' "
            "(names: clr_model/flags.py CorPrfHighMonitor)",
        ),
        (
            {"replies": {"MovedReferences2": "E_FAILED"}},
            "p.json: replies.MovedReferences2: unknown HRESULT name 'E_FAILED' "
            "(names: clr_model/hresults.py HResult; did you mean E_FAIL?)",
        ),
        (
            {
                "experiments": [
                    {"id": "a", "args": {}},
                    {"id": "w", "args": {"infoFlags": ["REGISTER_CONTEXT"]}},
                ]
            },
            "p.json: experiments[1] (w).args.infoFlags[0]: unknown COR_PRF_SNAPSHOT_INFO flag name "
            "'REGISTER_CONTEXT' (names: clr_model/flags.py CorPrfSnapshotInfo",
        ),
        (
            {"experiments": [{"args": {"abortReply": "ABORT"}}]},
            "p.json: experiments[0].args.abortReply: unknown HRESULT name 'ABORT' "
            "(names: clr_model/hresults.py HResult",
        ),
    ],
)
def test_unknown_name_names_plan_path_name_and_table(plan: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessError) as info:
        resolve_plan(plan, where="p.json")
    assert info.value.message.startswith(message)
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"event_mask": True}, "p.json: event_mask: True is not a number or a COR_PRF_MONITOR flag name"),
        (
            {"event_mask": 1.5},
            "p.json: event_mask: 1.5 must be an integer or a COR_PRF_MONITOR flag name, or a",
        ),
        ({"event_mask": [4]}, "p.json: event_mask[0]: 4 is not a COR_PRF_MONITOR flag name"),
        (
            {"replies": {"X": ["E_FAIL"]}},
            "p.json: replies.X: ['E_FAIL'] must be an integer or an HRESULT name",
        ),
    ],
)
def test_wrong_types_are_one_line_errors(plan: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessError) as info:
        resolve_plan(plan, where="p.json")
    assert info.value.message.startswith(message)


def test_a_plan_must_be_an_object() -> None:
    with pytest.raises(HarnessError, match=r"^x: a plan must be a JSON object, not list$"):
        resolve_plan([], where="x")  # type: ignore[arg-type]


def test_other_shapes_pass_to_the_probe_unchanged() -> None:
    """Shapes the probe rejects itself (it reports a probe_error) are not the resolver's business."""
    plan = {"experiments": "nope", "replies": [1], "record": "x"}
    assert resolve_plan(plan) == plan
    odd = {"experiments": [3, {"id": "a"}, {"args": "x"}]}
    assert resolve_plan(odd) == odd


def test_flag_names_round_trip() -> None:
    assert flag_names(MONITOR, 268435520) == ["COR_PRF_MONITOR_EXCEPTIONS", "COR_PRF_ENABLE_STACK_SNAPSHOT"]
    assert flag_names(SNAPSHOT_INFO, 0) == ["COR_PRF_SNAPSHOT_DEFAULT"]
    assert flag_names(SNAPSHOT_INFO, 16) is None
    for table, vocab in ((CorPrfMonitor, MONITOR), (CorPrfSnapshotInfo, SNAPSHOT_INFO)):
        for member in table.__members__.values():
            names = flag_names(vocab, int(member))
            assert names is not None and resolve_value(vocab, names) == int(member)
    with pytest.raises(ValueError, match="not flags"):
        flag_names(HRESULT, 0)


def _int_args_read_by_the_probe() -> set[str]:
    names: set[str] = set()
    for path in (NATIVE_DIR / "src").glob("experiments*.cpp"):
        names |= set(re.findall(r'\bint_arg\("(\w+)"', path.read_text()))
    return names


def test_symbolic_args_are_integer_args_of_the_probes_experiments() -> None:
    """The resolver's argument table names arguments the probe really reads as integers."""
    read = _int_args_read_by_the_probe()
    assert {"infoFlags", "abortReply", "abortAt"} <= read  # the scan sees the experiments
    assert set(SYMBOLIC_ARGS) <= read


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_resolved_scenario_plan_holds_no_names(name: str) -> None:
    """What the harness writes into PROFHARNESS_PLAN: names never reach the probe (it reads numbers only)."""
    resolved = resolve_plan(scenario_plans()[name])
    for path, value, _ in _symbolic_places(resolved):
        assert isinstance(value, int) and not isinstance(value, bool), (path, value)
