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

from pydantic import BaseModel, ConfigDict

from clr_model.clauses import Layer
from conformance.core import registry, runner, runtimes, scenarios
from conformance.core.errors import HarnessError
from conformance.core.findings import Finding
from conformance.core.runner import RunOutcome
from conformance.core.trace import read_trace
from conformance.validator import launch
from conformance.validator.hooks import HookChecks
from conformance.validator.recording import read_recording
from conformance.validator.rules import check_recording, hook_abi

#: The validator's own scenarios (conformance/validator/scenarios/NAME).
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIO_SET = ("validate-basic",)


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    runtime: str
    scenario: str
    outcome: str
    seconds: float
    trace: str
    records: int


class ValidationResult(BaseModel):
    """Every run and every finding of one validation."""

    profiler: str
    clsid: str
    runs: list[RunSummary]
    findings: list[Finding]
    #: what could not be judged (a hook the checker could not read), one line each
    notes: list[str] = []

    @property
    def clean(self) -> bool:
        return not self.findings


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
) -> ValidationResult:
    """Run the profiler behind the proxy and judge every run. Bad input raises ValidatorInputError."""
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
    found: list[Finding] = []
    notes: list[str] = []
    checks = HookChecks()
    for rt in selected:
        for scenario, dll, user in plan:
            result = launch.run_under_proxy(scenario, dll, rt, environment, hang_s=hang_s, user_app=user)
            runs.append(
                RunSummary(
                    runtime=rt.version,
                    scenario=scenario.name,
                    outcome=result.outcome.value,
                    seconds=result.seconds,
                    trace=str(result.trace_path),
                    records=result.record_count,
                )
            )
            if not result.trace_path.is_file():
                message = f"no recording: the proxy did not load ({result.stderr_tail.strip()})"
                found.append(Finding.of(result, "VAL-LOAD", message, []))
                continue
            trace = result.trace if result.trace is not None else read_trace(result.trace_path)
            recording = read_recording(trace)
            found.extend(check_recording(recording, result))
            from_hooks, unchecked = hook_abi(recording, result, checks)
            found.extend(from_hooks)
            notes.extend(n for n in unchecked if n not in notes)
            if result.outcome is RunOutcome.FAILED and not found:
                raise HarnessError(
                    f"{scenario.name} on {rt.version} exited with {result.exit_code} under the "
                    f"profiler; trace: {result.trace_path}"
                )
    return ValidationResult(profiler=str(target), clsid=guid, runs=runs, findings=found, notes=notes)


def findings(profiler: Path, clsid: str, **options: object) -> list[Finding]:
    """The findings of :func:`validate` (empty when the profiler keeps every rule)."""
    return validate(profiler, clsid, **options).findings  # type: ignore[arg-type]


# --- reports --------------------------------------------------------------------------------------------


def table(result: ValidationResult) -> str:
    lines = [f"{'clause':<22} {'runtime':<8} {'thread':<8} {'callback':<26} finding"]
    for f in result.findings:
        thread = str(f.thread) if f.thread is not None else "-"
        lines.append(
            f"{f.clause:<22} {f.runtime:<8} {thread:<8} {(f.callback or '-'):<26} {f.message} "
            f"(records {', '.join(map(str, f.records)) or '-'})"
        )
    lines.extend(f"note: {n}" for n in result.notes)
    runs = ", ".join(f"{r.scenario}@{r.runtime} {r.outcome} {r.seconds:.1f}s" for r in result.runs)
    lines.append(f"{len(result.findings)} finding(s); runs: {runs}")
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
    """One test case per rule and runtime; a finding fails its case."""
    suite = ET.Element("testsuite", name="profharness-validate", tests="0", failures="0")
    cases = failures = 0
    for rt in sorted({r.runtime for r in result.runs}):
        for clause in rule_ids():
            cases += 1
            case = ET.SubElement(suite, "testcase", classname=f"validate.{rt}", name=f"{clause}[{rt}]")
            mine = [f for f in result.findings if f.clause == clause and f.runtime == rt]
            if mine:
                failures += 1
                fail = ET.SubElement(case, "failure", message=mine[0].message)
                fail.text = "\n".join(f.line() for f in mine)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    return ET.tostring(suite, encoding="unicode") + "\n"


def to_html(result: ValidationResult) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(f.clause)}</td><td>{html.escape(f.title)}</td><td>{html.escape(f.runtime)}</td>"
        f"<td>{f.thread if f.thread is not None else '-'}</td><td>{html.escape(f.callback or '-')}</td>"
        f"<td>{html.escape(f.message)}</td><td>{html.escape(', '.join(map(str, f.records)))}</td>"
        f"<td>{html.escape(f.trace)}</td></tr>"
        for f in result.findings
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>profharness validate</title></head><body>"
        f"<h1>{html.escape(result.profiler)} {html.escape(result.clsid)}</h1>"
        f"<p>{len(result.findings)} finding(s) over {len(result.runs)} run(s)</p>"
        "<table border='1'><tr><th>clause</th><th>rule</th><th>runtime</th><th>thread</th><th>callback</th>"
        f"<th>finding</th><th>records</th><th>trace</th></tr>{rows}</table></body></html>\n"
    )
