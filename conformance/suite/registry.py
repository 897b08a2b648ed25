"""The suite's experiments and the decorator its judges register with (into the one registry,
:mod:`conformance.core.registry`).

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
every one exists in the experiment's effective plan.

A hook experiment (:func:`hook_experiment`) runs the hook checker on one hook's machine code instead of a
scenario; its judges (:func:`hook_judge`) read the checker's report and fill one matrix column.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clr_model.clauses import Layer
from conformance.core import registry
from conformance.core.registry import source_of
from conformance.suite.verdicts import (
    Evidence,
    HookEvidence,
    HookExperiment,
    HookJudge,
    Judge,
    Judgement,
    LiveExperiment,
)
from emu.hookcheck import DEFAULT_RUNS

__all__ = [
    "ExperimentSpec",
    "all_experiments",
    "experiment",
    "hook_experiment",
    "hook_experiments",
    "hook_judge",
    "judge",
    "source_of",
    "specs",
]

JudgeFn = Callable[[Evidence], Judgement]
HookJudgeFn = Callable[[HookEvidence], Judgement]
#: the layers whose experiments the suite runs
SUITE_LAYERS: tuple[Layer, ...] = (Layer.LIVE, Layer.EMU, Layer.HOOK)


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
    #: extra environment variables of the run (runtime settings, e.g. tiered compilation off)
    env: Mapping[str, str] | None = None

    def build(self) -> LiveExperiment:
        return LiveExperiment(id=self.id, scenario=self.scenario, judges=tuple(self.judges),
                              plan_overlay=self.plan_overlay, timeout_s=self.timeout_s,
                              only_on=self.only_on, env=self.env)  # fmt: skip


@dataclass
class HookExperimentSpec:
    """A hook experiment being declared (see :func:`hook_experiment`)."""

    id: str
    column: str
    library: Callable[[], Path]
    symbol: str
    arch: str
    judges: list[HookJudge] = field(default_factory=list)
    module: str = ""

    def build(self) -> HookExperiment:
        return HookExperiment(id=self.id, column=self.column, library=self.library, symbol=self.symbol,
                              arch=self.arch, judges=tuple(self.judges), runs=DEFAULT_RUNS)  # fmt: skip


_EXPERIMENTS: dict[str, ExperimentSpec] = {}
_HOOK_EXPERIMENTS: dict[str, HookExperimentSpec] = {}


def _caller_module() -> str:
    return str(inspect.stack()[2].frame.f_globals.get("__name__", ""))


def experiment(
    id: str,
    *,
    scenario: str,
    plan_overlay: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
    only_on: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ExperimentSpec:
    """Declare a live experiment (a scenario run with its plan, once per runtime; ``env``: environment
    variables its runs get on top of the probe's)."""
    if id in _EXPERIMENTS or id in _HOOK_EXPERIMENTS:
        raise ValueError(f"experiment id {id!r} is declared twice")
    spec = ExperimentSpec(id=id, scenario=scenario, plan_overlay=plan_overlay, timeout_s=timeout_s,
                          only_on=tuple(only_on), module=_caller_module(), env=env)  # fmt: skip
    _EXPERIMENTS[id] = spec
    return spec


def hook_experiment(
    id: str, *, column: str, library: Callable[[], Path], symbol: str, arch: str
) -> HookExperimentSpec:
    """Declare a hook experiment: the hook checker on ``symbol`` of the object ``library()`` builds, once
    (no runtime), its judges' verdicts in the matrix column ``column``."""
    if id in _EXPERIMENTS or id in _HOOK_EXPERIMENTS:
        raise ValueError(f"experiment id {id!r} is declared twice")
    spec = HookExperimentSpec(id=id, column=column, library=library, symbol=symbol, arch=arch,
                              module=_caller_module())  # fmt: skip
    _HOOK_EXPERIMENTS[id] = spec
    return spec


def judge(
    clause: str, experiment: ExperimentSpec, *, what: str, uses: Sequence[str] = (), layer: str = "live"
) -> Callable[[JudgeFn], JudgeFn]:
    """Register ``fn`` as the judge of ``clause`` on ``experiment``'s run; it reads the plan ``uses``.
    ``layer="emu"``: it judges the run's captures replayed by the emulator (the column "emu <version>")."""

    def add(fn: JudgeFn) -> JudgeFn:
        if any(j.clause == clause and j.layer == layer for j in experiment.judges):
            raise ValueError(f"{experiment.id}: clause {clause} has two {layer} judges")
        path, line = source_of(fn)
        rule = registry.Rule(clause=clause, layer=Layer(layer), name=fn.__qualname__, what=what, fn=fn,
                             path=path, line=line, experiment=experiment.id, uses=tuple(uses))
        registry.register(rule)
        experiment.judges.append(Judge(clause=clause, judge=fn, what=what, uses=tuple(uses), layer=layer))
        return fn

    return add


def hook_judge(
    clause: str, experiment: HookExperimentSpec, *, what: str
) -> Callable[[HookJudgeFn], HookJudgeFn]:
    """Register ``fn`` as the judge of ``clause`` on the hook checker's report of ``experiment``."""

    def add(fn: HookJudgeFn) -> HookJudgeFn:
        if any(j.clause == clause for j in experiment.judges):
            raise ValueError(f"{experiment.id}: clause {clause} has two hook judges")
        path, line = source_of(fn)
        rule = registry.Rule(clause=clause, layer=Layer.HOOK, name=fn.__qualname__, what=what, fn=fn,
                             path=path, line=line, experiment=experiment.id)
        registry.register(rule)
        experiment.judges.append(HookJudge(clause=clause, judge=fn, what=what))
        return fn

    return add


def load_areas() -> None:
    """Import every module that declares the suite's experiments and judges."""
    registry.load_all(SUITE_LAYERS)


def all_experiments() -> list[LiveExperiment]:
    """Every registered live experiment with its judges, in area order."""
    load_areas()
    return [spec.build() for spec in _EXPERIMENTS.values() if spec.judges]


def hook_experiments() -> list[HookExperiment]:
    """Every registered hook experiment with its judges."""
    load_areas()
    return [spec.build() for spec in _HOOK_EXPERIMENTS.values() if spec.judges]


def specs() -> list[ExperimentSpec]:
    load_areas()
    return list(_EXPERIMENTS.values())


def hook_specs() -> list[HookExperimentSpec]:
    load_areas()
    return list(_HOOK_EXPERIMENTS.values())
