"""conformance.suite.registry: the live experiment registry agrees with the clause catalog and the plans."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from clr_model.clauses import CATALOG, Layer
from conformance.checks import all_experiments
from conformance.core import registry
from conformance.core.scenarios import load_scenario, scenario_names
from conformance.suite.orchestrate import effective_plan
from conformance.suite.registry import ExperimentSpec
from conformance.suite.registry import judge as register_judge
from conformance.suite.verdicts import Evidence, Judgement


def test_every_rule_is_placed_at_the_line_inspect_gives_it() -> None:
    """registry.source_of reads a class's line from its file parsed once (not inspect's parse per class):
    every registered rule's file and line are what inspect.getsourcelines gives (``--where`` prints them)."""
    registry.load_all()
    placed = [(r, inspect.unwrap(r.fn)) for r in registry.rules() if r.fn is not None]
    assert any(inspect.isclass(target) for _r, target in placed)
    for r, target in placed:
        expected = (inspect.getsourcefile(target), inspect.getsourcelines(target)[1])
        assert (str(r.path), r.line) == expected, r.name


def test_a_class_is_placed_at_its_first_decorator_a_nested_one_by_its_qualified_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    source = tmp_path / "registry_placed.py"
    source.write_text(
        "def keep(c):\n    return c\n\n@keep\nclass Outer:\n    class Inner:\n        pass\n\n\n"
        "def make():\n    class Outer:\n        pass\n    return Outer\n\n\n"
        "class Twice:\n    pass\n\n\nclass Twice:  # inspect places the name's first class\n    pass\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    module = importlib.import_module("registry_placed")  # (in sys.modules: inspect finds a file through it)
    request.addfinalizer(lambda: sys.modules.pop("registry_placed", None))
    classes = (module.Outer, module.Outer.Inner, module.make(), module.Twice)
    for cls in classes:
        assert registry.source_of(cls) == (source, inspect.getsourcelines(cls)[1]), cls.__qualname__
    assert [registry.source_of(c)[1] for c in classes] == [4, 6, 11, 16]


def test_every_judged_clause_is_a_clause_of_the_catalog_with_the_judges_layer() -> None:
    for experiment in all_experiments():
        for judge in experiment.judges:
            assert judge.clause in CATALOG, f"{experiment.id}: {judge.clause} is not in the catalog"
            assert Layer(judge.layer) in CATALOG[judge.clause].layers, (
                f"{experiment.id} judges {judge.clause} on the {judge.layer} layer, which the catalog does"
                " not give it"
            )


def test_emu_judges_cover_the_capture_clauses_of_issue_8() -> None:
    emu = {j.clause for e in all_experiments() for j in e.judges if j.layer == "emu"}
    assert emu == {"DSS-03", "DSS-07", "DSS-08", "DSS-16"}


def test_experiment_ids_are_unique_and_scenarios_exist() -> None:
    experiments = all_experiments()
    ids = [e.id for e in experiments]
    assert len(ids) == len(set(ids))
    known = set(scenario_names())
    for experiment in experiments:
        assert experiment.scenario in known, f"{experiment.id}: no scenario {experiment.scenario!r}"


def test_at_least_30_clauses_have_a_live_experiment() -> None:
    judged = {j.clause for e in all_experiments() for j in e.judges if j.layer == "live"}
    assert len(judged) >= 30, sorted(judged)


def test_every_live_clause_of_the_catalog_has_a_judge() -> None:
    judged = {j.clause for e in all_experiments() for j in e.judges if j.layer == "live"}
    unjudged = sorted(c.id for c in CATALOG.values() if Layer.LIVE in c.layers and c.id not in judged)
    assert not unjudged, f"clauses with a live layer but no live experiment: {unjudged}"


def _plan_names(plan: Mapping[str, Any]) -> set[str]:
    """What a judge's ``uses`` may name: plan experiment entry ids and dotted paths to plan keys."""
    names = {str(e["id"]) for e in plan.get("experiments", []) if isinstance(e, dict) and "id" in e}

    def walk(prefix: str, value: Any) -> None:
        names.add(prefix)
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}", sub)

    for key, value in plan.items():
        if key != "experiments":
            walk(str(key), value)
    return names


def test_every_plan_entry_a_judge_uses_exists_in_its_experiments_plan() -> None:
    missing = []
    for experiment in all_experiments():
        plan = effective_plan(experiment, load_scenario(experiment.scenario))
        names = _plan_names(plan)
        missing += [
            f"{experiment.id}: {j.clause} uses {u!r}"
            for j in experiment.judges
            for u in j.uses
            if u not in names
        ]
    assert not missing, missing


def test_registry_equals_the_catalogs_live_layer() -> None:
    judged = {j.clause for e in all_experiments() for j in e.judges if j.layer == "live"}
    live = {c.id for c in CATALOG.values() if Layer.LIVE in c.layers}
    assert judged == live, {"judged, not live": judged - live, "live, not judged": live - judged}


def test_the_catalogs_layer_map_equals_the_one_registry() -> None:
    """Issue 20: for every clause and every rule layer (live, emu, hook, validator, fuzz), the catalog gives
    the clause that layer exactly when a rule of that layer registered for it."""
    found = registry.layer_map()
    mismatched = {}
    for clause_id, item in CATALOG.items():
        catalog = {layer for layer in item.layers if layer in registry.RULE_LAYERS}
        if catalog != set(found.get(clause_id, ())):
            mismatched[clause_id] = (sorted(catalog), sorted(found.get(clause_id, ())))
    assert not mismatched, mismatched
    assert set(found) <= set(CATALOG)


def test_every_rule_says_where_it_is_written() -> None:
    registry.load_all()
    for rule in registry.rules():
        assert rule.path.is_file() and rule.line >= 1, rule
        assert rule.what, rule


def test_a_rule_for_a_clause_the_catalog_does_not_know_is_refused() -> None:
    with registry.isolated(), pytest.raises(ValueError, match="XYZ-01 is not a clause of the catalog"):
        registry.rule("XYZ-01", layer=Layer.VALIDATOR, what="nothing")(lambda c: iter(()))


def test_a_module_imported_again_replaces_its_rules_and_a_second_rule_of_one_name_is_refused() -> None:
    """pytester drops the modules an inner run imported; the next run imports them again (same file and
    line): that replaces the rules. Another function of the same name for the same clause is refused."""

    def judge_it(c: object) -> Iterator[object]:
        return iter(())

    first = judge_it

    def judge_it(c: object) -> Iterator[object]:  # the same name, another line
        return iter(())

    with registry.isolated():
        for _ in range(2):
            registry.rule("DSS-01", layer=Layer.VALIDATOR, what="once")(first)
        assert [r.fn for r in registry.rules(Layer.VALIDATOR, "DSS-01")] == [first]
        with pytest.raises(ValueError, match="judge_it: DSS-01 is registered twice on the validator layer"):
            registry.rule("DSS-01", layer=Layer.VALIDATOR, what="twice")(judge_it)


def test_registering_a_clause_twice_on_one_experiment_is_refused() -> None:
    spec = ExperimentSpec(id="x", scenario="stack-basic")

    def fn(ev: Evidence) -> Judgement:
        raise AssertionError

    with registry.isolated():
        register_judge("DSS-01", spec, what="first")(fn)
        with pytest.raises(ValueError, match="DSS-01 has two live judges"):
            register_judge("DSS-01", spec, what="second")(fn)


def test_FE2_06_a_hook_clause_selects_the_hook_experiment_alone() -> None:
    """Issue 20: ``conformance --clause FE2-06`` runs the hook experiment that judges it (it was refused as
    'no live experiment checks it'); a clause no experiment of the suite judges is still one line."""
    from conformance.core.errors import HarnessError
    from conformance.suite.orchestrate import select_experiments

    lives, hooks = select_experiments(["FE2-06"])
    assert lives == []
    chosen = [(h.id, [j.clause for j in h.judges]) for h in hooks]
    assert chosen == [("hookcheck:reference_enter2", ["FE2-06"])]
    lives, hooks = select_experiments(["DSS-16"], layers=("live",))
    assert hooks == [] and all(j.clause == "DSS-16" for e in lives for j in e.judges)
    with pytest.raises(HarnessError, match="VAL-CRASH: no experiment of the suite checks it"):
        select_experiments(["VAL-CRASH"])
