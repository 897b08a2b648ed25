"""A recording proxy's trace read into the model's event vocabulary (:mod:`clr_model.events`).

The proxy writes the trace format (``docs/design.md``) with edges (``conformance/native/proxy/proxy.h``):

* ``callback`` records with ``phase`` ``enter``/``return`` -> :class:`~clr_model.events.ProfilerCallback`
  of that phase (hooks and StackSnapshotCallbacks the proxy wrapped too, ``hook: true`` for hooks); the
  ``proxy.ranges`` mark written just before a MovedReferences(2) entry gives that callback its three arrays;
* ``call`` records -> :class:`~clr_model.events.InfoCall` (``phase`` from the record, ``whole`` without),
  except calls of the API table's ``inspects`` methods (:mod:`clr_model.api`) with an ``objectId``, which
  become :class:`~clr_model.events.ObjectInspection` ``within`` the callback open on that thread;
* the scenario's marks -> :class:`~clr_model.events.Mark`; the proxy's own marks (``proxy.*``: crash, hang,
  shutdown, ranges) stay in :attr:`Recording.notes`.

Thread identities: ``thread`` is the OS thread; a runtime ThreadID in the ThreadID parameter of a
``thread-lifetime`` callback (ThreadCreated, ThreadDestroyed) or in DoStackSnapshot's ``thread`` is mapped
to its OS thread when the trace tells (every record carries both ``os_tid`` and ``tid``), so the model
compares like with like.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pydantic import JsonValue, ValidationError

from clr_model import api
from clr_model.api import Fact
from clr_model.events import (
    Event,
    InfoCall,
    Mark,
    ObjectInspection,
    Phase,
    ProfilerCallback,
)
from conformance.core.errors import HarnessError
from conformance.core.trace import CallbackRecord, CallRecord, HeaderRecord, MarkRecord, Trace

#: The proxy's own marks (not the scenario's).
NOTE_PREFIX = "proxy."
_RANGES = "proxy.ranges"
#: a thread-lifetime callback -> its ThreadID parameter
_THREAD_ARGS: Mapping[str, str] = {
    m.name: next(p.name for p in m.params if p.type == "ThreadID")
    for m in api.with_fact(Fact.THREAD_LIFETIME)
}


@dataclass
class Recording:
    """One proxy trace as events, with what the proxy noted besides."""

    trace: Trace
    events: list[Event]
    #: the callbacks and hooks open on the event's thread when it happened, outermost first
    context: list[tuple[str, ...]]
    #: the proxy's marks by name (proxy.crash, proxy.hang, proxy.shutdown), in order
    notes: dict[str, list[MarkRecord]] = field(default_factory=dict)
    #: runtime ThreadID -> OS thread
    os_thread_of: dict[int, int] = field(default_factory=dict)
    #: OS threads that ran managed code (had a ThreadID)
    managed_threads: set[int] = field(default_factory=set)
    #: OS threads the hooks ran on... hook frames are callbacks with ``hook`` true: their names
    hook_names: set[str] = field(default_factory=set)

    @property
    def header(self) -> HeaderRecord | None:
        return self.trace.header

    @property
    def proxy_info(self) -> dict[str, Any]:
        header = self.header
        extra = (header.model_extra or {}) if header is not None else {}
        info = extra.get("proxy")
        return info if isinstance(info, dict) else {}

    @property
    def callback_level(self) -> int:
        level = self.proxy_info.get("callbackLevel")
        return level if isinstance(level, int) else 0

    def callback_at(self, index: int) -> str | None:
        """The innermost callback or hook open on the thread of event ``index``."""
        stack = self.context[index]
        return stack[-1] if stack else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Origin(TypedDict):
    """What an event takes from its record: its place in the trace, its OS thread, its name."""

    seq: int
    thread: int
    name: str


def _origin(record: CallbackRecord | CallRecord | MarkRecord) -> _Origin:
    return _Origin(seq=record.seq, thread=record.os_tid, name=record.name)


def read_recording(trace: Trace) -> Recording:
    """The events of a proxy trace (see the module's docstring).

    A trace with a malformed record (:attr:`Trace.problem`: a complete line that is not a record, not a
    torn tail) is refused with that line's ``file:line: what``: the rules would judge only the records
    before it, and say nothing of the rest (issue 13)."""
    if trace.problem is not None:
        raise HarnessError(
            f"{trace.problem}; the recording is damaged there, and a verdict on the "
            f"{len(trace.records)} record(s) before it would not cover the run"
        )
    os_of: dict[int, int] = {}
    managed: set[int] = set()
    for record in trace.records:
        if record.tid:
            os_of.setdefault(record.tid, record.os_tid)
            managed.add(record.os_tid)
        if isinstance(record, CallbackRecord) and record.name == "ThreadAssignedToOSThread":
            tid, os_tid = _int(record.args.get("managedThreadId")), _int(record.args.get("osThreadId"))
            if tid and os_tid:
                os_of[tid] = os_tid
    events: list[Event] = []
    context: list[tuple[str, ...]] = []
    stacks: dict[int, list[str]] = {}
    notes: dict[str, list[MarkRecord]] = {}
    pending_ranges: dict[int, MarkRecord] = {}
    hooks: set[str] = set()

    def add(event: Event) -> None:
        events.append(event)
        context.append(tuple(stacks.get(event.thread, ())))

    def fail(record: Any, err: ValidationError) -> HarnessError:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return HarnessError(f"{trace.path}: seq {record.seq}: {record.kind} record: {where}: {first['msg']}")

    for record in trace.records:
        try:
            if isinstance(record, CallbackRecord):
                extra = record.model_extra or {}
                phase: Phase = extra.get("phase", "whole")
                args: dict[str, JsonValue] = dict(record.args)
                if extra.get("hook") is True:
                    hooks.add(record.name)
                key = _THREAD_ARGS.get(record.name)
                if key is not None and _int(args.get(key)) in os_of:
                    args[key] = os_of[int(args[key])]  # type: ignore[arg-type]
                if record.name in api.names_with(Fact.MOVES) and phase != "return":
                    ranges = pending_ranges.pop(record.os_tid, None)
                    if ranges is not None:
                        moved = ranges.model_extra or {}
                        for name in (
                            "oldObjectIDRangeStart",
                            "newObjectIDRangeStart",
                            "cObjectIDRangeLength",
                        ):
                            args[name] = moved.get(name)
                stack = stacks.setdefault(record.os_tid, [])
                if phase == "return" and stack:
                    stack.pop()
                hr = record.hr if phase != "enter" else None
                add(ProfilerCallback(**_origin(record), phase=phase, args=args, hr=hr))
                if phase == "enter":
                    stack.append(record.name)
            elif isinstance(record, CallRecord):
                extra = record.model_extra or {}
                phase = extra.get("phase", "whole")
                args = dict(record.args)
                if record.name == "DoStackSnapshot":
                    target = _int(args.get("thread"))
                    if target and target in os_of:
                        args["thread"] = os_of[target]
                        args["threadId"] = target
                oid = _int(record.args.get("objectId"))
                if record.name in api.names_with(Fact.INSPECTS) and oid is not None:
                    stack = stacks.get(record.os_tid, [])
                    within = stack[-1] if stack else None
                    add(ObjectInspection(**_origin(record), object_id=oid, within=within, hr=record.hr))
                else:
                    hr = record.hr if phase != "enter" else None
                    add(InfoCall(**_origin(record), phase=phase, args=args, out=record.out, hr=hr))
            elif isinstance(record, MarkRecord):
                if record.name.startswith(NOTE_PREFIX):
                    notes.setdefault(record.name, []).append(record)
                    if record.name == _RANGES:
                        pending_ranges[record.os_tid] = record
                else:
                    add(Mark(**_origin(record), payload=record.payload, data=dict(record.model_extra or {})))
        except ValidationError as err:
            raise fail(record, err) from err
    return Recording(
        trace=trace,
        events=events,
        context=context,
        notes=notes,
        os_thread_of=os_of,
        managed_threads=managed,
        hook_names=hooks,
    )
