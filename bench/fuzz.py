"""Fuzzing throughput against a do-nothing profiler (issue 11): examples/s and events/s of
``conformance.fuzz.machine.fuzz`` (hypothesis drawing one byte string per example and the program
interpreter decoding it, the reused fake runtime child delivering, the validator's rules judging), with
where the time went, for the default example length (30 steps) and for shorter examples (12 steps, about
27 events); then the child alone replaying one fixed example's commands.

Targets (issue 11): at least 200 examples/s and 5,000 events/s in one configuration (one printed line) on
the development machine, with the child reused across examples (restarted only after a crash: the run
reports its restarts, 0 here). Both are wall-clock rates on a 2-core machine: other work on it (the load
average is printed) slows the child's hand-overs between its threads first; the CPU per example (the
harness's and the child's) says what the run needs of an idle machine.
Run: .venv/bin/python bench/fuzz.py [--examples N] [--steps S ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.fuzz.child import FakeRuntime, build_fakeruntime  # noqa: E402
from conformance.fuzz.machine import fuzz  # noqa: E402
from conformance.fuzz.world import World  # noqa: E402
from tests.conformance.fuzz.fixtures import CLSID, build  # noqa: E402

TARGET_EXAMPLES = 200.0
TARGET_EVENTS = 5000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--steps", type=int, nargs="+", default=[30, 12], help="steps per example (each)")
    parser.add_argument("--engine", default="program", choices=["program", "stateful"])
    args = parser.parse_args()
    noop = build("noop")
    build_fakeruntime()  # built (when needed) before the clock starts
    print(f"{os.cpu_count()} CPUs")
    met: list[int] = []
    for steps in args.steps:
        load = os.getloadavg()[0]
        cpu, children = time.process_time(), _children_cpu()
        r = fuzz(noop, CLSID, max_examples=args.examples, seed=0, steps=steps, engine=args.engine)
        cpu, children = time.process_time() - cpu, _children_cpu() - children  # the child is reaped by now
        rest = r.seconds - r.seconds_in_child - r.seconds_judging
        ex, ev = r.examples / r.seconds, r.events / r.seconds
        both = ex >= TARGET_EXAMPLES and ev >= TARGET_EVENTS
        if both:
            met.append(steps)
        print(f"fuzz {args.engine}, {steps} steps: {r.examples} examples, {r.events} events "
              f"({r.events / max(1, r.examples):.0f}/example) in {r.seconds:.2f} s: {ex:.0f} examples/s, "
              f"{ev:.0f} events/s (targets {TARGET_EXAMPLES:.0f} and {TARGET_EVENTS:.0f}: "
              f"{'both met' if both else 'NOT both met'}); {r.restarts} restart(s); load average {load:.2f}")
        print(f"  per example: child {r.seconds_in_child / r.examples * 1e3:.2f} ms, judging "
              f"{r.seconds_judging / r.examples * 1e3:.2f} ms, generating + decoding "
              f"{rest / r.examples * 1e3:.2f} ms; CPU: harness {cpu / r.examples * 1e3:.2f} ms, child "
              f"{children / r.examples * 1e3:.2f} ms")
    world = World(world="documented")  # gc(): a GC that moves nothing is only a document's (gc.plain)
    tid = world.create_thread()
    world.load_module(tid, ["bench.dll"])
    cls = world.load_class(tid, next(iter(world.modules)), ["Bench"])
    for _ in range(3):
        world.jit(tid, cls, ["M"], 64)
        world.allocate(tid, cls, [24] * 8)
        world.exception(tid, world.frames_for([0, 1, None, 2], [1, 2, 3, 4]), 1, cls)
        world.gc(tid, [1, 0, 0, 0, 0])
    with tempfile.TemporaryDirectory() as tmp, FakeRuntime(noop, CLSID) as runtime:
        trace = Path(tmp) / "trace.jsonl"
        n = args.examples
        began = time.monotonic()
        for _ in range(n):
            runtime.run_example(trace, world.commands)
        took = time.monotonic() - began
    print(f"child alone (one {world.events}-event example, no generation, no judging): "
          f"{n / took:.0f} examples/s, {n * world.events / took:.0f} events/s")
    print(f"PASS: targets met at {', '.join(map(str, met))} steps" if met else "FAIL: targets NOT met")
    return 0 if met else 1


def _children_cpu() -> float:
    """CPU seconds of the reaped child processes (the fake runtime, once its fuzzing run has closed it)."""
    t = os.times()
    return t.children_user + t.children_system


if __name__ == "__main__":
    sys.exit(main())
