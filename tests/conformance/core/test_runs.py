"""The runs folder: a run folder per run, owned by the process that made it, and the folder's cap."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.core import runs
from conformance.core.errors import InputError
from conformance.core.paths import LOCK_NAME
from conformance.core.runtimes import Runtime

ROOT = Path(__file__).resolve().parents[3]
DAY = 86400.0


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "runs"
    monkeypatch.setenv("PROFHARNESS_RUNS", str(target))
    monkeypatch.delenv(runs.KEEP_ENV, raising=False)
    return target


def finished_run(folder: Path, name: str, age_s: float, *, owner: str | None = "2147483647 1\n") -> Path:
    """A run folder whose owner is no live process (pid 2147483647: above any pid_max),
    last written ``age_s`` ago."""
    path = folder / name
    path.mkdir(parents=True)
    (path / "trace.jsonl").write_text('{"seq": 1}\n' * 10)
    (path / "plan.json").write_text("{}")  # what every harness run holds beside its trace
    (path / "stdout.txt").write_text("")
    if owner is not None:
        (path / runs.OWNER_FILE).write_text(owner)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_new_run_folder_is_named_by_its_time_and_owned_by_this_process(folder: Path) -> None:
    path = runs.new_run_dir("stack-basic-8.0.4")
    assert path.parent == folder and runs.RUN_NAME.match(path.name)
    assert path.name.split("-")[2:5] == ["stack", "basic", "8.0.4"]
    pid, start = (path / runs.OWNER_FILE).read_text().split()
    assert int(pid) == os.getpid() and start != "?"
    assert runs.in_progress(path)


def test_the_runner_and_the_validator_make_their_run_folders_here(folder: Path) -> None:
    from conformance.core import runner
    from conformance.validator import launch

    nowhere = Path("/nonexistent")
    runtime = Runtime(version="8.0.4", host=nowhere / "dotnet", framework_dir=nowhere, source="test")
    made = [runner._new_run_dir("gc-moves", runtime), launch.new_run_dir("validate-basic", runtime)]
    assert all((p / runs.OWNER_FILE).is_file() and p.parent == folder for p in made)
    assert made[1].name.split("-")[2:4] == ["validate", "validate"]


def test_a_run_whose_process_ended_is_finished(folder: Path) -> None:
    """A child makes a run folder and exits: its run is no longer in progress (its pid, even reused, is
    another process: the start time differs)."""
    code = "from conformance.core import runs; print(runs.new_run_dir('child-8.0.4'))"
    env = {**os.environ, runs.KEEP_ENV: "all"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    path = Path(done.stdout.strip())
    assert path.parent == folder and not runs.in_progress(path)


def test_the_cap_keeps_the_newest_runs_when_a_run_is_written(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [finished_run(folder, f"20260101-00000{i}-gc-moves-8.0.4-aaaaa{i}", (10 - i) * DAY)
           for i in range(5)]  # fmt: skip
    monkeypatch.setenv(runs.KEEP_ENV, "3")
    new = runs.new_run_dir("stack-basic-8.0.4")
    assert names(folder) == sorted([LOCK_NAME, new.name, old[3].name, old[4].name])


def test_the_cap_leaves_the_runs_of_the_last_10_minutes(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that ran its runs in a child process reads their traces after the child ended."""
    recent = finished_run(folder, "20260101-000001-x-8.0.4-aaaaa1", runs.CAP_MIN_AGE_S - 60)
    older = finished_run(folder, "20260101-000000-x-8.0.4-aaaaa0", runs.CAP_MIN_AGE_S + 60)
    monkeypatch.setenv(runs.KEEP_ENV, "0")
    runs.new_run_dir("y-8.0.4")
    assert recent.is_dir() and not older.exists()
    assert runs.prune(folder, keep=0).removed == [recent]  # an explicit prune has no such grace


def test_the_default_cap_is_100_runs_and_all_turns_it_off(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runs.keep_limit() == runs.DEFAULT_KEEP == 100
    monkeypatch.setenv(runs.KEEP_ENV, "all")
    assert runs.keep_limit() is None
    for i in range(3):
        finished_run(folder, f"20260101-00000{i}-x-8.0.4-aaaaa{i}", DAY)
    runs.new_run_dir("x-8.0.4")
    assert len(runs.runs_in(folder)) == 4


@pytest.mark.parametrize("bad", ["-1", "3x", "1.5", "many"])
def test_a_bad_cap_variable_is_one_line_and_no_run_folder(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                          bad: str) -> None:  # fmt: skip
    monkeypatch.setenv(runs.KEEP_ENV, bad)
    with pytest.raises(InputError) as caught:
        runs.new_run_dir("x-8.0.4")
    assert caught.value.message.startswith(f"{runs.KEEP_ENV} {bad!r}: not a number of runs to keep")
    assert not folder.exists()


def test_a_run_in_progress_is_never_removed(folder: Path) -> None:
    """A child makes a run folder and lives on: the run stays (even past --keep 0 and --older-than) until the
    child has ended."""
    code = (
        "import sys; from conformance.core import runs; print(runs.new_run_dir('child-8.0.4'), flush=True);"
        " sys.stdin.read()"
    )
    env = {**os.environ, runs.KEEP_ENV: "all"}
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        path = Path(child.stdout.readline().strip())
        stamp = time.time() - 400 * DAY
        os.utime(path, (stamp, stamp))
        assert runs.prune(folder, keep=0, older_than_s=DAY).removed == [] and path.is_dir()
    finally:
        child.communicate("")
    assert runs.prune(folder, keep=0, older_than_s=DAY).removed == [path]


def test_a_run_folder_without_owner_is_in_progress_for_an_hour(folder: Path) -> None:
    """Made by an older harness (or an instant ago, its owner file not yet written)."""
    young = finished_run(folder, "20260101-000001-x-8.0.4-aaaaa1", 600, owner=None)
    aged = finished_run(folder, "20260101-000000-x-8.0.4-aaaaa0", 2 * runs.UNOWNED_GRACE_S, owner=None)
    done = runs.prune(folder, keep=0)
    assert done.removed == [aged] and young.is_dir() and not aged.exists()


def test_older_than_removes_only_the_old_runs(folder: Path) -> None:
    old = finished_run(folder, "20260101-000000-x-8.0.4-aaaaa0", 10 * DAY)
    recent = finished_run(folder, "20260101-000001-x-8.0.4-aaaaa1", 2 * 3600)
    done = runs.prune(folder, older_than_s=runs.parse_age("7d", "--older-than"))
    assert done.removed == [old] and recent.is_dir() and done.kept == 1
    assert done.removed_bytes == len('{"seq": 1}\n' * 10) + len("{}") + len("2147483647 1\n")


def test_either_criterion_removes_a_run_and_neither_removes_nothing(folder: Path) -> None:
    made = [finished_run(folder, f"20260101-00000{i}-x-8.0.4-aaaaa{i}", (10 - i) * DAY) for i in range(4)]
    assert runs.prune(folder).removed == []
    # the newest 3 are kept by --keep 3, but the oldest of them is older than 8 days
    assert runs.prune(folder, keep=3, older_than_s=8.5 * DAY).removed == made[:2]


def test_at_most_limit_runs_go_per_cut_the_oldest_first(folder: Path) -> None:
    made = [finished_run(folder, f"20260101-00000{i}-x-8.0.4-aaaaa{i}", (10 - i) * DAY) for i in range(5)]
    assert runs.prune(folder, keep=0, limit=2).removed == made[:2]
    assert runs.prune(folder, keep=0, limit=2).removed == made[2:4]


def test_nothing_but_run_folders_is_touched(folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    folder.mkdir()
    (folder / "20200101-000000-link-8.0.4-aaaaaa").symlink_to(outside, target_is_directory=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "mydata").mkdir()
    stamp = time.time() - 400 * DAY
    for path in (folder / "notes.txt", folder / "mydata"):
        os.utime(path, (stamp, stamp))
    run = finished_run(folder, "20200101-000000-x-8.0.4-aaaaaa", 400 * DAY)
    (run / "to-outside").symlink_to(outside, target_is_directory=True)
    assert runs.prune(folder, keep=0, older_than_s=DAY).removed == [run]
    assert names(folder) == sorted([LOCK_NAME, "20200101-000000-link-8.0.4-aaaaaa", "mydata", "notes.txt"])
    assert (outside / "keep.txt").read_text() == "mine"


def test_a_folder_merely_named_like_a_run_is_never_removed(folder: Path) -> None:
    """The runs folder may be shared ($PROFHARNESS_RUNS): a folder the harness did not make (no owner file,
    no plan and output) is left alone whatever its name and age."""
    photos = folder / "20240101-000000-holiday-photos"
    photos.mkdir(parents=True)
    (photos / "img.txt").write_text("x")
    stamp = time.time() - 400 * DAY
    os.utime(photos, (stamp, stamp))
    old = finished_run(folder, "20240101-000001-x-8.0.4-aaaaaa", 400 * DAY, owner=None)
    assert runs.prune(folder, keep=0, older_than_s=DAY).removed == [old]
    assert (photos / "img.txt").read_text() == "x"


def test_a_dry_run_removes_nothing(folder: Path) -> None:
    made = finished_run(folder, "20260101-000000-x-8.0.4-aaaaa0", 10 * DAY)
    assert runs.prune(folder, keep=0, dry_run=True).removed == [made] and made.is_dir()


def test_a_removal_killed_halfway_is_finished_by_the_next_prune(folder: Path) -> None:
    aside = folder / f"{runs.PRUNING_PREFIX}20260101-000000-x-8.0.4-aaaaa0"
    (aside / "sub").mkdir(parents=True)
    runs.prune(folder, keep=10)
    assert not aside.exists()


def test_the_cap_waits_for_no_one_when_another_process_prunes(folder: Path) -> None:
    finished_run(folder, "20260101-000000-x-8.0.4-aaaaa0", 10 * DAY)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = runs.prune(folder, keep=0, wait=False)
    finally:
        os.close(fd)
    assert done.busy and done.removed == []
    assert len(runs.prune(folder, keep=0).removed) == 1


def test_ages_and_counts_parse_or_are_one_line() -> None:
    assert runs.parse_age("12h", "--older-than") == 12 * 3600
    assert runs.parse_age("2w", "--older-than") == 14 * DAY
    assert runs.parse_keep("0", "--keep") == 0 and runs.parse_keep("all", "--keep") is None
    for digits in ("\u00b2", "\u0661"):  # a superscript two, an Arabic-Indic one: digits to str.isdigit
        with pytest.raises(InputError, match="not a number of runs"):
            runs.parse_keep(digits, "--keep")
    for bad in ("3x", "-1d", "1.5h", "d", ""):
        with pytest.raises(InputError, match="not an age"):
            runs.parse_age(bad, "--older-than")
