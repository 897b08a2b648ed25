"""The fake runtime process: one child reused across examples, restarted only after a crash or a hang.

An example goes to its stdin as one JSON line (the array of its commands, ``start`` to ``end``) in one write
and the child answers it (``started``, ``ended``) in one write when it has carried the commands out, so an
example costs one round trip. Every wait is bounded by a watchdog: a profiler that hangs gets the child
killed (``hung``), one that crashes leaves the child dead (``crashed``); either way the harness goes on
with a new child.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.core import interrupt, probe
from conformance.core.errors import HarnessError, InputError
from conformance.core.runner import RunOutcome

#: CMake target and file of the fake runtime executable (conformance/native/CMakeLists.txt).
FAKERUNTIME_TARGET = "profharness_fakeruntime"
FAKERUNTIME_FILE = "profharness-fakeruntime"
#: A command may wait this long for the profiler by default (a callback that runs longer is a hang).
DEFAULT_HANG_S = 2.0
#: ... and an example this much longer per command it carries (a 600-object burst is no hang).
PER_COMMAND_S = 0.001
#: Commands to the child's JSON (one encoder made once: ``json.dumps`` makes one per call).
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def build_fakeruntime() -> Path:
    """The fake runtime executable, built into the harness cache when needed."""
    built = probe.build_target(FAKERUNTIME_TARGET, FAKERUNTIME_FILE, "fakeruntime")
    if not os.access(built, os.X_OK):  # build_target copies the file's bytes, not its mode
        built.chmod(built.stat().st_mode | 0o111)
    return built


@dataclass
class ExampleOutcome:
    """How one example ended: ``ok`` (Shutdown returned), ``crashed`` or ``hung`` (the child is gone)."""

    outcome: RunOutcome
    signal: str | None = None
    seconds: float = 0.0
    callback_level: int = 0
    errors: list[str] = field(default_factory=list)
    stderr_tail: str = ""


class ChildDied(Exception):
    """The child ended (crash) or stopped answering (hang) in the middle of an example."""

    def __init__(self, outcome: RunOutcome, sig: str | None) -> None:
        super().__init__(f"{outcome.value} ({sig})" if sig else outcome.value)
        self.outcome = outcome
        self.signal = sig


class FakeRuntime:
    """One fake runtime child for ``profiler`` (a ``.so``) with class id ``clsid``."""

    def __init__(self, profiler: Path, clsid: str, *, hang_s: float = DEFAULT_HANG_S,
                 executable: Path | None = None, env: Mapping[str, str] | None = None,
                 workdir: Path | None = None, fresh: bool = False) -> None:
        if not profiler.is_file():
            raise InputError(f"{profiler}: no such profiler")
        self.profiler = profiler
        self.clsid = clsid
        self.hang_s = hang_s
        self.executable = executable or build_fakeruntime()
        #: set in the child's environment (a profiler configured by it, like the harness's probe); a
        #: value's ``{workdir}`` is ``workdir`` (a reproducer's paths then follow it to its replay)
        self.env = {k: v.replace("{workdir}", str(workdir)) if workdir else v for k, v in (env or {}).items()}
        #: a new child for every example, for a profiler that keeps process-wide state across
        #: Initialize/Shutdown (a live runtime loads a profiler once per process); not counted as restarts
        self.fresh = fresh
        self._stderr_tail = b""
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._pending: list[bytes] = []
        self.restarts = 0
        self.last_stderr = ""

    # --- the process ---------------------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes]:
        interrupt.check()  # no new child once SIGINT/SIGTERM came
        # deferred: a signal between Popen's return and here would leave the child and its pipes to the
        # garbage collector (ResourceWarnings); once it is self._proc, close() reaps it
        with interrupt.deferred():
            proc = subprocess.Popen(
                [str(self.executable), str(self.profiler), self.clsid],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
            self._proc = proc
            self._buf = b""
            interrupt.register(proc)  # its own process group: a signal to the harness ends it (close() reaps)
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stderr.fileno(), False)
        try:
            ready = self._read_reply(deadline=time.monotonic() + 30)
        except ChildDied:
            self._reap()
            err = self.last_stderr
            raise HarnessError(
                f"{self.profiler}: the fake runtime could not load it: {err.strip().splitlines()[-1:] or '?'}"
            ) from None
        if ready.get("op") != "ready":
            raise HarnessError(f"fake runtime: unexpected first reply {ready}")
        return proc

    def _alive(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._reap()
            self._spawn()
        assert self._proc is not None
        return self._proc

    def _drain_stderr(self) -> None:
        """Keep the tail of what the child wrote to stderr (read as it comes: a full pipe would block a
        chatty profiler, which the harness would then call hung)."""
        if self._proc is None or self._proc.stderr is None:
            return
        try:
            data = self._proc.stderr.read() or b""
        except (OSError, ValueError):
            data = b""
        self._stderr_tail = (self._stderr_tail + data)[-4000:]

    def _stderr(self) -> str:
        self._drain_stderr()
        tail, self._stderr_tail = self._stderr_tail, b""
        return tail.decode(errors="replace")[-2000:]

    def _reap(self) -> tuple[RunOutcome, str | None]:
        proc = self._proc
        if proc is None:
            return RunOutcome.CRASHED, None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            outcome, sig = RunOutcome.HUNG, "SIGKILL"
        else:
            code = proc.returncode
            if code < 0:
                outcome = RunOutcome.CRASHED
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = f"signal {-code}"
            else:
                outcome, sig = RunOutcome.FAILED, None
        self.last_stderr = self._stderr()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        self._proc = None
        interrupt.unregister(proc)
        return outcome, sig

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._send_now([{"op": "quit"}], deadline=time.monotonic() + 1)
                self._proc.wait(timeout=2)
            except (ChildDied, subprocess.TimeoutExpired, OSError):
                pass
        if self._proc is not None:
            self._reap()

    def __enter__(self) -> FakeRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the pipe ------------------------------------------------------------------------------------

    def _send_now(self, commands: Sequence[Mapping[str, Any]], deadline: float) -> None:
        """``commands`` as one line (a JSON array: one encoding here, one parse in the child)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        data = _ENCODE(commands).encode() + b"\n"
        fd = proc.stdin.fileno()
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildDied(RunOutcome.HUNG, None)
            _, ready, _ = select.select([], [fd], [], left)
            if not ready:
                continue
            try:
                n = os.write(fd, view)
            except BrokenPipeError:
                raise ChildDied(RunOutcome.CRASHED, None) from None
            view = view[n:]

    def _read_reply(self, deadline: float) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildDied(RunOutcome.HUNG, None)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ChildDied(RunOutcome.CRASHED, None)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    # --- examples ------------------------------------------------------------------------------------

    def run_example(self, trace: Path, commands: Sequence[Mapping[str, Any]]) -> ExampleOutcome:
        """One whole example: start, the commands, end, sent in one write (the child carries the commands
        out at ``end``, a run of events on one fake thread at a time). A crash or hang is an outcome, not
        an error. The example may take ``hang_s`` plus :data:`PER_COMMAND_S` per command."""
        began = time.monotonic()
        level = 0
        if self.fresh and self._proc is not None:
            self.close()
        try:
            self._alive()
            deadline = time.monotonic() + self.hang_s + PER_COMMAND_S * len(commands)
            self._send_now([{"op": "start", "trace": str(trace)}, *commands, {"op": "end"}], deadline)
            started = self._read_reply(deadline)  # the child answers the whole line at its end
            level = int(started.get("callbackLevel", 0))
            ended = self._read_reply(deadline)
        except ChildDied as died:
            outcome, sig = self._reap()
            self.restarts += 1
            if died.outcome is RunOutcome.HUNG:
                outcome = RunOutcome.HUNG
            return ExampleOutcome(outcome, sig, time.monotonic() - began, level, [], self.last_stderr)
        if "error" in started:
            return ExampleOutcome(RunOutcome.FAILED, None, time.monotonic() - began, level,
                                  [str(started["error"])])
        self._drain_stderr()
        errors = [str(e) for e in ended.get("errors", [])]
        return ExampleOutcome(RunOutcome.OK, None, time.monotonic() - began, level, errors)
