"""Run a scenario under the probe on live runtimes: ``profharness run SCENARIO --runtime VERSION|all``.

One run = one process: the compiled scenario on one runtime, with the probe loaded as profiler and a plan
in the environment. A watchdog bounds it: a scenario that hangs is killed and reported as ``hung``, one
that dies of a signal as ``crashed`` (or ``killed`` for SIGKILL), always with the path of its trace, whose
good prefix is parsed and kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from conformance.core import interrupt, probe, runs, runtimes, scenarios
from conformance.core.errors import HarnessError
from conformance.core.hangs import ThreadReport, thread_reports
from conformance.core.paths import file_sha256
from conformance.core.plans import resolve_plan
from conformance.core.runtimes import Runtime
from conformance.core.trace import Trace, read_trace

DEFAULT_TIMEOUT_S = 60.0
_POLL_S = 0.02


class RunOutcome(StrEnum):
    OK = "ok"  # exit code 0
    FAILED = "failed"  # non-zero exit code
    CRASHED = "crashed"  # died of a signal other than SIGKILL
    KILLED = "killed"  # SIGKILL: asked for (kill_when) or from outside
    HUNG = "hung"  # the watchdog's timeout expired; the harness killed it


class RunResult(BaseModel):
    """What one scenario run on one runtime did."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    scenario: str
    runtime: str
    runtime_source: str
    outcome: RunOutcome
    exit_code: int | None = None
    signal: str | None = None
    seconds: float
    run_dir: Path
    trace_path: Path
    trace_sha256: str | None = None
    trace_problem: str | None = None
    trace_torn_tail: bool = False
    record_count: int = 0
    last_callback: str | None = None
    stderr_tail: str = ""
    #: the runtime's account of an unhandled managed exception that ended the app (its stderr): the exception
    #: and its innermost frame (e.g. an InvalidProgramException from IL a profiler set), None when none
    unhandled_exception: str | None = None
    #: a hung run: every thread of the process as the watchdog found it (name, state, native stack from gdb,
    #: the callback it was in), and why the stacks are missing when they are
    threads: tuple[ThreadReport, ...] = ()
    threads_problem: str | None = None
    trace: Trace | None = Field(default=None, exclude=True)

    def describe_failure(self) -> str:
        """One line for a run that did not end normally."""
        what = {
            RunOutcome.FAILED: f"exited with code {self.exit_code}",
            RunOutcome.CRASHED: f"crashed ({self.signal})",
            RunOutcome.KILLED: f"was killed ({self.signal})",
            RunOutcome.HUNG: "hung and was killed by the watchdog",
            RunOutcome.OK: "ended normally",
        }[self.outcome]
        last = f"; last callback {self.last_callback}" if self.last_callback else ""
        if self.outcome is RunOutcome.HUNG and self.threads:
            stuck = [f"{t.os_tid} in {t.open_callback}" for t in self.threads if t.open_callback]
            last += f"; {len(self.threads)} thread(s) reported" + (f" ({', '.join(stuck)})" if stuck else "")
        return f"{self.scenario} on {self.runtime} {what}{last}; trace: {self.trace_path}"


#: a run's trace in its folder (JSON Lines); a binary trace (docs/design.md "The binary trace") is
#: :data:`BINARY_TRACE_FILE`
TRACE_FILE, BINARY_TRACE_FILE = "trace.jsonl", "trace.phtrace"


def probe_environment(
    runtime: Runtime, probe_path: Path, plan: Mapping[str, Any], trace_path: Path
) -> dict[str, str]:
    """The environment that loads the probe as profiler into ``runtime`` with ``plan``."""
    env = dict(os.environ)
    # A profiler the user has set for themselves must not be loaded into our runs.
    for key in list(env):
        if key.startswith(("CORECLR_", "COR_PROFILER", "DOTNET_")) and key != "DOTNET_ROOT":
            del env[key]
    env.update(runtime.env())
    env.update(
        {
            "CORECLR_ENABLE_PROFILING": "1",
            "CORECLR_PROFILER": probe.CLSID,
            "CORECLR_PROFILER_PATH": str(probe_path),
            "PROFHARNESS_PLAN": json.dumps(plan, sort_keys=True),
            "PROFHARNESS_TRACE": str(trace_path),
        }
    )
    return env


def _new_run_dir(scenario: str, runtime: Runtime) -> Path:
    return runs.new_run_dir(f"{scenario}-{runtime.version}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def execute(
    scenario: scenarios.Scenario,
    app_dll: Path,
    runtime: Runtime,
    probe_so: Path,
    *,
    plan: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    kill_when: Callable[[Path], bool] | None = None,
    kill_signal: int = signal.SIGKILL,
    run_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    read: bool = True,
    on_start: Callable[[int, Path], None] | None = None,
    trace_name: str = TRACE_FILE,
) -> RunResult:
    """Run ``app_dll`` on ``runtime`` under the probe, bounded by ``timeout_s``; its trace is ``trace_name``
    in the run folder.

    ``read=False`` leaves the trace unread (``trace`` None, ``record_count`` 0): a caller that streams it
    (the validator) reads it once itself.
    ``kill_when(trace_path)`` is polled while the process runs; when it returns True the process group gets
    ``kill_signal`` (then SIGKILL if it is still there; used to test that a run killed at any point loses
    nothing already recorded). ``env``: extra environment variables (fault injection: PROFHARNESS_FAULT).
    ``on_start(pid, app)`` runs in a thread of its own once the process has started (the watchdog still
    bounds the process; the thread is waited for after the process ended): attach drives the diagnostics
    IPC from it. It must catch its own errors.
    """
    run_dir = run_dir or _new_run_dir(scenario.name, runtime)
    app = scenarios.prepare_run_dir(app_dll, runtime, run_dir)
    probe_copy = app.parent / probe.PROBE_FILE_NAME
    shutil.copyfile(probe_so, probe_copy)
    trace_path = run_dir / trace_name
    effective_plan = resolve_plan(plan if plan is not None else scenario.plan)
    child_env = probe_environment(runtime, probe_copy, effective_plan, trace_path)
    child_env.update(env or {})
    (run_dir / "plan.json").write_text(json.dumps(effective_plan, indent=2, sort_keys=True))

    started = time.monotonic()
    hung = False
    threads: tuple[ThreadReport, ...] = ()
    threads_problem: str | None = None
    interrupt.check()  # no new process once SIGINT/SIGTERM came
    # interrupt.opening / deferred: a signal right after an open or Popen returns never leaves the file or
    # the child to the garbage collector; the child is registered before the Interrupted is raised, and the
    # finally below reaps it
    with (
        interrupt.opening(lambda: (run_dir / "stdout.txt").open("wb")) as out,
        interrupt.opening(lambda: (run_dir / "stderr.txt").open("wb")) as err,
    ):
        process: subprocess.Popen[bytes] | None = None
        try:
            with interrupt.deferred():
                try:
                    process = subprocess.Popen(
                        [str(runtime.host), str(app)],
                        cwd=run_dir,
                        env=child_env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise HarnessError(f"cannot start {runtime.host}: {exc.strerror}") from exc
                interrupt.register(process)  # a signal to the harness kills its group
            helper = None
            if on_start is not None:
                helper = threading.Thread(target=on_start, args=(process.pid, app), daemon=True)
                helper.start()
            while process.poll() is None:
                if time.monotonic() - started > timeout_s:
                    hung = True
                    threads, threads_problem = thread_reports(process.pid, trace_path)
                    _kill_group(process)
                    break
                if kill_when is not None and kill_when(trace_path):
                    _kill_group(process, kill_signal)
                    break
                time.sleep(_POLL_S)
            returncode = process.wait()
            if helper is not None:
                helper.join(timeout=_KILL_GRACE_S)
        finally:
            if process is not None:
                if process.poll() is None:
                    _kill_group(process)
                    process.wait()
                interrupt.unregister(process)
    seconds = time.monotonic() - started

    if hung:
        outcome, sig = RunOutcome.HUNG, _signal_name(signal.SIGKILL)
    elif returncode < 0:
        number = -returncode
        sig = _signal_name(number)
        outcome = RunOutcome.KILLED if number == signal.SIGKILL else RunOutcome.CRASHED
    else:
        sig = None
        outcome = RunOutcome.OK if returncode == 0 else RunOutcome.FAILED

    trace: Trace | None = None
    problem: str | None = None
    if trace_path.is_file() and read:
        trace = read_trace(trace_path)
        problem = str(trace.problem) if trace.problem else None
    elif not trace_path.is_file():
        problem = f"{trace_path}: no trace was written (the probe did not load)"
    last = trace.last_callback() if trace else None
    stderr_text = (run_dir / "stderr.txt").read_text(errors="replace")
    return RunResult(
        scenario=scenario.name,
        runtime=runtime.version,
        runtime_source=runtime.source,
        outcome=outcome,
        exit_code=returncode if returncode >= 0 else None,
        signal=sig,
        seconds=round(seconds, 3),
        run_dir=run_dir,
        trace_path=trace_path,
        trace_sha256=file_sha256(trace_path) if trace_path.is_file() else None,
        trace_problem=problem,
        trace_torn_tail=trace.torn_tail if trace else False,
        record_count=len(trace.records) if trace else 0,
        last_callback=last.name if last else None,
        stderr_tail="\n".join(stderr_text.strip().splitlines()[-5:]),
        unhandled_exception=_unhandled_exception(stderr_text),
        threads=threads,
        threads_problem=threads_problem,
        trace=trace,
    )



def _unhandled_exception(stderr_text: str) -> str | None:
    """The exception and innermost frame of the runtime's "Unhandled exception." report in ``stderr_text``."""
    lines = stderr_text.splitlines()
    start = next((k for k, line in enumerate(lines) if line.startswith("Unhandled exception.")), None)
    if start is None:
        return None
    told = lines[start].removeprefix("Unhandled exception.").strip()
    frame = next((line.strip() for line in lines[start + 1 :] if line.strip().startswith("at ")), "")
    return f"{told} {frame}" if frame else told

#: how long a process group may take to die of a signal other than SIGKILL before it gets SIGKILL
_KILL_GRACE_S = 5.0


def _kill_group(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    if sig == signal.SIGKILL:
        return
    try:
        process.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(process)


def reference_runtime() -> Runtime:
    """The runtime whose reference assemblies scenarios compile against (the bundled 3.1)."""
    return runtimes.select("3.1.23")[0]


def run_scenario(
    name: str,
    runtime_spec: str = "all",
    *,
    dotnet: Path | None = None,
    plan: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    kill_when: Callable[[Path], bool] | None = None,
) -> list[RunResult]:
    """Compile ``name``, build the probe, run on every runtime ``runtime_spec`` selects."""
    scenario = scenarios.load_scenario(name)
    selected = runtimes.select(runtime_spec, dotnet)
    app_dll = scenarios.compile_scenario(scenario, reference_runtime())
    probe_so = probe.build_probe()
    return [
        execute(scenario, app_dll, rt, probe_so, plan=plan, timeout_s=timeout_s, kill_when=kill_when)
        for rt in selected
    ]
