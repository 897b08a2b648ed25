"""``profharness conformance``: the suite on live runtimes, the clause x runtime matrix and the reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.suite import report
from conformance.suite.orchestrate import run_suite

HELP = "run the conformance suite on live runtimes and print the clause x runtime matrix"


def _progress_bar(done: int, total: int, label: str) -> None:
    if not sys.stderr.isatty():
        print(f"[{done}/{total}] {label}", file=sys.stderr)
        return
    width = 30
    filled = width * done // max(total, 1)
    bar = "#" * filled + "-" * (width - filled)
    end = "\n" if done == total else ""
    print(f"\r[{bar}] {done}/{total} {label[:50]:<50}", end=end, file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument(
        "--clause",
        action="append",
        metavar="ID",
        help="only these clauses (repeatable, e.g. --clause DSS-16)",
    )
    parser.add_argument("--json", type=Path, metavar="F", help="write every verdict as JSON to F")
    parser.add_argument("--junit", type=Path, metavar="F", help="write a JUnit XML report to F")
    parser.add_argument(
        "--html", type=Path, metavar="F", help="write an HTML report (matrix + evidence) to F"
    )
    parser.add_argument("--expectations", type=Path, metavar="DIR", help="expectation files folder (tests)")


def main(args: argparse.Namespace) -> int:
    result = run_suite(
        args.runtime,
        clauses=args.clause,
        dotnet=args.dotnet,
        expectations_dir=args.expectations,
        progress=_progress_bar,
    )
    print(report.render_matrix(result))
    if args.json:
        report.write_json(result, args.json)
    if args.junit:
        report.write_junit(result, args.junit)
    if args.html:
        report.write_html(result, args.html)
    for verdict in result.failures:
        print(f"profharness: {verdict.outcome_message}", file=sys.stderr)
    return 0 if result.ok else 1
