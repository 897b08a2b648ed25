"""Judging a recording as it streams (issue 19): records judged per second and peak memory, beside the
run's own time.

A real recording first, made in this run: ``validate`` of a profiler written from the documents on
tests/conformance/validator/apps/heapchurn (``--profiler object_tracker``, the default: ~650k records, ~570k
object inspections, ~38k allocations, 11 compacting GCs; or ``withinfo_hooks``: ~3.4M records, ELT hooks
each with its Info call); the run's wall time, the app's time under the proxy and its record count are
printed. From it, a recording of about ``--records`` records (300,000 by default): its header up to
Initialize's return, its body (the records up to Shutdown) over and over with fresh seqs, the last copy cut
where nothing is open on any thread (the place nearest the count), then its tail (Shutdown, the counts, the
proxy's shutdown mark, the end record). It is judged by every validator rule
(:func:`conformance.validator.rules.judge_run`, what ``validate`` calls for each run) in a child process,
whose peak RSS (VmHWM: the rusage of a child keeps the high-water mark of the parent it was forked from) it
reports; and once at four times the records, to show the memory does not grow with the recording.

The baseline, in the same run, alternating with the judge: a child that parses every line with orjson and
nothing else, the floor of any judge of this recording; beside it the stream's reader alone
(:func:`conformance.validator.stream.read_records`, no rule). Rates are of CPU time (the child is one
thread; wall time on a shared machine measures the other jobs as much as the judge), wall time beside.

Targets: >= 300,000 records judged per CPU second; peak memory at 4x the records within 1.5x of the peak
at 1x.

    python bench/validate.py [--runtime 8.0] [--records 300000] [--rounds 3] [--profiler object_tracker]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402
from conformance.core.findings import Finding  # noqa: E402
from conformance.core.runner import RunResult  # noqa: E402

TARGET_RATE = 300_000
TARGET_MEMORY_GROWTH = 1.5
PROFILERS = ("object_tracker", "withinfo_hooks")
MODES = ("judge", "read", "parse")


# --- the child: one measurement, its result as one JSON line -----------------------------------------------


def child(mode: str, path: Path) -> None:
    """``judge``: every validator rule over ``path`` (judge_run, as validate calls it); ``read``: the
    stream's reader alone; ``parse``: orjson over every line and nothing else. Prints its CPU and wall
    seconds, the records, the findings by clause, the RSS before it (the interpreter and the imports) and the
    peak."""
    from conformance.validator.rules import judge_run
    from conformance.validator.stream import read_records

    def work(run: RunResult, found: list[Finding]) -> int:
        if mode == "judge":
            return judge_run(run, found.append).records
        if mode == "read":
            return sum(1 for _ in read_records(path))
        records = 0
        with path.open("rb") as fh:
            for line in fh:
                orjson.loads(line)
                records += 1
        return records

    common.timed_child(path, work)


# --- the recordings --------------------------------------------------------------------------------------


def real_recording(profiler: str, runtime: str) -> tuple[Path, dict[str, Any]]:
    """``validate`` of ``profiler`` on heapchurn: its trace and what the run took."""
    # JSON Lines, what this bench has measured since issue 19 (validate writes the binary trace by default
    # since issue 23: bench/stream.py measures that path)
    result, run, wall = common.heapchurn_run(profiler, runtime, env={"PROFHARNESS_TRACE_FORMAT": "jsonl"})
    clauses: collections.Counter[str] = collections.Counter()
    for g in result.groups:
        clauses[g.clause] += g.count
    return Path(run.trace), {"runtime": run.runtime, "wall": wall, "app": run.seconds,
                             "records": run.records, "judge": result.judge_seconds,
                             "findings": dict(sorted(clauses.items()))}  # fmt: skip


def synthesize(real: Path, out: Path, records: int) -> int:
    """``out``: ``real``'s header (up to Initialize's return), its body (up to Shutdown's enter) over and
    over with fresh seqs, then its tail (Shutdown on): about ``records`` records, the last copy of the body
    cut where nothing is open on any thread, the place nearest the count. Returns how many records ``out``
    holds. Streamed: ``real`` is read again for each copy (what is kept of it is a list of line numbers)."""

    def lines() -> Iterator[dict[str, Any]]:
        with real.open("rb") as fh:
            for line in fh:
                if line.strip():
                    yield orjson.loads(line)

    start, end, _total, body, copies, cut = common.repeat_plan(lines(), real, records)
    seq = 0
    with out.open("wb") as fh:

        def write(r: dict[str, Any]) -> None:
            nonlocal seq
            fh.write(orjson.dumps({**r, "seq": seq}) + b"\n")
            seq += 1

        for i, r in enumerate(lines()):
            if i > start:
                break
            write(r)
        for copy in range(copies + 1):
            take = body if copy < copies else cut
            for i, r in enumerate(lines()):
                if i > start + take:
                    break
                if i > start:
                    write(r)
        for i, r in enumerate(lines()):
            if i >= end:
                write(r)
    return seq


# --- the benchmark ---------------------------------------------------------------------------------------


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--runtime", default="8.0", help="the runtime of the real run (default 8.0)")
    parser.add_argument("--records", type=int, default=300_000, help="records of the judged recording")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the judge and the baselines")
    parser.add_argument("--profiler", choices=PROFILERS, default="object_tracker",
                        help="the profiler of the real run (default object_tracker)")  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child[0] not in MODES:
            parser.error(f"--child: a mode of {MODES}")
        child(args.child[0], Path(args.child[1]))
        return 0

    trace, real = real_recording(args.profiler, args.runtime)
    print(f"the run: validate {args.profiler} on heapchurn, {real['runtime']}: {real['wall']:.2f} s wall "
          f"(the app under the proxy {real['app']:.2f} s), {real['records']:,} records, judged in it in "
          f"{real['judge']:.2f} s wall ({real['records'] / max(real['judge'], 1e-9):,.0f} records/s); "
          f"findings: {common.findings_text(real['findings'])}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        one, four = Path(tmp) / "x1.jsonl", Path(tmp) / "x4.jsonl"
        n1 = synthesize(trace, one, args.records)
        n4 = synthesize(trace, four, 4 * args.records)
        print(f"recordings from it: {n1:,} records ({one.stat().st_size / 1e6:.0f} MB) and {n4:,} "
              f"({four.stat().st_size / 1e6:.0f} MB)")  # fmt: skip
        rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                rounds[mode].append(common.measure(__file__, mode, one))
        at4 = common.measure(__file__, "judge", four)
    for got in [*(m for ms in rounds.values() for m in ms), at4]:
        if got["records"] != (n4 if got is at4 else n1):
            raise SystemExit(f"a child counted {got['records']:,} records of {n1:,} (4x: {n4:,})")
    cpu = {mode: statistics.median(m["cpu"] for m in ms) for mode, ms in rounds.items()}
    wall = {mode: statistics.median(m["wall"] for m in ms) for mode, ms in rounds.items()}
    rate, rate4 = n1 / cpu["judge"], n4 / at4["cpu"]
    judged = rounds["judge"]
    print(f"judged, median of {args.rounds}: {cpu['judge']:.3f} s CPU = {rate:,.0f} records/s "
          f"({wall['judge']:.3f} s wall = {n1 / wall['judge']:,.0f} records/s); at 4x: "
          f"{at4['cpu']:.3f} s CPU = {rate4:,.0f} records/s ({at4['wall']:.3f} s wall)")  # fmt: skip
    print(f"findings: {common.findings_text(judged[0]['findings'])} at 1x, "
          f"{common.findings_text(at4['findings'])} at 4x")  # fmt: skip
    print(f"baseline, orjson over every line and nothing else: {cpu['parse']:.3f} s CPU = "
          f"{n1 / cpu['parse']:,.0f} records/s ({wall['parse']:.3f} s wall); "
          f"judge / parse = {cpu['judge'] / cpu['parse']:.2f}x CPU, "
          f"{wall['judge'] / wall['parse']:.2f}x wall")  # fmt: skip
    print(f"the stream's reader alone (read_records, no rule): {cpu['read']:.3f} s CPU = "
          f"{n1 / cpu['read']:,.0f} records/s; {cpu['read'] / cpu['parse']:.2f}x the parse")  # fmt: skip
    peak1 = max(m["peak_kib"] for m in judged)
    peak4 = at4["peak_kib"]
    base1 = max(m["rss_before_kib"] for m in judged)
    growth = peak4 / peak1
    print(f"peak RSS of the judge: {_mib(peak1)} at {n1:,} records, {_mib(peak4)} at {n4:,} ({growth:.2f}x); "
          f"before judging (the interpreter and the imports) {_mib(base1)}, so the judging's own "
          f"{_mib(peak1 - base1)} and {_mib(peak4 - at4['rss_before_kib'])}")  # fmt: skip
    return common.print_verdicts(
        common.rate_verdict(rate, TARGET_RATE),
        (growth <= TARGET_MEMORY_GROWTH,
         f"peak memory at 4x the records {growth:.2f}x the peak at 1x (target <= {TARGET_MEMORY_GROWTH})"),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
