"""``profharness run``: scenarios under the probe on both bundled runtimes, and runs that go wrong.

Live: each test runs real CoreCLRs (the ``runtimes`` fixture installs the bundled ones).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.run import expected_stack, walk_summaries
from conformance.core import interrupt, probe, runner, scenarios
from conformance.core.runner import RunOutcome, RunResult, _unhandled_exception, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.core.trace import MarkRecord, read_trace

HERE = Path(__file__).parent
pytestmark = pytest.mark.live


def run(scenario: scenarios.Scenario, runtime: Runtime, **kwargs: object) -> RunResult:
    app = scenarios.compile_scenario(scenario, reference_runtime())
    return execute(scenario, app, runtime, probe.build_probe(), **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack_basic_runs(runtimes: list[Runtime]) -> list[RunResult]:
    scenario = scenarios.load_scenario("stack-basic")
    return [run(scenario, rt) for rt in runtimes]


def test_stack_basic_walks_match_the_scenarios_own_stack(stack_basic_runs: list[RunResult]) -> None:
    assert len(stack_basic_runs) == 2
    for result in stack_basic_runs:
        assert result.outcome is RunOutcome.OK, result.describe_failure()
        assert result.trace is not None and result.trace.problem is None and result.trace.ended
        header = result.trace.header
        assert header is not None and header.runtime is not None
        # .NET Core 3.1's GetRuntimeInformation still answers with the desktop CLR's 4.0.30319
        reported = "4.0.30319" if result.runtime.startswith("3.") else result.runtime
        assert header.runtime.version == reported
        expected = expected_stack(result.trace)
        assert expected is not None and len(expected) >= 7
        walks = {w["experiment"]: w for w in walk_summaries(result.trace)}
        assert set(walks) == {"walk-default", "walk-register-context"}
        for walk in walks.values():
            assert walk["hr"] == 0
            managed = [f for f in walk["frames"] if f["funcId"] != 0]
            assert len(managed) >= 5
            # leaf first: the walk's managed frames, in order, are the scenario's reflection frames
            assert [f["token"] for f in managed] == [e["token"] for e in expected], result.runtime
            assert managed[0]["method"] == "Thrower" and managed[-1]["method"] == "Main"
        assert all(f["context_rip"] is None for f in walks["walk-default"]["frames"])
        with_ctx = walks["walk-register-context"]["frames"]
        assert with_ctx and all(f["context_rip"] == f["ip"] for f in with_ctx)


def test_gc_compact_reports_moved_references2(runtimes: list[Runtime]) -> None:
    scenario = scenarios.load_scenario("gc-compact")
    for runtime in runtimes:
        result = run(scenario, runtime)
        assert result.outcome is RunOutcome.OK, result.describe_failure()
        trace = result.trace
        assert trace is not None and trace.problem is None
        moved = trace.callbacks("MovedReferences2")
        assert moved and any(int(m.args["cMovedObjectIDRanges"]) > 0 for m in moved), runtime.version
        started = trace.callbacks("GarbageCollectionStarted")
        finished = trace.callbacks("GarbageCollectionFinished")
        assert started and len(started) == len(finished)
        # each Started is followed by its Finished before the next Started
        order = [c.name for c in trace.callbacks() if c.name.startswith("GarbageCollection")]
        assert order == ["GarbageCollectionStarted", "GarbageCollectionFinished"] * len(started)


def test_sigkill_mid_run_is_reported_and_the_trace_prefix_parses(runtimes: list[Runtime]) -> None:
    scenario = scenarios.load_scenario_dir(HERE / "scenarios" / "gc-loop")

    def after_first_gc(trace_path: Path) -> bool:
        return trace_path.is_file() and bool(read_trace(trace_path).callbacks("GarbageCollectionFinished"))

    for runtime in runtimes:
        result = run(scenario, runtime, kill_when=after_first_gc)
        assert result.outcome is RunOutcome.KILLED and result.signal == "SIGKILL"
        assert result.seconds < 20
        assert result.trace is not None and result.trace.problem is None
        assert not result.trace.ended
        assert result.trace.callbacks("GarbageCollectionFinished")
        assert result.trace_path.name in result.describe_failure()


def test_hung_scenario_is_killed_by_the_watchdog(runtimes: list[Runtime]) -> None:
    scenario = scenarios.load_scenario_dir(HERE / "scenarios" / "hang")
    result = run(scenario, runtimes[-1], timeout_s=5.0)
    assert result.outcome is RunOutcome.HUNG
    assert result.seconds < 30
    assert result.trace is not None
    assert [m.name for m in result.trace.of_kind(MarkRecord)] == ["hanging"]
    assert "hung" in result.describe_failure()
    # every thread as the watchdog found it: the main thread asleep in Thread.Sleep's native wait
    assert result.threads_problem is None, result.threads_problem
    assert len(result.threads) >= 3 and all(t.state in "RSDTtZXI" for t in result.threads)
    main = next(t for t in result.threads if t.os_tid == result.trace.records[0].os_tid)
    assert main.frames and any("sleep" in f.lower() or "wait" in f.lower() for f in main.frames), main.frames
    assert f"{len(result.threads)} thread(s) reported" in result.describe_failure()


def test_crashing_scenario_is_reported_with_its_signal(runtimes: list[Runtime]) -> None:
    scenario = scenarios.load_scenario_dir(HERE / "scenarios" / "crash")
    result = run(scenario, runtimes[-1])
    assert result.outcome is RunOutcome.CRASHED and result.signal == "SIGABRT"
    assert result.trace is not None and result.trace.marks("crashing")


def test_cli_run_json(runtimes: list[Runtime]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "stack-basic", "--runtime", "all", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert sorted(d["runtime"] for d in data) == sorted(rt.version for rt in runtimes)
    for run_summary in data:
        assert run_summary["outcome"] == "ok" and len(run_summary["walks"]) == 2
        assert Path(run_summary["trace_path"]).is_file() and len(run_summary["trace_sha256"]) == 64


def test_cli_errors_are_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "no-such-scenario", "--runtime", "8.0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("profharness: error: ") and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr


def test_an_unhandled_managed_exception_is_read_from_the_runtimes_report_on_stderr() -> None:
    """What .NET prints when an exception ends the app (seen on 8.0.4 when a profiler's rewritten IL is
    invalid): the exception and its innermost frame; nothing when the app did not end that way."""
    stderr = ("[profiler] initialized\nUnhandled exception. System.InvalidProgramException: The JIT compiler "
              "encountered invalid IL code or an internal limitation.\n   at Standard.LoopOnce(Int32 n)\n"
              "   at Standard.Main()\n")  # fmt: skip
    assert _unhandled_exception(stderr) == ("System.InvalidProgramException: The JIT compiler encountered "
                                            "invalid IL code or an internal limitation. at "
                                            "Standard.LoopOnce(Int32 n)")  # fmt: skip
    assert _unhandled_exception("Unhandled exception. System.Exception: boom\n") == "System.Exception: boom"
    assert _unhandled_exception("[profiler] done\n") is None


def test_a_signal_as_popen_returns_leaves_no_child_running_and_no_file_open(
    runtimes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT lands right after Popen returned, before the child is registered: the run raises Interrupted
    once, the child is killed and reaped (not left running or to the collector), stdout/stderr are closed
    (an unclosed file would be a ResourceWarning, an error here)."""
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(real_popen(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)  # its handler runs at the next bytecode boundary
        time.sleep(0.05)
        return started[-1]

    scenario = scenarios.load_scenario("stack-basic")
    app = scenarios.compile_scenario(scenario, reference_runtime())
    so = probe.build_probe()
    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_signal)
    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        execute(scenario, app, runtimes[-1], so)
    (child,) = started
    assert child.returncode is not None  # killed and waited for by execute itself
    assert not interrupt._STATE.children  # nothing registered is left behind
    assert not interrupt._STATE.pending  # raised once: the reports written after it are not cut short
