"""``profharness schema trace``: the JSON Schema of a trace record."""

from __future__ import annotations

import argparse
import json

from conformance.core.trace import record_schema

HELP = "print a JSON Schema (trace: one record of the probe's trace)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["trace"], help="which schema")


def main(args: argparse.Namespace) -> int:
    print(json.dumps(record_schema(), indent=2, sort_keys=True))
    return 0
