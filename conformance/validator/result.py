"""What one validation produced, as the reports show it (issue 19): findings grouped by (clause, profiler call
site), each group with its clause's title and documentation sentence, a one-line fix, the count and the
first and last occurrence; a status per clause and runtime (failed, noted, passed, or skipped with why:
a rule a run never exercised passes nothing); the runs with their outcome and exit code.

A *note* is shown and never fails anything (a rule the documents do not state, or something that could not
be judged). Occurrences are kept up to :data:`OCCURRENCES_KEPT` per group (the count is exact), so a run
that makes one fault 30,000 times gives one group of count 30,000, not 30,000 lines.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field

from conformance.core.findings import Finding
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.symbols import Site

__all__ = [
    "OCCURRENCES_KEPT",
    "ClauseStatus",
    "Group",
    "Occurrence",
    "RuleStatus",
    "RunCounts",
    "RunSummary",
    "ValidationResult",
]

#: occurrences a group keeps beside its first and last (its count is exact)
OCCURRENCES_KEPT = 20


class RunCounts(BaseModel):
    """What one run exercised, each count from the recording (the proxy's records), never from the app's own
    claims (issue 21). A count the recording cannot tell (the run ended before the proxy's shutdown mark, or
    the proxy's events were off) is None."""

    model_config = ConfigDict(frozen=True)

    #: DoStackSnapshot calls the profiler made that returned, and of those, how many returned S_OK
    walks: int = 0
    walks_ok: int = 0
    #: GCs the proxy's shadow heap applied; those that moved some object (compacting); those that moved some
    #: object onto an address another object held before that GC (address reuse)
    gcs: int | None = None
    compacting_gcs: int | None = None
    reuse_gcs: int | None = None
    #: JITCompilationStarted the runtime made (whether or not the profiler asked for it), for how many
    #: FunctionIDs; recompilations: those for a FunctionID compiled before (tier-up, OSR)
    compilations: int | None = None
    functions: int | None = None
    recompilations: int | None = None
    #: recompilations made with the method on the compiling thread's stack: on-stack replacement (the
    #: proxy.osr marks)
    osr: int = 0
    #: ReJITCompilationStarted the runtime made (ReJIT the profiler requested; the proxy's ``counts`` record,
    #: written after Shutdown: None without it)
    rejits: int | None = None
    #: count -> why this run's runtime cannot show it (the workload's manifest)
    not_applicable: dict[str, str] = Field(default_factory=dict)


class WalkQualityRow(BaseModel):
    """One place of ``--walk-quality`` (:mod:`conformance.validator.walkq` says how it is measured)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    place: str
    #: walks whose truth has a managed frame
    walks: int
    failed: int
    complete: int
    frames_got: int
    frames_truth: int
    missing: int
    extra: int
    #: walks whose truth has no managed frame (not in the counts above)
    no_truth: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failure_share(self) -> float | None:
        """Walks that did not deliver exactly the truth's managed frames, of ``walks`` (None: no walk)."""
        return (self.walks - self.complete) / self.walks if self.walks else None


class WalkQuality(BaseModel):
    """One run's walk quality: the table and what the proxy and the replay could not give."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rows: tuple[WalkQualityRow, ...] = ()
    #: walks the proxy captured, dropped (no free slot), and walks of threads not parked in a handler (not
    #: captured: the proxy has no instant of them)
    captured: int = 0
    dropped: int = 0
    not_parked: int = 0
    #: samples left out (no capture could be made of them), one line each
    skipped: tuple[str, ...] = ()
    #: captures the replay could not read or unwind
    replay_failed: int = 0
    #: the folder of the captures (empty: none written)
    captures: str = ""
    #: what the run did differently from a plain validate run, and what the table leaves out on purpose, one
    #: sentence each (conformance.validator.walkq.NOTES)
    notes: tuple[str, ...] = ()


class OfRun(BaseModel):
    """What names a run: its runtime, its scenario and its perturbation seed (``--perturb``; None: not
    perturbed). A run's summary and each occurrence of a finding in it carry them."""

    model_config = ConfigDict(frozen=True)

    runtime: str
    scenario: str
    seed: int | None = None


class RunSummary(OfRun):
    """One run of the app under the profiler on one runtime."""

    #: ok, exited (a non-zero exit code: the app's own business, never a crash), crashed (a signal),
    #: killed, hung (the harness's watchdog ended it: the run reached --timeout)
    outcome: str
    exit_code: int | None = None
    signal: str | None = None
    seconds: float
    trace: str
    records: int
    #: records the judges read (all of them unless the recording was cut short)
    judged: int = 0
    #: a perturbed run: per point kind, the delays the proxy applied (its ``proxy.perturb.delays`` mark)
    delays: dict[str, int] = Field(default_factory=dict)
    #: what the run exercised, from its recording (None: not judged, e.g. no recording)
    counts: RunCounts | None = None
    #: ``--walk-quality``: the profiler's walks against the replay's truth (None: not asked for)
    walk_quality: WalkQuality | None = None

    @classmethod
    def of(cls, result: RunResult, seed: int | None) -> RunSummary:
        """The summary of run ``result`` made with ``seed``, before it is judged (``judged``: every record).
        Its outcome as the runs table shows it: a non-zero exit code is the app's own ("exited", the code
        beside it), never a failure of the profiler's (a crash is a signal or a fail-fast)."""
        outcome = "exited" if result.outcome is RunOutcome.FAILED else result.outcome.value
        return cls(runtime=result.runtime, scenario=result.scenario, seed=seed, outcome=outcome,
                   exit_code=result.exit_code, signal=result.signal, seconds=result.seconds,
                   trace=str(result.trace_path), records=result.record_count,
                   judged=result.record_count)  # fmt: skip


class Occurrence(OfRun):
    """One occurrence of a group's finding."""

    message: str
    thread: int | None = None
    callback: str | None = None
    records: list[int] = Field(default_factory=list)
    trace: str = ""

    @classmethod
    def of(cls, finding: Finding) -> Occurrence:
        return cls(runtime=finding.runtime, scenario=finding.scenario, message=finding.message,
                   thread=finding.thread, callback=finding.callback, records=list(finding.records),
                   trace=finding.trace)  # fmt: skip


class Group(BaseModel):
    """Every occurrence of one clause at one profiler call site (or at none), over every run."""

    clause: str
    title: str
    note: bool = False
    #: the documentation sentence the clause rests on (empty for the harness's own rules: see ``reason``)
    quote: str = ""
    document: str = ""
    #: why a harness rule holds without a document sentence
    reason: str = ""
    fix: str = ""
    #: the profiler's own code the occurrences come from (function and file:line), when known
    site: Site | None = None
    count: int = 0
    runtimes: list[str] = Field(default_factory=list)
    first: Occurrence
    last: Occurrence
    #: the first :data:`OCCURRENCES_KEPT` occurrences (``first`` among them)
    occurrences: list[Occurrence] = Field(default_factory=list)
    #: the runs it appeared in (indexes into ``ValidationResult.runs``), ascending
    runs: list[int] = Field(default_factory=list)

    @staticmethod
    def key_of(clause: str, site: Site | None, note: bool) -> tuple[str, str, bool]:
        """What one group gathers: a clause, at one call site (or none), as a finding or as a note."""
        return (clause, site.text() if site else "", note)

    @property
    def key(self) -> tuple[str, str, bool]:
        return Group.key_of(self.clause, self.site, self.note)


class ClauseStatus(StrEnum):
    FAILED = "failed"  # a finding of this clause on this runtime
    NOTED = "noted"  # only notes
    PASSED = "passed"  # the rule saw what it judges, and it held
    SKIPPED = "skipped"  # the rule never saw what it judges (``reason`` says what was missing)


class RuleStatus(BaseModel):
    """One clause on one runtime."""

    model_config = ConfigDict(frozen=True)

    clause: str
    runtime: str
    status: ClauseStatus
    reason: str = ""


class ValidationResult(BaseModel):
    """Every run, group and clause status of one validation."""

    profiler: str
    clsid: str
    runs: list[RunSummary]
    groups: list[Group] = Field(default_factory=list)
    rules: list[RuleStatus] = Field(default_factory=list)
    #: what could not be judged at all (a hook the checker could not read), one line each
    notes: list[str] = Field(default_factory=list)
    #: the validation was interrupted (SIGINT/SIGTERM): what is here was judged before it stopped
    interrupted: bool = False
    judge_seconds: float = 0.0

    @property
    def findings(self) -> list[Group]:
        """The groups that fail the validation (notes excluded)."""
        return [g for g in self.groups if not g.note]

    @property
    def clean(self) -> bool:
        return not self.findings
