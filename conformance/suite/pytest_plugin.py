"""pytest plugin: the conformance suite collected as tests, one per clause x runtime (``DSS-05[8.0.4]``).

Installed with profharness (entry point ``pytest11``). In any test module, write::

    from conformance.suite.pytest_plugin import ProfharnessSuite

    profharness_suite = ProfharnessSuite()                     # every live clause, every runtime
    # or: ProfharnessSuite(runtime="8.0", clauses=["DSS-16"], experiments=[my_experiment, ...])

and pytest collects one test per clause and runtime. The suite runs once per session for each distinct
suite object; each test then reports its verdict: it fails on anything unexpected (an undocumented
divergence or disagreement line, a not-applicable verdict no expectation entry allows, a stale expectation,
a crash or hang) with the one-line message naming the clause.
Options: ``--profharness-runtime SPEC`` overrides every suite's runtime selection.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.suite.verdicts import LiveExperiment, SuiteResult, Verdict, VerdictOutcome

_BAD = {VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION, VerdictOutcome.ERROR}


@dataclass(eq=False)
class ProfharnessSuite:
    """A conformance suite to collect as tests (see the module docstring)."""

    runtime: str = "all"
    clauses: Sequence[str] | None = None
    experiments: Sequence[LiveExperiment] | None = None  # None: the built-in live experiments
    expectations_dir: Path | None = None
    dotnet: Path | None = None
    _result: SuiteResult | None = field(default=None, init=False, repr=False)

    def cases(self, runtime_override: str | None) -> list[tuple[str, str]]:
        """(clause, column) pairs this suite will judge, known before anything runs: a runtime's column, the
        emulator's column of that runtime ("emu 8.0.4"), and the hook experiments' columns."""
        from conformance.core import runtimes
        from conformance.suite.registry import all_experiments, hook_experiments

        experiments = list(self.experiments) if self.experiments is not None else all_experiments()
        selected = runtimes.select(runtime_override or self.runtime, self.dotnet)
        pairs = set()
        for experiment in experiments:
            for rt in selected:
                if not experiment.applies_to(rt):
                    continue
                for judge in experiment.judges:
                    if not self.clauses or judge.clause in self.clauses:
                        pairs.add((judge.clause, judge.column(rt.version)))
        for hook in hook_experiments() if self.experiments is None else []:
            wanted = [j for j in hook.judges if not self.clauses or j.clause in self.clauses]
            pairs.update((j.clause, hook.column) for j in wanted)
        return sorted(pairs)

    def result(self, runtime_override: str | None) -> SuiteResult:
        if self._result is None:
            from conformance.suite.orchestrate import run_suite

            self._result = run_suite(
                runtime_override or self.runtime,
                clauses=self.clauses,
                dotnet=self.dotnet,
                expectations_dir=self.expectations_dir,
                experiments=self.experiments,
            )
        return self._result


class ClauseItem(pytest.Item):
    """One clause on one runtime."""

    def __init__(self, *, suite: ProfharnessSuite, clause: str, runtime: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.clause = clause
        self.runtime = runtime
        self.add_marker(pytest.mark.clause(clause))
        self.add_marker(pytest.mark.live)

    def _verdicts(self) -> list[Verdict]:
        result = self.suite.result(self.config.getoption("profharness_runtime"))
        return [v for v in result.verdicts if v.clause == self.clause and v.runtime == self.runtime]

    def runtest(self) -> None:
        verdicts = self._verdicts()
        if not verdicts:
            raise ClauseFailure(f"{self.clause}[{self.runtime}]: the suite produced no verdict")
        bad = [v for v in verdicts if v.outcome in _BAD]
        if bad:
            raise ClauseFailure("\n".join(f"{v.outcome_message} (trace {v.trace})" for v in bad))
        for verdict in verdicts:
            self.user_properties.append(("verdict", verdict.status.value))
            self.user_properties.append(("trace", verdict.trace))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ClauseFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.clause}[{self.runtime}]"


class ClauseFailure(Exception):
    """A clause whose verdict the suite does not accept."""


class SuiteCollector(pytest.Collector):
    def __init__(self, *, suite: ProfharnessSuite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self) -> Iterator[pytest.Item]:
        for clause, runtime in self.suite.cases(self.config.getoption("profharness_runtime")):
            yield ClauseItem.from_parent(
                self, name=f"{clause}[{runtime}]", suite=self.suite, clause=clause, runtime=runtime
            )


def pytest_configure(config: pytest.Config) -> None:
    """The ``clause`` marker the suite's items and the validator's ``clause_tests`` carry, registered so a
    user's ``--strict-markers`` run accepts them."""
    config.addinivalue_line("markers", "clause(id): the contract clause(s) a test checks (profharness)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("profharness")
    group.addoption(
        "--profharness-runtime",
        dest="profharness_runtime",
        default=None,
        help="runtime selection for every ProfharnessSuite (version, prefix or 'all')",
    )


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> pytest.Collector | None:
    if isinstance(obj, ProfharnessSuite):
        return SuiteCollector.from_parent(collector, name=name, suite=obj)
    return None
