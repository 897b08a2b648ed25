"""Where an address is in a profiler's own code: function (demangled) and file:line, from the shared object's
symbols and DWARF line table (pyelftools), or ``lib.so+0xOFF`` when the object is stripped.

A recording names code by (module path, offset from the module's load base); :class:`Symbolizer` answers for
each such pair, reading each module once (its function symbols sorted by address and its line table decoded
into sorted rows) and never loading it. Names are demangled with the C++ runtime's own demangler
(``__cxa_demangle`` of libstdc++, through ctypes); where that is missing the mangled name is kept.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from conformance.core import interrupt

__all__ = ["Site", "Symbolizer", "demangle", "symbol_at"]


class Site(BaseModel):
    """A place in a module: its file, the offset, and what the symbols and line table say of it."""

    model_config = ConfigDict(frozen=True)

    module: str
    offset: int
    function: str | None = None
    file: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        """``file:line``, or ``lib.so+0xOFF`` without a line table."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return f"{Path(self.module).name}+{self.offset:#x}"

    def text(self) -> str:
        """``function (file:line)``, ``function (lib.so+0xOFF)`` or ``lib.so+0xOFF``."""
        if self.function:
            return f"{self.function} ({self.where})"
        return self.where


@functools.cache
def _cxa_demangle() -> Callable[..., int | None] | None:
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        lib = ctypes.CDLL(name)
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return cast("Callable[..., Any]", fn)


@functools.cache
def _free() -> Callable[[int], None]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    fn = libc.free
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = None
    return cast("Callable[..., Any]", fn)


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name (``_ZN3foo3barEv`` -> ``foo::bar()``); any other name unchanged."""
    fn = _cxa_demangle()
    if fn is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int(0)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace")
    finally:
        _free()(out)


@dataclass
class _Module:
    """What one module's symbols and line table say, sorted by address for lookups."""

    func_starts: list[int]
    funcs: list[tuple[int, int, str]]  # (start, end, name)
    line_addrs: list[int]
    lines: list[tuple[int, str, int]]  # (address, file, line): each row holds until the next address
    line_ends: list[int]  # sorted end_sequence addresses: no row holds from there


def _file_names(header: Any) -> list[str | None]:
    """A line program's file table by the index its rows and DW_AT_call_file use (DWARF 5 counts from 0,
    earlier versions from 1: index 0 is then None), each name joined to its directory."""
    entries = header["file_entry"]
    dirs = [d.decode(errors="replace") for d in header["include_directory"]]
    v5 = int(header["version"]) >= 5
    out: list[str | None] = [] if v5 else [None]
    for entry in entries:
        name = entry.name.decode(errors="replace")
        d = entry.dir_index if v5 else entry.dir_index - 1
        out.append(name if name.startswith("/") or not 0 <= d < len(dirs) else f"{dirs[d]}/{name}")
    return out


def _line_programs(dwarf: Any) -> Iterator[tuple[Any, Any, list[str | None]]]:
    """Each compile unit of ``dwarf`` that has a line program: the unit, its line program, its file table."""
    for cu in dwarf.iter_CUs():
        program = dwarf.line_program_for_CU(cu)
        if program is None:
            continue
        yield cu, program, _file_names(program.header)


def _function_symbols(elf: Any) -> list[tuple[int, int, str]]:
    """(start, end, name) of every defined function symbol of ``.symtab``, or ``.dynsym`` without one."""
    from elftools.elf.sections import SymbolTableSection

    funcs: list[tuple[int, int, str]] = []
    for section_name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(section_name)
        if not isinstance(section, SymbolTableSection):
            continue
        for sym in section.iter_symbols():
            defined = sym["st_value"] and sym["st_shndx"] != "SHN_UNDEF"
            if sym["st_info"]["type"] == "STT_FUNC" and defined and sym.name:
                start = int(sym["st_value"])
                funcs.append((start, start + max(int(sym["st_size"]), 1), str(sym.name)))
        if funcs:
            break
    return funcs


def symbol_at(module: Path, offset: int) -> str | None:
    """The function symbol (``.symtab``, else ``.dynsym``) whose value is ``offset`` in ``module``."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with interrupt.opening(lambda: module.open("rb")) as fh:  # a signal never leaves it open
            return next((name for start, _, name in _function_symbols(ELFFile(fh)) if start == offset), None)
    except (OSError, ELFError):
        return None


def _read_module(path: Path) -> _Module:
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.elf.elffile import ELFFile

    funcs: list[tuple[int, int, str]] = []
    rows: list[tuple[int, str, int]] = []
    ends: set[int] = set()
    try:
        with interrupt.opening(lambda: path.open("rb")) as fh:  # a signal never leaves it open
            elf = ELFFile(fh)
            funcs = _function_symbols(elf)
            if elf.has_dwarf_info():
                for _, program, files in _line_programs(elf.get_dwarf_info()):
                    for entry in program.get_entries():
                        state = entry.state
                        if state is None:
                            continue
                        if state.end_sequence:
                            ends.add(int(state.address))
                            continue
                        name = files[state.file] if 0 <= state.file < len(files) else None
                        if name is None:
                            continue
                        rows.append((int(state.address), name, int(state.line)))
    except (OSError, ELFError, DWARFError, ValueError, KeyError, AttributeError):
        pass
    funcs.sort()
    # by address only, stable: of the rows a line program gives one address, the last one holds (as for
    # addr2line), so program order is kept among them, never the file names' order
    rows.sort(key=lambda row: row[0])
    return _Module(func_starts=[f[0] for f in funcs], funcs=funcs, line_addrs=[r[0] for r in rows],
                   lines=rows, line_ends=sorted(ends))  # fmt: skip


#: where library headers live: a line there (inlined std::thread, sleep_for) is not the profiler's own code;
#: sources built below /usr/src or /usr/local/src are a profiler's own
_LIBRARY_PREFIXES = ("/usr/",)
_OWN_PREFIXES = ("/usr/src/", "/usr/local/src/")


#: a std::thread's body as libstdc++ names the function a thread starts in
_STD_THREAD_RUN = re.compile(
    r"^std::thread::_State_impl<std::thread::_Invoker<std::tuple<(.+?) ?> > >::_M_run\(\)$"
)


def _thread_body(function: str) -> str:
    """A std::thread's start routine by its callable, when the callable is a lambda (its name says where it
    was written): ``X (std::thread body)`` for libstdc++'s
    ``std::thread::_State_impl<std::thread::_Invoker<std::tuple<X> > >::_M_run()``; a function pointer or a
    std::function (only types in the name) keeps libstdc++'s name."""
    found = _STD_THREAD_RUN.match(function)
    return f"{found.group(1)} (std::thread body)" if found and "{lambda" in found.group(1) else function


def _library(file: str | None) -> bool:
    return file is not None and file.startswith(_LIBRARY_PREFIXES) and not file.startswith(_OWN_PREFIXES)


def _unit_at(dwarf: Any, address: int) -> Any:
    """The compile unit whose code holds ``address``: from .debug_aranges, else the unit whose top DIE's
    range holds it (None when none does)."""
    aranges = dwarf.get_aranges()
    if aranges is not None:
        offset = aranges.cu_offset_at_addr(address)
        if offset is not None:
            return dwarf.get_CU_at(offset)
    for cu in dwarf.iter_CUs():
        if any(lo <= address < hi for lo, hi in _die_ranges(dwarf, cu, cu.get_top_DIE())):
            return cu
    return None


def _die_ranges(dwarf: Any, cu: Any, die: Any) -> list[tuple[int, int]]:
    """The address ranges of a DIE: low_pc/high_pc, or its DW_AT_ranges list."""
    from elftools.dwarf.ranges import BaseAddressEntry

    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        low = int(attrs["DW_AT_low_pc"].value)
        high = int(attrs["DW_AT_high_pc"].value)
        return [(low, high if attrs["DW_AT_high_pc"].form == "DW_FORM_addr" else low + high)]
    lists = dwarf.range_lists() if "DW_AT_ranges" in attrs else None
    if lists is None:
        return []
    top = cu.get_top_DIE().attributes
    base = int(top["DW_AT_low_pc"].value) if "DW_AT_low_pc" in top else 0
    out = []
    for entry in lists.get_range_list_at_offset(int(attrs["DW_AT_ranges"].value), cu=cu):
        if isinstance(entry, BaseAddressEntry):
            base = int(entry.base_address)
        else:
            shift = 0 if getattr(entry, "is_absolute", False) else base
            out.append((int(entry.begin_offset) + shift, int(entry.end_offset) + shift))
    return out


#: a compile unit's inlined calls: (low, high, depth, call file, call line), sorted by low
_Inlined = list[tuple[int, int, int, str, int]]


def _read_inlined(path: Path, address: int) -> tuple[list[tuple[int, int]], _Inlined] | None:
    """The inlined calls of the compile unit of ``path`` that holds ``address``: the unit's address ranges,
    and for each call its range, its depth and the line in the function the code was inlined into. Only
    that unit's DIEs are read."""
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with interrupt.opening(lambda: path.open("rb")) as fh:  # a signal never leaves it open
            elf = ELFFile(fh)
            if not elf.has_dwarf_info():
                return None
            dwarf = elf.get_dwarf_info()
            cu = _unit_at(dwarf, address)
            program = dwarf.line_program_for_CU(cu) if cu is not None else None
            if program is None:
                return None
            files = _file_names(program.header)
            out: _Inlined = []
            stack: list[int] = []  # the depth of each open DIE with children
            for die in cu.iter_DIEs():
                if die.is_null():
                    if stack:
                        stack.pop()
                    continue
                depth = len(stack)
                if die.has_children:
                    stack.append(depth)
                if die.tag != "DW_TAG_inlined_subroutine":
                    continue
                attrs = die.attributes
                call_file, call_line = attrs.get("DW_AT_call_file"), attrs.get("DW_AT_call_line")
                if call_file is None or call_line is None:
                    continue
                index = int(call_file.value)
                name = files[index] if 0 <= index < len(files) else None
                if name is not None:
                    out += [(lo, hi, depth, name, int(call_line.value))
                            for lo, hi in _die_ranges(dwarf, cu, die) if hi > lo]  # fmt: skip
            return _die_ranges(dwarf, cu, cu.get_top_DIE()), sorted(out)
    except (OSError, ELFError, DWARFError, ValueError, KeyError, AttributeError, TypeError):
        return None


class Symbolizer:
    """Sites of (module, offset) pairs; each module read once. A return address names the instruction after
    the call: :meth:`site` takes ``return_address=True`` to look up the call itself (offset - 1)."""

    def __init__(self) -> None:
        self._modules: dict[str, _Module] = {}
        self._sites: dict[tuple[str, int, bool], Site] = {}
        #: a module's inlined calls, per compile unit, read the first time a line of that unit falls in a
        #: library header (module -> each unit read: its address ranges and its calls)
        self._inline: dict[str, list[tuple[list[tuple[int, int]], _Inlined]]] = {}

    def _module(self, module: str) -> _Module:
        found = self._modules.get(module)
        if found is None:
            found = _read_module(Path(module))
            self._modules[module] = found
        return found

    def site(self, module: str, offset: int, *, return_address: bool = False) -> Site:
        key = (module, offset, return_address)
        found = self._sites.get(key)
        if found is None:
            found = self._resolve(module, offset, offset - 1 if return_address and offset > 0 else offset)
            self._sites[key] = found
        return found

    def _resolve(self, module: str, offset: int, lookup: int) -> Site:
        mod = self._module(module)
        function = None
        k = bisect.bisect_right(mod.func_starts, lookup) - 1
        if k >= 0 and lookup < mod.funcs[k][1]:
            function = _thread_body(demangle(mod.funcs[k][2]))
        file = line = None
        j = bisect.bisect_right(mod.line_addrs, lookup) - 1
        if j >= 0:
            address, name, number = mod.lines[j]
            e = bisect.bisect_right(mod.line_ends, address)
            ended = e < len(mod.line_ends) and mod.line_ends[e] <= lookup
            if not ended and number > 0:
                file, line = name, number
        if _library(file):  # inlined library code: the profiler's own line that called it
            own = [(depth, f, n) for lo, hi, depth, f, n in self._inlined(module, lookup)
                   if lo <= lookup < hi and not _library(f)]  # fmt: skip
            if own:
                _, file, line = max(own)
        return Site(module=module, offset=offset, function=function, file=file, line=line)

    def _inlined(self, module: str, address: int) -> _Inlined:
        """The inlined calls of the compile unit holding ``address`` (read once per unit)."""
        units = self._inline.setdefault(module, [])
        for ranges, calls in units:
            if any(low <= address < high for low, high in ranges):
                return calls
        found = _read_inlined(Path(module), address)
        if found is None:
            return []
        ranges, calls = found
        units.append((ranges or [(address, address + 1)], calls))
        return calls
