"""``profharness validate PROFILER.so --clsid {...}``: a third-party profiler behind the recording proxy on
the validator's scenarios (or your app) on live runtimes; prints one row per finding.

The enter/leave hooks the profiler registers (SetEnterLeaveFunctionHooks2/3) are also given to the hook
checker (``check-hook``); a hook it cannot read (no symbol) is a ``note:`` line, not a finding.

Exit status: 0 clean, 1 findings, 2 bad input (one line: missing file, bad CLSID, not an ELF .so), 3 the
harness failed (one line: a proxy that does not build, a runtime that cannot be installed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.core import fsio
from conformance.validator import api
from conformance.validator.launch import DEFAULT_HANG_S, ValidatorInputError, parse_env

HELP = "validate a profiler .so against the author rules, behind a recording proxy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiler", type=Path, help="the profiler shared object (.so) to validate")
    parser.add_argument(
        "--clsid", required=True, help="the profiler's CLSID, {XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}"
    )
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument("--app", type=Path, help="run this app (.dll) instead of the validator's scenarios")
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
        "--hang-seconds",
        type=float,
        default=DEFAULT_HANG_S,
        help="a callback open longer than this is a hang (default %(default)s)",
    )
    parser.add_argument("--json", type=Path, metavar="F", help="write every run and finding as JSON")
    parser.add_argument("--junit", type=Path, metavar="F", help="write a JUnit report (a case per rule)")
    parser.add_argument("--html", type=Path, metavar="F", help="write an HTML report")


def main(args: argparse.Namespace) -> int:
    if args.hang_seconds <= 0:
        raise ValidatorInputError(f"--hang-seconds {args.hang_seconds}: must be a positive number of seconds")
    result = api.validate(
        args.profiler,
        args.clsid,
        runtime=args.runtime,
        app=args.app,
        env=parse_env(args.env),
        preload=args.preload,
        hang_s=args.hang_seconds,
        dotnet=args.dotnet,
    )
    print(api.table(result))
    if args.json:
        fsio.atomic_write_text(args.json, api.to_json(result))
    if args.junit:
        fsio.atomic_write_text(args.junit, api.to_junit(result))
    if args.html:
        fsio.atomic_write_text(args.html, api.to_html(result))
    return 1 if result.findings else 0
