"""The shared event vocabulary (clr_model.events) and the three rule checkers that read it.

One recorded sequence feeds the asynchronous-walk (DSS-22..25), FunctionEnter2 and MovedReferences2
checkers: each picks the kinds it judges and ignores the rest.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from pydantic import ValidationError

from clr_model import async_safety, function_enter, moved_refs
from clr_model.events import (
    EVENTS,
    Event,
    InfoCall,
    Mark,
    ObjectInspection,
    ProfilerCallback,
    ThreadOperation,
    events_from_json,
    events_to_json,
)
from clr_model.flags import CorPrfMonitor
from clr_model.function_enter import HookEvent
from clr_model.hresults import HResult
from clr_model.moved_refs import HeapEvent
from clr_model.strategies.events import AREAS, any_events, area_sequences, mixed_sequences
from clr_model.violations import Violation

FAST = settings(max_examples=60, deadline=None)
CHECKERS = {
    "async_safety": async_safety.check,
    "function_enter": function_enter.check_hook_events,
    "moved_refs": moved_refs.check_gc_events,
}
FAILED = int(HResult.E_FAIL)


def _found(violations: list[Violation]) -> list[tuple[str, int | None]]:
    return sorted((v.clause, v.index) for v in violations)


# --- the vocabulary --------------------------------------------------------------------------------------


def test_events_are_frozen_and_reject_unknown_fields() -> None:
    call = InfoCall(seq=3, thread=7, name="ForceGC")
    with pytest.raises(ValidationError):
        call.name = "GetClassFromObject"
    with pytest.raises(ValidationError, match="target"):
        ProfilerCallback(name="GarbageCollectionStarted", target=1)
    with pytest.raises(ValidationError):
        InfoCall(name="DoStackSnapshot", hr=2**32)  # an HRESULT is 32 bits
    with pytest.raises(ValidationError):
        ThreadOperation(op="Yield")
    with pytest.raises(ValidationError, match="not a JSON number"):
        Mark(name="m", data={"x": [1.0, float("inf")]})  # no recording can carry it


def test_kind_discriminates_a_json_sequence() -> None:
    text = (
        '[{"kind": "callback", "name": "MovedReferences2", "seq": 4, "thread": 9, "hr": 0},'
        ' {"kind": "info_call", "name": "DoStackSnapshot", "phase": "enter", "args": {"thread": 0}},'
        ' {"kind": "thread_operation", "op": "SuspendThread", "thread": 1, "target": 2},'
        ' {"kind": "object_inspection", "name": "GetClassFromObject", "object_id": 4096,'
        '  "within": "GarbageCollectionFinished"},'
        ' {"kind": "mark", "name": "ids.before", "payload": "[1, 2]"}]'
    )
    events = events_from_json(text)
    assert [type(e) for e in events] == [ProfilerCallback, InfoCall, ThreadOperation, ObjectInspection, Mark]
    first = events[0]
    assert isinstance(first, ProfilerCallback) and (first.seq, first.thread, first.phase) == (4, 9, "whole")
    with pytest.raises(ValidationError, match="kind"):
        events_from_json('[{"kind": "frame", "name": "x"}]')


def test_triggers_gc_from_the_table_or_the_recorder() -> None:
    assert InfoCall(name="ForceGC").triggers_gc
    assert InfoCall(name="GetClassFromObject", may_trigger_gc=True).triggers_gc
    assert not InfoCall(name="GetClassFromObject").triggers_gc


@FAST
@given(any_events())
def test_every_event_round_trips_through_json(event: Event) -> None:
    assert events_from_json(events_to_json([event])) == [event]
    assert EVENTS.validate_python(EVENTS.dump_python([event])) == [event]


@FAST
@given(mixed_sequences())
def test_a_recorded_sequence_round_trips_through_json(case: tuple[list[Event], dict[str, list[int]]]) -> None:
    events, _ = case
    again = events_from_json(events_to_json(events))
    assert again == events
    for name, check in CHECKERS.items():
        try:
            first = check(events)
        except async_safety.InvalidEventSequence:
            assert name == "async_safety"
            continue
        assert check(again) == first


# --- the old names build events of the vocabulary ----------------------------------------------------------


def test_legacy_names_build_vocabulary_events() -> None:
    suspend = ThreadOperation(thread=1, op="SuspendThread", target=2)
    assert async_safety.SuspendThread(by=1, target=2) == suspend
    end = async_safety.DoStackSnapshotEnd(by=5, target=6, frames=3)
    assert end == InfoCall(thread=5, name="DoStackSnapshot", phase="return", args={"thread": 6},
                           out={"frameCount": 3}, hr=0)
    assert async_safety.ThreadDestroyed(thread=4, phase="exit").phase == "return"
    enter = HookEvent(kind="enter", thread=2, func_id=7, client_data=8, func=9, argument_info=0, target=7,
                      token=0x06000001).to_event()
    assert enter == ProfilerCallback(thread=2, name="FunctionEnter2", phase="enter",
                                     args={"funcId": 7, "clientData": 8, "func": 9, "argumentInfo": 0},
                                     truth={"funcId": 7, "token": 0x06000001})
    use = HookEvent(kind="use_frame_info", func=9, hr=-2147467259).to_event()
    assert isinstance(use, InfoCall) and use.hr == FAILED  # a signed E_FAIL
    moved = HeapEvent(kind="callback", name="MovedReferences2", hr=0, ranges=((16, 32, 8),)).to_event()
    assert isinstance(moved, ProfilerCallback)
    assert moved.args == {"cMovedObjectIDRanges": 1, "oldObjectIDRangeStart": [16],
                          "newObjectIDRangeStart": [32], "cObjectIDRangeLength": [8]}
    assert HeapEvent(kind="inspect", name="GetObjectSize", object_id=16, object_key=1).to_event() == \
        ObjectInspection(name="GetObjectSize", object_id=16, object_key=1)


@pytest.mark.parametrize(
    "legacy",
    [
        [HookEvent(kind="set_event_mask", mask=0x20), HookEvent(kind="enter", func_id=1, client_data=1,
                                                                  argument_info=0x1000)],
        [HeapEvent(kind="callback", name="MovedReferences2", hr=0)],
    ],
)
def test_checkers_give_the_same_answer_for_legacy_steps_and_their_events(
    legacy: list[HookEvent] | list[HeapEvent],
) -> None:
    events = [step.to_event() for step in legacy]
    if isinstance(legacy[0], HookEvent):
        hooks = [s for s in legacy if isinstance(s, HookEvent)]
        assert function_enter.check_hook_events(hooks) == function_enter.check_hook_events(events)
        assert _found(function_enter.check_hook_events(events)) == [("FE2-04", 1)]
    else:
        heap = [s for s in legacy if isinstance(s, HeapEvent)]
        assert moved_refs.check_gc_events(heap) == moved_refs.check_gc_events(events)
        assert _found(moved_refs.check_gc_events(events)) == [("MR2-01", 0)]


# --- recorder shapes: enter/return edges, whole records ----------------------------------------------------


def test_DSS_23_thread_destroyed_whole_callback_during_a_walk() -> None:
    """A recorder that writes one record per callback (phase whole): ThreadDestroyed both began and returned
    while the walk was in progress."""
    events: list[Event] = [
        InfoCall(thread=9, name="DoStackSnapshot", phase="enter", args={"thread": 1}),
        ProfilerCallback(thread=1, name="ThreadDestroyed", args={"threadId": 1}),
        InfoCall(thread=9, name="DoStackSnapshot", phase="return", args={"thread": 1}, out={"frameCount": 2},
                 hr=0),
    ]
    assert _found(async_safety.check(events)) == [("DSS-23", 1)]


def test_DSS_25_warm_up_frames_counted_from_stack_snapshot_callbacks() -> None:
    """Without ``out.frameCount`` the walk's frames are the StackSnapshotCallbacks made during it."""
    def walk(frames: int) -> list[Event]:
        return [
            InfoCall(thread=50, name="DoStackSnapshot", phase="enter", args={"thread": 1}),
            *[ProfilerCallback(thread=50, name="StackSnapshotCallback", args={"funcId": 0}, hr=0)] * frames,
            InfoCall(thread=50, name="DoStackSnapshot", phase="return", args={"thread": 1}, hr=0),
        ]

    suspend: list[Event] = [ThreadOperation(thread=50, op="SuspendThread", target=1),
                            ThreadOperation(thread=50, op="ResumeThread", target=1)]
    created: list[Event] = [ThreadOperation(thread=50, op="ProfilerThreadCreated")]
    assert async_safety.check([*created, *walk(1), *suspend]) == []
    assert [v.clause for v in async_safety.check([*created, *walk(0), *suspend])] == ["DSS-25"]


def test_DSS_25_a_walk_of_the_calling_thread_is_no_warm_up() -> None:
    """DoStackSnapshot(thread=NULL) walks the caller itself: not "a separate target thread"."""
    events: list[Event] = [
        ThreadOperation(thread=50, op="ProfilerThreadCreated"),
        InfoCall(thread=50, name="DoStackSnapshot", args={"thread": 0}, out={"frameCount": 4}, hr=0),
        ThreadOperation(thread=50, op="SuspendThread", target=1),
    ]
    assert [v.clause for v in async_safety.check(events)] == ["DSS-25"]


def test_FE2_05_whole_hook_record_then_a_late_frame_use() -> None:
    events: list[Event] = [
        ProfilerCallback(thread=3, name="FunctionEnter2", args={"funcId": 7, "clientData": 7, "func": 0x900}),
        InfoCall(thread=3, name="GetFunctionInfo2", args={"funcId": 7, "frameInfo": 0x900}, hr=0),
    ]
    assert _found(function_enter.check_hook_events(events)) == [("FE2-05", 1)]


def test_FE2_11_force_gc_inside_a_hook_and_DSS_24_with_a_lock_held() -> None:
    """One event, two clauses: ForceGC inside a hook (FE2-11) while the thread holds a lock (DSS-24)."""
    events: list[Event] = [
        ThreadOperation(thread=3, op="LockAcquire", lock="map"),
        ProfilerCallback(thread=3, name="FunctionEnter2", phase="enter", args={"funcId": 7, "clientData": 7}),
        InfoCall(thread=3, name="ForceGC", hr=0),
        ProfilerCallback(thread=3, name="FunctionEnter2", phase="return"),
        ThreadOperation(thread=3, op="LockRelease", lock="map"),
    ]
    assert _found(function_enter.check_hook_events(events)) == [("FE2-11", 2)]
    assert _found(async_safety.check(events)) == [("DSS-24", 2)]
    assert moved_refs.check_gc_events(events) == []


def test_FE2_04_failed_set_event_mask_does_not_change_the_mask() -> None:
    enter = ProfilerCallback(thread=1, name="FunctionEnter2",
                             args={"funcId": 1, "clientData": 1, "argumentInfo": 0x10})
    mask = 0x20 | int(CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS)
    ok = InfoCall(name="SetEventMask", args={"dwEvents": mask}, hr=0)
    refused = ok.model_copy(update={"hr": FAILED})
    assert function_enter.check_hook_events([ok, enter]) == []
    assert [v.clause for v in function_enter.check_hook_events([refused, enter])] == ["FE2-04"]


def test_MR2_12_hr_from_the_return_of_moved_references2() -> None:
    """A recorder that sees both edges: the failure HRESULT is on MovedReferences2's return."""
    events: list[Event] = [
        ProfilerCallback(name="GarbageCollectionStarted", hr=0),
        ProfilerCallback(name="MovedReferences2", phase="enter", args={
            "cMovedObjectIDRanges": 0, "oldObjectIDRangeStart": [], "newObjectIDRangeStart": [],
            "cObjectIDRangeLength": []}),
        ProfilerCallback(name="MovedReferences2", phase="return", hr=FAILED),
        ProfilerCallback(name="MovedReferences", hr=0),
        ProfilerCallback(name="GarbageCollectionFinished", hr=0),
    ]
    assert _found(moved_refs.check_gc_events(events)) == [("MR2-12", 3)]


def test_MR2_17_objects_handed_out_by_parameter_name() -> None:
    events: list[Event] = [
        ProfilerCallback(name="ObjectAllocated", args={"objectId": 0x1010, "classId": 1}),
        ProfilerCallback(name="GarbageCollectionStarted"),
        ProfilerCallback(name="MovedReferences2", args={
            "cMovedObjectIDRanges": 1, "oldObjectIDRangeStart": [0x1000], "newObjectIDRangeStart": [0x5000],
            "cObjectIDRangeLength": [0x100]}),
        ProfilerCallback(name="MovedReferences", hr=0),
        ProfilerCallback(name="GarbageCollectionFinished"),
        ObjectInspection(name="GetClassFromObject", object_id=0x1010, within="GarbageCollectionFinished"),
    ]
    assert _found(moved_refs.check_gc_events(events)) == [("MR2-17", 5)]


def test_MR2_03_arrays_missing_from_a_moved_references2() -> None:
    events: list[Event] = [
        ProfilerCallback(name="GarbageCollectionStarted"),
        ProfilerCallback(name="MovedReferences2",
                         args={"oldObjectIDRangeStart": [1], "cObjectIDRangeLength": [1]}),
    ]
    found = moved_refs.check_gc_events(events)
    assert [(v.clause, v.index) for v in found][:1] == [("MR2-03", 1)]


def test_marks_are_ignored_by_every_checker() -> None:
    marks: list[Event] = [Mark(name="ids.before", payload="[1]"), Mark(name="expect.objects")]
    for check in CHECKERS.values():
        assert check(marks) == []


# --- one sequence, three checkers -------------------------------------------------------------------------


@FAST
@given(mixed_sequences())
def test_each_checker_ignores_the_other_areas(case: tuple[list[Event], dict[str, list[int]]]) -> None:
    """A checker fed only another area's events finds nothing and raises nothing."""
    events, positions = case
    for area in AREAS:
        own = set(positions[area])
        assert CHECKERS[area]([e for i, e in enumerate(events) if i not in own]) == []


@FAST
@given(mixed_sequences())
def test_checkers_on_a_merged_sequence_give_the_union_of_their_separate_results(
    case: tuple[list[Event], dict[str, list[int]]],
) -> None:
    """Each checker on the interleaving of the three areas finds exactly what it finds on its own area's
    events, at the merged positions; the union over the checkers is the union of the separate results."""
    events, positions = case
    merged_all: list[tuple[str, int | None]] = []
    separate_all: list[tuple[str, int | None]] = []
    for area, check in CHECKERS.items():
        own = [events[p] for p in positions[area]]
        separate = [(v.clause, positions[area][v.index] if v.index is not None else None) for v in check(own)]
        merged = [(v.clause, v.index) for v in check(events)]
        assert sorted(merged, key=str) == sorted(separate, key=str)
        merged_all += merged
        separate_all += separate
    assert sorted(merged_all, key=str) == sorted(separate_all, key=str)


@FAST
@given(area_sequences("function_enter"))
def test_hook_rules_ignore_unrelated_events_property(events: list[Event]) -> None:
    """Inserting another area's kinds (marks, GC callbacks, inspections, DoStackSnapshot calls) at every
    position changes no FE2 verdict but the indexes."""
    noise: list[Event] = [Mark(name="m"), ProfilerCallback(name="GarbageCollectionStarted"),
                          ObjectInspection(name="GetObjectSize", object_id=1),
                          InfoCall(thread=1, name="DoStackSnapshot", args={"thread": 2})]
    padded: list[Event] = []
    where: list[int] = []
    for k, event in enumerate(events):
        padded.append(noise[k % len(noise)])
        where.append(len(padded))
        padded.append(event)
    alone = [(v.clause, where[v.index] if v.index is not None else None, v.message.split("#")[0])
             for v in function_enter.check_hook_events(events)]
    mixed = [(v.clause, v.index, v.message.split("#")[0]) for v in function_enter.check_hook_events(padded)]
    assert mixed == alone
