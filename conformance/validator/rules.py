"""The rules the validator holds a profiler to, each fed the records of one recording it reads
(:mod:`~.stream`: one pass, bounded memory).

Each rule registers with the clauses it judges (:func:`rule`, into the one registry
:mod:`conformance.core.registry`): ids of the catalog (``profharness clauses --layer validator``), the
documents' clauses or, for what they do not cover (crashes, hangs, a profiler's lifecycle), the harness's
own ``VAL-*`` rules. A finding (:class:`conformance.core.findings.Finding`) names one of its rule's clauses,
the OS thread, the callback (or hook) that was running, the seqs of the trace records that are its evidence
and the profiler's own code it came from (the call's ``caller``); a rule no document states is a note.

The hooks the profiler registered go to the hook checker (:func:`hook_abi`, the ``hook`` layer's rules,
FE2-06/08/09/10/12, see :mod:`~.hooks`), asked once per hook however many runs registered it.

Adding a rule: a :class:`~.stream.StreamRule` subclass decorated with :func:`rule` here, and its test.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from clr_model import api, rejit
from clr_model.abi import KIND_OF_REGISTRATION
from clr_model.api import Fact, HookKind
from clr_model.async_safety import Checker as AsyncChecker
from clr_model.clauses import CATALOG, Clause, Layer
from clr_model.errors import InvalidInput
from clr_model.events import InfoCall, ObjectInspection, ProfilerCallback
from clr_model.flags import (
    ALLOWABLE_AFTER_ATTACH,
    ALLOWABLE_AFTER_ATTACH_IDL_ONLY,
    HIGH_ALLOWABLE_AFTER_ATTACH,
    HIGH_MONITOR_IMMUTABLE,
    MONITOR_IMMUTABLE,
    CorPrfHighMonitor,
    CorPrfMonitor,
    flag_names,
)
from clr_model.hresults import format_hresult, hresult_failed
from clr_model.moved_refs import HANDED_OUT_PARAMETERS, check_gc_events
from conformance.core import registry
from conformance.core.findings import Finding
from conformance.core.hangs import ThreadReport
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.symbols import Symbolizer, demangle
from conformance.validator.counts import CountRun
from conformance.validator.hooks import CHECKED_KINDS, HookChecks, RegisteredHook, fault_line
from conformance.validator.recording import Recording
from conformance.validator.stream import ELT_HOOKS, Judging, Quiet, Record, StreamRule

RuleClass = type[StreamRule]


def rule(*clauses: str, what: str) -> Callable[[RuleClass], RuleClass]:
    """Register a validator rule for ``clauses`` (the one registry, :mod:`conformance.core.registry`)."""
    return registry.rule(*clauses, layer=Layer.VALIDATOR, what=what)


def _begins(r: Record) -> bool:
    """A record whose call or callback begins here: its enter, or a whole one (no phase)."""
    return r.get("phase") != "return"


def _ends(r: Record) -> bool:
    return r.get("phase") != "enter"


def _int(value: object) -> int | None:
    if value.__class__ is int:  # what orjson gives: the common case first
        return value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _arg(r: Record, key: str, name: str) -> int | None:
    values = r.get(key)
    return _int(values.get(name)) if isinstance(values, dict) else None


def _hresult(r: Record) -> int | None:
    """The record's HRESULT when it holds a 32-bit one (a call's or a callback's return)."""
    hr = _int(r.get("hr"))
    return hr if hr is not None and 0 <= hr < 1 << 32 else None


def _calls(names: frozenset[str] | set[str]) -> tuple[tuple[str, str | None], ...]:
    return tuple(("call", n) for n in sorted(names))


def _by_method(prefix: str) -> dict[str, Clause]:
    """The catalog's clauses of ``prefix`` (``"TOK-"``), each by the method whose page its document is
    (``Interface::Method``)."""
    return {c.document.split("::")[1]: c for c in CATALOG.values() if c.id.startswith(prefix)}


# --- buffers (BUF-04, BUF-08) ---------------------------------------------------------------------------

_BUFFERS = api.buffer_methods()


def _identity(r: Record, size: str, buffer: str, count: str) -> tuple[object, ...]:
    """What a retry of the same question repeats: the by-value arguments except the buffer's own."""
    args = r.get("args") or {}
    skip = {size, buffer, count}
    return tuple(sorted((k, v) for k, v in args.items()
                        if k not in skip and not k.startswith("p") and isinstance(v, int | str)))  # fmt: skip


@rule("BUF-04", "BUF-08", what="a NULL buffer goes with a size of 0; a truncated answer (*pcX > cX) is asked "
      "again with a large enough buffer")  # fmt: skip
class Buffers(StreamRule):
    """BUF-04: a NULL buffer goes with a size of 0. BUF-08: *pcX > cX means the answer was truncated:
    allocate *pcX and call again (held until a later call of the same question on the thread settles it)."""

    reads = _calls(set(_BUFFERS))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        #: (thread, method, identity) -> [(needed, record, site seq)] truncations not retried yet
        self.pending: dict[tuple[int, str, tuple[object, ...]], list[tuple[int, Record]]] = {}

    def on(self, r: Record) -> None:
        shape = _BUFFERS[r["name"]]
        self.j.exercised.update(("BUF-04", "BUF-08"))
        size, buf = _arg(r, "args", shape.size), _arg(r, "args", shape.buffer)
        if _begins(r) and buf == 0 and size:
            self.j.at("BUF-04", r, f"{r['name']} with {shape.buffer}=NULL and {shape.size}={size}")
        if not _ends(r):
            return
        key = (r["os_tid"], r["name"], _identity(r, shape.size, shape.buffer, shape.count))
        waiting = self.pending.get(key)
        if waiting:
            waiting[:] = [(needed, rec) for needed, rec in waiting if (size or 0) < needed]
        needed = _arg(r, "out", shape.count)
        if size and buf and needed is not None and needed > size:
            self.pending.setdefault(key, []).append((needed, self.j.keep(r, size=size)))

    def end(self) -> None:
        for (_, name, _), waiting in self.pending.items():
            shape = _BUFFERS[name]
            for needed, r in waiting:
                size = r["size"]
                self.j.at("BUF-08", r, f"{name} answered {shape.count}={needed} for {shape.size}={size} "
                          "(truncated) and was not called again with a large enough buffer")  # fmt: skip


# --- walks (DSS-13, DSS-19, DSS-22, DSS-23) --------------------------------------------------------------


@rule("DSS-13", "DSS-19", "DSS-22",
      what="cross-thread walks only while suspended; a seed in JIT-compiled code; SuspendRuntime not from "
      "a managed thread")  # fmt: skip
class WalksAndSuspension(StreamRule):
    reads = (("callback", "RuntimeSuspendFinished"), ("callback", "RuntimeResumeStarted"),
             ("call", "SuspendRuntime"), ("call", "ResumeRuntime"), ("call", "DoStackSnapshot"))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.suspended_by: dict[int, int] = {}  # thread -> seq of its SuspendRuntime that succeeded
        self.gc_suspended = False
        self.suspends: list[
            Record
        ] = []  # SuspendRuntime calls: a managed thread's is DSS-22 (known at the end)

    def on(self, r: Record) -> None:
        name, thread = r["name"], r["os_tid"]
        if r["kind"] == "callback":
            if _begins(r):
                self.gc_suspended = name == "RuntimeSuspendFinished"
            return
        if name == "SuspendRuntime":
            self.j.exercised.add("DSS-22")
            if _begins(r):
                self.suspends.append(self.j.keep(r))
            hr = _int(r.get("hr"))
            if _ends(r) and hr is not None and not hresult_failed(hr):
                self.suspended_by[thread] = r["seq"]
        elif name == "ResumeRuntime" and _ends(r):
            self.suspended_by.pop(thread, None)
        elif name == "DoStackSnapshot" and _begins(r):
            target_id = _arg(r, "args", "thread")
            target = self.j.os_thread(target_id) or target_id
            if target and target != thread:
                self.j.exercised.add("DSS-13")
                if not self.suspended_by and not self.gc_suspended:
                    self.j.at("DSS-13", r, f"DoStackSnapshot of thread {target} from thread {thread} while "
                              "the "
                              "target is not suspended (no SuspendRuntime in force)")  # fmt: skip
            seed = (r.get("args") or {}).get("seed")
            if isinstance(seed, dict):
                self.j.exercised.add("DSS-19")
                if not _int(seed.get("functionId")):
                    rip = _int(seed.get("rip")) or 0
                    callback = None if target else self.j.callback_of(thread)
                    synchronous = (f"; a walk of this thread inside {callback} is synchronous: pass null "
                                   "context and thread (the page: \"You just call DoStackSnapshot from "
                                   "within your ICorProfilerCallback method, passing null in the context and "
                                   "thread parameters.\")") if callback else ""  # fmt: skip
                    self.j.at("DSS-19", r, f"DoStackSnapshot seeded at {rip:#x}, outside JIT-compiled code "
                              f"(GetFunctionFromIP gives no FunctionID){synchronous}")  # fmt: skip

    def end(self) -> None:
        for r in self.suspends:
            if r["os_tid"] in self.j.managed:
                self.j.at("DSS-22", r, f"SuspendRuntime from thread {r['os_tid']}, which runs managed code")


@rule("DSS-23", "VAL-LOAD", what="ThreadDestroyed blocks until a walk of its thread ends, and no destroyed "
      "thread is walked (clr_model.async_safety)")  # fmt: skip
class ThreadLifetimeWalks(StreamRule):
    """DSS-23 by the model's :class:`clr_model.async_safety.Checker`, fed the events it reads (the thread
    lifetime callbacks and the walks), as the recording goes."""

    reads = (("callback", "ThreadCreated"), ("callback", "ThreadDestroyed"), ("call", "DoStackSnapshot"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.checker = AsyncChecker()
        self.by_index: list[Record] = []
        self.reported = 0
        self.broken: str | None = None

    def on(self, r: Record) -> None:
        if self.broken is not None:
            return
        args: dict[str, Any] = dict(r.get("args") or {})
        if r["name"] == "DoStackSnapshot":
            self.j.exercised.add("DSS-23")
            target = self.j.os_thread(args.get("thread"))
            if target is not None:
                args["thread"] = target
            ev: InfoCall | ProfilerCallback = InfoCall(
                seq=r["seq"], thread=r["os_tid"], name=r["name"], phase=r.get("phase", "whole"), args=args,
                out=r.get("out") or {}, hr=_int(r.get("hr")) if _ends(r) else None)  # fmt: skip
        else:
            subject = self.j.os_thread(args.get("threadId"))
            if subject is not None:
                args["threadId"] = subject
            ev = ProfilerCallback(seq=r["seq"], thread=r["os_tid"], name=r["name"],
                                  phase=r.get("phase", "whole"), args=args)  # fmt: skip
        self.by_index.append(self.j.keep(r))
        try:
            self.checker.feed(len(self.by_index) - 1, ev)
        except InvalidInput as err:
            self.broken = str(err)
            return
        for v in self.checker.violations[self.reported :]:
            if v.clause == "DSS-23" and v.index is not None:
                self.j.at("DSS-23", self.by_index[v.index], v.message)
        self.reported = len(self.checker.violations)
        if not self.j.stacks.get(r["os_tid"]) and r["name"] != "DoStackSnapshot":
            self.by_index[-1] = {
                "seq": r["seq"],
                "os_tid": r["os_tid"],
            }  # keep little of what is no longer read

    def end(self) -> None:
        if self.broken is not None:
            self.j.finding("VAL-LOAD", f"the recording cannot be judged for DSS-23: {self.broken}", [])


# --- objects and the GC (MR2-09, ORF-01, RRF-01, GCS-01, MR2-17, MR2-08, MR2-13) -------------------------

_INSPECTS = api.names_with(Fact.INSPECTS)
#: the ObjectID parameter of each inspecting method (the API table's first ObjectID parameter)
_OBJECT_PARAM = {n: next(p.name for p in api.method(n).params if p.type == "ObjectID") for n in _INSPECTS}
#: inspecting inside one of these callbacks breaks the clause its own page states (the catalog's ``during``)
_NO_INSPECTION_INSIDE: dict[str, str] = {
    callback: c.id
    for c in CATALOG.values()
    if c.id in ("MR2-09", "ORF-01", "RRF-01")
    for callback in c.during
}
_GC_CALLBACKS = api.names_with(Fact.GC)
#: the GC callbacks of :data:`_NO_INSPECTION_INSIDE`
_INVALID_INSIDE = frozenset(c for c in _NO_INSPECTION_INSIDE if c in _GC_CALLBACKS)


def _oid(r: Record, name: str) -> int:
    """The ObjectID an inspecting call ``name`` was given (0 when the record does not say)."""
    return _arg(r, "args", _OBJECT_PARAM[name]) or 0


_MOVES = api.names_with(Fact.MOVES)
_GC_BOUND_OR_MOVES = api.names_with(Fact.GC_BOUND) | _MOVES
#: the callbacks that hand out ObjectIDs (a parameter of type ObjectID or ObjectID*)
_HANDS_OUT_OBJECTS = frozenset(
    m.name for m in api.callbacks() if any(p.type.startswith("ObjectID") for p in m.params)
)


@rule(
    "MR2-09",
    "ORF-01",
    "RRF-01",
    "GCS-01",
    what="no object inspected while ObjectIDs are invalid: inside MovedReferences2, ObjectReferences or "
    "RootReferences2, or anywhere between GarbageCollectionStarted's return and GarbageCollectionFinished",
)
class InspectionWhileInvalid(StreamRule):
    reads = (*_calls(set(_INSPECTS)), ("callback", "GarbageCollectionStarted"),
             ("callback", "GarbageCollectionFinished"))  # fmt: skip
    #: MR2-09, ORF-01, RRF-01, GCS-01: inside a callback whose ObjectIDs are invalid, inGc, or in a GC
    quiet = Quiet(keys=frozenset({"inGc"}), frames=_INVALID_INSIDE,
                  busy=lambda rule: not rule.seen or rule.in_gc)

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.in_gc = False  # between GarbageCollectionStarted's return and GarbageCollectionFinished
        self.seen = False  # an inspection was read (the clauses are exercised)

    def on(self, r: Record) -> None:
        name = r["name"]
        if r["kind"] == "callback":
            if name == "GarbageCollectionStarted" and r.get("phase") == "return":
                self.in_gc = True
            elif name == "GarbageCollectionFinished" and _begins(r):
                self.in_gc = False
            return
        if r.get("phase") == "return":  # judged where it begins
            return
        if not self.seen:
            self.seen = True
            self.j.exercised.update(("MR2-09", "ORF-01", "RRF-01", "GCS-01"))
        stack = self.j.stacks.get(r["os_tid"])
        own = None  # the innermost callback open whose own clause forbids inspecting in it
        if stack:
            for f in stack:
                if f.name in _INVALID_INSIDE:
                    own = f.name
        if own is not None:
            self.j.at(_NO_INSPECTION_INSIDE[own], r, f"{name} inspects ObjectID {_oid(r, name):#x} inside "
                      f"{own}, whose ObjectIDs are not valid during the callback")  # fmt: skip
            return
        in_gc = r.get("inGc") is True
        if not in_gc and not self.in_gc:
            return
        inside = [f.name for f in stack if f.name in _GC_CALLBACKS] if stack else []
        if in_gc or "GarbageCollectionFinished" not in inside:
            where = f"inside {inside[-1]}" if inside else f"on thread {r['os_tid']}"
            self.j.at(
                "GCS-01",
                r,
                f"{name} inspects ObjectID {_oid(r, name):#x} {where} while a garbage collection is "
                "moving objects (after GarbageCollectionStarted returned, before GarbageCollectionFinished)",
            )


@rule(
    "MR2-17",
    "MR2-08",
    "VAL-LOAD",
    what="an inspected ObjectID is an object after the GC: never a pre-GC ID of a moved object (not "
    "remapped) nor a place inside an object (a wrong remapping): the proxy's shadow heap",
)
class RemappedIds(StreamRule):
    """The proxy's shadow heap judges each inspected ObjectID at the call (``heap`` on the call record:
    ``stale`` -> MR2-17, ``interior`` -> MR2-08, naming the object and the offset). A recording without a
    shadow heap (no ``proxy.mask`` mark with ``heap`` true at Initialize: an older proxy, a proxy that could
    not widen the event mask, the fake runtime) is judged by the model's
    :func:`clr_model.moved_refs.check_gc_events`, fed the GC callbacks and inspections it reads."""
    #: MR2-17/08 with the shadow heap: an inspection carrying its verdict (heap); without the shadow heap
    #: (before the proxy.mask mark says so) every inspection and GC callback is kept for the model
    quiet = Quiet(kinds=("call", "callback", "mark"), keys=frozenset({"heap"}),
                  names=frozenset({"proxy.mask"}), busy=lambda rule: not (rule.shadow and rule.seen))

    reads = (*_calls(set(_INSPECTS)), ("mark", "proxy.ranges"), ("mark", "proxy.mask"),
             *(("callback", n) for n in sorted(_GC_BOUND_OR_MOVES | _HANDS_OUT_OBJECTS)))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.events: list[ProfilerCallback | ObjectInspection] = []
        self.records: list[Record] = []
        self.ranges: dict[int, Record] = {}
        #: the proxy's shadow heap is on (its proxy.mask mark, written when Initialize returns)
        self.shadow = False
        self.seen = False  # an inspection was read (the clauses are exercised)

    def on(self, r: Record) -> None:
        kind = r["kind"]
        if kind == "call":
            if r.get("phase") == "return":
                return  # a two-phase inspection is judged at its enter record
            if not self.seen:
                self.seen = True
                self.j.exercised.update(("MR2-17", "MR2-08"))
            name = r["name"]
            if self.shadow:
                # during a GC the shadow heap still has the heap before it (it applies a GC when the GC
                # finishes): such an inspection is judged by MR2-09 alone, not against a stale layout
                heap = r.get("heap")
                if isinstance(heap, dict) and r.get("inGc") is not True:
                    self._judge(r, name, _oid(r, name), heap)
                return
            stack = self.j.stack(r["os_tid"])
            self._keep(r, ObjectInspection(seq=r["seq"], thread=r["os_tid"], name=name,
                                           object_id=_oid(r, name),
                                           within=stack[-1].name if stack else None))  # fmt: skip
            return
        if kind == "mark":
            if r.get("name") == "proxy.mask":
                self.shadow = r.get("heap") is True
                if self.shadow:
                    self.events.clear()
                    self.records.clear()
            elif not self.shadow:
                self.ranges[r["os_tid"]] = r
            return
        if self.shadow:
            return
        name = r["name"]
        args: dict[str, Any] = {}
        if name not in _GC_BOUND_OR_MOVES:
            given = r.get("args") or {}
            if not _begins(r) or not any(k in given for k in HANDED_OUT_PARAMETERS):
                return
            args = {k: given[k] for k in HANDED_OUT_PARAMETERS if k in given}  # the ObjectIDs it hands out
        if name in _MOVES and _begins(r):
            moved = self.ranges.pop(r["os_tid"], None) or {}
            for key in ("oldObjectIDRangeStart", "newObjectIDRangeStart", "cObjectIDRangeLength"):
                args[key] = moved.get(key)
        phase = r.get("phase", "whole")
        self._keep(
            r,
            ProfilerCallback(
                seq=r["seq"],
                thread=r["os_tid"],
                name=r["name"],
                phase=phase,
                args=args,
                hr=_int(r.get("hr")) if phase != "enter" else None,
            ),
        )

    def _keep(self, r: Record, ev: ProfilerCallback | ObjectInspection) -> None:
        self.events.append(ev)
        self.records.append(self.j.keep(r))

    def _judge(self, r: Record, name: str, oid: int, heap: dict[str, Any]) -> None:
        verdict, start, offset = heap.get("verdict"), _int(heap.get("objectStart")), _int(heap.get("offset"))
        if verdict == "stale":
            now = f"; that object moved to {start:#x}" if start else ""
            self.j.at("MR2-17", r, f"{name} uses ObjectID {oid:#x}, where an object started before a GC "
                      "moved it and none starts now: an ID not remapped (or remapped wrongly onto an address "
                      f"the GC emptied){now}")  # fmt: skip
        elif verdict == "interior":
            self.j.at("MR2-08", r, f"{name} uses ObjectID {oid:#x}, {offset or 0} bytes inside the object at "
                      f"{start or 0:#x}: not an object start (an ID remapped with a wrong formula, or one "
                      "kept from before a GC, never remapped, that another object now covers: the shadow "
                      "heap remembers where objects left only for the last 8 GCs)")  # fmt: skip

    def end(self) -> None:
        if self.shadow or not self.events:
            return
        level = self.j.callback_level
        try:
            violations = check_gc_events(self.events, implements_callback4=level >= 4 or level == 0)
        except InvalidInput as err:
            self.j.finding("VAL-LOAD", f"the recording cannot be judged for MR2-17: {err}", [])
            return
        for v in violations:
            if v.clause == "MR2-17" and v.index is not None:
                self.j.at("MR2-17", self.records[v.index], v.message)


@rule("MR2-13", what="a profiler without ICorProfilerCallback4 gets MovedReferences (32-bit lengths)")
class OnlyCallback3(StreamRule):
    """MR2-13: a profiler without ICorProfilerCallback4 gets MovedReferences, whose ULONG lengths cannot say
    how long a block of 4 GiB or more is."""

    reads = (("callback", "MovedReferences"), ("counts", None))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.done = False

    def on(self, r: Record) -> None:
        level = self.j.callback_level
        if r["kind"] == "counts":
            moved = self.j.counts.get("MovedReferences", 0) + self.j.counts.get("MovedReferences2", 0)
            if moved:
                self.j.exercised.add("MR2-13")
            return
        self.j.exercised.add("MR2-13")
        if 0 < level < 4 and not self.done and _begins(r):
            self.done = True
            self.j.at("MR2-13", r, f"the profiler implements callbacks only up to "
                      f"ICorProfilerCallback{level}: "
                      "the runtime falls back to MovedReferences with 32-bit lengths")  # fmt: skip


@rule("VAL-QI-IN-GC", what="QueryInterface on ICorProfilerInfo inside a GC callback (a note)")
class QueryInterfaceInGc(StreamRule):
    reads = (("call", "QueryInterface"),)

    def on(self, r: Record) -> None:
        self.j.exercised.add("VAL-QI-IN-GC")
        inside = [f.name for f in self.j.stack(r["os_tid"]) if f.name in _GC_CALLBACKS]
        if inside:
            self.j.at("VAL-QI-IN-GC", r, f"QueryInterface on ICorProfilerInfo inside {inside[-1]}")


# --- hooks (FE2-10, FE2-11, VAL-NULL-TAILCALL) ----------------------------------------------------------

_BLOCKS = api.names_with(Fact.BLOCKS)
_TRIGGERS_GC = api.names_with(Fact.TRIGGERS_GC)


@rule("FE2-10", "FE2-11", what="an enter/leave hook calls nothing that blocks or triggers a GC")
class CallsFromHooks(StreamRule):
    reads = (("call", None), ("counts", None))
    #: FE2-10/11: a call judged only inside an enter/leave hook
    quiet = Quiet(frames=ELT_HOOKS)

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.seen = False  # a call from an enter/leave hook was read (the clauses are exercised)

    def on(self, r: Record) -> None:
        if r["kind"] == "counts":
            if any(self.j.hook_counts.get(h) for h in ELT_HOOKS):
                self.j.exercised.update(("FE2-10", "FE2-11"))
            return
        if r.get("phase") == "return":  # judged where it begins
            return
        stack = self.j.stacks.get(r["os_tid"])
        if not stack:
            return
        hook = None  # the innermost enter/leave hook open
        for f in stack:
            if f.hook and f.name in ELT_HOOKS:
                hook = f.name
        if hook is None:
            return
        if not self.seen:
            self.seen = True
            self.j.exercised.update(("FE2-10", "FE2-11"))
        name = r["name"]
        if name in _TRIGGERS_GC:
            self.j.at("FE2-11", r, f"{hook} hook calls {name}, which triggers a garbage collection")
        elif name in _BLOCKS:
            self.j.at("FE2-10", r, f"{hook} hook calls {name}, which blocks")


#: the enter/leave/tailcall hook registrations (v2, v3, v3WithInfo) -> their three hook parameters
_HOOK_REGISTRATIONS = {
    r.method: r.parameters
    for r in api.hook_registrations(
        (HookKind.FUNCTION_ENTER2, HookKind.FUNCTION_ENTER3, HookKind.FUNCTION_ENTER3_WITH_INFO)
    )
}


@rule("VAL-NULL-TAILCALL", what="enter/leave hooks registered without a tailcall hook (a note)")
class NullTailcall(StreamRule):
    reads = _calls(set(_HOOK_REGISTRATIONS))

    def on(self, r: Record) -> None:
        if not _begins(r):
            return
        self.j.exercised.add("VAL-NULL-TAILCALL")
        args = r.get("args") or {}
        enter, leave, tail = (_int((args.get(n) or {}).get("address")) if isinstance(args.get(n), dict) else 0
                              for n in _HOOK_REGISTRATIONS[r["name"]])  # fmt: skip
        if (enter or leave) and not tail:
            self.j.at("VAL-NULL-TAILCALL", r, f"{r['name']} with a NULL tailcall hook: tail calls are not "
                      "reported, so enters and leaves do not pair up")  # fmt: skip


# --- hook registration (SEL-01) --------------------------------------------------------------------------


@rule("SEL-01", what="enter/leave/tailcall hooks are registered inside Initialize")
class HooksOutsideInitialize(StreamRule):
    """SEL-01: a SetEnterLeaveFunctionHooks2/3/3WithInfo call outside the profiler's (startup) Initialize
    that the runtime refused. A call it accepted is left alone (a thread the profiler started in Initialize
    can call in the window after Initialize's return record and before the runtime marks the profiler
    active, and its hooks do run); so is a record without an HRESULT."""

    reads = (*_calls(set(_HOOK_REGISTRATIONS)), ("callback", "Initialize"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.open = 0  # Initialize callbacks entered and not returned

    def on(self, r: Record) -> None:
        if r["kind"] == "callback":
            phase = r.get("phase")
            self.open += 1 if phase == "enter" else -1 if phase == "return" else 0
            return
        if not _begins(r):
            return
        self.j.exercised.add("SEL-01")
        hr = _hresult(r)
        if self.open <= 0 and hr is not None and hresult_failed(hr):
            where = self.j.callback_of(r["os_tid"])
            inside = f" inside {where}" if where else " outside any callback"
            self.j.at("SEL-01", r, f"{r['name']} called{inside}, not from Initialize: the runtime answered "
                      f"{format_hresult(hr)} and the hooks it registers never run")  # fmt: skip


# --- IDs not valid inside the callback that hands them out (LDS-01..04, THD-01) -----------------------------

#: each callback whose ID is not valid for an information request inside it: a "...Started" one until its
#: "...Finished" (LDS), ThreadDestroyed no longer (THD); the clause its own page states (the catalog's
#: ``during``), the ID's parameter and type (the API table's)
_LOADING: dict[str, tuple[str, api.Param]] = {
    callback: (c.id, api.method(callback).params[0])
    for c in CATALOG.values()
    if c.id.startswith(("LDS-", "THD-"))
    for callback in c.during
}
#: what an information request is: an ICorProfilerInfo method that asks (Get*, Is*, Enum*, Read*), not one
#: that changes what the runtime holds (SetILFunctionBody, ApplyMetaData)
_ASKING = ("Get", "Is", "Enum", "Read")
#: information requests their own page allows as soon as the ID exists (the API table's ``early``: "Although
#: the GetModuleInfo method may be called as soon as the module's ID exists, ..."); the ModuleLoadStarted page
#: says otherwise, the method's own, narrower page wins
_ALLOWED_EARLY = api.names_with(Fact.EARLY)
#: every information request's parameters of each ID type a "...Started" callback hands out
_ID_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {
    typ: {
        m.name: ps
        for m in api.info_methods()
        if m.name.startswith(_ASKING) and m.name not in _ALLOWED_EARLY
        and (ps := tuple(p.name for p in m.params if p.type == typ))
    }
    for typ in {param.type for _, param in _LOADING.values()}
}


@rule("LDS-01", "LDS-02", "LDS-03", "LDS-04", "THD-01",
      what="no information request is given the ID an AppDomainCreationStarted, AssemblyLoadStarted, "
      "ModuleLoadStarted, ClassLoadStarted or ThreadDestroyed callback hands out, inside it")  # fmt: skip
class LoadingIds(StreamRule):
    """LDS-01..04, THD-01: inside a "...Started" callback (nested ones too: loading a class can load
    another) or ThreadDestroyed, an information request (:data:`_ASKING`; GetModuleInfo(2) excepted,
    :data:`_ALLOWED_EARLY`) given the ID of such a callback open on the thread (by the API table's type of
    each parameter). Not judged: a request about a loading ID from another thread before its "...Finished"
    (the class callbacks are recorded only when the profiler calls the runtime inside them, so a recording
    cannot say when a class finished), nor one about a destroyed thread after ThreadDestroyed returned (its
    ThreadID may be a new thread's by then, and ThreadCreated is recorded only when the profiler calls the
    runtime inside it)."""

    reads = (*(("callback", name) for name in _LOADING), ("call", None))
    #: a call is judged only inside one of those callbacks
    quiet = Quiet(frames=frozenset(_LOADING))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        #: per thread, the "...Started" callbacks open on it: (callback, its ID, None when not recorded)
        self.open: dict[int, list[tuple[str, int | None]]] = {}

    def on(self, r: Record) -> None:
        thread = r["os_tid"]
        if r["kind"] == "callback":
            name = r["name"]
            self.j.exercised.add(_LOADING[name][0])
            phase = r.get("phase")
            opened = self.open.setdefault(thread, [])
            if phase == "enter":
                opened.append((name, _arg(r, "args", _LOADING[name][1].name)))
            elif phase == "return" and opened:
                opened.pop()
            return
        loading = self.open.get(thread)
        if not loading or not _begins(r):
            return
        for callback, value in reversed(loading):  # the innermost first
            clause, param = _LOADING[callback]
            for arg in _ID_PARAMS[param.type].get(r["name"], ()):
                if value is not None and _arg(r, "args", arg) == value:
                    self._found(r, clause, arg, value, param.type, callback)
                    return

    def _found(self, r: Record, clause: str, arg: str, value: int, kind: str, callback: str) -> None:
        if callback.endswith("Started"):
            finished = callback.replace("Started", "Finished")
            why = f"it is not valid for an information request until {finished}"
        else:
            why = "the thread is destroyed and its ID no longer valid"
        self.j.at(clause, r, f"{r['name']} is given {arg} {value:#x}, the {kind} {callback} hands out, "
                  f"inside {callback}: {why}")  # fmt: skip


# --- IL bodies (REJIT-01) --------------------------------------------------------------------------------

#: the methods answering a FunctionID's (module, methodDef) -> the name of their FunctionID (first) parameter
_FUNCTION_TOKENS = {name: api.method(name).params[0].name for name in api.names_with(Fact.FUNCTION_TOKEN)}
_JIT_STARTED = "JITCompilationStarted"
_SET_IL = "SetILFunctionBody"


def _keep_function_tokens(tokens: dict[int, tuple[int, int]], r: Record) -> None:
    """Keeps a GetFunctionInfo(2) call's answer in ``tokens``: FunctionID -> (ModuleID, methodDef); nothing
    when it failed."""
    function = _arg(r, "args", _FUNCTION_TOKENS[r["name"]])
    module, token = _arg(r, "out", "pModuleId"), _arg(r, "out", "pToken")
    if function is not None and module is not None and token is not None and _int(r.get("hr")) == 0:
        tokens[function] = (module, token)


@rule("REJIT-01", what="SetILFunctionBody only on a function the JIT has never compiled")
class ILBodyOfCompiledFunction(StreamRule):
    """REJIT-01: SetILFunctionBody, inside a JITCompilationStarted of a FunctionID the JIT has compiled
    already (the proxy's ``compiledOk``: compilations of it that finished with a success hrStatus, counted
    whether or not the profiler asked for JITCompilationFinished; a tier-up or an on-stack-replacement
    version), for that function's own (module, methodDef): the pair the profiler's own GetFunctionInfo(2)
    calls answered for the FunctionID. A call for another method, or inside the compilation of a FunctionID
    the profiler never asked about, is left alone. A compilation started again without a successful one
    before it (the JITCompilationStarted page: a class constructor halts the first compilation, and "it must
    do so for both JITCompilationStarted events"; or a first compilation that failed) is not a
    recompilation (``compiledBefore`` counts starts; a recording without ``compiledOk`` is judged by it).
    Beside that, anywhere: SetILFunctionBody for a (module, methodDef) whose IL the JIT has compiled for
    another FunctionID (the proxy's ``compiledMethod``, from its own GetFunctionInfo of every compilation):
    another instantiation of a generic method, which shares the methodDef's IL."""

    reads = (*_calls(set(_FUNCTION_TOKENS)), ("call", _SET_IL), ("callback", _JIT_STARTED))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.tokens: dict[int, tuple[int, int]] = {}  # FunctionID -> (ModuleID, methodDef)
        # OS thread -> the JITCompilationStarted callbacks open on it: (FunctionID, compilations before it,
        # whether one of them succeeded)
        self.compiling: dict[int, list[tuple[int | None, int, bool]]] = {}

    def on(self, r: Record) -> None:
        if r["kind"] == "callback":
            open_ = self.compiling.setdefault(r["os_tid"], [])
            if r.get("phase") == "return":
                if open_:
                    open_.pop()
            else:
                before = _arg(r, "args", "compiledBefore") or 0
                ok = _arg(r, "args", "compiledOk")  # a recording before it: every start counts
                open_.append((_arg(r, "args", "functionId"), before, bool(before if ok is None else ok)))
            return
        if r["name"] != _SET_IL:
            _keep_function_tokens(self.tokens, r)
            return
        if not _begins(r):
            return
        self.j.exercised.add("REJIT-01")
        asked = (_arg(r, "args", "moduleId"), _arg(r, "args", "methodid"))
        compiling = self.compiling.get(r["os_tid"])
        if compiling:
            function, before, compiled = compiling[-1]
            mine = self.tokens.get(function) if function is not None else None
            if compiled and mine is not None and asked == mine:
                self.j.at("REJIT-01", r, f"SetILFunctionBody for method 0x{mine[1]:08X} inside the "
                          f"JITCompilationStarted of a recompilation of FunctionID 0x{function:x} "
                          f"(compilation {before + 1}: a tier-up or on-stack-replacement version): the JIT "
                          "has compiled this function already")  # fmt: skip
                return
        other = r.get("compiledMethod")
        compiled_as = _arg(r, "compiledMethod", "functionId") if isinstance(other, dict) else None
        if compiled_as is not None and asked[1] is not None:
            self.j.at("REJIT-01", r, f"SetILFunctionBody for method 0x{asked[1]:08X}, whose IL the JIT has "
                      f"compiled already for FunctionID 0x{compiled_as:x} (every instantiation of a generic "
                      "method shares its methodDef's IL): the method has been compiled")  # fmt: skip


# --- the ReJIT protocol (REJIT-09, REJIT-21, VAL-REJIT-IN-CALLBACK, VAL-REJIT-AGAIN) ---------------------

#: RequestReJIT and its kin, RequestRevert (the table's rejit-request and reverts facts)
_REJIT_REQUESTS = api.names_with(Fact.REJIT_REQUEST)
_REJIT_REVERTS = api.names_with(Fact.REVERTS)
_PARAMETERS = rejit.PARAMETERS_CALLBACK
_REJIT_STARTED = "ReJITCompilationStarted"


@rule("REJIT-09", "REJIT-21", rejit.IN_CALLBACK, rejit.AGAIN,
      what="RequestReJIT from a thread the profiler created; the function control inside GetReJITParameters; "
      "requests again of functions already recompiled (notes)")  # fmt: skip
class ReJITProtocol(StreamRule):
    """The ReJIT calls judged with the model (:mod:`clr_model.rejit`): each request or revert against the
    callback open on its thread (REJIT-09 for RequestReJIT, a note where the method's page is silent), each
    function-control call against the GetReJITParameters open on its thread (REJIT-21, a note: the page does
    not say how long the control is valid), and each GetReJITParameters of a (module, methodDef) asked
    before: the profiler requested it again (a note at the last request before it, naming the function's
    JIT compilations since its previous parameters: first compilations, tier-ups and on-stack replacement of
    the original (JITCompilationStarted) or of a recompiled version (ReJITCompilationStarted), which a
    rewriter reacting to every JIT event requests again)."""

    reads = (*_calls(_REJIT_REQUESTS | _REJIT_REVERTS), *_calls(set(rejit.function_control_methods())),
             *_calls(set(_FUNCTION_TOKENS)), ("callback", _PARAMETERS), ("callback", _JIT_STARTED),
             ("callback", _REJIT_STARTED))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.model = rejit.ReJITModel()
        self.tokens: dict[int, tuple[int, int]] = {}  # FunctionID -> (ModuleID, methodDef)
        #: the last request the profiler made (kept)
        self.last_request: Record | None = None
        #: FunctionID -> its latest JIT events (seq, a recompilation: tier-up, OSR or a ReJIT version)
        self.events: dict[int, list[tuple[int, bool]]] = {}
        #: (module, methodDef) -> (times asked, seq of the last GetReJITParameters)
        self.asked: dict[tuple[int, int], tuple[int, int]] = {}
        self.open: dict[int, list[tuple[int, int]]] = {}  # OS thread -> the GetReJITParameters open on it
        #: (module, methodDef) -> the first re-ask: (request kept, times asked, JIT events, recompilations)
        self.again: dict[tuple[int, int], tuple[Record, int, int, int]] = {}

    def on(self, r: Record) -> None:
        name = r["name"]
        if r["kind"] == "callback":
            self._callback(r, name)
            return
        if name in _FUNCTION_TOKENS:
            _keep_function_tokens(self.tokens, r)
            return
        if not _begins(r):
            return
        callback = self.j.callback_of(r["os_tid"])
        if rejit.is_function_control(name):
            self.j.exercised.add("REJIT-21")
            verdicts = self.model.function_control(name, callback=callback)
        elif name in _REJIT_REVERTS:
            verdicts = self.model.revert(name, None, callback=callback)
        else:
            self.j.exercised.update(("REJIT-09", rejit.AGAIN))
            verdicts = self.model.request(name, None, callback=callback)
            self.last_request = self.j.keep(r, name=name)
        for v in verdicts:
            self.j.at(v.clause, r, v.message, note=v.note)

    def _callback(self, r: Record, name: str) -> None:
        thread = r["os_tid"]
        if name != _PARAMETERS:  # a JIT compilation of the original or of a recompiled version
            function = _arg(r, "args", "functionId")
            if r.get("phase") != "return" and function is not None:
                again = name == _REJIT_STARTED or bool(_arg(r, "args", "compiledBefore"))
                kept = self.events.setdefault(function, [])
                kept.append((r["seq"], again))
                del kept[:-64]
            return
        open_ = self.open.setdefault(thread, [])
        if r.get("phase") == "return":
            if open_:
                self.model.parameters_finished(open_.pop())
            return
        module, token = _arg(r, "args", "moduleId"), _arg(r, "args", "methodId")
        if module is None or token is None:
            return
        key = (module, token)
        self.model.parameters_started(key)
        if r.get("phase") == "enter":
            open_.append(key)
        else:
            self.model.parameters_finished(key)
        times, since = self.asked.get(key, (0, -1))
        self.asked[key] = (times + 1, r["seq"])
        if times and self.last_request is not None and key not in self.again:
            events = [e for f, kept in self.events.items() if self.tokens.get(f) == key for e in kept
                      if e[0] > since]  # fmt: skip
            self.again[key] = (self.last_request, times + 1, len(events), sum(1 for _, a in events if a))

    def end(self) -> None:
        for (module, token), (req, asked, jitted, recompiled) in self.again.items():
            self.j.at(rejit.AGAIN, req, f"GetReJITParameters asked for method 0x{token:08X} of module "
                      f"0x{module:x} a {_ordinal(asked)} time: {req['name']} requested it again (over an "
                      f"active request, or after a revert: the two are not told apart) ({jitted} JIT "
                      f"compilation(s) of it since its previous "
                      f"parameters, {recompiled} of them recompilations: tier-up, on-stack replacement or a "
                      "recompiled version's); allowed (REJIT-07: a revert and a new recompilation), but a "
                      "rewrite stacked on every JIT event is what crashed a public IL-rewriting sample on "
                      ".NET 8 with on-stack replacement on", note=True)  # fmt: skip


#: ICorProfilerInfo methods taking a FunctionID by value, and its parameter's name (REJIT-29)
_FUNCTION_ARGS = {m.name: p.name for m in api.info_methods() for p in m.params[:1] if p.type == "FunctionID"}
_REJIT_ERROR = "ReJITError"


@rule("REJIT-17", "REJIT-29", what="RequestRevert given a status array; ReJITError's NULL functionId never "
      "passed on as a FunctionID")  # fmt: skip
class ReJITFailures(StreamRule):
    """How a profiler takes the failures the ReJIT pages report: RequestRevert's S_OK says only that every
    revert was tried, each function's own result is in the status array (REJIT-17: a NULL array leaves the
    profiler blind), and ReJITError's functionId is NULL for a per-method failure such as an invalid token
    (REJIT-29: a FunctionID call on it inside the callback names no function)."""

    reads = (*_calls(_REJIT_REVERTS), *_calls(set(_FUNCTION_ARGS)), ("callback", _REJIT_ERROR))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.errors: dict[int, list[int | None]] = {}  # OS thread -> functionId of each ReJITError open on it

    def on(self, r: Record) -> None:
        thread, name = r["os_tid"], r["name"]
        if r["kind"] == "callback":
            stack = self.errors.setdefault(thread, [])
            if _begins(r):
                stack.append(_arg(r, "args", "functionId"))
                self.j.exercised.add("REJIT-29")
            elif stack:
                stack.pop()
            return
        if not _begins(r):
            return
        if name in _REJIT_REVERTS:
            self.j.exercised.add("REJIT-17")
            if _arg(r, "args", "cFunctions") and _arg(r, "args", "status") == 0:
                self.j.at("REJIT-17", r, f"{name} with a NULL status array: its S_OK says only that every "
                          "revert was tried, and which functions were reverted is in that array")
            return
        open_errors = self.errors.get(thread)
        if (open_errors and open_errors[-1] == 0 and self.j.callback_of(thread) == _REJIT_ERROR
                and _arg(r, "args", _FUNCTION_ARGS[name]) == 0):  # fmt: skip
            self.j.at("REJIT-29", r, f"{name} called with ReJITError's functionId, which is NULL: a "
                      "per-method failure (an invalid methodDef token) names no function, only "
                      f"(moduleId, methodId)")


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third"}.get(n, f"{n}th")


# --- attach and detach (ATT-01, DET-01, DET-02, DET-03, VAL-ATTACH-ONLY) ---------------------------------

_MASK_SETTERS = api.names_with(Fact.SETS_EVENT_MASK)


def _mask_of(r: Record) -> tuple[int, int]:
    """(low, high) a SetEventMask(2) record asked for."""
    low = _arg(r, "args", "dwEventsLow")
    if low is None:
        low = _arg(r, "args", "dwEvents")
    return (low or 0) & 0xFFFFFFFF, (_arg(r, "args", "dwEventsHigh") or 0) & 0xFFFFFFFF


@rule("ATT-01", what="a profiler loaded by attach asks only for the events COR_PRF_ALLOWABLE_AFTER_ATTACH "
      "allows")  # fmt: skip
class AttachMask(StreamRule):
    """ATT-01: a SetEventMask(2) call of a profiler loaded by attach (InitializeForAttach was delivered) with
    low bits outside the page's COR_PRF_ALLOWABLE_AFTER_ATTACH or high bits outside
    COR_PRF_HIGH_ALLOWABLE_AFTER_ATTACH. A finding when the runtime refused the mask (nothing of it is set);
    a note when it accepted bits only corprof.idl's value of the bitmask holds (COR_PRF_MONITOR_EXCEPTIONS,
    COR_PRF_ENABLE_REJIT: the page and the runtime differ)."""

    reads = _calls(set(_MASK_SETTERS))

    def on(self, r: Record) -> None:
        if not self.j.attached or not _ends(r):
            return
        self.j.exercised.add("ATT-01")
        low, high = _mask_of(r)
        bad_low, bad_high = low & ~ALLOWABLE_AFTER_ATTACH, high & ~HIGH_ALLOWABLE_AFTER_ATTACH
        if not bad_low and not bad_high:
            return
        names = flag_names(bad_low, CorPrfMonitor) + flag_names(bad_high, CorPrfHighMonitor)
        immutable = flag_names(low & MONITOR_IMMUTABLE, CorPrfMonitor) + flag_names(
            high & HIGH_MONITOR_IMMUTABLE, CorPrfHighMonitor
        )
        hr = _hresult(r)
        refused = hr is not None and hresult_failed(hr)
        what = (f"{r['name']} from a profiler loaded by attach asks for {' | '.join(names)}, not allowed "
                "after attach")  # fmt: skip
        if immutable:
            what += f" ({' | '.join(immutable)}: immutable, settable only while a startup profiler " \
                "initializes)"
        if refused and hr is not None:
            self.j.at("ATT-01", r, f"{what}: the runtime answered {format_hresult(hr)} and set none of the "
                      "mask")  # fmt: skip
        elif not bad_high and not bad_low & ~ALLOWABLE_AFTER_ATTACH_IDL_ONLY:
            self.j.at("ATT-01", r, f"{what} on the COR_PRF_MONITOR page; the runtime accepted it "
                      "(corprof.idl's COR_PRF_ALLOWABLE_AFTER_ATTACH holds it)", note=True)  # fmt: skip
        else:
            self.j.at("ATT-01", r, f"{what}; the runtime accepted the call")


# --- event masks and collections asked for out of place (INI-01, FGC-01) ------------------------------------


@rule("INI-01", what="the immutable event flags are set or cleared only inside Initialize")
class ImmutableFlags(StreamRule):
    """INI-01: a SetEventMask(2) call made outside Initialize (and outside InitializeForAttach, which ATT-01
    judges) that asks for other COR_PRF_MONITOR_IMMUTABLE or COR_PRF_HIGH_MONITOR_IMMUTABLE bits than the
    profiler's last accepted mask: what the profiler asked for, whatever the proxy added to it."""

    reads = _calls(set(_MASK_SETTERS))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.immutable = (0, 0)  # the immutable bits of the last mask the runtime accepted

    def on(self, r: Record) -> None:
        if self.j.attached or not _ends(r):
            return
        self.j.exercised.add("INI-01")
        low, high = _mask_of(r)
        asked = (low & MONITOR_IMMUTABLE, high & HIGH_MONITOR_IMMUTABLE)
        hr = _hresult(r)
        accepted = hr is not None and not hresult_failed(hr)
        changed = (asked[0] ^ self.immutable[0], asked[1] ^ self.immutable[1])
        if self.j.callback_of(r["os_tid"]) != "Initialize" and (changed[0] or changed[1]):
            on = flag_names(changed[0] & asked[0], CorPrfMonitor) + flag_names(changed[1] & asked[1],
                                                                                 CorPrfHighMonitor)
            off = flag_names(changed[0] & ~asked[0], CorPrfMonitor) + flag_names(changed[1] & ~asked[1],
                                                                                   CorPrfHighMonitor)
            what = "; ".join(part for part in (f"sets {' | '.join(on)}" if on else "",
                                               f"clears {' | '.join(off)}" if off else "") if part)
            answer = f"the runtime answered {format_hresult(hr)}" if hr is not None else "no answer recorded"
            self.j.at("INI-01", r, f"{r['name']} after Initialize {what}, flags that can change only while "
                      f"Initialize runs: {answer}")  # fmt: skip
        if accepted:
            self.immutable = asked


#: the ICorProfilerInfo methods given a COR_PRF_FRAME_INFO (GetFunctionInfo2) and that parameter's name, from
#: their signatures
_FRAME_INFO_PARAM = {
    m.name: p.name for m in api.info_methods() for p in m.params if p.type == "COR_PRF_FRAME_INFO"
}


#: the clause a stale frame info breaks, by the holder the proxy's ``staleFrameInfo`` names
_STALE_FRAME_INFO = {
    "FunctionEnter2": "FE2-05", "StackSnapshotCallback": "SSC-01", "FunctionEnter3WithInfo": "FE3-01",
    "FunctionLeave3WithInfo": "FE3-02", "FunctionTailcall3WithInfo": "FE3-03",
}  # fmt: skip


@rule(*_STALE_FRAME_INFO.values(), what="a frame info passed back only while the hook or walk callback "
      "that got it runs: never a returned FunctionEnter2's, StackSnapshotCallback's or WithInfo "
      "hook's")  # fmt: skip
class StaleFrameInfo(StreamRule):
    """FE2-05, SSC-01, FE3-01..03: the proxy keeps, per thread, the frame infos of the hooks and stack-walk
    callbacks open on it, those GetFunction*3Info handed out inside the WithInfo hooks open on it, and the
    last 32 that went out of use: a FunctionEnter2 hook's when it returned, a StackSnapshotCallback's when
    that callback returned, a GetFunction*3Info answer when its WithInfo hook returned. A call given a frame
    info that is none of the first but one of the last carries ``staleFrameInfo`` (its holder, the FunctionID
    it came with, how many of that holder's went out of use since). A value that matches an open one (the
    same stack slot again) is not judged, nor one the runtime handed out again (a later GetFunction*3Info's
    out-value), nor one used on another thread than the one it was given on."""

    reads = _calls(set(_FRAME_INFO_PARAM))
    quiet = Quiet(keys=frozenset({"staleFrameInfo"}), busy=lambda rule: not rule.seen)

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.seen = False  # a frame info was passed back (the clauses are exercised)

    def on(self, r: Record) -> None:
        frame_info = _arg(r, "args", _FRAME_INFO_PARAM[r["name"]])
        if not _begins(r) or not frame_info:
            return
        if not self.seen:
            self.seen = True
            self.j.exercised.update(_STALE_FRAME_INFO.values())
        stale = r.get("staleFrameInfo")
        if not isinstance(stale, dict) or stale.get("hook") not in _STALE_FRAME_INFO:
            return
        holder = str(stale["hook"])
        ago = _int(stale.get("returnedAgo"))
        function = _int(stale.get("funcId")) or 0
        if holder == "FunctionEnter2":
            when = "the last FunctionEnter2 to return" if ago == 1 else f"{ago} FunctionEnter2 hooks ago"
            self.j.at("FE2-05", r, f"{r['name']} given frame info {frame_info:#x}, the func of the "
                      f"FunctionEnter2 hook of FunctionID {function:#x}, which had returned ({when} on this "
                      "thread)")  # fmt: skip
            return
        if holder != "StackSnapshotCallback":
            kind = holder.removesuffix("3WithInfo").removeprefix("Function")
            when = f"the last {holder} to return" if ago == 1 else f"{ago} {holder} hooks ago"
            self.j.at(_STALE_FRAME_INFO[holder], r, f"{r['name']} given frame info {frame_info:#x}, which "
                      f"GetFunction{kind}3Info handed out for FunctionID {function:#x} inside a {holder} "
                      f"hook that had returned ({when} on this thread): the handle is valid only during "
                      "that hook")  # fmt: skip
            return
        when = "the last walk callback to return" if ago == 1 else f"{ago} walk callbacks ago"
        self.j.at("SSC-01", r, f"{r['name']} given frame info {frame_info:#x}, the frameInfo a "
                  f"StackSnapshotCallback of a DoStackSnapshot walk on this thread was given, after that "
                  f"callback had returned ({when}): a walk's frame info is valid only inside the callback "
                  "it is given to")  # fmt: skip


#: each GetFunction*3Info method -> the WithInfo hook it may be called in and its clause (FE3-04..06)
_ELT3_INFO = {
    f"GetFunction{kind}3Info": (f"Function{kind}3WithInfo", clause)
    for kind, clause in (("Enter", "FE3-04"), ("Leave", "FE3-05"), ("Tailcall", "FE3-06"))
}


@rule(*(clause for _, clause in _ELT3_INFO.values()), what="GetFunction*3Info only inside its WithInfo hook, "
      "given the eltInfo that hook was given")  # fmt: skip
class Elt3InfoInItsHook(StreamRule):
    """FE3-04..06: a GetFunctionEnter3Info (Leave, Tailcall) call is judged against the WithInfo hook open
    innermost on its thread (the hook records carry their eltInfo): none open, another kind of hook, or an
    eltInfo other than that hook's is a finding. A hook's record is written when the profiler calls the
    runtime inside it, so the call itself brings its hook's."""

    reads = (*(("callback", hook) for hook, _ in _ELT3_INFO.values()), *_calls(set(_ELT3_INFO)))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        #: per thread, the WithInfo hooks open on it: (hook, its eltInfo, None when not recorded)
        self.open: dict[int, list[tuple[str, int | None]]] = {}

    def on(self, r: Record) -> None:
        opened = self.open.setdefault(r["os_tid"], [])
        if r["kind"] == "callback":
            if r.get("phase") == "enter":
                opened.append((r["name"], _arg(r, "args", "eltInfo")))
            elif r.get("phase") == "return" and opened:
                opened.pop()
            return
        if not _begins(r):
            return
        hook, clause = _ELT3_INFO[r["name"]]
        self.j.exercised.add(clause)
        given = _arg(r, "args", "eltInfo")
        if not opened:
            self.j.at(clause, r, f"{r['name']} called outside any {hook} hook: it may be called only "
                      "during that hook")  # fmt: skip
        elif opened[-1][0] != hook:
            self.j.at(clause, r, f"{r['name']} called inside a {opened[-1][0]} hook: it may be called only "
                      f"during {hook}")  # fmt: skip
        elif given is not None and opened[-1][1] is not None and given != opened[-1][1]:
            self.j.at(clause, r, f"{r['name']} given eltInfo {given:#x}, not the {opened[-1][1]:#x} its "
                      f"{hook} hook was given: it must be that hook's own")  # fmt: skip


#: the exception clauses' notifications GetNotifiedExceptionClauseInfo answers about (EXC-01): the ...Enter
#: callbacks open one, the ...Leave callbacks close it (the API table's clause-notice)
_CLAUSE_CALLBACKS = api.names_with(Fact.CLAUSE_NOTICE)
_CLAUSE_ENTERS = frozenset(name for name in _CLAUSE_CALLBACKS if name.endswith("Enter"))
_CLAUSE_INFO = "GetNotifiedExceptionClauseInfo"


@rule("EXC-01", what="GetNotifiedExceptionClauseInfo only from a clause's Enter callback until its Leave")
class ExceptionClauseWindow(StreamRule):
    """EXC-01: per thread, an exception clause's window opens at its Enter callback (ExceptionCatcherEnter,
    ExceptionUnwindFinallyEnter, ExceptionSearchFilterEnter) and closes when its Leave callback returns or
    at an ExceptionThrown (a nested exception thrown in the clause). A GetNotifiedExceptionClauseInfo call
    outside every window and outside those callbacks themselves is a finding. A thread on which no
    ExceptionThrown was recorded is not judged (the recording does not show its exceptions: the profiler did
    not ask for them). The clause callbacks are recorded whether or not the profiler calls the runtime in
    them (not lazy), so a window is never missed."""

    reads = (("callback", "ExceptionThrown"), *(("callback", name) for name in sorted(_CLAUSE_CALLBACKS)),
             ("call", _CLAUSE_INFO))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        #: per thread: whether a clause's window is open (its Enter returned, no Leave or exception since),
        #: and the threads an exception was seen on
        self.open: dict[int, bool] = {}
        self.thrown: set[int] = set()

    def on(self, r: Record) -> None:
        thread = r["os_tid"]
        if r["kind"] == "callback":
            name, phase = r["name"], r.get("phase")
            if name == "ExceptionThrown":
                if phase != "return":
                    self.thrown.add(thread)
                    self.open[thread] = False  # a nested exception ends the current clause's window
            elif phase == "return":
                self.open[thread] = name in _CLAUSE_ENTERS
            return
        if not _begins(r) or thread not in self.thrown:
            return
        self.j.exercised.add("EXC-01")
        stack = self.j.stack(thread)
        if self.open.get(thread, False) or any(f.name in _CLAUSE_CALLBACKS for f in stack):
            return
        where = f"inside {stack[-1].name}" if stack else "outside any callback"
        self.j.at("EXC-01", r, f"{_CLAUSE_INFO} called {where}, with no exception clause's Enter "
                  "callback (ExceptionCatcherEnter, ExceptionUnwindFinallyEnter, ExceptionSearchFilterEnter) "
                  "outstanding on this thread: there is no clause to describe")  # fmt: skip


#: the lookups by token that load what they name -> their clause (TOK-01, TOK-02: the catalog documents
#: name the method) and the load callbacks their pages speak of
_LOADS_BY_TOKEN = _by_method("TOK-")
_LOAD_CALLBACKS = frozenset(name for c in _LOADS_BY_TOKEN.values() for name in c.during)


@rule(*(c.id for c in _LOADS_BY_TOKEN.values()), what="GetFunctionFromTokenAndTypeArgs and "
      "GetClassFromTokenAndTypeArgs not inside a module or class load callback (a note)")  # fmt: skip
class LoadByTokenWhileLoading(StreamRule):
    """TOK-01, TOK-02: a GetFunctionFromTokenAndTypeArgs or GetClassFromTokenAndTypeArgs call while a module
    or class load callback is open on its thread. A note, never a failure: the pages call it dangerous when
    the function or type is not loaded yet, which a recording cannot tell."""

    reads = _calls(set(_LOADS_BY_TOKEN))

    def on(self, r: Record) -> None:
        if not _begins(r):
            return
        clause = _LOADS_BY_TOKEN[r["name"]]
        self.j.exercised.add(clause.id)
        loading = [f.name for f in self.j.stack(r["os_tid"]) if f.name in _LOAD_CALLBACKS]
        if loading:
            self.j.at(clause.id, r, f"{r['name']} called inside {loading[-1]}, while the runtime loads a "
                      "module or a type: its page calls loading by token dangerous there (an infinite loop "
                      "of circular loads) and discourages the method", note=True)  # fmt: skip


#: the mapper setters, each "set only once" (MAP-01, MAP-02): method name -> its clause
_SET_ONCE = _by_method("MAP-")


@rule(*(c.id for c in _SET_ONCE.values()), what="SetFunctionIDMapper and SetFunctionIDMapper2 set only once")
class MapperSetOnce(StreamRule):
    """MAP-01, MAP-02: a mapper setter called again after a call of it that succeeded (the runtimes answer the
    second S_OK and switch mappers for what they compile next)."""

    reads = _calls(set(_SET_ONCE))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.first: dict[str, int] = {}  # method -> seq of its first call that succeeded

    def on(self, r: Record) -> None:
        if not _ends(r):
            return
        name = r["name"]
        clause = _SET_ONCE[name]
        self.j.exercised.add(clause.id)
        first = self.first.get(name)
        if first is not None:
            self.j.at(clause.id, r, f"{name} called again (its first call, record {first}, succeeded): the "
                      "mapper can be set only once", more=[first])  # fmt: skip
        elif r.get("hr") == 0:
            self.first[name] = r["seq"]


@rule("ICT-01", what="InitializeCurrentThread only when no thread is suspended (no SuspendRuntime in force)")
class InitializeCurrentThreadWhileSuspended(StreamRule):
    """ICT-01: InitializeCurrentThread while a SuspendRuntime that succeeded (any thread's) is not yet
    followed by a ResumeRuntime: every managed thread is suspended then."""

    reads = (("call", "SuspendRuntime"), ("call", "ResumeRuntime"), ("call", "InitializeCurrentThread"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.suspended: int | None = None  # seq of the SuspendRuntime in force

    def on(self, r: Record) -> None:
        name = r["name"]
        if name == "SuspendRuntime":
            if _ends(r) and r.get("hr") == 0:
                self.suspended = r["seq"]
            return
        if name == "ResumeRuntime":
            if _ends(r):
                self.suspended = None
            return
        if not _begins(r):
            return
        self.j.exercised.add("ICT-01")
        if self.suspended is not None:
            self.j.at("ICT-01", r, f"InitializeCurrentThread while the runtime is suspended (SuspendRuntime, "
                      f"record {self.suspended}, not yet resumed)", more=[self.suspended])  # fmt: skip


@rule("DYN-01", what="a dynamic method's FunctionID never given to GetTokenAndMetaDataFromFunction")
class DynamicMethodToken(StreamRule):
    """DYN-01: GetTokenAndMetaDataFromFunction given a FunctionID that DynamicMethodJITCompilationStarted or
    ...Finished handed out (an IL stub or an LCG method: no metadata). Both runtimes answer S_OK with the
    methodDef row 0 (0x06000000): the profiler learns nothing and is not told."""

    reads = (("callback", "DynamicMethodJITCompilationStarted"),
             ("callback", "DynamicMethodJITCompilationFinished"),
             ("call", "GetTokenAndMetaDataFromFunction"))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.dynamic: dict[int, int] = {}  # FunctionID -> seq of the callback that handed it out

    def on(self, r: Record) -> None:
        function = _arg(r, "args", "functionId")
        if function is None or not _begins(r):
            return
        if r["kind"] == "callback":
            self.dynamic.setdefault(function, r["seq"])
            return
        self.j.exercised.add("DYN-01")
        announced = self.dynamic.get(function)
        if announced is not None:
            message = (f"GetTokenAndMetaDataFromFunction given {function:#x}, a dynamic method's FunctionID "
                       f"(record {announced}): dynamic methods have no metadata")
            self.j.at("DYN-01", r, message, more=[announced])


#: the methods a page says to call from a thread of the profiler's own with no callback on its stack, other
#: than the ReJIT requests (REJIT-09, judged with the ReJIT model): ForceGC
_OWN_THREAD = api.names_with(Fact.OWN_THREAD) - _REJIT_REQUESTS


@rule("FGC-01", what="ForceGC from a thread with no profiler callback on its stack")
class ForceGcThread(StreamRule):
    """FGC-01: a ForceGC call while a callback the runtime made is open on its thread (inside an enter/leave
    hook FE2-11 says it: a hook must not trigger a collection at all). Whether the thread has run managed
    code is not judged: the runtime sets up a thread that calls ForceGC for the collection, so a profiler
    thread's second call comes from a thread the runtime knows."""

    reads = _calls(set(_OWN_THREAD))

    def on(self, r: Record) -> None:
        if not _begins(r):
            return
        self.j.exercised.add("FGC-01")
        stack = self.j.stacks.get(r["os_tid"])
        if stack and not stack[-1].hook:
            callback = stack[-1].name
            self.j.at("FGC-01", r, f"{r['name']} called inside {callback}, a profiler callback on its "
                      "thread's stack")  # fmt: skip


def _thread_routine(j: Judging, stack: object) -> Any:
    """The profiler's outermost frame on a thread's stack (its start routine), as a site."""
    target = Path(j.target).name
    frames = [f for f in stack if isinstance(f, dict) and f.get("module") == target] if isinstance(
        stack, list
    ) else []
    if not frames:
        return None
    offset = _int(frames[-1].get("offset"))
    top = isinstance(stack, list) and bool(stack) and stack[0] is frames[-1]
    return j.site_in_target(offset, return_address=not top) if offset is not None else None


@rule("DET-01", "DET-02", "DET-03",
      what="after RequestProfilerDetach: no ICorProfilerInfo call inside or after ProfilerDetachSucceeded, "
      "no profiler thread left running")  # fmt: skip
class Detach(StreamRule):
    """DET-01: a call through the wrapper after ProfilerDetachSucceeded returned (the proxy marks it
    ``afterDetach`` and answers it itself), from any thread. DET-02: a profiler thread alive when it returned
    (the proxy.detached mark). DET-03: a call made inside ProfilerDetachSucceeded."""
    #: DET-01/03: afterDetach, or a call inside ProfilerDetachSucceeded
    quiet = Quiet(keys=frozenset({"afterDetach"}), frames=frozenset({"ProfilerDetachSucceeded"}))

    reads = (("call", None), ("callback", "ProfilerDetachSucceeded"), ("mark", "proxy.detached"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.after: dict[int, int] = {}  # OS thread -> calls after the detach

    def on(self, r: Record) -> None:
        kind = r["kind"]
        if kind == "callback":
            if _ends(r):
                self.j.exercised.update(("DET-01", "DET-02", "DET-03"))
            return
        if kind == "mark":
            self._threads(r)
            return
        if not _begins(r):
            return
        thread = r["os_tid"]
        if r.get("afterDetach") is True:
            self.after[thread] = self.after.get(thread, 0) + 1
            self.j.at("DET-01", r, f"{r['name']} called after ProfilerDetachSucceeded returned, on thread "
                      f"{thread}: the runtime has released the profiler and unloads its library")  # fmt: skip
        elif self.j.callback_of(thread) == "ProfilerDetachSucceeded":
            self.j.at("DET-03", r, f"{r['name']} called inside ProfilerDetachSucceeded")

    def _threads(self, mark: Record) -> None:
        details = {d.get("osTid"): d for d in mark.get("threads") or [] if isinstance(d, dict)}
        for thread in [t for t in mark.get("profilerThreadsAlive") or [] if isinstance(t, int)]:
            site = _thread_routine(self.j, details.get(thread, {}).get("stack"))
            started = f" (started at {site.text()})" if site is not None else ""
            self.j.finding("DET-02", f"profiler thread {thread}{started} still runs after "
                           "ProfilerDetachSucceeded returned, in a library the runtime unloads",
                           [mark["seq"]], thread=thread, site=site)  # fmt: skip


@rule("VAL-ATTACH-ONLY", what="a startup load that declines may be an attach-only profiler: validate it "
      "with --attach")  # fmt: skip
class AttachOnlyAtStartup(StreamRule):
    """VAL-ATTACH-ONLY (a note): loaded at startup, the profiler's Initialize failed and it implements
    ICorProfilerCallback3 (its InitializeForAttach may be its real path). An Initialize that succeeds without
    setting a mask is left alone: the profiler may set its (mutable) events later."""

    reads = (("callback", "Initialize"),)

    def on(self, r: Record) -> None:
        if not _ends(r):
            return
        self.j.exercised.add("VAL-ATTACH-ONLY")
        hr = _hresult(r)
        if hr is not None and hresult_failed(hr) and self.j.callback_level >= 3:
            self.j.at("VAL-ATTACH-ONLY", r, f"the profiler's Initialize returned {format_hresult(hr)} and it "
                      "implements ICorProfilerCallback3::InitializeForAttach: if it supports attach only, "
                      "its real path did not run here: validate it with --attach")  # fmt: skip


# --- lifecycle (SHD-01, VAL-RELEASED-INFO, VAL-THREAD-AT-SHUTDOWN, VAL-ENUM-LEAK, VAL-LOAD) --------------

#: Initialize and InitializeForAttach
_INITIALIZES = api.names_with(Fact.INITIALIZES)


@rule("SHD-01", "VAL-RELEASED-INFO", "VAL-THREAD-AT-SHUTDOWN",
      what="no ICorProfilerInfo call after Shutdown returned or through a released interface; no profiler "
      "thread still calling the runtime after Shutdown")  # fmt: skip
class AfterShutdownAndRelease(StreamRule):
    """SHD-01: any ICorProfilerInfo call after Shutdown returned (the proxy marks it ``afterShutdown``),
    inside a
    callback the runtime still makes or not. VAL-RELEASED-INFO: a call through the wrapper after its last
    reference was released. VAL-THREAD-AT-SHUTDOWN: a thread alive when Shutdown returned is a finding when
    it called the runtime afterwards, a note naming its start routine otherwise."""
    #: SHD-01, VAL-RELEASED-INFO: Release, QueryInterface, afterShutdown, the call after a last Release
    quiet = Quiet(names=frozenset({"Release", "QueryInterface"}), keys=frozenset({"afterShutdown"}),
                  busy=lambda rule: rule.released_at is not None and not rule.reported_release)

    reads = (("call", None), ("callback", "Shutdown"), ("mark", "proxy.shutdown"),
             *(("callback", n) for n in sorted(_INITIALIZES)))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.released_at: int | None = None
        #: a last Release inside Initialize: the IUnknown Initialize was given is the runtime's reference,
        #: borrowed for the whole call (COM's [in] rule), so the pointer is released only when Initialize
        #: returns and the profiler kept nothing (a profiler that probes every ICorProfilerInfo version,
        #: releasing each, then asks again: the runtime's count said 0, the pointer was still good)
        self.released_in_initialize: int | None = None
        self.reported_release = False
        self.after: dict[int, int] = {}  # OS thread -> calls after Shutdown

    def on(self, r: Record) -> None:
        kind, name = r["kind"], r["name"]
        if kind == "callback":
            if name in _INITIALIZES:
                if r.get("phase") == "return" and self.released_in_initialize is not None:
                    self.released_at, self.released_in_initialize = self.released_in_initialize, None
            elif _ends(r):
                self.j.exercised.add("SHD-01")
            return
        if kind == "mark":
            self._leftover_threads(r)
            return
        if name == "Release" and (_arg(r, "out", "refs") or 0) <= 0:
            self.j.exercised.add("VAL-RELEASED-INFO")
            if any(f.name in _INITIALIZES for f in self.j.stack(r["os_tid"])):
                self.released_in_initialize = r["seq"]
            else:
                self.released_at = r["seq"]
            return
        if name == "QueryInterface" and r.get("hr") == 0:
            self.released_at = self.released_in_initialize = None
            return
        if r.get("afterShutdown") is True and _begins(r):
            thread = r["os_tid"]
            self.after[thread] = self.after.get(thread, 0) + 1
            callback = self.j.callback_of(thread)
            where = (
                f"inside {callback}, which the runtime made after Shutdown"
                if callback
                else "outside any callback"
            )
            self.j.at("SHD-01", r, f"{name} called after Shutdown returned ({where})")
        if self.released_at is not None and not self.reported_release and not name.startswith("ICorProfiler"):
            self.reported_release = True
            self.j.at("VAL-RELEASED-INFO", r, f"{name} called through an ICorProfilerInfo the profiler "
                "released "
                      f"(record {self.released_at})", more=[self.released_at])  # fmt: skip

    def _leftover_threads(self, mark: Record) -> None:
        self.j.exercised.add("VAL-THREAD-AT-SHUTDOWN")
        alive = [t for t in mark.get("profilerThreadsAlive") or [] if isinstance(t, int)]
        details = {d.get("osTid"): d for d in mark.get("threads") or [] if isinstance(d, dict)}
        for thread in alive:
            detail = details.get(thread, {})
            calls = _int(detail.get("callsAfterShutdown"))
            calls = calls if calls is not None else self.after.get(thread, 0)
            routine = self._start_routine(detail.get("stack"))
            started = f" (started at {routine})" if routine else ""
            if calls:
                self.j.finding(
                    "VAL-THREAD-AT-SHUTDOWN",
                    f"profiler thread {thread}{started} still runs after "
                    f"Shutdown returned and called ICorProfilerInfo {calls} time(s) after it",
                    [mark["seq"]],
                    thread=thread,
                    site=self._routine_site(detail.get("stack")),
                )
            else:
                self.j.finding(
                    "VAL-THREAD-AT-SHUTDOWN",
                    f"profiler thread {thread}{started} still runs after "
                    "Shutdown returned; it makes no profiling API call after it",
                    [mark["seq"]],
                    thread=thread,
                    note=True,
                    site=self._routine_site(detail.get("stack")),
                )

    def _profiler_frames(self, stack: object) -> list[dict[str, Any]]:
        target = Path(self.j.target).name
        return (
            [f for f in stack if isinstance(f, dict) and f.get("module") == target]
            if isinstance(stack, list)
            else []
        )

    def _routine_site(self, stack: object) -> Any:
        frames = self._profiler_frames(stack)
        if not frames:
            return None
        offset = _int(frames[-1].get("offset"))
        top = isinstance(stack, list) and bool(stack) and stack[0] is frames[-1]  # else a return address
        return self.j.site_in_target(offset, return_address=not top) if offset is not None else None

    def _start_routine(self, stack: object) -> str | None:
        site = self._routine_site(stack)
        return site.text() if site is not None else None


@rule("SHD-02", what="no ICorProfilerInfo call inside Shutdown")
class CallsOnceShutdownIsCalled(StreamRule):
    """SHD-02: a call made inside Shutdown itself, after the runtime called it. IUnknown's Release and
    QueryInterface are the cleanup, not calls the page forbids; a call after Shutdown returned is SHD-01's.
    A profiler thread's call while Shutdown runs (a sampler's last drain before Shutdown joins it) is not
    judged: the page draws its hard line ("undefined behavior") at the return, and a thread already in a
    call when Shutdown begins cannot be stopped short of it."""

    quiet = Quiet(frames=frozenset({"Shutdown"}))
    reads = (("call", None), ("callback", "Shutdown"))
    _CLEANUP = frozenset({"Release", "QueryInterface", "AddRef"})

    def on(self, r: Record) -> None:
        if r["kind"] == "callback":
            self.j.exercised.add("SHD-02")
            return
        name = r["name"]
        if name in self._CLEANUP or r.get("afterShutdown") is True or not _begins(r):
            return
        if any(f.name == "Shutdown" for f in self.j.stack(r["os_tid"])):
            self.j.at("SHD-02", r, f"{name} called inside Shutdown")


@rule("VAL-ENUM-LEAK", what="every enumerator the profiler obtained is released")
class EnumeratorLeak(StreamRule):
    reads = (("call", "EnumThreads"), ("mark", "proxy.shutdown"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.made: dict[object, Record] = {}

    def on(self, r: Record) -> None:
        if r["kind"] == "call":
            self.j.exercised.add("VAL-ENUM-LEAK")
            handed = (r.get("out") or {}).get("enumerator")
            if handed:
                self.made[handed] = self.j.keep(r)
            return
        for leaked in r.get("liveEnumerators") or []:
            made = self.made.get(leaked)
            if made is not None:
                self.j.at("VAL-ENUM-LEAK", made, "an ICorProfilerThreadEnum this call handed out is never "
                          "released", more=[r["seq"]])  # fmt: skip
            else:
                self.j.finding("VAL-ENUM-LEAK", "an ICorProfilerThreadEnum is never released", [r["seq"]])


@rule("VAL-LOAD", what="the profiler loads and its Initialize succeeds")
class Loading(StreamRule):
    """VAL-LOAD: the profiler's Initialize returned a failure (the runtime unloads it and nothing it was meant
    to do happens: often a missing configuration, an environment variable, a companion library), or the
    proxy could not load it (a ``probe_error`` record)."""

    reads = (*(("callback", n) for n in sorted(_INITIALIZES)), ("probe_error", None))

    def on(self, r: Record) -> None:
        self.j.exercised.add("VAL-LOAD")
        if r["kind"] == "probe_error":
            self.j.finding(
                "VAL-LOAD", f"{r.get('what')} ({r.get('where')})", [r["seq"]], thread=r.get("os_tid")
            )
            return
        hr = _int(r.get("hr"))
        if r.get("phase") != "enter" and hr is not None and hresult_failed(hr):
            self.j.at("VAL-LOAD", r, f"the profiler's {r['name']} returned {hr:#010x}: "
                "the runtime unloads it "
                      "(missing configuration? try --env K=V or --preload LIB)")  # fmt: skip


# --- crashes and hangs (VAL-CRASH, VAL-HANG) -------------------------------------------------------------

#: the hardware faults the proxy's fault handler is given first (SA_ONSTACK), whoever's code faulted
_FAULT_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")
#: a death by one of them with no crash record: the proxy records every fault in the profiler's code or
#: inside a callback, hook or call, so this one was not the profiler's, or no handler ran at all
UNSEEN_FAULT = (
    "no fault in the profiler's code, callbacks or calls reached the proxy's fault handler, so the crash "
    "is not blamed on the profiler: the fault was the runtime's or the app's own, or the kernel ended the "
    "process without running any handler, as it does when a signal frame does not fit on the stack it "
    "must go on. "
    "Observed on .NET 8.0.4 (docs/seeding.md, \"A signal during the runtime's hardware-exception "
    "handling\"): a signal such as a sampler's SIGPROF that arrives while the runtime handles a hardware "
    "exception (a NullReferenceException) on the thread's alternate signal stack ends the process this way, "
    "before the profiler's handler runs"
)
#: the modules of the harness's own frames at the top of a crash stack (the proxy sits in the probe's seat,
#: under the probe's file name; libc's signal trampoline follows its handler)
_HARNESS_MODULES = ("libprofharness_probe.so", "libprofharness_preload.so")


def crash_stack(frames: object, target: str) -> list[dict[str, Any]]:
    """The crash stack from the first frame that is not the harness's: the proxy's signal handler and the
    libc trampoline that called it are dropped."""
    if not isinstance(frames, list):
        return []
    out = [f for f in frames if isinstance(f, dict)]
    k = 0
    while k < len(out) and out[k].get("module") in _HARNESS_MODULES:
        k += 1
    if k and k < len(out) and str(out[k].get("module", "")).startswith("libc.so"):
        k += 1  # the signal trampoline (__restore_rt) the handler returns through
    return out[k:] if k < len(out) else out


def frames_text(j: Judging, frames: list[dict[str, Any]], count: int) -> str:
    """``count`` frames of a stack (at least 3), innermost first: the profiler's own as function (file:line),
    others by symbol (the record's, else, for a frame that carries its file's path, the file's symbol table's)
    or ``lib.so+0xOFF``; the proxy's forwarding frames between those shown (the harness's module) are left
    out, said once. The first ``count``, unless the profiler's first frame is deeper (an abort's stack: raise,
    abort, the C++ runtime's terminate): then the innermost two, how many are left out, and the frames down to
    the profiler's."""
    count = max(count, 3)
    target = Path(j.target).name
    # the frames to show (their indexes in ``frames``): chosen by module first, so only those are named
    ours = [i for i, f in enumerate(frames) if f.get("module") not in _HARNESS_MODULES]
    first_mine = next((k for k, i in enumerate(ours) if frames[i].get("module") == target), 0)
    skipped = max(first_mine - count + 1, 0)
    kept = ours[:count] if not skipped else [*ours[:2], *ours[skipped + 2 : first_mine + 1]]
    texts = [_frame_text(j, frames[i], i, target) for i in kept]
    if skipped:
        texts.insert(2, f"({skipped} frame{'s' if skipped > 1 else ''})")
    between = range(kept[0], kept[-1]) if kept else range(0)
    dropped = any(frames[i].get("module") in _HARNESS_MODULES for i in between)
    return " < ".join(texts) + (" (the proxy's frames left out)" if dropped else "")


def _frame_text(j: Judging, f: dict[str, Any], i: int, target: str) -> str:
    """Frame ``i`` of a stack as :func:`frames_text` shows it."""
    offset = _int(f.get("offset"))
    site = None
    if f.get("module") == target and offset is not None:
        site = j.site_in_target(offset, return_address=i > 0)
    elif isinstance(f.get("path"), str) and offset is not None and not f.get("symbol"):
        # a frame named from the process's maps (a report made without the loader): the file's symbols
        site = j.symbolizer.site(str(f["path"]), offset, return_address=i > 0)
    if site is not None and site.function:
        return site.text()
    if isinstance(f.get("symbol"), str) and f.get("symbol"):
        return demangle(str(f["symbol"]))
    return f"{f.get('module', '?')}+{offset or 0:#x}"


@rule("VAL-CRASH", "VAL-HANG",
      what="the process neither crashes in the profiler's code nor hangs in a callback "
      "or call")  # fmt: skip
class CrashesAndHangs(StreamRule):
    reads = (("mark", "proxy.crash"), ("mark", "proxy.hang"))

    def on(self, r: Record) -> None:
        if r["name"] == "proxy.crash":
            self._crash(r)
        else:
            self._hang(r)

    def _frames_text(self, frames: list[dict[str, Any]], count: int) -> str:
        return frames_text(self.j, frames, count)

    def _crash(self, r: Record) -> None:
        target = Path(self.j.target).name
        stack = crash_stack(r.get("stack"), self.j.target)
        mine = [f for f in stack if f.get("module") == target]
        callbacks = [c for c in r.get("callbacks") or [] if isinstance(c, str)]
        callback = callbacks[-1] if callbacks else None
        call = r.get("call")
        ours = bool(mine) or r.get("pcInProfiler") is True or bool(callbacks) or bool(call)
        where = f"in {callback}" if callback else "outside any callback"
        if r.get("shutdownReturned") is True:
            where += ", after Shutdown returned"
        elif not self.j.initialized:
            where += ", before Initialize (while the profiler was being created)"
        inside = f", inside {call}" if call else ""
        site = None
        if mine:
            offset = _int(mine[0].get("offset"))
            top = stack[0] is mine[0]  # the profiler's own code faulted: its IP, not a return address
            site = self.j.site_in_target(offset, return_address=not top) if offset is not None else None
        shown = self._frames_text(stack, 6)
        self.j.finding(
            "VAL-CRASH",
            f"{r.get('signal')} {where}{inside} on thread {r.get('os_tid')}; stack: {shown}"
            + ("" if ours else " (no profiler frame on the stack: the app's own crash)"),
            [r["seq"]],
            thread=r.get("os_tid"),
            callback=callback,
            note=not ours,
            site=site,
        )

    def _hang(self, r: Record) -> None:
        stuck = _int(r.get("stuckOsTid"))
        threads = r.get("threads") or []
        stuck_cb = None
        lines = []
        for th in threads if isinstance(threads, list) else []:
            if not isinstance(th, dict):
                continue
            cbs = th.get("callbacks")
            cbs = cbs if isinstance(cbs, list) else []
            last = cbs[-1] if cbs else th.get("lastCallback")
            if th.get("osTid") == stuck and cbs:
                stuck_cb = cbs[-1]
            frames = crash_stack(th.get("stack"), self.j.target)
            lines.append(f"{th.get('osTid')}: {last or '-'} ({self._frames_text(frames, 3)})")
        open_kind = r.get("open") if r.get("open") in ("callback", "call") else "callback"
        what = f"{open_kind} {r.get('openName')}" if r.get("openName") else "a callback"
        self.j.finding("VAL-HANG", f"{what} ran {r.get('busyMs')} ms (limit {r.get('limitMs')} ms) on thread "
                       f"{stuck}; threads: " + "; ".join(lines), [r["seq"]], thread=stuck,
                       callback=str(stuck_cb) if stuck_cb else None)  # fmt: skip


# --- signal handlers (ASYNC-01..08, signal-safety(7)) ------------------------------------------------------
#
# The signal-safety preload (conformance/native/preload) wraps the handlers the profiler installs; the proxy
# writes a proxy.signal_handler mark for each, a proxy.async mark for each (profiler frame, function) pair
# called inside one, and proxy.async_deadlock when the injected deadlock happened (--inject-deadlock) or a
# handler's call into the allocator did not return for a second (a real one: ``injected`` false).

_ALLOCATION = frozenset({"malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc",
                         "memalign"})  # fmt: skip
_LOCKS = ("pthread_mutex_", "pthread_cond_", "pthread_rwlock_")
_ASYNC_CLAUSES = ("ASYNC-01", "ASYNC-02", "ASYNC-03", "ASYNC-04", "ASYNC-05", "ASYNC-06")
_ASYNC_WALK = api.names_with(Fact.ASYNC_WALK)


def async_clause(function: str, info: bool) -> str | None:
    """The ASYNC clause a call of ``function`` inside the profiler's signal handler breaks (None: allowed).
    ``info``: an ICorProfilerInfo method (allowed: those the DoStackSnapshot page names for a hijacked
    thread's asynchronous walk, :data:`clr_model.api.Fact.ASYNC_WALK`)."""
    if info:
        return None if function in _ASYNC_WALK else "ASYNC-05"
    if function == "errno":
        return "ASYNC-06"
    if function.startswith(_LOCKS):
        return "ASYNC-03"
    if function.startswith("dl"):
        return "ASYNC-04"
    if function in _ALLOCATION or function.startswith(("operator new", "operator delete")):
        return "ASYNC-01"
    return "ASYNC-02"  # the stdio family: every other function the preload watches


def signal_name(signo: object) -> str:
    try:
        return signal.Signals(signo).name if isinstance(signo, int) else "signal"
    except ValueError:
        return f"signal {signo}"


@rule(*_ASYNC_CLAUSES, "ASYNC-07", "ASYNC-08",
      what="a signal handler the profiler installs calls only async-signal-safe functions (no allocation, "
      "stdio, lock, dynamic-loader or profiling-API call), restores errno, and does not deadlock when its "
      "signal arrives while the thread holds the allocator's lock or a lock the handler takes")  # fmt: skip
class SignalHandlers(StreamRule):
    """A call site is written when first seen and again with its total at the end: judged once, at the end,
    from its last record."""

    reads = (("mark", "proxy.signal_handler"), ("mark", "proxy.async"), ("mark", "proxy.async_deadlock"),
             ("mark", "proxy.shutdown"))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.calls: dict[tuple[object, object, object], Record] = {}

    def end(self) -> None:
        for r in self.calls.values():
            self._call(r)

    def on(self, r: Record) -> None:
        name = r["name"]
        if name == "proxy.signal_handler":  # a handler was wrapped: its calls and lock waits are watched
            self.j.exercised.update((*_ASYNC_CLAUSES, "ASYNC-08"))
        elif name == "proxy.shutdown":
            signals = r.get("signals")
            if isinstance(signals, dict) and signals.get("injection") == 3:
                self.j.exercised.add("ASYNC-07")  # the signal came under the lock; the handler returned
            dropped = _int(signals.get("dropped")) if isinstance(signals, dict) else None
            if dropped:  # the preload's table of sites (1024, never evicted) was full: those calls are unseen
                self.j.finding(
                    "ASYNC-01",
                    f"{dropped} call(s) inside the profiler's signal handler were not kept: the preload's "
                    "table of call sites was full, so the ASYNC findings may miss sites",
                    [r["seq"]],
                    note=True,
                )
        elif name == "proxy.async":
            self.calls[(r.get("function"), r.get("info"), r.get("caller"))] = r
        else:
            self._deadlock(r)

    def _call(self, r: Record) -> None:
        function = r.get("function")
        if not isinstance(function, str):
            return
        clause = async_clause(function, r.get("info") is True)
        if clause is None:
            return
        count = _int(r.get("count")) or 1
        sig = signal_name(r.get("signo"))
        thread = _int(r.get("thread"))
        if clause == "ASYNC-06":
            message = f"the profiler's {sig} handler returned with errno changed ({count} time(s))"
        else:
            what = f"ICorProfilerInfo::{function}" if clause == "ASYNC-05" else f"{function}()"
            message = (f"{what} called inside the profiler's {sig} handler ({count} time(s), first on thread "
                       f"{thread})")  # fmt: skip
        self.j.finding(clause, message, [r["seq"]], thread=thread, site=self.j.site(r))

    def _deadlock(self, r: Record) -> None:
        clause = "ASYNC-08" if r.get("lock") is True else "ASYNC-07"
        self.j.exercised.add(clause)
        holder, waiter = _int(r.get("holderOsTid")), _int(r.get("waiterOsTid"))
        held = frames_text(self.j, crash_stack(r.get("holderStack"), self.j.target), 6)
        waits = frames_text(self.j, crash_stack(r.get("waiterStack"), self.j.target), 6)
        same = "the same thread" if holder == waiter else f"thread {waiter}"
        sig = signal_name(r.get("signo"))
        if clause == "ASYNC-08":  # the lock's owner is the waiting thread: the interrupted code holds it
            message = (
                f"deadlock: the profiler's {sig} handler called {r.get('function')}() on thread {waiter} for "
                f"a lock that thread already holds, and waited {r.get('waitedMs')} ms: the code its signal "
                f"interrupted took the lock and cannot release it until the handler returns; the thread was "
                f"interrupted at: {held}; the handler waits at: {waits}"
            )
        elif r.get("injected") is False:  # a real deadlock: the call into the allocator never returned
            message = (
                f"deadlock: the profiler's {sig} handler called {r.get('function')}() on thread {waiter} "
                f"and waited {r.get('waitedMs')} ms inside the allocator without returning, on {same} as "
                f"the code its signal interrupted (an allocator's lock that code holds); the thread was "
                f"interrupted at: {held}; the handler waits at: {waits}"
            )
        else:
            message = (
                f"deadlock: the profiler's {sig} handler, raised on thread {holder} while it held the "
                f"allocator lock (--inject-deadlock), called {r.get('function')}() and waited "
                f"{r.get('waitedMs')} ms for that lock on {same}; the lock was taken (inside malloc) at: "
                f"{held}; the handler waits at: {waits}"
            )
        self.j.finding(clause, message, [r["seq"]], thread=waiter, site=self.j.site(r))


# --- one run ---------------------------------------------------------------------------------------------


def _thread_line(t: ThreadReport) -> str:
    """One thread of a watchdog report: ``tid name: callback in call (three innermost native frames)``."""
    where = t.open_callback or t.last_callback or "-"
    call = f" in {t.open_call}" if t.open_call else ""
    return f"{t.os_tid} {t.name}: {where}{call} ({' < '.join(t.frames[:3]) or 'no stack'})"


@dataclass
class JudgedRun:
    """What judging one run's recording found beyond its findings (given to the sink as they came)."""

    records: int
    exercised: set[str]
    #: the hooks the profiler registered (``index``: the seq of the call that registered it), each with the
    #: callback that call was made in
    hooks: list[tuple[RegisteredHook, str | None]]
    seconds: float
    #: the profiler's module offset -> its site (for findings on a registered hook)
    site_of: Callable[[int], Any] | None = None
    #: a line for what the run's outcome means when no rule blames anything (the run reached its time limit)
    note: str | None = None
    #: the proxy's notes (its proxy.* marks), the last of each name
    marks: dict[str, Any] = field(default_factory=dict)
    #: the run's summary counts (issue 21), read in the same pass
    counted: CountRun | None = None


_CHECKED_REGISTRATIONS = {reg.method: reg for reg in api.hook_registrations(CHECKED_KINDS)}


class _Hooks(StreamRule):
    """Collects the hooks the profiler registered (for the hook checker, :func:`hook_abi`)."""

    reads = _calls({r.method for r in api.hook_registrations()})

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.found: list[tuple[RegisteredHook, str | None]] = []

    def on(self, r: Record) -> None:
        reg = _CHECKED_REGISTRATIONS.get(r["name"])
        if reg is None or not _begins(r):
            return
        for name in reg.parameters:
            hook = (r.get("args") or {}).get(name)
            if not isinstance(hook, dict) or not _int(hook.get("address")):
                continue
            module, symbol = hook.get("module"), hook.get("symbol")
            registered = RegisteredHook(registration=r["name"], parameter=name, index=r["seq"],
                                        address=_int(hook.get("address")) or 0,
                                        module=module if isinstance(module, str) else None,
                                        offset=_int(hook.get("offset")),
                                        symbol=symbol if isinstance(symbol, str) else None,
                                        kind=KIND_OF_REGISTRATION[reg.kind])  # fmt: skip
            self.found.append((registered, self.j.callback_of(r["os_tid"])))


def judge_run(
    run: RunResult,
    sink: Callable[[Finding], None],
    *,
    profiler: Path | None = None,
    symbolizer: Symbolizer | None = None,
    ground_truth: tuple[tuple[str, tuple[str, ...], str], ...] = (),
    columnar: bool = True,
) -> JudgedRun:
    """Every validator rule over ``run``'s recording (its trace file), findings into ``sink``; then what the
    run's outcome says (a crash or hang the proxy did not see, a run stopped at its time limit).
    ``profiler``: the profiler's file, for sites before the recording names it; ``symbolizer``: one shared by
    every run of a validation (each module's symbols and lines read once); ``ground_truth``: the workload's
    marked points (:meth:`conformance.validator.workload.Workload.points`); ``columnar`` False: a binary trace
    decoded record by record (:attr:`Judging.columnar`)."""
    registry.load_all((Layer.VALIDATOR,))
    judging = Judging(run=run, sink=sink, profiler=str(profiler) if profiler else "",
                      symbolizer=symbolizer or Symbolizer(), ground_truth=ground_truth,
                      columnar=columnar)  # fmt: skip
    rules = [cast("type[StreamRule]", fn) for fn in registry.functions(Layer.VALIDATOR)]
    rules += [_Hooks, _InitializeSeen, CountRun]
    live = judging.judge(run.trace_path, rules)
    hooks = next(r for r in live if isinstance(r, _Hooks)).found
    judged = JudgedRun(records=judging.records, exercised=judging.exercised, hooks=hooks,
                       seconds=judging.seconds, site_of=judging.site_in_target,
                       marks=judging.notes,
                       counted=next(r for r in live if isinstance(r, CountRun)))  # fmt: skip
    crash = judging.notes.get("proxy.crash")
    hang = judging.notes.get("proxy.hang") or judging.notes.get("proxy.async_deadlock")  # ASYNC-07 ended it
    judging.exercised.update(("VAL-CRASH", "VAL-HANG", "VAL-LOAD"))
    if crash is None and hang is None and run.outcome in (RunOutcome.CRASHED, RunOutcome.HUNG):
        open_cbs = {t: [f.name for f in s] for t, s in judging.stacks.items() if s}
        detail = "; ".join(f"thread {t}: {' > '.join(s)}" for t, s in open_cbs.items()) or "no callback open"
        thread = next(iter(open_cbs), None)
        callback = open_cbs[thread][-1] if thread is not None else None
        if run.outcome is RunOutcome.HUNG:
            blocked = next((t for t in run.threads if t.open_callback or t.open_call), None)
            if thread is None and blocked is not None:
                thread, callback = blocked.os_tid, blocked.open_callback
            if thread is None:
                judged.note = (
                    f"{run.scenario} on {run.runtime} reached the run's time limit and was stopped; "
                    "no callback or profiling call was open, so no rule blames one"
                )
                return judged
            threads = "; ".join(_thread_line(t) for t in run.threads) or (
                run.threads_problem or "none reported"
            )
            judging.finding(
                "VAL-HANG",
                f"the process {run.describe_failure().split(' on ', 1)[-1]}; open "
                f"callbacks: {detail}; threads: {threads}",
                [],
                thread=thread,
                callback=callback,
            )
        elif run.signal in _FAULT_SIGNALS:
            judging.finding("VAL-CRASH", f"the process {run.describe_failure().split(' on ', 1)[-1]}; "
                            f"{UNSEEN_FAULT}; callbacks whose return the trace does not have (records "
                            f"after the last one written are lost): {detail}", [], thread=thread,
                            callback=callback, note=True)  # fmt: skip
        else:
            told = run.unhandled_exception
            unhandled = f"; the app's stderr: unhandled {told}" if told else ""
            judging.finding("VAL-CRASH", f"the process {run.describe_failure().split(' on ', 1)[-1]}; open "
                            f"callbacks: {detail}{unhandled}", [], thread=thread,
                            callback=callback, note=not open_cbs)  # fmt: skip
    return judged



class _InitializeSeen(StreamRule):
    """Whether Initialize was delivered (a crash before it happened while the profiler was being created),
    and whether it was InitializeForAttach (ATT-01 and INI-01 judge the masks of the two loads apart)."""

    reads = tuple(("callback", n) for n in sorted(_INITIALIZES))

    def on(self, r: Record) -> None:
        self.j.initialized = True
        if r["name"] == "InitializeForAttach":
            self.j.attached = True


def check_recording(rec: Recording, run: RunResult) -> list[Finding]:
    """Every finding of every rule over a recording's trace file (the same rules as :func:`judge_run`)."""
    found: list[Finding] = []
    if rec.trace.path != run.trace_path:
        run = run.model_copy(update={"trace_path": rec.trace.path})
    judge_run(run, found.append)
    return found


def hook_abi(
    hooks: list[tuple[RegisteredHook, str | None]],
    run: RunResult,
    checks: HookChecks,
    site_of: Callable[[int], Any] | None = None,
) -> tuple[list[Finding], list[str]]:
    """FE2-06/08/09/10/12: every registered hook the checker can read, under the checker (``checks`` asks it
    once per hook however many runs registered it). Returns the findings (one per rule a hook broke, at the
    call that registered it, sited at the hook's own code) and a note for each hook that could not be
    checked."""
    found: list[Finding] = []
    notes: list[str] = []
    for hook, callback in hooks:
        answer = checks.check(hook)
        name = answer.symbol or f"{hook.address:#x}"
        if answer.problem is not None:
            notes.append(f"{hook.registration} {hook.parameter} {name} not checked: {answer.problem}")
            continue
        site = site_of(hook.offset) if site_of is not None and hook.offset is not None else None
        what = f"{hook.parameter} hook {name} ({hook.registration}, checked as {answer.kind})"
        for fault in answer.faults:
            found.append(Finding.of(run, fault.clause, f"{what}: {fault_line(fault)}", [hook.index],
                                    callback=callback, site=site))  # fmt: skip
        for note in answer.notes:
            found.append(Finding.of(run, note.clause, f"{what}: {fault_line(note)}", [hook.index],
                                    callback=callback, site=site, note=True))  # fmt: skip
        if answer.not_emulated:
            reason = answer.reasons[0] if answer.reasons else "no reason given"
            line = (
                f"{hook.registration} {hook.parameter} {name}: {answer.not_emulated} of {answer.runs} runs "
                f"not emulated ({reason}); the rules were judged on the others"
            )
            if line not in notes:
                notes.append(line)
    return found, notes


__all__ = ["JudgedRun", "RuleClass", "check_recording", "crash_stack", "hook_abi", "judge_run", "rule"]


# --- ground truth at a workload's marked points (DSS-03, issue 21) ------------------------------------------


def _in_order(wanted: Sequence[str], got: Sequence[str]) -> bool:
    """Whether ``wanted`` occurs in ``got`` in this order (other frames between them allowed)."""
    it = iter(got)
    return all(any(name == have for have in it) for name in wanted)


@rule("DSS-03", what="a walk of a thread parked at a workload's marked point delivers its declared frames in "
      "order (a note: the frames delivered are the runtime's)")  # fmt: skip
class GroundTruthWalks(StreamRule):
    """DSS-03 at the workload's marked points: a DoStackSnapshot of the thread that wrote a ground-truth mark,
    made before the mark that ends the point, that returned S_OK delivered the FunctionIDs the proxy recorded
    (``frameIds``, named by its ``proxy.functions`` marks); the declared frames must be among them in order.
    Only a note: what a walk delivers is the runtime's doing (the profiler chooses the thread and the seed,
    and a seed is ignored where the top of the stack is not the runtime's helper code, as for a thread
    parked in a wait); a profiler that drops or reorders the frames it was given does so out of sight."""
    #: DSS-03: the names of FunctionIDs (proxy.functions), the workload's marked points while any
    quiet = Quiet(kinds=("mark",), names=frozenset({"proxy.functions"}),
                  busy=lambda rule: bool(rule.points or rule.ending))

    reads = (("mark", None), ("call", "DoStackSnapshot"))

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.points = {mark: (frames, until) for mark, frames, until in judging.ground_truth}
        self.active: dict[int, tuple[str, tuple[str, ...]]] = {}  # ThreadID -> (mark, frames)
        self.ending: dict[str, list[int]] = {}  # a point's ending mark -> its threads
        self.names: dict[int, str] = {}
        self.walks: list[tuple[Record, str, tuple[str, ...]]] = []

    def on(self, r: Record) -> None:
        if r["kind"] == "mark":
            name = r["name"]
            if name == "proxy.functions":
                functions = r.get("functions")
                for key, value in (functions.items() if isinstance(functions, dict) else ()):
                    if key.isdigit() and isinstance(value, str):
                        self.names[int(key)] = value
            for ended in self.ending.pop(name, []):
                self.active.pop(ended, None)
            point, tid = self.points.get(name), _int(r.get("tid"))
            if point is not None and tid:
                self.active[tid] = (name, point[0])
                if point[1]:
                    self.ending.setdefault(point[1], []).append(tid)
            return
        if not self.active or not _ends(r) or r.get("hr") != 0:
            return
        out = r.get("out")
        if not isinstance(out, dict) or out.get("frameIdsCut"):
            return
        ids = out.get("frameIds")
        if not isinstance(ids, list) or not all(_int(i) is not None for i in ids):
            return
        target = _arg(r, "args", "thread") or _int(r.get("tid"))
        parked = self.active.get(target) if target else None
        if parked is not None:
            self.walks.append((self.j.keep(r, ids=ids, target=target), *parked))

    def end(self) -> None:
        for kept, mark, frames in self.walks:
            ids: list[int] = kept["ids"]
            if any(i and not self.names.get(i) for i in ids):
                continue  # a FunctionID the proxy could not name: nothing to judge
            self.j.exercised.add("DSS-03")
            got = [self.names[i] if i else "(unmanaged)" for i in ids]
            if _in_order(frames, got):
                continue
            self.j.at("DSS-03", kept, f"DoStackSnapshot of thread {kept['target']} parked at {mark} returned "
                      f"S_OK and delivered {' < '.join(got) or 'no frame'}: the declared frames "
                      f"{' < '.join(frames)} are not all there in this order (what a walk delivers is the "
                      "runtime's doing)", note=True)  # fmt: skip
