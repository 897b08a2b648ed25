"""A CI cancel of a live command (issue 19, item 8): SIGTERM or SIGINT sent to the ``profharness`` process
alone, while its dotnet child (in a process group of its own) runs. The command exits 128 + the signal and
says so in one line, nothing of its process tree is left (checked in /proc: its descendants, and every
process whose working folder is a run folder), and the reports hold what was judged before the signal,
``interrupted`` set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.core import interrupt, runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator.result import ValidationResult
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture

#: an app that ends at once on .NET Core 3.1 and sleeps on .NET 5+ (where the signal comes)
SLOW_APP = """\
using System;
using System.Threading;
public static class SlowApp
{
    public static int Main()
    {
        GC.Collect();
        if (Environment.Version.Major >= 5) Thread.Sleep(60000);
        return 0;
    }
}
"""


@pytest.fixture(scope="module")
def slow_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("slow-src")
    (src / "slowapp.cs").write_text(SLOW_APP)
    scenario = scenarios.Scenario(name="slowapp", folder=src, sources=[src / "slowapp.cs"],
                                  plan={"version": 1}, description="sleeps on .NET 8")  # fmt: skip
    built = scenarios.compile_scenario(scenario, runner.reference_runtime())
    out = tmp_path_factory.mktemp("slow-app") / "slowapp.dll"
    out.write_bytes(built.read_bytes())
    return out


def _dotnet_children(pid: int) -> list[int]:
    """The dotnet hosts below ``pid``."""
    found = []
    for child in interrupt.descendants(pid):
        try:
            if os.readlink(f"/proc/{child}/exe").endswith("/dotnet"):
                found.append(child)
        except OSError:
            continue
    return found


def _cwd_under(folder: Path) -> list[int]:
    """Processes whose working folder is under ``folder`` (what a run left behind)."""
    left = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                    left.append(int(proc.name))
            except OSError:
                continue
    return left


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _interrupt(argv: list[str], runs: Path, sig: signal.Signals, ready: Callable[[int], bool],
               timeout_s: float = 240.0) -> tuple[subprocess.CompletedProcess[str], list[int]]:  # fmt: skip
    """Start ``profharness ARGV`` (run folders under ``runs``), wait until ``ready(pid)``, send ``sig`` to
    it alone; its completed process and the tree it had when the signal went."""
    env = {**os.environ, "PROFHARNESS_RUNS": str(runs)}
    harness = subprocess.Popen([sys.executable, "-m", "conformance", *argv], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            # ready, and a dotnet child in the tree taken then (a short program may end between two looks:
            # the harness starts the next one)
            if ready(harness.pid):
                tree = interrupt.descendants(harness.pid)
                if _dotnet_children(harness.pid):
                    break
            assert harness.poll() is None, f"profharness ended before the signal: {harness.communicate()}"
            assert time.monotonic() < deadline, "the dotnet child never appeared"
            time.sleep(0.01)
        started = time.monotonic()
        harness.send_signal(sig)
        out, err = harness.communicate(timeout=60)
        assert time.monotonic() - started < 30, "the harness took long to stop"
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.communicate()  # reaps it and closes its pipes
    return subprocess.CompletedProcess(harness.args, harness.returncode, out, err), tree


def _nothing_left(tree: list[int], runs: Path) -> None:
    assert [p for p in tree if _alive(p)] == [], "a process of the harness's tree outlived it"
    assert _cwd_under(runs) == [], "a process still runs in a run folder"


@pytest.mark.live
def test_sigterm_to_validate_ends_its_tree_and_writes_what_was_judged(
    tmp_path: Path, slow_app: Path, runtimes: list[Runtime]
) -> None:
    assert [rt.version.split(".")[0] for rt in runtimes] == ["3", "8"]
    runs = tmp_path / "runs"
    reports = {"--json": tmp_path / "r.json", "--junit": tmp_path / "r.xml", "--html": tmp_path / "r.html"}
    argv = ["validate", str(build_fixture("correct")), "--clsid", FIXTURE_CLSID, "--app", str(slow_app)]
    argv += [x for option, path in reports.items() for x in (option, str(path))]

    def sleeping(pid: int) -> bool:  # the 8.0 run's app has started (its sleep is 60 s long)
        on_8 = [run for run in runs.glob("*-8.0.4-*") if _cwd_under(run)]
        return bool(on_8) and bool(_dotnet_children(pid))

    done, tree = _interrupt(argv, runs, signal.SIGTERM, sleeping)
    assert done.returncode == 143, done.stderr
    assert done.stderr == (
        "profharness: interrupted by SIGTERM: 1 run(s) judged before it, 0 finding group(s); written to "
        f"--json {reports['--json']}, --junit {reports['--junit']}, --html {reports['--html']}\n"
    )
    _nothing_left(tree, runs)
    result = ValidationResult.model_validate_json(reports["--json"].read_text())
    assert result.interrupted and [(r.runtime, r.outcome) for r in result.runs] == [("3.1.23", "ok")]
    assert {s.status.value for s in result.rules if s.runtime == "8.0.4"} == {"skipped"}
    assert "interrupted: only what is above was judged" in done.stdout
    suites = ET.parse(reports["--junit"]).getroot().findall("testsuite")
    assert [s.get("skipped") == s.get("tests") for s in suites] == [False, True]
    assert "interrupted" in reports["--html"].read_text()


@pytest.mark.live
def test_sigint_to_conformance_ends_its_tree_and_writes_its_verdicts(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    runs = tmp_path / "runs"
    out = tmp_path / "r.json"
    argv = ["conformance", "--clause", "DSS-16", "--json", str(out)]
    done, tree = _interrupt(argv, runs, signal.SIGINT, lambda pid: bool(_dotnet_children(pid)))
    assert done.returncode == 130, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("profharness: interrupted by SIGINT: ")
    assert last.endswith(f"written to --json {out}")
    assert "Traceback" not in done.stderr
    _nothing_left(tree, runs)
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and data["ok"] is False
    assert all(v["outcome"] != "stale-expectation" for v in data["verdicts"])
    assert len(data["runs"]) < 2 * len(runtimes), "the runs not yet judged are not in the result"


@pytest.mark.live
def test_sigint_to_fuzz_runtime_ends_its_tree_and_writes_its_report(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    runs, out = tmp_path / "runs", tmp_path / "found"
    argv = ["fuzz-runtime", "--known-only", "--runtime", "8.0", "--out", str(out)]
    done, tree = _interrupt(argv, runs, signal.SIGINT, lambda pid: bool(_dotnet_children(pid)))
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("profharness: interrupted by SIGINT after ")
    assert done.stderr.count("\n") == 1
    assert "finding(s) found before it" in done.stderr and "Traceback" not in done.stderr
    _nothing_left(tree, runs)
    saved = json.loads((out / "fuzz-report.json").read_text())
    assert saved["interrupted"] is True
    assert any(n.startswith("interrupted by SIGINT") for n in saved["notes"])
