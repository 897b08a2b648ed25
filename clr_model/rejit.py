"""The ReJIT protocol as a state machine (issue 25 part 2): per (module, methodDef) and per ReJITID, what the
profiler asked for and what the runtime did, and which of the profiler's calls the documents allow where.

The protocol, from the catalog's REJIT-* clauses (clr_model/catalog/rejit*.toml):

- the profiler asks for a recompilation of (module, methodDef) pairs with an ICorProfilerInfo method of the
  table's ``rejit-request`` fact (RequestReJIT, RequestReJITWithInliners) and for a revert with one of the
  ``reverts`` fact (RequestRevert); a second request of a function already recompiled is a revert and a
  new recompilation (REJIT-07): legal, and shown as a note (:data:`AGAIN`);
- the runtime asks for the recompilation's parameters with GetReJITParameters, handing over an
  ICorProfilerFunctionControl for that (module, methodDef) (REJIT-18, REJIT-20); what the profiler sets
  through it (SetILFunctionBody, SetCodegenFlags, SetILInstrumentedCodeMap) applies to the function;
- each instantiation is compiled between ReJITCompilationStarted and ReJITCompilationFinished of one
  (FunctionID, ReJITID) (REJIT-26, REJIT-28); a request that cannot be honoured ends in ReJITError
  (REJIT-10, REJIT-29).

Where the documents restrict a call, the model says so with the sentence's clause; where a page is silent
(or ambiguous), it says that too, as a note, never a failure (:class:`ReJITVerdict`):

- ``own-thread`` methods (RequestReJIT: "the profiler should call RequestReJIT from a thread it previously
  created, and not from a CLR-created thread that is currently executing a profiler callback", REJIT-09):
  called inside a callback is a failure; the other ``rejit-request``/``reverts`` methods' pages are silent
  on threads: a note (:data:`IN_CALLBACK`);
- the function control's calls outside the GetReJITParameters that handed it over: the page does not say
  how long it is valid (REJIT-21, an ambiguity): a note;
- ICorProfilerInfo::SetILFunctionBody on a function the JIT has compiled: REJIT-01, a failure;
- a body handed over (:func:`check_handed_body`): checked with the IL checker (:mod:`clr_model.il`, IL-*
  clauses); ICorProfilerInfo::SetILFunctionBody's body must come from the module's allocator (REJIT-37);
  ICorProfilerFunctionControl::SetILFunctionBody's size must cover the whole body (REJIT-23).

The model is fed events in the order they happened (:class:`ReJITModel`); it holds no clock and no random
source. Its runtime-side expectations (a GetReJITParameters for a function nobody asked to recompile, a
Finished that names no Started) are :attr:`ReJITVerdict.runtime` verdicts: a divergence of the runtime, not a
fault of the profiler.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from clr_model import api
from clr_model.api import Fact
from clr_model.catalog.base import Document
from clr_model.errors import InvalidInput
from clr_model.il import Bytes, check_body, parse_body
from clr_model.il_metadata import MetadataResolver

__all__ = [
    "AGAIN",
    "FUNCTION_CONTROL",
    "IN_CALLBACK",
    "PARAMETERS_CALLBACK",
    "Key",
    "ReJITModel",
    "ReJITVerdict",
    "State",
    "check_handed_body",
    "function_control_methods",
    "is_function_control",
    "where_legal",
]

#: the interface GetReJITParameters hands over; recorders name its calls ``ICorProfilerFunctionControl::X``
FUNCTION_CONTROL = "ICorProfilerFunctionControl"
#: the harness's notes (clr_model/catalog/val.toml): a request again of a function already requested, and a
#: request or revert inside a callback where the method's page is silent
AGAIN = "VAL-REJIT-AGAIN"
IN_CALLBACK = "VAL-REJIT-IN-CALLBACK"
#: the callback that hands over the function control
PARAMETERS_CALLBACK = "GetReJITParameters"

#: (ModuleID, methodDef)
Key = tuple[int, int]


def function_control_methods() -> tuple[str, ...]:
    """The ICorProfilerFunctionControl methods the catalog has a document for, qualified as the recorders
    name them (``ICorProfilerFunctionControl::SetILFunctionBody``): read from the catalog's documents, one per
    method page."""
    prefix = FUNCTION_CONTROL + "::"
    return tuple(d.value for d in Document if d.value.startswith(prefix))


def is_function_control(name: str) -> bool:
    """Whether a recorded call's name is a call on the function control."""
    return name.startswith(FUNCTION_CONTROL + "::")


class State(StrEnum):
    """Where one (module, methodDef) is in the protocol."""

    #: a request returned S_OK for it; the runtime has not asked for its parameters yet
    REQUESTED = "requested"
    #: GetReJITParameters is running for it: its function control is valid (REJIT-21 says no more)
    PARAMETERS = "parameters"
    #: parameters taken; its instantiations are compiled (or will be) with them
    PREPARED = "prepared"
    #: reverted: the original version runs from the next call (REJIT-15)
    REVERTED = "reverted"
    #: the runtime reported ReJITError for it (REJIT-10)
    FAILED = "failed"


@dataclass(frozen=True)
class ReJITVerdict:
    """What the model says of one event: a clause, the message, whether it is a note (the page is silent or
    ambiguous) and whether it concerns the runtime (a divergence) rather than the profiler."""

    clause: str
    message: str
    note: bool = False
    runtime: bool = False


@dataclass
class Function:
    """One (module, methodDef)'s protocol state."""

    state: State
    #: how many requests (RequestReJIT and kin) named it
    requests: int = 0
    #: how many times the runtime asked for its parameters
    parameters: int = 0
    #: the ReJITIDs of its recompilations, in the order they started
    rejit_ids: list[int] = field(default_factory=list)
    #: the body handed over through its function control (the last one), when any
    body: bytes | None = None


def where_legal(name: str, callback: str | None) -> ReJITVerdict | None:
    """What the documents say of calling ``name`` (an ICorProfilerInfo method or a qualified function-control
    call) on a thread inside ``callback`` (None: a thread the profiler created, outside any callback):
    None when nothing is said against it."""
    if is_function_control(name):
        if callback == PARAMETERS_CALLBACK:
            return None
        where = f"inside {callback}" if callback else "outside any callback"
        return ReJITVerdict("REJIT-21", f"{name} called {where}: the function control comes from "
                       "GetReJITParameters and its page does not say whether it may be used after that "
                       "callback returns", note=True)
    try:
        method = api.method(name)
    except InvalidInput:  # not a method of the table: nothing known against it
        return None
    if callback is None or not (method.has(Fact.REJIT_REQUEST) or method.has(Fact.REVERTS)):
        return None
    if method.has(Fact.OWN_THREAD):
        return ReJITVerdict("REJIT-09", f"{name} called inside {callback}: its page says to call it from a "
                       "thread "
                       "the profiler created, not from a runtime thread executing a profiler callback")
    return ReJITVerdict(IN_CALLBACK, f"{name} called inside {callback}: its page is silent on the thread it "
                   "may "
                   "be called from (RequestReJIT's asks for a thread the profiler created)", note=True)


def check_handed_body(
    data: Bytes,
    resolver: MetadataResolver,
    *,
    method_token: int | None = None,
    declared_size: int | None = None,
    from_allocator: bool | None = None,
) -> list[ReJITVerdict]:
    """Verdicts on a body the profiler handed over: every IL-* finding of the IL checker; through the function
    control (``declared_size``: its cbNewILMethodHeader) a size shorter than the body's header, code and
    sections (REJIT-23); through ICorProfilerInfo::SetILFunctionBody (``from_allocator`` known) a buffer that
    the module's allocator did not hand out (REJIT-37)."""
    found = check_body(data, resolver, method_token, length=declared_size)
    out = [ReJITVerdict(f.rule, str(f), note=f.note) for f in found]
    if declared_size is not None:
        body, _ = parse_body(data)
        if body is not None and body.size > declared_size:
            out.append(ReJITVerdict("REJIT-23", f"cbNewILMethodHeader={declared_size} but the body's header, "
                               "code "
                               f"and sections take {body.size} bytes"))
    if from_allocator is False:
        out.append(ReJITVerdict("REJIT-37", "the body handed to ICorProfilerInfo::SetILFunctionBody was not "
                           "allocated with the module's IMethodMalloc (GetILFunctionBodyAllocator)"))
    return out


class ReJITModel:
    """The protocol's state, fed one event at a time in order. Each method returns the verdicts of that
    event (empty: nothing to say)."""

    def __init__(self) -> None:
        self.functions: dict[Key, Function] = {}
        #: (FunctionID, ReJITID) -> the key, of compilations started and not finished
        self.compiling: dict[tuple[int, int], Key | None] = {}
        #: (FunctionID, ReJITID) -> the thread its ReJITCompilationStarted came on, where the caller said
        self.compiling_on: dict[tuple[int, int], int] = {}
        #: the keys whose GetReJITParameters is running (their function control is valid)
        self.open_parameters: list[Key] = []
        #: every ReJITID seen, to hold them unique
        self.seen_ids: set[int] = set()
        #: the keys whose first JIT compilation finished (ICorProfilerInfo::SetILFunctionBody's REJIT-01)
        self.compiled: set[Key] = set()
        #: a request succeeded whose keys the caller did not know (a recording holds only the arrays'
        #: addresses): the runtime may then ask for any function's parameters
        self.unknown_requests = False

    # --- the profiler's calls ---------------------------------------------------------------------------
    def request(
        self, name: str, keys: Sequence[Key] | None, *, callback: str | None, hr: int = 0
    ) -> list[ReJITVerdict]:
        """A request (``rejit-request`` method ``name``) for ``keys`` (None: the recording does not hold
        them) on a thread inside ``callback``, answered ``hr``."""
        out = [v for v in (where_legal(name, callback),) if v is not None]
        if hr != 0:
            return out
        if keys is None:
            self.unknown_requests = True
        for key in keys or ():
            f = self.functions.get(key)
            if f is not None and f.state in (State.REQUESTED, State.PARAMETERS, State.PREPARED):
                out.append(ReJITVerdict(AGAIN, f"{name} of method 0x{key[1]:08X} of module 0x{key[0]:x}, "
                                   "already "
                                   f"requested {f.requests} time(s) and not reverted: a revert and a new "
                                   "recompilation (REJIT-07)", note=True))
            f = f or self.functions.setdefault(key, Function(State.REQUESTED))
            f.state = State.REQUESTED
            f.requests += 1
        return out

    def revert(self, name: str, keys: Sequence[Key] | None, *, callback: str | None) -> list[ReJITVerdict]:
        """A revert of ``keys``; the statuses the runtime should answer: :meth:`revert_status`."""
        out = [v for v in (where_legal(name, callback),) if v is not None]
        for key in keys or ():
            f = self.functions.get(key)
            if f is not None and f.state not in (State.REVERTED, State.FAILED):
                f.state = State.REVERTED
        return out

    def revert_status(self, key: Key) -> str:
        """What a revert of ``key`` should answer in its status slot, now (REJIT-16): S_OK for an active
        request, CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND otherwise."""
        f = self.functions.get(key)
        active = f is not None and f.state in (State.REQUESTED, State.PARAMETERS, State.PREPARED)
        return "S_OK" if active else "CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND"

    def function_control(self, name: str, *, callback: str | None, key: Key | None = None,
                         body: bytes | None = None) -> list[ReJITVerdict]:
        """A call on the function control (qualified ``name``) inside ``callback``, for the function control
        of ``key`` when known; ``body``: the IL handed to its SetILFunctionBody."""
        out = [v for v in (where_legal(name, callback),) if v is not None]
        if not out and key is not None and key not in self.open_parameters:
            out.append(ReJITVerdict("REJIT-21", f"{name} on the function control of method 0x{key[1]:08X} "
                               "after "
                               "its GetReJITParameters returned", note=True))
        if body is not None and key is not None and key in self.functions:
            self.functions[key].body = body
        return out

    def set_il_function_body(self, key: Key) -> list[ReJITVerdict]:
        """ICorProfilerInfo::SetILFunctionBody for ``key``: REJIT-01 when the JIT has compiled it."""
        if key in self.compiled:
            return [ReJITVerdict("REJIT-01", f"SetILFunctionBody for method 0x{key[1]:08X}, which the JIT "
                            "has "
                            "compiled already")]
        return []

    # --- the runtime's callbacks -------------------------------------------------------------------------
    def jit_started(self, key: Key | None) -> None:
        """A JITCompilationStarted of a function of ``key`` (its first or a recompilation)."""

    def jit_finished(self, key: Key | None, hr_status: int = 0) -> None:
        """A JITCompilationFinished: when ``hr_status`` says it succeeded, the function has been compiled from
        now on (REJIT-01; a compilation that failed, or one a class constructor halted, compiled nothing)."""
        if key is not None and hr_status & 0x80000000 == 0:
            self.compiled.add(key)

    def parameters_started(self, key: Key) -> list[ReJITVerdict]:
        """GetReJITParameters for ``key`` begins."""
        f = self.functions.get(key)
        out: list[ReJITVerdict] = []
        if not self.unknown_requests and (f is None or f.state is not State.REQUESTED):
            state = f.state.value if f is not None else "never requested"
            out.append(ReJITVerdict("REJIT-18", f"GetReJITParameters for method 0x{key[1]:08X} ({state}): no "
                                    "request waits for its parameters", runtime=True))
        f = f or self.functions.setdefault(key, Function(State.REQUESTED))
        f.state = State.PARAMETERS
        f.parameters += 1
        self.open_parameters.append(key)
        return out

    def parameters_finished(self, key: Key) -> None:
        if key in self.open_parameters:
            self.open_parameters.remove(key)
        f = self.functions.get(key)
        if f is not None and f.state is State.PARAMETERS:
            f.state = State.PREPARED

    def rejit_started(self, function: int, rejit_id: int, key: Key | None = None,
                      thread: int | None = None) -> list[ReJITVerdict]:
        """ReJITCompilationStarted of (``function``, ``rejit_id``), on ``thread`` when the caller knows it."""
        out: list[ReJITVerdict] = []
        if (function, rejit_id) in self.compiling:
            out.append(ReJITVerdict("REJIT-28", f"ReJITCompilationStarted of FunctionID 0x{function:x} "
                               "ReJITID "
                               f"{rejit_id} again before its Finished", runtime=True))
        self.compiling[(function, rejit_id)] = key
        if thread is not None:
            self.compiling_on[(function, rejit_id)] = thread
        f = self.functions.get(key) if key is not None else None
        if f is not None and rejit_id not in f.rejit_ids:
            f.rejit_ids.append(rejit_id)
        self.seen_ids.add(rejit_id)
        return out

    def rejit_finished(self, function: int, rejit_id: int, thread: int | None = None) -> list[ReJITVerdict]:
        """ReJITCompilationFinished of (``function``, ``rejit_id``): it names the recompilation whose
        Started came before it on the same thread (REJIT-28), when both threads are known."""
        started_on = self.compiling_on.pop((function, rejit_id), None)
        if self.compiling.pop((function, rejit_id), "absent") == "absent":
            return [ReJITVerdict("REJIT-28", f"ReJITCompilationFinished of FunctionID 0x{function:x} ReJITID "
                            f"{rejit_id} names no recompilation that started", runtime=True)]
        if thread is not None and started_on is not None and thread != started_on:
            return [ReJITVerdict("REJIT-28", f"ReJITCompilationFinished of FunctionID 0x{function:x} ReJITID "
                                 f"{rejit_id} on thread {thread}, its Started on thread {started_on}",
                                 runtime=True)]
        return []

    def unfinished(self) -> list[tuple[int, int]]:
        """The (FunctionID, ReJITID) pairs whose ReJITCompilationStarted no Finished has followed yet."""
        return list(self.compiling)

    def rejit_error(self, key: Key) -> None:
        f = self.functions.setdefault(key, Function(State.FAILED))
        f.state = State.FAILED

    def state(self, key: Key) -> State | None:
        f = self.functions.get(key)
        return f.state if f is not None else None

    def active(self) -> Iterable[Key]:
        """The keys with a request not reverted nor failed."""
        return (k for k, f in self.functions.items() if f.state in (State.REQUESTED, State.PARAMETERS,
                                                                     State.PREPARED))
