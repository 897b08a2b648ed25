"""Verdicts and live experiments: the vocabulary of the conformance suite.

A :class:`LiveExperiment` is a scenario plus a probe plan, run once per runtime; each of its
:class:`Judge` functions turns the recording into a :class:`Judgement` for one clause, by comparing what
the runtime did with what the model predicts from *independent* inputs (the plan the harness wrote, the
scenario's own ground truth, the model), never from the observation itself.

A judge attached to an experiment *declares* that its clause applies to that experiment's run: a
not-applicable verdict fails the suite unless an expectation entry says so. Known divergences and their
every disagreement are pinned by the expectation files (:mod:`conformance.suite.expectations`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from conformance.core.runtimes import Runtime
from conformance.core.trace import Trace
from emu.hookcheck.report import HookReport


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

    @classmethod
    def from_disagreements(
        cls,
        disagreements: Iterable[str],
        *,
        observed: str,
        expected: str,
        evidence: Iterable[int] = (),
        picture: Iterable[Mapping[str, Any]] = (),
    ) -> Judgement:
        """Diverges when there is any disagreement (each line once, in first-seen order), else conforms."""
        lines = tuple(dict.fromkeys(disagreements))
        return cls(
            status=Status.DIVERGES if lines else Status.CONFORMS,
            observed=observed,
            expected=expected,
            evidence=tuple(evidence),
            picture=tuple(picture),
            disagreements=lines,
        )


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
    #: the layer whose column its verdicts fill: "live" (the runtime's own column) or "emu" (the run's
    #: samples replayed by the emulator: the column "emu <version>")
    layer: str = "live"

    def column(self, version: str) -> str:
        return version if self.layer == "live" else f"{self.layer} {version}"


@dataclass(frozen=True)
class HookEvidence:
    """What a hook judge sees: the hook checker's report on the experiment's hook."""

    report: HookReport


@dataclass(frozen=True)
class HookJudge:
    clause: str
    judge: Callable[[HookEvidence], Judgement]
    what: str


@dataclass(frozen=True)
class HookExperiment:
    """The hook checker on one hook's machine code (no live run, no runtime): one matrix column."""

    id: str
    #: the matrix column its verdicts fill (e.g. "emu x86 hooks")
    column: str
    #: builds (or finds) the object file the hook is in
    library: Callable[[], Path]
    symbol: str
    arch: str
    judges: tuple[HookJudge, ...]
    #: how many random states the checker runs the hook from, and the seed they are drawn from
    runs: int = 100
    seed: int = 0

    def run(self) -> tuple[Path, HookReport]:
        """The checker on the hook: the object it ran and its report (seeded: deterministic)."""
        from emu.hookcheck import check_hook

        library = self.library()
        if self.arch not in ("x86", "x64"):
            raise ValueError(f"{self.id}: unknown architecture {self.arch!r}")
        arch: Literal["x86", "x64"] = "x86" if self.arch == "x86" else "x64"
        return library, check_hook(library, self.symbol, arch, runs=self.runs, seed=self.seed)


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
    #: extra environment variables of its runs (None: the probe's environment as it is)
    env: Mapping[str, str] | None = None

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
    #: every disagreement with the model, one stable line each (what an expectation entry pins)
    disagreements: list[str] = Field(default_factory=list)
    #: set when the verdict is compared with the expectation files
    expectation: AppliedExpectation | None = None
    outcome: VerdictOutcome | None = None
    outcome_message: str = ""


class AppliedExpectation(BaseModel):
    """The expectation entry a verdict was measured against, as the reports show it."""

    model_config = ConfigDict(frozen=True)

    status: tuple[Status, ...]
    why: str
    disagreements: tuple[str, ...] = ()
    #: ``file:line`` of the entry
    source: str = ""


class VerdictOutcome(StrEnum):
    """A verdict measured against the runtime's expectation file."""

    AS_DOCUMENTED = "as-documented"  # conforms (or n/a where an expectation entry says so)
    EXPECTED_DIVERGENCE = "expected-divergence"  # diverges with exactly the disagreements an entry lists
    UNEXPECTED = "unexpected"  # differs from what the expectation files (or the document) say
    STALE_EXPECTATION = "stale-expectation"  # an entry expects something (a line, a status) no longer seen
    ERROR = "error"  # the run crashed or hung, or the judge itself failed



Verdict.model_rebuild()


class SuiteResult(BaseModel):
    runtimes: list[str]
    runtime_sources: dict[str, str]
    #: the matrix columns: each runtime, then the emu layer's ("emu <version>", "emu x86 hooks")
    columns: list[str] = Field(default_factory=list)
    verdicts: list[Verdict]
    seconds: float
    runs: list[dict[str, Any]]
    #: SIGINT/SIGTERM stopped the suite: the verdicts are those of the runs judged before it
    interrupted: bool = False

    @property
    def failures(self) -> list[Verdict]:
        bad = {VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION, VerdictOutcome.ERROR}
        return [v for v in self.verdicts if v.outcome in bad]

    @property
    def ok(self) -> bool:
        """Nothing unexpected, and the whole suite ran (an interrupted one is never ok)."""
        return not self.failures and not self.interrupted
