"""Bounds (issue 13): what stops a run that would grow without end, each shown firing with its message.

- The trace size cap: ``PROFHARNESS_TRACE_MAX_BYTES`` (default 1 GiB) bounds the probe's trace; the record
  that would pass it is replaced by one final ``probe_error`` record naming the trace and the cap, which
  ``profharness run`` prints as one line.
- The fuzzer's campaign bounds: ``--max-examples`` and ``--time``.
- The emulator's instruction and time budgets are shown firing in tests/emu/test_machine.py
  (``test_instruction_budget``, ``test_time_budget_bounds_the_run``) and a capture's size limits in
  tests/emu/test_capture.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from conformance.cli.run import render_text, summarize
from conformance.core import probe, scenarios
from conformance.core.runner import RunOutcome, RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.core.trace import ProbeErrorRecord
from tests.robustness.conftest import OUTCOMES

SCENARIO = "stack-basic"


def _run(runtime: Runtime, env: dict[str, str]) -> RunResult:
    scenario = scenarios.load_scenario(SCENARIO)
    app = scenarios.compile_scenario(scenario, reference_runtime())
    return execute(scenario, app, runtime, probe.build_probe(), env=env)


@pytest.fixture(scope="module")
def clean(runtimes: list[Runtime]) -> RunResult:
    """A run without a cap (the default 1 GiB does not fire): what the capped runs are compared with."""
    result = _run(runtimes[-1], {})
    assert result.outcome is RunOutcome.OK and result.trace is not None
    return result


@pytest.mark.live
@pytest.mark.parametrize("cap", [1, 4096])
def test_the_trace_stops_at_its_size_cap_with_one_notice(
    runtimes: list[Runtime], clean: RunResult, cap: int
) -> None:
    assert clean.trace is not None and clean.trace_path.stat().st_size > cap  # the cap must fire
    assert not clean.trace.of_kind(ProbeErrorRecord) or all(
        r.where != "trace" for r in clean.trace.of_kind(ProbeErrorRecord)
    )
    result = _run(runtimes[-1], {"PROFHARNESS_TRACE_MAX_BYTES": str(cap)})
    assert result.outcome is RunOutcome.OK, result.describe_failure()
    trace = result.trace
    assert trace is not None and trace.problem is None and not trace.torn_tail
    *kept, last = trace.records
    # every record before the notice, in order, and the notice is the last line of the file
    assert [r.seq for r in trace.records] == list(range(len(trace.records)))
    assert isinstance(last, ProbeErrorRecord) and last.where == "trace"
    extra = last.model_extra or {}
    assert extra["cap"] == cap
    size = result.trace_path.stat().st_size
    notice = len(result.trace_path.read_bytes().splitlines(keepends=True)[-1])
    assert extra["bytes"] == size - notice <= cap  # the records before it fit under the cap
    # the records kept are the clean run's first ones (same kinds, in the same order)
    assert [r.kind for r in kept] == [r.kind for r in clean.trace.records[: len(kept)]]
    # the harness's one line names the trace and the cap
    lines = [line for line in render_text(summarize(result)).splitlines() if "size cap" in line]
    assert len(lines) == 1 and str(result.trace_path) in lines[0] and f"the cap is {cap} " in lines[0]
    assert "PROFHARNESS_TRACE_MAX_BYTES" in lines[0]
    OUTCOMES[("bounds", f"trace cap {cap} B: stopped with one notice")] += 1


@pytest.mark.live
@pytest.mark.parametrize("value", ["0", "1k", "99999999999999999999999"])
def test_a_trace_cap_that_is_not_a_byte_count_is_refused_with_one_line(
    runtimes: list[Runtime], value: str
) -> None:
    result = _run(runtimes[-1], {"PROFHARNESS_TRACE_MAX_BYTES": value})
    assert result.trace is None  # the probe did not profile: no trace at all, not an unbounded one
    assert f"PROFHARNESS_TRACE_MAX_BYTES={value} is not a positive byte count" in result.stderr_tail
    OUTCOMES[("bounds", "trace cap not a byte count: refused")] += 1


# --------------------------------------------------------------------------------------------------
# The fuzzer's campaign bounds (fixture profiler ``correct``: no finding, so only a bound stops it)


def test_fuzz_stops_at_max_examples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli import main as cli_main
    from tests.conformance.fuzz.fixtures import CLSID, build

    code = cli_main(["fuzz", str(build("correct")), "--clsid", CLSID, "--max-examples", "7", "--seed", "1",
                     "--reproducer", str(tmp_path / "r.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "no findings" in out
    assert re.search(r"^7 examples, \d+ events in ", out, re.MULTILINE), out
    OUTCOMES[("bounds", "fuzz --max-examples: stopped at the count")] += 1


def test_fuzz_stops_at_its_time_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli import main as cli_main
    from tests.conformance.fuzz.fixtures import CLSID, build

    profiler = build("correct")
    began = time.monotonic()
    code = cli_main(["fuzz", str(profiler), "--clsid", CLSID, "--max-examples", "1000000", "--time", "1",
                     "--seed", "1", "--reproducer", str(tmp_path / "r.json")])  # fmt: skip
    took = time.monotonic() - began
    out = capsys.readouterr().out
    assert code == 0 and "no findings" in out
    match = re.search(r"^(\d+) examples, \d+ events in ([\d.]+) s", out, re.MULTILINE)
    assert match is not None, out
    assert int(match.group(1)) < 1_000_000  # the time limit stopped it, not the example count
    OUTCOMES[("bounds", f"fuzz --time 1: stopped after {int(match.group(1))} examples, {took:.0f} s")] += 1
