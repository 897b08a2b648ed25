"""DSS-22..25: the asynchronous-walk safety checker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.async_safety import (
    CallThatMayTriggerGC,
    DoStackSnapshotBegin,
    DoStackSnapshotEnd,
    Event,
    InvalidEventSequence,
    LockAcquire,
    LockRelease,
    ManagedCodeRan,
    ProfilerThreadCreated,
    ResumeThread,
    SuspendThread,
    ThreadCreated,
    ThreadDestroyed,
    check,
)
from clr_model.errors import ModelError
from clr_model.hresults import HResult
from clr_model.strategies.events import UNSAFE_CLAUSES, safe_sequences, unsafe_sequences

FAST = settings(max_examples=100, deadline=None)


def _clauses(events: list[Event]) -> list[str]:
    return [v.clause for v in check(events)]


def test_DSS_22_managed_thread_must_not_suspend_example() -> None:
    events: list[Event] = [
        ThreadCreated(thread=1),
        ThreadCreated(thread=2),
        ManagedCodeRan(thread=2),
        SuspendThread(by=2, target=1),
        ResumeThread(by=2, target=1),
    ]
    (violation,) = check(events)
    assert violation.clause == "DSS-22" and violation.index == 3
    # the same suspension by a thread that never ran managed code is fine
    assert check([ThreadCreated(thread=1), SuspendThread(by=7, target=1), ResumeThread(by=7, target=1)]) == []


def test_DSS_23_thread_destroyed_returns_during_walk_example() -> None:
    events: list[Event] = [
        ThreadCreated(thread=1),
        DoStackSnapshotBegin(by=9, target=1),
        ThreadDestroyed(thread=1, phase="enter"),
        ThreadDestroyed(thread=1, phase="exit"),
        DoStackSnapshotEnd(by=9, target=1, frames=3),
    ]
    assert _clauses(events) == ["DSS-23"]
    blocked: list[Event] = [
        ThreadCreated(thread=1),
        DoStackSnapshotBegin(by=9, target=1),
        ThreadDestroyed(thread=1, phase="enter"),
        DoStackSnapshotEnd(by=9, target=1, frames=3),
        ThreadDestroyed(thread=1, phase="exit"),
    ]
    assert check(blocked) == []
    after: list[Event] = [*blocked, DoStackSnapshotBegin(by=9, target=1)]
    assert _clauses(after) == ["DSS-23"]


def test_DSS_24_lock_across_gc_call_example() -> None:
    events: list[Event] = [
        LockAcquire(thread=3, lock="m"),
        CallThatMayTriggerGC(thread=3, name="GetArrayObjectInfo"),
        LockRelease(thread=3, lock="m"),
    ]
    (violation,) = check(events)
    assert violation.clause == "DSS-24" and "'m'" in violation.message
    assert (
        check(
            [LockAcquire(thread=3, lock="m"), LockRelease(thread=3, lock="m"), CallThatMayTriggerGC(thread=3)]
        )
        == []
    )
    # another thread's lock does not matter
    assert check([LockAcquire(thread=4, lock="m"), CallThatMayTriggerGC(thread=3)]) == []


def test_DSS_25_warm_up_before_suspending_example() -> None:
    base: list[Event] = [ThreadCreated(thread=1), ManagedCodeRan(thread=1), ProfilerThreadCreated(thread=50)]
    cold: list[Event] = [*base, SuspendThread(by=50, target=1), ResumeThread(by=50, target=1)]
    assert _clauses(cold) == ["DSS-25"]
    warm: list[Event] = [
        *base,
        DoStackSnapshotBegin(by=50, target=1),
        DoStackSnapshotEnd(by=50, target=1, frames=1),
        SuspendThread(by=50, target=1),
        ResumeThread(by=50, target=1),
    ]
    assert check(warm) == []


@pytest.mark.clause("DSS-25")
@pytest.mark.parametrize(
    "warmup",
    [
        pytest.param([DoStackSnapshotEnd(by=50, target=1, frames=0)], id="no-frame"),
        pytest.param(
            [DoStackSnapshotEnd(by=50, target=1, frames=4, hr=int(HResult.CORPROF_E_STACKSNAPSHOT_UNSAFE))],
            id="failed",
        ),
    ],
)
def test_warm_up_that_does_not_count(warmup: list[Event]) -> None:
    events: list[Event] = [
        ThreadCreated(thread=1),
        ProfilerThreadCreated(thread=50),
        DoStackSnapshotBegin(by=50, target=1),
        *warmup,
        SuspendThread(by=50, target=1),
        ResumeThread(by=50, target=1),
    ]
    assert _clauses(events) == ["DSS-25"]


@pytest.mark.clause("DSS-25")
def test_warm_up_of_a_suspended_target_does_not_count() -> None:
    events: list[Event] = [
        ThreadCreated(thread=1),
        ProfilerThreadCreated(thread=50),
        SuspendThread(by=50, target=1),
        DoStackSnapshotBegin(by=50, target=1),
        DoStackSnapshotEnd(by=50, target=1, frames=5),
        ResumeThread(by=50, target=1),
        SuspendThread(by=50, target=1),
        ResumeThread(by=50, target=1),
    ]
    assert _clauses(events) == ["DSS-25"]  # reported once, at the first suspension


@pytest.mark.parametrize(
    "events",
    [
        [DoStackSnapshotEnd(by=1, target=2, frames=0)],
        [LockRelease(thread=1, lock="x")],
        [LockAcquire(thread=1, lock="x"), LockAcquire(thread=1, lock="x")],
        [ResumeThread(by=1, target=2)],
        [SuspendThread(by=1, target=2), SuspendThread(by=3, target=2)],
        [SuspendThread(by=1, target=1)],
        [ThreadDestroyed(thread=1, phase="exit")],
        [DoStackSnapshotBegin(by=1, target=2), DoStackSnapshotBegin(by=1, target=3)],
    ],
)
def test_malformed_sequences_raise_a_typed_error(events: list[Event]) -> None:
    with pytest.raises(InvalidEventSequence, match=r"^event \d+: "):
        check(events)


@FAST
@given(safe_sequences())
def test_safe_sequences_have_no_violation_property(events: list[Event]) -> None:
    assert check(events) == []


@FAST
@given(unsafe_sequences("DSS-22"))
def test_DSS_22_managed_thread_must_not_suspend_property(events: list[Event]) -> None:
    assert _clauses(events) == ["DSS-22"]


@FAST
@given(unsafe_sequences("DSS-23"))
def test_DSS_23_thread_destroyed_returns_during_walk_property(events: list[Event]) -> None:
    assert _clauses(events) == ["DSS-23"]


@FAST
@given(unsafe_sequences("DSS-24"))
def test_DSS_24_lock_across_gc_call_property(events: list[Event]) -> None:
    assert _clauses(events) == ["DSS-24"]


@FAST
@given(unsafe_sequences("DSS-25"))
def test_DSS_25_warm_up_before_suspending_property(events: list[Event]) -> None:
    assert _clauses(events) == ["DSS-25"]


@FAST
@given(st.sampled_from(UNSAFE_CLAUSES).flatmap(lambda c: st.tuples(st.just(c), unsafe_sequences(c))))
def test_violations_point_at_events_in_the_sequence(case: tuple[str, list[Event]]) -> None:
    clause, events = case
    for violation in check(events):
        assert violation.clause == clause
        assert violation.index is not None and 0 <= violation.index < len(events)
        assert "\n" not in violation.message


@FAST
@given(
    st.lists(
        st.one_of(
            st.builds(SuspendThread, by=st.integers(0, 3), target=st.integers(0, 3)),
            st.builds(ResumeThread, by=st.integers(0, 3), target=st.integers(0, 3)),
            st.builds(DoStackSnapshotBegin, by=st.integers(0, 3), target=st.integers(0, 3)),
            st.builds(
                DoStackSnapshotEnd, by=st.integers(0, 3), target=st.integers(0, 3), frames=st.integers(0, 3)
            ),
            st.builds(LockAcquire, thread=st.integers(0, 3), lock=st.sampled_from("ab")),
            st.builds(LockRelease, thread=st.integers(0, 3), lock=st.sampled_from("ab")),
            st.builds(CallThatMayTriggerGC, thread=st.integers(0, 3)),
            st.builds(ManagedCodeRan, thread=st.integers(0, 3)),
            st.builds(ProfilerThreadCreated, thread=st.integers(0, 3)),
            st.builds(ThreadDestroyed, thread=st.integers(0, 3), phase=st.sampled_from(["enter", "exit"])),
        ),
        max_size=20,
    )
)
def test_checker_is_total(events: list[Event]) -> None:
    try:
        result = check(events)
    except ModelError:
        return
    assert all(v.clause in UNSAFE_CLAUSES for v in result)
