"""The profiling API as one table: every interface in vtable order, every method with its signature.

The table is ``interfaces.txt`` beside this module (package data, read with :mod:`importlib.resources`:
the only file the model reads). Its format, one item per line::

    interface NAME : BASE IID          an interface (BASE ``-`` for none), then its methods in vtable order
    RETURN Name(type name, ...)        a method of the interface above
    # ...                              a comment

Signatures are read from dotnet/runtime's ``src/coreclr/inc/corprof.idl`` and ``cor.h``. The C++ headers
of the probe, the recording proxy, the fake runtime and the test fixtures are generated from this table
(``python -m conformance.codegen``).

Queries: :func:`interfaces`, :func:`interface`, :func:`callbacks` (every ICorProfilerCallback* method),
:func:`info_methods` (every ICorProfilerInfo* method), :func:`method`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from clr_model.errors import InvalidInput

__all__ = [
    "CALLBACK",
    "INFO",
    "TABLE_NAME",
    "Interface",
    "Method",
    "Param",
    "callbacks",
    "info_methods",
    "interface",
    "interfaces",
    "method",
    "parse",
    "table_text",
]

#: the interface families whose methods are the profiling API: the runtime calls ICorProfilerCallback*,
#: the profiler calls ICorProfilerInfo*
CALLBACK = "ICorProfilerCallback"
INFO = "ICorProfilerInfo"
#: the table's file name (package data of this package)
TABLE_NAME = "interfaces.txt"


@dataclass(frozen=True)
class Param:
    """A parameter: its C++ type as the table spells it and its name (the API's)."""

    type: str
    name: str


@dataclass(frozen=True)
class Method:
    """A method of an interface of the table."""

    ret: str
    name: str
    params: tuple[Param, ...]
    #: the interface that declares it (e.g. ICorProfilerInfo2)
    interface: str
    #: the family of that interface (:data:`CALLBACK`, :data:`INFO`), None for the others
    family: str | None
    #: the interface's version in its family (ICorProfilerInfo is 1, ICorProfilerInfo10 is 10); 0 outside
    version: int

    @property
    def signature(self) -> str:
        """The parameter list as C++ spells it: ``type name, type name``."""
        return ", ".join(f"{p.type} {p.name}" for p in self.params)

    @property
    def arg_names(self) -> str:
        """The parameter names as a call passes them on: ``name, name``."""
        return ", ".join(p.name for p in self.params)


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
_METHOD = re.compile(r"(\w+) (\w+)\(([^()]*)\)")


def _family(name: str) -> tuple[str | None, int]:
    for family in (CALLBACK, INFO):
        m = re.fullmatch(family + r"(\d*)", name)
        if m:
            return family, int(m.group(1) or 1)
    return None, 0


def parse(text: str, where: str = TABLE_NAME) -> tuple[Interface, ...]:
    """The interfaces of a table's text. A line that does not parse is :class:`InvalidInput` naming
    ``where:line``."""
    found: list[tuple[str, str | None, str, list[Method]]] = []
    seen: dict[str, int] = {}
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
        if name in seen:
            raise InvalidInput(f"{where}:{lineno}: {name} is declared twice (first at line {seen[name]})")
        seen[name] = lineno
        iface = found[-1][0]
        family, version = _family(iface)
        found[-1][3].append(Method(m.group(1), name, tuple(params), iface, family, version))
    return tuple(Interface(n, b, iid, tuple(ms), *_family(n)) for n, b, iid, ms in found)


def table_text() -> str:
    """The table's text (package data)."""
    return resources.files(__name__).joinpath(TABLE_NAME).read_text(encoding="utf-8")


@cache
def interfaces() -> tuple[Interface, ...]:
    """Every interface of the table, in its order (a base before the interfaces deriving from it)."""
    return parse(table_text(), f"clr_model/api/{TABLE_NAME}")


@cache
def _by_name() -> dict[str, Method]:
    return {m.name: m for i in interfaces() for m in i.methods}


def interface(name: str) -> Interface:
    """The interface ``name`` (:class:`InvalidInput` when the table has none)."""
    for iface in interfaces():
        if iface.name == name:
            return iface
    raise InvalidInput(f"{name!r} is no interface of the profiling API table")


def method(name: str) -> Method:
    """The method ``name`` (method names are unique in the table; :class:`InvalidInput` when unknown)."""
    found = _by_name().get(name)
    if found is None:
        raise InvalidInput(f"{name!r} is no method of the profiling API table")
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
