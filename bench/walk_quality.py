"""Acceptance bench of ``validate --walk-quality`` (issue 24 part 4): the validator's per-place failure rates
of a naive signal sampler against the probe's own naive rates on the same workload, and a recovered-seed
sampler.

Run from the repository root:  python bench/walk_quality.py  [--runtime all|3.1|8.0] [--samples N]
[--duration S] [--min-walks N] [--captures DIR]

Per runtime, in one run of this script:

1. the probe: ``profharness capture capture-sampling --samples N`` (a profiler thread signals the scenario's
   busy thread, whose handler walks it with DoStackSnapshot seeded from the ucontext: the naive seed), or the
   captures of an earlier one (``--captures DIR``: ``DIR/<runtime>/``); each capture replayed, and its live
   walk compared with the replay's truth exactly as ``validate --walk-quality`` compares a profiler's walk
   (:func:`conformance.validator.walkq.walk_of`), counted by the place of the interrupted IP (managed when
   the capture's JIT map holds it, else the module that holds it:
   :func:`conformance.adapters.capture.place_of`) as the validator counts it, not by the scenario's phase;
2. the validator: ``validate --walk-quality --workload sampling --duration S`` with the fixture
   ``walkq_naive`` (SIGPROF timer, DoStackSnapshot from its handler seeded with the ucontext) and with
   ``walkq_recovered`` (the same, seeded from the first managed frame: leaf return address, frame pointers,
   a bounded scan).

Prints per place: walks and failure share (walks that did not deliver exactly the truth's managed frames) of
the probe's naive walks, of the validator's naive fixture, their difference in points, and the recovered
fixture's. PASS when, in every place with at least ``--min-walks`` walks on both sides, the two naive rates
differ by at most 10 points, and the recovered fixture completes at least 99% of the walks in every place
where it has at least ``--min-walks``. Exit 1 on FAIL. Prints the machine's load beside the numbers (the
rates depend on where the threads spend their time, which shifts with load).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.adapters.capture import place_of  # noqa: E402
from conformance.core import runtimes  # noqa: E402
from conformance.validator import api, walkq  # noqa: E402
from conformance.validator.result import WalkQualityRow  # noqa: E402
from emu.capture import Capture, names_a_file, read_capture  # noqa: E402
from emu.errors import EmuError  # noqa: E402
from emu.replay import ReplayResult, replay  # noqa: E402
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_profiler  # noqa: E402

#: the workloads' own methods (capture-sampling's and the validator's sampling workload share them) -> the
#: place the scenario's phase names for the work it does (capture-sampling's Phases table)
PHASE_OF_METHOD = {
    "BusyManaged": "managed", "Native": "native", "Allocate": "helper:alloc",
    "StoreReferences": "helper:write-barrier", "Contend": "helper:monitor", "JitNewMethod": "helper:jit",
    "Dispatch": "helper:dispatch", "Area": "helper:dispatch", "Collect": "helper:gc",
}
NAIVE_TOLERANCE = 0.10
RECOVERED_TARGET = 0.99


def ip_place(capture: Capture) -> str:
    """The place of the interrupted IP as the proxy's records name it (managed: the JIT map holds it)."""
    man = capture.manifest
    ip = man.registers.ip
    if any(r.start <= ip < r.end for m in man.jit.methods for r in m.ranges):
        return "managed"
    for m in man.modules:
        if m.start <= ip < m.end:
            if names_a_file(m.path):
                return place_of({"kind": "module", "module": m.path})
            return "helper:stub" if "x" in m.perms else "unknown"
    return "unknown"


def phase_of(result: ReplayResult, capture: Capture) -> str:
    """The work the thread was doing, by the innermost of the workload's own methods on its stack (the
    scenario's phase cell where the probe recorded one); "other" when none is."""
    if capture.manifest.known_callees is not None:
        return capture.manifest.known_callees.phase or "other"
    for f in result.frames:
        name = (f.function or "").rsplit("::", 1)[-1]
        if f.function_id and name in PHASE_OF_METHOD:
            return PHASE_OF_METHOD[name]
    return "other"


def phase_rows(folder: Path) -> tuple[WalkQualityRow, ...]:
    """The captures of ``folder`` (a probe capture run's, or a validate run's ``walkq/``), by phase."""
    walks = []
    for path in sorted(folder.rglob("*.phcap")):
        try:
            capture = read_capture(path)
            result = replay(capture)
        except EmuError:
            continue
        walks.append(walkq.walk_of(result, capture.manifest.live, phase_of(result, capture)))
    return walkq.quality_table(walks)


Rows = tuple[WalkQualityRow, ...]


def probe_rows(rt: str, samples: int, out: Path, *, run: bool = True) -> tuple[Rows, Rows]:
    if run:
        cmd = [sys.executable, "-m", "conformance", "capture", "capture-sampling", "--runtime", rt,
               "--samples", str(samples), "--out", str(out)]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        print(f"  probe capture: {done.stdout.strip() or done.stderr.strip()}")
    else:
        out = out / rt
    walks = []
    for path in sorted(out.rglob("*.phcap")):
        try:
            capture = read_capture(path)
            result = replay(capture)
        except EmuError as exc:
            print(f"  {path.name}: {exc}")
            continue
        walks.append(walkq.walk_of(result, capture.manifest.live, ip_place(capture)))
    return walkq.quality_table(walks), phase_rows(out)


def validator_rows(fixture: str, rt: str, duration: float) -> tuple[Rows, Rows]:
    so = build_profiler(PROFILERS / f"{fixture}.cpp", "validator-fixtures", includes=[PROFILERS])
    # bounded: a walk from a signal handler can deadlock the runtime (a thread interrupted while it changes
    # GC mode); the proxy writes what the replay needs as it goes, so a hung run is still measured
    result = api.validate(so, FIXTURE_CLSID, runtime=rt, workload="sampling", duration_s=duration,
                          walk_quality=True, timeout_s=duration + 60)  # fmt: skip
    (run,) = result.runs
    if run.walk_quality is None:
        return (), ()
    q = run.walk_quality
    print(f"  {fixture}: {run.outcome}, captured {q.captured}, dropped {q.dropped}, replays failed "
          f"{q.replay_failed}")  # fmt: skip
    return q.rows, phase_rows(Path(q.captures)) if q.captures else ()


def _share(row: WalkQualityRow | None) -> str:
    if row is None or row.failure_share is None:
        return "-"
    return f"{row.walks:>4} {row.failure_share:6.1%}"


def table(probe: dict[str, WalkQualityRow], naive: dict[str, WalkQualityRow],
          recovered: dict[str, WalkQualityRow], min_walks: int, *, judge: bool) -> bool:
    """One table; ``judge``: its rows decide PASS (the phase table: the same work on both sides)."""
    ok = True
    print(f"    {'place':<30} {'probe naive':>11} {'validate naive':>14} {'diff':>6} {'recovered':>11}")
    for place in sorted(set(probe) | set(naive) | set(recovered)):
        p, n, r = probe.get(place), naive.get(place), recovered.get(place)
        diff = ""
        verdict = ""
        if p and n and p.failure_share is not None and n.failure_share is not None and \
                p.walks >= min_walks and n.walks >= min_walks:  # fmt: skip
            d = n.failure_share - p.failure_share
            diff = f"{d * 100:+.1f}"
            if abs(d) > NAIVE_TOLERANCE:
                verdict = "  naive rates differ by more than 10 points"
        if r and r.walks >= min_walks and r.complete / r.walks < RECOVERED_TARGET:
            verdict += "  recovered below 99%"
        ok = ok and not (judge and verdict)
        print(f"    {place:<30} {_share(p):>11} {_share(n):>14} {diff:>6} {_share(r):>11}{verdict}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runtime", default="all")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--min-walks", type=int, default=20)
    ap.add_argument("--captures", type=Path, help="the probe's captures of an earlier run (DIR/<runtime>/)")
    args = ap.parse_args(argv)
    ok = True
    for rt in runtimes.select(args.runtime, None):
        print(f"{rt.version}: load {os.getloadavg()[0]:.2f}")
        if args.captures is not None:
            probe = probe_rows(rt.version, args.samples, args.captures, run=False)
        else:
            with tempfile.TemporaryDirectory(prefix="walkq-bench-") as tmp:
                probe = probe_rows(rt.version, args.samples, Path(tmp))
        naive = validator_rows("walkq_naive", rt.version, args.duration)
        recovered = validator_rows("walkq_recovered", rt.version, args.duration)
        for k, title in ((0, "by the place of the IP"), (1, "by the work the thread was doing (its phase)")):
            print(f"  {title}")
            ok = table({r.place: r for r in probe[k]}, {r.place: r for r in naive[k]},
                       {r.place: r for r in recovered[k]}, args.min_walks, judge=k == 1) and ok  # fmt: skip
        print(f"  load after {os.getloadavg()[0]:.2f}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
