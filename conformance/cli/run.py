"""``profharness run SCENARIO``: one scenario under the probe on live runtimes, summarised."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conformance.cli import read_json_object
from conformance.core.errors import InputError
from conformance.core.runner import DEFAULT_TIMEOUT_S, RunOutcome, RunResult, run_scenario
from conformance.core.trace import ProbeErrorRecord, Trace

HELP = "run one scenario under the probe on live runtimes and summarise its trace"


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
    if summary["outcome"] != RunOutcome.OK:
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
    return read_json_object("--plan", path, "a plan (a JSON object)")


def main(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise InputError(f"--timeout {args.timeout}: must be a positive number of seconds")
    results = run_scenario(
        args.scenario, args.runtime, dotnet=args.dotnet, plan=_load_plan(args.plan), timeout_s=args.timeout
    )
    summaries = [summarize(r) for r in results]
    if args.json:
        print(json.dumps(summaries, indent=2, sort_keys=True))
    else:
        print("\n\n".join(render_text(s) for s in summaries))
    for result in results:
        if result.outcome is not RunOutcome.OK:
            print(f"profharness: {result.describe_failure()}", file=sys.stderr)
    return 0 if all(r.outcome is RunOutcome.OK for r in results) else 1
