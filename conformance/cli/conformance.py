"""``profharness conformance``: the suite on live runtimes, the clause x runtime matrix and the reports.

Every output path is checked before any runtime starts (a one-line error, exit 2); the reports are written
atomically at the end, each on its own: when one cannot be written the others still are, and the JSON
result is kept in a file the message names (exit 3).

Exit status: 0 nothing unexpected, 1 anything unexpected (an undocumented divergence, an error verdict, a
stale expectation), 2 bad input, 3 the harness failed, 130/143 SIGINT/SIGTERM: the runs under way are
killed, the verdicts judged before are printed and written (``interrupted`` in the JSON), one line says so.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conformance.cli import reports_exit
from conformance.core import interrupt
from conformance.core.fsio import check_output_paths
from conformance.suite import report
from conformance.suite.orchestrate import ProgressFn, run_suite
from conformance.suite.verdicts import SuiteResult

HELP = "run the conformance suite on live runtimes and print the clause x runtime matrix"

#: option -> writer, in the order the reports are written
REPORTS: dict[str, Callable[[SuiteResult, Path], None]] = {
    "--json": report.write_json,
    "--junit": report.write_junit,
    "--html": report.write_html,
}


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


def _outputs(args: argparse.Namespace) -> dict[str, Path]:
    """option -> path of every report asked for."""
    chosen = {option: getattr(args, option.removeprefix("--")) for option in REPORTS}
    return {option: path for option, path in chosen.items() if path is not None}


def check_outputs(outputs: dict[str, Path]) -> None:
    """Every report path must be writable before any runtime starts (finding 7 of issue 7)."""
    check_output_paths(outputs)


@contextmanager
def progress_reporter(stream: Console) -> Iterator[ProgressFn]:
    """A rich progress bar on a terminal; one plain line per finished run otherwise."""
    if not stream.is_terminal:

        def plain(done: int, total: int, label: str) -> None:
            if done:
                print(f"[{done}/{total}] {label}", file=stream.file, flush=True)

        yield plain
        return
    bar = Progress(
        TextColumn("[bold]conformance"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=stream,
        transient=False,
    )
    task = bar.add_task("starting", total=None)

    def update(done: int, total: int, label: str) -> None:
        bar.update(task, completed=done, total=total, description=label)

    with bar:
        yield update


def write_reports(result: SuiteResult, outputs: dict[str, Path]) -> list[str]:
    """Write every report (each on its own); the one-line problems of those that failed."""
    problems: list[str] = []
    for option, path in outputs.items():
        try:
            REPORTS[option](result, path)
        except OSError as exc:
            problems.append(f"{option} {path}: could not write the report ({exc.strerror or exc})")
    if not problems:
        return problems
    json_failed = any(p.startswith("--json ") for p in problems)
    if "--json" in outputs and not json_failed:
        problems.append(f"the other reports were written; the result is in {outputs['--json']}")
        return problems
    # keep the result somewhere: its JSON report failed too, or none was asked for
    with tempfile.NamedTemporaryFile(
        "w", prefix="profharness-result-", suffix=".json", delete=False
    ) as handle:
        kept = Path(handle.name)
    try:
        report.write_json(result, kept)
        problems.append(f"the result is kept in {kept}")
    except OSError as exc:
        problems.append(f"the result could not be kept either ({exc})")
    return problems


def main(args: argparse.Namespace) -> int:
    outputs = _outputs(args)
    check_outputs(outputs)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, highlight=False)
    with progress_reporter(err) as progress:
        result = run_suite(
            args.runtime,
            clauses=args.clause,
            dotnet=args.dotnet,
            expectations_dir=args.expectations,
            progress=progress,
        )
    with interrupt.deferred():  # the result is whole: a signal now does not cut the reports short
        out.print(report.matrix_renderable(result))
        problems = write_reports(result, outputs)
    for verdict in result.failures:
        print(f"profharness: {verdict.outcome_message}", file=sys.stderr)
    judged = f"{len(result.verdicts)} verdict(s) of {len(result.runs)} run(s) judged before it"
    return reports_exit(outputs, problems, interrupted=result.interrupted, judged=judged,
                        findings=not result.ok)
