"""Benchmark: the size of the conformance suite's JSON report, evidence stored once against inline.

Run from the repository root:  python bench/report.py  [--runtime all] [--from RUN.json]

Runs the whole suite (``profharness conformance``: every live, emu and hook experiment on the selected
runtimes; about a minute), or reads a report it wrote (``--from``), then writes the result both ways in the
same run: the report as ``profharness conformance --json`` writes it (format 2: every evidence record once,
in ``evidence_records``, verdicts naming theirs) and the baseline, format 1 (each verdict's records inline,
as the report was written before issue 23). It prints the bytes of each, in all and per runtime (the report
of that runtime's columns alone: ``V`` and ``emu V``), the ratio, how many records are stored against how
many the verdicts show, and checks that the report reads back (every reference resolved) to the same result.

Target: the full suite's report <= 2 MB (2,000,000 bytes). Exit status 0 on PASS, 1 on FAIL.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from conformance.core.errors import InputError
from conformance.suite import report
from conformance.suite.verdicts import SuiteResult

TARGET_BYTES = 2_000_000


def inline_text(result: SuiteResult) -> str:
    """The baseline: the report with each verdict's evidence records inline (format 1)."""
    data = json.loads(result.model_dump_json())
    data["ok"] = result.ok
    judged = [v for v in result.verdicts if v.status != "error" and v.experiment != "-"]
    data["clauses"] = sorted({v.clause for v in judged})
    data["clauses_with_live_verdict"] = sorted({v.clause for v in judged if v.runtime in result.runtimes})
    return json.dumps(data, indent=2, sort_keys=True)


def stored_text(result: SuiteResult) -> str:
    """The report as ``profharness conformance --json`` writes it."""
    return report.dumps_document(report.json_document(result))


def of_runtime(result: SuiteResult, version: str) -> SuiteResult:
    """The result of one runtime's columns (``version`` and ``emu version``) alone."""
    columns = {version, f"emu {version}"}
    return result.model_copy(
        update={
            "runtimes": [version],
            "columns": [c for c in result.columns if c in columns],
            "verdicts": [v for v in result.verdicts if v.runtime in columns],
            "runs": [r for r in result.runs if r.get("runtime") == version],
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="all", help="runtimes to run the suite on (default: all)")
    ap.add_argument("--from", dest="run", type=Path, metavar="RUN.json", help="a report, not a suite run")
    args = ap.parse_args(argv)
    if args.run is not None:
        try:
            result = report.read_json(args.run)
        except InputError as exc:
            print(f"bench/report.py: {exc}", file=sys.stderr)
            return 2
        print(f"report {args.run}: {len(result.verdicts)} verdicts, {len(result.runs)} runs")
    else:
        from conformance.suite.orchestrate import run_suite

        result = run_suite(args.runtime)
        print(f"suite on {', '.join(result.runtimes)}: {len(result.verdicts)} verdicts,"
              f" {len(result.runs)} runs in {result.seconds:.1f} s")  # fmt: skip

    print(f"{'report':<24} {'inline (format 1)':>18} {'stored once':>12} {'ratio':>7}")
    rows = [("all", result)] + [(v, of_runtime(result, v)) for v in result.runtimes]
    for name, part in rows:
        inline, stored = len(inline_text(part).encode()), len(stored_text(part).encode())
        print(f"{name:<24} {inline:>18,} {stored:>12,} {inline / max(stored, 1):>6.1f}x")

    document = report.json_document(result)
    shown = sum(len(v["evidence_refs"]) for v in document["verdicts"])
    print(f"evidence records: {len(document['evidence_records'])} stored, {shown} shown by the verdicts")
    with tempfile.TemporaryDirectory(prefix="bench-report-") as work:
        path = Path(work) / "r.json"
        report.write_json(result, path)
        size = path.stat().st_size
        same = report.read_json(path) == result
    print(f"read back: {'the same result' if same else 'DIFFERENT'}")
    ok = size <= TARGET_BYTES and same
    print(f"{'PASS' if ok else 'FAIL'}: the report is {size:,} bytes (target <= {TARGET_BYTES:,})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
