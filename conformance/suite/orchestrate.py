"""The conformance suite: ``profharness conformance``.

Runs every live experiment on every selected runtime, judges each clause against the model, measures the
verdicts against the runtime's expectation file and prints the clause x runtime matrix. Exits 0 only when
nothing is unexpected: no undocumented divergence, no error, no stale expectation.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conformance.checks import all_experiments
from conformance.core import probe, runtimes, scenarios
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, SCENARIOS_DIR
from conformance.core.plans import resolve_plan
from conformance.core.runner import Outcome as RunOutcome
from conformance.core.runner import RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.suite.verdicts import (
    Evidence,
    LiveExperiment,
    Outcome,
    Status,
    SuiteResult,
    Verdict,
    classify,
    load_expectations,
)

#: how many scenario processes run at once (the machine has 2 cores)
PARALLEL_RUNS = 2


def _excerpt(result: RunResult, seqs: Iterable[int]) -> list[dict[str, Any]]:
    if result.trace is None:
        return []
    wanted = set(seqs)
    return [json.loads(r.model_dump_json()) for r in result.trace.records if r.seq in wanted][:40]


def effective_plan(experiment: LiveExperiment, scenario: scenarios.Scenario) -> dict[str, Any]:
    """The plan as the harness writes it for this experiment: the scenario's plan.json with the
    experiment's overlay merged over its top-level keys. Judges read this, never the probe's echo."""
    plan = dict(scenario.plan)
    plan.update(experiment.plan_overlay or {})
    return resolve_plan(plan)


def judge_run(
    experiment: LiveExperiment, runtime: Runtime, result: RunResult, plan: Mapping[str, Any]
) -> list[Verdict]:
    """Every clause verdict of one experiment run (``plan``: what the harness asked the probe to do)."""
    base = {
        "runtime": runtime.version,
        "experiment": experiment.id,
        "trace": str(result.trace_path),
        "trace_sha256": result.trace_sha256,
    }
    if result.outcome is not RunOutcome.OK or result.trace is None:
        line = result.describe_failure()
        return [
            Verdict(
                clause=j.clause,
                what=j.what,
                status=Status.ERROR,
                observed=line,
                expected="a normal run",
                **base,
            )
            for j in experiment.judges
        ]
    evidence = Evidence(trace=result.trace, runtime=runtime, plan=plan)
    verdicts: list[Verdict] = []
    for judge in experiment.judges:
        try:
            judgement = judge.judge(evidence)
        except Exception as exc:  # a judge bug is an error verdict naming the clause, never a crash
            verdicts.append(
                Verdict(
                    clause=judge.clause,
                    what=judge.what,
                    status=Status.ERROR,
                    observed=f"judge failed: {type(exc).__name__}: {exc}",
                    expected="a judgement",
                    **base,
                )
            )
            continue
        verdicts.append(
            Verdict(
                clause=judge.clause,
                what=judge.what,
                status=judgement.status,
                observed=judgement.observed,
                expected=judgement.expected,
                evidence=_excerpt(result, judgement.evidence),
                picture=[dict(p) for p in judgement.picture],
                **base,
            )
        )
    return verdicts


def select_experiments(
    clauses: Sequence[str] | None, experiments: Sequence[LiveExperiment] | None = None
) -> list[LiveExperiment]:
    experiments = list(experiments) if experiments is not None else all_experiments()
    if not clauses:
        return experiments
    known = {j.clause for e in experiments for j in e.judges}
    unknown = [c for c in clauses if c not in known]
    if unknown:
        raise HarnessError(
            f"--clause {', '.join(unknown)}: no live experiment checks it (live clauses: {len(known)};"
            " see 'profharness clauses --layer live')"
        )
    chosen: list[LiveExperiment] = []
    for experiment in experiments:
        judges = tuple(j for j in experiment.judges if j.clause in clauses)
        if judges:
            chosen.append(dataclasses.replace(experiment, judges=judges))
    return chosen


ProgressFn = Callable[[int, int, str], None]


def run_suite(
    runtime_spec: str = "all",
    *,
    clauses: Sequence[str] | None = None,
    dotnet: Path | None = None,
    expectations_dir: Path | None = None,
    progress: ProgressFn | None = None,
    experiments: Sequence[LiveExperiment] | None = None,
    native_dir: Path = NATIVE_DIR,
    scenarios_root: Path = SCENARIOS_DIR,
) -> SuiteResult:
    """Run and judge the chosen experiments on the selected runtimes. ``native_dir`` and ``scenarios_root``
    let tests run the suite with a probe or scenarios built from a (deliberately broken) copy."""
    started = time.monotonic()
    selected = runtimes.select(runtime_spec, dotnet)
    chosen = select_experiments(clauses, experiments)
    probe_so = probe.build_probe(native_dir)
    reference = reference_runtime()
    names = sorted({e.scenario for e in chosen})
    loaded = {name: scenarios.load_scenario(name, scenarios_root) for name in names}
    compiled = {name: scenarios.compile_scenario(scenario, reference) for name, scenario in loaded.items()}

    jobs = [(e, rt) for rt in selected for e in chosen if e.applies_to(rt)]
    done = 0

    plans = {e.id: effective_plan(e, loaded[e.scenario]) for e in chosen}

    def one(job: tuple[LiveExperiment, Runtime]) -> tuple[LiveExperiment, Runtime, RunResult]:
        experiment, runtime = job
        result = execute(
            loaded[experiment.scenario],
            compiled[experiment.scenario],
            runtime,
            probe_so,
            plan=plans[experiment.id],
            timeout_s=experiment.timeout_s,
        )
        return experiment, runtime, result

    verdicts: list[Verdict] = []
    runs: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        for experiment, runtime, result in pool.map(one, jobs):
            done += 1
            if progress:
                progress(done, len(jobs), f"{experiment.id} on {runtime.version}")
            verdicts.extend(judge_run(experiment, runtime, result, plans[experiment.id]))
            runs.append(
                {
                    "experiment": experiment.id,
                    "runtime": runtime.version,
                    "outcome": result.outcome.value,
                    "seconds": result.seconds,
                    "trace": str(result.trace_path),
                    "trace_sha256": result.trace_sha256,
                    "records": result.record_count,
                }
            )

    for runtime in selected:
        expectations = load_expectations(runtime.version, expectations_dir)
        seen = set()
        for verdict in verdicts:
            if verdict.runtime != runtime.version:
                continue
            seen.add(verdict.clause)
            expectation = expectations.get(verdict.clause)
            verdict.expectation = expectation
            verdict.outcome, verdict.outcome_message = classify(verdict, expectation)
        for clause_id, expectation in expectations.items():
            if clause_id not in seen and (not clauses or clause_id in clauses):
                verdicts.append(
                    Verdict(
                        clause=clause_id,
                        runtime=runtime.version,
                        experiment="-",
                        status=Status.NOT_APPLICABLE,
                        observed="no live experiment produced a verdict",
                        expected=expectation.status.value,
                        expectation=expectation,
                        outcome=Outcome.STALE_EXPECTATION,
                        outcome_message=f"{clause_id}[{runtime.version}]: the expectation file names a clause"
                        " that no experiment checks",
                    )
                )
    verdicts.sort(key=lambda v: (v.clause, v.runtime))
    return SuiteResult(
        runtimes=[rt.version for rt in selected],
        runtime_sources={rt.version: rt.source for rt in selected},
        verdicts=verdicts,
        seconds=round(time.monotonic() - started, 2),
        runs=runs,
    )
