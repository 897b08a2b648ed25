"""The recording proxy's overhead (issues 10, 23): a do-nothing profiler
(tests/conformance/validator/profilers/noop.cpp) loaded directly, behind the proxy without its shadow heap
(PROFHARNESS_PROXY_HEAP=0), behind the proxy with it (the default: the proxy asks for every allocation and GC
event itself, issue 19; each GC applied to the heap by the heap's own thread), with each GC applied inside
GarbageCollectionFinished, on the GC's thread, instead (PROFHARNESS_PROXY_HEAP_THREAD=0), and behind the proxy
with its trace written as before issue 23
(PROFHARNESS_PROXY_TRACE_SYNC=1: formatted and written by the calling thread, one write per record).

Two callback-heavy workloads, each run in interleaved rounds (every round runs every arm once, the arms'
order rotated from round to round, so that a burst of the machine's other load falls on all of them):

- ``loop`` (the verdict's): the validator's basic workload run with ``--courses`` (20): its course (threads,
  exceptions, 4,000 survivors (8,000 objects) among garbage moved by two compacting GCs, a chain of small
  methods) that many times in one process: most of a run is callbacks, not the runtime's start-up, which is
  what the target is about (the proxy's cost per callback);
- ``basic`` (reported): the validator's own basic workload (validate-basic), one course; its ~45 ms of
  runtime start-up is most of each run.

Per round the ratio arm / direct (a pair run back to back); printed: the median of those ratios and a 95%
bootstrap interval of that median (resampling the rounds, seeded, so the same times give the same interval),
wall and CPU (user + system of the child alone, from wait4). Target (issue 23): the median per-round wall
ratio proxy (with its heap) / direct <= 1.3 on ``loop``; CPU beside it. Wall time on a shared machine
measures the other jobs too: the load is printed. ``--workload heapchurn``
(tests/conformance/validator/apps/heapchurn: ~260k allocations, 11 compacting GCs) and ``--profiler
object_tracker`` (the document-written tracker, which asks for the same events itself) show what the shadow
heap costs where allocations dominate; they report, not judge.

    python bench/proxy.py [--runtime 8.0] [--rounds 15] [--courses 20] [--workload loop|basic|heapchurn]
                          [--profiler object_tracker] [--seed 23]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.core import runner, runtimes, scenarios  # noqa: E402
from conformance.validator import api, launch  # noqa: E402
from conformance.validator.build import build_proxy  # noqa: E402
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture, build_profiler  # noqa: E402
from tests.conformance.validator.test_proxy_records import APPS, DOCS  # noqa: E402

TARGET = 1.3
TIMEOUT_S = 120.0
BOOTSTRAP_SAMPLES = 2000


def _run(host: Path, app: Path, env: dict[str, str], app_args: Sequence[str] = ()) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of the child alone.

    The child is reaped by wait4, which returns the moment it ends: subprocess.run(timeout=...) polls
    with sleeps up to 50 ms, which made every wall time a multiple of ~50 ms (the "bimodal" wall times
    seen before). The timeout is a timer that kills the child."""
    started = time.perf_counter()
    command = [str(host), str(app), *app_args]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    killer = threading.Timer(TIMEOUT_S, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return wall, usage.ru_utime + usage.ru_stime


def median_interval(ratios: list[float], seed: int,
                    samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float, float]:  # fmt: skip
    """The median of ``ratios`` and a 95% bootstrap interval of it (``samples`` resamples, seeded)."""
    rng = random.Random(seed)
    n = len(ratios)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(samples))
    return statistics.median(ratios), medians[int(0.025 * samples)], medians[int(0.975 * samples) - 1]


def _scenario(workload: str) -> scenarios.Scenario:
    if workload in ("basic", "loop"):
        return api.validator_scenarios()[0]
    folder = APPS / "heapchurn"
    return scenarios.Scenario(name="heapchurn", folder=folder, sources=[folder / "app.cs"],
                              plan={"version": 1}, description="heapchurn")  # fmt: skip


def _arms(profiler: Path, folder: Path) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CORECLR_", "DOTNET_"))}
    base["CORECLR_ENABLE_PROFILING"] = "1"
    direct = {**base, "CORECLR_PROFILER": FIXTURE_CLSID, "CORECLR_PROFILER_PATH": str(profiler)}
    proxied = {
        **base,
        "CORECLR_PROFILER": "{00000000-0000-0000-0000-000000000001}",
        "CORECLR_PROFILER_PATH": str(build_proxy()),
        "PROFHARNESS_TRACE": str(folder / runner.BINARY_TRACE_FILE),  # the format validate gives the proxy
        **launch.proxy_environment(profiler, FIXTURE_CLSID),
    }
    return {
        "direct": direct,
        "proxy": proxied,
        "proxy without its heap": {**proxied, "PROFHARNESS_PROXY_HEAP": "0"},
        "GCs applied on the GC's thread": {**proxied, "PROFHARNESS_PROXY_HEAP_THREAD": "0"},
        "trace by the calling thread (before issue 23)": {**proxied, "PROFHARNESS_PROXY_TRACE_SYNC": "1"},
    }


def measure(rt: runtimes.Runtime, workload: str, profiler: Path, rounds: int, courses: int,
            seed: int) -> float:  # fmt: skip
    """Runs the workload's arms in interleaved rounds, prints the medians and the per-round ratios; returns
    the median per-round wall ratio proxy / direct."""
    dll = scenarios.compile_scenario(_scenario(workload), runner.reference_runtime())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        app = scenarios.prepare_run_dir(dll, rt, folder)
        arms = _arms(profiler, folder)
        app_args = ["--courses", str(courses)] if workload == "loop" else []
        for env in arms.values():  # warm the page cache and every build
            _run(rt.host, app, {**env, **rt.env()}, app_args)
        names = list(arms)
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        load_before = os.getloadavg()[0]
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                times[name].append(_run(rt.host, app, {**arms[name], **rt.env()}, app_args))
        load_after = os.getloadavg()[0]
    what = f"{workload} ({courses} courses)" if workload == "loop" else workload
    print(f"runtime {rt.version}, {what}, {rounds} interleaved rounds; load (1 min) {load_before:.2f} "
          f"before, {load_after:.2f} after:")  # fmt: skip
    verdict = 0.0
    for label, k in (("wall", 0), ("CPU", 1)):
        direct = [t[k] for t in times["direct"]]
        print(f"  {label}: direct median {statistics.median(direct) * 1000:.0f} ms")
        for name in names[1:]:
            mine = [t[k] for t in times[name]]
            ratios = [m / d for m, d in zip(mine, direct, strict=True)]
            med, lo, hi = median_interval(ratios, seed)
            print(f"    {name}: median {statistics.median(mine) * 1000:.0f} ms, per-round ratio median "
                  f"{med:.3f} (95% CI {lo:.3f}-{hi:.3f})")  # fmt: skip
            if name == "proxy" and k == 0:
                verdict = med
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--runtime", default="8.0")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--courses", type=int, default=20, help="courses of the loop workload per process")
    parser.add_argument("--workload", choices=("loop", "basic", "heapchurn"), default=None,
                        help="one workload only (default: loop, judged, then basic, reported)")  # fmt: skip
    parser.add_argument("--profiler", choices=("noop", "object_tracker"), default="noop")
    parser.add_argument("--seed", type=int, default=23, help="the bootstrap's seed")
    args = parser.parse_args()
    if args.rounds < 2 or args.courses < 1:
        parser.error("--rounds must be at least 2 and --courses at least 1")
    rt = runtimes.select(args.runtime)[0]
    if args.profiler == "noop":
        profiler = build_fixture("noop")
    else:
        profiler = build_profiler(DOCS / "object_tracker.cpp", "validator-docs", [DOCS])
    workloads = [args.workload] if args.workload else ["loop", "basic"]
    ratio = {w: measure(rt, w, profiler, args.rounds, args.courses, args.seed) for w in workloads}
    if "loop" not in ratio or args.profiler != "noop":
        return 0
    ok = ratio["loop"] <= TARGET
    print(f"{'PASS' if ok else 'FAIL'} (target: loop's median per-round wall ratio proxy / direct "
          f"<= {TARGET}; {ratio['loop']:.3f})")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
