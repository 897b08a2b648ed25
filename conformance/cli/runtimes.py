"""``profharness runtimes``: list the runtimes the harness can use; ``profharness runtimes install``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from conformance.core import runtimes
from conformance.core.runtimes import Runtime

HELP = "list the .NET runtimes available to the harness, or install the bundled ones"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=["list", "install"],
        default="list",
        help="list (default): show runtimes; install: download and unpack the bundled runtimes",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument(
        "--dotnet", type=Path, metavar="PATH", help="also use the runtimes of this dotnet root or executable"
    )
    parser.add_argument(
        "--version", metavar="SPEC", help="install: only the bundled runtimes matching SPEC (e.g. 8.0)"
    )


def _row(rt: Runtime, installed: bool = True) -> dict[str, object]:
    return {
        "version": rt.version,
        "host": str(rt.host),
        "framework_dir": str(rt.framework_dir),
        "source": rt.source,
        "tfm": rt.tfm,
        "env": rt.env(),
        "installed": installed,
    }


def _print_table(rows: list[dict[str, object]]) -> None:
    headers = ("version", "host", "source")
    cells = [
        [str(row["version"]), str(row["host"]) if row["installed"] else "(not installed)", str(row["source"])]
        for row in rows
    ]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for cell in cells:
        print("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip())


def _list(args: argparse.Namespace) -> int:
    rows = [_row(rt) for rt in runtimes.discover(args.dotnet, install=False)]
    listed = {row["version"] for row in rows if str(row["source"]).startswith("bundled")}
    for bundled in runtimes.BUNDLED:
        if bundled.version not in listed:
            rows.append(_row(bundled.runtime(), installed=False))
    rows.sort(key=lambda row: (runtimes.version_key(str(row["version"])), str(row["source"])))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows)
        if any(not row["installed"] for row in rows):
            print("(install the bundled runtimes with `profharness runtimes install`)")
    return 0


def _install(args: argparse.Namespace) -> int:
    rows: list[dict[str, object]] = []
    for bundled in runtimes.bundled_matching(args.version):
        started = time.monotonic()
        was_installed = bundled.is_installed()
        (rt,) = runtimes.install_bundled(bundled.version)
        runtimes.probe_host(rt)
        elapsed = time.monotonic() - started
        row = _row(rt)
        row["seconds"] = round(elapsed, 3)
        rows.append(row)
        if not args.json:
            state = "already installed" if was_installed else f"installed in {elapsed:.1f} s"
            print(f"{rt.version}: {state}: {rt.host}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "install":
        return _install(args)
    return _list(args)
