"""The event adapter (conformance.adapters.events): probe traces -> the model's event vocabulary.

Synthetic traces are written record by record (``rec``), read with ``read_trace`` and adapted; the model's
three event-rule checkers then run on the one sequence the adapter gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clr_model import async_safety, function_enter, moved_refs
from clr_model.events import Event, InfoCall, Mark, ObjectInspection, ProfilerCallback, ThreadOperation
from clr_model.hresults import HResult
from conformance.adapters.events import trace_events
from conformance.core.errors import HarnessError
from conformance.core.trace import Trace, read_trace

MAIN, WALKER, HOOKED = 11, 22, 33
E_FAIL = int(HResult.E_FAIL)


class SyntheticTrace:
    """SyntheticTrace of one synthetic trace, seq in order."""

    def __init__(self) -> None:
        self._seq: Iterator[int] = iter(range(10_000))
        self.records: list[dict[str, Any]] = [self.rec("header", probe="0.1.0", pid=1, plan={})]

    def rec(self, kind: str, os_tid: int = MAIN, **fields: Any) -> dict[str, Any]:
        return {"seq": next(self._seq), "kind": kind, "os_tid": os_tid, "tid": 7, **fields}

    def add(self, kind: str, os_tid: int = MAIN, **fields: Any) -> int:
        record = self.rec(kind, os_tid, **fields)
        self.records.append(record)
        return int(record["seq"])

    def callback(self, name: str, hr: int = 0, os_tid: int = MAIN, **args: Any) -> int:
        return self.add("callback", os_tid, name=name, args=args, hr=hr)

    def call(
        self, name: str, hr: int = 0, os_tid: int = MAIN, out: dict[str, Any] | None = None, **args: Any
    ) -> int:
        return self.add("call", os_tid, name=name, experiment="x", args=args, out=out or {}, hr=hr)

    def frame(self, walk: int, index: int, os_tid: int = WALKER) -> int:
        return self.add(
            "frame",
            os_tid,
            walk=walk,
            index=index,
            funcId=0x100 + index,
            ip=0x7000 + index,
            frameInfo=0,
            clientData=0,
            contextSize=0,
            context=None,
            hr=0,
            cbOsTid=os_tid,
        )

    def trace(self, tmp_path: Path, name: str = "trace.jsonl") -> Trace:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in [*self.records, self.rec("end")]))
        return read_trace(path, strict=True)


def moved(
    r: SyntheticTrace, name: str, ranges: list[tuple[int, int, int]], hr: int = 0, truncated: bool = False
) -> int:
    return r.callback(
        name,
        hr,
        cMovedObjectIDRanges=len(ranges),
        old=[x[0] for x in ranges],
        new=[x[1] for x in ranges],
        len=[x[2] for x in ranges],
        truncated=truncated,
    )


def gc(r: SyntheticTrace, mr2_hr: int = 0, v1: bool = True) -> dict[str, int]:
    seqs = {"started": r.callback("GarbageCollectionStarted")}
    seqs["mr2"] = moved(r, "MovedReferences2", [(0x1000, 0x5000, 0x100)], mr2_hr)
    if v1:
        seqs["mr"] = moved(r, "MovedReferences", [(0x1000, 0x5000, 0x100)])
    seqs["finished"] = r.callback("GarbageCollectionFinished")
    return seqs


def at(events: list[Event], seq: int) -> list[Event]:
    return [e for e in events if e.seq == seq]


# --- callbacks -------------------------------------------------------------------------------------------


def test_gc_callbacks_become_callbacks_with_the_api_argument_names(tmp_path: Path) -> None:
    r = SyntheticTrace()
    seqs = gc(r)
    events = trace_events(r.trace(tmp_path))
    (mr2,) = at(events, seqs["mr2"])
    assert isinstance(mr2, ProfilerCallback) and mr2.phase == "whole" and mr2.thread == MAIN and mr2.hr == 0
    assert mr2.args == {
        "cMovedObjectIDRanges": 1,
        "oldObjectIDRangeStart": [0x1000],
        "newObjectIDRangeStart": [0x5000],
        "cObjectIDRangeLength": [0x100],
    }
    assert [e.name for e in events if isinstance(e, ProfilerCallback)] == [
        "GarbageCollectionStarted",
        "MovedReferences2",
        "MovedReferences",
        "GarbageCollectionFinished",
    ]
    assert moved_refs.check_gc_events(events) == []  # header and end records are no events


def test_MR2_12_on_an_adapted_trace_points_at_the_record(tmp_path: Path) -> None:
    r = SyntheticTrace()
    r.callback("GarbageCollectionStarted")
    moved(r, "MovedReferences2", [(0x1000, 0x5000, 0x100)], hr=E_FAIL)
    late = moved(r, "MovedReferences", [(0x1000, 0x5000, 0x100)])
    r.callback("GarbageCollectionFinished")
    events = trace_events(r.trace(tmp_path))
    (violation,) = moved_refs.check_gc_events(events)
    assert violation.clause == "MR2-12" and violation.index is not None
    assert events[violation.index].seq == late


def test_a_truncated_table_keeps_no_arrays(tmp_path: Path) -> None:
    r = SyntheticTrace()
    r.callback("GarbageCollectionStarted")
    seq = moved(r, "MovedReferences2", [(0x1000, 0x5000, 0x100)], truncated=True)
    (mr2,) = at(trace_events(r.trace(tmp_path)), seq)
    assert isinstance(mr2, ProfilerCallback) and mr2.args == {"cMovedObjectIDRanges": 1}


def test_function_id_mapper_return_value_is_an_out_value(tmp_path: Path) -> None:
    r = SyntheticTrace()
    seq = r.callback(
        "FunctionIDMapper2", funcId=7, mapperData=0, token=0x06000001, pbHookFunction=True, returned=7 ^ 0x55
    )
    (mapper,) = at(trace_events(r.trace(tmp_path)), seq)
    assert isinstance(mapper, ProfilerCallback)
    assert mapper.out == {"clientData": 7 ^ 0x55, "pbHookFunction": True}
    assert "returned" not in mapper.args and mapper.args["funcId"] == 7


def hook(r: SyntheticTrace, index: int, gfi2_hr: int = 0, with_call: bool = True) -> tuple[int, int | None]:
    enter = r.callback(
        "FunctionEnter2",
        funcId=7,
        clientData=7 ^ 0x55,
        func=0x900 + index,
        argumentInfo=0,
        hook_index=index,
        hook_os_tid=HOOKED,
    )
    use = None
    if with_call:
        use = r.call(
            "GetFunctionInfo2",
            gfi2_hr,
            out={"token": 0x06000001},
            funcId=7,
            frameInfo=0x900 + index,
            inside_hook=True,
            hook_index=index,
        )
    return enter, use


def test_FE2_hook_records_become_enter_inside_calls_return_on_the_hooks_thread(tmp_path: Path) -> None:
    r = SyntheticTrace()
    r.callback("FunctionIDMapper2", funcId=7, returned=7 ^ 0x55)
    enter, use = hook(r, 0)
    assert use is not None
    events = trace_events(r.trace(tmp_path))
    first, call, last = [e for e in events if e.thread == HOOKED]
    assert isinstance(first, ProfilerCallback)
    assert (first.name, first.phase, first.seq) == ("FunctionEnter2", "enter", enter)
    assert isinstance(call, InfoCall) and (call.name, call.seq) == ("GetFunctionInfo2", use)
    assert isinstance(last, ProfilerCallback) and (last.phase, last.seq) == ("return", use)
    assert function_enter.check_hook_events(events) == []


def test_FE2_03_refused_frame_info_on_an_adapted_trace(tmp_path: Path) -> None:
    r = SyntheticTrace()
    r.callback("FunctionIDMapper2", funcId=7, returned=7 ^ 0x55)
    hook(r, 0)
    _, use = hook(r, 1, gfi2_hr=E_FAIL)
    hook(r, 2, with_call=False)  # a hook without an inside call is one whole callback
    events = trace_events(r.trace(tmp_path))
    (violation,) = function_enter.check_hook_events(events)
    assert violation.clause == "FE2-03" and violation.index is not None and events[violation.index].seq == use


# --- calls -----------------------------------------------------------------------------------------------


def test_frame_records_belong_to_their_DoStackSnapshot_call(tmp_path: Path) -> None:
    r = SyntheticTrace()
    created = r.call("ProfilerThreadCreated", os_tid=WALKER, out={"threadId": 0xAB}, osTid=WALKER)
    first = r.frame(walk=4, index=0)
    r.frame(walk=4, index=1)
    walk = r.call("DoStackSnapshot", os_tid=WALKER, out={"frameCount": 2}, thread=0xCD, infoFlags=0, walk=4)
    events = trace_events(r.trace(tmp_path))
    thread_op, current = at(events, created)
    assert isinstance(thread_op, ThreadOperation) and thread_op.op == "ProfilerThreadCreated"
    assert isinstance(current, InfoCall) and current.name == "GetCurrentThreadID"
    assert current.out == {"threadId": 0xAB}
    begin, frame0 = at(events, first)
    assert isinstance(begin, InfoCall) and (begin.name, begin.phase, begin.thread) == (
        "DoStackSnapshot",
        "enter",
        WALKER,
    )
    assert begin.args["walk"] == 4 and begin.args["thread"] == 0xCD
    assert isinstance(frame0, ProfilerCallback) and frame0.name == "StackSnapshotCallback"
    assert frame0.args["funcId"] == 0x100
    (end,) = at(events, walk)
    assert isinstance(end, InfoCall) and end.phase == "return" and end.out == {"frameCount": 2}
    # the warm-up walk of another thread, then a suspension: DSS-25 is kept
    suspended = [*events, ThreadOperation(thread=WALKER, op="SuspendThread", target=0xCD)]
    assert async_safety.check(suspended) == []


def test_a_walk_without_frame_records_is_one_whole_call(tmp_path: Path) -> None:
    r = SyntheticTrace()
    seq = r.call("DoStackSnapshot", hr=int(HResult.CORPROF_E_STACKSNAPSHOT_UNSAFE), thread=1, walk=9)
    (call,) = at(trace_events(r.trace(tmp_path)), seq)
    assert isinstance(call, InfoCall) and call.phase == "whole"


def test_object_inspections_probe_calls_and_marks(tmp_path: Path) -> None:
    r = SyntheticTrace()
    inspect = r.call(
        "GetClassFromObject", out={"classId": 5}, objectId=0x5010, at="GarbageCollectionFinished"
    )
    signal = r.call(
        "pthread_kill",
        os_tid=WALKER,
        out={"rc": 0},
        target={"name": "t", "threadId": 1, "osTid": MAIN},
        signal="SIGUSR2",
    )
    flush = r.call("enter_leave_flush", out={"enters": 3})
    suspend = r.call("SuspendRuntime", phase="before-walk")
    mark = r.add("mark", name="ids.before", payload=None, ids=[1, 2])
    r.add("counts", counts={"GarbageCollectionStarted": 1})
    r.add("probe_error", what="x", where="y")
    events = trace_events(r.trace(tmp_path))
    assert [e.seq for e in events] == [inspect, signal, flush, suspend, mark]
    oi, sig, note, sr, m = events
    assert isinstance(oi, ObjectInspection) and (oi.name, oi.object_id, oi.within) == (
        "GetClassFromObject",
        0x5010,
        "GarbageCollectionFinished",
    )
    assert isinstance(sig, ThreadOperation) and (sig.op, sig.thread, sig.target) == ("Signal", WALKER, MAIN)
    assert isinstance(note, Mark) and note.name == "enter_leave_flush" and note.data["out"] == {"enters": 3}
    assert isinstance(sr, InfoCall) and sr.name == "SuspendRuntime" and sr.args == {"phase": "before-walk"}
    assert isinstance(m, Mark) and m.data == {"ids": [1, 2]} and m.payload is None


def test_one_adapted_trace_feeds_all_three_checkers(tmp_path: Path) -> None:
    r = SyntheticTrace()
    r.callback("FunctionIDMapper2", funcId=7, returned=7 ^ 0x55)
    gc(r)
    hook(r, 0)
    r.call("ProfilerThreadCreated", os_tid=WALKER, out={"threadId": 0xAB}, osTid=WALKER)
    r.frame(walk=1, index=0)
    r.call("DoStackSnapshot", os_tid=WALKER, out={"frameCount": 1}, thread=0xCD, walk=1)
    r.call("GetClassFromObject", objectId=0x5010, at="GarbageCollectionFinished")
    events = trace_events(r.trace(tmp_path))
    assert async_safety.check(events) == []
    assert function_enter.check_hook_events(events) == []
    assert moved_refs.check_gc_events(events) == []


# --- bad records -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "what"),
    [
        (lambda r: r.call("GetClassFromObject", objectId="0x10"), "args.objectId '0x10' is not an ObjectID"),
        (lambda r: r.call("GetObjectSize", objectId=-1), "object_id: Input should be greater than"),
        (lambda r: r.call("DoStackSnapshot", walk="w"), "args.walk 'w' is not a walk number"),
        (
            lambda r: (r.call("DoStackSnapshot", walk=2), r.frame(walk=2, index=0))[-1],
            "frame of walk 2 after its DoStackSnapshot record",
        ),
        (
            lambda r: (r.call("DoStackSnapshot", walk=3), r.call("DoStackSnapshot", walk=3))[-1],
            "walk 3 has a second DoStackSnapshot record",
        ),
    ],
    ids=["object-id-type", "object-id-range", "walk-number", "frame-after-call", "walk-twice"],
)
def test_a_bad_record_is_a_one_line_error_naming_the_trace_and_seq(
    tmp_path: Path, build: Any, what: str
) -> None:
    r = SyntheticTrace()
    r.callback("GarbageCollectionStarted")
    seq = build(r)
    trace = r.trace(tmp_path, "bad.jsonl")
    with pytest.raises(HarnessError) as caught:
        trace_events(trace)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{trace.path}: seq {seq}: ")
    assert what in message
