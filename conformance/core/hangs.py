"""What every thread of a hung process was doing, taken before the watchdog kills it (issue 13).

:func:`thread_reports` reads, for each thread of the process: its name, scheduler state and wait channel from
``/proc/PID/task/TID``; its native stack from gdb in batch mode (``thread apply all bt``) when gdb is
installed and may attach (bounded by a timeout; without it the stacks are empty and the report says why);
from the trace the callback it was last in (still open, or the last it returned from) and the profiler API
call still open on it; and how long it had existed when the report was taken (the kernel's start time, read
before gdb attaches: for the process's first thread that is how long after its start the watchdog fired).

Records written in two phases (``"phase": "enter"`` before, ``"return"`` after: the recording proxy's
callbacks and calls, the probe's planted hangs in experiments_faults.cpp) say what is still open; a
one-phase record is something the thread has returned from.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from conformance.core.trace import CallbackRecord, CallRecord, read_trace

__all__ = ["GDB_TIMEOUT_S", "ThreadReport", "gdb_stacks", "thread_reports"]

#: gdb gets this long to attach and print every thread's stack
GDB_TIMEOUT_S = 30.0
#: frames kept per thread
MAX_FRAMES = 48

_GDB_THREAD = re.compile(r"^Thread \d+ \(.*?LWP (\d+)\)")
_GDB_FRAME = re.compile(r"^#\d+\s+")


class ThreadReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    os_tid: int
    name: str
    #: /proc state letter (R running, S sleeping, D disk wait, T stopped, Z zombie) and wait channel
    state: str
    wchan: str
    #: the callback still open on this thread when it hung, else the last one it returned from (trace)
    open_callback: str | None = None
    last_callback: str | None = None
    #: the profiler API call (ICorProfilerInfo*) still open on this thread when it hung (two-phase records)
    open_call: str | None = None
    #: seconds the thread had existed when the report was taken (before gdb attached); None if unreadable
    age_s: float | None = None
    #: native frames, innermost first, as gdb prints them ("0x... in func () from lib")
    frames: tuple[str, ...] = ()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def gdb_stacks(pid: int, timeout_s: float = GDB_TIMEOUT_S) -> tuple[dict[int, tuple[str, ...]], str | None]:
    """Thread id -> native frames of process ``pid`` from gdb in batch mode; and why there are none, if so."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return {}, "gdb is not installed (apt-get install gdb)"
    try:
        proc = subprocess.run(
            [gdb, "-nx", "-batch", "-p", str(pid), "-ex", "set pagination off",
             "-ex", "set print frame-arguments none", "-ex", "thread apply all bt"],
            capture_output=True, text=True, errors="replace", timeout=timeout_s, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {}, f"gdb did not finish within {timeout_s:.0f} s"
    except OSError as exc:
        return {}, f"gdb could not start: {exc.strerror or exc}"
    stacks: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in proc.stdout.splitlines():
        head = _GDB_THREAD.match(line)
        if head:
            current = stacks.setdefault(int(head.group(1)), [])
            continue
        if current is not None and _GDB_FRAME.match(line) and len(current) < MAX_FRAMES:
            current.append(_GDB_FRAME.sub("", line, count=1).strip())
    if not stacks:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {}, f"gdb could not read the threads: {last}"
    return {tid: tuple(frames) for tid, frames in stacks.items()}, None


@dataclass
class _Opened:
    """By os_tid: the callbacks and calls still open (innermost last); the last callback returned from."""

    callbacks: dict[int, list[str]] = field(default_factory=dict)
    calls: dict[int, list[str]] = field(default_factory=dict)
    last: dict[int, str] = field(default_factory=dict)


def _innermost(stacks: Mapping[int, list[str]], tid: int) -> str | None:
    stack = stacks.get(tid)
    return stack[-1] if stack else None


def _track(stacks: dict[int, list[str]], tid: int, name: str, phase: object) -> bool:
    """Applies one record's phase to ``stacks``; True when it is something the thread has returned from."""
    stack = stacks.setdefault(tid, [])
    if phase == "enter":
        stack.append(name)
        return False
    if phase == "return" and stack and stack[-1] == name:
        stack.pop()
    return True


def _opened(trace_path: Path | None) -> _Opened:
    """What each thread had open and last returned from, by os_tid, from the trace."""
    opened = _Opened()
    if trace_path is None or not trace_path.is_file():
        return opened
    for rec in read_trace(trace_path).records:
        if isinstance(rec, CallbackRecord):
            if _track(opened.callbacks, rec.os_tid, rec.name, (rec.model_extra or {}).get("phase")):
                opened.last[rec.os_tid] = rec.name
        elif isinstance(rec, CallRecord):
            _track(opened.calls, rec.os_tid, rec.name, (rec.model_extra or {}).get("phase"))
    return opened


def _age_s(stat: str, now_boot_s: float) -> float | None:
    """Seconds since the thread started, from its /proc stat line (starttime, field 22, in clock ticks)."""
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        start_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None
    return round(now_boot_s - start_s, 3)


def thread_reports(
    pid: int, trace_path: Path | None = None, *, gdb_timeout_s: float = GDB_TIMEOUT_S
) -> tuple[tuple[ThreadReport, ...], str | None]:
    """Every thread of ``pid`` (see the module docstring), by thread id; and why stacks are missing, if so."""
    # the clock /proc start times count from (boot, in clock ticks), read before anything slow
    now_boot_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tids = sorted(int(p.name) for p in task_dir.iterdir() if p.name.isdigit())
    except OSError:
        return (), f"process {pid} is gone"
    # /proc and the trace first (as they were when the watchdog fired), then gdb (seconds)
    stats = {tid: _read(task_dir / str(tid) / "stat") for tid in tids}
    opened = _opened(trace_path)
    stacks, why = gdb_stacks(pid, gdb_timeout_s)
    reports = []
    for tid in tids:
        base = task_dir / str(tid)
        stat = stats[tid]
        # the state letter follows the command name, which is in parentheses and may hold spaces
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        reports.append(
            ThreadReport(
                os_tid=tid, name=_read(base / "comm"), state=state, wchan=_read(base / "wchan") or "0",
                open_callback=_innermost(opened.callbacks, tid), last_callback=opened.last.get(tid),
                open_call=_innermost(opened.calls, tid), age_s=_age_s(stat, now_boot_s),
                frames=stacks.get(tid, ()),
            )
        )  # fmt: skip
    return tuple(reports), why
