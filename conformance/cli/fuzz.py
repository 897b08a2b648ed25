"""``profharness fuzz PROFILER.so --clsid {...}``: fuzz a profiler in the fake runtime (issue 11).

Prints progress, then the findings of the first failure (shrunk) and where its reproducer went (it
names the profiler as given and resolved); ``--replay FILE`` plays a reproducer again, from any folder;
PROFILER may be a bare file name in the current folder, as in ``validate``. ``--time S`` starts no
example after S seconds. ``--database DIR`` or ``--database redis://HOST:PORT/N`` keeps hypothesis'
examples there (a Redis database is shared by several machines: each replays first every failure saved
by any of them); without it they go under the harness cache (none with ``--seed``: a seeded run reads no
earlier run's examples), as does the rest of hypothesis' ``.hypothesis/`` folder; ``--probe`` fuzzes
the harness's own probe (its fuzz plan, a new process per example: :mod:`conformance.fuzz.probe`). The
world's class, method and module names are drawn also from the profiler's own string table (the
printable strings of its ``.rodata``; ``--no-strings`` leaves them out) and, with ``--app APP.dll``, from
the metadata of the user's assembly (its types and methods, with their tokens): a profiler that filters on
names meets the names it knows. Hypothesis steers toward examples where the profiler makes more distinct
runtime calls; the summary lists the calls reached (method, examples, calls). Exit
status: 0 clean, 1 findings, 2 bad input (a missing profiler or reproducer, a bad flag, an --app that is
not a .NET assembly, a Redis URL that
is not one or whose server does not answer), 3 the harness failed (the fake runtime does not build or
start), 130/143 SIGINT/SIGTERM: the fake runtime is ended, a failure found before it is printed and its
reproducer saved (as far as it was shrunk).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from conformance.core import interrupt
from conformance.core.errors import EXIT_CLEAN, EXIT_FINDINGS, InputError
from conformance.fuzz.behaviours import DEFAULT_WORLD, WORLDS
from conformance.fuzz.database import default_database
from conformance.fuzz.machine import ENGINES, Session, fuzz, replay
from conformance.fuzz.probe import probe_target

HELP = "fuzz a profiler .so in a model-backed fake runtime (no .NET runtime needed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiler", type=Path, nargs="?", help="the profiler .so (with --replay: optional, "
                        "overrides the one the reproducer names)")
    parser.add_argument("--clsid", help="the profiler's CLSID, {XXXXXXXX-...}")
    parser.add_argument("--max-examples", type=int, default=500, help="examples to run (default 500)")
    parser.add_argument("--seed", type=int, help="make the run deterministic")
    parser.add_argument("--time", type=float, help="start no example after this many seconds (a failure "
                        "found before is still shrunk)")
    parser.add_argument("--database", metavar="DIR|redis://HOST:PORT/N",
                        help="where hypothesis keeps the examples: a folder, or a Redis database several "
                        "machines share (each replays first every failure any of them found); default: "
                        "under the harness cache, none with --seed")
    parser.add_argument("--reproducer", type=Path, default=Path("fuzz-reproducer.json"),
                        help="where a failure's reproducer goes (default fuzz-reproducer.json)")
    parser.add_argument("--replay", type=Path, metavar="FILE", help="play a reproducer again")
    parser.add_argument("--hang-ms", type=int, default=2000, help="a callback running longer is a hang")
    parser.add_argument("--steps", type=int, default=30, help="steps per example at most (default 30)")
    parser.add_argument("--engine", choices=ENGINES, default="program",
                        help="program: one byte string per example (fast; default); stateful: hypothesis' "
                        "rule-based state machine")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the fake runtime's environment ({workdir}: the run's directory)")
    parser.add_argument("--fresh-process", action="store_true",
                        help="a new fake runtime process per example (a profiler with process-wide state)")
    parser.add_argument("--probe", action="store_true", help="fuzz the harness's own probe")
    parser.add_argument("--world", choices=WORLDS, default=DEFAULT_WORLD,
                        help="observed: the fake runtime does only what 3.1/8.0 were seen to do (default); "
                        "documented: also what only a document allows (docs/fake-runtime.md)")
    parser.add_argument("--app", type=Path, metavar="APP.dll",
                        help="draw the world's types, methods and tokens also from this .NET assembly")
    parser.add_argument("--no-strings", action="store_true",
                        help="do not draw names from the profiler's own string table (its .rodata)")
    parser.add_argument("--no-shrink", action="store_true",
                        help="save the first failure as found (quicker; the reproducer is not minimal)")


def _progress(session: Session) -> None:
    print(f"  {session.examples} examples, {session.events} events", flush=True)


def main(args: argparse.Namespace) -> int:
    hang_s = args.hang_ms / 1000
    if args.replay is not None:
        findings = replay(args.replay, profiler=args.profiler, hang_s=hang_s)
        for f in findings:
            print(f.line())
        print(f"{len(findings)} finding(s) replaying {args.replay}")
        return 1 if findings else 0
    env: dict[str, str] = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise InputError(f"--env {item!r} is not NAME=VALUE")
        env[name] = value
    profiler, clsid, fresh = args.profiler, args.clsid, args.fresh_process
    if args.probe:
        target = probe_target()
        profiler, clsid, fresh = target.profiler, target.clsid, target.fresh or args.fresh_process
        env = {**target.env, **env}
    if profiler is None or not clsid:
        raise InputError("fuzz needs PROFILER.so and --clsid (or --probe, or --replay FILE)")
    if args.max_examples < 1:
        raise InputError(f"--max-examples must be at least 1, not {args.max_examples}")
    if args.steps < 1:
        raise InputError(f"--steps must be at least 1, not {args.steps}")
    if args.time is not None and not args.time > 0:
        raise InputError(f"--time must be a number of seconds above 0, not {args.time}")
    database: str | Path | None = args.database
    if database is None and args.seed is None:
        database = default_database()
    print(f"fuzzing {profiler} ({clsid})", flush=True)
    report = fuzz(profiler, clsid, max_examples=args.max_examples, seed=args.seed,
                  time_limit=args.time, database=database, reproducer=args.reproducer, hang_s=hang_s,
                  steps=args.steps, progress=_progress, engine=args.engine, env=env, fresh=fresh,
                  shrink=not args.no_shrink, world=args.world, strings=not args.no_strings, app=args.app)
    print(f"{report.examples} examples, {report.events} events in {report.seconds:.1f} s "
          f"({report.restarts} restart(s) of the fake runtime)")
    app = f", {report.app_types} type(s) of {args.app}" if args.app is not None else ""
    print(f"names drawn also from: {report.strings} string(s) of the profiler{app}; runtime calls reached:")
    for line in report.reach_table():
        print("  " + line)
    for f in report.findings:
        print(f.line())
    if report.findings:
        shrunk = "shrunk " if report.shrunk else ("" if args.no_shrink else "not shrunk (interrupted) ")
        print(f"first failing example: #{report.first_failure}; {shrunk}reproducer "
              f"({report.reproducer_events} events): {report.reproducer}")
    else:
        print("no findings")
    if report.interrupted:
        signum = interrupt.requested() or signal.SIGINT
        kept = f"; reproducer: {report.reproducer}" if report.findings and report.reproducer else ""
        name = interrupt.signal_name(signum)
        print(f"profharness: interrupted by {name} after {report.examples} examples: "
              f"{len(report.findings)} finding(s) found before it{kept}", file=sys.stderr)
        return 128 + signum
    return EXIT_FINDINGS if report.findings else EXIT_CLEAN
