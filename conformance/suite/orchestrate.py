"""The conformance suite: ``profharness conformance``.

Runs every live experiment on every selected runtime, judges each clause against the model and measures
the verdicts against the expectation files (:mod:`conformance.suite.expectations`). The run is ok only when
nothing is unexpected: no undocumented divergence or disagreement, no undeclared not-applicable, no error,
no stale expectation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conformance.core import interrupt, probe, runtimes, scenarios
from conformance.core.errors import HarnessError, InputError
from conformance.core.paths import NATIVE_DIR, SCENARIOS_DIR
from conformance.core.plans import resolve_plan
from conformance.core.runner import RunOutcome, RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.suite.expectations import ExpectationSet, classify, load_expectations
from conformance.suite.registry import all_experiments
from conformance.suite.registry import hook_experiments as registered_hooks
from conformance.suite.verdicts import (
    Evidence,
    HookEvidence,
    HookExperiment,
    Judge,
    Judgement,
    LiveExperiment,
    Status,
    SuiteResult,
    Verdict,
    VerdictOutcome,
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
    return resolve_plan(plan, where=f"experiment {experiment.id} ({scenario.name}/plan.json + overlay)")


def judge_run(
    experiment: LiveExperiment, runtime: Runtime, result: RunResult, plan: Mapping[str, Any]
) -> list[Verdict]:
    """Every clause verdict of one experiment run (``plan``: what the harness asked the probe to do)."""
    base = {"experiment": experiment.id, "trace": str(result.trace_path), "trace_sha256": result.trace_sha256}

    def of(judge: Judge) -> dict[str, Any]:
        """What every verdict of ``judge`` on this run names: its clause, column and check, and the run."""
        return {"clause": judge.clause, "runtime": judge.column(runtime.version), "what": judge.what, **base}

    if result.outcome is not RunOutcome.OK or result.trace is None:
        line = result.describe_failure()
        return [
            Verdict(status=Status.ERROR, observed=line, expected="a normal run", **of(judge))
            for judge in experiment.judges
        ]
    evidence = Evidence(trace=result.trace, runtime=runtime, plan=plan)
    verdicts: list[Verdict] = []
    for judge in experiment.judges:
        try:
            judgement = judge.judge(evidence)
        except Exception as exc:  # a judge bug is an error verdict naming the clause, never a crash
            why = f"judge failed: {type(exc).__name__}: {exc}"
            verdicts.append(Verdict(status=Status.ERROR, observed=why, expected="a judgement", **of(judge)))
            continue
        verdicts.append(
            Verdict(
                status=judgement.status,
                observed=judgement.observed,
                expected=judgement.expected,
                evidence=_excerpt(result, judgement.evidence),
                picture=[dict(p) for p in judgement.picture],
                disagreements=disagreements_of(judgement),
                **of(judge),
            )
        )
    return verdicts


#: per-run values in a judge's observed line: addresses (more than 8 hex digits) and thread or process ids
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{9,}\b")
_LONG_NUMBER = re.compile(r"(?<![\w.])\d{5,}(?![\w.])")


def disagreements_of(judgement: Judgement) -> list[str]:
    """The lines an expectation entry must pin: the judge's own, or (transition, for a judge that gives
    none for a divergence) its observed line, with addresses and long ids masked, as the single line."""
    if judgement.disagreements:
        return list(dict.fromkeys(judgement.disagreements))
    if judgement.status is Status.DIVERGES:
        return [_LONG_NUMBER.sub("N", _ADDRESS.sub("0xADDR", judgement.observed))]
    return []


def apply_expectations(
    verdicts: list[Verdict],
    runtime_versions: Sequence[str],
    expectations: ExpectationSet,
    clauses: Sequence[str] | None = None,
    *,
    stale: bool = True,
) -> list[Verdict]:
    """Measure every verdict against the entry covering its clause and runtime (setting its outcome), and
    add a stale verdict for each entry of a selected runtime whose clause produced no verdict (unless not
    ``stale``: an interrupted suite did not run every experiment)."""
    out = list(verdicts)
    for version in runtime_versions:
        entries = expectations.for_runtime(version)
        seen = set()
        for verdict in verdicts:
            if verdict.runtime != version:
                continue
            seen.add(verdict.clause)
            entry = entries.get(verdict.clause)
            verdict.expectation = entry.applied() if entry else None
            verdict.outcome, verdict.outcome_message = classify(verdict, entry)
        for clause_id, entry in entries.items():
            if not stale or clause_id in seen or (clauses and clause_id not in clauses):
                continue
            out.append(
                Verdict(
                    clause=clause_id,
                    runtime=version,
                    experiment="-",
                    status=Status.NOT_APPLICABLE,
                    observed="no live experiment produced a verdict",
                    expected="/".join(s.value for s in entry.status),
                    expectation=entry.applied(),
                    outcome=VerdictOutcome.STALE_EXPECTATION,
                    outcome_message=f"{clause_id}[{version}]: the expectation entry {entry.source} names a"
                    " clause that no experiment checks on this runtime",
                )
            )
    out.sort(key=lambda v: (v.clause, v.runtime))
    return out


#: the layers a suite run judges by default: the live runs, their captures replayed by the emulator, and the
#: hook checker's experiments
LAYERS: tuple[str, ...] = ("live", "emu", "hook")


def select_experiments(
    clauses: Sequence[str] | None,
    experiments: Sequence[LiveExperiment] | None = None,
    layers: Sequence[str] = LAYERS,
    hook_experiments: Sequence[HookExperiment] | None = None,
) -> tuple[list[LiveExperiment], list[HookExperiment]]:
    """The live and hook experiments to run, each with only the judges of ``layers`` and ``clauses``."""
    lives = list(experiments) if experiments is not None else all_experiments()
    lives = [dataclasses.replace(e, judges=tuple(j for j in e.judges if j.layer in layers)) for e in lives]
    lives = [e for e in lives if e.judges]
    hooks: list[HookExperiment] = []
    if "hook" in layers:
        hooks = [e for e in (hook_experiments if hook_experiments is not None else registered_hooks())
                 if e.judges]  # fmt: skip
    if not clauses:
        return lives, hooks
    known = {j.clause for e in lives for j in e.judges} | {j.clause for e in hooks for j in e.judges}
    unknown = [c for c in clauses if c not in known]
    if unknown:
        raise InputError(
            f"--clause {', '.join(unknown)}: no experiment of the suite checks it (suite clauses: "
            f"{len(known)}; see 'profharness clauses --layer live', --layer emu and --layer hook)"
        )
    chosen: list[LiveExperiment] = []
    for experiment in lives:
        judges = tuple(j for j in experiment.judges if j.clause in clauses)
        if judges:
            chosen.append(dataclasses.replace(experiment, judges=judges))
    chosen_hooks: list[HookExperiment] = []
    for hook in hooks:
        hook_judges = tuple(j for j in hook.judges if j.clause in clauses)
        if hook_judges:
            chosen_hooks.append(dataclasses.replace(hook, judges=hook_judges))
    return chosen, chosen_hooks


def judge_hook_experiment(experiment: HookExperiment) -> list[Verdict]:
    """Every verdict of one hook experiment (its column); a checker or build failure is an ERROR verdict per
    clause, never a missing row. The evidence is the object the checker ran: its path and sha256 stand
    where a trace would."""
    base: dict[str, Any] = {"runtime": experiment.column, "experiment": experiment.id}
    try:
        library, report = experiment.run()
        base["trace"] = str(library)
        base["trace_sha256"] = hashlib.sha256(library.read_bytes()).hexdigest()
    except HarnessError as exc:
        return [Verdict(clause=j.clause, what=j.what, status=Status.ERROR, observed=exc.message,
                        expected="a judgement", **base) for j in experiment.judges]  # fmt: skip
    out = []
    for j in experiment.judges:
        judgement = j.judge(HookEvidence(report))
        out.append(Verdict(clause=j.clause, what=j.what, status=judgement.status, observed=judgement.observed,
                           expected=judgement.expected, disagreements=disagreements_of(judgement), **base))
    return out


#: progress(done, total, label): called once with done=0 before the runs start, then after each run
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
    layers: Sequence[str] = LAYERS,
) -> SuiteResult:
    """Run and judge the chosen experiments on the selected runtimes. ``native_dir`` and ``scenarios_root``
    let tests run the suite with a probe or scenarios built from a (deliberately broken) copy.

    A SIGINT/SIGTERM while :func:`conformance.core.interrupt.handling` is active stops it: the runs under
    way are killed, none starts, and the result holds the verdicts of the runs judged before, ``interrupted``
    set (no stale-expectation verdict: the experiments it did not run say nothing)."""
    started = time.monotonic()
    expectations = load_expectations(expectations_dir)  # a broken expectation file fails before any run
    selected = runtimes.select(runtime_spec, dotnet)
    chosen, hook_chosen = select_experiments(clauses, experiments, layers)
    verdicts: list[Verdict] = []
    runs: list[dict[str, Any]] = []
    columns = [rt.version for rt in selected]
    for layer in sorted({j.layer for e in chosen for j in e.judges} - {"live"}):
        columns += [f"{layer} {rt.version}" for rt in selected]
    interrupted = False
    try:
        _run_and_judge(selected, chosen, hook_chosen, verdicts, runs, columns, progress=progress,
                       native_dir=native_dir, scenarios_root=scenarios_root)  # fmt: skip
    except interrupt.Interrupted:
        interrupted = True
    verdicts = apply_expectations(verdicts, columns, expectations, clauses, stale=not interrupted)
    return SuiteResult(
        runtimes=[rt.version for rt in selected],
        columns=columns,
        runtime_sources={rt.version: rt.source for rt in selected},
        verdicts=verdicts,
        seconds=round(time.monotonic() - started, 2),
        runs=runs,
        interrupted=interrupted,
    )


def _run_and_judge(
    selected: Sequence[Runtime],
    chosen: Sequence[LiveExperiment],
    hook_chosen: Sequence[HookExperiment],
    verdicts: list[Verdict],
    runs: list[dict[str, Any]],
    columns: list[str],
    *,
    progress: ProgressFn | None,
    native_dir: Path,
    scenarios_root: Path,
) -> None:
    """Build, run and judge; each run's verdicts are added to ``verdicts`` (and the run to ``runs``) whole,
    as it is judged, so an interruption leaves what was judged before it."""
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
            env=experiment.env,
        )
        return experiment, runtime, result

    if progress:
        progress(0, len(jobs), "starting")
    pool = ThreadPoolExecutor(max_workers=PARALLEL_RUNS)
    try:
        for experiment, runtime, result in pool.map(one, jobs):
            done += 1
            if progress:
                progress(done, len(jobs), f"{experiment.id} on {runtime.version}")
            judged = judge_run(experiment, runtime, result, plans[experiment.id])
            with interrupt.deferred():  # a run's verdicts are in the result whole or not at all
                verdicts.extend(judged)
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
    finally:
        # after a signal: the runs under way were killed (their threads end at once), none starts
        pool.shutdown(wait=True, cancel_futures=True)

    for hook in hook_chosen:
        judged = judge_hook_experiment(hook)
        with interrupt.deferred():
            verdicts.extend(judged)
            columns.append(hook.column)
