"""``profharness runs prune [--keep N] [--older-than D] [--dry-run]``: cut the runs folder.

Every run keeps a folder under the runs folder (``$PROFHARNESS_RUNS``, else the cache's ``runs``); when a run
is written the folder is cut to its cap (``$PROFHARNESS_RUNS_KEEP``, default 100 runs;
:mod:`conformance.core.runs`). ``prune`` cuts it now: to the newest N runs (``--keep``; default: the cap),
and/or removing the runs last written more than D ago (``--older-than 7d``). A run in progress (the process
that made it still lives) is never removed, nor anything in the folder that is not a run.
"""

from __future__ import annotations

import argparse

from conformance.core import runs
from conformance.core.errors import InputError
from conformance.core.paths import runs_dir

HELP = "the runs folder: prune it to the newest N runs (--keep) or of runs older than D (--older-than 7d)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["prune"], help="prune: remove finished runs")
    parser.add_argument(
        "--keep",
        metavar="N",
        help=f"keep the newest N runs (default: ${runs.KEEP_ENV}, else {runs.DEFAULT_KEEP}, when --older-than"
        " is not given)",
    )
    parser.add_argument(
        "--older-than",
        metavar="D",
        help="remove the runs last written more than D ago: a whole number and s, m, h, d or w (7d, 12h)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def main(args: argparse.Namespace) -> int:
    keep: int | None
    if args.keep is not None:
        keep = runs.parse_keep(args.keep, "--keep")
        if keep is None:
            raise InputError(f"--keep {args.keep!r}: not a number of runs to keep (a whole number >= 0)")
    else:
        keep = None if args.older_than is not None else runs.keep_limit()
    older_than = runs.parse_age(args.older_than, "--older-than") if args.older_than is not None else None
    folder = runs_dir()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder}: the runs folder ($PROFHARNESS_RUNS or the cache's runs) is not a folder")
    result = runs.prune(folder, keep=keep, older_than_s=older_than, dry_run=args.dry_run)
    if args.dry_run:
        for path in result.removed:
            print(path.name)
    left = [path for path in runs.runs_in(folder) if path not in result.removed]
    busy = sum(1 for path in left if runs.in_progress(path))
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"{verb} {len(result.removed)} run(s) ({_megabytes(result.removed_bytes)}) from {folder};"
        f" {len(left)} left ({busy} in progress)"
    )
    return 0
