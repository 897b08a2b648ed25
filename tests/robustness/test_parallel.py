"""Parallel and repeated runs (issue 13): two ``profharness`` commands started at once on an empty cache
(``PROFHARNESS_CACHE`` a fresh folder) both succeed and leave one entry per runtime, scenario compile and
probe build, and no staging folder behind.

Builds into one cache area take turns on the area's lock (:func:`conformance.core.paths.area_lock`), so
the second command waits for the first's build and reuses it. The runtimes install from the bundled wheels
the user's cache (or ``$PROFHARNESS_WHEELHOUSE``) already holds, so nothing is downloaded: two installs at
once are the CI test; two whole ``run``s at once (which build the probe from nothing, about a minute) are
the nightly one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.core import paths
from conformance.core.runtimes import BUNDLED, MARKER_NAME, _find_wheel, probe_host

pytestmark = pytest.mark.live

PROFHARNESS = Path(sys.executable).with_name("profharness")


def _wheelhouse(into: Path) -> Path:
    """A folder with a link to every bundled wheel already at hand (none is downloaded)."""
    into.mkdir()
    for bundled in BUNDLED:
        wheel = _find_wheel(bundled)
        if wheel is None:
            pytest.skip(f"no {bundled.requirement} wheel at hand (./dev setup downloads it)")
        (into / wheel.name).symlink_to(wheel.resolve())
    return into


def _at_once(
    commands: list[list[str]], env: dict[str, str], timeout: float
) -> list[subprocess.CompletedProcess[str]]:
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in commands
    ]
    done: list[subprocess.CompletedProcess[str]] = []
    for cmd, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done


def _leftovers(cache: Path) -> list[str]:
    """Every hidden name in the cache's areas but their lock files: staging folders, stale or corrupt
    entries, downloads."""
    return sorted(
        str(p.relative_to(cache))
        for area in [cache, *(a for a in cache.iterdir() if a.is_dir())]
        for p in area.iterdir()
        if p.name.startswith(".") and p.name != paths.LOCK_NAME
    )


def _empty_cache_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    wheels = _wheelhouse(tmp_path / "wheels")  # before the cache moves: the user's cache holds them
    cache = tmp_path / "cache"
    env = {**os.environ, "PROFHARNESS_CACHE": str(cache), "PROFHARNESS_WHEELHOUSE": str(wheels)}
    env.pop("PROFHARNESS_RUNS", None)
    return cache, env


def test_two_installs_at_once_on_an_empty_cache_install_each_runtime_once(tmp_path: Path) -> None:
    cache, env = _empty_cache_env(tmp_path)
    results = _at_once([[str(PROFHARNESS), "runtimes", "install"]] * 2, env, timeout=600)
    for r in results:
        assert r.returncode == 0, r.stderr
    runtimes_area = cache / "runtimes"
    assert sorted(p.name for p in runtimes_area.iterdir() if p.name != paths.LOCK_NAME) == sorted(
        b.version for b in BUNDLED
    )
    assert _leftovers(cache) == []
    assert not (cache / "wheels").exists()  # nothing was downloaded
    for bundled in BUNDLED:
        root = runtimes_area / bundled.version
        assert (root / MARKER_NAME).read_text().strip() == bundled.marker_text()
        # the unpacked host starts and lists its runtime
        assert bundled.version in probe_host(bundled.runtime(root))


@pytest.mark.long
def test_two_runs_at_once_on_an_empty_cache_share_every_build(tmp_path: Path) -> None:
    """Runtimes, the scenario's compile and the probe's build, all from nothing, by two commands at once."""
    cache, env = _empty_cache_env(tmp_path)
    command = [str(PROFHARNESS), "run", "stack-basic", "--runtime", "8.0", "--json"]
    results = _at_once([command] * 2, env, timeout=1200)
    for r in results:
        assert r.returncode == 0, r.stderr
        runs = json.loads(r.stdout)
        assert [run["outcome"] for run in runs] == ["ok"]
    for area in ("runtimes", "scenarios", "probe"):
        entries = [p.name for p in (cache / area).iterdir() if p.name != paths.LOCK_NAME]
        assert len(entries) == (len(BUNDLED) if area == "runtimes" else 1), (area, entries)
    assert _leftovers(cache) == []
    assert len([p for p in (cache / "runs").iterdir() if p.name != paths.LOCK_NAME]) == 2
