"""Streaming judges (issue 23 part 2): a 50M-record binary recording judged by every validator rule in
constant memory, records per second and peak RSS, against the record-by-record dict path in the same run.

A real recording first, made in this run: ``validate`` of the document-written ``object_tracker`` on
tests/conformance/validator/apps/heapchurn with the binary trace (PROFHARNESS_TRACE_FORMAT=binary; ~650k
records: Info calls inspecting objects, allocations, compacting GCs). From it, a recording of about
``--records`` records (50,000,000 by default), written frame by frame: its frames up to Initialize's return,
the record frames of its body (up to Shutdown) over and over (a record's seq is stored as the difference from
the one before, so each copy has fresh seqs; the definitions of strings, shapes and threads are written once,
in the first copy), the last copy cut where nothing is open on any thread (nearest the count), then its tail
(Shutdown, the counts, the proxy's shutdown mark, the end record). It goes to a temporary folder (``--tmp``,
default the system's) and is deleted afterwards.

Judged in child processes, each by :func:`conformance.validator.rules.judge_run` (what ``validate`` calls):
the columns (:mod:`conformance.validator.columns`, the binary trace's path) over the whole recording; the
baseline, the same rules fed every record decoded into its dict (``columnar=False``, the path before) over a
slice of ``--baseline`` records (1,000,000 by default) made the same way, its rate applied to the whole; and
the floor, reading the file's bytes in chunks with a CRC-32 over each and nothing else. For each: CPU and wall
seconds, records per second of each, the child's peak RSS (VmHWM) and the findings by clause (the columns'
findings on the slice are compared with the baseline's).

Targets: >= 1,000,000 records judged per CPU second by the columns, peak RSS <= 500 MB.

    python bench/stream.py [--runtime 8.0] [--records 50000000] [--baseline 1000000] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402
from conformance.core.findings import Finding  # noqa: E402
from conformance.core.runner import RunResult  # noqa: E402

TARGET_RATE = 1_000_000
TARGET_PEAK_MB = 500
MODES = ("columns", "dict", "read")
_RECORD = 5


# --- the child: one measurement, its result as one JSON line -----------------------------------------------


def child(mode: str, path: Path) -> None:
    """``columns`` / ``dict``: every validator rule over ``path`` (judge_run); ``read``: the file's bytes and
    a CRC-32 of each chunk. Prints CPU and wall seconds, records, findings by clause, RSS before and peak."""
    from conformance.validator.columns import CHUNK
    from conformance.validator.rules import judge_run

    def work(run: RunResult, found: list[Finding]) -> int:
        if mode != "read":
            return judge_run(run, found.append, columnar=mode == "columns").records
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                zlib.crc32(chunk)
        return 0

    common.timed_child(path, work)


# --- the recordings --------------------------------------------------------------------------------------


def real_recording(runtime: str) -> tuple[Path, dict[str, Any]]:
    """``validate`` of object_tracker on heapchurn, binary trace: its trace and what the run took."""
    binary = {"PROFHARNESS_TRACE_FORMAT": "binary"}
    _result, run, wall = common.heapchurn_run("object_tracker", runtime, binary)
    trace = Path(run.trace)
    if trace.read_bytes()[:8] != b"PHFRAMES":
        raise SystemExit(f"{trace}: not a binary trace")
    return trace, {"runtime": run.runtime, "wall": wall, "records": run.records}


def _records(real: Path) -> Iterator[dict[str, Any]]:
    """Every record of the binary trace ``real``; one it cannot decode stops the bench."""
    from conformance.core.binary_trace import raw_records

    for _number, r, what in raw_records(real):
        if r is None:
            if what is not None:
                raise SystemExit(f"{real}: {what}")
            return
        yield r


def synthesize(real: Path, out: Path, records: int) -> int:
    """``out``: ``real``'s frames up to Initialize's return, the record frames of its body (up to Shutdown's
    enter) over and over (definitions only in the first copy), the last copy cut where nothing is open on
    any thread, nearest the count, then its tail. Returns how many records ``out`` holds."""
    from conformance.core.frames import FILE_HEADER_SIZE, FRAME_HEADER_SIZE

    data = real.read_bytes()
    # every frame: (offset, end, type)
    frames: list[tuple[int, int, int]] = []
    at = FILE_HEADER_SIZE
    while at + FRAME_HEADER_SIZE <= len(data):
        length = int.from_bytes(data[at : at + 4], "little")
        end = at + FRAME_HEADER_SIZE + length
        if end > len(data):
            break
        frames.append((at, end, int.from_bytes(data[at + 8 : at + 10], "little")))
        at = end
    of_record = [i for i, f in enumerate(frames) if f[2] == _RECORD]  # record ordinal -> frame index
    start, end_at, total, body, copies, cut = common.repeat_plan(_records(real), real, records)
    first_body, tail = of_record[start] + 1, of_record[end_at]
    written = 0
    with out.open("wb") as fh:
        fh.write(data[:FILE_HEADER_SIZE])
        head_end = frames[first_body - 1][1]
        fh.write(data[FILE_HEADER_SIZE:head_end])
        written += start + 1
        whole = data[head_end : frames[tail - 1][1]]  # the first copy, definitions and all
        records_only = b"".join(data[o:e] for o, e, t in frames[first_body:tail] if t == _RECORD)
        for copy in range(copies + 1):
            if copy == copies:  # the last, cut
                last = of_record[start + cut] + 1 if cut else first_body
                # the first copy's definitions all written (the tail may use them)
                part = b"".join(data[o:e] for i, (o, e, t) in enumerate(frames[first_body:tail], first_body)
                                if (t == _RECORD and i < last) or (t != _RECORD and copy == 0))  # fmt: skip
                fh.write(part)
                written += cut
            else:
                fh.write(whole if copy == 0 else records_only)
                written += body
        fh.write(data[frames[tail][0] :])
        written += total - end_at
    return written


# --- the benchmark ---------------------------------------------------------------------------------------


def _mb(kib: float) -> float:
    return kib * 1024 / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--runtime", default="8.0", help="the runtime of the real run (default 8.0)")
    parser.add_argument("--records", type=int, default=50_000_000, help="records of the judged recording")
    parser.add_argument("--baseline", type=int, default=1_000_000, help="records of the dict path's slice")
    parser.add_argument("--tmp", type=Path, default=None, help="where the recordings go (deleted after)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child[0] not in MODES:
            parser.error(f"--child: a mode of {MODES}")
        child(args.child[0], Path(args.child[1]))
        return 0

    trace, real = real_recording(args.runtime)
    print(f"the run: validate object_tracker on heapchurn, {real['runtime']}, binary trace: "
          f"{real['wall']:.2f} s wall, {real['records']:,} records; "
          f"load {common.load_averages()}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-stream-", dir=args.tmp) as tmp:
        big, small = Path(tmp) / "big.bin", Path(tmp) / "slice.bin"
        started = time.perf_counter()
        n = synthesize(trace, big, args.records)
        m = synthesize(trace, small, min(args.baseline, args.records))
        size, size_small = big.stat().st_size, small.stat().st_size
        print(f"recordings from it: {n:,} records ({size / 1e6:,.0f} MB, {size / n:.1f} bytes/record) and "
              f"the slice {m:,} ({size_small / 1e6:,.0f} MB), written in {time.perf_counter() - started:.1f} "
              "s")  # fmt: skip
        floor = common.measure(__file__, "read", big)
        base = common.measure(__file__, "dict", small)
        base_cols = common.measure(__file__, "columns", small)
        cols = common.measure(__file__, "columns", big)
    load = common.load_averages()
    for got, want in ((cols, n), (base, m), (base_cols, m)):
        if got["records"] != want:
            raise SystemExit(f"a child counted {got['records']:,} records of {want:,}")
    rate, rate_wall = n / cols["cpu"], n / cols["wall"]
    base_rate = m / base["cpu"]
    peak = _mb(cols["peak_kib"])
    before = _mb(cols["rss_before_kib"])
    print(f"columns, {n:,} records: {cols['cpu']:.1f} s CPU = {rate:,.0f} records/s, {cols['wall']:.1f} s "
          f"wall = {rate_wall:,.0f} records/s; peak RSS {peak:.0f} MB (before judging {before:.0f} MB); "
          f"findings: {common.findings_text(cols['findings'])}")  # fmt: skip
    print(f"baseline, every record decoded into its dict (the path before), {m:,} records: {base['cpu']:.2f} "
          f"s CPU = {base_rate:,.0f} records/s ({base['wall']:.2f} s wall), so {n / base_rate:,.0f} s CPU "
          f"for {n:,}; peak RSS {_mb(base['peak_kib']):.0f} MB; columns / dict = {rate / base_rate:.1f}x "
          "CPU")  # fmt: skip
    same = base["findings"] == base_cols["findings"]
    print(f"the slice judged by the columns: {base_cols['cpu']:.2f} s CPU = {m / base_cols['cpu']:,.0f} "
          f"records/s; findings {'the same as' if same else 'DIFFERENT from'} the dict path's: "
          f"{common.findings_text(base_cols['findings'])} / "
          f"{common.findings_text(base['findings'])}")  # fmt: skip
    print(f"floor, the file's bytes read and CRC-32'd in chunks: {floor['cpu']:.2f} s CPU "
          f"({floor['wall']:.2f} s wall) = {n / floor['cpu']:,.0f} records/s; load after {load}")  # fmt: skip
    return common.print_verdicts(
        common.rate_verdict(rate, TARGET_RATE),
        (peak <= TARGET_PEAK_MB,
         f"peak RSS {peak:.0f} MB judging {n:,} records (target <= {TARGET_PEAK_MB} MB)"),
        (same, "the same findings as the dict path on the slice"),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
