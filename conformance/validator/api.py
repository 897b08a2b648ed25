"""``validate``: a third-party profiler behind the recording proxy, on the scenario set or the user's app,
on each selected runtime; the findings of every rule. For users' CI::

    from conformance.validator.api import findings
    assert not findings(Path("libmyprofiler.so"), "{...}"), "profiling contract broken"

or one pytest item per clause (:func:`conformance.validator.pytest_items.clause_tests`).

Reports: :mod:`conformance.validator.report` (terminal, JSON and its schema, JUnit, HTML); :func:`table`,
:func:`to_json`, :func:`to_junit` and :func:`to_html` here are its renderers.

A SIGINT/SIGTERM while :func:`conformance.core.interrupt.handling` is active (the ``profharness`` command)
ends the run in progress; :func:`validate` then returns what it judged before, ``interrupted`` set.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

from clr_model.clauses import Layer
from conformance.core import interrupt, registry, runner, runtimes, scenarios
from conformance.core.findings import Finding
from conformance.core.symbols import Symbolizer
from conformance.validator import launch, walkq
from conformance.validator import perturb as perturbation
from conformance.validator import workload as workloads
from conformance.validator.groups import Grouper
from conformance.validator.hooks import HookChecks
from conformance.validator.report import render_text as table
from conformance.validator.report import to_html, to_json, to_junit
from conformance.validator.result import ClauseStatus, Group, RuleStatus, RunSummary, ValidationResult
from conformance.validator.rules import hook_abi, judge_run

__all__ = [
    "findings",
    "rule_ids",
    "rule_statuses",
    "table",
    "to_html",
    "to_json",
    "to_junit",
    "validate",
    "validator_scenarios",
]

#: The workload a validation runs when it names none and gives no app: the short one (the command's default is
#: ``standard``: :data:`conformance.validator.workload.CLI_DEFAULT`).
DEFAULT_WORKLOAD = workloads.API_DEFAULT


def validator_scenarios(names: Sequence[str] = (DEFAULT_WORKLOAD,)) -> list[scenarios.Scenario]:
    """The scenarios of the workloads ``names``."""
    return [workloads.load_workload(name).scenario() for name in names]


#: one run's plan: its scenario, app, whether it is the user's, the files beside it, its variables and its
#: workload
_Planned = tuple[scenarios.Scenario, Path, bool, list[Path], dict[str, str], "workloads.Workload | None"]


def _plan(app: Path | None, workload: str | None, duration_s: float | None) -> list[_Planned]:
    """What each runtime runs: the user's app, or the workload (compiled, with its files and variables)."""
    if app is not None:
        if workload is not None:
            raise launch.ValidatorInputError(f"--app {app} and --workload {workload}: give one (an app "
                                             "replaces the workload)")  # fmt: skip
        if duration_s is not None:
            raise launch.ValidatorInputError(f"--duration applies to a workload, not to --app {app}")
        return [(launch.user_app_scenario(app), app.resolve(), True, [], {}, None)]
    chosen = workloads.load_workload(workload if workload is not None else DEFAULT_WORKLOAD)
    if duration_s is not None:
        workloads.check_duration(duration_s)
        if chosen.seconds is None:
            raise launch.ValidatorInputError(f"--duration: the workload {chosen.name} runs a fixed course")
    dll, companions = workloads.compile_workload(chosen, runner.reference_runtime())
    return [(chosen.scenario(), dll, False, companions, chosen.environment(duration_s), chosen)]


def validate(
    profiler: Path,
    clsid: str,
    *,
    runtime: str = "all",
    app: Path | None = None,
    env: Mapping[str, str] | None = None,
    preload: Sequence[Path] = (),
    hang_s: float = launch.DEFAULT_HANG_S,
    dotnet: Path | None = None,
    timeout_s: float = launch.DEFAULT_TIMEOUT_S,
    repeat: int = 1,
    perturb: int | None = None,
    compare: bool = False,
    workload: str | None = None,
    duration_s: float | None = None,
    attach: launch.AttachPlan | None = None,
    inject_deadlock: bool = False,
    walk_quality: bool = False,
) -> ValidationResult:
    """Run the profiler behind the proxy and judge every run. Bad input raises ValidatorInputError; a
    signal (see the module's docstring) returns what was judged before it, ``interrupted`` set.
    ``workload``: the workload to run (:mod:`conformance.validator.workload`; :data:`DEFAULT_WORKLOAD`, the
    short ``basic``, when neither it nor ``app`` is given); ``duration_s``: its duration (a workload that
    runs for a while); ``app``: the user's app instead (giving both is bad input).
    ``hang_s``: how long a callback or a call outside any callback may stay open (the proxy's hang limit);
    ``timeout_s``: how long each run may take (the harness's watchdog). ``repeat``: each run is made that
    many times; ``perturb``: a seed, run i (from 0) of each repetition perturbed by seed ``perturb + i``
    (:mod:`conformance.validator.perturb`); ``compare``: with ``perturb``, ``repeat`` unperturbed runs too.
    ``attach``: start each app without the profiler and attach it through the diagnostics IPC while it runs
    (a note per run says what the runtime answered and when). ``inject_deadlock``: raise the profiler's
    signal once while the thread holds the allocator lock (ASYNC-07). ``walk_quality``: the proxy captures
    each walk of a thread parked in the profiler's signal handler and each run says how the profiler's
    walks compare with the replay's truth, per place (:mod:`conformance.validator.walkq`)."""
    runs: list[RunSummary] = []
    exercised: dict[str, set[str]] = {}
    judge_seconds = 0.0
    grouper = Grouper()
    notes: list[str] = []
    selected: list[runtimes.Runtime] = []
    target, guid = profiler, clsid
    interrupted = False
    try:
        seeds = run_seeds(repeat, perturb, compare)
        target = launch.check_profiler(profiler)
        guid = launch.parse_clsid(clsid)
        companions = launch.check_preloads(preload)
        environment = launch.proxy_environment(target, guid, extra_env=env, preload=companions, hang_s=hang_s,
                                               inject_deadlock=inject_deadlock)  # fmt: skip
        if walk_quality:
            environment.update(walkq.ENVIRONMENT)
        plan = _plan(app, workload, duration_s)
        selected = runtimes.select(runtime, dotnet)
        checks = HookChecks()
        symbolizer = Symbolizer()  # the profiler's symbols and lines, read once for every run
        for rt in selected:
            for (scenario, dll, user, companions, app_env, chosen), seed in itertools.product(plan, seeds):
                run_env = launch.with_perturbation({**environment, **app_env}, seed)
                result = launch.run_under_proxy(
                    scenario, dll, rt, run_env, hang_s=hang_s, timeout_s=timeout_s,
                    user_app=user, companions=companions, attach=attach,
                )
                summary = RunSummary.of(result, seed)
                found = Grouper()  # this run's findings, grouped as they come (memory per group)
                seen: set[str] = set()
                unchecked: list[str] = []
                note: str | None = None
                seconds = 0.0
                attached = attach_note(result, attach)
                if attached is not None:
                    notes.append(attached)
                if not result.trace_path.is_file():
                    message = f"no recording: the proxy did not load ({result.stderr_tail.strip()})"
                    if attached is not None:
                        message = f"no recording: the proxy was not attached ({attached})"
                    found.add(Finding.of(result, "VAL-LOAD", message, []))
                    seen.add("VAL-LOAD")
                else:
                    judged = judge_run(result, found.add, profiler=target, symbolizer=symbolizer,
                                       ground_truth=chosen.points() if chosen else ())
                    from_hooks, unchecked = hook_abi(judged.hooks, result, checks, judged.site_of)
                    found.extend(from_hooks)
                    if judged.hooks and not unchecked:
                        judged.exercised.update(r.clause for r in registry.rules(Layer.HOOK))
                    seen = judged.exercised
                    delays = perturbation.delays_of(judged.marks.get(perturbation.DELAYS_MARK))
                    counts = judged.counted.counts(chosen.not_applicable_on(rt.version) if chosen else None) \
                        if judged.counted else None
                    summary = summary.model_copy(update={"records": judged.records, "judged": judged.records,
                                                         "delays": delays, "counts": counts})
                    seconds, note = judged.seconds, judged.note
                    if walk_quality:
                        quality = walkq.measure(result.trace_path, rt.version)
                        summary = summary.model_copy(update={"walk_quality": quality})
                    if attached is not None:
                        notes[-1] = attach_timing(attached, result, judged.marks.get("proxy.attach"))
                with interrupt.deferred():  # a run is in the result whole, with its findings, or not at all
                    found.in_run(len(runs), seed)
                    runs.append(summary)
                    grouper.merge(found)
                    exercised.setdefault(rt.version, set()).update(seen)
                    judge_seconds += seconds
                    notes.extend(n for n in unchecked if n not in notes)
                    if note is not None:
                        notes.append(note)
    except interrupt.Interrupted:
        interrupted = True
    groups = grouper.groups()
    statuses = rule_statuses(runs, groups, exercised, runtimes=[rt.version for rt in selected])
    return ValidationResult(profiler=str(target), clsid=guid, runs=runs, groups=groups, rules=statuses,
                            notes=notes, interrupted=interrupted,
                            judge_seconds=round(judge_seconds, 3))  # fmt: skip


def run_seeds(repeat: int, perturb: int | None, compare: bool) -> list[int | None]:
    """The perturbation seed of each repetition of a run (None: unperturbed): ``repeat`` unperturbed runs;
    with ``perturb``, seeds ``perturb`` .. ``perturb + repeat - 1`` (after ``repeat`` unperturbed runs when
    ``compare``)."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise launch.ValidatorInputError(f"--repeat {repeat}: must be a whole number of runs, at least 1")
    if perturb is not None and not 0 <= perturb <= perturbation.MAX_SEED - (repeat - 1):
        raise launch.ValidatorInputError(
            f"--perturb {perturb}: a seed is a whole number from 0 to {perturbation.MAX_SEED - (repeat - 1)} "
            f"(run i uses seed {perturb}+i)"
        )
    if compare and perturb is None:
        raise launch.ValidatorInputError("--compare: compares perturbed runs with unperturbed ones; give "
                                         "--perturb SEED too")  # fmt: skip
    if perturb is None:
        return [None] * repeat
    return [*([None] * repeat if compare else []), *(perturb + i for i in range(repeat))]


def attach_note(result: runner.RunResult, attach: launch.AttachPlan | None) -> str | None:
    """One line for an attach run: what AttachProfiler answered (the runtime's HRESULT) and how long it
    took, or why no answer came."""
    if attach is None:
        return None
    done = launch.read_attach(result.run_dir) or {}
    where = f"attach on {result.runtime} ({result.scenario}, {attach.after_s:g} s after the start)"
    if "problem" in done:
        return f"{where}: {done['problem']}"
    if "answer" not in done:
        return f"{where}: no AttachProfiler answer (the run ended first: {result.outcome.value})"
    took = (int(done.get("answeredNs", 0)) - int(done.get("sentNs", 0))) / 1e6
    tries = done.get("tries")
    again = ""
    if isinstance(tries, int) and tries > 1:
        again = f" (sent {tries} times: the runtime was not running yet)"
    return f"{where}: AttachProfiler answered {done['answer']} in {took:.1f} ms{again}"


def attach_timing(line: str, result: runner.RunResult, mark: object) -> str:
    """The attach line with the time from the AttachProfiler command to ProfilerAttachComplete (the proxy's
    proxy.attach mark: both clocks are CLOCK_MONOTONIC)."""
    done = launch.read_attach(result.run_dir) or {}
    sent = done.get("sentNs")
    complete = mark.get("attachCompleteNs") if isinstance(mark, dict) else None
    if isinstance(sent, int) and isinstance(complete, int):
        return f"{line}; ProfilerAttachComplete {(complete - sent) / 1e6:.1f} ms after the command was sent"
    return line


def rule_statuses(
    runs: Sequence[RunSummary],
    groups: Sequence[Group],
    exercised: Mapping[str, set[str]],
    *,
    runtimes: Sequence[str] = (),
) -> list[RuleStatus]:
    """Each clause the validation judges, on each runtime (``runtimes``: those selected; by default those
    that ran): failed, noted, passed, or skipped (no run on that runtime showed what the rule judges, e.g. a
    run that crashed before it, or none ran because the validation was interrupted: it passes nothing)."""
    out = []
    for runtime in dict.fromkeys([*runtimes, *(r.runtime for r in runs)]):
        mine_runs = [r for r in runs if r.runtime == runtime]
        for clause in rule_ids():
            mine = [g for g in groups if g.clause == clause and runtime in g.runtimes]
            reason = ""
            if any(not g.note for g in mine):
                status = ClauseStatus.FAILED
            elif mine:
                status = ClauseStatus.NOTED
            elif clause in exercised.get(runtime, set()):
                status = ClauseStatus.PASSED
            else:
                status = ClauseStatus.SKIPPED
                if mine_runs:
                    ended = ", ".join(f"{r.scenario} {r.outcome} after {r.records} record(s)"
                                      for r in mine_runs)  # fmt: skip
                    reason = f"no run on {runtime} showed what {clause} judges ({ended})"
                else:
                    reason = f"the validation was interrupted before a run on {runtime}"
            out.append(RuleStatus(clause=clause, runtime=runtime, status=status, reason=reason))
    return out


def findings(profiler: Path, clsid: str, **options: object) -> list[Group]:
    """The finding groups of :func:`validate` (empty when the profiler keeps every rule; notes aside)."""
    return validate(profiler, clsid, **options).findings  # type: ignore[arg-type]


#: the layers whose rules a validation applies: the rules over the recording, and the hook checker's rules on
#: the hooks the profiler registered
VALIDATE_LAYERS = (Layer.VALIDATOR, Layer.HOOK)


def rule_ids() -> list[str]:
    """Every clause a validation judges (the registry's validator and hook rules), catalog clauses first."""
    registry.load_all(VALIDATE_LAYERS)  # the IL checker's and the hook checker's rules are imported lazily
    found = {r.clause for layer in VALIDATE_LAYERS for r in registry.rules(layer)}
    return sorted(found, key=lambda c: (c.startswith("VAL-"), c))
