"""One vocabulary of what happens in a profiled process, fed to every event-rule checker of the model.

The asynchronous-walk rules (:mod:`clr_model.async_safety`, DSS-22..25), the FunctionEnter2 rules
(:mod:`clr_model.function_enter`, FE2-01..05/10..12) and the MovedReferences2 rules
(:mod:`clr_model.moved_refs`, MR2-01/02/09..12/17) all read sequences of :data:`Event`. Each checker picks
the kinds and names it judges and ignores the rest, so one recorded sequence can be given to all three.

Five kinds, told apart by ``kind``:

* :class:`ProfilerCallback`: the runtime called the profiler: an ICorProfilerCallback method
  (GarbageCollectionStarted, MovedReferences2, ThreadDestroyed, ...) or a function the profiler handed
  the runtime (FunctionEnter2, FunctionIDMapper, StackSnapshotCallback). ``args`` by the API's parameter
  names, ``out`` what the profiler gave back besides its HRESULT, ``hr`` what it returned.
* :class:`InfoCall`: the profiler called an ICorProfilerInfo method (SetEventMask, GetFunctionInfo2,
  DoStackSnapshot, ForceGC, ...): ``args``, ``out`` (the out-parameters, by name without ``p``/``pc``
  prefixes where the recorder drops them), ``hr``.
* :class:`ThreadOperation`: something a thread did that is no runtime call: the profiler created a thread,
  suspended or resumed one natively, ran managed code, took or released a lock, blocked, ...
* :class:`ObjectInspection`: the profiler used an ObjectID with an ICorProfilerInfo method
  (GetClassFromObject, GetObjectSize, ...: the API table's ``inspects`` methods, :mod:`clr_model.api`),
  ``within`` the callback it was made in.
* :class:`Mark`: an annotation that is not something the runtime or the profiler did: the scenario's own
  ground truth (marks), or a recorder's bookkeeping. No checker judges marks; they keep their place in the
  timeline so a judge can read ground truth and events from one list.

Calls and callbacks have a ``phase``: a recorder that sees both edges (a recording proxy, a fake runtime)
emits ``enter`` then ``return`` with the events in between; one that writes a single record (the probe)
emits ``whole``. A checker treats ``whole`` as ``enter`` immediately followed by ``return``.

Every event has ``seq`` (the position of its source in the recording: events made from one record share
it; the list order is the order) and ``thread`` (the OS thread it happened on). Thread identities are
plain integers: a producer that knows a thread under two names (OS id, runtime ThreadID) maps them to one
before the checkers compare them. An ICorProfilerInfo ``thread`` argument of 0 (NULL) means the calling
thread, as the API says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from clr_model import api

__all__ = [
    "EVENTS",
    "Args",
    "Event",
    "InfoCall",
    "Mark",
    "ObjectInspection",
    "Phase",
    "ProfilerCallback",
    "ThreadId",
    "ThreadOperation",
    "ThreadOperationName",
    "begins",
    "ends",
    "events_from_json",
    "events_to_json",
    "int_arg",
]

ThreadId = Annotated[int, Field(ge=0, lt=2**64)]
HResultValue = Annotated[int, Field(ge=0, lt=2**32, description="HRESULT as unsigned 32-bit")]


def _finite(values: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """JSON has no NaN or infinity: a value a recording could not carry is refused."""
    todo: list[JsonValue] = list(values.values())
    while todo:
        value = todo.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
        if isinstance(value, list):
            todo += value
        elif isinstance(value, dict):
            todo += list(value.values())
    return values


#: Arguments, out-values, ground truth: by the API's parameter names, JSON values.
Args = Annotated[dict[str, JsonValue], AfterValidator(_finite)]
#: ``enter``: the call or callback began; ``return``: it returned; ``whole``: one record for both.
Phase = Literal["enter", "return", "whole"]

ThreadOperationName = Literal[
    "ProfilerThreadCreated",  # the profiler created ``thread`` (never ran managed code so far)
    "ManagedCodeRan",  # ``thread`` ran managed code (a managed call, a return into managed code)
    "ManagedAllocation",  # ``thread`` allocated managed memory
    "SuspendThread",  # ``thread`` suspended ``target`` natively
    "ResumeThread",  # ``thread`` resumed ``target``
    "Signal",  # ``thread`` sent a signal to ``target`` (pthread_kill)
    "LockAcquire",  # ``thread`` took ``lock``
    "LockRelease",  # ``thread`` released ``lock``
    "Block",  # ``thread`` waited (on a lock, an event, I/O)
    "ReadArgumentInfo",  # ``thread`` read through a COR_PRF_FUNCTION_ARGUMENT_INFO at ``address``
]

_CFG = ConfigDict(frozen=True, extra="forbid")


class _Event(BaseModel):
    model_config = _CFG

    #: the position of the event's source in its recording (0 when the producer keeps no order of its own)
    seq: int = Field(default=0, ge=0)
    #: the OS thread the event happened on
    thread: ThreadId = 0


class _Call(_Event):
    """A call across the profiling API, either way: the method (or registered function) ``name`` with its
    arguments, what came back besides the HRESULT, and the HRESULT."""

    kind: str
    name: str = Field(min_length=1)
    phase: Phase = "whole"
    args: Args = Field(default_factory=dict)
    #: what the callee gave back besides its HRESULT (FunctionIDMapper: clientData, pbHookFunction)
    out: Args = Field(default_factory=dict)
    #: what the callee returned (None: not known, or not returned yet)
    hr: HResultValue | None = None


class ProfilerCallback(_Call):
    """The runtime called the profiler: ``name`` is the ICorProfilerCallback method or the function the
    profiler registered (FunctionEnter2, FunctionIDMapper, StackSnapshotCallback)."""

    kind: Literal["callback"] = "callback"
    #: what an independent source (the scenario) knows about this callback, e.g. FunctionEnter2's
    #: ``funcId`` (the function control really passes to) and ``token`` (its metadata token)
    truth: Args = Field(default_factory=dict)


class InfoCall(_Call):
    """The profiler called the ICorProfilerInfo method ``name`` on ``thread``."""

    kind: Literal["info_call"] = "info_call"
    #: the recorder knows this call can trigger a garbage collection (besides the methods the API table says
    #: certainly trigger one: ``triggers-gc``)
    may_trigger_gc: bool = False

    @property
    def triggers_gc(self) -> bool:
        """DSS-24/FE2-11: the call can trigger a garbage collection."""
        return self.may_trigger_gc or self.name in api.names_with(api.Fact.TRIGGERS_GC)


class ThreadOperation(_Event):
    """Something ``thread`` did that is not a runtime call (see :data:`ThreadOperationName`)."""

    kind: Literal["thread_operation"] = "thread_operation"
    op: ThreadOperationName
    #: the thread acted on (SuspendThread, ResumeThread, Signal)
    target: ThreadId | None = None
    #: the lock (LockAcquire, LockRelease, Block on a lock)
    lock: str | None = None
    #: the address read (ReadArgumentInfo)
    address: int | None = Field(default=None, ge=0, lt=2**64)
    #: what the recorder knows besides (the OS call's arguments and results)
    args: Args = Field(default_factory=dict)


class ObjectInspection(_Event):
    """The profiler used ``object_id`` with the ICorProfilerInfo method ``name``."""

    kind: Literal["object_inspection"] = "object_inspection"
    name: str = Field(min_length=1)
    object_id: int | None = Field(default=None, ge=0, lt=2**64)
    #: the object it means, when known (a tag, a handle: anything that stays the same across GCs), so
    #: MR2-17 can tell a stale ObjectID from an address another object has now
    object_key: int | None = None
    #: the callback the inspection was made in (None: outside any callback)
    within: str | None = None
    hr: HResultValue | None = None


class Mark(_Event):
    """An annotation, not an event of the process: the scenario's ground truth or a recorder's note."""

    kind: Literal["mark"] = "mark"
    name: str = Field(min_length=1)
    payload: str | None = None
    data: Args = Field(default_factory=dict)


Event = Annotated[
    ProfilerCallback | InfoCall | ThreadOperation | ObjectInspection | Mark,
    Field(discriminator="kind"),
]

#: Validates and serialises event sequences (JSON, Python dicts).
EVENTS: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def events_to_json(events: Sequence[Event]) -> str:
    """A sequence as a JSON array."""
    return EVENTS.dump_json(list(events)).decode()


def events_from_json(text: str | bytes) -> list[Event]:
    """A JSON array of events, validated (pydantic ValidationError on a bad one)."""
    return EVENTS.validate_json(text)


def begins(event: ProfilerCallback | InfoCall) -> bool:
    """The event is where its call or callback began (``enter`` or ``whole``)."""
    return event.phase != "return"


def ends(event: ProfilerCallback | InfoCall) -> bool:
    """The event is where its call or callback returned (``return`` or ``whole``)."""
    return event.phase != "enter"


def int_arg(values: Mapping[str, JsonValue], *names: str) -> int | None:
    """The first of ``names`` present in ``values`` with an integer value (bools are not integers)."""
    for name in names:
        value = values.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
