"""The validation reports (issue 19, item 7): terminal groups and ``--verbose``, JSON and its schema, JUnit
(one suite per runtime, skipped rules with their reason; parsed and checked against the JUnit XSD), HTML
structure; the report paths checked before anything runs; a report that fails at the end."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

from conformance.cli import main as cli_main
from conformance.cli import validate as validate_cli
from conformance.core.symbols import Site
from conformance.validator import api, report
from conformance.validator.result import (
    OCCURRENCES_KEPT,
    ClauseStatus,
    Group,
    Occurrence,
    RunSummary,
    ValidationResult,
)
from tests.conformance.validator.fixtures import FIXTURE_CLSID

JUNIT_XSD = Path(__file__).resolve().parents[1] / "suite" / "data" / "junit.xsd"
SITE = Site(module="/opt/p/libtracker.so", offset=0x1A2B, function="Tracker::Remap(unsigned long)",
            file="/src/tracker.cpp", line=118)  # fmt: skip


STALE = "GetClassFromObject(0x7f0012345678): stale ID"


def _occurrence(runtime: str, i: int, message: str = STALE) -> Occurrence:
    return Occurrence(runtime=runtime, scenario="validate-basic", message=f"{message} #{i}", thread=4242,
                      callback="GarbageCollectionFinished", records=[100 + i, 101 + i],
                      trace=f"/runs/{runtime}/trace.jsonl")  # fmt: skip


def faulty() -> ValidationResult:
    """3.1 ran whole with a fault made 30,000 times at one site and a note; 8.0 crashed after 10 records."""
    runs = [
        RunSummary(runtime="3.1.23", scenario="validate-basic", outcome="ok", exit_code=0, seconds=1.9,
                   trace="/runs/3.1.23/trace.jsonl", records=300_000, judged=300_000),
        RunSummary(runtime="8.0.4", scenario="validate-basic", outcome="crashed", signal="SIGSEGV",
                   seconds=0.4, trace="/runs/8.0.4/trace.jsonl", records=10, judged=10),
    ]  # fmt: skip
    kept = [_occurrence("3.1.23", i) for i in range(OCCURRENCES_KEPT)]
    stale = Group(clause="MR2-17", title="IDs from before a GC are stale after it", quote="After the "
                  "garbage collection completes, the old IDs are invalid.", document="MovedReferences2.md",
                  fix="remap every ID through MovedReferences2 before using it", site=SITE, count=30_000,
                  runtimes=["3.1.23"], first=kept[0], last=_occurrence("3.1.23", 29_999), occurrences=kept)
    crash = _occurrence("8.0.4", 0, "SIGSEGV in GarbageCollectionStarted <script>alert(1)</script>")
    crashed = Group(clause="VAL-CRASH", title="the profiler crashed the process", reason="A profiler runs "
                    "inside the application: a crash it causes takes the application down.", count=1,
                    runtimes=["8.0.4"], first=crash, last=crash, occurrences=[crash])
    thread = _occurrence("3.1.23", 0, "thread 77 (start routine flush_loop) alive at Shutdown")
    note = Group(clause="VAL-THREAD-AT-SHUTDOWN", title="a profiler thread alive at Shutdown", note=True,
                 count=1, runtimes=["3.1.23"], first=thread, last=thread, occurrences=[thread])
    groups = [stale, crashed, note]
    # 3.1 showed every rule what it judges; the 8.0 run crashed before any rule but VAL-CRASH saw its own
    exercised = {"3.1.23": set(api.rule_ids()), "8.0.4": {"VAL-CRASH"}}
    return ValidationResult(profiler="/opt/p/libtracker.so", clsid=FIXTURE_CLSID, runs=runs, groups=groups,
                            rules=api.rule_statuses(runs, groups, exercised),
                            notes=["hook OnEnter: no symbol to read"], judge_seconds=0.8)  # fmt: skip


def clean() -> ValidationResult:
    runs = [RunSummary(runtime=rt, scenario="validate-basic", outcome="ok", exit_code=0, seconds=0.2,
                       trace=f"/runs/{rt}/trace.jsonl", records=35, judged=35) for rt in ("3.1.23", "8.0.4")]
    exercised = {r.runtime: set(api.rule_ids()) for r in runs}
    return ValidationResult(profiler="/opt/p/libgood.so", clsid=FIXTURE_CLSID, runs=runs,
                            rules=api.rule_statuses(runs, [], exercised))  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# statuses


def test_a_crashed_run_passes_nothing_and_an_unreached_runtime_is_skipped() -> None:
    result = faulty()
    status = {(s.clause, s.runtime): s for s in result.rules}
    assert status[("MR2-17", "3.1.23")].status is ClauseStatus.FAILED
    assert status[("VAL-THREAD-AT-SHUTDOWN", "3.1.23")].status is ClauseStatus.NOTED
    assert status[("BUF-04", "3.1.23")].status is ClauseStatus.PASSED
    assert status[("VAL-CRASH", "8.0.4")].status is ClauseStatus.FAILED
    skipped = status[("BUF-04", "8.0.4")]
    assert skipped.status is ClauseStatus.SKIPPED
    assert skipped.reason == ("no run on 8.0.4 showed what BUF-04 judges (validate-basic crashed after 10 "
                              "record(s))")  # fmt: skip
    never = api.rule_statuses(result.runs[:1], [], {"3.1.23": set()}, runtimes=["3.1.23", "8.0.4"])
    assert {s.reason for s in never if s.runtime == "8.0.4"} == {
        "the validation was interrupted before a run on 8.0.4"
    }
    assert {s.status for s in never} == {ClauseStatus.SKIPPED}


# --------------------------------------------------------------------------------------------------------
# terminal


def test_terminal_one_line_per_group_notes_after_findings_then_runs_and_summary() -> None:
    lines = report.render_text(faulty()).splitlines()
    assert lines[0].split() == ["clause", "title", "runtimes", "count", "site:", "first", "message"]
    fail, crash, note = lines[1:4]
    assert fail.startswith("FAIL  MR2-17")
    assert " 30000  Tracker::Remap(unsigned long) (/src/tracker.cpp:118): " in fail
    assert "GetClassFromObject(0x7f0012345678): stale ID #0" in fail and "3.1.23" in fail
    assert crash.startswith("FAIL  VAL-CRASH") and "(site unknown): SIGSEGV" in crash
    assert note.startswith("note  VAL-THREAD-AT-SHUTDOWN") and "flush_loop" in note
    assert lines[4] == "note: hook OnEnter: no symbol to read"
    assert lines[5] == ""
    assert lines[6].split() == ["runtime", "scenario", "outcome", "exit", "seconds", "records"]
    assert lines[7].split() == ["3.1.23", "validate-basic", "ok", "0", "1.9", "300000"]
    assert lines[8].split() == ["8.0.4", "validate-basic", "crashed", "SIGSEGV", "0.4", "10"]
    assert lines[9].startswith("2 finding group(s) (30001 occurrence(s)), 1 note(s) on 2 run(s); clauses: ")
    assert "clauses: 2 failed, 1 noted, " in lines[9]
    assert len(lines) == 10, "a fault made 30,000 times is one line"


def test_terminal_verbose_adds_the_sentence_the_fix_and_the_kept_occurrences() -> None:
    text = report.render_text(faulty(), verbose=True)
    assert "documented: \u201cAfter the garbage collection completes, the old IDs are invalid.\u201d" in text
    assert "(MovedReferences2.md)" in text and "fix: remap every ID through MovedReferences2" in text
    assert "occurrences (the first 20 of 30000, and the last):" in text
    rows = [line for line in text.splitlines() if "stale ID #" in line and line.startswith("      ")]
    assert len(rows) == OCCURRENCES_KEPT + 1
    assert rows[0].split()[:8] == ["3.1.23", "validate-basic", "thread", "4242", "GarbageCollectionFinished",
                                   "records", "100,101", "GetClassFromObject(0x7f0012345678):"]  # fmt: skip
    assert "#29999" in rows[-1]
    assert "why: A profiler runs inside the application" in text
    assert "skipped: BUF-04 on 8.0.4: no run on 8.0.4 showed what BUF-04 judges (validate-basic" in text


def test_terminal_of_a_clean_and_an_interrupted_validation() -> None:
    lines = report.render_text(clean()).splitlines()
    assert lines[0] == "no finding"
    assert lines[-1].startswith("0 finding group(s) (0 occurrence(s)), 0 note(s)")
    nothing = ValidationResult(profiler="/p.so", clsid=FIXTURE_CLSID, runs=[], interrupted=True)
    text = report.render_text(nothing)
    assert "no run was judged" in text and text.endswith("; interrupted: only what is above was judged")


# --------------------------------------------------------------------------------------------------------
# JSON


def test_json_is_the_result_and_validates_against_the_schema_it_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = faulty()
    document = json.loads(report.to_json(result))
    assert cli_main(["schema", "validate"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == report.json_schema() and schema["title"] == "profharness validate result"
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    assert ValidationResult.model_validate(document) == result
    broken = {**document, "runs": [{**document["runs"][0], "records": "many"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft202012Validator)


# --------------------------------------------------------------------------------------------------------
# JUnit


def _junit(result: ValidationResult, tmp_path: Path) -> ET.Element:
    path = tmp_path / "r.xml"
    path.write_bytes(report.to_junit(result))
    xmlschema.XMLSchema(JUNIT_XSD).validate(path)
    return ET.parse(path).getroot()


def test_junit_one_suite_per_runtime_with_its_time_and_a_case_per_clause(tmp_path: Path) -> None:
    result = faulty()
    root = _junit(result, tmp_path)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["profharness validate[3.1.23]", "profharness validate[8.0.4]"]
    n = len(api.rule_ids())
    old, new = suites
    assert (old.get("tests"), old.get("failures"), old.get("skipped"), old.get("time")) == (
        str(n), "1", "0", "1.900")  # fmt: skip
    assert (new.get("tests"), new.get("failures"), new.get("skipped"), new.get("time")) == (
        str(n), "1", str(n - 1), "0.400")  # fmt: skip
    assert root.get("tests") == str(2 * n) and root.get("failures") == "2"
    cases = {c.get("name"): c for s in suites for c in s.findall("testcase")}
    failure = cases["MR2-17[3.1.23]"].find("failure")
    assert failure is not None and failure.get("type") == "MR2-17"
    assert failure.get("message") == ("MR2-17 (IDs from before a GC are stale after it): 30000 occurrence(s) "
                                      "on 3.1.23 at 1 site(s)")  # fmt: skip
    assert failure.text is not None and "Tracker::Remap(unsigned long) (/src/tracker.cpp:118)" in failure.text
    skipped = cases["BUF-04[8.0.4]"].find("skipped")
    assert skipped is not None
    assert "(validate-basic crashed after 10 record(s))" in (skipped.get("message") or "")
    assert cases["BUF-04[3.1.23]"].find("skipped") is None and cases["BUF-04[3.1.23]"].find("failure") is None
    noted = cases["VAL-THREAD-AT-SHUTDOWN[3.1.23]"]
    out = noted.find("system-out")
    assert noted.find("failure") is None and out is not None and "note: x1 on 3.1.23" in (out.text or "")
    runs = old.find("system-out")
    assert runs is not None and "trace /runs/3.1.23/trace.jsonl" in (runs.text or "")
    assert (runs.text or "").count("trace.jsonl") == 1, "each run's trace once, in its suite"


def test_junit_of_an_interrupted_validation_skips_the_runtime_it_never_ran(tmp_path: Path) -> None:
    first = faulty().runs[0]
    result = ValidationResult(profiler="/p.so", clsid=FIXTURE_CLSID, runs=[first], interrupted=True,
                              rules=api.rule_statuses([first], [], {"3.1.23": set(api.rule_ids())},
                                                      runtimes=["3.1.23", "8.0.4"]))  # fmt: skip
    never = _junit(result, tmp_path).findall("testsuite")[1]
    assert never.get("skipped") == never.get("tests") and never.get("time") == "0.000"
    assert "interrupted" in (never.findtext("system-out") or "")


# --------------------------------------------------------------------------------------------------------
# HTML (structure; tests/conformance/validator/test_report_browser.py renders it)


def test_html_has_the_runtime_summary_the_groups_and_escapes_what_it_shows() -> None:
    page = report.to_html(faulty())
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("/runs/3.1.23/trace.jsonl") == 1, "a run's trace once, in the runs table"
    assert page.index("MR2-17") < page.index("VAL-CRASH") < page.index("VAL-THREAD-AT-SHUTDOWN")
    assert page.count("<details>") == 3 and "30000 occurrence(s), the first 20 kept" in page
    assert "After the garbage collection completes, the old IDs are invalid." in page


# --------------------------------------------------------------------------------------------------------
# the command's report paths


def _no_validation(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(api, "validate", lambda *a, **k: calls.append(a) or faulty())
    return calls


@pytest.mark.parametrize(
    ("option", "make", "needle"),
    [
        ("--json", lambda d: d, "is a folder, not a file"),
        ("--junit", lambda d: d / "missing" / "r.xml", "does not exist"),
        ("--html", lambda d: d / "file.txt" / "r.html", "is not a folder"),
    ],
    ids=["a-folder", "a-missing-folder", "under-a-file"],
)
def test_a_bad_report_path_is_one_line_exit_2_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str,
    make: Any, needle: str,
) -> None:  # fmt: skip
    calls = _no_validation(monkeypatch)
    (tmp_path / "file.txt").write_text("x")
    argv = ["validate", "/no/such/lib.so", "--clsid", FIXTURE_CLSID, option, str(make(tmp_path))]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"profharness: error: {option} ") and needle in err and err.count("\n") == 1
    assert calls == []


def test_an_unwritable_report_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _no_validation(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    assert cli_main(["validate", "x.so", "--clsid", FIXTURE_CLSID, "--junit", str(locked / "r.xml")]) == 2
    assert f"--junit {locked / 'r.xml'}: the folder {locked} is not writable" in capsys.readouterr().err
    assert calls == []


def test_the_command_prints_the_groups_writes_every_report_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_validation(monkeypatch)
    out = {"--json": tmp_path / "r.json", "--junit": tmp_path / "r.xml", "--html": tmp_path / "r.html"}
    argv = ["validate", "x.so", "--clsid", FIXTURE_CLSID, "--verbose"]
    for option, path in out.items():
        argv += [option, str(path)]
    assert cli_main(argv) == 1
    printed = capsys.readouterr()
    assert printed.out == report.render_text(faulty(), verbose=True) + "\n" and printed.err == ""
    assert ValidationResult.model_validate_json(out["--json"].read_text()) == faulty()
    assert out["--junit"].read_bytes() == report.to_junit(faulty())
    assert out["--html"].read_text() == report.to_html(faulty())


def test_a_report_that_fails_at_the_end_keeps_the_result_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_validation(monkeypatch)

    def disk_full(result: ValidationResult) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(validate_cli.REPORTS, "--html", disk_full)
    argv = ["validate", "x.so", "--clsid", FIXTURE_CLSID, "--html", str(tmp_path / "r.html")]
    assert cli_main(argv) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"profharness: error: --html {tmp_path / 'r.html'}: could not write the report (No "
                      "space left on device)")  # fmt: skip
    kept = Path(err[1].split("the result is kept in ")[1])
    assert ValidationResult.model_validate_json(kept.read_text()) == faulty()
    kept.unlink()


def test_an_interrupted_validation_writes_what_it_judged_and_exits_with_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the command does with a result ``validate`` returned after SIGTERM (the live test sends one)."""
    import signal

    from conformance.core import interrupt

    partial = faulty().model_copy(update={"interrupted": True})
    monkeypatch.setattr(api, "validate", lambda *a, **k: partial)
    monkeypatch.setattr(interrupt, "requested", lambda: signal.SIGTERM)
    argv = ["validate", "x.so", "--clsid", FIXTURE_CLSID, "--json", str(tmp_path / "r.json")]
    assert cli_main(argv) == 143
    printed = capsys.readouterr()
    assert printed.err == (f"profharness: interrupted by SIGTERM: 2 run(s) judged before it, 2 finding "
                           f"group(s); written to --json {tmp_path / 'r.json'}\n")  # fmt: skip
    assert json.loads((tmp_path / "r.json").read_text())["interrupted"] is True
    assert printed.out.rstrip().endswith("interrupted: only what is above was judged")
