"""Run a scenario under the probe on live runtimes: ``profharness run SCENARIO --runtime VERSION|all``.

One run = one process: the compiled scenario on one runtime, with the probe loaded as profiler and a plan
in the environment. A watchdog bounds it: a scenario that hangs is killed and reported as ``hung``, one
that dies of a signal as ``crashed`` (or ``killed`` for SIGKILL), always with the path of its trace, whose
good prefix is parsed and kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from conformance import probe, runtimes, scenarios
from conformance.errors import HarnessError
from conformance.paths import runs_dir
from conformance.runtimes import Runtime
from conformance.trace import ProbeErrorRecord, Trace, read_trace

HELP = "run one scenario under the probe on live runtimes and summarise its trace"

DEFAULT_TIMEOUT_S = 60.0
_POLL_S = 0.02


class Outcome(StrEnum):
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
    outcome: Outcome
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
    trace: Trace | None = Field(default=None, exclude=True)

    def describe_failure(self) -> str:
        """One line for a run that did not end normally."""
        what = {
            Outcome.FAILED: f"exited with code {self.exit_code}",
            Outcome.CRASHED: f"crashed ({self.signal})",
            Outcome.KILLED: f"was killed ({self.signal})",
            Outcome.HUNG: "hung and was killed by the watchdog",
            Outcome.OK: "ended normally",
        }[self.outcome]
        last = f"; last callback {self.last_callback}" if self.last_callback else ""
        return f"{self.scenario} on {self.runtime} {what}{last}; trace: {self.trace_path}"


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_dir() / f"{stamp}-{scenario}-{runtime.version}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    return path


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
    run_dir: Path | None = None,
) -> RunResult:
    """Run ``app_dll`` on ``runtime`` under the probe, bounded by ``timeout_s``.

    ``kill_when(trace_path)`` is polled while the process runs; when it returns True the process gets
    SIGKILL (used to test that a killed run loses nothing already recorded).
    """
    run_dir = run_dir or _new_run_dir(scenario.name, runtime)
    app = scenarios.prepare_run_dir(app_dll, runtime, run_dir)
    probe_copy = app.parent / probe.PROBE_FILE_NAME
    shutil.copyfile(probe_so, probe_copy)
    trace_path = run_dir / "trace.jsonl"
    effective_plan = dict(plan if plan is not None else scenario.plan)
    env = probe_environment(runtime, probe_copy, effective_plan, trace_path)
    (run_dir / "plan.json").write_text(json.dumps(effective_plan, indent=2, sort_keys=True))

    started = time.monotonic()
    hung = False
    with (run_dir / "stdout.txt").open("wb") as out, (run_dir / "stderr.txt").open("wb") as err:
        try:
            process = subprocess.Popen(
                [str(runtime.host), str(app)],
                cwd=run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            raise HarnessError(f"cannot start {runtime.host}: {exc.strerror}") from exc
        try:
            while process.poll() is None:
                if time.monotonic() - started > timeout_s:
                    hung = True
                    _kill_group(process)
                    break
                if kill_when is not None and kill_when(trace_path):
                    _kill_group(process)
                    break
                time.sleep(_POLL_S)
            returncode = process.wait()
        finally:
            if process.poll() is None:
                _kill_group(process)
                process.wait()
    seconds = time.monotonic() - started

    if hung:
        outcome, sig = Outcome.HUNG, _signal_name(signal.SIGKILL)
    elif returncode < 0:
        number = -returncode
        sig = _signal_name(number)
        outcome = Outcome.KILLED if number == signal.SIGKILL else Outcome.CRASHED
    else:
        sig = None
        outcome = Outcome.OK if returncode == 0 else Outcome.FAILED

    trace: Trace | None = None
    problem: str | None = None
    if trace_path.is_file():
        trace = read_trace(trace_path)
        problem = str(trace.problem) if trace.problem else None
    else:
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
        trace_sha256=_sha256(trace_path),
        trace_problem=problem,
        trace_torn_tail=trace.torn_tail if trace else False,
        record_count=len(trace.records) if trace else 0,
        last_callback=last.name if last else None,
        stderr_tail="\n".join(stderr_text.strip().splitlines()[-5:]),
        trace=trace,
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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


# ----------------------------------------------------------------------------------------------------------
# Summaries


def walk_summaries(trace: Trace) -> list[dict[str, Any]]:
    """Every DoStackSnapshot the probe made: flags, HRESULT and frames (leaf first), resolved."""
    walks: list[dict[str, Any]] = []
    for call in trace.calls("DoStackSnapshot"):
        walk_no = call.args.get("walk")
        frame_records = trace.frames(walk_no) if isinstance(walk_no, int) else []
        resolved = call.out.get("frames") or []
        frames: list[dict[str, Any]] = []
        for i, record in enumerate(frame_records):
            info = resolved[i] if i < len(resolved) and isinstance(resolved[i], dict) else {}
            frames.append(
                {
                    "index": record.index,
                    "funcId": record.funcId,
                    "ip": record.ip,
                    "token": info.get("token"),
                    "module": info.get("module"),
                    "type": info.get("type"),
                    "method": info.get("method"),
                    "context_rip": record.context.rip if record.context else None,
                }
            )
        walks.append(
            {
                "experiment": call.experiment,
                "infoFlags": call.args.get("infoFlags"),
                "hr": call.hr,
                "frames": frames,
            }
        )
    return walks


def expected_stack(trace: Trace) -> list[dict[str, Any]] | None:
    """The scenario's own stack (reflection, leaf first) from its ``expect.stack`` mark."""
    marks = trace.marks("expect.stack")
    if not marks or marks[-1].payload is None:
        return None
    try:
        value = json.loads(marks[-1].payload)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


def gc_summary(trace: Trace) -> dict[str, Any]:
    started = trace.callbacks("GarbageCollectionStarted")
    finished = trace.callbacks("GarbageCollectionFinished")
    moved2 = trace.callbacks("MovedReferences2")
    moved1 = trace.callbacks("MovedReferences")
    return {
        "gc_started": len(started),
        "gc_finished": len(finished),
        "moved_references2_calls": len(moved2),
        "moved_references2_ranges": sum(int(c.args.get("cMovedObjectIDRanges", 0)) for c in moved2),
        "moved_references_calls": len(moved1),
        "counts": trace.final_counts(),
    }


def summarize(result: RunResult) -> dict[str, Any]:
    """The JSON form of one run: the result plus what the trace shows."""
    data: dict[str, Any] = json.loads(result.model_dump_json())
    trace = result.trace
    if trace is not None:
        header = trace.header
        data["runtime_reported"] = header.runtime.version if header and header.runtime else None
        data["walks"] = walk_summaries(trace)
        data["expected_stack"] = expected_stack(trace)
        data["gc"] = gc_summary(trace)
        data["probe_errors"] = [f"{r.where}: {r.what}" for r in trace.of_kind(ProbeErrorRecord)]
        data["marks"] = [m.name for m in trace.marks()]
    return data


def _frame_line(frame: dict[str, Any]) -> str:
    if frame["funcId"] == 0:
        return f"  #{frame['index']:<2} [run of unmanaged frames] ip=0x{frame['ip']:x}"
    name = f"{frame.get('type') or '?'}::{frame.get('method') or '?'}"
    token = f"0x{frame['token']:08x}" if isinstance(frame.get("token"), int) else "?"
    ctx = ""
    if frame.get("context_rip") is not None:
        same = "=" if frame["context_rip"] == frame["ip"] else "!="
        ctx = f" ctx.rip{same}ip"
    return f"  #{frame['index']:<2} {name} token={token} ip=0x{frame['ip']:x}{ctx}"


def render_text(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['scenario']} on {summary['runtime']} ({summary['runtime_source']}): {summary['outcome']}"
        f" in {summary['seconds']:.2f}s, {summary['record_count']} records, trace {summary['trace_path']}"
    ]
    if summary["outcome"] != Outcome.OK:
        detail = summary.get("signal") or f"exit code {summary.get('exit_code')}"
        lines.append(f"  ! {detail}; last callback: {summary.get('last_callback')}")
        if summary.get("stderr_tail"):
            lines.append("  ! stderr: " + summary["stderr_tail"].splitlines()[-1])
    if summary.get("trace_problem"):
        lines.append(f"  ! trace: {summary['trace_problem']}")
    for error in summary.get("probe_errors", []):
        lines.append(f"  ! probe: {error}")
    for walk in summary.get("walks", []):
        lines.append(
            f"  DoStackSnapshot [{walk['experiment']}] infoFlags={walk['infoFlags']}"
            f" -> 0x{walk['hr']:08X}, {len(walk['frames'])} frames (leaf first):"
        )
        lines.extend(_frame_line(f) for f in walk["frames"])
    expected = summary.get("expected_stack")
    if expected:
        lines.append(
            f"  scenario's own stack (reflection): {len(expected)} frames, leaf "
            f"{expected[0].get('type')}::{expected[0].get('method')}"
        )
    gc = summary.get("gc") or {}
    if gc.get("gc_started") or gc.get("moved_references2_calls"):
        lines.append(
            f"  GC: {gc['gc_started']} started / {gc['gc_finished']} finished; MovedReferences2:"
            f" {gc['moved_references2_calls']} calls, {gc['moved_references2_ranges']} ranges;"
            f" MovedReferences: {gc['moved_references_calls']} calls"
        )
        if gc.get("counts"):
            lines.append("  counted: " + ", ".join(f"{k}={v}" for k, v in sorted(gc["counts"].items())))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario name (a folder under conformance/scenarios)")
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--plan", type=Path, help="a plan JSON file to use instead of the scenario's own")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="watchdog seconds per run")


def _load_plan(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        value = json.loads(path.read_text())
    except OSError as exc:
        raise HarnessError(f"--plan {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise HarnessError(f"--plan {path}:{exc.lineno}: not JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise HarnessError(f"--plan {path}: a plan must be a JSON object")
    return value


def main(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise HarnessError(f"--timeout {args.timeout}: must be a positive number of seconds")
    results = run_scenario(
        args.scenario, args.runtime, dotnet=args.dotnet, plan=_load_plan(args.plan), timeout_s=args.timeout
    )
    summaries = [summarize(r) for r in results]
    if args.json:
        print(json.dumps(summaries, indent=2, sort_keys=True))
    else:
        print("\n\n".join(render_text(s) for s in summaries))
    for result in results:
        if result.outcome is not Outcome.OK:
            print(f"profharness: {result.describe_failure()}", file=sys.stderr)
    return 0 if all(r.outcome is Outcome.OK for r in results) else 1
