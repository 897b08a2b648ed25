"""Process faults (issue 13): a scenario run under the probe dies at a chosen point, by SIGKILL, SIGSEGV or
abort, in the middle of writing a trace record (``PROFHARNESS_FAULT``, conformance/native trace writer) or
at a random instant (the runner's ``kill_when``). The harness reports the fault with its signal and the trace,
keeps every complete record, and the next run starts clean.

The kill points come from a seeded random source over the record count of a clean run (an input the
faulted run cannot influence). Short profile in CI; ``--long`` for many points per runtime.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from conformance.adapters.capture import write_captures
from conformance.adapters.capture_records import sample_records
from conformance.cli.capture import sampling_plan
from conformance.core import probe, scenarios
from conformance.core.runner import RunOutcome, RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from emu.capture import read_capture
from tests.robustness.conftest import OUTCOMES

pytestmark = pytest.mark.live

SCENARIO = "stack-basic"
SIGNALS = {"KILL": signal.SIGKILL, "SEGV": signal.SIGSEGV, "ABRT": signal.SIGABRT}
#: kill points per runtime and signal: CI, --long
POINTS = (1, 100)


def _run(runtime: Runtime, **kwargs: object) -> RunResult:
    scenario = scenarios.load_scenario(SCENARIO)
    app = scenarios.compile_scenario(scenario, reference_runtime())
    return execute(scenario, app, runtime, probe.build_probe(), **kwargs)  # type: ignore[arg-type]


def _expected_outcome(sig: int) -> RunOutcome:
    return RunOutcome.KILLED if sig == signal.SIGKILL else RunOutcome.CRASHED


@pytest.mark.parametrize("signame", list(SIGNALS))
def test_death_in_the_middle_of_a_record_keeps_every_earlier_record(
    runtimes: list[Runtime], signame: str, long_profile: bool
) -> None:
    sig = SIGNALS[signame]
    rng = random.Random(f"record-{signame}")
    for runtime in runtimes:
        clean = _run(runtime)
        assert clean.outcome is RunOutcome.OK and clean.trace is not None
        total = len(clean.trace.records)
        for _ in range(POINTS[long_profile]):
            n = rng.randrange(1, total)
            result = _run(runtime, env={"PROFHARNESS_FAULT": f"record:{n}:{signame}"})
            where = f"{runtime.version} record {n} {signame}"
            assert result.outcome is _expected_outcome(sig), where
            assert result.signal == signal.Signals(sig).name, where
            assert str(result.trace_path) in result.describe_failure(), where
            trace = result.trace
            assert trace is not None and trace.problem is None, where
            # every record before the one it died in, and the half record set aside as a torn tail
            assert [r.seq for r in trace.records] == list(range(n)), where
            assert trace.torn_tail, where
            OUTCOMES[("process faults", f"deaths mid-record ({signame}) with every earlier record kept")] += 1
        # the next run starts clean
        again = _run(runtime)
        assert again.outcome is RunOutcome.OK and again.trace is not None and again.trace.problem is None
        assert len(again.trace.records) == total


@pytest.mark.parametrize("signame", ["KILL", "SEGV"])
def test_kill_at_a_random_instant_is_reported_and_loses_no_record(
    runtimes: list[Runtime], signame: str, long_profile: bool, tmp_path: Path
) -> None:
    sig = SIGNALS[signame]
    rng = random.Random(f"instant-{signame}")
    for runtime in runtimes:
        clean = _run(runtime)
        assert clean.outcome is RunOutcome.OK
        for _ in range(POINTS[long_profile]):
            delay = rng.uniform(0.0, clean.seconds)
            started = time.monotonic()

            def after(_trace: Path, deadline: float = started + delay) -> bool:
                return time.monotonic() >= deadline

            result = _run(runtime, kill_when=after, kill_signal=sig)
            where = f"{runtime.version} after {delay:.3f} s {signame}"
            trace = result.trace
            if result.outcome is RunOutcome.OK:  # it finished first
                OUTCOMES[("process faults", f"random-instant {signame}: run finished first")] += 1
                continue
            assert result.outcome in (_expected_outcome(sig), RunOutcome.KILLED), where
            if trace is None:  # killed before the probe created its trace
                assert result.trace_problem is not None and "no trace" in result.trace_problem, where
                OUTCOMES[
                    ("process faults", f"random-instant {signame}: killed before the trace existed")
                ] += 1
                continue
            assert trace.problem is None, where
            assert [r.seq for r in trace.records] == list(range(len(trace.records))), where
            OUTCOMES[("process faults", f"random-instant {signame}: reported, every record readable")] += 1


def test_death_in_the_middle_of_a_capture_keeps_every_complete_sample(
    runtimes: list[Runtime], tmp_path: Path
) -> None:
    """The sampling scenario dies while the probe writes a sample (half of its frame in the capture sidecar,
    then SIGKILL): every sample written before it becomes a capture that reads back; the torn one is left
    out, with one line."""
    scenario = scenarios.load_scenario("capture-sampling")
    plan = sampling_plan(dict(scenario.plan), 6, "capture-sampling/plan.json")
    app = scenarios.compile_scenario(scenario, reference_runtime())
    for runtime in runtimes:
        clean = execute(scenario, app, runtime, probe.build_probe(), plan=plan)
        assert clean.outcome is RunOutcome.OK and clean.trace is not None
        records, lost = sample_records(clean.trace)
        assert (len(records), lost) == (6, []), lost
        result = execute(scenario, app, runtime, probe.build_probe(), plan=plan,
                         env={"PROFHARNESS_FAULT": "sample:3:KILL"})  # fmt: skip  # die writing the fourth
        where = f"{runtime.version} sample 3"
        assert result.outcome is RunOutcome.KILLED and result.trace is not None, where
        written = write_captures(result.trace, tmp_path / runtime.version, runtime=runtime.version)
        assert [p.name for p in written.paths] == [f"sample-000{i}.phcap" for i in range(3)], where
        (note,) = written.skipped
        assert ": torn: " in note and note.endswith("payload bytes, then the end"), (where, note)
        for path in written.paths:
            read_capture(path)
        OUTCOMES[("process faults", "death mid-capture: every complete sample a capture")] += 1
