"""``profharness replay CAPTURE... [--json] [--embed-cfi DIR]``: replay captured instants under unicorn.

One capture: its frames (leaf first, each with how it was unwound), the DoStackSnapshot seed built from the
first managed frame, the model's callbacks and where the unwind stopped. Several captures or a folder: the
recovery table, per place (managed, native, helper kind), beside the live naive-seed success rate.

``--embed-cfi DIR`` writes instead a self-contained copy of each capture into DIR: the module CFI its replay
read from the files on disk, cut to the entries it used (:mod:`emu.embed`), so that it replays on a machine
without those files (a test fixture, a bug report). A copy that would replay differently is not written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conformance.core.errors import InputError

HELP = "replay captured instants under unicorn: frames, seed, trust per frame; a folder: the recovery table"

CAPTURE_SUFFIX = ".phcap"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("captures", nargs="+", type=Path, metavar="CAPTURE", help="capture files or folders")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--embed-cfi", type=Path, metavar="DIR",
        help="write self-contained copies (with the module CFI their replay used) into DIR instead",
    )  # fmt: skip


def capture_paths(items: list[Path]) -> list[Path]:
    """The capture files named, folders expanded (sorted, so the table is the same every time)."""
    paths: list[Path] = []
    for item in items:
        if item.is_dir():
            found = sorted(item.rglob(f"*{CAPTURE_SUFFIX}"))
            if not found:
                raise InputError(f"{item}: no *{CAPTURE_SUFFIX} capture in this folder")
            paths.extend(found)
        elif item.is_file():
            paths.append(item)
        else:
            raise InputError(f"{item}: no such capture file or folder")
    return paths


def main(args: argparse.Namespace) -> int:
    from emu.replay import recovery_table, render_recovery_table, render_text, replay_capture

    paths = capture_paths(list(args.captures))
    if args.embed_cfi is not None:
        return _embed(paths, args.embed_cfi)
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


def _embed(paths: list[Path], out_dir: Path) -> int:
    from emu.embed import embed_cfi

    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: --embed-cfi needs a folder")
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise InputError(f"{out_dir}: two captures of one name would overwrite each other")
    for path in paths:
        report = embed_cfi(path, out_dir / path.name)
        kept = ", ".join(f"{name} {n} FDE(s)" for name, n in report.modules.items()) or "nothing to embed"
        print(f"{report.path}: {kept}; {report.size_before} -> {report.size_after} bytes, replays the same")
    return 0
