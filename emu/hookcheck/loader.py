"""Load a hook's machine code from an ELF shared object: segments, relocations, symbols, trap addresses.

The object's ``PT_LOAD`` segments are laid out at a chosen base (an ``ET_EXEC`` at its own addresses), its
dynamic relocations are applied (``RELATIVE``, ``GLOB_DAT``, ``JUMP_SLOT``, absolute and PC-relative word
relocations), and every symbol the object does not define (libc, the runtime, ...) is resolved to a *trap
address*: a slot in a region that is never mapped, so a call or jump out of the object, or a read of
another object's data, stops the emulation at an address that names the symbol. TLS and IRELATIVE
relocations are left unapplied (counted in :attr:`LoadedObject.unapplied`): their targets are no code the
checker could run.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.constants import P_FLAGS, SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

from clr_model.abi import ISA, Arch
from conformance.core.errors import InputError
from conformance.core.symbols import demangle
from emu.errors import EmuError

__all__ = ["PAGE", "Arch", "HookInputError", "LoadedObject", "Segment", "load_object"]

PAGE = 0x1000

#: relocation type numbers (System V i386 / AMD64 psABI)
_RELOCATIONS: dict[Arch, dict[str, int]] = {
    "x86": {"32": 1, "PC32": 2, "GLOB_DAT": 6, "JUMP_SLOT": 7, "RELATIVE": 8},
    "x64": {"64": 1, "PC32": 2, "GLOB_DAT": 6, "JUMP_SLOT": 7, "RELATIVE": 8, "32": 10, "32S": 11},
}
_MACHINE: dict[Arch, str] = {"x86": "EM_386", "x64": "EM_X86_64"}
#: where trap addresses live (never mapped)
_TRAP_REGIONS: dict[Arch, int] = {"x86": 0x7000_0000, "x64": 0x7F77_0000_0000}
_PT_GNU_RELRO = "PT_GNU_RELRO"


class HookInputError(EmuError, InputError):
    """The checker's input is wrong: no such file, not an ELF object of that architecture, no such symbol
    (exit 2)."""


@dataclass(frozen=True)
class Segment:
    """One loaded ``PT_LOAD`` segment at its runtime address (``start`` .. ``end``)."""

    start: int
    end: int
    readable: bool
    writable: bool
    executable: bool


@dataclass
class LoadedObject:
    """The object laid out at ``base``: the bytes of every page it occupies, relocated."""

    path: Path
    arch: Arch
    base: int
    #: the relocated image from ``image_start`` (page aligned), covering every segment
    image_start: int
    image: bytearray
    segments: list[Segment]
    #: [start, end) ranges made read-only after relocation (PT_GNU_RELRO)
    relro: list[tuple[int, int]]
    #: defined function symbols: runtime address -> (name, size), for ``name+off`` locations
    functions: dict[int, tuple[str, int]]
    #: named sections that hold code stubs (.plt, .plt.sec, .plt.got): runtime [start, end) -> name
    stub_sections: dict[tuple[int, int], str]
    #: trap address -> the external symbol it stands for
    traps: dict[int, str] = field(default_factory=dict)
    #: PLT stub address -> the symbol it jumps to
    plt: dict[int, str] = field(default_factory=dict)
    unapplied: int = 0
    #: defined data symbols (STT_OBJECT): runtime address -> (name, size), to name a global
    data: dict[int, tuple[str, int]] = field(default_factory=dict)

    @property
    def image_end(self) -> int:
        return self.image_start + len(self.image)

    def executable_at(self, address: int) -> bool:
        return any(s.executable and s.start <= address < s.end for s in self.segments)

    def readable_at(self, address: int, size: int) -> bool:
        return any(s.start <= address and address + size <= s.end for s in self.segments)

    def writable_at(self, address: int, size: int) -> bool:
        if any(lo < address + size and address < hi for lo, hi in self.relro):
            return False
        return any(s.writable and s.start <= address and address + size <= s.end for s in self.segments)

    def in_stub(self, address: int) -> str | None:
        for (lo, hi), name in self.stub_sections.items():
            if lo <= address < hi:
                return name
        return None

    def data_location(self, address: int) -> str:
        """``name+0xoff (file+0xOFF)`` for an address in a data symbol of the object (demangled), else
        the offset."""
        offset = f"{self.path.name}+{address - self.base:#x}"
        for start, (name, size) in self.data.items():
            if start <= address < start + max(size, 1):
                off = address - start
                return f"{demangle(name)}{f'+{off:#x}' if off else ''} ({offset})"
        return offset

    def location(self, address: int) -> str:
        """``symbol+0xoff`` for an address in a known function, else the offset in the object."""
        if address in self.plt:
            return f"{self.plt[address]}@plt"
        best: tuple[int, str] | None = None
        for start, (name, size) in self.functions.items():
            # a symbol without a size (hand-written assembly) reaches to the next one
            inside = start <= address and (size == 0 or address < start + size)
            if inside and (best is None or start > best[0]):
                best = (start, name)
        if best is not None and self.executable_at(address):
            off = address - best[0]
            return f"{best[1]}+{off:#x}" if off else best[1]
        stub = self.in_stub(address)
        if stub is not None:
            return f"{stub}+{address - self.base:#x}"
        if self.image_start <= address < self.image_end:
            return f"{self.path.name}+{address - self.base:#x}"
        return f"{address:#x}"


def _open(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise HookInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise HookInputError(f"{path}: is a folder, not a shared object") from None
    except OSError as exc:
        raise HookInputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _elf(path: Path, data: bytes, arch: Arch) -> Any:
    import io

    if data[:4] != b"\x7fELF":
        raise HookInputError(f"{path}: not an ELF file")
    try:
        elf = ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise HookInputError(f"{path}: not a readable ELF file: {exc}") from None
    machine, bits = _MACHINE[arch], ISA[arch].bits
    if elf["e_machine"] != machine or elf.elfclass != bits:
        got = {m: a for a, m in _MACHINE.items()}.get(str(elf["e_machine"]), str(elf["e_machine"]))
        raise HookInputError(f"{path}: a {elf.elfclass}-bit {got} object, not {arch} (--arch {arch})")
    if elf["e_type"] not in ("ET_DYN", "ET_EXEC"):
        raise HookInputError(f"{path}: {elf['e_type']} is not a shared object (link it with -shared)")
    return elf


def _symbols(elf: Any) -> list[Any]:
    out: list[Any] = []
    for name in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(name)
        if isinstance(sec, SymbolTableSection):
            out.extend(sec.iter_symbols())
    return out


def load_object(path: Path, arch: Arch, base: int) -> LoadedObject:
    """Lay out ``path`` at ``base`` (ignored for ``ET_EXEC``) and apply its dynamic relocations."""
    data = _open(path)
    elf = _elf(path, data, arch)
    if elf["e_type"] == "ET_EXEC":
        base = 0
    loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    if not loads:
        raise HookInputError(f"{path}: no PT_LOAD segment: nothing to run")
    lo = min(s["p_vaddr"] for s in loads) & ~(PAGE - 1)
    hi = (max(s["p_vaddr"] + s["p_memsz"] for s in loads) + PAGE - 1) & ~(PAGE - 1)
    image = bytearray(hi - lo)
    segments: list[Segment] = []
    for s in loads:
        off = s["p_vaddr"] - lo
        chunk = data[s["p_offset"]: s["p_offset"] + s["p_filesz"]]
        image[off: off + len(chunk)] = chunk
        flags = s["p_flags"]
        segments.append(Segment(base + s["p_vaddr"], base + s["p_vaddr"] + s["p_memsz"],
                                bool(flags & P_FLAGS.PF_R), bool(flags & P_FLAGS.PF_W),
                                bool(flags & P_FLAGS.PF_X)))
    relro = [(base + s["p_vaddr"], base + s["p_vaddr"] + s["p_memsz"])
             for s in elf.iter_segments() if s["p_type"] == _PT_GNU_RELRO]
    functions: dict[int, tuple[str, int]] = {}
    objects: dict[int, tuple[str, int]] = {}
    for sym in _symbols(elf):
        if sym["st_shndx"] in ("SHN_UNDEF", "SHN_ABS") or not sym.name:
            continue
        if sym["st_info"]["type"] == "STT_FUNC":
            functions.setdefault(base + sym["st_value"], (sym.name, sym["st_size"]))
        elif sym["st_info"]["type"] == "STT_OBJECT":
            objects.setdefault(base + sym["st_value"], (sym.name, sym["st_size"]))
    stubs = {}
    for sec in elf.iter_sections():
        if sec.name in (".plt", ".plt.sec", ".plt.got") and sec["sh_flags"] & SH_FLAGS.SHF_ALLOC:
            stubs[(base + sec["sh_addr"], base + sec["sh_addr"] + sec["sh_size"])] = sec.name
    obj = LoadedObject(path=path, arch=arch, base=base, image_start=base + lo, image=image, segments=segments,
                       relro=relro, functions=functions, stub_sections=stubs, data=objects)
    _relocate(elf, obj, lo)
    obj.plt = _plt_stubs(elf, base)
    return obj


def _plt_stubs(elf: Any, base: int) -> dict[int, str]:
    """PLT stub -> symbol, from the order of the JUMP_SLOT relocations (16-byte stubs: in ``.plt.sec`` from
    its start when it exists (IBT), else in ``.plt`` after its 16-byte header)."""
    rel = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
    sec = elf.get_section_by_name(".plt.sec")
    first = 0
    if sec is None:
        sec = elf.get_section_by_name(".plt")
        first = 16
    if not isinstance(rel, RelocationSection) or sec is None:
        return {}
    symtab = elf.get_section(rel["sh_link"])
    out: dict[int, str] = {}
    for i, r in enumerate(rel.iter_relocations()):
        if r["r_info_sym"] and isinstance(symtab, SymbolTableSection):
            out[base + sec["sh_addr"] + first + 16 * i] = symtab.get_symbol(r["r_info_sym"]).name
    return out


def _relocate(elf: Any, obj: LoadedObject, lo: int) -> None:
    word = ISA[obj.arch].word
    types = _RELOCATIONS[obj.arch]
    trap_of: dict[str, int] = {}

    def trap(name: str) -> int:
        if name not in trap_of:
            trap_of[name] = _TRAP_REGIONS[obj.arch] + 16 * len(trap_of)
            obj.traps[trap_of[name]] = name
        return trap_of[name]

    def value_of(symtab: Any, index: int) -> int:
        sym = symtab.get_symbol(index)
        if sym["st_shndx"] == "SHN_UNDEF":
            return trap(sym.name or f"symbol #{index}")
        if sym["st_info"]["type"] == "STT_TLS":
            return trap(f"{sym.name} (TLS)")
        return int(obj.base + sym["st_value"])

    for sec in elf.iter_sections():
        if not isinstance(sec, RelocationSection) or not sec["sh_flags"] & SH_FLAGS.SHF_ALLOC:
            continue
        symtab = elf.get_section(sec["sh_link"]) if sec["sh_link"] else None
        for rel in sec.iter_relocations():
            rtype, index, where = rel["r_info_type"], rel["r_info_sym"], rel["r_offset"]
            off = where - lo
            size = 4 if rtype in (types["PC32"], types.get("32", -1), types.get("32S", -1)) else word
            if not 0 <= off <= len(obj.image) - size:
                obj.unapplied += 1
                continue
            fmt = "<I" if size == 4 else "<Q"
            addend = rel["r_addend"] if rel.is_RELA() else struct.unpack_from(fmt, obj.image, off)[0]
            if obj.arch == "x86" and not rel.is_RELA() and addend >= 2**31 and rtype == types["PC32"]:
                addend -= 2**32
            sym = value_of(symtab, index) if index and symtab is not None else 0
            if rtype == types["RELATIVE"]:
                value = obj.base + addend
            elif rtype in (types["GLOB_DAT"], types["JUMP_SLOT"]):
                value = sym
            elif rtype in (types.get("64", -1), types.get("32", -1), types.get("32S", -1)):
                value = sym + addend
            elif rtype == types["PC32"]:
                value = sym + addend - (obj.base + where)
            else:
                obj.unapplied += 1
                continue
            struct.pack_into(fmt, obj.image, off, value & ((1 << (8 * size)) - 1))


def find_symbol(obj: LoadedObject, symbol: str) -> int:
    """The runtime address of ``symbol``, defined in the object and inside an executable segment."""
    with obj.path.open("rb") as fh:
        elf = ELFFile(fh)
        syms = [s for s in _symbols(elf) if s.name == symbol]
        defined = [s for s in syms if s["st_shndx"] not in ("SHN_UNDEF", "SHN_ABS")]
    if not defined:
        if syms:
            raise HookInputError(f"{obj.path}: {symbol} is not in the object (it is imported from another "
                                 "one)")
        raise HookInputError(f"{obj.path}: no symbol {symbol!r} in .symtab or .dynsym")
    address = obj.base + int(defined[0]["st_value"])
    if not obj.executable_at(address):
        raise HookInputError(f"{obj.path}: {symbol} at {address - obj.base:#x} is not in an executable "
                             "segment")
    return address
