"""``profharness capture``: the sampling plan (no runtime) and live captures on every bundled runtime."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from conformance.cli import capture
from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from emu.capture import STACK_CAPTURE_BYTES, read_capture


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    capture.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_sampling_plan_sets_the_sample_count_on_the_scenarios_own_plan() -> None:
    plan = load_scenario("capture-sampling").plan
    out = capture.sampling_plan(plan, 7, "capture-sampling/plan.json")
    sampling = [e for e in out["experiments"] if e["run"] == capture.SAMPLING_EXPERIMENT]
    assert [e["args"]["samples"] for e in sampling] == [7]
    assert plan["experiments"] != out["experiments"]  # the scenario's plan itself is left alone


def test_a_plan_without_a_sampling_experiment_is_one_line() -> None:
    with pytest.raises(
        HarnessError, match=r"^x/plan\.json: no capture_sample experiment to take samples with$"
    ):
        capture.sampling_plan({"experiments": [{"id": "a", "run": "stack_snapshot"}]}, 3, "x/plan.json")


def test_a_bad_sample_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"--samples 0: must be between 1 and 100000"):
        capture.main(parse("capture-sampling", "--samples", "0", "--out", str(tmp_path)))


@pytest.mark.live
def test_live_captures_read_back_consistent(
    runtimes: list[Runtime], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = 20
    assert (
        capture.main(
            parse("capture-sampling", "--runtime", "all", "--samples", str(samples), "--out", str(tmp_path))
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(runtimes)
    for rt in runtimes:
        files = sorted((tmp_path / rt.version).glob("*.phcap"))
        assert len(files) == samples, rt.version
        assert any(line.startswith(f"capture-sampling on {rt.version}: {samples} captures") for line in lines)
        for f in files:
            cap = read_capture(f)  # validates the manifest, the segments and the CONTEXT
            m = cap.manifest
            regs = m.registers
            code = [(s.address or 0, s.size) for s in m.segments if s.role == "code"]
            assert any(a <= regs.rip < a + n for a, n in code), f"{f}: IP outside every code segment"
            # the stack from SP, and the red zone below it when SP was not at the stack's low end
            (stack,) = [s for s in m.segments if s.role == "stack" and s.name == m.stack.segment]
            red = [s for s in m.segments if s.role == "stack" and s.name != m.stack.segment]
            assert [(s.address, s.size) for s in red] in ([], [(regs.rsp - 128, 128)]), f
            assert stack.address == regs.rsp == m.stack.sp, f
            assert m.stack.stack_end is not None
            assert stack.size == min(STACK_CAPTURE_BYTES, m.stack.stack_end - regs.rsp), f
            assert regs.fs_base != 0, f
            assert m.context is not None and m.context.runtime == rt.version
            assert m.live is not None and m.live.seed == "naive"
            if m.live.hresult == 0:
                assert m.live.frames, f"{f}: a successful live walk with no frame"
            assert m.known_managed and m.known_managed[0].name.endswith("CaptureSampling::Work")
            assert m.jit.methods and m.modules
