"""`profharness runs prune [--keep N] [--older-than D] [--dry-run]`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.core import runs
from tests.conformance.core.test_runs import DAY, finished_run

EXIT_USAGE = 2


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "runs"
    monkeypatch.setenv("PROFHARNESS_RUNS", str(target))
    monkeypatch.delenv(runs.KEEP_ENV, raising=False)
    return target


@pytest.fixture
def five(folder: Path) -> list[Path]:
    """Five finished runs, 10 to 6 days old."""
    return [finished_run(folder, f"20260101-00000{i}-x-8.0.4-aaaaa{i}", (10 - i) * DAY) for i in range(5)]


def prune(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["runs", "prune", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_keep_n_leaves_the_newest_n(
    five: list[Path], folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = prune(capsys, "--keep", "2")
    assert rc == 0 and err == ""
    assert [p.is_dir() for p in five] == [False, False, False, True, True]
    assert out.startswith("removed 3 run(s) (0.0 MB) from ") and out.endswith("; 2 left (0 in progress)\n")
    assert str(folder) in out


def test_older_than_removes_the_old_ones_only(five: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = prune(capsys, "--older-than", "7d")
    assert rc == 0 and out.startswith("removed 4 run(s)")
    assert [p.is_dir() for p in five] == [False, False, False, False, True]


def test_without_options_it_cuts_to_the_cap(five: list[Path], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert prune(capsys)[0] == 0 and all(p.is_dir() for p in five)  # 5 runs: under the default 100
    monkeypatch.setenv(runs.KEEP_ENV, "1")
    assert prune(capsys)[0] == 0 and [p.is_dir() for p in five] == [False] * 4 + [True]


def test_dry_run_lists_and_removes_nothing(five: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = prune(capsys, "--keep", "3", "--dry-run")
    assert rc == 0 and all(p.is_dir() for p in five)
    assert out.splitlines()[:2] == [five[0].name, five[1].name] and "would remove 2 run(s)" in out


def test_a_missing_runs_folder_is_nothing_to_do(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = prune(capsys, "--keep", "0")
    assert rc == 0 and out.startswith("removed 0 run(s)") and not folder.exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--keep", "-1"], "--keep '-1': not a number of runs to keep (a whole number >= 0, or 'all')"),
        (["--keep", "all"], "--keep 'all': not a number of runs to keep (a whole number >= 0)"),
        (
            ["--older-than", "3x"],
            "--older-than '3x': not an age (a whole number and a unit s, m, h, d or w, such as 7d or 12h)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    five: list[Path], capsys: pytest.CaptureFixture[str], args: list[str], line: str
) -> None:
    rc, out, err = prune(capsys, *args)
    assert rc == EXIT_USAGE and out == ""
    assert err == f"profharness: error: {line}\n"
    assert all(p.is_dir() for p in five)


def test_a_bad_cap_variable_is_one_line_and_exit_2(five: list[Path], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv(runs.KEEP_ENV, "lots")
    rc, _, err = prune(capsys)
    assert rc == EXIT_USAGE
    wanted = f"{runs.KEEP_ENV} 'lots': not a number of runs to keep (a whole number >= 0, or 'all')"
    assert err == f"profharness: error: {wanted}\n"
    assert len(os.listdir(five[0].parent)) == 5


def test_a_runs_folder_that_is_a_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "runs").write_text("not a folder")
    monkeypatch.setenv("PROFHARNESS_RUNS", str(tmp_path / "runs"))
    rc, out, err = prune(capsys)
    assert rc == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and "is not a folder" in err and str(tmp_path / "runs") in err
