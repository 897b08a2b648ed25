"""The fuzzing loop: known shapes first, then hypothesis-generated programs, every finding shrunk.

1. **Known shapes** (:func:`.strategies.known_programs`): one small program per shape, run on every runtime.
   Each is already minimal for its shape, so a finding from one is kept as it is.
2. **Generated programs**: rounds of a hypothesis search over :func:`.strategies.programs`. A round's test
   runs each program live on every runtime; the first program with a finding not seen before fixes the
   round's *target* (one of its :meth:`.RuntimeFinding.signatures`: clause, runtime, status and one
   disagreement line without the program's frame positions and function labels), and from then on a
   program fails the test only when it shows that same disagreement (on that runtime alone), so hypothesis
   shrinks it to the smallest program that still shows it. The next round looks for a disagreement not
   yet seen.

Every answer is kept per (program, runtime) (:class:`.Differential`), so hypothesis replaying a program
gets the same answer. Time budgets stop new live runs (programs not yet run then pass), never the replay
of one already run. With ``database`` (a folder shared by several machines) hypothesis saves each shrunk
program there and replays the saved ones first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from conformance.core import interrupt
from conformance.fuzz_runtime.differential import Differential, ProgramResult, RuntimeFinding, Signature
from conformance.fuzz_runtime.render import write_scenario
from conformance.fuzz_runtime.shapes import Program
from conformance.fuzz_runtime.strategies import FAMILIES, known_programs, programs

__all__ = ["FINDING_FILE", "FuzzSettings", "KeptFinding", "RuntimeFuzzReport", "fuzz", "shrink_round"]

FINDING_FILE = "finding.json"


@dataclass(frozen=True)
class FuzzSettings:
    """What a fuzzing run does (the CLI's options)."""

    families: tuple[str, ...] = FAMILIES
    #: generated programs per hypothesis round (shrinking steps not counted)
    max_examples: int = 50
    seed: int | None = None
    #: seconds for the whole run (known shapes and generation; a shrink in progress may finish past it)
    time_s: float | None = None
    #: seconds one shrink may spend on live runs of new programs
    shrink_s: float = 300.0
    known_first: bool = True
    #: generate at all (False: the known shapes only, the CI profile)
    generate: bool = True
    #: hypothesis rounds at most (each ends with one shrunk finding)
    max_rounds: int = 10
    out: Path | None = None
    database: Path | None = None


@dataclass(frozen=True)
class KeptFinding:
    """A finding and the (smallest found) program that shows it."""

    finding: RuntimeFinding
    program: Program
    #: "known" (an explicit known-shape program) or "shrunk" (hypothesis' smallest program)
    origin: str
    folder: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.finding.to_dict(),
            "origin": self.origin,
            "shape": self.program.describe(),
            "size": self.program.size(),
            "folder": None if self.folder is None else str(self.folder),
        }


@dataclass
class RuntimeFuzzReport:
    """What a fuzzing run did and found."""

    programs: int = 0
    runs: int = 0
    compile_seconds: float = 0.0
    compile_cache_hits: int = 0
    run_seconds: dict[str, float] = field(default_factory=dict)
    runs_per_runtime: dict[str, int] = field(default_factory=dict)
    shapes: set[str] = field(default_factory=set)
    findings: list[KeptFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: SIGINT/SIGTERM stopped the run: what is here was found before it (a shrink cut short keeps the
    #: smallest program it had)
    interrupted: bool = False

    def add(self, result: ProgramResult) -> None:
        self.programs += 1
        self.compile_seconds += result.compile_seconds
        self.compile_cache_hits += result.compile_cached
        self.shapes |= result.program.shapes()
        for run in result.runs:
            self.runs += 1
            self.run_seconds[run.runtime] = self.run_seconds.get(run.runtime, 0.0) + run.seconds
            self.runs_per_runtime[run.runtime] = self.runs_per_runtime.get(run.runtime, 0) + 1

    def seen(self) -> set[Signature]:
        return {sig for k in self.findings for sig in k.finding.signatures()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "programs": self.programs,
            "runs": self.runs,
            "seconds": round(self.seconds, 2),
            "compile_seconds": round(self.compile_seconds, 2),
            "compile_cache_hits": self.compile_cache_hits,
            "run_seconds": {k: round(v, 2) for k, v in sorted(self.run_seconds.items())},
            "runs_per_runtime": dict(sorted(self.runs_per_runtime.items())),
            "shapes": sorted(self.shapes),
            "findings": [k.to_dict() for k in self.findings],
            "notes": self.notes,
            "interrupted": self.interrupted,
        }


#: progress(line): the CLI prints each line
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def keep(
    findings: Sequence[RuntimeFinding],
    program: Program,
    origin: str,
    differential: Differential,
    out: Path | None,
) -> list[KeptFinding]:
    """A program's findings, and the program as a ready scenario folder under ``out`` (``app.cs``,
    ``plan.json``, ``finding.json`` naming each finding's clause, runtime and observation)."""
    if out is None or not findings:
        return [KeptFinding(f, program, origin) for f in findings]
    rendered = differential.render(program)
    first = findings[0]
    folder = out / f"{first.clause.lower()}-{first.status}-{rendered.id[:10]}"
    kept = [KeptFinding(f, program, origin, folder) for f in findings]
    document = {
        "program": rendered.id,
        "origin": origin,
        "family": program.family,
        "shape": program.describe(),
        "size": program.size(),
        "program_spec": program.to_dict(),
        "findings": [f.to_dict() for f in findings],
    }
    write_scenario(rendered, folder, {FINDING_FILE: json.dumps(document, indent=2, sort_keys=True) + "\n"})
    return kept


class _Found(Exception):
    """Raised inside the hypothesis test: this program shows the target finding."""

    def __init__(self, finding: RuntimeFinding, program: Program) -> None:
        super().__init__(f"{finding.clause} on {finding.runtime}: {finding.status}")
        self.finding = finding
        self.program = program


class _OutOfTime(BaseException):
    """Raised inside the hypothesis test when the run's time (or the shrink's) is up. Not an ``Exception``,
    so hypothesis stops at once: returning instead would let it draw (or shrink) on through examples the test
    no longer runs, up to ``max_examples``, for as long as that takes and with all the memory it keeps."""


def _found(finding: RuntimeFinding, program: Program) -> None:
    """The one place the test fails: hypothesis tells failures apart by where they are raised."""
    raise _Found(finding, program)


def _database(path: Path | None) -> ExampleDatabase | None:
    return DirectoryBasedExampleDatabase(str(path)) if path is not None else None


def shrink_round(
    differential: Differential,
    settings_: FuzzSettings,
    known: set[Signature],
    *,
    round_number: int = 0,
    deadline: float | None = None,
    report: RuntimeFuzzReport | None = None,
    log: Log = _quiet,
    state: dict[str, Any] | None = None,
) -> tuple[RuntimeFinding, Program] | None:
    """One hypothesis round: the smallest program showing the first disagreement whose signature is not
    in ``known``, and the finding that shows it; None when ``max_examples`` programs (or the time) showed
    none. ``state`` (filled here) lets the caller keep the smallest program so far when the round is
    interrupted."""
    #: target: the signature being shrunk; best: the smallest (finding, program) showing it so far
    if state is None:
        state = {}
    state.update({"target": None, "shrink_until": None, "best": None})

    def run(program: Program, runtimes: Sequence[str] | None = None) -> ProgramResult:
        fresh = not differential.cached(program, runtimes)
        result = differential.run(program, runtimes)
        if fresh and report is not None:
            report.add(result)
        return result

    @settings(
        max_examples=settings_.max_examples,
        deadline=None,
        database=_database(settings_.database),
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )
    @given(programs(settings_.families))
    def fuzz_runtime_program(program: Program) -> None:
        target = state["target"]
        if target is None:
            if deadline is not None and time.monotonic() > deadline and not differential.cached(program):
                raise _OutOfTime
            result = run(program)
            new = [(f, sig) for f in result.findings for sig in sorted(f.signatures()) if sig not in known]
            if new:
                finding, state["target"] = new[0]
                state["shrink_until"] = time.monotonic() + settings_.shrink_s
                log(f"  found {finding.clause} on {finding.runtime} ({finding.status}: {state['target'][3]}) "
                    f"in {program.describe()}; shrinking")  # fmt: skip
                state["best"] = (finding, program)
                _found(finding, program)
            return
        runtime = target[1]
        if time.monotonic() > state["shrink_until"] and not differential.cached(program, [runtime]):
            log(f"  the shrink's {settings_.shrink_s:g} s are up: keeping the smallest program so far")
            raise _OutOfTime
        for finding in run(program, [runtime]).findings:
            if target in finding.signatures():
                state["best"] = (finding, program)
                _found(finding, program)

    if settings_.seed is not None:
        fuzz_runtime_program = seed(settings_.seed + round_number)(fuzz_runtime_program)
    try:
        fuzz_runtime_program()
    except _Found as found:
        return found.finding, found.program
    except _OutOfTime:
        best: tuple[RuntimeFinding, Program] | None = state["best"]
        return best
    except Flaky as exc:  # a program's answer changed between replays: cannot happen with the cache
        log(f"  hypothesis reports a flaky finding: {type(exc).__name__}")
        return None
    return None


def fuzz(differential: Differential, settings_: FuzzSettings, log: Log = _quiet) -> RuntimeFuzzReport:
    """Known shapes, then hypothesis rounds, within the budgets of ``settings_``."""
    started = time.monotonic()
    deadline = started + settings_.time_s if settings_.time_s is not None else None
    report = RuntimeFuzzReport()

    def over() -> bool:
        return deadline is not None and time.monotonic() > deadline

    shrinking: dict[str, Any] = {}
    try:
        _search(differential, settings_, report, over, deadline, log, shrinking)
    except interrupt.Interrupted as exc:
        report.interrupted = True
        best: tuple[RuntimeFinding, Program] | None = shrinking.get("best")
        if best is not None and best[0].signatures() - report.seen():
            finding, program = best
            log(f"kept {finding.clause} on {finding.runtime} ({finding.status}) as far as it was shrunk: "
                f"{program.describe()}")  # fmt: skip
            report.findings.extend(keep([finding], program, "interrupted", differential, settings_.out))
        report.notes.append(f"interrupted by {exc.name}: what is here was found before it")
    report.seconds = time.monotonic() - started
    if settings_.out is not None:
        settings_.out.mkdir(parents=True, exist_ok=True)
        (settings_.out / "fuzz-report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return report


def _search(
    differential: Differential,
    settings_: FuzzSettings,
    report: RuntimeFuzzReport,
    over: Callable[[], bool],
    deadline: float | None,
    log: Log,
    shrinking: dict[str, Any],
) -> None:
    """The known shapes, then the hypothesis rounds; each finding is added to ``report`` as it is kept."""
    if settings_.known_first:
        for program in known_programs(settings_.families):
            if over():
                report.notes.append("the time ran out before every known shape ran")
                break
            result = differential.run(program)
            report.add(result)
            seen = report.seen()
            new = [f for f in result.findings if not f.signatures() <= seen]
            line = f"known {program.family}: {program.describe()}: {len(result.findings)} finding(s)"
            log(line + (f", new: {', '.join(f'{f.clause}@{f.runtime}' for f in new)}" if new else ""))
            report.findings.extend(keep(new, program, "known", differential, settings_.out))
    if settings_.generate:
        for round_number in range(settings_.max_rounds):
            if over():
                break
            found = shrink_round(differential, settings_, report.seen(), round_number=round_number,
                                 deadline=deadline, report=report, log=log, state=shrinking)  # fmt: skip
            if found is None:
                break
            finding, program = found
            log(f"shrunk {finding.clause} on {finding.runtime} ({finding.status}) to: {program.describe()}")
            report.findings.extend(keep([finding], program, "shrunk", differential, settings_.out))
            shrinking.clear()
