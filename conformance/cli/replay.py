"""``profharness replay CAPTURE... [--json]``: replay captured instants under unicorn (the emu layer).

One capture: its frames (leaf first, each with how it was unwound), the DoStackSnapshot seed built from the
first managed frame, the model's callbacks and where the unwind stopped. Several captures or a folder: the
recovery table, per place (managed, native, helper kind), beside the live naive-seed success rate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conformance.core.errors import HarnessError

HELP = "replay captured instants under unicorn: frames, seed, trust per frame; a folder: the recovery table"

CAPTURE_SUFFIX = ".phcap"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("captures", nargs="+", type=Path, metavar="CAPTURE", help="capture files or folders")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def capture_paths(items: list[Path]) -> list[Path]:
    """The capture files named, folders expanded (sorted, so the table is the same every time)."""
    paths: list[Path] = []
    for item in items:
        if item.is_dir():
            found = sorted(item.rglob(f"*{CAPTURE_SUFFIX}"))
            if not found:
                raise HarnessError(f"{item}: no *{CAPTURE_SUFFIX} capture in this folder")
            paths.extend(found)
        elif item.is_file():
            paths.append(item)
        else:
            raise HarnessError(f"{item}: no such capture file or folder")
    return paths


def main(args: argparse.Namespace) -> int:
    from emu.replay import recovery_table, render_recovery_table, render_text, replay_capture

    paths = capture_paths(list(args.captures))
    if len(paths) == 1 and not any(p.is_dir() for p in args.captures):
        result = replay_capture(paths[0])
        print(result.model_dump_json(indent=2) if args.json else render_text(result))
        return 0
    rows = recovery_table(paths)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        print(render_recovery_table(rows))
    return 0
