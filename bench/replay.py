"""Benchmark: replay a 64-frame capture (median and p99, per capture and per frame).

Run from the repository root:  python bench/replay.py  [--capture PATH] [--frames N] [--runs N]

Two committed captures by default, each cut at ``--frames`` (64) frames: the gcc fixture stopped in a stub
under 64 C frames (tests/data/captures/fixture-deep.phcap: a stub emulated forward, CFI frames, two managed
frames on the frame-pointer chain, libc), and a live .NET 8 sample taken in a GC on the sampled thread
(tests/data/captures/live/8.0.4/helper-gc.phcap: libcoreclr's CFI frames, then managed frames found from
their prologues and the frame-pointer chain). Four ways each, in one process:

* warm: one capture object replayed again and again by ``replay_light`` (CFI rows decoded once, the CPU's
  translated code kept, frames and the model's callbacks as tuples: what a table over many samples of one
  process costs per sample);
* warm, as models: the same by ``replay`` (the frames, the model's input and its callbacks built as
  pydantic models: what a caller that renders or serialises every result pays);
* file: ``replay_light(read_capture(path))`` each time (read, decompress, validate, replay; CFI tables
  shared by content across captures);
* baseline: as ``file`` but with every cache emptied before each replay (the cost of a first look).

The ratio printed is baseline / warm. Every replay's JSON (a light one's through ``to_model()``, outside
the timed call) is checked equal to the first one's. Beside the
wall times each line gives the process's CPU time per replay (the mean, garbage collections included): on a
shared, loaded machine the less noisy figure.
Target (issue 23): warm median <= 300 us per 64-frame capture on this machine, for every capture; the
file and baseline numbers are printed beside it. Exit status 0 on PASS, 1 on FAIL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import percentile
from emu import cfi
from emu.capture import read_capture
from emu.replay import LightReplay, ReplayResult, replay, replay_light

TARGET_MS = 0.3
_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "captures"
DEFAULT = (_DATA / "fixture-deep.phcap", _DATA / "live" / "8.0.4" / "helper-gc.phcap")


def measure(
    fn: Callable[[], LightReplay | ReplayResult], runs: int, reference: str
) -> tuple[list[float], float]:
    """Wall time of each run, and the process's CPU time per run (the replays only: the JSON checks are
    left out; less noisy than wall time on a loaded machine)."""
    times: list[float] = []
    cpu = 0.0
    for _ in range(runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        cpu += time.process_time() - c0
        full = result.to_model() if isinstance(result, LightReplay) else result
        if full.model_dump_json() != reference:
            raise SystemExit("FAIL: a replay gave different JSON")
    return times, cpu / runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--capture", type=Path, action="append", help="a capture (repeatable; default: both)")
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--baseline-runs", type=int, default=100)
    args = ap.parse_args(argv)
    results = [bench_one(path, args) for path in (args.capture or DEFAULT)]
    ok = all(results)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def bench_one(path: Path, args: argparse.Namespace) -> bool:
    """Measure one capture; whether its warm median meets the target."""
    cap = read_capture(path)
    first = replay(cap, allow_disk=False, max_frames=args.frames)
    frames = len(first.frames)
    reference = first.model_dump_json()

    def warm() -> LightReplay:
        return replay_light(cap, allow_disk=False, max_frames=args.frames)

    def warm_models() -> ReplayResult:
        return replay(cap, allow_disk=False, max_frames=args.frames)

    def from_file() -> LightReplay:
        return replay_light(read_capture(path), allow_disk=False, max_frames=args.frames)

    def baseline() -> LightReplay:
        cfi.clear_caches()
        return from_file()

    for fn in (warm, warm_models, from_file):
        fn()  # warm-up
    t_warm = measure(warm, args.runs, reference)
    t_models = measure(warm_models, args.runs, reference)
    t_file = measure(from_file, max(args.runs // 4, 1), reference)
    t_base = measure(baseline, args.baseline_runs, reference)

    print(
        f"capture: {path.name}, {frames} frames "
        f"({first.emulated_instructions} instructions emulated), stop: {first.stop.kind.value}"
    )
    ways = (("warm", t_warm), ("warm, as models", t_models), ("file", t_file),
            ("baseline (no caches)", t_base))  # fmt: skip
    for name, (ts, cpu) in ways:
        med, tail = statistics.median(ts) * 1e3, percentile(ts, 0.99) * 1e3
        print(
            f"{name:<21} n={len(ts):>5}  median {med:7.3f} ms  p99 {tail:7.3f} ms  per frame: median "
            f"{med * 1e3 / frames:6.1f} us  p99 {tail * 1e3 / frames:6.1f} us  "
            f"CPU/replay (mean) {cpu * 1e3:7.3f} ms"
        )
    t_warm_s, t_base_s = t_warm[0], t_base[0]
    ratio = statistics.median(t_base_s) / statistics.median(t_warm_s)
    warm_med = statistics.median(t_warm_s) * 1e3
    print(
        f"ratio baseline/warm: {ratio:.1f}x; "
        f"target: warm median <= {TARGET_MS * 1e3:.0f} us per {frames}-frame capture: "
        f"{'PASS' if warm_med <= TARGET_MS else 'FAIL'} ({warm_med * 1e3:.0f} us)"
    )
    return warm_med <= TARGET_MS


if __name__ == "__main__":
    sys.exit(main())
