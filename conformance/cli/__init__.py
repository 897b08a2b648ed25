"""The ``profharness`` command.

Subcommands live in their own modules and are registered in :data:`COMMANDS` (name -> module). A module
provides ``HELP: str``, ``add_arguments(parser)`` and ``main(args) -> int``. A module that does not exist
(yet) simply has no subcommand.

Exit status of every command: 0 clean, 1 findings (what the command judges went wrong), 2 usage or bad
input (argparse's errors, :class:`~conformance.core.errors.InputError`), 3 the harness failed (any other
:class:`~conformance.core.errors.HarnessError`, or an unexpected exception: one line, the traceback kept in
a file it names), 130/143 interrupted by SIGINT/SIGTERM (:mod:`conformance.core.interrupt`: the whole
process tree is ended; a command that judged something writes it first and says so).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from conformance.core import interrupt
from conformance.core.errors import EXIT_CLEAN, EXIT_FINDINGS, EXIT_HARNESS, HarnessError, InputError


def read_json_object(option: str, path: Path, what: str) -> dict[str, Any]:
    """The JSON object in the file ``path`` an option (``--plan``, ``--from``) names; a file that cannot be
    read, is not JSON or is no object is one :class:`InputError` line naming the option, the file (and the
    line) and ``what`` the object should be."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{option} {path}:{exc.lineno}: not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{option} {path}: not {what}")
    return data


def reports_exit(
    outputs: Mapping[str, Path], problems: Sequence[str], *, interrupted: bool, judged: str, findings: bool
) -> int:
    """A judging command's end, its result printed and its reports (``outputs``: option -> path) written:
    each of ``problems`` on stderr; after a signal cut the run short, what was ``judged`` before it and which
    reports were written (those without a problem), 128 + the signal's number; else EXIT_HARNESS when a
    report was not delivered (the paths were checked before the run), EXIT_FINDINGS or EXIT_CLEAN."""
    for problem in problems:
        print(f"profharness: error: {problem}", file=sys.stderr)
    if interrupted:
        signum = interrupt.requested() or signal.SIGINT
        written = [f"{option} {path}" for option, path in outputs.items()
                   if not any(p.startswith(f"{option} ") for p in problems)]  # fmt: skip
        where = f"; written to {', '.join(written)}" if written else ""
        name = interrupt.signal_name(signum)
        print(f"profharness: interrupted by {name}: {judged}{where}", file=sys.stderr)
        return 128 + signum
    if problems:
        return EXIT_HARNESS
    return EXIT_FINDINGS if findings else EXIT_CLEAN


#: Subcommand name -> module implementing it.
COMMANDS: dict[str, str] = {
    "runtimes": "conformance.cli.runtimes",
    "run": "conformance.cli.run",
    "schema": "conformance.cli.schema",
    "clauses": "conformance.cli.clauses",
    "conformance": "conformance.cli.conformance",
    "capture": "conformance.cli.capture",
    "replay": "conformance.cli.replay",
    "expectations": "conformance.cli.expectations",
    "check-hook": "conformance.cli.check_hook",
    "validate": "conformance.cli.validate",
    "workloads": "conformance.cli.workloads",
    "skeleton": "conformance.cli.skeleton",
    "fuzz": "conformance.cli.fuzz",
    "fuzz-runtime": "conformance.cli.fuzz_runtime",
    "runs": "conformance.cli.runs",
    "trace": "conformance.cli.trace",
}


def _load(module_name: str) -> ModuleType:
    return importlib.import_module(module_name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="profharness",
        description="Check the .NET profiling API against its documented contract on live runtimes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in COMMANDS.items():
        try:
            module = _load(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            # One broken command must not take the others down: it answers with one line instead.
            broken = sub.add_parser(name, help=f"(unavailable: {exc})")
            broken.add_argument("rest", nargs=argparse.REMAINDER)
            broken.set_defaults(_broken=f"command {name!r} is unavailable: {exc}")
            continue
        command_parser = sub.add_parser(name, help=getattr(module, "HELP", None))
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_broken", None):
        print(f"profharness: error: {args._broken}", file=sys.stderr)
        return EXIT_HARNESS
    try:
        with interrupt.handling():
            result: int = args._module.main(args)
    except HarnessError as exc:
        print(f"profharness: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except interrupt.Interrupted as exc:  # a command that keeps results catches it itself
        print(f"profharness: interrupted by {exc.name}; its processes were ended", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("profharness: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``profharness ... | head``): stop quietly, as other command-line tools do.
        # Point stdout at /dev/null so the interpreter's final flush cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:  # a harness bug: one line, never a traceback on the terminal
        print(f"profharness: internal error: {_one_line(exc)}{_keep_traceback(exc)}", file=sys.stderr)
        return EXIT_HARNESS
    return result


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _keep_traceback(exc: BaseException) -> str:
    """Write ``exc``'s traceback to a temporary file; `` (traceback: PATH)``, or nothing when it cannot."""
    try:
        with tempfile.NamedTemporaryFile(
            "w", prefix="profharness-traceback-", suffix=".txt", delete=False
        ) as handle:
            handle.write("".join(traceback.format_exception(exc)))
    except OSError:
        return ""
    return f" (traceback: {handle.name})"


if __name__ == "__main__":
    sys.exit(main())
