"""The one way to register a live experiment and its judges.

An area module under :mod:`conformance.checks` declares its experiments with :func:`experiment` and each
judge with the :func:`judge` decorator, naming the clause it judges, the experiment whose run it reads and
the plan entries it uses::

    WALKS = experiment("stack-walks", scenario="stack-walks")

    @judge("DSS-16", WALKS, what="leaf first: order equals the reflection order", uses=("walk-now",))
    def judge_dss16(ev: Evidence) -> Judgement: ...

A registered judge *declares* that its clause applies to that experiment: a not-applicable verdict from it
fails the suite unless the runtime's expectation file says ``not-applicable`` with a reason.

Plan entries named in ``uses`` are the ``id`` of an entry of the plan's ``experiments`` list, or a dotted
path to a plan key (``replies.MovedReferences2``); ``tests/conformance/suite/test_registry.py`` checks that
every one exists in the experiment's effective plan, and that the registry's clauses equal the catalog's
live layer. ``profharness clauses --where ID`` reads this registry to show where a clause is judged.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.suite.verdicts import Evidence, Judge, Judgement, LiveExperiment

#: area modules under conformance.checks, in report order
AREAS: tuple[str, ...] = ("stack", "async_walks", "buffers", "gc", "hooks", "emu_walks")

JudgeFn = Callable[[Evidence], Judgement]


@dataclass
class ExperimentSpec:
    """An experiment being declared: judges are added to it as their modules are imported."""

    id: str
    scenario: str
    #: keys merged over the scenario's own plan.json (top level; ``None`` = the plan as it is)
    plan_overlay: Mapping[str, Any] | None = None
    timeout_s: float = 60.0
    only_on: tuple[str, ...] = ()
    judges: list[Judge] = field(default_factory=list)
    module: str = ""

    def build(self) -> LiveExperiment:
        return LiveExperiment(
            id=self.id,
            scenario=self.scenario,
            judges=tuple(self.judges),
            plan_overlay=self.plan_overlay,
            timeout_s=self.timeout_s,
            only_on=self.only_on,
        )


_EXPERIMENTS: dict[str, ExperimentSpec] = {}


def experiment(
    id: str,
    *,
    scenario: str,
    plan_overlay: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
    only_on: Sequence[str] = (),
) -> ExperimentSpec:
    """Declare a live experiment (a scenario run with its plan, once per runtime)."""
    if id in _EXPERIMENTS:
        raise ValueError(f"live experiment id {id!r} is declared twice")
    caller = inspect.stack()[1].frame.f_globals.get("__name__", "")
    spec = ExperimentSpec(
        id=id,
        scenario=scenario,
        plan_overlay=plan_overlay,
        timeout_s=timeout_s,
        only_on=tuple(only_on),
        module=str(caller),
    )
    _EXPERIMENTS[id] = spec
    return spec


def judge(
    clause: str, experiment: ExperimentSpec, *, what: str, uses: Sequence[str] = (), layer: str = "live"
) -> Callable[[JudgeFn], JudgeFn]:
    """Register ``fn`` as the judge of ``clause`` on ``experiment``'s run; it reads the plan ``uses``.
    ``layer="emu"``: it judges the run's captures replayed by the emulator (the column "emu <version>")."""

    def register(fn: JudgeFn) -> JudgeFn:
        if any(j.clause == clause and j.layer == layer for j in experiment.judges):
            raise ValueError(f"{experiment.id}: clause {clause} has two {layer} judges")
        experiment.judges.append(Judge(clause=clause, judge=fn, what=what, uses=tuple(uses), layer=layer))
        return fn

    return register


def load_areas() -> None:
    """Import every area module (registering its experiments and judges)."""
    for area in AREAS:
        importlib.import_module(f"conformance.checks.{area}")


def all_experiments() -> list[LiveExperiment]:
    """Every registered live experiment with its judges, in area order."""
    load_areas()
    return [spec.build() for spec in _EXPERIMENTS.values() if spec.judges]


def specs() -> list[ExperimentSpec]:
    load_areas()
    return list(_EXPERIMENTS.values())


def source_of(fn: Callable[..., Any]) -> tuple[Path, int]:
    """The file and first line of a judge (what ``clauses --where`` prints)."""
    target = inspect.unwrap(fn)
    return Path(inspect.getsourcefile(target) or "?"), inspect.getsourcelines(target)[1]
