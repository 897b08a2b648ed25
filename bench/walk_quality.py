"""Acceptance bench of ``validate --walk-quality`` (issue 24 part 4): the validator's per-place failure rates
of a naive signal sampler against the probe's own naive rates on the same workload, measured in the same run,
and a sampler that seeds by the method of docs/seeding.md.

Run from the repository root:  python bench/walk_quality.py  [--runtime all|3.1|8.0] [--samples N]
[--walks N] [--interval-us U] [--min-walks N] [--min-site N] [--rounds N] [--cpu]
[--captures DIR]

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
   (``WALKQ_CLOCK=wall``: the fixture's own thread sends SIGPROF), only the workload's busy thread
   (``WALKQ_THREADS=sampled``, the thread the probe samples), at the probe's interval (read from
   capture-sampling's plan; ``--interval-us`` overrides it) and as many signals as the probe's samples
   (``--walks`` overrides it): a sample holds the thread in the handler for the walk and its capture, so the
   sampler's rate changes where the thread spends its time (one signal per 4 ms found 8.0's busy thread
   spinning in Monitor.Enter and in GC.Collect's failing waits more often than the probe's 1 ms did:
   bench/README.md); with ``--cpu`` also ``walkq_naive`` on its default CPU-time timer (ITIMER_PROF:
   whichever thread is on a CPU), to show what the sampler's clock does to the rates.

``--rounds N`` repeats 1. and 2. N times, alternating, and pools each side's walks: where the thread spends
its time within a place moves from run to run of either side (by 20 points for 8.0's GC across four probe
runs, bench/README.md), so one run per side compares two draws of it.

Two tables per runtime, each judged: by the place of the interrupted IP (managed code, a runtime module, a
stub: the places ``validate --walk-quality`` prints), and by the work the thread was doing (the innermost of
the workload's own methods on the replay's stack; the probe's own phase cell, which agrees with that rule on
its captures). Each rate is printed
with its walks and its 95% Wilson interval, the naive difference with its 95% interval (Newcombe's hybrid
score). PASS when, in every place with at least ``--min-walks`` walks on both sides, the validator's naive
failure rate is within 10 points of the probe's (the point estimate), and the recovered fixture completes at
least 99% of its walks in every place where it has at least ``--min-walks``. Exit 1 on FAIL. Prints the
machine's load beside the numbers (the rates depend on where the threads spend their time, which shifts
with load). For each place of the second table outside the 10 points it then shows, not judged, where those
walks were on each side: per site (the interrupted IP's module offset and the runtime entry below the first
managed frame, both sides running the same runtime and libc files), and how many sites with ``--min-site``
walks on both sides agree within 10 points: agreeing sites put the gap in how the walks are spread over the
sites (where the thread was), not in the seed, the place or what counts as failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.adapters.capture import place_of  # noqa: E402
from conformance.cli.capture import SAMPLING_EXPERIMENT  # noqa: E402
from conformance.core import runtimes, scenarios  # noqa: E402
from conformance.validator import api, walkq  # noqa: E402
from conformance.validator.result import WalkQualityRow  # noqa: E402
from emu.capture import Capture, names_a_file, read_capture  # noqa: E402
from emu.errors import EmuError  # noqa: E402
from emu.replay import ReplayResult, replay  # noqa: E402

Rows = tuple[WalkQualityRow, ...]
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_profiler  # noqa: E402

#: the workloads' own methods (capture-sampling's and the validator's sampling workload share them) -> the
#: place the scenario's phase names for the work it does (capture-sampling's Phases table)
PHASE_OF_METHOD = {
    "BusyManaged": "managed", "Native": "native", "Allocate": "helper:alloc",
    "StoreReferences": "helper:write-barrier", "Contend": "helper:monitor", "JitNewMethod": "helper:jit",
    "Dispatch": "helper:dispatch", "Area": "helper:dispatch", "Collect": "helper:gc",
}
#: the probe's scenario (its sampled thread runs the same methods as the validator's sampling workload)
PROBE_SCENARIO = "capture-sampling"
NAIVE_TOLERANCE = 0.10
#: a WalkQualityRow's counts (what pooling sums)
COUNTS = ("walks", "failed", "complete", "frames_got", "frames_truth", "missing", "extra", "no_truth")
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


def site_of(result: ReplayResult) -> str:
    """Where the thread was, finer than its place: the interrupted IP as a module offset and the native frame
    just above the first managed frame (the runtime's entry the managed code called), with the count of
    native frames between; "managed code" when the IP is managed, "no managed frame" when the replay found
    none. Both sides run the same runtime and libc files, so a site names the same code in both."""
    native: list[str] = []
    for f in result.frames:
        if f.function_id or f.kind in ("managed", "ready_to_run"):
            if not native:
                return "managed code"
            inner = native[0] if len(native) == 1 else f"{native[0]} .. {native[-1]}"
            return f"{inner} ({len(native)} native)"
        known = f.module and f.module_offset is not None
        native.append(f"{f.module}+{f.module_offset:#x}" if known else f.kind)
    return "no managed frame"


class Sampled(NamedTuple):
    """One replayed walk: counted in the place of its IP, with the work the thread was doing and its site."""

    walk: walkq.ProfilerWalk
    phase: str
    site: str


def sampled_of(result: ReplayResult, capture: Capture, ip: str | None = None) -> Sampled:
    """``ip``: the place of the IP as the side that took the capture names it (default :func:`ip_place`)."""
    walk = walkq.walk_of(result, capture.manifest.live, ip or ip_place(capture))
    return Sampled(walk, phase_of(result, capture), site_of(result))


def by_phase(samples: Sequence[Sampled]) -> Rows:
    return walkq.quality_table([s.walk.model_copy(update={"place": s.phase}) for s in samples])


def by_site(samples: Sequence[Sampled]) -> Rows:
    """Per work and site: "phase | site"."""
    return walkq.quality_table(
        [s.walk.model_copy(update={"place": f"{s.phase} | {s.site}"}) for s in samples])


def replayed(folder: Path, *, report: bool = False) -> list[Sampled]:
    """The captures of ``folder`` (a probe capture run's, or a validate run's ``walkq/``), replayed."""
    out = []
    for path in sorted(folder.rglob("*.phcap")):
        try:
            capture = read_capture(path)
            result = replay(capture)
        except EmuError as exc:
            if report:
                print(f"  {path.name}: {exc}")
            continue
        out.append(sampled_of(result, capture))
    return out


def probe_interval_us() -> int:
    """The probe's sampling interval: capture-sampling's plan (its capture_sample experiment's intervalUs),
    which ``capture`` runs as it is."""
    for exp in scenarios.load_scenario(PROBE_SCENARIO).plan.get("experiments", []):
        args = exp.get("args", {}) if isinstance(exp, dict) else {}
        if exp.get("run") == SAMPLING_EXPERIMENT and isinstance(args.get("intervalUs"), int):
            return int(args["intervalUs"])
    raise SystemExit(f"{PROBE_SCENARIO}/plan.json: no {SAMPLING_EXPERIMENT} experiment with an intervalUs")


def probe_samples(rt: str, samples: int, out: Path, *, run: bool = True) -> list[Sampled]:
    if run:
        cmd = [sys.executable, "-m", "conformance", "capture", PROBE_SCENARIO, "--runtime", rt,
               "--samples", str(samples), "--out", str(out)]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        print(f"  probe capture: {done.stdout.strip() or done.stderr.strip()}")
    else:
        out = out / rt
    return replayed(out, report=True)


#: how the validator's fixtures sample (``--cpu`` adds the naive fixture on its CPU-time timer)
WALL = {"WALKQ_CLOCK": "wall", "WALKQ_THREADS": "sampled"}


def validator_samples(
    fixture: str, rt: str, env: dict[str, str], duration: float
) -> tuple[Rows, list[Sampled]]:
    """The fixture's run: validate's own table (by the place of the IP), and its captures replayed."""
    so = build_profiler(PROFILERS / f"{fixture}.cpp", "validator-fixtures", includes=[PROFILERS])
    # bounded: a walk from a signal handler can deadlock the runtime (a thread interrupted while it changes
    # GC mode); the proxy writes what the replay needs as it goes, so a hung run is still measured
    result = api.validate(so, FIXTURE_CLSID, runtime=rt, workload="sampling", duration_s=duration,
                          walk_quality=True, timeout_s=duration + 60, env=env)  # fmt: skip
    (run,) = result.runs
    if run.walk_quality is None:
        return (), []
    q = run.walk_quality
    clock = env.get("WALKQ_CLOCK", "cpu")
    every = f", one signal per {env['WALKQ_INTERVAL_US']} us" if clock == "wall" else ""
    print(f"  {fixture} ({clock} clock{every}): {run.outcome}, captured {q.captured}, dropped {q.dropped} "
          f"(no free slot), replays failed {q.replay_failed}, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    return q.rows, replayed(Path(q.captures)) if q.captures else []


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


def table(
    columns: dict[str, dict[str, WalkQualityRow]], min_walks: int, *, judge: bool, width: int = 26
) -> bool:
    """One table: failed/walks, the failure share and its 95% interval per column, the naive difference
    (validator - probe, points, 95% interval); ``judge``: its rows decide PASS; ``width``: the place
    column's."""
    ok = True
    probe, naive = columns["probe naive"], columns["validate naive"]
    recovered = columns.get("validate recovered", {})
    names = list(columns)
    header = "".join(f" {n:>27}" for n in names)
    print(f"    {'place':<{width}}{header} {'naive diff [95%]':>22}")
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
        print(f"    {place:<{width}}{cells} {diff:>22}{verdict}")
    return ok


def pooled(tables: Sequence[Rows]) -> Rows:
    """Several runs' tables as one: per place, every count summed."""
    acc: dict[str, dict[str, int]] = {}
    for rows in tables:
        for r in rows:
            counts = acc.setdefault(r.place, dict.fromkeys(COUNTS, 0))
            for key in COUNTS:
                counts[key] += getattr(r, key)
    return tuple(WalkQualityRow(place=place, **counts) for place, counts in sorted(acc.items()))


def gaps(probe: Rows, naive: Rows, min_walks: int) -> list[str]:
    """The places whose naive failure shares differ by more than the tolerance (>= ``min_walks`` each)."""
    theirs = {r.place: r for r in naive}
    out = []
    for p in probe:
        n = theirs.get(p.place)
        if n and p.walks >= min_walks and n.walks >= min_walks and abs(difference(p, n)[0]) > NAIVE_TOLERANCE:
            out.append(p.place)
    return out


def site_agreement(probe: Rows, naive: Rows, min_walks: int) -> tuple[int, int]:
    """Of the sites with at least ``min_walks`` walks on both sides: how many, and in how many the naive
    failure shares are within the tolerance (the same code, the same seed rule: the same outcome)."""
    theirs = {r.place: r for r in naive}
    both = [(p, theirs[p.place]) for p in probe if p.place in theirs]
    both = [(p, n) for p, n in both if p.walks >= min_walks and n.walks >= min_walks]
    return len(both), sum(abs(difference(p, n)[0]) <= NAIVE_TOLERANCE for p, n in both)


def explain(probe: list[Sampled], naive: list[Sampled], places: Sequence[str], min_site: int) -> None:
    """Where the walks of the places outside the tolerance were, on each side: per site, failed/walks (not
    judged), and whether the sites both sides share agree."""
    p_sites, n_sites = by_site(probe), by_site(naive)
    count, agree = site_agreement(p_sites, n_sites, min_site)
    print(f"  sites (the IP's module offset .. the runtime's entry below the first managed frame) with >= "
          f"{min_site} walks on both sides: {count}; the naive failure shares agree within 10 points in "
          f"{agree}")  # fmt: skip
    for place in places:
        shown = {name: {r.place: r for r in rows if r.place.startswith(f"{place} | ") and r.walks >= min_site}
                 for name, rows in (("probe naive", p_sites), ("validate naive", n_sites))}  # fmt: skip
        if any(shown.values()):
            print(f"  {place}, by site (>= {min_site} walks on a side): failed/walks [95% interval]")
            table(shown, min_site, judge=False, width=72)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runtime", default="all")
    ap.add_argument("--samples", type=int, default=2000, help="the probe's samples")
    ap.add_argument("--walks", type=int, help="the signals each validator fixture sends (default: --samples)")
    ap.add_argument("--interval-us", type=int,
                    help="the fixtures' wall-clock interval (default: the probe's, from its scenario's plan)")
    ap.add_argument("--min-walks", type=int, default=30)
    ap.add_argument("--min-site", type=int, default=5, help="walks a site needs on a side to be shown")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs per side, alternating (probe, fixtures, probe, ...), their walks pooled")
    ap.add_argument("--cpu", action="store_true", help="also the naive fixture on its CPU-time timer")
    ap.add_argument("--captures", type=Path, help="the probe's captures of an earlier run (DIR/<runtime>/)")
    args = ap.parse_args(argv)
    interval = args.interval_us or probe_interval_us()
    walks = args.walks or args.samples
    wall = {**WALL, "WALKQ_INTERVAL_US": str(interval), "WALKQ_MAX_SAMPLES": str(walks)}
    # long enough for every signal, with room for the walks' own cost
    duration = max(4.0, 2.0 * walks * interval / 1e6)
    print("validate --walk-quality runs with the shadow heap off (PROFHARNESS_PROXY_HEAP=0); walks of "
          "threads not parked in a signal handler are counted, not captured (none here: every walk is from a "
          "handler)")  # fmt: skip
    print(f"the probe: {args.samples} signals, one per {probe_interval_us()} us (its plan); the fixtures: "
          f"{walks}, one per {interval} us")  # fmt: skip
    ok = True
    for rt in runtimes.select(args.runtime, None):
        print(f"{rt.version}: load {os.getloadavg()[0]:.2f}")
        probe: list[Sampled] = []
        runs: dict[str, tuple[list[Rows], list[Sampled]]] = {}
        fixtures = [("validate naive", "walkq_naive", wall), ("validate recovered", "walkq_recovered", wall)]
        if args.cpu:
            fixtures.append(("naive, CPU clock", "walkq_naive", {}))
        for k in range(args.rounds):  # alternating: probe, fixtures, probe, ...; pooled per side
            if args.rounds > 1:
                print(f"  round {k + 1} of {args.rounds}, load {os.getloadavg()[0]:.2f}")
            if args.captures is not None:
                probe += probe_samples(rt.version, args.samples, args.captures, run=False) if k == 0 else []
            else:
                with tempfile.TemporaryDirectory(prefix="walkq-bench-") as tmp:
                    probe += probe_samples(rt.version, args.samples, Path(tmp))
            for name, fixture, env in fixtures:
                rows, samples = validator_samples(fixture, rt.version, env, duration)
                acc = runs.setdefault(name, ([], []))
                acc[0].append(rows)
                acc[1].extend(samples)
        # by the place of the IP: the probe's by ip_place, the validator's as validate itself tabulates them
        by_ip = [("probe naive", walkq.quality_table([s.walk for s in probe]))]
        by_ip += [(name, pooled(rows)) for name, (rows, _) in runs.items()]
        by_work = [("probe naive", by_phase(probe))]
        by_work += [(name, by_phase(samples)) for name, (_, samples) in runs.items()]
        for columns, title in ((by_ip, "by the place of the IP (validate's own places)"),
                               (by_work, "by the work the thread was doing")):  # fmt: skip
            print(f"  {title}: failed/walks, failure share [95% interval]")
            passed = table({name: {r.place: r for r in rows} for name, rows in columns}, args.min_walks,
                           judge=True)  # fmt: skip
            print(f"  {'PASS' if passed else 'FAIL'} {title}")
            ok = passed and ok
        naive = runs["validate naive"][1]
        explain(probe, naive, gaps(by_work[0][1], by_work[1][1], args.min_walks), args.min_site)
        print(f"  load after {os.getloadavg()[0]:.2f}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
