"""``profharness fuzz-runtime``: generated C# programs, run live, judged by the suite, findings shrunk.

Known shapes first (one small program per shape of the grammar, on every selected runtime), then rounds of
hypothesis-generated programs; each finding (a verdict the expectation files do not explain, or a run that
crashed, hung or failed) is shrunk to the smallest program that still shows it and written under ``--out``
as a ready scenario folder (``app.cs``, ``plan.json``, ``finding.json``). ``--known-only`` is the CI profile
(every shape once, no generation). Prints one line per program and a summary; exit code 1 when anything was
found (2 bad input, 3 the harness failed; 130/143 SIGINT/SIGTERM: the runs are ended, what was found
before is printed and kept, a shrink cut short as far as it got). See ``conformance/fuzz_runtime``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from pathlib import Path

from conformance.core import interrupt, runtimes
from conformance.core.errors import EXIT_CLEAN, EXIT_FINDINGS, InputError
from conformance.fuzz_runtime.differential import Differential
from conformance.fuzz_runtime.search import FuzzSettings, RuntimeFuzzReport, fuzz
from conformance.fuzz_runtime.strategies import FAMILIES

HELP = "fuzz the runtimes with generated C# programs judged by the suite; shrink what is found"

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``30m`` or ``2h``."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (like 90, 90s, 30m, 2h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="program family (default: all)")
    parser.add_argument("--max-examples", type=int, default=50, help="generated programs per round (50)")
    parser.add_argument("--seed", type=int, help="hypothesis seed (default: random)")
    parser.add_argument("--time", type=duration, help="time budget of the whole run (90s, 30m, 2h)")
    parser.add_argument("--shrink-time", type=duration, default=300.0, help="budget of one shrink (300s)")
    parser.add_argument("--max-rounds", type=int, default=10, help="hypothesis rounds, one finding each (10)")
    parser.add_argument("--out", type=Path, help="write each finding's program here as a scenario folder")
    parser.add_argument("--database", type=Path, help="hypothesis example database folder (share it)")
    parser.add_argument("--known-only", action="store_true", help="the known shapes only (the CI profile)")
    parser.add_argument("--no-known", action="store_true", help="skip the known shapes")
    parser.add_argument("--keep-runs", action="store_true", help="keep every run folder, not only findings'")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _check_folder(path: Path, option: str) -> None:
    """A folder to create or fill: one line naming ``option`` when it cannot be."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: exists and is not a folder")
    if not path.exists() and not path.parent.is_dir():
        raise InputError(f"{option} {path}: the folder {path.parent} does not exist")


def summary(report: RuntimeFuzzReport) -> list[str]:
    lines = [
        f"{report.programs} programs, {report.runs} runs in {report.seconds:.1f}s; compile "
        f"{report.compile_seconds:.1f}s ({report.compile_cache_hits} cache hits); run "
        + ", ".join(
            f"{rt} {secs:.1f}s/{report.runs_per_runtime.get(rt, 0)}"
            for rt, secs in sorted(report.run_seconds.items())
        ),
        f"{len(report.shapes)} shapes visited",
    ]
    for kept in report.findings:
        f = kept.finding
        where = f" -> {kept.folder}" if kept.folder else ""
        lines.append(
            f"FINDING {f.clause} on {f.runtime} ({f.status}, {kept.origin}): {kept.program.describe()}{where}"
        )
        lines.append(f"  {f.message}")
    lines.extend(f"note: {n}" for n in report.notes)
    return lines


def main(args: argparse.Namespace) -> int:
    if args.known_only and args.no_known:
        raise InputError("fuzz-runtime: --known-only and --no-known exclude each other")
    if args.max_examples < 1 or args.max_rounds < 0:
        raise InputError("fuzz-runtime: --max-examples must be >= 1 and --max-rounds >= 0")
    for option, path in (("--out", args.out), ("--database", args.database)):
        if path is not None:
            _check_folder(path, option)
    settings = FuzzSettings(
        families=tuple(args.family or FAMILIES),
        max_examples=args.max_examples,
        seed=args.seed,
        time_s=args.time,
        shrink_s=args.shrink_time,
        known_first=not args.no_known,
        generate=not args.known_only,
        max_rounds=args.max_rounds,
        out=args.out,
        database=args.database,
    )
    selected = runtimes.select(args.runtime, args.dotnet)
    differential = Differential(selected, keep_runs=args.keep_runs)
    log = (lambda line: None) if args.json else (lambda line: print(line, flush=True))
    report = fuzz(differential, settings, log=log)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
    else:
        for line in summary(report):
            print(line)
    if report.interrupted:
        signum = interrupt.requested() or signal.SIGINT
        where = f"; kept under {args.out}" if args.out is not None and report.findings else ""
        name = interrupt.signal_name(signum)
        print(f"profharness: interrupted by {name} after {report.programs} program(s): "
              f"{len(report.findings)} finding(s) found before it{where}", file=sys.stderr)  # fmt: skip
        return 128 + signum
    return EXIT_FINDINGS if report.findings else EXIT_CLEAN
