"""Hypothesis strategies for asynchronous-walk event sequences: safe ones, and unsafe ones per clause."""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model.async_safety import (
    CallThatMayTriggerGC,
    DoStackSnapshotBegin,
    DoStackSnapshotEnd,
    Event,
    LockAcquire,
    LockRelease,
    ManagedCodeRan,
    ProfilerThreadCreated,
    ResumeThread,
    SuspendThread,
    ThreadCreated,
    ThreadDestroyed,
)

__all__ = ["UNSAFE_CLAUSES", "safe_sequences", "unsafe_sequences"]

#: The clauses :func:`unsafe_sequences` can break.
UNSAFE_CLAUSES = ("DSS-22", "DSS-23", "DSS-24", "DSS-25")

_SAMPLER = 1000  # the profiler's own sampling thread


@st.composite
def safe_sequences(draw: st.DrawFn, max_targets: int = 4) -> list[Event]:
    """A profiler sampling thread that warms up, then suspends, walks and resumes managed threads; threads
    end only after their walks; locks released before GC-triggering calls."""
    n = draw(st.integers(1, max_targets))
    targets = list(range(1, n + 1))
    events: list[Event] = [ProfilerThreadCreated(thread=_SAMPLER)]
    for t in targets:
        events += [ThreadCreated(thread=t), ManagedCodeRan(thread=t)]
    warm = draw(st.sampled_from(targets))
    events += [
        DoStackSnapshotBegin(by=_SAMPLER, target=warm),
        DoStackSnapshotEnd(by=_SAMPLER, target=warm, frames=draw(st.integers(1, 50))),
    ]
    alive = list(targets)
    for _ in range(draw(st.integers(0, 6))):
        if not alive:
            break
        action = draw(st.sampled_from(["walk", "lock-gc", "destroy", "walk-unsuspended"]))
        t = draw(st.sampled_from(alive))
        if action == "walk":
            events += [
                SuspendThread(by=_SAMPLER, target=t),
                DoStackSnapshotBegin(by=_SAMPLER, target=t),
                DoStackSnapshotEnd(by=_SAMPLER, target=t, frames=draw(st.integers(0, 50))),
                ResumeThread(by=_SAMPLER, target=t),
            ]
        elif action == "walk-unsuspended":
            events += [
                DoStackSnapshotBegin(by=_SAMPLER, target=t),
                DoStackSnapshotEnd(by=_SAMPLER, target=t, frames=draw(st.integers(0, 50))),
            ]
        elif action == "lock-gc":
            events += [
                LockAcquire(thread=t, lock="profiler-map"),
                LockRelease(thread=t, lock="profiler-map"),
                CallThatMayTriggerGC(thread=t, name="GetClassFromObject"),
            ]
        else:
            events += [ThreadDestroyed(thread=t, phase="enter"), ThreadDestroyed(thread=t, phase="exit")]
            alive.remove(t)
    return events


@st.composite
def unsafe_sequences(draw: st.DrawFn, clause: str) -> list[Event]:
    """A safe prefix followed by one breach of ``clause`` (one of :data:`UNSAFE_CLAUSES`)."""
    prefix = draw(safe_sequences())
    t = 900  # a fresh managed target
    events: list[Event] = [*prefix, ThreadCreated(thread=t), ManagedCodeRan(thread=t)]
    if clause == "DSS-22":
        other = 901
        events += [
            ThreadCreated(thread=other),
            ManagedCodeRan(thread=other),
            SuspendThread(by=other, target=t),
            ResumeThread(by=other, target=t),
        ]
    elif clause == "DSS-23":
        events += [
            DoStackSnapshotBegin(by=_SAMPLER, target=t),
            ThreadDestroyed(thread=t, phase="enter"),
            ThreadDestroyed(thread=t, phase="exit"),
            DoStackSnapshotEnd(by=_SAMPLER, target=t, frames=draw(st.integers(0, 9))),
        ]
    elif clause == "DSS-24":
        lock = draw(st.sampled_from(["a", "profiler-map"]))
        events += [
            LockAcquire(thread=t, lock=lock),
            CallThatMayTriggerGC(thread=t),
            LockRelease(thread=t, lock=lock),
        ]
    elif clause == "DSS-25":
        fresh = 1001
        failed_warmup = draw(st.booleans())
        events += [ProfilerThreadCreated(thread=fresh)]
        if failed_warmup:  # a warm-up that reports no frame does not count
            events += [
                DoStackSnapshotBegin(by=fresh, target=t),
                DoStackSnapshotEnd(by=fresh, target=t, frames=0),
            ]
        events += [SuspendThread(by=fresh, target=t), ResumeThread(by=fresh, target=t)]
    else:
        raise ValueError(f"unsafe_sequences: no breach for clause {clause!r}")
    return events
