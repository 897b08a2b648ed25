"""``profharness validate PROFILER.so --clsid {...}``: a third-party profiler behind the recording proxy on
one of the validator's workloads (``--workload NAME``, default ``standard``; ``--duration S``; ``profharness
workloads`` lists them) or on your app (``--app``, which replaces the workload) on live runtimes.

Prints one line per finding group (clause, title, runtimes, count, the profiler's site, the first message;
notes after them, marked ``note``), then the runs table and a summary line; ``--verbose`` adds each group's
documentation sentence, fix and occurrences. ``--timeout SECONDS`` bounds each run (the harness's watchdog,
default 600), ``--hang-seconds`` a callback (the proxy's hang limit, default 10). ``--json``/``--junit``/
``--html`` write the reports (:mod:`conformance.validator.report`); their paths are checked before anything
runs.

Races made reproducible (issue 21): ``--repeat N`` makes each run N times; ``--perturb SEED`` has the
recording proxy delay chosen points of the run by a schedule the seed alone decides (every call the profiler
makes during its Initialize, Initialize's return, callback entries and returns, ThreadCreated,
ThreadDestroyed, Shutdown; at most 50 ms each, within a budget per run under half the hang limit:
:mod:`conformance.validator.perturb`). With both, run i (from 0) uses seed SEED+i; ``--perturb SEED`` alone
replays exactly the schedule of SEED. ``--compare`` adds N unperturbed runs to the N perturbed ones. Each
group then says in how many runs it appeared, per runtime: ``in 10/10 perturbed runs (seeds 7-16) and 2/10
unperturbed runs on 8.0.4``; the runs table gives each run's seed and the delays applied.

``--walk-quality`` (issue 24): each DoStackSnapshot the profiler makes of a thread parked in its own signal
handler is captured by the proxy and replayed under the emulator; each run then prints, per place, the
profiler's walks against the replay's truth (:mod:`conformance.validator.walkq`).

``--attach [--attach-after S] [--attach-data TEXT]`` (:mod:`conformance.cli.attach_options`): the app starts
without the profiler, which is attached while it runs through the runtime's diagnostics IPC.

The enter/leave hooks the profiler registers (SetEnterLeaveFunctionHooks2/3) are also given to the hook
checker (``check-hook``); a hook it cannot read (no symbol) is a ``note:`` line, not a finding.

Exit status: 0 clean, 1 findings, 2 bad input (one line: missing file, bad CLSID, not an ELF .so, a report
path that cannot be written), 3 the harness failed (one line: a proxy that does not build, a runtime that
cannot be installed, a report that could not be written at the end), 130/143 SIGINT/SIGTERM: the process
tree is ended, what was judged before is printed and written to the reports asked for (``interrupted``).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from conformance.cli import attach_options, reports_exit
from conformance.core import fsio, interrupt
from conformance.validator import api, report, workload
from conformance.validator.launch import DEFAULT_HANG_S, DEFAULT_TIMEOUT_S, ValidatorInputError, parse_env
from conformance.validator.result import ValidationResult

HELP = "validate a profiler .so against the author rules, behind a recording proxy"

#: option -> renderer, in the order the reports are written
REPORTS: dict[str, Callable[[ValidationResult], str | bytes]] = {
    "--json": report.to_json,
    "--junit": report.to_junit,
    "--html": report.to_html,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiler", type=Path, help="the profiler shared object (.so) to validate")
    parser.add_argument(
        "--clsid", required=True, help="the profiler's CLSID, {XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}"
    )
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument("--app", type=Path, help="run this app (.dll) instead of a workload")
    add_workload_arguments(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for the profiled process (repeatable)",
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        type=Path,
        metavar="LIB",
        help="a library the profiler needs LD_PRELOADed (repeatable)",
    )
    parser.add_argument(
        "--inject-deadlock",
        action="store_true",
        help="once a run, raise the profiler's own signal on a thread while it holds the allocator lock: a "
        "signal handler that allocates deadlocks there and is reported (ASYNC-07)",
    )
    parser.add_argument(
        "--hang-seconds",
        type=float,
        default=DEFAULT_HANG_S,
        help="a callback open longer than this is a hang (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="the harness's watchdog: a run taking longer is ended, outcome hung (default %(default)s)",
    )
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="make each run N times (default 1); each group says in how many it "
                        "appeared")  # fmt: skip
    parser.add_argument("--perturb", type=int, metavar="SEED",
                        help="delay chosen points (Initialize's calls and return, callbacks, thread "
                        "creation and destruction, Shutdown) by the schedule of SEED; with --repeat N, "
                        "run i (from 0) uses seed SEED+i; alone, it replays exactly that seed's "
                        "schedule")  # fmt: skip
    parser.add_argument("--compare", action="store_true",
                        help="with --perturb: also make N unperturbed runs, to show how often a finding "
                        "appears without perturbation")  # fmt: skip
    parser.add_argument("--walk-quality", action="store_true",
                        help="capture each DoStackSnapshot of a thread parked in the profiler's signal "
                        "handler (its registers and stack at the call), replay it, and print per place how "
                        "the profiler's walks compare with the replay's truth: frames got, frames the truth "
                        "has, missing and extra frames, failed walks (the JSON carries it)")  # fmt: skip
    attach_options.add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print each group's documented sentence, fix and occurrences")  # fmt: skip
    parser.add_argument("--json", type=Path, metavar="F", help="write the result as JSON (schema: "
                        "`profharness schema validate`)")  # fmt: skip
    parser.add_argument("--junit", type=Path, metavar="F",
                        help="write a JUnit report (a suite per runtime, a case per clause)")  # fmt: skip
    parser.add_argument("--html", type=Path, metavar="F", help="write an HTML report")


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """--workload and --duration (issue 21; ``profharness workloads`` lists the workloads)."""
    parser.add_argument("--workload", metavar="NAME",
                        help=f"the workload to run (default {workload.CLI_DEFAULT}; `profharness workloads` "
                        "lists them); --app replaces it")  # fmt: skip
    parser.add_argument("--duration", type=float, metavar="S",
                        help="how long the workload runs, in seconds (default: its own)")  # fmt: skip


def workload_options(args: argparse.Namespace) -> dict[str, object]:
    """api.validate's workload, duration_s: the command's default workload unless --app is given."""
    chosen = args.workload
    if chosen is None and args.app is None:
        chosen = workload.CLI_DEFAULT
    return {"workload": chosen, "duration_s": args.duration}


def outputs(args: argparse.Namespace) -> dict[str, Path]:
    """option -> path of every report asked for."""
    chosen = {option: getattr(args, option.removeprefix("--")) for option in REPORTS}
    return {option: path for option, path in chosen.items() if path is not None}


def write_reports(result: ValidationResult, paths: dict[str, Path]) -> list[str]:
    """Write every report asked for, each on its own (atomically); the one-line problems of those that
    could not be written. When any failed, the JSON result is kept: in --json, or in a temporary file."""
    problems: list[str] = []
    for option, path in paths.items():
        try:
            fsio.atomic_write_bytes(path, _bytes(REPORTS[option](result)))
        except OSError as exc:
            problems.append(f"{option} {path}: could not write the report ({exc.strerror or exc})")
    if not problems:
        return problems
    if "--json" in paths and not any(p.startswith("--json ") for p in problems):
        problems.append(f"the other reports were written; the result is in {paths['--json']}")
        return problems
    try:
        with tempfile.NamedTemporaryFile("w", prefix="profharness-validate-", suffix=".json",
                                         delete=False) as handle:  # fmt: skip
            handle.write(report.to_json(result))
        problems.append(f"the result is kept in {handle.name}")
    except OSError as exc:
        problems.append(f"the result could not be kept either ({exc})")
    return problems


def _bytes(document: str | bytes) -> bytes:
    return document.encode("utf-8") if isinstance(document, str) else document


def main(args: argparse.Namespace) -> int:
    paths = outputs(args)
    fsio.check_output_paths(paths)  # before anything runs
    for option, seconds in (("--hang-seconds", args.hang_seconds), ("--timeout", args.timeout)):
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValidatorInputError(f"{option} {seconds}: must be a positive number of seconds")
    attach = attach_options.plan(args)
    result = api.validate(
        args.profiler,
        args.clsid,
        runtime=args.runtime,
        app=args.app,
        env=parse_env(args.env),
        preload=args.preload,
        hang_s=args.hang_seconds,
        dotnet=args.dotnet,
        timeout_s=args.timeout,
        repeat=args.repeat,
        perturb=args.perturb,
        compare=args.compare,
        **workload_options(args),  # type: ignore[arg-type]
        attach=attach,
        inject_deadlock=args.inject_deadlock,
        walk_quality=args.walk_quality,
    )
    with interrupt.deferred():  # the result is whole: a signal now does not cut the reports short
        print(report.render_text(result, verbose=args.verbose), flush=True)
        problems = write_reports(result, paths)
    judged = f"{len(result.runs)} run(s) judged before it, {len(result.findings)} finding group(s)"
    return reports_exit(paths, problems, interrupted=result.interrupted, judged=judged,
                        findings=bool(result.findings))
