"""Asynchronous-walk safety: the DoStackSnapshot author rules checked over a recorded event sequence.

* DSS-22 only a thread that has never run managed code suspends another thread;
* DSS-23 ThreadDestroyed for T does not return while a walk of T is in progress (nor is T walked after);
* DSS-24 no lock is held across a call that can trigger a garbage collection;
* DSS-25 a profiler-created thread first makes a warm-up DoStackSnapshot of another thread without
  suspending it, which succeeds with at least one frame, before it ever suspends a thread.

:func:`check` reads the shared event vocabulary (:mod:`clr_model.events`) and returns the violations
(clause id + one line, index = position in the sequence). A sequence that is not well formed (a walk
that ends without beginning, a lock released by a thread that does not hold it, ...) raises
:class:`InvalidEventSequence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from clr_model.errors import InvalidInput
from clr_model.events import Event, InfoCall, ProfilerCallback, ThreadOperation, begins, ends, int_arg
from clr_model.hresults import HResult, hresult_failed
from clr_model.violations import Violation

__all__ = [
    "CallThatMayTriggerGC",
    "DoStackSnapshotBegin",
    "DoStackSnapshotEnd",
    "Event",
    "InvalidEventSequence",
    "LockAcquire",
    "LockRelease",
    "ManagedCodeRan",
    "ProfilerThreadCreated",
    "ResumeThread",
    "SuspendThread",
    "ThreadCreated",
    "ThreadDestroyed",
    "Violation",
    "check",
]


class InvalidEventSequence(InvalidInput):
    """An event sequence no execution can produce."""


# --- constructors: the events these rules read, under the names the checker used before the shared
# vocabulary (clr_model.events); each returns an event of that vocabulary --------------------------------


def ThreadCreated(*, thread: int, seq: int = 0) -> ProfilerCallback:
    """The ThreadCreated callback for ``thread`` (made on that thread)."""
    return ProfilerCallback(seq=seq, thread=thread, name="ThreadCreated", args={"threadId": thread})


def ThreadDestroyed(*, thread: int, phase: Literal["enter", "exit"], seq: int = 0) -> ProfilerCallback:
    """The profiler's ThreadDestroyed callback for ``thread``: its entry (``enter``) or return (``exit``)."""
    return ProfilerCallback(seq=seq, thread=thread, name="ThreadDestroyed", args={"threadId": thread},
                            phase="enter" if phase == "enter" else "return")


def ProfilerThreadCreated(*, thread: int, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=thread, op="ProfilerThreadCreated")


def ManagedCodeRan(*, thread: int, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=thread, op="ManagedCodeRan")


def SuspendThread(*, by: int, target: int, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=by, op="SuspendThread", target=target)


def ResumeThread(*, by: int, target: int, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=by, op="ResumeThread", target=target)


def DoStackSnapshotBegin(*, by: int, target: int, seq: int = 0) -> InfoCall:
    """``by`` enters DoStackSnapshot to walk ``target``."""
    return InfoCall(seq=seq, thread=by, name="DoStackSnapshot", phase="enter", args={"thread": target})


def DoStackSnapshotEnd(
    *, by: int, target: int, frames: int, hr: int = int(HResult.S_OK), seq: int = 0
) -> InfoCall:
    """DoStackSnapshot of ``target`` by ``by`` returns ``hr`` after ``frames`` StackSnapshotCallbacks."""
    if frames < 0:
        raise InvalidEventSequence(f"DoStackSnapshotEnd: frames={frames} is negative")
    return InfoCall(seq=seq, thread=by, name="DoStackSnapshot", phase="return", args={"thread": target},
                    out={"frameCount": frames}, hr=hr)


def LockAcquire(*, thread: int, lock: str, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=thread, op="LockAcquire", lock=lock)


def LockRelease(*, thread: int, lock: str, seq: int = 0) -> ThreadOperation:
    return ThreadOperation(seq=seq, thread=thread, op="LockRelease", lock=lock)


def CallThatMayTriggerGC(*, thread: int, name: str = "call", seq: int = 0) -> InfoCall:
    """``thread`` calls into the runtime (``name``) with a call that can trigger a garbage collection."""
    return InfoCall(seq=seq, thread=thread, name=name, may_trigger_gc=True)


# --- the checker ---------------------------------------------------------------------------------------


def _walk_target(ev: InfoCall) -> int:
    """DoStackSnapshot's ``thread`` argument; NULL (0) or absent walks the calling thread."""
    target = int_arg(ev.args, "thread")
    return target if target else ev.thread


class Checker:
    """The DSS-22..25 rules as a state machine: :meth:`feed` one event at a time (with its index), read
    :attr:`violations` at any point. :func:`check` runs it over a whole sequence; a streaming judge feeds it
    only the events it reads (see :func:`check`), in order, holding no more than its state."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self._ran_managed: set[int] = set()
        self._profiler_threads: set[int] = set()
        self._warmed_up: set[int] = set()
        self._flagged_25: set[int] = set()
        self._suspended_by: dict[int, int] = {}  # target -> suspender
        # walker -> (target, begin index, target suspended by walker)
        self._walks: dict[int, tuple[int, int, bool]] = {}
        self._frames_seen: dict[int, int] = {}
        self._destroying: set[int] = set()
        self._destroyed: set[int] = set()
        self._locks: dict[int, list[str]] = {}

    def _fail(self, clause: str, index: int, message: str) -> None:
        self.violations.append(Violation(clause=clause, message=message, index=index))

    def _walk_begins(self, i: int, by: int, target: int) -> None:
        if by in self._walks:
            raise InvalidEventSequence(f"event {i}: thread {by} begins a walk inside a walk")
        if target in self._destroyed:
            self._fail("DSS-23", i, f"thread {by} walks thread {target} after its ThreadDestroyed returned")
        self._walks[by] = (target, i, self._suspended_by.get(target) == by)
        self._frames_seen[by] = 0

    def _walk_ends(self, i: int, ev: InfoCall, by: int, target: int) -> None:
        begun = self._walks.pop(by, None)
        if begun is None or begun[0] != target:
            raise InvalidEventSequence(f"event {i}: walk of {target} by {by} ends without beginning")
        _, _, target_suspended = begun
        counted = int_arg(ev.out, "frameCount")
        frames = counted if counted is not None else self._frames_seen.get(by, 0)
        hr = ev.hr if ev.hr is not None else int(HResult.S_OK)
        if by in self._profiler_threads and target != by and not target_suspended \
                and not hresult_failed(hr) and frames >= 1:
            self._warmed_up.add(by)

    def _destroyed_returns(self, i: int, thread: int) -> None:
        if thread not in self._destroying:
            raise InvalidEventSequence(f"event {i}: ThreadDestroyed({thread}) returns without entry")
        self._destroying.discard(thread)
        self._destroyed.add(thread)
        for walker, (target, begin, _) in self._walks.items():
            if target == thread:
                self._fail("DSS-23", i, f"ThreadDestroyed({thread}) returned while thread {walker} was "
                           f"walking it (walk began at event {begin})")

    def feed(self, i: int, ev: Event) -> None:
        """One event, at index ``i`` of its sequence."""
        if isinstance(ev, ProfilerCallback):
            subject = int_arg(ev.args, "threadId")
            subject = ev.thread if subject is None else subject
            if ev.name == "ThreadCreated" and begins(ev):
                self._destroyed.discard(subject)
            elif ev.name == "ThreadDestroyed":
                if begins(ev):
                    self._destroying.add(subject)
                if ends(ev):
                    self._destroyed_returns(i, subject)
            elif ev.name == "StackSnapshotCallback" and begins(ev) and ev.thread in self._walks:
                self._frames_seen[ev.thread] += 1
        elif isinstance(ev, InfoCall):
            if ev.name == "DoStackSnapshot":
                walked = _walk_target(ev)
                if begins(ev):
                    self._walk_begins(i, ev.thread, walked)
                if ends(ev):
                    self._walk_ends(i, ev, ev.thread, walked)
            elif ev.triggers_gc and begins(ev):
                held = self._locks.get(ev.thread, [])
                if held:
                    self._fail("DSS-24", i, f"thread {ev.thread} calls {ev.name} (may trigger a GC) holding "
                               + ", ".join(map(repr, held)))
        elif isinstance(ev, ThreadOperation):
            self._operation(i, ev)

    def _operation(self, i: int, ev: ThreadOperation) -> None:
        if ev.op == "ProfilerThreadCreated":
            self._profiler_threads.add(ev.thread)
        elif ev.op == "ManagedCodeRan":
            self._ran_managed.add(ev.thread)
        elif ev.op in ("SuspendThread", "ResumeThread"):
            by, target = ev.thread, ev.target
            if target is None:
                raise InvalidEventSequence(f"event {i}: {ev.op} by thread {by} names no target")
            if ev.op == "ResumeThread":
                if self._suspended_by.get(target) != by:
                    raise InvalidEventSequence(
                        f"event {i}: thread {by} resumes {target}, not suspended by it"
                    )
                del self._suspended_by[target]
                return
            if target in self._suspended_by:
                raise InvalidEventSequence(f"event {i}: thread {target} is already suspended")
            if by == target:
                raise InvalidEventSequence(f"event {i}: thread {by} suspends itself")
            if by in self._ran_managed:
                self._fail("DSS-22", i, f"thread {by} has run managed code and suspends thread {target}")
            if by in self._profiler_threads and by not in self._warmed_up and by not in self._flagged_25:
                self._flagged_25.add(by)
                self._fail("DSS-25", i, f"profiler thread {by} suspends thread {target} before a warm-up "
                           "DoStackSnapshot of an unsuspended thread succeeded with at least one frame")
            self._suspended_by[target] = by
        elif ev.op in ("LockAcquire", "LockRelease"):
            if ev.lock is None:
                raise InvalidEventSequence(f"event {i}: {ev.op} by thread {ev.thread} names no lock")
            held = self._locks.setdefault(ev.thread, [])
            if ev.op == "LockAcquire":
                if ev.lock in held:
                    raise InvalidEventSequence(f"event {i}: thread {ev.thread} acquires {ev.lock!r} twice")
                held.append(ev.lock)
            else:
                if ev.lock not in held:
                    raise InvalidEventSequence(
                        f"event {i}: thread {ev.thread} releases {ev.lock!r} it does not hold"
                    )
                held.remove(ev.lock)


def check(events: Sequence[Event]) -> list[Violation]:
    """Every violation of DSS-22..25 in ``events`` (in order), each with the index of the event.

    Reads ThreadCreated/ThreadDestroyed callbacks, DoStackSnapshot calls (and StackSnapshotCallbacks, to
    count frames when the call's ``out`` has no ``frameCount``), calls that can trigger a GC and the
    thread operations ProfilerThreadCreated, ManagedCodeRan, SuspendThread, ResumeThread, LockAcquire and
    LockRelease; every other event is ignored.
    """
    checker = Checker()
    for i, ev in enumerate(events):
        checker.feed(i, ev)
    return checker.violations


def describe(violations: Sequence[Violation]) -> str:
    """One line per violation."""
    return "\n".join(str(v) for v in violations)
