"""bench/walk_quality.py (issue 24 part 4's acceptance): the intervals it prints and the table's verdict, on
rows made by hand (the live comparison is the bench's own run; a rate target lives in the bench, not here)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from conformance.validator.result import WalkQualityRow
from tests.conformance.bench_module import load_bench

BENCH = Path(__file__).resolve().parents[2] / "bench" / "walk_quality.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("walk_quality")


def row(place: str, walks: int, complete: int) -> WalkQualityRow:
    return WalkQualityRow(place=place, walks=walks, failed=0, complete=complete, frames_got=0, frames_truth=0,
                          missing=0, extra=0, no_truth=0)  # fmt: skip


def test_the_wilson_interval_is_the_published_one(bench: ModuleType) -> None:
    # Wilson's score interval, 95%: 5 of 10 -> 0.2366..0.7634; 0 of 10 -> 0..0.2775 (Newcombe 1998, table I)
    lo, hi = bench.wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    lo, hi = bench.wilson(0, 10)
    assert (lo, round(hi, 4)) == (0.0, 0.2775)


def test_the_difference_interval_is_newcombes_hybrid_score(bench: ModuleType) -> None:
    # Newcombe 1998's worked example (method 10): 56/70 - 48/80 = 0.2000, 95% interval 0.0524..0.3339; here as
    # failure shares, the second row's minus the first's
    first, second = row("x", 80, 80 - 48), row("x", 70, 70 - 56)
    d, lo, hi = bench.difference(first, second)
    assert (round(d, 4), round(lo, 4), round(hi, 4)) == (0.2, 0.0524, 0.3339)


def test_the_table_fails_a_naive_gap_over_ten_points_and_a_recovered_place_under_99_percent(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = {"helper:gc": row("helper:gc", 100, 60), "managed": row("managed", 100, 100)}
    close = {"helper:gc": row("helper:gc", 200, 110), "managed": row("managed", 50, 50)}  # 40% -> 45%
    far = {"helper:gc": row("helper:gc", 200, 90), "managed": row("managed", 50, 50)}  # 40% -> 55%
    good = {"helper:gc": row("helper:gc", 100, 100), "managed": row("managed", 10, 9)}  # 9 of 10: too few
    bad = {"helper:gc": row("helper:gc", 100, 98)}

    def columns(naive: object, recovered: object) -> dict[str, object]:
        return {"probe naive": probe, "validate naive": naive, "validate recovered": recovered}

    assert bench.table(columns(close, good), 30, judge=True)
    out = capsys.readouterr().out
    assert "+5.0" in out and "40/100" in out and "90/200" in out and "(< 30 walks)" not in out
    assert not bench.table(columns(far, good), 30, judge=True)
    assert "naive rates differ by more than 10 points" in capsys.readouterr().out
    assert not bench.table(columns(close, bad), 30, judge=True)
    assert "recovered below 99%" in capsys.readouterr().out
    assert bench.table(columns(far, bad), 30, judge=False)  # a table shown, not judged


def frame(kind: str, module: str | None = None, offset: int | None = None, fid: int | None = None) -> object:
    return SimpleNamespace(kind=kind, module=module, module_offset=offset, function_id=fid)


def test_a_site_is_the_ip_and_the_runtime_entry_below_the_first_managed_frame(bench: ModuleType) -> None:
    waits = SimpleNamespace(frames=[
        frame("native", "libc.so.6", 0x85F16), frame("native", "libc.so.6", 0x888BC),
        frame("native", "libcoreclr.so", 0x2F2924), frame("managed", fid=7),
        frame("native", "libcoreclr.so", 0x1234)])  # fmt: skip
    assert bench.site_of(waits) == "libc.so.6+0x85f16 .. libcoreclr.so+0x2f2924 (3 native)"
    stub = SimpleNamespace(frames=[frame("stub"), frame("managed", fid=7)])
    assert bench.site_of(stub) == "stub (1 native)"
    assert bench.site_of(SimpleNamespace(frames=[frame("managed", fid=7)])) == "managed code"
    assert bench.site_of(SimpleNamespace(frames=[frame("native", "libc.so.6", 1)])) == "no managed frame"


def test_the_places_outside_the_tolerance_and_the_sites_that_agree(bench: ModuleType) -> None:
    probe = (row("helper:gc", 100, 50), row("helper:monitor", 100, 97), row("managed", 10, 10))
    naive = (row("helper:gc", 100, 30), row("helper:monitor", 100, 90), row("managed", 10, 0))
    assert bench.gaps(probe, naive, 30) == ["helper:gc"]  # managed: under 30 walks on both sides
    # per site: the same wait, the same outcome; a site with too few walks on a side is not compared
    p_sites = (row("helper:gc | a", 50, 50), row("helper:gc | b", 50, 0), row("helper:gc | c", 4, 0))
    n_sites = (row("helper:gc | a", 20, 19), row("helper:gc | b", 80, 0), row("helper:gc | c", 40, 40))
    assert bench.site_agreement(p_sites, n_sites, 5) == (2, 2)
    n_sites = (row("helper:gc | a", 20, 10), row("helper:gc | b", 80, 0))
    assert bench.site_agreement(p_sites, n_sites, 5) == (2, 1)


def test_the_fixtures_sample_at_the_probes_interval_from_its_plan(bench: ModuleType) -> None:
    scenario = BENCH.parents[1] / "conformance" / "scenarios" / "capture-sampling"
    plan = json.loads((scenario / "plan.json").read_text())
    (sampling,) = [e for e in plan["experiments"] if e["run"] == "capture_sample"]
    assert bench.probe_interval_us() == sampling["args"]["intervalUs"]


def test_pooled_runs_sum_every_count_of_a_place(bench: ModuleType) -> None:
    assert set(bench.COUNTS) == set(WalkQualityRow.model_fields) - {"place"}
    first = (row("helper:gc", 10, 4), row("managed", 5, 5))
    second = (row("helper:gc", 30, 6),)
    (gc, managed) = bench.pooled([first, second])
    assert (gc.place, gc.walks, gc.complete, managed.walks, managed.complete) == ("helper:gc", 40, 10, 5, 5)
