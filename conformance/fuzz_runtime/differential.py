"""One generated program, live: compile (cached by content), run under the probe on each runtime, judge.

The judges are the suite's own: every registered experiment whose scenario is the program's family scenario
(``stack-walks`` for stack programs; ``gc-moves`` and its overlays for heap programs) judges the program's
trace through :func:`conformance.suite.orchestrate.judge_run`, with the effective plan built by
:func:`conformance.suite.orchestrate.effective_plan` from the program's ``plan.json`` (the family scenario's,
verbatim) and the experiment's overlay. The verdicts are measured against the expectation files
(:func:`conformance.suite.orchestrate.apply_expectations`): a known divergence with exactly its listed
disagreements is not a finding, nor one whose every line is a listed line at another place of the stack
(:func:`known_elsewhere`: frame positions and function labels depend on the program's shape); any other
unexpected verdict or an error is. A not-applicable verdict is not a finding either: the suite's rule that a
registered judge's clause applies holds for the scenario it was written for, and a generated program of
another shape may simply not exercise the clause (a small heap where no range starts at a tracked object).
A listed divergence the program does not show (stale) is not a finding: a generated program need not
exercise every known divergence.

A run that does not end normally (crash, hang, non-zero exit) is one finding (clause ``run``), not one per
judge. Results are kept per (program, runtime) for the life of the :class:`Differential`, so hypothesis
sees the same answer each time it replays a program, and a repeated program costs nothing.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.core import probe, scenarios
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, SCENARIOS_DIR, cache_dir
from conformance.core.runner import RunOutcome, RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.fuzz_runtime.render import FAMILY_SCENARIO, Rendered, render, write_scenario
from conformance.fuzz_runtime.shapes import Program
from conformance.suite.expectations import ExpectationSet, load_expectations
from conformance.suite.orchestrate import apply_expectations, effective_plan, judge_run
from conformance.suite.registry import all_experiments
from conformance.suite.verdicts import LiveExperiment, Status, Verdict, VerdictOutcome

__all__ = [
    "RUN_CLAUSE",
    "Differential",
    "ProgramResult",
    "RunStats",
    "RuntimeFinding",
    "Signature",
    "family_experiments",
    "known_elsewhere",
    "shape_free",
]

#: the clause name of a finding about the run itself (crashed, hung, failed)
RUN_CLAUSE = "run"

_FINDING_OUTCOMES = (VerdictOutcome.UNEXPECTED, VerdictOutcome.ERROR)

#: one disagreement of a finding: (clause, runtime, status, the line without the program's shape)
Signature = tuple[str, str, str, str]

#: what differs between the same disagreement in two programs: frame positions ("#5") and function labels
_POSITION = re.compile(r"#\d+")
_COUNT = re.compile(r"(?<![\w#.-])\d+(?![\w.])")
_PATH = re.compile(r"/[^\s:;,)]+")
_LABEL = re.compile(r"[\w.`+<>\[\],]+::[\w.`<>]+")


def shape_free(line: str) -> str:
    """A disagreement line without what depends on the program's shape (frame positions, function labels,
    counts such as "15 callbacks"):
    ``walk-now: GetFunctionFromIP(ip of frame #5, [unmanaged])`` and ``... frame #4, ...`` are one line."""
    return _COUNT.sub("N", _POSITION.sub("#N", _LABEL.sub("F", line)))


def known_elsewhere(verdict: Verdict) -> bool:
    """A divergence whose every disagreement is one its expectation entry lists, at another place of the
    stack: the known divergence, shown by a program of another shape (not a finding)."""
    entry = verdict.expectation
    if (
        entry is None
        or verdict.outcome is not VerdictOutcome.UNEXPECTED
        or verdict.status not in entry.status
    ):
        return False
    listed = {shape_free(line) for line in entry.disagreements}
    return bool(verdict.disagreements) and all(shape_free(line) in listed for line in verdict.disagreements)


@dataclass(frozen=True)
class RuntimeFinding:
    """Something unexpected one program showed on one runtime."""

    program_id: str
    clause: str
    runtime: str
    experiment: str
    #: the verdict's status ("diverges", "not-applicable", "error")
    status: str
    #: the expectation classification's message (what is unexpected, naming the entry if any)
    message: str
    observed: str
    expected: str
    disagreements: tuple[str, ...] = ()
    trace: str | None = None

    def signatures(self) -> frozenset[Signature]:
        """What makes two findings the same: per disagreement line (without the program's frame positions and
        function labels, :func:`shape_free`), the clause, the runtime and the status; a finding without lines
        (an error) has one, from its observation with paths masked."""
        lines = self.disagreements or (_PATH.sub("PATH", self.observed),)
        return frozenset((self.clause, self.runtime, self.status, shape_free(line)) for line in lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "program": self.program_id,
            "clause": self.clause,
            "runtime": self.runtime,
            "experiment": self.experiment,
            "status": self.status,
            "message": self.message,
            "observed": self.observed,
            "expected": self.expected,
            "disagreements": list(self.disagreements),
            "trace": self.trace,
        }


@dataclass(frozen=True)
class RunStats:
    """One experiment run of one program on one runtime."""

    experiment: str
    runtime: str
    outcome: str
    seconds: float


@dataclass
class ProgramResult:
    """What one program did on the runtimes it ran on."""

    rendered: Rendered
    compile_seconds: float
    compile_cached: bool
    runs: list[RunStats] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    findings: list[RuntimeFinding] = field(default_factory=list)

    @property
    def program(self) -> Program:
        return self.rendered.program

    @property
    def run_seconds(self) -> float:
        return sum(r.seconds for r in self.runs)


def family_experiments(
    family: str, experiments: Sequence[LiveExperiment] | None = None
) -> list[LiveExperiment]:
    """The registered experiments (live judges only) that judge a family's programs."""
    scenario = FAMILY_SCENARIO[family]
    chosen = []
    for experiment in experiments if experiments is not None else all_experiments():
        judges = tuple(j for j in experiment.judges if j.layer == "live")
        if experiment.scenario == scenario and judges:
            chosen.append(dataclasses.replace(experiment, judges=judges))
    if not chosen:
        raise HarnessError(
            f"no registered live experiment judges the scenario {scenario!r} ({family} programs)"
        )
    return chosen


def _run_finding(
    program_id: str, experiment: LiveExperiment, runtime: Runtime, result: RunResult
) -> RuntimeFinding:
    tail = f"; stderr: {result.stderr_tail.splitlines()[-1]}" if result.stderr_tail.strip() else ""
    return RuntimeFinding(
        program_id=program_id,
        clause=RUN_CLAUSE,
        runtime=runtime.version,
        experiment=experiment.id,
        status="error",
        message=f"{RUN_CLAUSE}[{runtime.version}]: {result.describe_failure()}{tail}",
        observed=result.outcome.value,
        expected="a normal run (exit code 0)",
        trace=str(result.trace_path),
    )


class Differential:
    """Runs generated programs live and judges them (see the module comment)."""

    def __init__(
        self,
        runtimes: Sequence[Runtime],
        *,
        work_dir: Path | None = None,
        expectations: ExpectationSet | None = None,
        experiments: Sequence[LiveExperiment] | None = None,
        native_dir: Path = NATIVE_DIR,
        scenarios_root: Path = SCENARIOS_DIR,
        keep_runs: bool = False,
        parallel: int = 2,
    ) -> None:
        if not runtimes:
            raise HarnessError("fuzz-runtime: no runtime selected")
        self.runtimes = list(runtimes)
        self.work_dir = work_dir or cache_dir() / "fuzz-runtime"
        self.expectations = expectations if expectations is not None else load_expectations()
        self._experiments = experiments
        self.scenarios_root = scenarios_root
        self.keep_runs = keep_runs
        self.parallel = max(1, parallel)
        self.probe_so = probe.build_probe(native_dir)
        self.reference = reference_runtime()
        self._families: dict[str, list[LiveExperiment]] = {}
        self._cache: dict[tuple[str, str], tuple[list[RunStats], list[Verdict], list[RuntimeFinding]]] = {}
        self._lock = threading.Lock()

    def experiments(self, family: str) -> list[LiveExperiment]:
        if family not in self._families:
            self._families[family] = family_experiments(family, self._experiments)
        return self._families[family]

    def render(self, program: Program) -> Rendered:
        return render(program, self.scenarios_root)

    def cached(self, program: Program, runtimes: Sequence[str] | None = None) -> bool:
        """Whether every asked runtime's answer for ``program`` is already known."""
        rendered = self.render(program)
        wanted = runtimes or [rt.version for rt in self.runtimes]
        return all((rendered.id, v) in self._cache for v in wanted)

    def _compile(self, rendered: Rendered) -> tuple[scenarios.Scenario, Path, float, bool]:
        folder = write_scenario(rendered, self.work_dir / "programs" / rendered.id)
        scenario = scenarios.load_scenario_dir(folder, self.scenarios_root)
        key = scenarios.compile_key(scenario, self.reference, scenarios._mcs_version(scenarios._mcs()))
        was_cached = (cache_dir() / "scenarios" / key / scenarios.APP_DLL).is_file()
        started = time.monotonic()
        try:
            app_dll = scenarios.compile_scenario(scenario, self.reference)
        except HarnessError as exc:
            raise HarnessError(
                f"fuzz-runtime: generated program {rendered.id} does not compile ({folder / 'app.cs'}): "
                f"{exc.message.splitlines()[0]}"
            ) from exc
        return scenario, app_dll, time.monotonic() - started, was_cached

    def _one(
        self, rendered: Rendered, scenario: scenarios.Scenario, app_dll: Path, runtime: Runtime
    ) -> tuple[list[RunStats], list[Verdict], list[RuntimeFinding]]:
        stats: list[RunStats] = []
        verdicts: list[Verdict] = []
        findings: list[RuntimeFinding] = []
        for experiment in self.experiments(rendered.program.family):
            if not experiment.applies_to(runtime):
                continue
            plan = effective_plan(experiment, scenario)
            run_dir = self.work_dir / "runs" / f"{rendered.id}-{experiment.id}-{runtime.version}"
            shutil.rmtree(run_dir, ignore_errors=True)  # the probe appends to an existing trace
            result = execute(scenario, app_dll, runtime, self.probe_so, plan=plan,
                             timeout_s=experiment.timeout_s, run_dir=run_dir, env=experiment.env)  # fmt: skip
            stats.append(RunStats(experiment.id, runtime.version, result.outcome.value, result.seconds))
            judged = judge_run(experiment, runtime, result, plan)
            clauses = [j.clause for j in experiment.judges]
            judged = [v for v in apply_expectations(judged, [runtime.version], self.expectations, clauses)
                      if v.experiment == experiment.id]  # fmt: skip
            verdicts.extend(judged)
            if result.outcome is not RunOutcome.OK or result.trace is None:
                findings.append(_run_finding(rendered.id, experiment, runtime, result))
            else:
                findings.extend(
                    RuntimeFinding(
                        program_id=rendered.id, clause=v.clause, runtime=v.runtime, experiment=v.experiment,
                        status=v.status.value, message=v.outcome_message, observed=v.observed,
                        expected=v.expected, disagreements=tuple(v.disagreements), trace=v.trace,
                    )
                    for v in judged
                    if v.outcome in _FINDING_OUTCOMES
                    and v.status is not Status.NOT_APPLICABLE
                    and not known_elsewhere(v)
                )  # fmt: skip
            if not self.keep_runs and not any(f.experiment == experiment.id for f in findings):
                shutil.rmtree(run_dir, ignore_errors=True)
        return stats, verdicts, findings

    def run(self, program: Program, runtimes: Sequence[str] | None = None) -> ProgramResult:
        """Run ``program`` on the runtimes (versions; default: all of this differential's) and judge it."""
        rendered = render(program, self.scenarios_root)
        chosen = [rt for rt in self.runtimes if runtimes is None or rt.version in runtimes]
        todo = [rt for rt in chosen if (rendered.id, rt.version) not in self._cache]
        compile_seconds, compile_cached = 0.0, True
        if todo:
            scenario, app_dll, compile_seconds, compile_cached = self._compile(rendered)

            def one(rt: Runtime) -> None:
                answer = self._one(rendered, scenario, app_dll, rt)
                with self._lock:
                    self._cache[(rendered.id, rt.version)] = answer

            with ThreadPoolExecutor(max_workers=min(self.parallel, len(todo))) as pool:
                list(pool.map(one, todo))
        result = ProgramResult(rendered, compile_seconds, compile_cached)
        for rt in chosen:
            stats, verdicts, findings = self._cache[(rendered.id, rt.version)]
            result.runs.extend(stats)
            result.verdicts.extend(verdicts)
            result.findings.extend(findings)
        return result


#: progress(message): one line per program, for the CLI
ProgressFn = Callable[[str], None]
