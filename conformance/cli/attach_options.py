"""``validate``'s attach options: ``--attach`` starts the app without the profiler and attaches it through the
runtime's diagnostics IPC (AttachProfiler) ``--attach-after S`` seconds later (default 1), handing it
``--attach-data TEXT`` (UTF-8) as InitializeForAttach's client data. Orthogonal to the app chosen (the
validator's scenarios or ``--app``): the app must run long enough for the attach to happen.
"""

from __future__ import annotations

import argparse
import math

from conformance.validator.launch import DEFAULT_ATTACH_AFTER_S, AttachPlan, ValidatorInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attach", action="store_true", help="start the app without the profiler and attach it while it runs"
    )
    parser.add_argument(
        "--attach-after", type=float, default=None, metavar="S",
        help=f"with --attach: seconds after the app's start (default {DEFAULT_ATTACH_AFTER_S:g})",
    )  # fmt: skip
    parser.add_argument(
        "--attach-data", default=None, metavar="TEXT",
        help="with --attach: the client data InitializeForAttach receives (UTF-8)",
    )  # fmt: skip


def plan(args: argparse.Namespace) -> AttachPlan | None:
    """The attach asked for, checked (one line for a bad value), or None."""
    after, data = args.attach_after, args.attach_data
    if not args.attach:
        if after is not None or data is not None:
            raise ValidatorInputError("--attach-after and --attach-data need --attach")
        return None
    seconds = DEFAULT_ATTACH_AFTER_S if after is None else after
    if not math.isfinite(seconds):
        raise ValidatorInputError(f"--attach-after {seconds}: must be a finite number of seconds")
    return AttachPlan(after_s=seconds, client_data=(data or "").encode("utf-8"))
