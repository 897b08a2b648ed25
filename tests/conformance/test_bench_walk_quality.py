"""bench/walk_quality.py (issue 24 part 4's acceptance): the intervals it prints and the table's verdict, on
rows made by hand (the live comparison is the bench's own run; a rate target lives in the bench, not here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conformance.validator.result import WalkQualityRow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "walk_quality.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_walk_quality", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
