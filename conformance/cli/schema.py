"""``profharness schema trace|capture|validate|conformance``: the JSON Schema of a trace record, of a
capture's manifest, of a validation's result (``profharness validate --json``) or of a suite result
(``profharness conformance --json``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

HELP = (
    "print a JSON Schema (trace: one record of the probe's trace; capture: an emu capture's manifest; "
    "validate: the result `profharness validate --json` writes; conformance: the result `profharness "
    "conformance --json` writes)"
)


def _trace() -> dict[str, Any]:
    from conformance.core.trace import record_schema

    return record_schema()


def _capture() -> dict[str, Any]:
    from emu.capture import capture_schema

    return capture_schema()


def _validate() -> dict[str, Any]:
    from conformance.validator.report import json_schema

    return json_schema()


def _conformance() -> dict[str, Any]:
    from conformance.suite.report import json_schema

    return json_schema()


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "trace": _trace,
    "capture": _capture,
    "validate": _validate,
    "conformance": _conformance,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=sorted(SCHEMAS), help="which schema")


def main(args: argparse.Namespace) -> int:
    print(json.dumps(SCHEMAS[args.what](), indent=2, sort_keys=True))
    return 0
