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

from collections.abc import Mapping, Sequence
from pathlib import Path

from clr_model.clauses import Layer
from conformance.core import interrupt, registry, runner, runtimes, scenarios
from conformance.core.findings import Finding
from conformance.core.symbols import Symbolizer
from conformance.validator import launch
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

#: The validator's own scenarios (conformance/validator/scenarios/NAME).
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIO_SET = ("validate-basic",)


def _outcome(outcome: runner.RunOutcome) -> str:
    """A run's outcome as the runs table shows it: a non-zero exit code is the app's own ("exited", the
    code beside it), never a failure of the profiler's (a crash is a signal or a fail-fast)."""
    return "exited" if outcome is runner.RunOutcome.FAILED else outcome.value


def validator_scenarios(names: Sequence[str] = SCENARIO_SET) -> list[scenarios.Scenario]:
    return [scenarios.load_scenario_dir(SCENARIOS_DIR / name) for name in names]


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
    scenario_names: Sequence[str] = SCENARIO_SET,
    timeout_s: float = launch.DEFAULT_TIMEOUT_S,
    inject_deadlock: bool = False,
) -> ValidationResult:
    """Run the profiler behind the proxy and judge every run. Bad input raises ValidatorInputError; a
    signal (see the module's docstring) returns what was judged before it, ``interrupted`` set.
    ``hang_s``: how long a callback or a call outside any callback may stay open (the proxy's hang limit);
    ``timeout_s``: how long each run may take (the harness's watchdog); ``inject_deadlock``: raise the
    profiler's signal once while the thread holds the allocator lock (ASYNC-07)."""
    runs: list[RunSummary] = []
    exercised: dict[str, set[str]] = {}
    judge_seconds = 0.0
    grouper = Grouper()
    notes: list[str] = []
    selected: list[runtimes.Runtime] = []
    target, guid = profiler, clsid
    interrupted = False
    try:
        target = launch.check_profiler(profiler)
        guid = launch.parse_clsid(clsid)
        companions = launch.check_preloads(preload)
        environment = launch.proxy_environment(target, guid, extra_env=env, preload=companions, hang_s=hang_s,
                                               inject_deadlock=inject_deadlock)  # fmt: skip
        selected = runtimes.select(runtime, dotnet)
        if app is not None:
            plan = [(launch.user_app_scenario(app), app.resolve(), True)]
        else:
            reference = runner.reference_runtime()
            plan = [(s, scenarios.compile_scenario(s, reference), False)
                    for s in validator_scenarios(scenario_names)]  # fmt: skip
        checks = HookChecks()
        symbolizer = Symbolizer()  # the profiler's symbols and lines, read once for every run
        for rt in selected:
            for scenario, dll, user in plan:
                result = launch.run_under_proxy(
                    scenario, dll, rt, environment, hang_s=hang_s, timeout_s=timeout_s, user_app=user
                )
                summary = RunSummary(
                    runtime=rt.version,
                    scenario=scenario.name,
                    outcome=_outcome(result.outcome),
                    exit_code=result.exit_code,
                    signal=result.signal,
                    seconds=result.seconds,
                    trace=str(result.trace_path),
                    records=result.record_count,
                    judged=result.record_count,
                )
                found = Grouper()  # this run's findings, grouped as they come (memory per group)
                seen: set[str] = set()
                unchecked: list[str] = []
                note: str | None = None
                seconds = 0.0
                if not result.trace_path.is_file():
                    message = f"no recording: the proxy did not load ({result.stderr_tail.strip()})"
                    found.add(Finding.of(result, "VAL-LOAD", message, []))
                    seen.add("VAL-LOAD")
                else:
                    judged = judge_run(result, found.add, profiler=target, symbolizer=symbolizer)
                    from_hooks, unchecked = hook_abi(judged.hooks, result, checks, judged.site_of)
                    found.extend(from_hooks)
                    if judged.hooks and not unchecked:
                        judged.exercised.update(r.clause for r in registry.rules(Layer.HOOK))
                    seen = judged.exercised
                    summary = summary.model_copy(update={"records": judged.records, "judged": judged.records})
                    seconds, note = judged.seconds, judged.note
                with interrupt.deferred():  # a run is in the result whole, with its findings, or not at all
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
    if not any(r.name.startswith("hookcheck:") for r in registry.rules(Layer.HOOK)):
        # once: importing it again (pytester drops the modules a test imported) would register twice
        import emu.hookcheck.rules  # noqa: F401  (registers the hook checker's rules)

    found = {r.clause for layer in VALIDATE_LAYERS for r in registry.rules(layer)}
    return sorted(found, key=lambda c: (c.startswith("VAL-"), c))
