"""The live experiment registry agrees with the clause catalog."""

from __future__ import annotations

from clr_model.clauses import CATALOG, Layer
from conformance.checks import all_experiments
from conformance.core.scenarios import scenario_names


def test_every_judged_clause_is_a_live_clause_of_the_catalog() -> None:
    for experiment in all_experiments():
        for judge in experiment.judges:
            assert judge.clause in CATALOG, f"{experiment.id}: {judge.clause} is not in the catalog"
            assert Layer.LIVE in CATALOG[judge.clause].layers, (
                f"{experiment.id} judges {judge.clause} live, but the catalog gives it no 'live' layer"
            )


def test_experiment_ids_are_unique_and_scenarios_exist() -> None:
    experiments = all_experiments()
    ids = [e.id for e in experiments]
    assert len(ids) == len(set(ids))
    known = set(scenario_names())
    for experiment in experiments:
        assert experiment.scenario in known, f"{experiment.id}: no scenario {experiment.scenario!r}"


def test_at_least_30_clauses_have_a_live_experiment() -> None:
    judged = {j.clause for e in all_experiments() for j in e.judges}
    assert len(judged) >= 30, sorted(judged)


def test_every_live_clause_of_the_catalog_has_a_judge() -> None:
    judged = {j.clause for e in all_experiments() for j in e.judges}
    unjudged = sorted(c.id for c in CATALOG.values() if Layer.LIVE in c.layers and c.id not in judged)
    assert not unjudged, f"clauses with a live layer but no live experiment: {unjudged}"
