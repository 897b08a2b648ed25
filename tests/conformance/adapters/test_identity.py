"""conformance.adapters.identity: one identity scheme for functions, (module file name, metadata token)."""

from __future__ import annotations

from pathlib import Path

from conformance.adapters.identity import (
    FOREIGN_BASE,
    FunctionIdentities,
    FunctionKey,
    ObservedNames,
    short_label,
)
from conformance.core.trace import RECORD_ADAPTER, Trace

APP = 0x06000031


def test_a_function_key_is_the_module_file_name_and_the_token() -> None:
    assert FunctionKey.of("/run/x/app.dll", APP) == FunctionKey("app.dll", APP)
    assert FunctionKey.of("C:\\run\\app.dll", APP) == FunctionKey("app.dll", APP)
    assert FunctionKey.from_entry({"module": "/a/app.dll", "token": APP}) == FunctionKey("app.dll", APP)
    assert FunctionKey.from_entry({"module": None, "token": APP}) is None
    assert FunctionKey.from_entry({"module": "app.dll", "token": None}) is None
    assert str(FunctionKey("app.dll", APP)) == "app.dll token 0x06000031"


def test_ground_truth_functions_get_model_ids_in_order() -> None:
    ids = FunctionIdentities()
    mark = ids.model_id(FunctionKey("app.dll", APP), "ProfHarness.Probe::Mark")
    main = ids.model_id(FunctionKey("app.dll", 0x06000003), "ProfHarness.Scenarios.StackWalks::Main")
    assert (mark, main) == (1, 2)
    assert ids.model_id(FunctionKey("app.dll", APP), "again") == 1
    assert ids.label(1) == "ProfHarness.Probe::Mark" and ids.label(0) == "[unmanaged]"
    assert ids.short_labels() == {1: "Probe::Mark", 2: "StackWalks::Main"}


def test_observed_function_ids_map_through_what_the_probe_resolved() -> None:
    ids = FunctionIdentities()
    known = ids.model_id(FunctionKey("app.dll", APP), "ProfHarness.Probe::Mark")
    names = ObservedNames.from_entries(
        [
            {"funcId": 0x7F00, "module": "/run/app.dll", "token": APP},
            # the same token in another module is another function
            {"funcId": 0x7F10, "module": "/run/other.dll", "token": APP, "type": "T", "method": "M"},
            {"funcId": 0, "module": None, "token": None},
        ]
    )
    assert ids.observed(0x7F00, names) == known
    assert ids.observed(0, names) == 0
    other = ids.observed(0x7F10, names)
    unresolved = ids.observed(0x7F20, names)
    assert other >= FOREIGN_BASE and unresolved >= FOREIGN_BASE and other != unresolved
    assert ids.observed(0x7F10, names) == other  # the same FunctionID, the same model id
    assert ids.label(other) == "T::M" and ids.label(unresolved) == "[unknown function]"


def test_an_unknown_function_without_a_name_is_labelled_by_its_key() -> None:
    ids = FunctionIdentities()
    names = ObservedNames.from_entries([{"funcId": 5, "module": "/x/lib.dll", "token": 0x06000002}])
    assert ids.label(ids.observed(5, names)) == "lib.dll token 0x06000002"


def test_observed_names_come_from_every_resolved_walk_of_the_run() -> None:
    records = [
        {"seq": 0, "kind": "header", "os_tid": 1, "probe": "t", "pid": 1},
        {
            "seq": 1,
            "kind": "call",
            "os_tid": 1,
            "name": "DoStackSnapshot",
            "experiment": "a",
            "args": {"walk": 0},
            "out": {
                "frames": [{"funcId": 9, "module": "/r/app.dll", "token": APP, "type": "A", "method": "B"}]
            },
            "hr": 0,
        },
        {"seq": 2, "kind": "call", "os_tid": 1, "name": "GetModuleInfo", "args": {}, "out": {}, "hr": 0},
    ]
    trace = Trace(path=Path("t.jsonl"), records=[RECORD_ADAPTER.validate_python(r) for r in records])
    names = ObservedNames.from_trace(trace)
    assert names.keys == {9: FunctionKey("app.dll", APP)} and names.labels == {9: "A::B"}


def test_short_label_keeps_the_last_namespace_part() -> None:
    assert short_label("ProfHarness.Scenarios.StackWalks::Leaf") == "StackWalks::Leaf"
    assert short_label("[unmanaged]") == "[unmanaged]"
