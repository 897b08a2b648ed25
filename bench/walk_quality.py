"""Acceptance bench of ``validate --walk-quality`` (issue 24 part 4): the validator's per-place failure rates
of a naive signal sampler against the probe's own naive rates on the same workload, measured in the same run,
and a sampler that seeds by the method of docs/seeding.md.

Run from the repository root:  python bench/walk_quality.py  [--runtime all|3.1|8.0] [--samples N]
[--walks N] [--interval-us U] [--min-walks N] [--cpu] [--captures DIR]

Per runtime, in one run of this script:

1. the probe: ``profharness capture capture-sampling --samples N`` (default 2000: a profiler thread signals
   the scenario's busy thread every millisecond of wall-clock time, whose handler walks it with
   DoStackSnapshot seeded from the ucontext: the naive seed), or the captures of an earlier one (``--captures
   DIR``: ``DIR/<runtime>/``); each capture replayed, and its live walk compared with the replay's truth
   exactly as ``validate --walk-quality`` compares a profiler's walk
   (:func:`conformance.validator.walkq.walk_of`);
   2000 samples, not fewer: in the workload's first half second 3.1's GC.Collect waits mostly where the
   naive seed succeeds, later mostly where it fails (docs/seeding.md), and the validator's runs below
   sample mostly past that start;
2. the validator: ``validate --walk-quality --workload sampling`` with the fixture ``walkq_naive``
   (DoStackSnapshot from its SIGPROF handler seeded with the ucontext) and ``walkq_recovered`` (seeded from
   the first managed frame: .eh_frame CFI, the stub rules), both sampling like the probe: by wall-clock time
   (``WALKQ_CLOCK=wall``: the fixture's own thread sends SIGPROF every ``--interval-us``), only the workload's
   busy thread (``WALKQ_THREADS=sampled``, the thread the probe samples), at most ``--walks`` signals;
   with ``--cpu`` also ``walkq_naive`` on its default CPU-time timer (ITIMER_PROF: whichever thread is on a
   CPU), to show what the sampler's clock does to the rates.

Two tables per runtime, each judged: by the place of the interrupted IP (managed code, a runtime module, a
stub: the places ``validate --walk-quality`` prints), and by the work the thread was doing (the innermost of
the workload's own methods on the replay's stack; the probe's own phase cell, which agrees with that rule on
its captures). Each rate is printed
with its walks and its 95% Wilson interval, the naive difference with its 95% interval (Newcombe's hybrid
score). PASS when, in every place with at least ``--min-walks`` walks on both sides, the validator's naive
failure rate is within 10 points of the probe's (the point estimate), and the recovered fixture completes at
least 99% of its walks in every place where it has at least ``--min-walks``. Exit 1 on FAIL. Prints the
machine's load beside the numbers (the rates depend on where the threads spend their time, which shifts
with load).
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
    walks, phases = [], []
    for path in sorted(out.rglob("*.phcap")):
        try:
            capture = read_capture(path)
            result = replay(capture)
        except EmuError as exc:
            print(f"  {path.name}: {exc}")
            continue
        walks.append(walkq.walk_of(result, capture.manifest.live, ip_place(capture)))
        phases.append(walkq.walk_of(result, capture.manifest.live, phase_of(result, capture)))
    return walkq.quality_table(walks), walkq.quality_table(phases)


#: how the validator's fixtures sample (``--cpu`` adds the naive fixture on its CPU-time timer)
WALL = {"WALKQ_CLOCK": "wall", "WALKQ_THREADS": "sampled"}


def validator_rows(fixture: str, rt: str, env: dict[str, str], duration: float) -> tuple[Rows, Rows]:
    so = build_profiler(PROFILERS / f"{fixture}.cpp", "validator-fixtures", includes=[PROFILERS])
    # bounded: a walk from a signal handler can deadlock the runtime (a thread interrupted while it changes
    # GC mode); the proxy writes what the replay needs as it goes, so a hung run is still measured
    result = api.validate(so, FIXTURE_CLSID, runtime=rt, workload="sampling", duration_s=duration,
                          walk_quality=True, timeout_s=duration + 60, env=env)  # fmt: skip
    (run,) = result.runs
    if run.walk_quality is None:
        return (), ()
    q = run.walk_quality
    clock = env.get("WALKQ_CLOCK", "cpu")
    print(f"  {fixture} ({clock} clock): {run.outcome}, captured {q.captured}, dropped {q.dropped} (no free "
          f"slot), replays failed {q.replay_failed}, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    return q.rows, phase_rows(Path(q.captures)) if q.captures else ()


Z95 = 1.959963984540054


def wilson(failed: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share ``failed / n`` (n > 0)."""
    p = failed / n
    denom = 1 + Z95 * Z95 / n
    centre = (p + Z95 * Z95 / (2 * n)) / denom
    half = Z95 * ((p * (1 - p) / n + Z95 * Z95 / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def difference(a: WalkQualityRow, b: WalkQualityRow) -> tuple[float, float, float]:
    """``b``'s failure share minus ``a``'s, with its 95% interval (Newcombe's hybrid score method, from the
    two Wilson intervals)."""
    fa, fb = a.walks - a.complete, b.walks - b.complete
    pa, pb = fa / a.walks, fb / b.walks
    la, ua = wilson(fa, a.walks)
    lb, ub = wilson(fb, b.walks)
    d = pb - pa
    return d, d - ((pb - lb) ** 2 + (ua - pa) ** 2) ** 0.5, d + ((ub - pb) ** 2 + (pa - la) ** 2) ** 0.5


def _share(row: WalkQualityRow | None) -> str:
    if row is None or not row.walks:
        return "-"
    lo, hi = wilson(row.walks - row.complete, row.walks)
    failed = row.walks - row.complete
    return f"{failed}/{row.walks} {failed / row.walks:6.1%} [{lo:.0%}-{hi:.0%}]"


def table(columns: dict[str, dict[str, WalkQualityRow]], min_walks: int, *, judge: bool) -> bool:
    """One table: failed/walks, the failure share and its 95% interval per column, the naive difference
    (validator - probe, points, 95% interval); ``judge``: its rows decide PASS."""
    ok = True
    probe, naive, recovered = columns["probe naive"], columns["validate naive"], columns["validate recovered"]
    names = list(columns)
    header = "".join(f" {n:>27}" for n in names)
    print(f"    {'place':<26}{header} {'naive diff [95%]':>22}")
    for place in sorted(set().union(*(set(c) for c in columns.values()))):
        p, n, r = probe.get(place), naive.get(place), recovered.get(place)
        diff = ""
        verdict = ""
        if p and n and p.walks >= min_walks and n.walks >= min_walks:
            d, lo, hi = difference(p, n)
            diff = f"{d * 100:+.1f} [{lo * 100:+.0f},{hi * 100:+.0f}]"
            if abs(d) > NAIVE_TOLERANCE:
                verdict = "  naive rates differ by more than 10 points"
        elif p or n:
            diff = f"(< {min_walks} walks)"
        if r and r.walks >= min_walks and r.complete / r.walks < RECOVERED_TARGET:
            verdict += "  recovered below 99%"
        ok = ok and not (judge and verdict)
        cells = "".join(f" {_share(columns[c].get(place)):>27}" for c in names)
        print(f"    {place:<26}{cells} {diff:>22}{verdict}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runtime", default="all")
    ap.add_argument("--samples", type=int, default=2000, help="the probe's samples")
    ap.add_argument("--walks", type=int, default=1200, help="the signals each validator fixture sends")
    ap.add_argument("--interval-us", type=int, default=4000, help="the fixtures' wall-clock interval")
    ap.add_argument("--min-walks", type=int, default=30)
    ap.add_argument("--cpu", action="store_true", help="also the naive fixture on its CPU-time timer")
    ap.add_argument("--captures", type=Path, help="the probe's captures of an earlier run (DIR/<runtime>/)")
    args = ap.parse_args(argv)
    wall = {**WALL, "WALKQ_INTERVAL_US": str(args.interval_us), "WALKQ_MAX_SAMPLES": str(args.walks)}
    # long enough for every signal, with room for the walks' own cost
    duration = max(4.0, 2.0 * args.walks * args.interval_us / 1e6)
    print("validate --walk-quality runs with the shadow heap off (PROFHARNESS_PROXY_HEAP=0); walks of "
          "threads not parked in a signal handler are counted, not captured (none here: every walk is from a "
          "handler)")  # fmt: skip
    ok = True
    for rt in runtimes.select(args.runtime, None):
        print(f"{rt.version}: load {os.getloadavg()[0]:.2f}")
        if args.captures is not None:
            probe = probe_rows(rt.version, args.samples, args.captures, run=False)
        else:
            with tempfile.TemporaryDirectory(prefix="walkq-bench-") as tmp:
                probe = probe_rows(rt.version, args.samples, Path(tmp))
        columns = [("probe naive", probe),
                   ("validate naive", validator_rows("walkq_naive", rt.version, wall, duration)),
                   ("validate recovered", validator_rows("walkq_recovered", rt.version, wall, duration))]
        if args.cpu:
            columns.append(("naive, CPU clock", validator_rows("walkq_naive", rt.version, {}, duration)))
        for k, title in ((0, "by the place of the IP (validate's own places)"),
                         (1, "by the work the thread was doing")):
            print(f"  {title}: failed/walks, failure share [95% interval]")
            passed = table({name: {r.place: r for r in rows[k]} for name, rows in columns}, args.min_walks,
                           judge=True)  # fmt: skip
            print(f"  {'PASS' if passed else 'FAIL'} {title}")
            ok = passed and ok
        print(f"  load after {os.getloadavg()[0]:.2f}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
