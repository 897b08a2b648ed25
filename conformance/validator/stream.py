"""Judging a recording as it is read: one pass over the proxy's trace, bounded memory, every validator rule
fed the records it reads (issue 19).

The trace (``docs/design.md``, the proxy's records) is read line by line with orjson; each record is a plain
dict. :class:`Judging` keeps what every rule needs to know of the moment, and nothing more: the callbacks and
hooks open on each OS thread (so a finding names the callback it happened in), the map from runtime
ThreadIDs to OS threads (each record carries both ``os_tid`` and ``tid``), the modules of the profiler's call
sites (the header's target and the ``proxy.module`` marks) for attribution, the callback counts and the
proxy's notes. A rule (:class:`StreamRule`) declares the records it reads (``reads``: (kind, name) pairs,
``None`` for any name) and is handed only those, in order; it emits findings into the sink as it goes and
may hold back what it can only decide at the end (:meth:`StreamRule.end`).

A torn last line is the mark of a killed writer and ends the recording; a malformed complete line is refused
with its ``file:line`` (a verdict on the records before it would not cover the run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Unpack

from orjson import JSONDecodeError, loads

from clr_model import api
from clr_model.api import HookKind
from clr_model.clauses import CATALOG, Kind
from conformance.core import interrupt
from conformance.core.binary_trace import is_binary, raw_records
from conformance.core.errors import HarnessError
from conformance.core.findings import Finding, Where
from conformance.core.frames import MAGIC as FRAMES_MAGIC
from conformance.core.runner import RunResult
from conformance.core.symbols import Site, Symbolizer

__all__ = ["ELT_HOOKS", "Judging", "Quiet", "StreamRule", "read_records"]

Record = dict[str, Any]
Sink = Callable[[Finding], None]
#: the names of the enter/leave/tailcall hooks the proxy wraps (frames with ``hook: true`` that are not the
#: FunctionIDMapper nor a StackSnapshotCallback)
ELT_HOOKS: frozenset[str] = frozenset(
    api.hooks_of(
        (
            HookKind.FUNCTION_ENTER,
            HookKind.FUNCTION_ENTER2,
            HookKind.FUNCTION_ENTER3,
            HookKind.FUNCTION_ENTER3_WITH_INFO,
        )
    )
)
#: the proxy's own marks (not the scenario's)
NOTE_PREFIX = "proxy."


def _open(path: Path) -> interrupt.opening[BinaryIO]:
    """The recording, for a ``with`` statement (:class:`interrupt.opening`: a signal never leaves it open)."""

    def now() -> BinaryIO:
        try:
            return path.open("rb")
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the recording: {exc.strerror}") from None

    return interrupt.opening(now)


#: the record kinds that must name what they are (a callback, an Info call)
_NAMED = frozenset(("call", "callback"))
#: a call's or a callback's phase, when it has one
_PHASES = frozenset(("enter", "return", "whole"))


def _malformed(r: Record) -> str:
    """What is wrong with a record whose fields have the wrong types."""
    for field_name, ok in (
        ("name", isinstance(r.get("name"), str) or (r.get("name") is None and r.get("kind") not in _NAMED)),
        ("os_tid", isinstance(r.get("os_tid", 0), int) and not isinstance(r.get("os_tid", 0), bool)),
        ("tid", r.get("tid") is None or (isinstance(r["tid"], int) and not isinstance(r["tid"], bool))),
        ("phase", r.get("kind") not in _NAMED or r.get("phase", "whole") in _PHASES),
    ):
        if not ok:
            value = r.get(field_name)
            return f"a {r.get('kind')} record with a bad {field_name} ({value!r}): the recording is damaged"
    return "a malformed record; the recording is damaged there"


_NONE: list[Callable[[Record], None]] = []


def _refuse(path: Path, number: int, problem: str) -> HarnessError:
    return HarnessError(f"{path}:{number}: {problem}")


def _record(path: Path, number: int, line: bytes) -> Record | None:
    """The record of a complete line that :func:`orjson.loads` took for a record (or refused): None for a
    blank line; a malformed line raises :class:`HarnessError` naming ``file:line``. The slow path of the
    readers below, which parse first and ask only when the line is not a JSON object with a kind."""
    if not line.strip():
        return None
    try:
        record = loads(line)
    except JSONDecodeError as exc:
        raise _refuse(path, number, f"not JSON ({exc}); the recording is damaged there") from None
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise _refuse(path, number, "a record must be a JSON object with a kind")
    return record


def _line_record(path: Path, number: int, line: bytes) -> Record | None:
    """The record of a complete line of a JSON-lines trace (None: a blank line): parsed first, and handed to
    :func:`_record` only when it is not a JSON object with a kind."""
    try:
        record = loads(line)
    except JSONDecodeError:
        record = None
    if record.__class__ is not dict or record.get("kind").__class__ is not str:
        return _record(path, number, line)
    return record


def _binary_records(path: Path) -> Iterator[tuple[int, Record]]:
    """(record number, record) of a binary trace (:mod:`conformance.core.binary_trace`); a torn last record
    ends it quietly; a corrupt one raises :class:`HarnessError` naming ``file:number``."""
    for number, record, what in raw_records(path):
        if record is None:
            if what is not None:
                raise _refuse(path, number, f"{what}; the recording is damaged there")
            return
        yield number, record


def read_records(path: Path) -> Iterator[tuple[int, Record]]:
    """(line number, record) of every complete line; a torn last line ends it quietly; a malformed complete
    line raises :class:`HarnessError` naming ``file:line``. A binary trace: (record number, record)."""
    if is_binary(path):
        yield from _binary_records(path)
        return
    with _open(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                return  # the writer died mid-record: every complete record before it counts
            record = _line_record(path, number, line)
            if record is not None:
                yield number, record


@dataclass(slots=True)
class Frame:
    name: str
    hook: bool


@dataclass(frozen=True)
class Quiet:
    """A rule's contract with the columnar path (:mod:`conformance.validator.columns`): when the rule does
    nothing with a record of ``kinds`` it reads (what :meth:`StreamRule.on` returns from without a finding, a
    change of its state or of what it marks exercised): unless the record is one of ``names``, its shape has
    one of ``keys`` (a top-level field), one of ``frames`` is open on its thread, or ``busy`` says the rule's
    state makes every record it reads count. A rule without one is handed every record it reads."""

    kinds: tuple[str, ...] = ("call",)
    names: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    frames: frozenset[str] = frozenset()
    busy: Callable[[Any], bool] | None = None


class StreamRule:
    """A validator rule over the records it reads (see the module's docstring). Subclasses set
    :attr:`reads` and override :meth:`on` and :meth:`end`; :meth:`exercise` says a clause saw what it
    judges (a rule that never saw it is reported skipped, not passed)."""

    #: the records the rule reads: (kind, name), name None for every record of that kind
    reads: ClassVar[tuple[tuple[str, str | None], ...]] = ()
    #: when it may be skipped a record it reads (the columnar path); None: never
    quiet: ClassVar[Quiet | None] = None

    def __init__(self, judging: Judging) -> None:
        self.j = judging

    def on(self, r: Record) -> None:
        """One record the rule reads."""

    def end(self) -> None:
        """The recording is over (complete or cut short): decide what was held back."""


@dataclass
class Judging:
    """One recording being judged: its run, the sink for findings and the state every rule shares."""

    run: RunResult
    sink: Sink
    #: the profiler validate was given: its path until the header names the proxy's target (a crash in the
    #: profiler's constructor comes before any header)
    profiler: str = ""
    symbolizer: Symbolizer = field(default_factory=Symbolizer)
    header: Record = field(default_factory=dict)
    #: OS thread -> callbacks and hooks open on it, outermost first
    stacks: dict[int, list[Frame]] = field(default_factory=dict)
    #: runtime ThreadID -> OS thread
    os_of: dict[int, int] = field(default_factory=dict)
    #: OS threads that ran managed code (had a ThreadID)
    managed: set[int] = field(default_factory=set)
    #: the proxy's notes (proxy.* marks) kept by name, the last of each
    notes: dict[str, Record] = field(default_factory=dict)
    #: callback and hook counts of the ``counts`` record
    counts: dict[str, int] = field(default_factory=dict)
    hook_counts: dict[str, int] = field(default_factory=dict)
    #: clauses that saw what they judge
    exercised: set[str] = field(default_factory=set)
    records: int = 0
    #: Initialize (or InitializeForAttach) was delivered
    initialized: bool = False
    #: the profiler was loaded by attach: InitializeForAttach was delivered
    attached: bool = False
    #: the workload's marked points (issue 21): (mark, frames innermost first, the mark that ends it or "")
    ground_truth: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    seconds: float = 0.0
    #: a binary trace read as columns (:mod:`conformance.validator.columns`); False: each record as a dict
    columnar: bool = True
    #: the profiler's modules: (base, path) sorted by base, from the header and proxy.module marks
    _modules: list[tuple[int, str]] = field(default_factory=list)
    _sites: dict[int, Site | None] = field(default_factory=dict)
    #: (kind, name) -> the handlers of the rules that read it; kind -> those of the rules that read every name
    _handlers: dict[tuple[str, str | None], list[Callable[[Record], None]]] = field(default_factory=dict)
    _anyname: dict[str, list[Callable[[Record], None]]] = field(default_factory=dict)

    # -- what rules ask ------------------------------------------------------------------------------------
    @property
    def proxy(self) -> Record:
        info = self.header.get("proxy")
        return info if isinstance(info, dict) else {}

    @property
    def callback_level(self) -> int:
        level = self.proxy.get("callbackLevel")
        return level if isinstance(level, int) else 0

    @property
    def target(self) -> str:
        target = self.proxy.get("target")
        return target if isinstance(target, str) and target else self.profiler

    def stack(self, thread: int) -> list[Frame]:
        """The callbacks and hooks open on ``thread`` around the current record (its own frame excluded)."""
        return self.stacks.get(thread) or []

    def callback_of(self, thread: int) -> str | None:
        stack = self.stacks.get(thread)
        return stack[-1].name if stack else None

    def os_thread(self, thread_id: object) -> int | None:
        """The OS thread of a runtime ThreadID, when the recording told."""
        return self.os_of.get(thread_id) if isinstance(thread_id, int) else None

    def site(self, r: Record) -> Site | None:
        """The profiler's code a call record was made from (its ``caller``), when the recording says."""
        caller = r.get("caller")
        if not isinstance(caller, int) or not caller:
            return None
        if caller in self._sites:
            return self._sites[caller]
        found = None
        module = self._module_of(caller)
        if module is not None:
            base, path = module
            found = self.symbolizer.site(path, caller - base, return_address=True)
        self._sites[caller] = found
        return found

    def site_in_target(self, offset: int, *, return_address: bool = False) -> Site | None:
        """A site at ``offset`` into the profiler's own file (a crash frame, a registered hook);
        ``return_address``: the offset is where a call returns to (a caller's frame), the site is the call."""
        if not self.target:
            return None
        return self.symbolizer.site(self.target, offset, return_address=return_address)

    def _module_of(self, address: int) -> tuple[int, str] | None:
        best = None
        for base, path in self._modules:
            if base <= address:
                best = (base, path)
            else:
                break
        return best

    def finding(
        self,
        clause: str,
        message: str,
        records: list[int],
        *,
        note: bool = False,
        **where: Unpack[Where],
    ) -> None:
        """Emit a finding; an observation (a clause no document states) is always a note."""
        item = CATALOG.get(clause)
        note = note or (item is not None and item.kind is Kind.OBSERVATION)
        self.sink(Finding.of(self.run, clause, message, records, note=note, **where))

    def at(
        self, clause: str, r: Record, message: str, *, more: Iterable[int] = (), note: bool = False
    ) -> None:
        """Emit a finding at record ``r``: its seq, thread, the callback open around it (a record a rule kept
        for later carries its own, see :meth:`keep`) and its call site."""
        thread = r.get("os_tid")
        if "kind" not in r:  # kept by keep()
            callback = r.get("callback")
        else:
            callback = self.callback_of(thread) if isinstance(thread, int) else None
        self.finding(clause, message, [r["seq"], *more], thread=thread, callback=callback, note=note,
                     site=self.site(r))  # fmt: skip

    def keep(self, r: Record, **extra: Any) -> Record:
        """What a rule keeps of record ``r`` to judge it later (:meth:`at` then names the same callback and
        site as now): its seq, thread, caller and the callback open around it, and ``extra``."""
        thread = r.get("os_tid")
        callback = self.callback_of(thread) if isinstance(thread, int) else None
        return {"seq": r["seq"], "os_tid": thread, "caller": r.get("caller"), "callback": callback, **extra}

    # -- the pass --------------------------------------------------------------------------------------------
    def judge(self, path: Path, rules: Iterable[type[StreamRule]]) -> list[StreamRule]:
        """Read ``path`` once, feeding each rule the records it reads; returns the rules (ended). A binary
        trace is read by :func:`conformance.validator.columns.judge_columns` (a record no rule acts on is
        never decoded), JSON Lines here, line by line; both hand every record a rule acts on to
        :meth:`take`."""
        started = time.perf_counter()
        live = [cls(self) for cls in rules]
        exact: dict[tuple[str, str], list[Callable[[Record], None]]] = {}
        anyname: dict[str, list[Callable[[Record], None]]] = {}
        for rule in live:
            for of_kind, named in rule.reads:
                if named is None:
                    anyname.setdefault(of_kind, []).append(rule.on)
                else:
                    exact.setdefault((of_kind, named), []).append(rule.on)
        # one list of handlers per (kind, name), the wildcards of its kind appended: one lookup a record
        handlers: dict[tuple[str, str | None], list[Callable[[Record], None]]] = {}
        for key, fns in exact.items():
            handlers[key] = [*fns, *anyname.get(key[0], [])]
        self._handlers, self._anyname = handlers, anyname
        count = 0
        with _open(path) as fh:
            binary = fh.read(len(FRAMES_MAGIC)) == FRAMES_MAGIC
            fh.seek(0)
            if binary and self.columnar:
                from conformance.validator.columns import judge_columns  # it imports this module

                count = judge_columns(self, path, live)
            elif binary:  # every record decoded into its dict (what the columns are held equal to)
                for number, r in _binary_records(path):
                    count += 1
                    self.take(path, number, r)
            else:
                # read_records' loop, not the generator (a generator's hand-over per record is a good part of
                # a light rule's cost)
                take = self.take
                for number, line in enumerate(fh, 1):
                    if not line.endswith(b"\n"):
                        break  # the writer died mid-record: every complete record before it counts
                    record = _line_record(path, number, line)
                    if record is not None:
                        count += 1
                        take(path, number, record)
        self.records = count
        for rule in live:
            rule.end()
        self.seconds = time.perf_counter() - started
        return live

    def take(self, path: Path, number: int, r: Record) -> None:
        """One record (number ``number`` of ``path``, a dict with a str kind): checked (a malformed one raises
        :class:`HarnessError` naming ``file:number``), the moment's state kept (the callbacks open on each
        thread, the ThreadIDs, the proxy's notes), handed to every rule that reads it."""
        kind = r["kind"]
        name = r.get("name")
        thread = r.get("os_tid", 0)
        tid = r.get("tid")
        if (
            (name.__class__ is not str and (name is not None or kind in _NAMED))
            or thread.__class__ is not int
            or (tid is not None and tid.__class__ is not int)
            or (kind in _NAMED and r.get("phase", "whole") not in _PHASES)
        ):
            raise _refuse(path, number, _malformed(r))
        if tid and tid not in self.os_of:
            self.os_of[tid] = thread
            self.managed.add(thread)
        pushed: Frame | None = None
        if kind == "callback":
            phase = r.get("phase")
            if phase == "return":
                stack = self.stacks.get(thread)
                if stack:
                    stack.pop()
            elif phase == "enter":
                pushed = Frame(name or "?", r.get("hook") is True)
            if name == "ThreadAssignedToOSThread":
                args = r.get("args") or {}
                managed_id, os_id = args.get("managedThreadId"), args.get("osThreadId")
                if isinstance(managed_id, int) and isinstance(os_id, int) and managed_id and os_id:
                    self.os_of[managed_id] = os_id
        elif kind == "call":
            pass  # most records: nothing of the moment to keep
        elif kind == "mark":
            if isinstance(name, str) and name.startswith(NOTE_PREFIX):
                self.notes[name] = r
                if name == "proxy.module":
                    self._add_module(r.get("base"), r.get("path"))
        elif kind == "header":
            self.header = r
            info = self.proxy
            self._add_module(info.get("targetBase"), info.get("target"))
        elif kind == "counts":
            counts, hooks = r.get("counts"), r.get("hooks")
            self.counts = counts if isinstance(counts, dict) else {}
            self.hook_counts = hooks if isinstance(hooks, dict) else {}
        for handler in self._handlers.get((kind, name)) or self._anyname.get(kind, _NONE):
            handler(r)
        if pushed is not None:
            stack = self.stacks.get(thread)
            if stack is None:
                self.stacks[thread] = [pushed]
            else:
                stack.append(pushed)
        if tid:
            self.managed.add(thread)

    def _add_module(self, base: object, path: object) -> None:
        if isinstance(base, int) and isinstance(path, str) and base and path:
            if (base, path) not in self._modules:
                self._modules.append((base, path))
                self._modules.sort()
                self._sites.clear()
