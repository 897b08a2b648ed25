"""Hangs (issue 13): three deadlocks planted in the probe (conformance/native/src/experiments_faults.cpp),
each run on both bundled runtimes under a short watchdog. The watchdog must detect the hang within its time,
the whole process tree (the host and the child the probe spawned) must be gone, and the report must carry
every thread with its native stack (gdb) and the last callback it was in, naming the stuck thread's callback.

- ``hang-dss``: the DoStackSnapshot page's deadlock. A sampler thread suspends the runtime, walks a thread
  that took the probe's lock in its enter hook, and waits for that lock in its StackSnapshotCallback.
- ``hang-hook``: a FunctionLeave2 hook waits for a gate nobody opens.
- ``hang-suspend``: a thread inside FunctionEnter2 waits for the sampler's walk of itself; the sampler's
  SuspendRuntime waits for that thread to reach a safe point, and never returns.

Each scenario also runs once per runtime as a control, with the plant taken out by one plan change: it
must end normally, so the hang comes from what was planted. The expected names (callbacks, probe functions)
come from the plans and the probe's source, not from the runs. The scenarios live in
``tests/robustness/scenarios/`` (the conformance suite lists only ``conformance/scenarios/``).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.core import probe, scenarios
from conformance.core.hangs import ThreadReport
from conformance.core.runner import RunOutcome, RunResult, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.core.trace import CallbackRecord, Trace
from tests.robustness.conftest import OUTCOMES

SCENARIOS = Path(__file__).parent / "scenarios"
#: the watchdog time the planted hangs run under
WATCHDOG_S = 3.0
#: how much later than WATCHDOG_S the watchdog may take its report (its 20 ms poll, a busy 2-core machine),
#: measured as the age of the process's first thread (kernel start time) when the report was taken
DETECTION_MARGIN_S = 1.0
#: the report may come this much earlier than WATCHDOG_S by that measure: the runner starts its clock just
#: before it forks the host, and the kernel counts start times in 10 ms ticks
EARLY_S = 0.25
#: planted runs per hang and runtime: CI, --long
REPEATS = (1, 10)
#: how long the killed processes get to disappear from /proc (the spawned child is reaped by init)
GONE_WITHIN_S = 5.0
AREA = "hangs"


@dataclass(frozen=True)
class Planted:
    scenario: str
    #: the thread stuck in a callback or hook ("main": the process's first thread; "sampler": the probe's
    #: sampler thread) and the callback (or hook) still open on it
    stuck: str
    stuck_callback: str
    #: a probe function on the stuck thread's native stack, and the wait it is blocked in
    stuck_frame: str
    stuck_wait: str
    #: the profiler API call still open on the sampler thread, and a probe function on its stack
    sampler_call: str | None = None
    sampler_frame: str | None = None
    #: the control: experiment id -> args replacing the planted ones, experiments added
    control_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    control_extra: tuple[Mapping[str, Any], ...] = ()


HANGS = {
    "hang-dss": Planted(
        scenario="hang-dss", stuck="sampler", stuck_callback="StackSnapshotCallback",
        stuck_frame="snapshot_callback", stuck_wait="pthread_mutex_lock",
        sampler_call="DoStackSnapshot", sampler_frame="sampler_main",
        control_args={"sampler": {"lockInCallback": False}},
    ),
    "hang-hook": Planted(
        scenario="hang-hook", stuck="main", stuck_callback="FunctionLeave2",
        stuck_frame="run_action", stuck_wait="pthread_cond_wait",
        control_extra=(
            {"id": "open-gate", "at": "mark:gate.arm", "run": "fault_open_gate", "args": {"afterMs": 100}},
        ),
    ),
    "hang-suspend": Planted(
        scenario="hang-suspend", stuck="main", stuck_callback="FunctionEnter2",
        stuck_frame="run_action", stuck_wait="pthread_cond_wait",
        sampler_call="SuspendRuntime", sampler_frame="sampler_main",
        control_args={"hooks": {"hooks": {"HangSampled": {"enter": "sample", "leave": "none"}}}},
    ),
}  # fmt: skip


def _run(case: Planted, runtime: Runtime, plan: Mapping[str, Any] | None = None) -> RunResult:
    scenario = scenarios.load_scenario_dir(SCENARIOS / case.scenario)
    app = scenarios.compile_scenario(scenario, reference_runtime())
    return execute(scenario, app, runtime, probe.build_probe(), plan=plan, timeout_s=WATCHDOG_S)


def control_plan(case: Planted, planted: Mapping[str, Any]) -> dict[str, Any]:
    """The planted plan with the plant taken out (and no child spawned: a normal exit would leave it)."""
    plan = copy.deepcopy(dict(planted))
    experiments = [e for e in plan["experiments"] if e["run"] != "fault_spawn_child"]
    for experiment in experiments:
        if experiment["id"] in case.control_args:
            experiment["args"] = copy.deepcopy(dict(case.control_args[experiment["id"]]))
    plan["experiments"] = experiments + [copy.deepcopy(dict(e)) for e in case.control_extra]
    return plan


def _one(records: list[Any], what: str) -> Any:
    assert len(records) == 1, f"expected one {what}, found {len(records)}"
    return records[0]


def _dead(pid: int) -> bool:
    """No such process, or a zombie (dead, its exit status not yet collected)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _wait_dead(pids: list[int]) -> list[int]:
    """The pids still alive after GONE_WITHIN_S."""
    deadline = time.monotonic() + GONE_WITHIN_S
    alive = [p for p in pids if not _dead(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _dead(p)]
    return alive


def _thread(threads: tuple[ThreadReport, ...], os_tid: int, where: str) -> ThreadReport:
    found = [t for t in threads if t.os_tid == os_tid]
    assert found, f"{where}: thread {os_tid} is not in the report"
    return found[0]


def _has(frames: tuple[str, ...], name: str) -> bool:
    return any(name in f for f in frames)


def check_planted(case: Planted, result: RunResult, where: str) -> None:
    """Every claim of the module docstring about one planted run; counts each into OUTCOMES."""
    trace: Trace | None = result.trace
    assert result.outcome is RunOutcome.HUNG, f"{where}: {result.describe_failure()}"
    assert trace is not None and trace.problem is None and trace.header is not None, where
    pid = trace.header.pid

    # detected within the watchdog time: the host's age (kernel start time) when the report was taken
    main = _thread(result.threads, pid, where)
    assert main.age_s is not None, where
    assert WATCHDOG_S - EARLY_S <= main.age_s <= WATCHDOG_S + DETECTION_MARGIN_S, (where, main.age_s)
    OUTCOMES[(AREA, f"{case.scenario}: detected within the watchdog time (+{DETECTION_MARGIN_S:.0f} s)")] += 1
    late = math.ceil(max(main.age_s - WATCHDOG_S, 0.0) * 10) / 10
    OUTCOMES[(AREA, f"detected at most {late:.1f} s after the watchdog time")] += 1

    # the whole tree is gone: the host, every thread of it, the child the probe spawned
    spawn = _one(trace.calls("posix_spawnp"), "posix_spawnp call")
    child = int(spawn.out["pid"])
    assert child > 0, where
    tree = [pid, child, *(t.os_tid for t in result.threads)]
    assert _wait_dead(tree) == [], f"{where}: still alive after the kill"
    OUTCOMES[(AREA, f"{case.scenario}: process tree gone (host, child, every thread)")] += 1

    # every thread with its native stack and the last callback it was in
    assert result.threads_problem is None, f"{where}: {result.threads_problem}"
    assert len(result.threads) >= 3, where
    for t in result.threads:
        assert t.frames, f"{where}: thread {t.os_tid} ({t.name}) has no native stack"
    with_callbacks = {r.os_tid for r in trace.of_kind(CallbackRecord)}
    for t in result.threads:
        reported = t.open_callback or t.last_callback
        assert (reported is not None) == (t.os_tid in with_callbacks), (where, t)
    OUTCOMES[(AREA, f"{case.scenario}: every thread reported with its native stack and last callback")] += 1

    # the stuck thread: the callback it is in, its wait, the probe function that waits
    sampler_tid = None
    sampler_started = trace.calls("ProfilerThreadCreated")
    if sampler_started:
        sampler_tid = _one(sampler_started, "sampler thread").os_tid
    stuck_tid = pid if case.stuck == "main" else sampler_tid
    assert stuck_tid is not None, where
    stuck = _thread(result.threads, stuck_tid, where)
    assert stuck.open_callback == case.stuck_callback, (where, stuck)
    assert _has(stuck.frames, case.stuck_frame) and _has(stuck.frames, case.stuck_wait), (where, stuck.frames)
    assert f"{stuck_tid} in {case.stuck_callback}" in result.describe_failure(), where
    if case.sampler_call is not None:
        assert sampler_tid is not None, where
        sampler = _thread(result.threads, sampler_tid, where)
        assert sampler.open_call == case.sampler_call, (where, sampler)
        assert case.sampler_frame is not None, where
        assert _has(sampler.frames, case.sampler_frame), (where, sampler.frames)
    if case.scenario == "hang-dss":
        # the walked thread returned from the enter hook that took the lock, and is in no callback
        holder = _one([r for r in trace.callbacks("FunctionEnter2") if r.model_extra and
                       r.model_extra.get("phase") == "return"], "FunctionEnter2 return")  # fmt: skip
        walked = _thread(result.threads, holder.os_tid, where)
        assert walked.last_callback == "FunctionEnter2" and walked.open_callback is None, (where, walked)
    OUTCOMES[(AREA, f"{case.scenario}: stuck thread named with its callback ({case.stuck_callback})")] += 1


@pytest.mark.live
@pytest.mark.parametrize("name", list(HANGS))
def test_a_planted_hang_is_detected_killed_and_reported(
    runtimes: list[Runtime], name: str, long_profile: bool
) -> None:
    case = HANGS[name]
    planted = scenarios.load_scenario_dir(SCENARIOS / case.scenario).plan
    for runtime in runtimes:
        control = _run(case, runtime, control_plan(case, planted))
        assert control.outcome is RunOutcome.OK, f"control: {control.describe_failure()}"
        OUTCOMES[(AREA, f"{case.scenario}: control (plant taken out) ended normally")] += 1
        for i in range(REPEATS[long_profile]):
            OUTCOMES[(AREA, f"{case.scenario}: planted hangs")] += 1
            check_planted(case, _run(case, runtime), f"{name} on {runtime.version} #{i}")
