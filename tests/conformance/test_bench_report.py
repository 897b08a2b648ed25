"""bench/report.py (issue 23): the report's size stored once against the inline baseline, from a report; the
baseline is the format 1 writer's text byte for byte (a size target lives in the bench, not in a test)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from conformance.suite import report
from tests.conformance.bench_module import load_bench
from tests.conformance.suite.test_report import shared_evidence


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("report")


def test_the_baseline_is_the_inline_report(bench: ModuleType) -> None:
    result = shared_evidence()
    summary = {k: v for k, v in report.json_document(result).items()
               if k in ("ok", "clauses", "clauses_with_live_verdict")}  # fmt: skip
    assert json.loads(bench.inline_text(result)) == {**json.loads(result.model_dump_json()), **summary}
    assert bench.stored_text(result) == report.dumps_document(report.json_document(result))


def test_from_a_report_it_prints_both_sizes_and_the_verdict(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report.write_json(shared_evidence(), tmp_path / "r.json")
    assert bench.main(["--from", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:5]}
    assert set(rows) == {"all", "3.1.23", "8.0.4"}
    inline, stored = (int(x.replace(",", "")) for x in rows["all"][:2])
    assert stored < inline / 2  # the MovedReferences2 record of three verdicts is stored once
    assert "evidence records: 2 stored, 5 shown by the verdicts" in out
    assert "read back: the same result" in out and out.splitlines()[-1].startswith("PASS: the report is")
    monkeypatch.setattr(bench, "TARGET_BYTES", 100)
    assert bench.main(["--from", str(tmp_path / "r.json")]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAIL")
