"""Where the fake world's names come from besides the invented ones (issue 22, "Reach"): a profiler that
filters on type and method names (as memory profilers and APM agents do) is reached only when the world
has a class it knows by name.

- :func:`profiler_strings`: the profiler's own string table, the printable ASCII strings (4 characters or
  more; as bytes, and as UTF-16LE, what a ``u"..."`` WCHAR literal is) of its ELF read-only data
  (``.rodata``), used as a fuzzing dictionary: those a C# program could declare as a (dotted) type or
  method name become class, method and module names (behaviour ``names.strings``);
- :func:`read_app`: the metadata of the user's own assembly (``fuzz --app APP.dll``, read with ``dnfile``):
  its module name, its types (namespace and name, generic arity, TypeDef token) and their methods (name,
  MethodDef token), which the world loads with those tokens (behaviour ``names.app``).

A :class:`Dictionary` is part of an example's meaning (which bytes give which names): a reproducer keeps
it (:meth:`Dictionary.to_json`) so its program decodes to its commands on any machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from conformance.core.errors import InputError

__all__ = ["AppMethod", "AppType", "Dictionary", "profiler_strings", "read_app"]

#: A name a C# program could declare: identifiers joined by dots (a namespace-qualified type name), with a
#: generic arity suffix as metadata spells it (``List`1``).
_DECLARABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:`[0-9]{1,2})?")
_ASCII_RUN = re.compile(rb"[\x20-\x7e]{4,}")
_UTF16_RUN = re.compile(rb"(?:[\x20-\x7e]\x00){4,}")
#: At most this many strings from one profiler (the dictionary is indexed by two bytes).
MAX_STRINGS = 4096
#: The longest name taken (a longer string is not a name a program declares by hand).
MAX_NAME = 200


@dataclass(frozen=True)
class AppMethod:
    name: str
    token: int


@dataclass(frozen=True)
class AppType:
    """A TypeDef of the app: its full name as ``GetTypeDefProps`` answers it (namespace.name, the arity
    suffix included), its generic arity, its token and its methods."""

    name: str
    token: int
    arity: int = 0
    methods: tuple[AppMethod, ...] = ()


@dataclass(frozen=True)
class Dictionary:
    """The names an example may draw besides its invented ones: ``strings`` (the profiler's), and the app's
    module name and types (``--app``)."""

    strings: tuple[str, ...] = ()
    app_module: str = ""
    app_types: tuple[AppType, ...] = ()
    #: where the app came from (for the summary; not part of an example's meaning)
    app_path: str = field(default="", compare=False)
    #: the IL bodies the world's methods have (:mod:`conformance.fuzz.ilpool`): (MethodDef token, body),
    #: and the assembly they come from
    il: tuple[tuple[int, bytes], ...] = ()
    il_from: str = ""

    def __bool__(self) -> bool:
        return bool(self.strings or self.app_types or self.il)

    @cached_property
    def module_names(self) -> tuple[str, ...]:
        """The strings as module names (a file name: ``.dll`` added unless it ends in ``.dll``/``.exe``)."""
        return tuple(s if s.endswith((".dll", ".exe")) else s + ".dll" for s in self.strings)

    @cached_property
    def loadable(self) -> tuple[AppType, ...]:
        """The app's types the world loads: the non-generic ones (a generic type's classes are its
        instantiations, whose type arguments the fake runtime does not answer: GetClassIDInfo2 says 0)."""
        return tuple(t for t in self.app_types if t.arity == 0)

    @cached_property
    def class_names(self) -> tuple[str, ...]:
        """The loadable app types' names, then the strings (an index below ``len(loadable)`` is an app
        type)."""
        return tuple(t.name for t in self.loadable) + self.strings

    def to_json(self) -> dict[str, Any]:
        return {
            "strings": list(self.strings),
            "app_module": self.app_module,
            "app_types": [{"name": t.name, "token": t.token, "arity": t.arity,
                           "methods": [[m.name, m.token] for m in t.methods]} for t in self.app_types],
            "il": [[token, body.hex()] for token, body in self.il],
            "il_from": self.il_from,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> Dictionary:
        """A reproducer's dictionary; a bad one is one :class:`InputError` line naming ``where``."""
        try:
            strings = tuple(str(s) for s in data.get("strings", []))
            module = str(data.get("app_module", ""))
            types = tuple(
                AppType(str(t["name"]), int(t["token"]), int(t.get("arity", 0)),
                        tuple(AppMethod(str(m[0]), int(m[1])) for m in t.get("methods", [])))
                for t in data.get("app_types", [])
            )
            il = tuple((int(b[0]), bytes.fromhex(str(b[1]))) for b in data.get("il", []))
            il_from = str(data.get("il_from", ""))
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"{where}: not a name dictionary ({type(exc).__name__}: {exc})") from None
        return cls(strings, module, types, il=il, il_from=il_from)


def declarable(text: str) -> bool:
    """Whether ``text`` is a name a C# program could declare (a dotted identifier, a generic arity)."""
    return len(text) <= MAX_NAME and _DECLARABLE.fullmatch(text) is not None


def profiler_strings(path: Path) -> tuple[str, ...]:
    """The declarable names among the printable strings of ``path``'s ``.rodata`` (in the order they
    first appear; none when the library has no such section or is no ELF file: the fuzzer says so)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with path.open("rb") as f:
            section = ELFFile(f).get_section_by_name(".rodata")
            data = section.data() if section is not None else b""
    except (OSError, ELFError) as exc:
        raise InputError(f"{path}: cannot read its string table: {exc}") from None
    found: dict[str, None] = {}
    runs = [m.group() for m in _ASCII_RUN.finditer(data)]
    runs += [m.group().decode("utf-16-le").encode() for m in _UTF16_RUN.finditer(data)]
    for run in runs:
        # a run may hold several NUL-less strings' worth of text: its words are candidates too
        for text in (run.decode(), *run.decode().split()):
            if declarable(text):
                found.setdefault(text)
    return tuple(found)[:MAX_STRINGS]


def read_app(path: Path) -> Dictionary:
    """The module name and types (with their methods) of the .NET assembly ``path``; a file that is not
    one is one :class:`InputError` line."""
    import dnfile
    import pefile  # type: ignore[import-untyped]  # dnfile's dependency: its PEFormatError

    if not path.is_file():
        raise InputError(f"--app {path}: no such file")
    try:
        pe = dnfile.dnPE(str(path))  # type: ignore[no-untyped-call]
    except (OSError, pefile.PEFormatError) as exc:
        raise InputError(f"--app {path}: not a .NET assembly (not a PE file: {exc})") from None
    try:
        net = pe.net
        tables = net.mdtables if net is not None else None
        if tables is None or tables.TypeDef is None:
            raise InputError(f"--app {path}: not a .NET assembly (a PE file with no CLI metadata)")
        module = str(tables.Module.rows[0].Name) if tables.Module and tables.Module.rows else path.name
        arity: dict[int, int] = {}
        for gp in tables.GenericParam.rows if tables.GenericParam else []:
            owner = gp.Owner
            if owner.table is not None and owner.table.name == "TypeDef":
                arity[owner.row_index] = arity.get(owner.row_index, 0) + 1
        types: list[AppType] = []
        for index, row in enumerate(tables.TypeDef.rows, start=1):
            name, namespace = str(row.TypeName), str(row.TypeNamespace)
            if name == "<Module>" and not namespace:
                continue  # the module's global type: no class a runtime loads for an allocation
            full = f"{namespace}.{name}" if namespace else name
            methods = tuple(AppMethod(str(m.row.Name), 0x0600_0000 | m.row_index)
                            for m in row.MethodList if m.row is not None)
            types.append(AppType(full, 0x0200_0000 | index, arity.get(index, 0), methods))
    except InputError:
        raise
    except Exception as exc:  # dnfile reads a damaged table lazily: any error is a bad assembly
        raise InputError(f"--app {path}: unreadable .NET metadata ({type(exc).__name__}: {exc})") from None
    finally:
        pe.close()
    if not types:
        raise InputError(f"--app {path}: the assembly declares no types")
    return Dictionary(app_module=module, app_types=tuple(types), app_path=str(path))
