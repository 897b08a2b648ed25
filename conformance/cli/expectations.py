"""``profharness expectations``: check the expectation files, or propose the edit that describes a run.

``profharness expectations update --from RUN.json`` reads a suite result (``profharness conformance --json
RUN.json``) and prints, as a unified diff, the edit that would make the expectation files describe that run:
a new runtime joins the entries whose status and disagreements it shares, and gets new entries (with a
``why`` placeholder the loader refuses until a human writes the reason) for the rest. ``--write`` applies it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.cli import read_json_object
from conformance.core.errors import InputError
from conformance.core.fsio import atomic_write_text
from conformance.suite.expectations import WHY_PLACEHOLDER, load_expectations, propose_update

HELP = "check the expectation files, or propose the edit that makes them describe a suite run (update)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["check", "update"],
        help="check: load every file and list its entries; update: propose the edit for a run",
    )
    parser.add_argument(
        "--from",
        dest="run",
        type=Path,
        metavar="RUN.json",
        help="update: a suite result written by `profharness conformance --json`",
    )
    parser.add_argument("--write", action="store_true", help="update: apply the proposed edit")
    parser.add_argument("--expectations", type=Path, metavar="DIR", help="expectation files folder")


def _read_run(path: Path) -> dict[str, object]:
    hint = "a suite result (write one with `profharness conformance --json`)"
    return read_json_object("--from", path, hint)


def _check(args: argparse.Namespace) -> int:
    found = load_expectations(args.expectations)
    for entry in found.entries:
        status = "/".join(s.value for s in entry.status)
        print(
            f"{entry.clause:<7} {status:<16} {','.join(entry.runtimes):<16} {len(entry.disagreements):>3}"
            f" line(s)  {entry.source}"
        )
    print(f"{len(found.entries)} entries in {found.directory}")
    return 0


def _update(args: argparse.Namespace) -> int:
    if args.run is None:
        raise InputError(
            "expectations update needs --from RUN.json (from `profharness conformance --json`)"
        )
    proposal = propose_update(_read_run(args.run), args.expectations)
    diff = proposal.diff()
    for note in proposal.notes:
        print(f"profharness: note: {note}", file=sys.stderr)
    if not diff:
        print("the expectation files already describe this run")
        return 0
    print(diff, end="", flush=True)
    if args.write:
        for path in proposal.changed:
            atomic_write_text(path, proposal.new[path])
        print(f"wrote {len(proposal.changed)} file(s)", file=sys.stderr)
    else:
        print("(not written: add --write to apply)", file=sys.stderr)
    if WHY_PLACEHOLDER in diff:
        print(
            f"profharness: replace every {WHY_PLACEHOLDER} with the reason the runtime differs;"
            " the suite refuses the files until then",
            file=sys.stderr,
        )
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "update":
        return _update(args)
    if args.write or args.run:
        raise InputError("--from and --write belong to `expectations update`")
    return _check(args)
