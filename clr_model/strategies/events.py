"""Hypothesis strategies for the shared event vocabulary (clr_model.events): any single event, sequences
mixing the three rule areas on disjoint threads, and asynchronous-walk sequences (safe ones, and unsafe
ones per clause)."""

from __future__ import annotations

from typing import Literal, get_args

from hypothesis import strategies as st
from pydantic import JsonValue

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
from clr_model.events import (
    InfoCall,
    Mark,
    ObjectInspection,
    Phase,
    ProfilerCallback,
    ThreadOperation,
    ThreadOperationName,
)
from clr_model.strategies.function_enter import hook_event_sequences
from clr_model.strategies.moved_refs import gc_event_sequences

__all__ = [
    "AREAS",
    "HOOK_THREADS",
    "UNSAFE_CLAUSES",
    "Area",
    "any_events",
    "area_sequences",
    "mixed_sequences",
    "safe_sequences",
    "unsafe_sequences",
]

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


# --- any event, mixed sequences ---------------------------------------------------------------------------

_threads = st.integers(0, 2**64 - 1)
_u32 = st.integers(0, 2**32 - 1)
_names = st.sampled_from(["GarbageCollectionStarted", "MovedReferences2", "FunctionEnter2", "ThreadDestroyed",
                          "DoStackSnapshot", "GetClassFromObject", "SetEventMask", "x"])
_json: st.SearchStrategy[JsonValue] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_args = st.dictionaries(st.text(max_size=12), _json, max_size=4)
_phases = st.sampled_from(get_args(Phase))
_common = {"seq": st.integers(0, 2**40), "thread": _threads}


def any_events() -> st.SearchStrategy[Event]:
    """Any one event of the vocabulary, with arbitrary JSON arguments."""
    return st.one_of(
        st.builds(ProfilerCallback, name=_names, phase=_phases, args=_args, out=_args, hr=st.none() | _u32,
                  truth=_args, **_common),
        st.builds(InfoCall, name=_names, phase=_phases, args=_args, out=_args, hr=st.none() | _u32,
                  may_trigger_gc=st.booleans(), **_common),
        st.builds(ThreadOperation, op=st.sampled_from(get_args(ThreadOperationName)),
                  target=st.none() | _threads, lock=st.none() | st.text(max_size=4),
                  address=st.none() | st.integers(0, 2**64 - 1), args=_args, **_common),
        st.builds(ObjectInspection, name=_names, object_id=st.none() | st.integers(0, 2**64 - 1),
                  object_key=st.none() | st.integers(-5, 5), within=st.none() | _names, hr=st.none() | _u32,
                  **_common),
        st.builds(Mark, name=_names, payload=st.none() | st.text(max_size=8), data=_args, **_common),
    )


Area = Literal["async_safety", "function_enter", "moved_refs"]
#: The three rule areas a recorded sequence feeds: asynchronous walks, FunctionEnter2, MovedReferences2.
AREAS: tuple[Area, ...] = ("async_safety", "function_enter", "moved_refs")
#: FunctionEnter2 hooks run on threads none of the other areas' strategies use.
HOOK_THREADS = (2000, 2001, 2002)


@st.composite
def area_sequences(draw: st.DrawFn, area: Area) -> list[Event]:
    """A sequence one area's checker judges (conforming or not), as events of the shared vocabulary; the
    FunctionEnter2 one begins with the SetEventMask call that sets its event mask.

    The areas' threads are disjoint: asynchronous walks use 1..4, 900, 901, 1000, 1001; hooks use
    :data:`HOOK_THREADS`; the GC sequence's callbacks and inspections are on thread 0."""
    if area == "async_safety":
        clause = draw(st.sampled_from([None, *UNSAFE_CLAUSES]))
        return draw(safe_sequences() if clause is None else unsafe_sequences(clause))
    if area == "function_enter":
        hooks, mask = draw(hook_event_sequences(conforming=draw(st.booleans()), threads=HOOK_THREADS))
        set_mask = InfoCall(thread=HOOK_THREADS[0], name="SetEventMask", args={"dwEvents": mask}, hr=0)
        return [set_mask, *(h.to_event() for h in hooks)]
    if area == "moved_refs":
        return [h.to_event() for h in draw(gc_event_sequences())]
    raise ValueError(f"area_sequences: unknown area {area!r}")


@st.composite
def mixed_sequences(draw: st.DrawFn) -> tuple[list[Event], dict[Area, list[int]]]:
    """One interleaving of one sequence per area, each event's ``seq`` its position, and per area the
    positions its events took (in its own order)."""
    parts = {area: draw(area_sequences(area)) for area in AREAS}
    tags = [area for area in AREAS for _ in parts[area]]
    placed = draw(st.permutations(tags))  # which area's next event takes each position
    cursor = dict.fromkeys(AREAS, 0)
    positions: dict[Area, list[int]] = {area: [] for area in AREAS}
    merged: list[Event] = []
    for pos, area in enumerate(placed):
        merged.append(parts[area][cursor[area]].model_copy(update={"seq": pos}))
        cursor[area] += 1
        positions[area].append(pos)
    return merged, positions
