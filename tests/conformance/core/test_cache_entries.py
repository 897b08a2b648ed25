"""Cache entries (issue 13): published whole with their sha256 (conformance.core.paths.seal), reused only
when the content still matches, moved aside and rebuilt when it does not; compiles in two processes at once
share one entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.core import paths, scenarios
from conformance.core.runner import reference_runtime
from conformance.core.runtimes import Runtime


def test_sealed_entry_is_reused_only_while_its_content_matches(tmp_path: Path) -> None:
    final = tmp_path / "key"
    final.mkdir()
    (final / "lib.so").write_bytes(b"built")
    assert paths.sealed_entry(final, "lib.so") is None  # unsealed: moved aside
    assert not final.exists() and len(list(tmp_path.glob(".key.corrupt-*"))) == 1
    with paths.staged(final, prefix="x-") as work:
        (work / "lib.so").write_bytes(b"built")
        paths.seal(work / "lib.so")
    assert paths.sealed_entry(final, "lib.so") == final / "lib.so"
    (final / "lib.so").write_bytes(b"bui1t")
    assert paths.sealed_entry(final, "lib.so") is None and not final.exists()


@pytest.mark.live
def test_a_corrupted_compile_is_rebuilt(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scenarios, "cache_dir", lambda: tmp_path)
    scenario = scenarios.load_scenario("stack-basic")
    dll = scenarios.compile_scenario(scenario, reference_runtime())
    good = dll.read_bytes()
    dll.write_bytes(good[: len(good) // 2])  # cut short
    again = scenarios.compile_scenario(scenario, reference_runtime())
    assert again == dll and again.read_bytes() == good


_COMPILE = """
import sys
from pathlib import Path
from conformance.core import scenarios
from conformance.core.runner import reference_runtime
scenarios.cache_dir = lambda: Path(sys.argv[1])
print(scenarios.compile_scenario(scenarios.load_scenario("stack-basic"), reference_runtime()))
"""


@pytest.mark.live
def test_two_processes_compiling_at_once_share_one_entry(runtimes: list[Runtime], tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _COMPILE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and Path(outs[0]).is_file()
    entries = [p.name for p in (tmp_path / "scenarios").iterdir() if p.name != paths.LOCK_NAME]
    assert entries == [Path(outs[0]).parent.name]  # one entry, no staging folder left behind


def test_a_check_without_the_lock_does_not_move_an_entry(tmp_path: Path) -> None:
    final = tmp_path / "key"
    final.mkdir()
    (final / "lib.so").write_bytes(b"half")  # unsealed: being replaced, or damaged
    assert paths.sealed_entry(final, "lib.so", repair=False) is None
    assert final.is_dir() and not list(tmp_path.glob(".key.corrupt-*"))


def test_a_lost_race_to_move_a_damaged_entry_aside_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    final = tmp_path / "key"
    final.mkdir()
    (final / "lib.so").write_bytes(b"half")
    real_rename = os.rename

    def lose(src: object, dst: object) -> None:  # another process moved it a moment before
        real_rename(final, tmp_path / "elsewhere")
        raise FileNotFoundError(str(src))

    monkeypatch.setattr(os, "rename", lose)
    assert paths.sealed_entry(final, "lib.so") is None
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere"]


def test_staging_folders_of_killed_builds_are_cleared_under_the_lock(tmp_path: Path) -> None:
    area = tmp_path / "probe"
    area.mkdir()
    for name in (".abc-1", ".abc-2", ".abd-1"):
        (area / name).mkdir()
        (area / name / "half.o").write_bytes(b"x")
    with paths.area_lock(area):
        assert paths.clear_staging(area, ".abc-") == 2
    assert sorted(p.name for p in area.iterdir()) == [".abd-1", paths.LOCK_NAME]


_HOLD = """
import sys, time
from pathlib import Path
from conformance.core import paths
with paths.area_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    (Path(sys.argv[1]) / "released").write_text("")
"""


def test_the_area_lock_excludes_another_process_until_it_is_released(tmp_path: Path) -> None:
    import time

    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), "1.0"], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    began = time.monotonic()
    with paths.area_lock(tmp_path):
        waited = time.monotonic() - began
        assert (tmp_path / "released").exists()  # we got it only after the holder let go
    holder.communicate(timeout=30)
    assert waited > 0.2
