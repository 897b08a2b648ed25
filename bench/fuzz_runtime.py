"""Benchmark: fuzz-runtime throughput, programs per minute per runtime, compile and run time apart.

Run from the repository root:  python bench/fuzz_runtime.py  [--runtime all] [--programs N] [--seed S]

Two passes over the same programs (the known shapes, then ``--programs`` generated ones drawn with a fixed
seed), each with a fresh :class:`Differential` (so every program runs again) but the same compile cache:

* pass 1 compiles what the cache does not hold yet (a cold cache when the programs are new);
* pass 2 compiles nothing: every program is a compile-cache hit, so its compile time is ~0.

Printed per pass: programs, compile seconds and cache hits, run seconds per runtime, programs per minute per
runtime (run time only: one program's runs on that runtime), and end-to-end programs per minute (compile,
run and judging, both runtimes). Targets: pass 2 has a cache hit for every program and compiles in at most
5% of pass 1's compile time (or 0.5 s); exit status 0 on PASS, 1 on FAIL.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from conformance.core import runtimes
from conformance.fuzz_runtime.differential import Differential
from conformance.fuzz_runtime.search import RuntimeFuzzReport
from conformance.fuzz_runtime.shapes import Program
from conformance.fuzz_runtime.strategies import known_programs, programs


def generated(count: int, seed: int) -> list[Program]:
    drawn: list[Program] = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(programs())
    def draw(program: Program) -> None:
        drawn.append(program)

    draw()
    return list(dict.fromkeys(drawn))[:count]


def one_pass(selected: list[runtimes.Runtime], chosen: list[Program]) -> RuntimeFuzzReport:
    differential = Differential(selected)
    report = RuntimeFuzzReport()
    started = time.monotonic()
    for program in chosen:
        report.add(differential.run(program))
    report.seconds = time.monotonic() - started
    return report


def show(name: str, report: RuntimeFuzzReport) -> None:
    print(f"{name}: {report.programs} programs in {report.seconds:.1f}s "
          f"({60 * report.programs / max(report.seconds, 1e-9):.1f}/min end to end); compile "
          f"{report.compile_seconds:.2f}s, {report.compile_cache_hits} cache hits")  # fmt: skip
    for runtime, seconds in sorted(report.run_seconds.items()):
        print(f"  {runtime}: run {seconds:.1f}s for {report.runs_per_runtime[runtime]} runs: "
              f"{60 * report.programs / max(seconds, 1e-9):.1f} programs/min (run time only)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="all")
    parser.add_argument("--programs", type=int, default=20, help="generated programs besides the known ones")
    parser.add_argument("--seed", type=int, default=random.Random(0).randrange(1 << 30))
    args = parser.parse_args()
    selected = runtimes.select(args.runtime)
    chosen = [*known_programs(), *generated(args.programs, args.seed)]
    first = one_pass(selected, chosen)
    show("pass 1", first)
    second = one_pass(selected, chosen)
    show("pass 2 (same programs)", second)
    ok = second.compile_cache_hits == second.programs and second.compile_seconds <= max(
        0.5, 0.05 * first.compile_seconds
    )
    print(f"compile cache on the second pass: {second.compile_cache_hits}/{second.programs} hits, "
          f"{second.compile_seconds:.2f}s: {'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
