"""``profharness capture SCENARIO --runtime V --samples N --out DIR``: live samples as emu capture files.

Runs the scenario under the probe with its own plan, every ``capture_sample`` experiment asked for N samples
(``conformance/native/src/experiments_capture.cpp``), then writes one capture per sample
(``conformance/adapters/capture.py``) to ``DIR/<runtime>/sample-NNNN.phcap`` and prints one line per runtime:
captures written, their size, and how often the live DoStackSnapshot seeded from the ucontext as it was (the
naive seed) succeeded. A run that fails, or that took fewer samples than asked, is one line naming its trace
and the exit code is 1; the samples a failed run recorded whole are still written.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from clr_model.flags import CorPrfMonitor
from conformance.adapters.capture import write_captures
from conformance.adapters.capture_records import sample_records
from conformance.core import scenarios
from conformance.core.errors import InputError
from conformance.core.runner import DEFAULT_TIMEOUT_S, RunOutcome, RunResult, run_scenario
from conformance.core.trace import ProbeErrorRecord

HELP = "sample a scenario's thread under the probe and write one emu capture file per sample"

#: ``--seed``: the probe's args.seed values (docs/seeding.md)
SEED_MODES = ("naive", "recovered")

#: the event the recovered seed's code map learns from (JITCompilationFinished)
JIT_EVENTS = "COR_PRF_MONITOR_JIT_COMPILATION"

#: The probe experiment that samples (its args.samples is what --samples sets).
SAMPLING_EXPERIMENT = "capture_sample"


def with_jit_events(plan: dict[str, Any]) -> None:
    """Adds COR_PRF_MONITOR_JIT_COMPILATION to the plan's event mask (a list of names or a number): the
    recovered seed's code map learns each method as the JIT compiles it (docs/seeding.md)."""
    mask = plan.setdefault("event_mask", [])
    if isinstance(mask, list):
        if JIT_EVENTS not in mask:
            mask.append(JIT_EVENTS)
    elif isinstance(mask, int) and not isinstance(mask, bool):
        plan["event_mask"] = mask | int(CorPrfMonitor.COR_PRF_MONITOR_JIT_COMPILATION)


def sampling_plan(plan: dict[str, Any], samples: int, where: str, seed: str | None = None) -> dict[str, Any]:
    """``plan`` with args.samples = ``samples`` (and args.seed = ``seed`` when given: "naive" or
    "recovered") on every capture_sample experiment (``where``: the plan's name for errors)."""
    out = copy.deepcopy(plan)
    if seed == "recovered":
        with_jit_events(out)
    experiments = out.get("experiments")
    found = 0
    for exp in experiments if isinstance(experiments, list) else []:
        if isinstance(exp, dict) and exp.get("run") == SAMPLING_EXPERIMENT:
            args = exp.setdefault("args", {})
            if not isinstance(args, dict):
                raise InputError(f"{where}: experiments: {exp.get('id')}: args must be an object")
            args["samples"] = samples
            if seed is not None:
                args["seed"] = seed
            found += 1
    if not found:
        raise InputError(f"{where}: no {SAMPLING_EXPERIMENT} experiment to take samples with")
    return out


def _taken(result: RunResult) -> int:
    trace = result.trace
    if trace is None:
        return 0
    return len(sample_records(trace)[0])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario name (a folder under conformance/scenarios)")
    parser.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    parser.add_argument("--dotnet", type=Path, help="a dotnet root or host whose runtimes to use too")
    parser.add_argument("--samples", type=int, default=20, help="samples per runtime (default 20)")
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for the captures (one subfolder per runtime)"
    )
    parser.add_argument(
        "--seed", choices=SEED_MODES, default="naive",
        help="naive: walk seeded from the interrupted context as it is; recovered: also walk seeded from the "
        "first managed frame, recovered while the thread is parked in its handler (docs/seeding.md)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="watchdog seconds per run")


def main(args: argparse.Namespace) -> int:
    if args.samples <= 0 or args.samples > 100_000:
        raise InputError(f"--samples {args.samples}: must be between 1 and 100000")
    if args.timeout <= 0:
        raise InputError(f"--timeout {args.timeout}: must be a positive number of seconds")
    scenario = scenarios.load_scenario(args.scenario)
    plan = sampling_plan(dict(scenario.plan), args.samples, f"{args.scenario}/plan.json", seed=args.seed)
    results = run_scenario(args.scenario, args.runtime, dotnet=args.dotnet, plan=plan, timeout_s=args.timeout)
    ok = True
    for result in results:
        if result.outcome is not RunOutcome.OK or result.trace is None:
            print(f"profharness: {result.describe_failure()}", file=sys.stderr)
            ok = False
            if result.trace is None:
                continue
            # a run that died mid-capture: its complete samples are still captures (the torn tail is not)
        taken = _taken(result)
        if result.outcome is RunOutcome.OK and taken < args.samples:
            errors = result.trace.of_kind(ProbeErrorRecord)
            why = f" ({errors[-1].what})" if errors else ""
            print(
                f"profharness: {args.scenario} on {result.runtime} took {taken} of {args.samples} "
                f"samples{why}; trace: {result.trace_path}",
                file=sys.stderr,
            )
            ok = False
        folder = args.out / result.runtime
        written = write_captures(result.trace, folder, runtime=result.runtime, scenario=args.scenario)
        size = sum(p.stat().st_size for p in written.paths)
        n = written.live_walks
        rate = f"{written.live_successes}/{n} ({written.live_successes / n:.0%})" if n else "n/a"
        if written.recovered_walks:
            k = written.recovered_walks
            rate += (
                f", recovered-seed walks succeeded {written.recovered_successes}/{k} "
                f"({written.recovered_successes / k:.0%})"
            )
        skipped = f", {len(written.skipped)} skipped ({written.skipped[0]})" if written.skipped else ""
        print(
            f"{args.scenario} on {result.runtime}: {len(written.paths)} captures in {folder} "
            f"({size / 1024:.0f} KiB), live naive-seed walks succeeded {rate}{skipped}"
        )
    return 0 if ok else 1
