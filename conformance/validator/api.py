"""``validate``: a third-party profiler behind the recording proxy, on the scenario set or the user's app,
on each selected runtime; the findings of every rule. For users' CI::

    from conformance.validator.api import findings
    assert not findings(Path("libmyprofiler.so"), "{...}"), "profiling contract broken"

or one pytest item per clause (:func:`conformance.validator.pytest_items.clause_tests`).

Reports: :func:`table` (one line per finding, then a ``note:`` line per thing that could not be judged),
:func:`to_json`, :func:`to_junit` (one test case per rule and runtime), :func:`to_html`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from clr_model.clauses import Layer
from conformance.core import registry, runner, runtimes, scenarios
from conformance.core.errors import HarnessError
from conformance.core.findings import Finding
from conformance.core.runner import RunOutcome
from conformance.core.trace import read_trace
from conformance.validator import launch
from conformance.validator.groups import Grouper
from conformance.validator.hooks import HookChecks
from conformance.validator.recording import read_recording
from conformance.validator.result import ClauseStatus, Group, RuleStatus, RunSummary, ValidationResult
from conformance.validator.rules import check_recording, hook_abi

#: The validator's own scenarios (conformance/validator/scenarios/NAME).
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIO_SET = ("validate-basic",)


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
) -> ValidationResult:
    """Run the profiler behind the proxy and judge every run. Bad input raises ValidatorInputError.
    ``hang_s``: how long a callback or a call outside any callback may stay open (the proxy's hang limit);
    ``timeout_s``: how long each run may take (the harness's watchdog)."""
    target = launch.check_profiler(profiler)
    guid = launch.parse_clsid(clsid)
    companions = launch.check_preloads(preload)
    environment = launch.proxy_environment(target, guid, extra_env=env, preload=companions, hang_s=hang_s)
    selected = runtimes.select(runtime, dotnet)
    if app is not None:
        plan = [(launch.user_app_scenario(app), app.resolve(), True)]
    else:
        reference = runner.reference_runtime()
        plan = [
            (s, scenarios.compile_scenario(s, reference), False) for s in validator_scenarios(scenario_names)
        ]
    runs: list[RunSummary] = []
    grouper = Grouper()
    notes: list[str] = []
    checks = HookChecks()
    for rt in selected:
        for scenario, dll, user in plan:
            result = launch.run_under_proxy(
                scenario, dll, rt, environment, hang_s=hang_s, timeout_s=timeout_s, user_app=user
            )
            runs.append(
                RunSummary(
                    runtime=rt.version,
                    scenario=scenario.name,
                    outcome=result.outcome.value,
                    exit_code=result.exit_code,
                    signal=result.signal,
                    seconds=result.seconds,
                    trace=str(result.trace_path),
                    records=result.record_count,
                    judged=result.record_count,
                )
            )
            found: list[Finding] = []
            if not result.trace_path.is_file():
                message = f"no recording: the proxy did not load ({result.stderr_tail.strip()})"
                grouper.add(Finding.of(result, "VAL-LOAD", message, []))
                continue
            trace = result.trace if result.trace is not None else read_trace(result.trace_path)
            recording = read_recording(trace)
            found.extend(check_recording(recording, result))
            from_hooks, unchecked = hook_abi(recording, result, checks)
            found.extend(from_hooks)
            grouper.extend(found)
            notes.extend(n for n in unchecked if n not in notes)
            if result.outcome is RunOutcome.FAILED and not found:
                raise HarnessError(
                    f"{scenario.name} on {rt.version} exited with {result.exit_code} under the "
                    f"profiler; trace: {result.trace_path}"
                )
    groups = grouper.groups()
    return ValidationResult(profiler=str(target), clsid=guid, runs=runs, groups=groups,
                            rules=rule_statuses(runs, groups), notes=notes)  # fmt: skip


def rule_statuses(runs: Sequence[RunSummary], groups: Sequence[Group]) -> list[RuleStatus]:
    """Each clause the validation judges, on each runtime: failed, noted or passed."""
    out = []
    for runtime in dict.fromkeys(r.runtime for r in runs):
        for clause in rule_ids():
            mine = [g for g in groups if g.clause == clause and runtime in g.runtimes]
            if any(not g.note for g in mine):
                status = ClauseStatus.FAILED
            elif mine:
                status = ClauseStatus.NOTED
            else:
                status = ClauseStatus.PASSED
            out.append(RuleStatus(clause=clause, runtime=runtime, status=status))
    return out


def findings(profiler: Path, clsid: str, **options: object) -> list[Group]:
    """The finding groups of :func:`validate` (empty when the profiler keeps every rule; notes aside)."""
    return validate(profiler, clsid, **options).findings  # type: ignore[arg-type]


# --- reports --------------------------------------------------------------------------------------------


def table(result: ValidationResult) -> str:
    """One line per group (clause, runtimes, count, where in the profiler, the first message), then a
    ``note:`` line per thing that could not be judged."""
    lines = [f"{'clause':<22} {'runtimes':<16} {'count':>6}  finding"]
    for g in result.groups:
        where = f" at {g.site.text()}" if g.site else ""
        kind = "note " if g.note else ""
        runtimes = ",".join(g.runtimes)
        lines.append(f"{g.clause:<22} {runtimes:<16} {g.count:>6}  {kind}{g.first.message}{where}")
    lines.extend(f"note: {n}" for n in result.notes)
    runs = ", ".join(f"{r.scenario}@{r.runtime} {r.outcome} {r.seconds:.1f}s" for r in result.runs)
    total = sum(g.count for g in result.findings)
    lines.append(f"{total} finding(s) in {len(result.findings)} group(s); runs: {runs}")
    return "\n".join(lines)


def to_json(result: ValidationResult) -> str:
    return json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


#: the layers whose rules a validation applies: the rules over the recording, and the hook checker's rules on
#: the hooks the profiler registered
VALIDATE_LAYERS = (Layer.VALIDATOR, Layer.HOOK)


def rule_ids() -> list[str]:
    """Every clause a validation judges (the registry's validator and hook rules), catalog clauses first."""
    import emu.hookcheck.rules  # noqa: F401  (registers the hook checker's rules)

    found = {r.clause for layer in VALIDATE_LAYERS for r in registry.rules(layer)}
    return sorted(found, key=lambda c: (c.startswith("VAL-"), c))


def to_junit(result: ValidationResult) -> str:
    """One test case per clause and runtime; a finding fails its case."""
    suite = ET.Element("testsuite", name="profharness-validate", tests="0", failures="0")
    cases = failures = 0
    for status in result.rules:
        cases += 1
        rt = status.runtime
        case = ET.SubElement(suite, "testcase", classname=f"validate.{rt}", name=f"{status.clause}[{rt}]")
        mine = [g for g in result.findings if g.clause == status.clause and rt in g.runtimes]
        if mine:
            failures += 1
            fail = ET.SubElement(case, "failure", message=mine[0].first.message)
            fail.text = "\n".join(f"{g.clause} x{g.count}: {g.first.message}" for g in mine)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    return ET.tostring(suite, encoding="unicode") + "\n"


def to_html(result: ValidationResult) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(g.clause)}</td><td>{html.escape(g.title)}</td>"
        f"<td>{html.escape(', '.join(g.runtimes))}</td><td>{g.count}</td>"
        f"<td>{html.escape(g.site.text() if g.site else '-')}</td>"
        f"<td>{html.escape(g.first.message)}</td></tr>"
        for g in result.groups
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>profharness validate</title></head><body>"
        f"<h1>{html.escape(result.profiler)} {html.escape(result.clsid)}</h1>"
        f"<p>{len(result.findings)} finding group(s) over {len(result.runs)} run(s)</p>"
        "<table border='1'><tr><th>clause</th><th>rule</th><th>runtimes</th><th>count</th><th>where</th>"
        f"<th>finding</th></tr>{rows}</table></body></html>\n"
    )
