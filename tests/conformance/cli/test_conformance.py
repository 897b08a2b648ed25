"""`profharness conformance`: output paths checked before any run, reports written atomically and each on its
own (finding 7 of issue 7), rich progress and matrix. ``run_suite`` is replaced: no runtime is needed."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conformance.cli import conformance as cmd
from conformance.cli import main
from conformance.core import fsio
from conformance.suite import report
from conformance.suite.verdicts import Status, SuiteResult, Verdict, VerdictOutcome


def result() -> SuiteResult:
    verdict = Verdict(
        clause="DSS-16",
        runtime="8.0.4",
        experiment="stack-walks",
        status=Status.CONFORMS,
        observed="leaf first",
        expected="leaf first",
        outcome=VerdictOutcome.AS_DOCUMENTED,
        outcome_message="DSS-16[8.0.4]: conforms",
    )
    return SuiteResult(
        runtimes=["8.0.4"], runtime_sources={"8.0.4": "bundled"}, verdicts=[verdict], seconds=0.5, runs=[]
    )


@pytest.fixture
def suite_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake_run_suite(*args: Any, **kwargs: Any) -> SuiteResult:
        calls.append(kwargs)
        progress = kwargs.get("progress")
        if progress:
            progress(0, 1, "starting")
            progress(1, 1, "stack-walks on 8.0.4")
        return result()

    monkeypatch.setattr(cmd, "run_suite", fake_run_suite)
    return calls


@pytest.mark.parametrize(
    ("option", "make", "needle"),
    [
        ("--json", lambda tmp: tmp / "no" / "such" / "dir" / "x.json", "does not exist"),
        ("--junit", lambda tmp: tmp, "is a folder"),
        ("--html", lambda tmp: tmp / "file.txt" / "r.html", "is not a folder"),
    ],
)
def test_finding7_a_bad_output_path_is_one_line_exit_2_before_any_run(
    tmp_path: Path,
    suite_calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    option: str,
    make: Any,
    needle: str,
) -> None:
    (tmp_path / "file.txt").write_text("x")
    good = tmp_path / "ok.json"
    argv = ["conformance", option, str(make(tmp_path))]
    if option != "--json":
        argv += ["--json", str(good)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"profharness: error: {option} ") and needle in err and err.count("\n") == 1
    assert suite_calls == [], "the suite must not start"
    assert not good.exists()


def test_finding7_the_no_such_dir_example_of_the_issue(
    suite_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conformance", "--json", "/no/such/dir/x.json"]) == 2
    assert "--json /no/such/dir/x.json: the folder /no/such/dir does not exist" in capsys.readouterr().err
    assert suite_calls == []


def test_finding7_an_unwritable_folder_is_refused(
    tmp_path: Path,
    suite_calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # root may write anywhere: the folder's permission answer is what the check must heed
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    assert main(["conformance", "--json", str(locked / "r.json")]) == 2
    assert f"--json {locked / 'r.json'}: the folder {locked} is not writable" in capsys.readouterr().err
    assert suite_calls == []


def test_two_reports_to_one_file_are_refused(
    tmp_path: Path, suite_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    same = str(tmp_path / "r")
    assert main(["conformance", "--json", same, "--html", same]) == 2
    assert "--json and --html name the same file" in capsys.readouterr().err
    assert suite_calls == []


def test_reports_are_written_and_the_matrix_printed(
    tmp_path: Path, suite_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    out = {name: tmp_path / f"r.{name}" for name in ("json", "xml", "html")}
    rc = main(
        ["conformance", "--json", str(out["json"]), "--junit", str(out["xml"]), "--html", str(out["html"])]
    )
    captured = capsys.readouterr()
    assert rc == 0
    assert json.loads(out["json"].read_text())["ok"] is True
    assert out["xml"].read_text().startswith("<?xml") and "<html" in out["html"].read_text()
    assert captured.out.splitlines()[0].split()[:2] == ["clause", "what"]
    assert "DSS-16" in captured.out and "\x1b[" not in captured.out  # no colours when not a terminal
    assert "[1/1] stack-walks on 8.0.4" in captured.err  # plain progress lines when not a terminal
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file is left behind"


def test_finding7_a_report_that_fails_at_the_end_does_not_lose_the_others(
    tmp_path: Path,
    suite_calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def disk_full(result: SuiteResult, path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(cmd.REPORTS, "--html", disk_full)
    out_json, out_html, out_xml = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.xml"
    rc = main(["conformance", "--html", str(out_html), "--json", str(out_json), "--junit", str(out_xml)])
    err = capsys.readouterr().err
    assert rc == 3  # the harness failed to deliver a report (its path was checked before the run)
    assert f"--html {out_html}: could not write the report (No space left on device)" in err
    assert f"the result is in {out_json}" in err
    assert json.loads(out_json.read_text())["verdicts"][0]["clause"] == "DSS-16"
    assert out_xml.is_file()


def test_finding7_when_the_json_report_fails_the_result_is_kept_elsewhere(
    tmp_path: Path,
    suite_calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = cmd.REPORTS["--json"]

    def fails_at_target(result: SuiteResult, path: Path) -> None:
        if path == tmp_path / "r.json":
            raise OSError(5, "Input/output error")
        real(result, path)

    monkeypatch.setitem(cmd.REPORTS, "--json", fails_at_target)
    monkeypatch.setattr(report, "write_json", fails_at_target)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "kept"))
    (tmp_path / "kept").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    rc = main(["conformance", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert rc == 3
    line = next(x for x in err.splitlines() if "the result is kept in" in x)
    kept = Path(line.split("the result is kept in ")[1])
    assert kept.parent == tmp_path / "kept"
    assert json.loads(kept.read_text())["verdicts"][0]["clause"] == "DSS-16"


def test_progress_on_a_terminal_is_a_rich_bar() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with cmd.progress_reporter(console) as progress:
        progress(0, 2, "starting")
        progress(1, 2, "stack-walks on 8.0.4")
        progress(2, 2, "gc-moves on 8.0.4")
    text = buffer.getvalue()
    assert "2/2" in text and "gc-moves on 8.0.4" in text and "\x1b[" in text


# --- atomic writes ----------------------------------------------------------------------------------------


def test_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    fsio.atomic_write_text(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_failed_write_leaves_the_old_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    target.write_text("old report")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        fsio.atomic_write_text(target, "new report")
    assert target.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"], "the temporary file is removed"


def test_an_interrupted_suite_prints_writes_its_verdicts_and_exits_with_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the command does with the result run_suite returned after SIGINT (the live test sends one)."""
    import signal

    from conformance.core import interrupt

    cut = result().model_copy(update={"interrupted": True})
    monkeypatch.setattr(cmd, "run_suite", lambda *a, **k: cut)
    monkeypatch.setattr(interrupt, "requested", lambda: signal.SIGINT)
    out = {"--json": tmp_path / "r.json", "--junit": tmp_path / "r.xml", "--html": tmp_path / "r.html"}
    argv = ["conformance"] + [x for option, path in out.items() for x in (option, str(path))]
    assert main(argv) == 130
    printed = capsys.readouterr()
    assert printed.err.splitlines()[-1] == (
        "profharness: interrupted by SIGINT: 1 verdict(s) of 0 run(s) judged before it; written to --json "
        f"{out['--json']}, --junit {out['--junit']}, --html {out['--html']}"
    )
    data = json.loads(out["--json"].read_text())
    assert data["interrupted"] is True and data["ok"] is False and data["verdicts"][0]["clause"] == "DSS-16"
    assert "interrupted: only the runs judged before it" in printed.out
    assert "<b>Interrupted</b>" in out["--html"].read_text()
