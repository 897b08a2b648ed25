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


def check(events: Sequence[Event]) -> list[Violation]:
    """Every violation of DSS-22..25 in ``events`` (in order), each with the index of the event.

    Reads ThreadCreated/ThreadDestroyed callbacks, DoStackSnapshot calls (and StackSnapshotCallbacks, to
    count frames when the call's ``out`` has no ``frameCount``), calls that can trigger a GC and the
    thread operations ProfilerThreadCreated, ManagedCodeRan, SuspendThread, ResumeThread, LockAcquire and
    LockRelease; every other event is ignored.
    """
    out: list[Violation] = []
    ran_managed: set[int] = set()
    profiler_threads: set[int] = set()
    warmed_up: set[int] = set()
    flagged_25: set[int] = set()
    suspended_by: dict[int, int] = {}  # target -> suspender
    # walker -> (target, begin index, target suspended by walker)
    walks: dict[int, tuple[int, int, bool]] = {}
    frames_seen: dict[int, int] = {}
    destroying: set[int] = set()
    destroyed: set[int] = set()
    locks: dict[int, list[str]] = {}

    def fail(clause: str, index: int, message: str) -> None:
        out.append(Violation(clause=clause, message=message, index=index))

    def walk_begins(i: int, by: int, target: int) -> None:
        if by in walks:
            raise InvalidEventSequence(f"event {i}: thread {by} begins a walk inside a walk")
        if target in destroyed:
            fail("DSS-23", i, f"thread {by} walks thread {target} after its ThreadDestroyed returned")
        walks[by] = (target, i, suspended_by.get(target) == by)
        frames_seen[by] = 0

    def walk_ends(i: int, ev: InfoCall, by: int, target: int) -> None:
        begun = walks.pop(by, None)
        if begun is None or begun[0] != target:
            raise InvalidEventSequence(f"event {i}: walk of {target} by {by} ends without beginning")
        _, _, target_suspended = begun
        counted = int_arg(ev.out, "frameCount")
        frames = counted if counted is not None else frames_seen.get(by, 0)
        hr = ev.hr if ev.hr is not None else int(HResult.S_OK)
        if by in profiler_threads and target != by and not target_suspended and not hresult_failed(hr) \
                and frames >= 1:
            warmed_up.add(by)

    def destroyed_returns(i: int, thread: int) -> None:
        if thread not in destroying:
            raise InvalidEventSequence(f"event {i}: ThreadDestroyed({thread}) returns without entry")
        destroying.discard(thread)
        destroyed.add(thread)
        for walker, (target, begin, _) in walks.items():
            if target == thread:
                fail("DSS-23", i, f"ThreadDestroyed({thread}) returned while thread {walker} was walking it "
                     f"(walk began at event {begin})")

    for i, ev in enumerate(events):
        if isinstance(ev, ProfilerCallback):
            subject = int_arg(ev.args, "threadId")
            subject = ev.thread if subject is None else subject
            if ev.name == "ThreadCreated" and begins(ev):
                destroyed.discard(subject)
            elif ev.name == "ThreadDestroyed":
                if begins(ev):
                    destroying.add(subject)
                if ends(ev):
                    destroyed_returns(i, subject)
            elif ev.name == "StackSnapshotCallback" and begins(ev) and ev.thread in walks:
                frames_seen[ev.thread] += 1
        elif isinstance(ev, InfoCall):
            if ev.name == "DoStackSnapshot":
                walked = _walk_target(ev)
                if begins(ev):
                    walk_begins(i, ev.thread, walked)
                if ends(ev):
                    walk_ends(i, ev, ev.thread, walked)
            elif ev.triggers_gc and begins(ev):
                held = locks.get(ev.thread, [])
                if held:
                    fail("DSS-24", i, f"thread {ev.thread} calls {ev.name} (may trigger a GC) holding "
                         + ", ".join(map(repr, held)))
        elif isinstance(ev, ThreadOperation):
            if ev.op == "ProfilerThreadCreated":
                profiler_threads.add(ev.thread)
            elif ev.op == "ManagedCodeRan":
                ran_managed.add(ev.thread)
            elif ev.op in ("SuspendThread", "ResumeThread"):
                by, target = ev.thread, ev.target
                if target is None:
                    raise InvalidEventSequence(f"event {i}: {ev.op} by thread {by} names no target")
                if ev.op == "ResumeThread":
                    if suspended_by.get(target) != by:
                        raise InvalidEventSequence(
                            f"event {i}: thread {by} resumes {target}, not suspended by it"
                        )
                    del suspended_by[target]
                    continue
                if target in suspended_by:
                    raise InvalidEventSequence(f"event {i}: thread {target} is already suspended")
                if by == target:
                    raise InvalidEventSequence(f"event {i}: thread {by} suspends itself")
                if by in ran_managed:
                    fail("DSS-22", i, f"thread {by} has run managed code and suspends thread {target}")
                if by in profiler_threads and by not in warmed_up and by not in flagged_25:
                    flagged_25.add(by)
                    fail("DSS-25", i, f"profiler thread {by} suspends thread {target} before a warm-up "
                         "DoStackSnapshot of an unsuspended thread succeeded with at least one frame")
                suspended_by[target] = by
            elif ev.op in ("LockAcquire", "LockRelease"):
                if ev.lock is None:
                    raise InvalidEventSequence(f"event {i}: {ev.op} by thread {ev.thread} names no lock")
                held = locks.setdefault(ev.thread, [])
                if ev.op == "LockAcquire":
                    if ev.lock in held:
                        raise InvalidEventSequence(
                            f"event {i}: thread {ev.thread} acquires {ev.lock!r} twice"
                        )
                    held.append(ev.lock)
                else:
                    if ev.lock not in held:
                        raise InvalidEventSequence(
                            f"event {i}: thread {ev.thread} releases {ev.lock!r} it does not hold"
                        )
                    held.remove(ev.lock)
    return out


def describe(violations: Sequence[Violation]) -> str:
    """One line per violation."""
    return "\n".join(str(v) for v in violations)
