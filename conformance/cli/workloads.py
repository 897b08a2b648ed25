"""``profharness workloads``: the workloads ``validate --workload NAME`` runs (issue 21): each one's name, its
default duration (``--duration`` changes it) or ``fixed`` for a fixed course, its summary, what it exercises,
its ground truth (its marked points: the thread, its frames, what a rule judges there) and what a runtime
cannot show. ``--json`` prints the manifests as a JSON list."""

from __future__ import annotations

import argparse
import json

from conformance.validator import workload

HELP = "list the workloads validate runs a profiler on (--workload NAME)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the manifests as a JSON list")


def _duration(w: workload.Workload) -> str:
    return f"{w.seconds:g} s" if w.seconds is not None else "fixed"


def render(items: list[workload.Workload]) -> str:
    lines: list[str] = []
    width = max((len(w.name) for w in items), default=0)
    for w in items:
        default = " (default)" if w.name == workload.CLI_DEFAULT else ""
        lines.append(f"{w.name.ljust(width)}  {_duration(w):>6}  {w.summary}{default}")
        lines.append("  exercises:")
        lines.extend(f"    - {e}" for e in w.exercises)
        if w.ground_truth:
            lines.append("  ground truth:")
            for g in w.ground_truth:
                lines.append(f"    - after mark {g.mark}: thread {g.thread!r} inside {' < '.join(g.frames)}")
                if g.judges:
                    lines.append(f"      judged: {g.judges}")
        for prefix, reasons in w.not_applicable.items():
            for count, why in reasons.items():
                lines.append(f"  not on {prefix}: {count}: {why}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    items = workload.workloads()
    if args.json:
        print(json.dumps([w.model_dump(mode="json", exclude={"folder"}) for w in items], indent=2))
    else:
        print(render(items))
    return 0
