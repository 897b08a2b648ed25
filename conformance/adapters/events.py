"""The event adapter: a probe trace -> the model's event vocabulary (:mod:`clr_model.events`).

:func:`trace_events` reads a :class:`~conformance.core.trace.Trace` in record order and gives the sequence
the model's event-rule checkers read (``clr_model.async_safety.check``,
``clr_model.function_enter.check_hook_events``, ``clr_model.moved_refs.check_gc_events``). Every event keeps
the ``seq`` of the record it came from (events made from one record share it) and ``thread`` = the OS
thread the record names (``os_tid``, or the thread it was written on behalf of, below).

* ``callback`` records -> :class:`~clr_model.events.ProfilerCallback`, phase ``whole`` (the probe writes
  one record per callback, with the HRESULT it returns). The probe's short argument names become the API's
  (MovedReferences(2): ``old``/``new``/``len`` -> ``oldObjectIDRangeStart``/``newObjectIDRangeStart``/
  ``cObjectIDRangeLength``; a table the probe ``truncated`` keeps no arrays, so no model judges a part of
  it); FunctionIDMapper(2)'s return value (``args.returned``) and ``pbHookFunction`` become ``out``.
* FunctionEnter2 records are written later, when the probe flushes its hook slots, each followed by the
  GetFunctionInfo2 call the hook made (``args.inside_hook``, same ``hook_index``): the hook becomes an
  ``enter`` callback, those calls, then a ``return``, all on the hook's thread (``args.hook_os_tid``).
* ``call`` records -> :class:`~clr_model.events.InfoCall` (phase ``whole``), except:
  DoStackSnapshot, whose ``frame`` records (written just before it, ``walk`` = its ``args.walk``) become
  StackSnapshotCallback callbacks between an ``enter`` (at the first frame) and a ``return`` (the call
  record): frame records belong to their call; calls of the API table's ``inspects`` methods
  (:mod:`clr_model.api`) with an ``objectId`` -> :class:`~clr_model.events.ObjectInspection` (``within`` =
  ``args.at``, the
  callback the probe made it in); the probe's ``ProfilerThreadCreated`` -> the thread operation plus the
  GetCurrentThreadID call it made; ``pthread_kill`` -> a ``Signal`` thread operation; the probe's
  bookkeeping (``enter_leave_flush``) -> a :class:`~clr_model.events.Mark`.
* ``mark`` records -> :class:`~clr_model.events.Mark` (the scenario's ground truth, ``data`` = the
  record's extra fields): a separate kind no checker judges, kept in the timeline so a judge reads ground
  truth and events from one list.
* ``header``, ``counts``, ``end`` and ``probe_error`` records are not events (the run's configuration,
  totals, the end of the trace, the probe's own complaints: read them from the trace).

A record the vocabulary cannot hold raises :class:`~conformance.core.errors.HarnessError` naming the trace
and the seq. Thread identities are kept as recorded: ``thread`` is an OS thread id, a ``thread``/
``threadId`` argument a runtime ThreadID; a caller that compares the two maps them first. Imports only the
trace model and :mod:`clr_model` (never the suite or the CLI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from pydantic import JsonValue, ValidationError

from clr_model import api
from clr_model.api import Fact, HookKind
from clr_model.events import (
    Event,
    InfoCall,
    Mark,
    ObjectInspection,
    ProfilerCallback,
    ThreadOperation,
)
from conformance.core.errors import HarnessError
from conformance.core.trace import CallbackRecord, CallRecord, FrameRecord, MarkRecord, Record, Trace

__all__ = ["ARG_NAMES", "PROBE_NOTES", "trace_events"]

#: The probe's short names of the range arrays it records -> the API's parameter names.
_RANGE_ARGS: Mapping[str, str] = {"oldObjectIDRangeStart": "old", "newObjectIDRangeStart": "new",
                                  "objectIDRangeStart": "start", "cObjectIDRangeLength": "len"}
#: The probe's short argument names -> the API's parameter names, per callback (the callbacks that report
#: moved or surviving object ranges: the API table's moves and survivors).
ARG_NAMES: Mapping[str, Mapping[str, str]] = {
    m.name: {_RANGE_ARGS[p.name]: p.name for p in m.params if p.name in _RANGE_ARGS}
    for m in api.with_fact(Fact.MOVES) + api.with_fact(Fact.SURVIVORS)
}
#: Values the probe records among a mapper's args that the profiler gave back: arg name -> out name.
_OUT_VALUES: Mapping[str, Mapping[str, str]] = {
    mapper: {"returned": "clientData", "pbHookFunction": "pbHookFunction"}
    for mapper in api.hooks_of([HookKind.FUNCTION_ID_MAPPER])
}
#: Call records that are the probe's own bookkeeping, not calls into the runtime.
PROBE_NOTES = frozenset({"enter_leave_flush"})
_HOOK = "FunctionEnter2"
_WALK = "DoStackSnapshot"


class _Reader:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.events: list[Event] = []
        self.walk_calls: dict[int, CallRecord] = {}
        self.open_walks: dict[int, CallRecord | None] = {}  # walk -> its call record (None: never recorded)
        self.closed_walks: dict[int, int] = {}  # walk -> seq of its call record
        for record in trace.records:
            if isinstance(record, CallRecord) and record.name == _WALK:
                walk = self._walk_of(record)
                if walk is not None:
                    if walk in self.walk_calls:
                        self.fail(record, f"walk {walk} has a second DoStackSnapshot record (the first is "
                                  f"seq {self.walk_calls[walk].seq})")
                    self.walk_calls[walk] = record

    def fail(self, record: Record, what: str) -> NoReturn:
        name = getattr(record, "name", None)
        label = f"{record.kind} record" + (f" {name}" if name else "")
        raise HarnessError(f"{self.trace.path}: seq {record.seq}: {label}: {what}")

    def add(self, record: Record, build: Callable[..., Event], **fields: Any) -> None:
        try:
            self.events.append(build(seq=record.seq, **fields))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self.fail(record, f"{where}: {first['msg']}" if where else first["msg"])

    def _walk_of(self, record: CallRecord) -> int | None:
        walk = record.args.get("walk")
        if walk is None:
            return None
        if not isinstance(walk, int) or isinstance(walk, bool) or walk < 0:
            self.fail(record, f"args.walk {walk!r} is not a walk number")
        return int(walk)

    # --- records ------------------------------------------------------------------------------------------

    def callback(self, record: CallbackRecord, inside: list[CallRecord]) -> None:
        renames = ARG_NAMES.get(record.name, {})
        outs = _OUT_VALUES.get(record.name, {})
        args: dict[str, JsonValue] = {}
        out: dict[str, JsonValue] = {}
        truncated = record.args.get("truncated") is True
        for key, value in record.args.items():
            if key in outs:
                out[outs[key]] = value
            elif key in renames:
                if not truncated:
                    args[renames[key]] = value
            elif key != "truncated" or not renames:
                args[key] = value
        thread = record.os_tid
        if record.name == _HOOK:
            on_behalf = record.args.get("hook_os_tid")
            if isinstance(on_behalf, int) and not isinstance(on_behalf, bool):
                thread = on_behalf
        if record.name == _HOOK and inside:
            self.add(record, ProfilerCallback, thread=thread, name=record.name, phase="enter", args=args)
            for call in inside:
                self.call(call, thread)
            self.add(inside[-1], ProfilerCallback, thread=thread, name=record.name, phase="return",
                     hr=record.hr)
            return
        self.add(record, ProfilerCallback, thread=thread, name=record.name, args=args, out=out, hr=record.hr)

    def frame(self, record: FrameRecord) -> None:
        walk = record.walk
        if walk in self.closed_walks:
            self.fail(record, f"frame of walk {walk} after its DoStackSnapshot record (seq "
                      f"{self.closed_walks[walk]})")
        if walk not in self.open_walks:
            call = self.walk_calls.get(walk)
            self.open_walks[walk] = call
            self.add(record, InfoCall, thread=call.os_tid if call is not None else record.os_tid, name=_WALK,
                     phase="enter", args=dict(call.args) if call is not None else {"walk": walk})
        extra = record.model_extra or {}
        on = extra.get("cbOsTid")
        thread = on if isinstance(on, int) and not isinstance(on, bool) and on >= 0 else record.os_tid
        context = record.context.model_dump() if record.context is not None else None
        args: dict[str, JsonValue] = {
            "funcId": record.funcId, "ip": record.ip, "frameInfo": record.frameInfo,
            "contextSize": record.contextSize, "context": context, "clientData": record.clientData,
        }
        self.add(record, ProfilerCallback, thread=thread, name="StackSnapshotCallback", args=args,
                 hr=record.hr)

    def call(self, record: CallRecord, thread: int | None = None) -> None:
        tid = record.os_tid if thread is None else thread
        name = record.name
        if name == _WALK:
            walk = self._walk_of(record)
            phase = "whole"
            if walk is not None and walk in self.open_walks:
                del self.open_walks[walk]
                phase = "return"
            if walk is not None:
                self.closed_walks[walk] = record.seq
            self.add(record, InfoCall, thread=tid, name=name, phase=phase, args=record.args, out=record.out,
                     hr=record.hr)
        elif name in api.names_with(Fact.INSPECTS) and "objectId" in record.args:
            oid = record.args["objectId"]
            if not isinstance(oid, int) or isinstance(oid, bool):
                self.fail(record, f"args.objectId {oid!r} is not an ObjectID")
            at = record.args.get("at")
            self.add(record, ObjectInspection, thread=tid, name=name, object_id=oid,
                     within=at if isinstance(at, str) else None, hr=record.hr)
        elif name == "ProfilerThreadCreated":
            self.add(record, ThreadOperation, thread=tid, op="ProfilerThreadCreated", args=record.args)
            self.add(record, InfoCall, thread=tid, name="GetCurrentThreadID", out=record.out, hr=record.hr)
        elif name == "pthread_kill":
            target = record.args.get("target")
            os_tid = target.get("osTid") if isinstance(target, dict) else None
            self.add(record, ThreadOperation, thread=tid, op="Signal",
                     target=os_tid if isinstance(os_tid, int) and os_tid >= 0 else None,
                     args={**record.args, "out": record.out, "hr": record.hr})
        elif name in PROBE_NOTES:
            self.add(record, Mark, thread=tid, name=name, data={"args": record.args, "out": record.out})
        else:
            self.add(record, InfoCall, thread=tid, name=name, args=record.args, out=record.out, hr=record.hr)

    def mark(self, record: MarkRecord) -> None:
        self.add(record, Mark, thread=record.os_tid, name=record.name, payload=record.payload,
                 data=dict(record.model_extra or {}))

    def read(self) -> list[Event]:
        records = self.trace.records
        i = 0
        while i < len(records):
            record = records[i]
            i += 1
            if isinstance(record, CallbackRecord):
                inside: list[CallRecord] = []
                if record.name == _HOOK:
                    for nxt in _inside_calls(records, i, record.args.get("hook_index")):
                        inside.append(nxt)
                    i += len(inside)
                self.callback(record, inside)
            elif isinstance(record, CallRecord):
                self.call(record)
            elif isinstance(record, FrameRecord):
                self.frame(record)
            elif isinstance(record, MarkRecord):
                self.mark(record)
        return self.events


def _inside_calls(records: list[Record], start: int, hook_index: object) -> Iterator[CallRecord]:
    """The call records right after a FunctionEnter2 record that the hook made (same hook_index)."""
    for record in records[start:]:
        if not (isinstance(record, CallRecord) and record.args.get("inside_hook") is True
                and hook_index is not None and record.args.get("hook_index") == hook_index):
            return
        yield record


def trace_events(trace: Trace) -> list[Event]:
    """The trace's records as the model's event sequence (see the module's docstring for each kind)."""
    return _Reader(trace).read()
