"""Asynchronous-walk safety: the DoStackSnapshot author rules checked over a recorded event sequence.

* DSS-22 only a thread that has never run managed code suspends another thread;
* DSS-23 ThreadDestroyed for T does not return while a walk of T is in progress (nor is T walked after);
* DSS-24 no lock is held across a call that can trigger a garbage collection;
* DSS-25 a profiler-created thread first makes a warm-up DoStackSnapshot of another thread without
  suspending it, which succeeds with at least one frame, before it ever suspends a thread.

:func:`check` returns the violations (clause id + one line). A sequence that is not well formed (a walk
that ends without beginning, a lock released by a thread that does not hold it, ...) raises
:class:`InvalidEventSequence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from clr_model.errors import InvalidInput
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

ThreadId = Annotated[int, Field(ge=0, lt=2**64)]
_CFG = ConfigDict(frozen=True, extra="forbid")


class InvalidEventSequence(InvalidInput):
    """An event sequence no execution can produce."""


class ThreadCreated(BaseModel):
    model_config = _CFG
    kind: Literal["ThreadCreated"] = "ThreadCreated"
    thread: ThreadId


class ThreadDestroyed(BaseModel):
    """The profiler's ThreadDestroyed callback for ``thread``: its entry and its return."""

    model_config = _CFG
    kind: Literal["ThreadDestroyed"] = "ThreadDestroyed"
    thread: ThreadId
    phase: Literal["enter", "exit"]


class ProfilerThreadCreated(BaseModel):
    model_config = _CFG
    kind: Literal["ProfilerThreadCreated"] = "ProfilerThreadCreated"
    thread: ThreadId


class ManagedCodeRan(BaseModel):
    model_config = _CFG
    kind: Literal["ManagedCodeRan"] = "ManagedCodeRan"
    thread: ThreadId


class SuspendThread(BaseModel):
    model_config = _CFG
    kind: Literal["SuspendThread"] = "SuspendThread"
    by: ThreadId
    target: ThreadId


class ResumeThread(BaseModel):
    model_config = _CFG
    kind: Literal["ResumeThread"] = "ResumeThread"
    by: ThreadId
    target: ThreadId


class DoStackSnapshotBegin(BaseModel):
    model_config = _CFG
    kind: Literal["DoStackSnapshotBegin"] = "DoStackSnapshotBegin"
    by: ThreadId
    target: ThreadId


class DoStackSnapshotEnd(BaseModel):
    model_config = _CFG
    kind: Literal["DoStackSnapshotEnd"] = "DoStackSnapshotEnd"
    by: ThreadId
    target: ThreadId
    frames: Annotated[int, Field(ge=0)]
    hr: Annotated[int, Field(ge=0, lt=2**32)] = int(HResult.S_OK)


class LockAcquire(BaseModel):
    model_config = _CFG
    kind: Literal["LockAcquire"] = "LockAcquire"
    thread: ThreadId
    lock: str


class LockRelease(BaseModel):
    model_config = _CFG
    kind: Literal["LockRelease"] = "LockRelease"
    thread: ThreadId
    lock: str


class CallThatMayTriggerGC(BaseModel):
    model_config = _CFG
    kind: Literal["CallThatMayTriggerGC"] = "CallThatMayTriggerGC"
    thread: ThreadId
    name: str = "call"


Event = Annotated[
    ThreadCreated
    | ThreadDestroyed
    | ProfilerThreadCreated
    | ManagedCodeRan
    | SuspendThread
    | ResumeThread
    | DoStackSnapshotBegin
    | DoStackSnapshotEnd
    | LockAcquire
    | LockRelease
    | CallThatMayTriggerGC,
    Field(discriminator="kind"),
]


def check(events: Sequence[Event]) -> list[Violation]:
    """Every violation of DSS-22..25 in ``events`` (in order), each with the index of the event."""
    out: list[Violation] = []
    ran_managed: set[int] = set()
    profiler_threads: set[int] = set()
    warmed_up: set[int] = set()
    flagged_25: set[int] = set()
    suspended_by: dict[int, int] = {}  # target -> suspender
    walks: dict[
        int, tuple[int, int, bool]
    ] = {}  # walker -> (target, begin index, target suspended by walker)
    destroying: set[int] = set()
    destroyed: set[int] = set()
    locks: dict[int, list[str]] = {}

    def fail(clause: str, index: int, message: str) -> None:
        out.append(Violation(clause=clause, message=message, index=index))

    for i, ev in enumerate(events):
        if isinstance(ev, ThreadCreated):
            destroyed.discard(ev.thread)
        elif isinstance(ev, ProfilerThreadCreated):
            profiler_threads.add(ev.thread)
        elif isinstance(ev, ManagedCodeRan):
            ran_managed.add(ev.thread)
        elif isinstance(ev, SuspendThread):
            if ev.target in suspended_by:
                raise InvalidEventSequence(f"event {i}: thread {ev.target} is already suspended")
            if ev.by == ev.target:
                raise InvalidEventSequence(f"event {i}: thread {ev.by} suspends itself")
            if ev.by in ran_managed:
                fail("DSS-22", i, f"thread {ev.by} has run managed code and suspends thread {ev.target}")
            if ev.by in profiler_threads and ev.by not in warmed_up and ev.by not in flagged_25:
                flagged_25.add(ev.by)
                fail(
                    "DSS-25",
                    i,
                    f"profiler thread {ev.by} suspends thread {ev.target} before a warm-up DoStackSnapshot "
                    "of an unsuspended thread succeeded with at least one frame",
                )
            suspended_by[ev.target] = ev.by
        elif isinstance(ev, ResumeThread):
            if suspended_by.get(ev.target) != ev.by:
                raise InvalidEventSequence(
                    f"event {i}: thread {ev.by} resumes {ev.target}, not suspended by it"
                )
            del suspended_by[ev.target]
        elif isinstance(ev, DoStackSnapshotBegin):
            if ev.by in walks:
                raise InvalidEventSequence(f"event {i}: thread {ev.by} begins a walk inside a walk")
            if ev.target in destroyed:
                fail(
                    "DSS-23", i, f"thread {ev.by} walks thread {ev.target} after its ThreadDestroyed returned"
                )
            walks[ev.by] = (ev.target, i, suspended_by.get(ev.target) == ev.by)
        elif isinstance(ev, DoStackSnapshotEnd):
            begun = walks.pop(ev.by, None)
            if begun is None or begun[0] != ev.target:
                raise InvalidEventSequence(
                    f"event {i}: walk of {ev.target} by {ev.by} ends without beginning"
                )
            _, _, target_suspended = begun
            if (
                ev.by in profiler_threads
                and ev.target != ev.by
                and not target_suspended
                and not hresult_failed(ev.hr)
                and ev.frames >= 1
            ):
                warmed_up.add(ev.by)
        elif isinstance(ev, ThreadDestroyed):
            if ev.phase == "enter":
                destroying.add(ev.thread)
            else:
                if ev.thread not in destroying:
                    raise InvalidEventSequence(
                        f"event {i}: ThreadDestroyed({ev.thread}) returns without entry"
                    )
                destroying.discard(ev.thread)
                destroyed.add(ev.thread)
                for walker, (target, begin, _) in walks.items():
                    if target == ev.thread:
                        fail(
                            "DSS-23",
                            i,
                            f"ThreadDestroyed({ev.thread}) returned while thread {walker} was walking it "
                            f"(walk began at event {begin})",
                        )
        elif isinstance(ev, LockAcquire):
            held = locks.setdefault(ev.thread, [])
            if ev.lock in held:
                raise InvalidEventSequence(f"event {i}: thread {ev.thread} acquires {ev.lock!r} twice")
            held.append(ev.lock)
        elif isinstance(ev, LockRelease):
            held = locks.get(ev.thread, [])
            if ev.lock not in held:
                raise InvalidEventSequence(
                    f"event {i}: thread {ev.thread} releases {ev.lock!r} it does not hold"
                )
            held.remove(ev.lock)
        elif isinstance(ev, CallThatMayTriggerGC):
            held = locks.get(ev.thread, [])
            if held:
                fail(
                    "DSS-24",
                    i,
                    f"thread {ev.thread} calls {ev.name} (may trigger a GC) holding "
                    + ", ".join(map(repr, held)),
                )
        else:  # pragma: no cover - the union is exhaustive
            raise InvalidEventSequence(f"event {i}: unknown event {ev!r}")
    return out


def describe(violations: Sequence[Violation]) -> str:
    """One line per violation."""
    return "\n".join(str(v) for v in violations)
