"""The conformance suite on both bundled runtimes: the main job, as users and CI run it.

- ``profharness_suite`` collects every live clause x runtime as its own test (``DSS-05[8.0.4]``);
- the CLI run writes JSON, JUnit and HTML, each checked (schema, headless Chromium);
- changing one expectation (an entry, one of its disagreement lines), or one model rule, makes the suite fail
  with a message naming the clause.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

from conformance.core.paths import EXPECTATIONS_DIR
from conformance.core.runtimes import Runtime
from conformance.suite import report
from conformance.suite.expectations import load_expectations
from conformance.suite.orchestrate import run_suite
from conformance.suite.pytest_plugin import ProfharnessSuite
from conformance.suite.verdicts import Status, VerdictOutcome
from tests.conformance import browser

HERE = Path(__file__).parent
pytestmark = pytest.mark.live

#: every live clause on every bundled runtime, one test each
profharness_suite = ProfharnessSuite()


def profharness(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "conformance", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory, runtimes: list[Runtime]) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("suite")
    done = profharness(
        "conformance",
        "--json",
        str(out / "r.json"),
        "--junit",
        str(out / "r.xml"),
        "--html",
        str(out / "r.html"),
    )
    return {"proc": done, "dir": out, "json": json.loads((out / "r.json").read_text())}


def test_suite_exits_0_with_30_plus_live_clauses_on_both_runtimes(cli_run: dict[str, Any]) -> None:
    proc, data = cli_run["proc"], cli_run["json"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert data["ok"] is True and sorted(data["runtimes"]) == ["3.1.23", "8.0.4"]
    assert len(data["clauses_with_live_verdict"]) >= 30
    for runtime in data["runtimes"]:
        judged = {v["clause"] for v in data["verdicts"] if v["runtime"] == runtime and v["status"] != "error"}
        assert len(judged) >= 30, runtime
    assert "unexpected" in proc.stdout and "clause" in proc.stdout.splitlines()[0]


def test_every_verdict_names_the_trace_it_came_from(cli_run: dict[str, Any]) -> None:
    for verdict in cli_run["json"]["verdicts"]:
        trace = Path(verdict["trace"])
        assert trace.is_file(), verdict["clause"]
        assert hashlib.sha256(trace.read_bytes()).hexdigest() == verdict["trace_sha256"]


def test_every_divergence_is_explained_by_an_expectation(cli_run: dict[str, Any]) -> None:
    for verdict in cli_run["json"]["verdicts"]:
        if verdict["status"] == Status.DIVERGES:
            assert verdict["expectation"] and len(verdict["expectation"]["why"]) > 20, verdict["clause"]
            assert verdict["outcome"] == VerdictOutcome.EXPECTED_DIVERGENCE


def test_the_json_report_stores_each_evidence_record_once(cli_run: dict[str, Any]) -> None:
    data = cli_run["json"]
    assert data["report_format"] == report.REPORT_FORMAT
    jsonschema.validate(data, report.json_schema(), cls=jsonschema.Draft202012Validator)
    result = report.read_json(cli_run["dir"] / "r.json")  # every reference resolves
    shown = {report.evidence_key(r): r for v in result.verdicts for r in v.evidence}
    assert shown == data["evidence_records"]  # each record a verdict shows, once; none that no verdict shows
    assert sum(len(v.evidence) for v in result.verdicts) > len(shown)  # records shared by several verdicts


def test_MR2_verdicts_read_back_from_the_json_report_unchanged(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    """The MovedReferences2 judges of one run show the same large records: stored once, the verdicts read
    back from the report are the ones the suite judged."""
    result = run_suite("all", clauses=["MR2-10", "MR2-16", "MR2-17"], layers=("live",))
    assert {v.runtime for v in result.verdicts} == {"3.1.23", "8.0.4"}
    assert all(v.evidence for v in result.verdicts if v.experiment == "gc-moves")
    report.write_json(result, tmp_path / "r.json")
    assert report.read_json(tmp_path / "r.json") == result
    inline = len(json.dumps(json.loads(result.model_dump_json()), indent=2))
    assert (tmp_path / "r.json").stat().st_size < inline / 2


def test_junit_report_passes_the_schema(cli_run: dict[str, Any]) -> None:
    xmlschema.XMLSchema(HERE / "data" / "junit.xsd").validate(cli_run["dir"] / "r.xml")


def test_html_report_renders_in_chromium_without_console_errors(cli_run: dict[str, Any]) -> None:
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package `chromium`; ./dev setup installs it)")
    with browser.Chromium(timeout_s=20.0) as chromium:
        seen = chromium.render(
            cli_run["dir"] / "r.html",
            evaluate={"rows": "document.querySelectorAll('table.matrix tr').length"},
        )
    assert seen.errors == []
    assert seen.screenshot.is_file() and seen.screenshot.stat().st_size > 5_000
    assert seen.values["rows"] == len(cli_run["json"]["clauses"]) + 1


def _copy_expectations(tmp_path: Path) -> Path:
    target = tmp_path / "expectations"
    shutil.copytree(EXPECTATIONS_DIR, target)
    return target


def _drop_table(path: Path, clause: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == f"[{clause}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    path.write_text("".join(lines[:start] + lines[end:]))


def test_removing_one_expectation_fails_naming_the_clause(tmp_path: Path, runtimes: list[Runtime]) -> None:
    expectations = _copy_expectations(tmp_path)
    entry = load_expectations(expectations).for_runtime("8.0.4")["DSS-02"]
    _drop_table(entry.file, "DSS-02")
    done = profharness(
        "conformance", "--runtime", "8.0", "--clause", "DSS-02", "--expectations", str(expectations)
    )
    assert done.returncode == 1
    assert "DSS-02[8.0.4]: diverges and no expectation explains it" in done.stderr


def test_an_expected_divergence_that_no_longer_occurs_fails(tmp_path: Path, runtimes: list[Runtime]) -> None:
    expectations = _copy_expectations(tmp_path)
    with (expectations / "3.1.23.toml").open("a") as handle:
        handle.write(
            '\n[DSS-16]\nruntimes = ["3.1.23"]\nstatus = "diverges"\ndisagreements = ["frame 1 is Main"]\n'
            'why = "A wrong expectation, written by this test."\n'
        )
    done = profharness(
        "conformance", "--runtime", "3.1", "--clause", "DSS-16", "--expectations", str(expectations)
    )
    assert done.returncode == 1
    assert "DSS-16[3.1.23]: the expectation entry 3.1.23.toml:" in done.stderr
    assert "expects diverges, which no longer occurs" in done.stderr


def test_finding3_a_changed_disagreement_line_fails_naming_the_new_and_the_vanished_line(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    """Pin DSS-02 on 8.0 with a line the runtime does not give: the run's real line is new (unexpected)."""
    expectations = _copy_expectations(tmp_path)
    entry = load_expectations(expectations).for_runtime("8.0.4")["DSS-02"]
    (real,) = entry.disagreements[:1]
    text = entry.file.read_text()
    entry.file.write_text(text.replace(json.dumps(real), json.dumps("a line this runtime never gives"), 1))
    done = profharness(
        "conformance", "--runtime", "8.0", "--clause", "DSS-02", "--expectations", str(expectations)
    )
    assert done.returncode == 1, done.stderr
    assert (
        f"DSS-02[8.0.4]: new disagreement(s) not listed in the expectation entry {entry.source}"
        in done.stderr
    )
    assert real in done.stderr


def test_changing_one_model_rule_fails_naming_the_clause(
    monkeypatch: pytest.MonkeyPatch, runtimes: list[Runtime]
) -> None:
    """Make the model predict main-first order: the live walks (leaf first) now contradict it."""
    from clr_model import stacksnapshot

    original = stacksnapshot._reports

    def main_first(frames: Sequence[Any], start: int) -> list[Any]:
        return list(reversed(original(frames, start)))

    monkeypatch.setattr(stacksnapshot, "_reports", main_first)
    result = run_suite("8.0", clauses=["DSS-16"], layers=("live",))
    (verdict,) = result.verdicts
    assert verdict.status is Status.DIVERGES and verdict.outcome is VerdictOutcome.UNEXPECTED
    assert verdict.outcome_message.startswith("DSS-16[8.0.4]: diverges")
    assert not result.ok


def test_DSS_03_07_08_16_and_FE2_06_to_09_fill_the_emu_columns(cli_run: dict[str, Any]) -> None:
    """Issue 8 item 5 and issue 9 item 4: the emu layer's clauses fill a column per runtime's captures and
    one for the x86 reference hook; each verdict conforms (no expectation can excuse an emu column)."""
    data = cli_run["json"]
    assert data["columns"] == [*data["runtimes"], *(f"emu {r}" for r in data["runtimes"]), "emu x86 hooks"]
    by_column: dict[str, set[str]] = {}
    for v in data["verdicts"]:
        if v["runtime"].startswith("emu "):
            by_column.setdefault(v["runtime"], set()).add(v["clause"])
            assert v["status"] == Status.CONFORMS, (v["runtime"], v["clause"], v["observed"])
    for runtime in data["runtimes"]:
        assert by_column[f"emu {runtime}"] == {"DSS-03", "DSS-07", "DSS-08", "DSS-16"}
    assert by_column["emu x86 hooks"] == {"FE2-06", "FE2-07", "FE2-08", "FE2-09"}


def test_DSS_03_emu_a_main_first_model_fails_the_emu_column(
    monkeypatch: pytest.MonkeyPatch, runtimes: list[Runtime]
) -> None:
    """The emu judges compare live walks with the model's prediction for the replayed stack: a model that
    predicts main-first order makes DSS-03 of the emu column unexpected, naming the place."""
    from clr_model import stacksnapshot

    original = stacksnapshot._reports

    def main_first(frames: Sequence[Any], start: int) -> list[Any]:
        return list(reversed(original(frames, start)))

    monkeypatch.setattr(stacksnapshot, "_reports", main_first)
    result = run_suite("8.0", clauses=["DSS-03"], layers=("emu",))
    (verdict,) = result.verdicts
    assert verdict.runtime == "emu 8.0.4"
    assert verdict.status is Status.DIVERGES and verdict.outcome is VerdictOutcome.UNEXPECTED
    assert any("the live walk's callbacks differ from the model's" in line for line in verdict.disagreements)
    assert not result.ok
