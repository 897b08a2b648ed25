"""Verdicts, live experiments and expectation files: the vocabulary of the conformance suite.

A :class:`LiveExperiment` is a scenario plus a probe plan, run once per runtime; each of its
:class:`Judge` functions turns the recording into a :class:`Judgement` for one clause, by comparing what
the runtime did with what the model predicts from *independent* inputs (the call's arguments, the
scenario's own ground truth), never from the observation itself.

Known divergences live in ``conformance/expectations/<runtime version>.toml``, one table per clause::

    [DSS-12]
    status = "diverges"                 # what this runtime is known to do for the clause
    observed = "0x80070057"             # optional: a substring the verdict's observed text must contain
    why = "One sentence: why the runtime differs from the document."
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conformance.core.errors import HarnessError
from conformance.core.paths import EXPECTATIONS_DIR
from conformance.core.runtimes import Runtime
from conformance.core.trace import Trace


class Status(StrEnum):
    CONFORMS = "conforms"
    DIVERGES = "diverges"
    NOT_APPLICABLE = "not-applicable"
    ERROR = "error"


class Judgement(BaseModel):
    """What one judge found for one clause on one run."""

    model_config = ConfigDict(frozen=True)

    status: Status
    observed: str = Field(description="what the runtime did, one line")
    expected: str = Field(description="what the model predicts, one line")
    #: seq numbers of the trace records that show it (the evidence excerpt)
    evidence: tuple[int, ...] = ()
    #: optional frames to draw (stack walks): [{"label": str, "ok": bool}], leaf first
    picture: tuple[Mapping[str, Any], ...] = ()
    #: every disagreement with the model, one stable line each (no addresses, paths or per-run ids), so an
    #: expectation can pin each one: a new disagreement in a clause with a known divergence is unexpected
    disagreements: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """What a judge sees: the run's trace and the runtime it ran on."""

    trace: Trace
    runtime: Runtime
    plan: Mapping[str, Any]


JudgeFn = Callable[[Evidence], Judgement]


@dataclass(frozen=True)
class Judge:
    clause: str
    judge: JudgeFn
    #: short description of the check, for reports
    what: str
    #: the plan entries it reads (experiment entry ids, or dotted plan keys such as ``replies.X``)
    uses: tuple[str, ...] = ()


@dataclass(frozen=True)
class LiveExperiment:
    """A scenario + plan, run once per runtime, judged for one or more clauses."""

    id: str
    scenario: str
    judges: tuple[Judge, ...]
    #: top-level keys merged over the scenario's own plan.json (None: that plan as it is)
    plan_overlay: Mapping[str, Any] | None = None
    timeout_s: float = 60.0
    #: runtimes (version prefixes) the experiment applies to; empty = all
    only_on: tuple[str, ...] = field(default=())

    def applies_to(self, runtime: Runtime) -> bool:
        return not self.only_on or any(runtime.version.startswith(p) for p in self.only_on)


class Verdict(BaseModel):
    """One clause on one runtime, from one recorded run."""

    clause: str
    runtime: str
    experiment: str
    status: Status
    observed: str
    expected: str
    what: str = ""
    trace: str | None = None
    trace_sha256: str | None = None
    evidence: list[dict[str, Any]] = Field(default_factory=list)
    picture: list[dict[str, Any]] = Field(default_factory=list)
    #: set when the verdict is compared with the expectation file
    expectation: Expectation | None = None
    outcome: Outcome | None = None
    outcome_message: str = ""


class Outcome(StrEnum):
    """A verdict measured against the runtime's expectation file."""

    AS_DOCUMENTED = "as-documented"  # conforms / n/a, and no expectation says otherwise
    EXPECTED_DIVERGENCE = "expected-divergence"  # diverges, and the expectation file says so
    UNEXPECTED = "unexpected"  # differs from what the expectation file (or the document) says
    STALE_EXPECTATION = "stale-expectation"  # the expectation file expects a divergence no longer seen
    ERROR = "error"  # the run crashed or hung, or the judge itself failed


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    why: str = Field(min_length=10)
    observed: str | None = None


Verdict.model_rebuild()


class SuiteResult(BaseModel):
    runtimes: list[str]
    runtime_sources: dict[str, str]
    verdicts: list[Verdict]
    seconds: float
    runs: list[dict[str, Any]]

    @property
    def failures(self) -> list[Verdict]:
        bad = {Outcome.UNEXPECTED, Outcome.STALE_EXPECTATION, Outcome.ERROR}
        return [v for v in self.verdicts if v.outcome in bad]

    @property
    def ok(self) -> bool:
        return not self.failures


def expectations_path(runtime_version: str, directory: Path | None = None) -> Path:
    return (directory or EXPECTATIONS_DIR) / f"{runtime_version}.toml"


def load_expectations(runtime_version: str, directory: Path | None = None) -> dict[str, Expectation]:
    """The expectation file of a runtime version (empty when it has none)."""
    path = expectations_path(runtime_version, directory)
    if not path.is_file():
        return {}
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path}: not valid TOML ({exc})") from exc
    result: dict[str, Expectation] = {}
    for clause_id, table in raw.items():
        if not isinstance(table, dict):
            raise HarnessError(f"{path}: [{clause_id}] must be a table")
        try:
            result[clause_id] = Expectation.model_validate(table)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise HarnessError(f"{path}: [{clause_id}] {where}: {first['msg']}") from exc
    return result


def classify(verdict: Verdict, expectation: Expectation | None) -> tuple[Outcome, str]:
    """Measure a verdict against its expectation; the message names the clause and the runtime."""
    label = f"{verdict.clause}[{verdict.runtime}]"
    if verdict.status is Status.ERROR:
        return Outcome.ERROR, f"{label}: error: {verdict.observed}"
    if expectation is None:
        if verdict.status is Status.DIVERGES:
            return (
                Outcome.UNEXPECTED,
                f"{label}: diverges and no expectation explains it: observed {verdict.observed};"
                f" expected {verdict.expected}",
            )
        return Outcome.AS_DOCUMENTED, f"{label}: {verdict.status}"
    if expectation.status is not verdict.status:
        if verdict.status is Status.NOT_APPLICABLE:
            # The run could not exercise the clause (e.g. a signal that landed outside the code under test):
            # nothing contradicts the expectation, and the matrix shows n/a.
            return (
                Outcome.AS_DOCUMENTED,
                f"{label}: not applicable in this run ({verdict.observed}); expectation not exercised",
            )
        if expectation.status is Status.DIVERGES:
            return (
                Outcome.STALE_EXPECTATION,
                f"{label}: the expectation file expects a divergence that no longer occurs"
                f" (now {verdict.status}: {verdict.observed})",
            )
        return (
            Outcome.UNEXPECTED,
            f"{label}: expected {expectation.status} per the expectation file, got {verdict.status}:"
            f" observed {verdict.observed}; model expects {verdict.expected}",
        )
    if expectation.observed is not None and expectation.observed not in verdict.observed:
        return (
            Outcome.UNEXPECTED,
            f"{label}: {verdict.status} as expected, but observed {verdict.observed!r} does not show"
            f" {expectation.observed!r}",
        )
    if verdict.status is Status.DIVERGES:
        return Outcome.EXPECTED_DIVERGENCE, f"{label}: known divergence: {expectation.why}"
    return Outcome.AS_DOCUMENTED, f"{label}: {verdict.status} (as the expectation file says)"
