"""SIGINT and SIGTERM: the harness ends its whole process tree and keeps what it judged (issue 19, item 8).

The harness's children run in process groups of their own (:func:`conformance.core.runner.execute` starts
each dotnet in a new session, so a Ctrl-C at the terminal or a CI cancel sent to ``profharness`` alone
never reaches them). Whoever starts such a child registers it (:func:`register`; :func:`unregister` once
reaped). While :func:`handling` is active (the ``profharness`` command holds it), SIGINT or SIGTERM:

1. SIGKILLs every registered process group and every other process below this one (compilers, ``gdb``,
   ``cmake`` and what they started: found in ``/proc``), so nothing of the tree outlives the harness;
2. raises :class:`Interrupted` (a :class:`KeyboardInterrupt`, so libraries that let Ctrl-C through, like
   hypothesis and ``concurrent.futures``, let it through too) in the main thread, unless a
   :func:`deferred` block is open (then it is raised when the block ends). A later signal kills again
   but raises nothing: the command is writing what it judged before the first. (Unless Python dropped
   the first :class:`Interrupted`, raised in a garbage collector callback or a finalizer: see
   :func:`_unraisable`.) A file is opened with :class:`opening`, so the signal never leaves it open.

The commands catch :class:`Interrupted` where they keep results (a validation's judged runs, the suite's
verdicts so far, a fuzzer's findings), write them, say so on stderr in one line and exit with
``128 + signal`` (130 for SIGINT, 143 for SIGTERM). New work calls :func:`check` before it starts a
process, so a worker thread never starts one after the signal. When :func:`handling` ends after a signal,
every registered child is killed and reaped, and the processes below this one are waited for until gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "SIGNALS",
    "Interrupted",
    "check",
    "deferred",
    "descendants",
    "handling",
    "kill_tree",
    "opening",
    "reap",
    "register",
    "requested",
    "signal_name",
    "unregister",
]

#: the signals :func:`handling` turns into :class:`Interrupted`
SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: how long :func:`reap` waits for the killed processes to be gone
REAP_S = 10.0


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the harness while :func:`handling` was active."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal_name(signum))

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    @property
    def exit_code(self) -> int:
        """The command's exit status: 128 + the signal's number (130 SIGINT, 143 SIGTERM)."""
        return 128 + self.signum


@dataclass
class _State:
    #: the first signal received while handling, None before it
    signum: int | None = None
    #: open :func:`deferred` blocks (main thread only)
    deferring: int = 0
    #: a signal came inside a deferred block: raise when the outermost block ends
    pending: bool = False
    #: Interrupted was raised once (later signals only kill)
    raised: bool = False
    #: it was raised where Python cannot pass it on (see :func:`_unraisable`): a later signal raises again
    lost: bool = False
    #: the processes below this one when handling began (not ours to kill: a test's browser, say)
    before: frozenset[int] = frozenset()
    active: bool = False
    #: pid (= its process group) -> the live child
    children: dict[int, subprocess.Popen[Any]] = field(default_factory=dict)
    #: pid -> start time of each process kill_tree killed, until reap saw it end
    killed: dict[int, int] = field(default_factory=dict)


_STATE = _State()
#: re-entrant: the handler runs in the main thread, possibly while that thread holds the lock
_LOCK = threading.RLock()


# --------------------------------------------------------------------------------------------------------
# The registry of child process groups


def register(process: subprocess.Popen[Any]) -> None:
    """``process`` (started with ``start_new_session=True``: its pid is its process group) is live.

    When a signal has already come (it raced with the start), the group is killed at once and
    :class:`Interrupted` raised: the caller's ``finally`` reaps it.
    """
    with _LOCK:
        _STATE.children[process.pid] = process
        signum = _STATE.signum
    if signum is not None:
        _kill_group(process.pid)
        raise Interrupted(signum)


def unregister(process: subprocess.Popen[Any]) -> None:
    """``process`` was reaped by its owner."""
    with _LOCK:
        _STATE.children.pop(process.pid, None)


def requested() -> int | None:
    """The signal that interrupted the command, or None."""
    return _STATE.signum


def check() -> None:
    """Raise :class:`Interrupted` when a signal came (call before starting new work, in any thread)."""
    signum = _STATE.signum
    if signum is not None:
        raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block a signal must not cut in two (adding a judged run to the result): a signal inside it still
    kills the children at once, and :class:`Interrupted` is raised when the block ends. Main thread only;
    elsewhere it is a plain block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STATE.deferring += 1
    try:
        yield
    except BaseException as exc:  # an error in flight becomes the signal; an Interrupted goes on as it is
        if _leave_deferred() and not isinstance(exc, Interrupted):
            raise Interrupted(_STATE.signum or signal.SIGINT) from exc
        raise
    if _leave_deferred():
        raise Interrupted(_STATE.signum or signal.SIGINT)


def _leave_deferred() -> bool:
    """End one :func:`deferred` block: whether it was the outermost and a signal came inside it, which is
    then raised once, by the caller, here."""
    _STATE.deferring -= 1
    if _STATE.deferring or not _STATE.pending:
        return False
    _STATE.pending = False
    _STATE.raised = True
    return True


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


class opening(Generic[_C]):  # lower case: used like a function, ``with opening(...) as f``
    """``with opening(lambda: path.open("rb")) as f``: the file (anything with ``close``) that ``open_it``
    returns, owned by the ``with`` statement from the moment it exists, so a signal never leaves it to the
    garbage collector.

    ``with path.open("rb") as f`` has a gap: Python runs a signal handler between bytecodes, and one of
    those points is right after a call returns (inside :meth:`pathlib.Path.open`, after ``io.open``), before
    ``with`` has taken the file. :class:`Interrupted` raised there drops the open file, and its finalizer
    closes it with a ResourceWarning ("unclosed file": an error under ``filterwarnings = error``, where it
    surfaces as "Exception ignored in: <_io.FileIO ...>"). Here the open is :func:`deferred`, and when the
    deferred :class:`Interrupted` comes at its end the file is closed before it goes on."""

    def __init__(self, open_it: Callable[[], _C]) -> None:
        self._open_it = open_it
        self._opened: _C | None = None

    def __enter__(self) -> _C:
        try:
            with deferred():
                self._opened = opened = self._open_it()
        except BaseException:  # the deferred Interrupted (a later signal raises nothing)
            if self._opened is not None:
                self._opened.close()
                self._opened = None
            raise
        return opened

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        if self._opened is not None:
            self._opened.close()


# --------------------------------------------------------------------------------------------------------
# The process tree


def _stat(pid: str) -> tuple[int, str, int] | None:
    """(parent pid, state letter, start time) of a process from ``/proc/PID/stat``, None when it is gone.
    The start time (clock ticks after boot) tells a process from a later one given the same pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime (field 22)": comm may hold spaces and parentheses
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _running(pid: int, started: int) -> bool:
    """Whether the process ``pid`` that started at ``started`` is still there and not a zombie."""
    found = _stat(str(pid))
    return found is not None and found[2] == started and found[1] != "Z"


def _below(pid: int | None = None) -> list[tuple[int, int]]:
    """(pid, start time) of every live (not zombie) process below ``pid`` (default: this one), parents
    before children."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        found = _stat(entry.name)
        if found is not None and found[1] != "Z":
            children.setdefault(found[0], []).append((int(entry.name), found[2]))
    out: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        below = children.get(todo.pop(0), [])
        out.extend(below)
        todo.extend(child for child, _ in below)
    return out


def descendants(pid: int | None = None) -> list[int]:
    """Every live (not zombie) process below ``pid`` (default: this one), parents before children."""
    return [child for child, _ in _below(pid)]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_tree() -> None:
    """SIGKILL every registered process group and every process below this one that was not there when
    :func:`handling` began (no lock is waited for: the signal handler calls it)."""
    for pid in list(_STATE.children):
        _kill_group(pid)
    for pid, started in _below():
        if pid not in _STATE.before:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                # a grandchild leaves the tree when its parent dies (init adopts it): reap waits for it
                _STATE.killed[pid] = started


def reap(timeout_s: float = REAP_S) -> list[int]:
    """Kill and wait for every registered child, then wait until no process of the tree is left; the pids
    still there after ``timeout_s`` (none, unless one cannot die: stuck in the kernel)."""
    deadline = time.monotonic() + timeout_s
    kill_tree()
    for process in list(_STATE.children.values()):
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        unregister(process)
    while True:  # a killed child its owner has not waited for yet is a zombie: dead, not listed
        left = [pid for pid in descendants() if pid not in _STATE.before]
        left += [pid for pid, started in _STATE.killed.items() if pid not in left and _running(pid, started)]
        if not left or time.monotonic() >= deadline:
            _STATE.killed.clear()
            return left
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


# --------------------------------------------------------------------------------------------------------
# The handler


def _handler(signum: int, frame: FrameType | None) -> None:
    with _LOCK:
        first = _STATE.signum is None
        if first:
            _STATE.signum = signum
    kill_tree()
    if (not first or _STATE.raised) and not _STATE.lost:
        return
    _STATE.lost = False
    if _STATE.deferring:
        _STATE.pending = True
        return
    _STATE.raised = True
    raise Interrupted(_STATE.signum or signum)


def _unraisable(
    previous: Callable[[sys.UnraisableHookArgs], Any],
) -> Callable[[sys.UnraisableHookArgs], None]:
    """A ``sys.unraisablehook`` for :func:`handling`: Python runs the signal handler between any two
    bytecodes, also in code whose exceptions it cannot pass on (a ``gc.callbacks`` function, such as
    hypothesis' collector timer, a ``__del__``, a weakref callback): it then reports the exception as
    "Exception ignored in ..." on stderr and drops it. An :class:`Interrupted` dropped so is not reported
    (the command says in one line that it was interrupted): :func:`check` raises it again, the next signal
    too; the children are dead already. Anything else goes to ``previous``."""

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, Interrupted) and _STATE.active:
            _STATE.lost = True
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """SIGINT and SIGTERM end the process tree and raise :class:`Interrupted` in the block (main thread
    only; elsewhere, and when already active, a plain block). When it ends after a signal, every child is
    reaped; the previous handlers are back in any case."""
    if _STATE.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    with _LOCK:
        _STATE.signum, _STATE.pending, _STATE.raised, _STATE.deferring = None, False, False, 0
        _STATE.lost = False
        _STATE.before = frozenset(descendants())
        _STATE.killed.clear()
        _STATE.active = True
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(previous_hook)
    try:
        yield
    finally:
        try:
            if _STATE.signum is not None:
                reap()
        finally:
            sys.unraisablehook = previous_hook
            for sig, old in previous.items():
                signal.signal(sig, old)
            with _LOCK:
                _STATE.active = False
                _STATE.signum, _STATE.pending, _STATE.raised, _STATE.lost = None, False, False, False
                _STATE.before = frozenset()
