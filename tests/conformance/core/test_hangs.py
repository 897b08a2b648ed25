"""conformance.core.hangs: what a hang report says of each thread (no runtime needed: a sleeping process)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from conformance.core.hangs import thread_reports


def test_the_report_reads_what_is_open_from_two_phase_records(tmp_path: Path) -> None:
    """Callbacks and calls written in two phases (enter, return) tell what a thread is still inside; a
    one-phase record is something it returned from. No runtime needed: a sleeping process and its trace."""
    sleeper = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        tid = sleeper.pid
        records: list[dict[str, object]] = [
            {"kind": "header", "probe": "test", "pid": tid},
            {"kind": "callback", "name": "ThreadCreated"},
            {"kind": "callback", "name": "FunctionEnter2", "phase": "enter", "hook": True},
            {"kind": "callback", "name": "FunctionEnter2", "phase": "return", "hook": True},
            {"kind": "callback", "name": "FunctionLeave2", "phase": "enter", "hook": True},
            {"kind": "call", "name": "SuspendRuntime", "phase": "enter", "hr": 0},
            {"kind": "call", "name": "GetFunctionInfo", "hr": 0},
        ]
        trace = tmp_path / "trace.jsonl"
        lines = (json.dumps({"seq": i, "os_tid": tid, **r}) + "\n" for i, r in enumerate(records))
        trace.write_text("".join(lines))
        time.sleep(0.3)
        reports, why = thread_reports(sleeper.pid, trace, gdb_timeout_s=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert why is None, why
    (only,) = reports
    assert only.os_tid == tid and only.name == "sleep"
    assert only.open_callback == "FunctionLeave2" and only.last_callback == "FunctionEnter2"
    assert only.open_call == "SuspendRuntime"
    assert only.age_s is not None and 0.25 <= only.age_s < 30
    assert only.frames and any("sleep" in f for f in only.frames), only.frames
