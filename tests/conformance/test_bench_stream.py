"""bench/stream.py (issue 23 part 2): the recording it builds frame by frame from a real one holds the
records asked for, with fresh consecutive seqs, and judges as the dict path does; run tiny on a live run, it
prints its measurements and its verdicts (the speed target lives in the bench, not in a test)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conformance.core.binary_trace import raw_records
from tests.conformance.bench_module import load_bench
from tests.conformance.validator.test_columns import ALLOCATED, INSPECT, _judge, _Records
from tests.conformance.validator.trace_encoding import encode


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("stream")


def _real() -> list[dict[str, Any]]:
    rec = _Records()
    rec.add("header", tid=None, probe="proxy", pid=1, proxy={"callbackLevel": 11})
    rec.callback("Initialize")
    rec.add("mark", name="proxy.mask", payload=None, heap=True, hr=0)
    for i in range(30):
        rec.callback(ALLOCATED, [(INSPECT, {"oid": 0x1000 + i})], os_tid=7 + i % 3)
        rec.inspect(INSPECT, heap={"verdict": "stale"} if i == 3 else None)
    rec.callback("Shutdown")
    rec.add("mark", name="proxy.shutdown", payload=None, threads=[])
    rec.add("end", tid=None)
    return rec.records


@pytest.mark.parametrize("records", [50, 1000, 5003])
def test_the_recording_repeats_the_body_with_fresh_seqs(
    bench: ModuleType, tmp_path: Path, records: int
) -> None:
    real, out = tmp_path / "real.bin", tmp_path / "out.bin"
    source = _real()
    real.write_bytes(encode(source))
    n = bench.synthesize(real, out, records)
    got = [r for _n, r, _what in raw_records(out)]
    assert None not in got and len(got) == n
    assert abs(n - records) <= 4  # the last copy cut where nothing is open: within one callback and a call
    assert [r["seq"] for r in got] == list(range(n))
    assert [r["name"] for r in got[-3:-1]] == ["Shutdown", "proxy.shutdown"] and got[-1]["kind"] == "end"
    assert _judge(out, columnar=True) == _judge(out, columnar=False)
    stale = sum(1 for r in got if r["kind"] == "call" and (r.get("heap") or {}).get("verdict") == "stale")
    clauses = [f for f in _judge(out, columnar=True)[0] if '"MR2-17"' in f]
    assert len(clauses) == stale > 0


@pytest.mark.live
@pytest.mark.long  # (the bench's own run, 22 s in CI; the columns and their findings are held every run)
def test_tiny_it_prints_the_rates_the_peak_and_the_verdicts(
    bench: ModuleType, runtimes: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # one run, both verdict paths: the rate and the findings pass, the peak (target 1 MB) fails
    monkeypatch.setattr(bench, "TARGET_RATE", 1)
    monkeypatch.setattr(bench, "TARGET_PEAK_MB", 1)
    assert bench.main(["--records", "30000", "--baseline", "10000"]) == 1
    out = capsys.readouterr().out
    assert "records judged per CPU second" in out and "peak RSS" in out
    rate, peak, same = out.splitlines()[-3:]
    assert rate.startswith("PASS: ") and rate.endswith("records judged per CPU second (target >= 1)"), out
    assert peak.startswith("FAIL: peak RSS") and peak.endswith("(target <= 1 MB)"), out
    assert same == "PASS: the same findings as the dict path on the slice"
