"""What every thread of a hung process was doing, taken before the watchdog kills it (issue 13).

:func:`thread_reports` reads, for each thread of the process: its name, scheduler state and wait channel from
``/proc/PID/task/TID``; its native stack from gdb in batch mode (``thread apply all bt``) when gdb is
installed and may attach (bounded by a timeout; without it the stacks are empty and the report says why);
and from the trace the callback it was last in (still open, or the last it returned from).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from conformance.core.trace import CallbackRecord, read_trace

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


def _callbacks_by_thread(trace_path: Path | None) -> tuple[Mapping[int, str], Mapping[int, str]]:
    """(os_tid -> innermost callback still open, os_tid -> last callback returned from) from the trace."""
    if trace_path is None or not trace_path.is_file():
        return {}, {}
    open_: dict[int, list[str]] = {}
    last: dict[int, str] = {}
    for rec in read_trace(trace_path).of_kind(CallbackRecord):
        stack = open_.setdefault(rec.os_tid, [])
        phase = (rec.model_extra or {}).get("phase")
        if phase == "return":
            if stack and stack[-1] == rec.name:
                stack.pop()
            last[rec.os_tid] = rec.name
        elif phase == "enter":
            stack.append(rec.name)
        else:
            last[rec.os_tid] = rec.name
    return {tid: s[-1] for tid, s in open_.items() if s}, last


def thread_reports(
    pid: int, trace_path: Path | None = None, *, gdb_timeout_s: float = GDB_TIMEOUT_S
) -> tuple[tuple[ThreadReport, ...], str | None]:
    """Every thread of ``pid`` (see the module docstring), by thread id; and why stacks are missing, if so."""
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tids = sorted(int(p.name) for p in task_dir.iterdir() if p.name.isdigit())
    except OSError:
        return (), f"process {pid} is gone"
    stacks, why = gdb_stacks(pid, gdb_timeout_s)
    open_cb, last_cb = _callbacks_by_thread(trace_path)
    reports = []
    for tid in tids:
        base = task_dir / str(tid)
        stat = _read(base / "stat")
        # the state letter follows the command name, which is in parentheses and may hold spaces
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        reports.append(
            ThreadReport(
                os_tid=tid, name=_read(base / "comm"), state=state, wchan=_read(base / "wchan") or "0",
                open_callback=open_cb.get(tid), last_callback=last_cb.get(tid), frames=stacks.get(tid, ()),
            )
        )  # fmt: skip
    return tuple(reports), why
