"""bench/seeding.py (issue 24): the two plans it alternates differ only in the seed (and the naive walk the
recovered mode leaves out), and one tiny round on a live runtime gives the shape the bench prints (no timing
is asserted: speed targets live in the bench, never in tests)."""

from __future__ import annotations

from types import ModuleType

import pytest

from clr_model.flags import CorPrfMonitor
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from tests.conformance.bench_module import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("seeding")


def test_the_two_modes_differ_only_in_the_seed_and_the_naive_walk(bench: ModuleType) -> None:
    plan = load_scenario(bench.SCENARIO).plan
    naive, recovered = bench.mode_plan(plan, 7, "naive"), bench.mode_plan(plan, 7, "recovered")
    for p in (naive, recovered):
        mask = p["event_mask"]
        assert (mask if isinstance(mask, int) else 0) & CorPrfMonitor.COR_PRF_MONITOR_JIT_COMPILATION or (
            "COR_PRF_MONITOR_JIT_COMPILATION" in mask
        )
    (a,) = [e["args"] for e in naive["experiments"] if e["run"] == "capture_sample"]
    (b,) = [e["args"] for e in recovered["experiments"] if e["run"] == "capture_sample"]
    assert (a["seed"], a["naiveWalk"], b["seed"], b["naiveWalk"]) == ("naive", True, "recovered", False)
    assert {k: v for k, v in a.items() if k not in ("seed", "naiveWalk")} == {
        k: v for k, v in b.items() if k not in ("seed", "naiveWalk")
    }
    assert bench.percentile([5, 1, 3], 0.5) == 3.0 and bench.percentile([5, 1, 3], 0.99) == 5.0


@pytest.mark.live
def test_one_tiny_round_prints_both_modes_and_a_verdict(
    bench: ModuleType, runtimes: list[Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    code = bench.main(["--runtime", runtimes[-1].version, "--rounds", "1", "--samples", "20"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert "naive     handler p50" in out and "recovered handler p50" in out
    assert "walks S_OK" in out and "parked for the profiler thread" in out
    assert out.strip().splitlines()[-1] in ("PASS", "FAIL")
