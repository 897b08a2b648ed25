"""bench/sampling.py (issue 8): the unsampled plan is the scenario's own without its sampling, and one
tiny round on a live runtime gives the shape the bench prints (no timing is asserted: speed targets live in
the bench, never in tests)."""

from __future__ import annotations

from types import ModuleType

import pytest

from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from tests.conformance.bench_module import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("sampling")


def test_unsampled_plan_is_the_scenarios_plan_without_capture_sample(bench: ModuleType) -> None:
    plan = load_scenario(bench.SCENARIO).plan
    quiet = bench.unsampled_plan(plan)
    runs = [e["run"] for e in plan["experiments"]]
    assert "capture_sample" in runs
    assert [e["run"] for e in quiet["experiments"]] == [r for r in runs if r != "capture_sample"]
    assert {k: v for k, v in quiet.items() if k != "experiments"} == {
        k: v for k, v in plan.items() if k != "experiments"
    }
    assert bench.plan_interval_us(plan) == 10000  # 100 Hz, as the issue asks
    with pytest.raises(HarnessError, match=r"no capture_sample experiment to leave out$"):
        bench.unsampled_plan(quiet)


def test_percentile_is_nearest_rank(bench: ModuleType) -> None:
    values = list(range(1, 101))  # 1..100
    assert bench.percentile(values, 0.5) == 51  # index round(49.5) = 50
    assert bench.percentile(values, 0.99) == 99
    assert bench.percentile([7], 0.99) == 7


@pytest.mark.live
def test_one_tiny_round_has_the_shape_printed(bench: ModuleType, runtimes: list[Runtime]) -> None:
    rt = runtimes[-1]
    res = bench.bench_runtime(rt, rounds=1, chunks=30)
    assert res.runtime == rt.version
    assert len(res.sampled) == len(res.unsampled) == 1
    (sampled,), (unsampled,) = res.sampled, res.unsampled
    for run in (sampled, unsampled):
        assert run.work.chunks == 30 and run.work.depth == 32
        assert run.work.wall_ns > 0 and run.work.thread_cpu_ns > 0 and run.work.process_cpu_ns > 0
    assert sampled.work.checksum == unsampled.work.checksum  # the same fixed work both ways
    assert unsampled.samples == () and unsampled.taken == 0
    # asked for more samples than the work lasts: some fell in it, the last one after it
    assert sampled.taken == res.samples_asked > len(sampled.samples) > 0
    for s in sampled.samples:
        assert s.copy_ns > 0 and s.walk_ns > 0
    lines = bench.format_result(res)
    assert lines[0] == f"runtime {rt.version}: 1 sampled and 1 unsampled runs"
    text = "\n".join(lines)
    for part in (
        "unsampled median: wall",
        "sampled   median: wall",
        "overhead (sampled/unsampled - 1)",
        "samples in the work:",
        "handler copy:    p50",
        "DoStackSnapshot: p50",
        "process CPU overhead at 100 Hz:",
    ):
        assert part in text, part
    assert lines[-1].strip() in ("PASS", "FAIL")
