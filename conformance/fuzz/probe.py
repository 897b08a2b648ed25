"""The harness's own probe (conformance/native, :func:`conformance.core.probe.build_probe`) as a fuzz
target: it reads its plan from ``PROFHARNESS_PLAN`` and writes its own trace to ``PROFHARNESS_TRACE``
(both set in the fake runtime's environment; the trace goes to the fuzzing run's work directory).

The probe keeps process-wide state across Initialize/Shutdown (a live runtime loads a profiler once per
process), but its plan starts from scratch at every Initialize (``conformance/native/src/plan.cpp``,
``load_plan``: before, it appended its experiments again each time, so in one reused process each example
walked once more per exception than the one before), so it is fuzzed like any profiler: one fake runtime
process reused across examples.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.core import probe
from conformance.core.plans import resolve_plan

#: What the probe is asked to do under the fuzzer: record every callback it records by default and walk
#: the stack at every exception (default and REGISTER_CONTEXT walks, names resolved through the
#: metadata of the fake runtime's invented modules); the GC callbacks with their ranges.
FUZZ_PLAN: dict[str, Any] = {
    "version": 1,
    "event_mask": ["COR_PRF_MONITOR_GC", "COR_PRF_MONITOR_EXCEPTIONS", "COR_PRF_ENABLE_STACK_SNAPSHOT",
                   "COR_PRF_MONITOR_MODULE_LOADS", "COR_PRF_MONITOR_CLASS_LOADS",
                   "COR_PRF_MONITOR_JIT_COMPILATION", "COR_PRF_MONITOR_THREADS", "COR_PRF_MONITOR_SUSPENDS"],
    "event_mask_hi": ["COR_PRF_HIGH_MONITOR_NONE"],
    "record": ["*"],
    "count": [],
    "experiments": [
        {"id": "walk-default", "at": "ExceptionThrown", "run": "stack_snapshot",
         "args": {"infoFlags": ["COR_PRF_SNAPSHOT_DEFAULT"], "resolve": True}, "times": 0},
        {"id": "walk-register-context", "at": "ExceptionThrown", "run": "stack_snapshot",
         "args": {"infoFlags": ["COR_PRF_SNAPSHOT_REGISTER_CONTEXT"], "resolve": True}, "times": 0},
    ],
}


@dataclass(frozen=True)
class ProbeTarget:
    """What :func:`conformance.fuzz.machine.fuzz` needs to fuzz the probe."""

    profiler: Path
    clsid: str
    env: dict[str, str] = field(default_factory=dict)
    fresh: bool = False


def probe_target(plan: dict[str, Any] | None = None) -> ProbeTarget:
    """The built probe, its CLSID, and its environment (``{workdir}``: the fuzzing run's directory)."""
    resolved = resolve_plan(plan if plan is not None else FUZZ_PLAN, "the fuzz plan")
    env = {"PROFHARNESS_PLAN": json.dumps(resolved), "PROFHARNESS_TRACE": "{workdir}/probe-trace.jsonl"}
    return ProbeTarget(probe.build_probe(), probe.CLSID, env)
