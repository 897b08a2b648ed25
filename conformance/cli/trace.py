"""``profharness trace dump FILE [--jsonl]``: a trace of either format (JSON Lines, or the binary trace of
PROFHARNESS_TRACE_FORMAT=binary, :mod:`conformance.core.binary_trace`) for people: one line per record (seq,
kind, OS thread / managed thread, name, phase, the other fields), or with ``--jsonl`` the records as JSON
Lines, each equal (as parsed) to the line the JSON writer writes, so ``profharness schema trace`` describes
them. A torn last record is left out and said on stderr; a record that does not parse ends the dump with one
line naming ``file:number`` (exit 3)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conformance.core.binary_trace import raw_records
from conformance.core.errors import EXIT_CLEAN, HarnessError, InputError

HELP = "print a trace (JSON Lines or binary) for people, or as JSON Lines (trace dump FILE [--jsonl])"

_HEAD = ("seq", "kind", "os_tid", "tid", "name", "phase")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    dump = sub.add_parser("dump", help="print every record of a trace file")
    dump.add_argument("file", type=Path, help="the trace (trace.jsonl, or a binary trace)")
    dump.add_argument("--jsonl", action="store_true", help="JSON Lines (the JSON writer's records)")


def _line(record: dict[str, Any]) -> str:
    thread = f"{record.get('os_tid')}/{record.get('tid') if record.get('tid') is not None else '-'}"
    name = record.get("name")
    phase = record.get("phase")
    rest = {k: v for k, v in record.items() if k not in _HEAD}
    parts = [f"{record.get('seq'):>7}", f"{record.get('kind', '?'):<11}", f"{thread:<24}"]
    if name is not None:
        parts.append(str(name))
    if phase is not None:
        parts.append(f"[{phase}]")
    if rest:
        parts.append(json.dumps(rest, separators=(",", ":"), ensure_ascii=False))
    return " ".join(parts)


def main(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.is_file():
        raise InputError(f"trace dump {path}: no such file")
    out = sys.stdout
    for number, record, what in raw_records(path):
        if record is None:
            if what is not None:
                raise HarnessError(f"{path}:{number}: {what}")
            print(f"profharness: {path}: the last record is torn (the writer died in it); left out",
                  file=sys.stderr)  # fmt: skip
            break
        if args.jsonl:
            out.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
        else:
            out.write(_line(record) + "\n")
    return EXIT_CLEAN
