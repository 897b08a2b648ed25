"""Live experiments, one module per area, each exporting ``EXPERIMENTS: tuple[LiveExperiment, ...]``.

Register a new area by adding its module to :data:`AREAS`; nothing else changes.
"""

from __future__ import annotations

import importlib

from conformance.suite.verdicts import LiveExperiment

#: module names under conformance.checks, in report order
AREAS: tuple[str, ...] = ("stack", "async_walks", "buffers", "gc", "hooks")


def all_experiments() -> list[LiveExperiment]:
    experiments: list[LiveExperiment] = []
    seen: set[str] = set()
    for area in AREAS:
        try:
            module = importlib.import_module(f"conformance.checks.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"conformance.checks.{area}":
                continue  # an area not written yet
            raise
        for experiment in module.EXPERIMENTS:
            if experiment.id in seen:
                raise ValueError(f"live experiment id {experiment.id!r} is defined twice")
            seen.add(experiment.id)
            experiments.append(experiment)
    return experiments
