"""The profiling API as one table: every interface in vtable order, every method with its signature and the
facts the rules, the recorders and the generators need.

The table is ``interfaces.txt`` beside this module (package data, read with :mod:`importlib.resources`:
the only file the model reads). Its format, one item per line::

    interface NAME : BASE IID                  an interface (BASE ``-`` for none), then its methods in
                                               vtable order
    RETURN Name(type name, ...)  [fact, ...]   a method of the interface above, with its facts (optional)
    # ...                                      a comment (``# uncertain: ...`` above a fact the sources do
                                               not settle: the fact keeps what the harness did before)

Signatures are read from dotnet/runtime's ``src/coreclr/inc/corprof.idl`` and ``cor.h``. A fact is a
:class:`Fact` name, or ``monitor=FLAG`` (the COR_PRF_MONITOR flag that enables a callback) or
``buffer=SIZE/BUFFER/COUNT`` (a caller-allocated buffer's parameters where :func:`buffer_methods`' reading
of the signature gets them wrong). What the signature says is never repeated as a fact: a method's
interface and version, its caller-allocated buffer (:func:`buffer_methods`), the hooks a method registers
(:func:`hook_registrations`, from the FunctionEnter*/Leave*/Tailcall*/FunctionIDMapper* parameters).

The C++ headers of the probe, the recording proxy, the fake runtime and the test fixtures are generated
from this table (``python -m conformance.codegen``).

Queries: :func:`interfaces`, :func:`interface`, :func:`callbacks` (every ICorProfilerCallback* method),
:func:`info_methods` (every ICorProfilerInfo* method), :func:`method`, :func:`with_fact`,
:func:`names_with`, :func:`buffer_methods`, :func:`hook_registrations`, :func:`hooks_of`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from types import MappingProxyType

from clr_model.errors import InvalidInput
from clr_model.flags import CorPrfMonitor

__all__ = [
    "CALLBACK",
    "INFO",
    "TABLE_NAME",
    "BufferShape",
    "Fact",
    "HookKind",
    "HookRegistration",
    "Interface",
    "Method",
    "Param",
    "buffer_methods",
    "callbacks",
    "hook_registrations",
    "hooks_of",
    "info_methods",
    "interface",
    "interfaces",
    "method",
    "names_with",
    "parse",
    "table_text",
    "with_fact",
]

#: the interface families whose methods are the profiling API: the runtime calls ICorProfilerCallback*,
#: the profiler calls ICorProfilerInfo*
CALLBACK = "ICorProfilerCallback"
INFO = "ICorProfilerInfo"
#: the table's file name (package data of this package)
TABLE_NAME = "interfaces.txt"


class Fact(StrEnum):
    """A fact of a method, as the table writes it in the brackets after the signature."""

    # --- callbacks: what the runtime does when it makes them
    #: delivered inside a garbage collection (the runtime is suspended for it)
    GC = "gc"
    #: opens or closes one garbage collection's callbacks (GarbageCollectionStarted/Finished)
    GC_BOUND = "gc-bound"
    #: reports the object ranges a compacting garbage collection moved (MovedReferences, MovedReferences2)
    MOVES = "moves"
    #: reports the object ranges that survived a non-compacting garbage collection
    SURVIVORS = "survivors"
    #: hands the profiler its ICorProfilerInfo (the profiler's session starts with it)
    INITIALIZES = "initializes"
    #: a managed thread's life begins or ends (its ThreadID parameter names it)
    THREAD_LIFETIME = "thread-lifetime"
    #: the notification of an exception clause (catch, finally, filter) that GetNotifiedExceptionClauseInfo
    #: answers about: its ...Enter callback opens it, its ...Leave callback closes it (EXC-01)
    CLAUSE_NOTICE = "clause-notice"
    #: a recorder (the proxy, the fake runtime) counts it always and writes it only when the profiler calls
    #: the runtime in it
    LAZY = "lazy"
    #: the probe's plan ``"record": ["*"]`` leaves it out (counts it instead); every such callback is lazy
    HIGH_VOLUME = "high-volume"
    # --- ICorProfilerInfo methods: what a call does
    #: triggers a garbage collection
    TRIGGERS_GC = "triggers-gc"
    #: blocks the calling thread until other threads move (suspends them, or waits for them)
    BLOCKS = "blocks"
    #: recorded at entry and at return (other threads' records, or callbacks, may come between)
    TWO_PHASE = "two-phase"
    #: takes an ObjectID (``objectId``) and reads the object
    INSPECTS = "inspects"
    #: sets the profiler's event mask
    SETS_EVENT_MASK = "sets-event-mask"
    #: answers the module and the methodDef token of a FunctionID (``pModuleId``, ``pToken``)
    FUNCTION_TOKEN = "function-token"
    #: named by the DoStackSnapshot page's Asynchronous Stack Walk section (a walk of the current thread made
    #: by hijacking its instruction pointer): the validator's ASYNC-05 allows it inside a signal handler
    ASYNC_WALK = "async-walk"
    #: asks the runtime to recompile (module, methodDef) pairs (``moduleIds``/``methodIds``): the ReJIT
    #: protocol's request (clr_model.rejit)
    REJIT_REQUEST = "rejit-request"
    #: asks the runtime to revert recompiled (module, methodDef) pairs to their original versions
    REVERTS = "reverts"
    #: its page says to call it from a thread the profiler created, not from a runtime thread executing a
    #: profiler callback (RequestReJIT, REJIT-09)
    OWN_THREAD = "own-thread"
    #: its page says it may be called as soon as the ID it is given exists ("Although the GetModuleInfo
    #: method may be called as soon as the module's ID exists, ..."): LDS-03 leaves it alone inside
    #: ModuleLoadStarted, whose page says otherwise
    EARLY = "early"
    # --- how the harness's native parts treat a method (the generators leave these to hand-written code)
    #: the recording proxy implements it by hand (proxy/objects.cpp), not the generated forwarding
    PROXY_BY_HAND = "proxy-by-hand"
    #: the fake runtime implements or makes it by hand (fakeruntime/fakeruntime.cpp)
    FAKE_BY_HAND = "fake-by-hand"
    #: the fake runtime answers it from the world state it was sent (``answer_<Name>``)
    FAKE_ANSWERS = "fake-answers"


_CALLBACK_ONLY = frozenset({CALLBACK})
_INFO_ONLY = frozenset({INFO})
#: the families each fact may be written on (None: the other interfaces, e.g. IMetaDataImport)
_APPLIES: Mapping[Fact, frozenset[str | None]] = {
    Fact.GC: _CALLBACK_ONLY,
    Fact.GC_BOUND: _CALLBACK_ONLY,
    Fact.MOVES: _CALLBACK_ONLY,
    Fact.SURVIVORS: _CALLBACK_ONLY,
    Fact.INITIALIZES: _CALLBACK_ONLY,
    Fact.THREAD_LIFETIME: _CALLBACK_ONLY,
    Fact.CLAUSE_NOTICE: _CALLBACK_ONLY,
    Fact.LAZY: _CALLBACK_ONLY,
    Fact.HIGH_VOLUME: _CALLBACK_ONLY,
    Fact.TRIGGERS_GC: _INFO_ONLY,
    Fact.BLOCKS: _INFO_ONLY,
    Fact.TWO_PHASE: _INFO_ONLY,
    Fact.INSPECTS: _INFO_ONLY,
    Fact.SETS_EVENT_MASK: _INFO_ONLY,
    Fact.FUNCTION_TOKEN: _INFO_ONLY,
    Fact.ASYNC_WALK: _INFO_ONLY,
    Fact.REJIT_REQUEST: _INFO_ONLY,
    Fact.REVERTS: _INFO_ONLY,
    Fact.OWN_THREAD: _INFO_ONLY,
    Fact.EARLY: _INFO_ONLY,
    Fact.PROXY_BY_HAND: frozenset({CALLBACK, INFO}),
    Fact.FAKE_BY_HAND: frozenset({CALLBACK, INFO}),
    Fact.FAKE_ANSWERS: frozenset({INFO, None}),
}


class HookKind(StrEnum):
    """How the runtime calls the hooks a registration hands it: named by the type of its enter hook (or
    FunctionIDMapper for both mappers)."""

    #: SetEnterLeaveFunctionHooks: the .NET Framework 1.x hooks (FunctionEnter/Leave/Tailcall)
    FUNCTION_ENTER = "FunctionEnter"
    #: FunctionEnter2-style: called as ordinary functions with the function's ID, client data, frame info
    #: and argument info (SetEnterLeaveFunctionHooks2)
    FUNCTION_ENTER2 = "FunctionEnter2"
    #: the fast path: called straight from JIT code with live registers, FunctionIDOrClientID only
    #: (SetEnterLeaveFunctionHooks3)
    FUNCTION_ENTER3 = "FunctionEnter3"
    #: the slow path: FunctionIDOrClientID and an ELT info handle to ask GetFunctionEnter3Info with
    #: (SetEnterLeaveFunctionHooks3WithInfo)
    FUNCTION_ENTER3_WITH_INFO = "FunctionEnter3WithInfo"
    #: maps a FunctionID to the client data its hooks get (SetFunctionIDMapper, SetFunctionIDMapper2)
    FUNCTION_ID_MAPPER = "FunctionIDMapper"


@dataclass(frozen=True)
class Param:
    """A parameter: its C++ type as the table spells it and its name (the API's)."""

    type: str
    name: str


@dataclass(frozen=True)
class BufferShape:
    """A caller-allocated buffer of an ICorProfilerInfo method: its size, buffer and count parameters."""

    size: str
    buffer: str
    count: str


@dataclass(frozen=True)
class HookRegistration:
    """An ICorProfilerInfo method that hands the runtime hooks: its hook parameters and their types."""

    method: str
    kind: HookKind
    #: the hook parameters' names, in order (e.g. pFuncEnter, pFuncLeave, pFuncTailcall)
    parameters: tuple[str, ...]
    #: their function types, which name the hooks (e.g. FunctionEnter2, FunctionLeave2, FunctionTailcall2)
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class Method:
    """A method of an interface of the table, with its facts."""

    ret: str
    name: str
    params: tuple[Param, ...]
    #: the interface that declares it (e.g. ICorProfilerInfo2)
    interface: str
    #: the family of that interface (:data:`CALLBACK`, :data:`INFO`), None for the others
    family: str | None
    #: the interface's version in its family (ICorProfilerInfo is 1, ICorProfilerInfo10 is 10); 0 outside
    version: int
    facts: frozenset[Fact] = frozenset()
    #: the COR_PRF_MONITOR flag the runtime needs set before it makes the callback (None: always made)
    monitor: str | None = None
    #: its caller-allocated buffer (ICorProfilerInfo methods), None when it has none
    buffer: BufferShape | None = None

    @property
    def signature(self) -> str:
        """The parameter list as C++ spells it: ``type name, type name``."""
        return ", ".join(f"{p.type} {p.name}" for p in self.params)

    @property
    def arg_names(self) -> str:
        """The parameter names as a call passes them on: ``name, name``."""
        return ", ".join(p.name for p in self.params)

    def has(self, fact: Fact) -> bool:
        return fact in self.facts


@dataclass(frozen=True)
class Interface:
    """An interface of the table, its methods in vtable order."""

    name: str
    base: str | None
    iid: str
    methods: tuple[Method, ...]
    family: str | None
    version: int


_IFACE = re.compile(r"interface (\w+) : (\S+) ([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
                    r"[0-9A-Fa-f]{12})")
_METHOD = re.compile(r"(\w+\*?) (\w+)\(([^()]*)\)(?:\s+\[([^\[\]]*)\])?")
_COUNT = re.compile(r"c(ch)?[A-Z]\w*")
_OUT_POINTER = re.compile(r"p[a-z]*[A-Z]")
_HOOK_TYPE = re.compile(r"(Function(?:Enter|Leave|Tailcall)(?:\d|3WithInfo)?|FunctionIDMapper2?)\*")


def _family(name: str) -> tuple[str | None, int]:
    for family in (CALLBACK, INFO):
        m = re.fullmatch(family + r"(\d*)", name)
        if m:
            return family, int(m.group(1) or 1)
    return None, 0


def derived_buffer(params: tuple[Param, ...]) -> BufferShape | None:
    """A (cX, pcX, X) buffer read from a signature: a by-value count ``c…``/``cch…`` (ULONG, ULONG32 or
    UINT), its ``pc…`` out-count, and the pointer next to them that is the buffer (after the out-count,
    else before the count; a ``pX``-named pointer is an out-value, not the buffer)."""
    names = [p.name for p in params]
    for k, p in enumerate(params):
        if not _COUNT.fullmatch(p.name) or p.type not in ("ULONG", "ULONG32", "UINT"):
            continue
        count = "p" + p.name
        if count not in names:
            continue
        j = names.index(count)
        after = params[j + 1] if j + 1 < len(params) else None
        before = params[k - 1] if k > 0 else None
        for cand in (after, before):
            if cand is not None and cand.type.endswith("*") and not _OUT_POINTER.match(cand.name):
                return BufferShape(p.name, cand.name, count)
    return None


def _facts(
    text: str, name: str, params: tuple[Param, ...], family: str | None, where: str
) -> tuple[frozenset[Fact], str | None, BufferShape | None]:
    """The facts written after a signature, checked: a known fact on a family it applies to."""
    facts: set[Fact] = set()
    monitor: str | None = None
    buffer: BufferShape | None = None
    for item in (part.strip() for part in text.split(",")) if text.strip() else ():
        key, _, value = item.partition("=")
        if key == "monitor" and value:
            if family != CALLBACK:
                raise InvalidInput(f"{where}: {name}: monitor= is a fact of callbacks")
            if value not in CorPrfMonitor.__members__:
                raise InvalidInput(f"{where}: {name}: monitor={value} is no COR_PRF_MONITOR flag")
            monitor = value
        elif key == "buffer" and value:
            parts = value.split("/")
            known = {p.name for p in params}
            if family != INFO or len(parts) != 3 or not set(parts) <= known:
                raise InvalidInput(
                    f"{where}: {name}: buffer= takes SIZE/BUFFER/COUNT, three parameters of an "
                    f"ICorProfilerInfo method (got {value!r})"
                )
            buffer = BufferShape(*parts)
        elif item in Fact.__members__.values():
            fact = Fact(item)
            if family not in _APPLIES[fact]:
                raise InvalidInput(f"{where}: {name}: {fact} is no fact of {family or 'this interface'}")
            facts.add(fact)
        else:
            raise InvalidInput(
                f"{where}: {name}: unknown fact {item!r} (known: {', '.join(Fact)}, monitor=FLAG, "
                "buffer=SIZE/BUFFER/COUNT)"
            )
    if family == INFO and buffer is None:
        buffer = derived_buffer(params)
    return frozenset(facts), monitor, buffer


def parse(text: str, where: str = TABLE_NAME) -> tuple[Interface, ...]:
    """The interfaces of a table's text. A line that does not parse, or a fact that does not fit, is
    :class:`InvalidInput` naming ``where:line``."""
    found: list[tuple[str, str | None, str, list[Method]]] = []
    seen: dict[tuple[str, str], int] = {}  # (interface, or "" for the two families; name): its first line
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _IFACE.fullmatch(line)
        if m:
            name, base = m.group(1), (None if m.group(2) == "-" else m.group(2))
            if base is not None and base not in {f[0] for f in found}:
                raise InvalidInput(f"{where}:{lineno}: {name}'s base {base} is not declared above it")
            found.append((name, base, m.group(3).upper(), []))
            continue
        m = _METHOD.fullmatch(line)
        if not m or not found:
            raise InvalidInput(f"{where}:{lineno}: cannot parse {line!r}")
        params: list[Param] = []
        for part in m.group(3).split(",") if m.group(3).strip() else []:
            words = part.strip().rsplit(" ", 1)
            if len(words) != 2:
                raise InvalidInput(f"{where}:{lineno}: parameter {part.strip()!r} needs a type and a name")
            params.append(Param(words[0].strip(), words[1].strip()))
        name = m.group(2)
        iface = found[-1][0]
        family, version = _family(iface)
        # unique among the callbacks and Info methods, and in each other interface: those may reuse a name
        # (the enumerators' Skip, Reset, Clone, GetCount, Next; the function control's SetILFunctionBody)
        first = seen.setdefault(("" if family else iface, name), lineno)
        base = found[-1][1]
        while first == lineno and base is not None:  # nor may it be a method of a base (IUnknown's Release)
            first = seen.get(("" if _family(base)[0] else base, name), lineno)
            base = next(f[1] for f in found if f[0] == base)
        if first != lineno:
            raise InvalidInput(f"{where}:{lineno}: {name} is declared twice (first at line {first})")
        facts, monitor, buffer = _facts(m.group(4) or "", name, tuple(params), family, f"{where}:{lineno}")
        found[-1][3].append(
            Method(m.group(1), name, tuple(params), iface, family, version, facts, monitor, buffer)
        )
    return tuple(Interface(n, b, iid, tuple(ms), *_family(n)) for n, b, iid, ms in found)


def table_text() -> str:
    """The table's text (package data)."""
    return resources.files(__name__).joinpath(TABLE_NAME).read_text(encoding="utf-8")


@cache
def interfaces() -> tuple[Interface, ...]:
    """Every interface of the table, in its order (a base before the interfaces deriving from it)."""
    return parse(table_text(), f"clr_model/api/{TABLE_NAME}")


@cache
def _by_name() -> dict[str, Method | None]:
    """Every method name: the callback's or Info method's of that name, else the one interface's that declares
    it, or None when several interfaces of neither family do."""
    by_name: dict[str, Method | None] = {m.name: m for i in interfaces() if i.family for m in i.methods}
    others: dict[str, Method | None] = {}
    for m in (m for i in interfaces() if not i.family for m in i.methods):
        others[m.name] = None if m.name in others else m
    return {**others, **by_name}


def interface(name: str) -> Interface:
    """The interface ``name`` (:class:`InvalidInput` when the table has none)."""
    for iface in interfaces():
        if iface.name == name:
            return iface
    raise InvalidInput(f"{name!r} is no interface of the profiling API table")


def method(name: str) -> Method:
    """The method ``name``: a callback's or Info method's name is theirs; :class:`InvalidInput` when the table
    has none, or when several interfaces of neither family share it (ask :func:`interface` for it then)."""
    by_name = _by_name()
    if name not in by_name:
        raise InvalidInput(f"{name!r} is no method of the profiling API table")
    found = by_name[name]
    if found is None:
        owners = ", ".join(i.name for i in interfaces() if any(m.name == name for m in i.methods))
        raise InvalidInput(f"{name!r} is a method of several interfaces ({owners}): ask for its interface")
    return found


def _family_methods(family: str) -> tuple[Method, ...]:
    return tuple(m for i in interfaces() if i.family == family for m in i.methods)


@cache
def callbacks() -> tuple[Method, ...]:
    """Every ICorProfilerCallback* method, in vtable order (ICorProfilerCallback's first)."""
    return _family_methods(CALLBACK)


@cache
def info_methods() -> tuple[Method, ...]:
    """Every ICorProfilerInfo* method, in vtable order (ICorProfilerInfo's first)."""
    return _family_methods(INFO)


@cache
def with_fact(fact: Fact) -> tuple[Method, ...]:
    """Every method of the table with ``fact``, in table order."""
    return tuple(m for i in interfaces() for m in i.methods if fact in m.facts)


@cache
def names_with(*facts: Fact) -> frozenset[str]:
    """The names of the methods with any of ``facts``."""
    return frozenset(m.name for fact in facts for m in with_fact(fact))


@cache
def buffer_methods() -> Mapping[str, BufferShape]:
    """Every ICorProfilerInfo method with a caller-allocated (cX, pcX, X) buffer, and its parameters (read
    from its signature, or written in the table where the reading gets them wrong)."""
    return MappingProxyType({m.name: m.buffer for m in info_methods() if m.buffer is not None})


def _registration(m: Method) -> HookRegistration | None:
    hooks = [(p.name, match.group(1)) for p in m.params if (match := _HOOK_TYPE.fullmatch(p.type))]
    if not hooks:
        return None
    first = hooks[0][1]
    kind = HookKind.FUNCTION_ID_MAPPER if first.startswith("FunctionIDMapper") else HookKind(first)
    return HookRegistration(m.name, kind, tuple(n for n, _ in hooks), tuple(t for _, t in hooks))


@cache
def _registrations() -> tuple[HookRegistration, ...]:
    return tuple(r for m in info_methods() if (r := _registration(m)) is not None)


def hook_registrations(kinds: Iterable[HookKind] | None = None) -> tuple[HookRegistration, ...]:
    """Every ICorProfilerInfo method that hands the runtime hooks (of ``kinds``, or of any kind), in table
    order; read from the signatures (parameters of the API's FunctionEnter*, FunctionLeave*,
    FunctionTailcall* and FunctionIDMapper* types)."""
    wanted = None if kinds is None else frozenset(kinds)
    return tuple(r for r in _registrations() if wanted is None or r.kind in wanted)


def hooks_of(kinds: Iterable[HookKind]) -> tuple[str, ...]:
    """The names of the hooks (their function types: FunctionEnter2, FunctionIDMapper2, ...) the
    registrations of ``kinds`` hand the runtime, in table order."""
    return tuple(h for r in hook_registrations(kinds) for h in r.hooks)
