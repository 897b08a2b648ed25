"""Call frame information from ``.eh_frame`` (parsed with pyelftools) and one CFI unwind step.

A :class:`CfiTable` is one module's ``.eh_frame`` at its link-time addresses. FDEs are found through the
``.eh_frame_hdr`` binary-search table when there is one (only the FDEs a walk needs are parsed), else by
parsing the whole section once. Decoded FDEs are cached per table, and tables are cached per content, so
replaying the same capture again costs lookups only.

Sources: an ELF file on disk (:func:`table_from_elf`, which also gives the build-id and load segments) or
the bytes a capture embeds (:class:`emu.capture.EmbeddedCfi`).

Two architectures (:class:`CfiArch`): x86-64 (:data:`X64`, 8-byte addresses, the System V psABI's DWARF
register numbers) and i386 (:data:`X86`, 4-byte addresses; DWARF numbers 0 eax, 1 ecx, 2 edx, 3 ebx,
4 esp, 5 ebp, 6 esi, 7 edi, 8 eip, the return address column).
"""

from __future__ import annotations

import bisect
import functools
import io
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.dwarf.callframe import FDE, CallFrameInfo, CFARule, RegisterRule
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.structs import DWARFStructs
from elftools.elf.elffile import ELFFile

from clr_model.abi import ISA, Arch
from emu.errors import EmuError, MemoryFault
from emu.memory import CaptureMemory

__all__ = [
    "DWARF_REGISTERS",
    "DWARF_REGISTERS_X86",
    "DW_EH_PE_DATAREL_SDATA4",
    "DW_EH_PE_OMIT",
    "DW_EH_PE_PCREL_SDATA4",
    "DW_EH_PE_UDATA4",
    "EH_FRAME_HDR_VERSION",
    "X64",
    "X86",
    "CfiArch",
    "CfiError",
    "CfiRow",
    "CfiTable",
    "ElfInfo",
    "cfi_step",
    "clear_caches",
    "load_bias",
    "read_elf",
    "table_for",
]

#: x86-64 DWARF register numbers (System V psABI) -> register names; 16 is the return address column
DWARF_REGISTERS: Mapping[int, str] = {
    0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
    8: "r8", 9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15", 16: "rip",
}  # fmt: skip
#: i386 DWARF register numbers (System V i386 psABI) -> register names; 8 is the return address column
DWARF_REGISTERS_X86: Mapping[int, str] = {
    0: "eax", 1: "ecx", 2: "edx", 3: "ebx", 4: "esp", 5: "ebp", 6: "esi", 7: "edi", 8: "eip",
}  # fmt: skip


@dataclass(frozen=True)
class CfiArch:
    """What a CFI step needs to know of an architecture."""

    name: str
    registers: Mapping[int, str]
    sp: str
    ip: str
    #: registers a callee preserves (carried to the caller unless a rule says otherwise)
    callee_saved: tuple[str, ...]
    address_size: int
    #: the return address column CIEs of this architecture use
    ra_column: int

    @functools.cached_property
    def mask(self) -> int:
        return (1 << (8 * self.address_size)) - 1


def _cfi_arch(arch: Arch, registers: Mapping[int, str], ra_column: int) -> CfiArch:
    isa = ISA[arch]
    return CfiArch(arch, registers, isa.sp, isa.ip, isa.callee_saved, isa.word, ra_column)


X64 = _cfi_arch("x64", DWARF_REGISTERS, 16)
X86 = _cfi_arch("x86", DWARF_REGISTERS_X86, 8)
_STRUCTS = DWARFStructs(little_endian=True, dwarf_format=32, address_size=8)
_STRUCTS_32 = DWARFStructs(little_endian=True, dwarf_format=32, address_size=4)
_EXPR = DWARFExprParser(_STRUCTS)
_EXPR_32 = DWARFExprParser(_STRUCTS_32)
_BINARY_OPS = frozenset(
    "DW_OP_plus DW_OP_minus DW_OP_and DW_OP_or DW_OP_shl DW_OP_shr DW_OP_ge DW_OP_gt DW_OP_le DW_OP_lt "
    "DW_OP_eq DW_OP_ne DW_OP_mul".split()
)


#: DWARF CFA opcode of the GNU extension DW_CFA_GNU_args_size (dwarf2.h)
_DW_CFA_GNU_ARGS_SIZE = 0x2E


class CfiError(EmuError):
    """CFI that cannot be used for this step (malformed, unsupported, or needing an unknown register)."""


@dataclass(frozen=True)
class CfiRow:
    """The unwind rule in force at one address: CFA = reg + offset (or an expression), register rules."""

    start: int
    end: int
    cfa: CFARule
    rules: Mapping[int, RegisterRule]
    ra_register: int


#: marks an address :meth:`CfiTable.quick_step` has not looked up yet; how many it keeps
_UNSEEN: Any = object()
_MAX_STEPS = 1 << 16


class CfiTable:
    """One module's ``.eh_frame`` (link-time addresses) with an FDE index."""

    def __init__(
        self,
        eh_frame: bytes,
        eh_frame_vaddr: int,
        hdr: bytes | None = None,
        hdr_vaddr: int | None = None,
        *,
        arch: CfiArch = X64,
    ) -> None:
        self.eh_frame = eh_frame
        self.vaddr = eh_frame_vaddr
        self.arch = arch
        self._cfi = CallFrameInfo(
            stream=io.BytesIO(eh_frame), size=len(eh_frame), address=eh_frame_vaddr,
            base_structs=_STRUCTS if arch.address_size == 8 else _STRUCTS_32, for_eh_frame=True,
        )  # fmt: skip
        self._rows: dict[int, tuple[list[CfiRow], list[int]]] = {}
        #: id(row) -> (row, its compiled step or None when only :func:`cfi_step` handles it)
        self._plans: dict[int, tuple[CfiRow, _Plan | None]] = {}
        index = (
            _hdr_index(hdr, hdr_vaddr, eh_frame_vaddr, arch.address_size)
            if hdr is not None and hdr_vaddr is not None
            else None
        )
        if index is None:
            index = self._full_index()
        self._locs = [loc for loc, _ in index]
        self._offsets = [off for _, off in index]
        #: link-time address -> the compiled step of the row covering it, as a function of (registers,
        #: memory) (None: no row, or a row only :func:`cfi_step` handles): what :meth:`quick_step` looks
        #: up, one dictionary lookup per frame; a walk may call an entry itself (:attr:`steps`)
        self._steps: dict[int, QuickStep | None] = {}
        self.steps: Mapping[int, QuickStep | None] = self._steps

    def _full_index(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        try:
            for entry in self._cfi.get_entries():
                if isinstance(entry, FDE):
                    out.append((int(entry.header["initial_location"]), int(entry.offset)))
        except Exception as exc:  # pyelftools raises asserts and construct errors on malformed input
            raise CfiError(f"malformed .eh_frame: {type(exc).__name__}: {exc}") from None
        out.sort()
        return out

    def decoded_entries(self) -> list[tuple[int, int]]:
        """(link-time start, .eh_frame offset) of every FDE a lookup decoded so far, by start."""
        return sorted((self._locs[k], self._offsets[k]) for k in self._rows)

    def row_for(self, pc: int) -> CfiRow | None:
        """The row covering link-time address ``pc``; None when no FDE covers it."""
        k = bisect.bisect_right(self._locs, pc) - 1
        if k < 0:
            return None
        got = self._rows.get(k)
        if got is None:
            decoded = self._decode(self._offsets[k])
            got = (decoded, [r.start for r in decoded])
            self._rows[k] = got
        rows, starts = got
        if not rows or not rows[0].start <= pc < rows[-1].end:
            return None
        j = bisect.bisect_right(starts, pc) - 1
        return rows[j] if j >= 0 else None

    def step(self, row: CfiRow, regs: Mapping[str, int], memory: CaptureMemory) -> dict[str, int]:
        """``cfi_step(row, regs, memory, self.arch)`` for a row of this table: the row compiled once into
        register names and offsets; rows with expressions, and any step that fails (unknown register,
        memory outside the capture), go through :func:`cfi_step` itself, so results and errors are its."""
        got = self._plans.get(id(row))
        if got is None or got[0] is not row:
            got = (row, _compile(row, self.arch))
            self._plans[id(row)] = got
        plan = got[1]
        if plan is not None:
            out = _run_plan(plan, regs, memory, self.arch)
            if out is not None:
                return out
        return cfi_step(row, regs, memory, self.arch)

    def quick_step(self, pc: int, regs: Mapping[str, int], memory: CaptureMemory) -> dict[str, int] | None:
        """``step(row_for(pc), regs, memory)`` where the row's compiled step gives it (the same registers,
        in the same order); None where it does not (no row covers ``pc``, the row has an expression, the
        step fails or reads outside the capture, decoding fails): :meth:`row_for` and :meth:`step` then
        give the answer or the error. The row's step is found by one lookup per address once seen."""
        step: QuickStep | None = self._steps.get(pc, _UNSEEN)
        if step is _UNSEEN:
            try:
                row = self.row_for(pc)
            except CfiError:
                return None
            step = None
            if row is not None:
                got = self._plans.get(id(row))
                if got is None or got[0] is not row:
                    got = (row, _compile(row, self.arch))
                    self._plans[id(row)] = got
                if got[1] is not None:
                    step = _quick(got[1], self.arch)
            if len(self._steps) >= _MAX_STEPS:
                self._steps.clear()
            self._steps[pc] = step
        if step is None:
            return None
        return step(regs, memory)

    def _decode(self, offset: int) -> list[CfiRow]:
        if not 0 <= offset < len(self.eh_frame):
            raise CfiError(f".eh_frame_hdr points outside .eh_frame (offset {offset:#x})")
        try:
            entry = self._cfi._parse_entry_at(offset)
            if not isinstance(entry, FDE):
                raise CfiError(f"no FDE at .eh_frame offset {offset:#x}")
            start = int(entry.header["initial_location"])
            end = start + int(entry.header["address_range"])
            ra = int(entry.cie["return_address_register"]) if entry.cie is not None else self.arch.ra_column
            # DW_CFA_GNU_args_size (0x2e) only says how many bytes of outgoing arguments are pushed at a call
            # site (for landing pads); it changes no CFA or register rule. pyelftools' decoder does not know
            # it (g++'s libcoreclr of .NET Core 3.1 has it), so it is dropped before decoding.
            for holder in (entry, entry.cie):
                if holder is not None:
                    kept = [i for i in holder.instructions if i.opcode != _DW_CFA_GNU_ARGS_SIZE]
                    holder.instructions = kept
            table = entry.get_decoded().table
        except CfiError:
            raise
        except Exception as exc:
            raise CfiError(f"malformed FDE at .eh_frame offset {offset:#x}: {type(exc).__name__}") from None
        rows: list[CfiRow] = []
        for i, line in enumerate(table):
            pc = int(line["pc"])
            nxt = int(table[i + 1]["pc"]) if i + 1 < len(table) else end
            rules = {int(k): v for k, v in line.items() if isinstance(k, int)}
            rows.append(CfiRow(start=pc, end=nxt, cfa=line["cfa"], rules=rules, ra_register=ra))
        return rows


def _read_encoded(
    data: bytes, pos: int, enc: int, base_pc: int, data_base: int, address_size: int = 8
) -> tuple[int, int]:
    fmt = enc & 0x0F
    sizes = {0x00: ("<Q", 8) if address_size == 8 else ("<I", 4), 0x02: ("<H", 2), 0x03: ("<I", 4),
             0x04: ("<Q", 8), 0x0A: ("<h", 2), 0x0B: ("<i", 4), 0x0C: ("<q", 8)}  # fmt: skip
    if fmt not in sizes:
        raise CfiError(f".eh_frame_hdr: pointer encoding {enc:#x} is not supported")
    code, size = sizes[fmt]
    if pos + size > len(data):
        raise CfiError(".eh_frame_hdr is truncated")
    (value,) = struct.unpack_from(code, data, pos)
    app = enc & 0x70
    if app == 0x10:
        value += base_pc + pos
    elif app == 0x30:
        value += data_base
    elif app != 0:
        raise CfiError(f".eh_frame_hdr: pointer application {app:#x} is not supported")
    return int(value) & ((1 << (8 * address_size)) - 1), pos + size


#: .eh_frame_hdr: its version byte and the DW_EH_PE pointer encodings of its fields (LSB extensions): the
#: search table is read in one encoding, datarel|sdata4, the one every linker writes (:mod:`emu.embed`
#: writes it too, with eh_frame_ptr pcrel|sdata4 and fde_count udata4)
EH_FRAME_HDR_VERSION = 1
DW_EH_PE_UDATA4 = 0x03
DW_EH_PE_PCREL_SDATA4 = 0x1B
DW_EH_PE_DATAREL_SDATA4 = 0x3B
DW_EH_PE_OMIT = 0xFF


def _hdr_index(
    hdr: bytes, hdr_vaddr: int, eh_vaddr: int, address_size: int = 8
) -> list[tuple[int, int]] | None:
    """(link-time start, .eh_frame offset) pairs from the .eh_frame_hdr table; None if it has none."""
    if len(hdr) < 4 or hdr[0] != EH_FRAME_HDR_VERSION:
        return None
    _, ptr_enc, count_enc, table_enc = hdr[:4]
    if DW_EH_PE_OMIT in (ptr_enc, count_enc) or table_enc != DW_EH_PE_DATAREL_SDATA4:
        return None
    _eh, pos = _read_encoded(hdr, 4, ptr_enc, hdr_vaddr, hdr_vaddr, address_size)
    count, pos = _read_encoded(hdr, pos, count_enc, hdr_vaddr, hdr_vaddr, address_size)
    if pos + 8 * count > len(hdr):
        raise CfiError(f".eh_frame_hdr: {count} entries do not fit in {len(hdr)} bytes")
    out = [
        (hdr_vaddr + loc, hdr_vaddr + fde - eh_vaddr)
        for loc, fde in struct.iter_unpack("<ii", hdr[pos : pos + 8 * count])
    ]
    out.sort()
    return out


_TABLES: dict[tuple[bytes, int, bytes, int, str], CfiTable] = {}


def clear_caches() -> None:
    """Forget every cached table and ELF file (a first look again: benchmarks, :mod:`emu.embed`)."""
    _TABLES.clear()
    _ELF_CACHE.clear()


def table_for(
    eh_frame: bytes, eh_vaddr: int, hdr: bytes | None, hdr_vaddr: int | None, *, arch: CfiArch = X64
) -> CfiTable:
    """A cached :class:`CfiTable` for these bytes (keyed by content: equal bytes share a table; a bytes
    object caches its hash, so a capture replayed again pays one dictionary lookup)."""
    key = (eh_frame, eh_vaddr, hdr or b"", hdr_vaddr or 0, arch.name)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) > 256:
            _TABLES.clear()
        table = CfiTable(eh_frame, eh_vaddr, hdr, hdr_vaddr, arch=arch)
        _TABLES[key] = table
    return table


# --------------------------------------------------------------------------------------------------
# ELF files


@dataclass(frozen=True)
class ElfInfo:
    path: str
    build_id: str | None
    #: PT_LOAD segments: (p_offset, p_vaddr, p_filesz, p_memsz)
    loads: tuple[tuple[int, int, int, int], ...]
    eh_frame: bytes | None
    eh_frame_vaddr: int
    eh_frame_hdr: bytes | None
    eh_frame_hdr_vaddr: int
    #: function symbols: (link-time start, size, name), by start
    symbols: tuple[tuple[int, int, str], ...]


_ELF_CACHE: dict[tuple[str, int, int], ElfInfo] = {}


def read_elf(path: str) -> ElfInfo:
    """Build-id, load segments, ``.eh_frame(_hdr)`` and function symbols of an ELF file (cached)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise CfiError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):  # a capture names the file: a FIFO or a device would block the read
        raise CfiError(f"{path}: not a regular file")
    key = (str(p), st.st_size, st.st_mtime_ns)
    cached = _ELF_CACHE.get(key)
    if cached is not None:
        return cached
    try:
        with p.open("rb") as fh:
            elf = ELFFile(fh)
            build_id: str | None = None
            note_sec = elf.get_section_by_name(".note.gnu.build-id")
            if note_sec is not None:
                for note in note_sec.iter_notes():  # type: ignore[attr-defined]
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        build_id = str(note["n_desc"])
            loads = tuple(
                (int(s["p_offset"]), int(s["p_vaddr"]), int(s["p_filesz"]), int(s["p_memsz"]))
                for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            )
            eh = elf.get_section_by_name(".eh_frame")
            hdr = elf.get_section_by_name(".eh_frame_hdr")
            symbols: list[tuple[int, int, str]] = []
            for name in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(name)
                if sec is None or not hasattr(sec, "iter_symbols"):
                    continue
                for sym in sec.iter_symbols():
                    if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                        symbols.append((int(sym["st_value"]), int(sym["st_size"]), str(sym.name)))
                if symbols:
                    break
            info = ElfInfo(
                path=str(p),
                build_id=build_id,
                loads=loads,
                eh_frame=eh.data() if eh is not None else None,
                eh_frame_vaddr=int(eh["sh_addr"]) if eh is not None else 0,
                eh_frame_hdr=hdr.data() if hdr is not None else None,
                eh_frame_hdr_vaddr=int(hdr["sh_addr"]) if hdr is not None else 0,
                symbols=tuple(sorted(set(symbols))),
            )
    except CfiError:
        raise
    except Exception as exc:
        raise CfiError(f"{path}: not a readable ELF file ({type(exc).__name__})") from None
    _ELF_CACHE[key] = info
    return info


def load_bias(loads: Sequence[tuple[int, int, int, int]], start: int, offset: int) -> int | None:
    """Runtime address minus link-time address, from one mapping (``start``, file ``offset``)."""
    for p_offset, p_vaddr, p_filesz, _memsz in loads:
        if p_offset - 4096 < offset <= p_offset + max(p_filesz, 1) and (p_offset - offset) < 4096:
            return (start - p_vaddr + (p_offset - offset)) & (2**64 - 1)
    return None


# --------------------------------------------------------------------------------------------------
# One step


def _eval_expr(
    expr: Sequence[int],
    regs: Mapping[str, int],
    memory: CaptureMemory,
    initial: int | None,
    arch: CfiArch = X64,
) -> int:
    stack: list[int] = [] if initial is None else [initial]
    mask = arch.mask
    try:
        ops = (_EXPR if arch.address_size == 8 else _EXPR_32).parse_expr(bytes(expr))
    except Exception as exc:
        raise CfiError(f"malformed DWARF expression ({type(exc).__name__})") from None
    if len(ops) > 64:
        raise CfiError("DWARF expression of more than 64 operations")
    for op in ops:
        name = op.op_name
        args: list[Any] = op.args
        if name.startswith("DW_OP_breg"):
            reg = arch.registers.get(int(name.removeprefix("DW_OP_breg")))
            if reg is None or reg not in regs:
                raise CfiError(f"{name} needs a register whose value is unknown")
            stack.append((regs[reg] + int(args[0])) & mask)
        elif name.startswith("DW_OP_lit"):
            stack.append(int(name.removeprefix("DW_OP_lit")))
        elif name.startswith("DW_OP_const"):
            stack.append(int(args[0]) & mask)
        elif name == "DW_OP_deref":
            stack.append(_read_word(memory, stack.pop(), arch))
        elif name == "DW_OP_plus_uconst":
            stack.append((stack.pop() + int(args[0])) & mask)
        elif name in _BINARY_OPS:
            b, a = stack.pop(), stack.pop()
            value = {
                "DW_OP_plus": a + b, "DW_OP_minus": a - b, "DW_OP_and": a & b, "DW_OP_or": a | b,
                "DW_OP_shl": a << (b & (8 * arch.address_size - 1)),
                "DW_OP_shr": a >> (b & (8 * arch.address_size - 1)), "DW_OP_ge": int(a >= b),
                "DW_OP_gt": int(a > b), "DW_OP_le": int(a <= b), "DW_OP_lt": int(a < b),
                "DW_OP_eq": int(a == b), "DW_OP_ne": int(a != b), "DW_OP_mul": a * b,
            }[name]  # fmt: skip
            stack.append(value & mask)
        else:
            raise CfiError(f"DWARF expression operation {name} is not supported")
    if not stack:
        raise CfiError("DWARF expression left an empty stack")
    return stack[-1]


def _read_word(memory: CaptureMemory, address: int, arch: CfiArch) -> int:
    if arch.address_size == 8:
        return memory.read_u64(address)
    return int.from_bytes(memory.read(address, 4), "little")


def _int_arg(rule: RegisterRule) -> int:
    if rule.arg is None:
        return 0
    if not isinstance(rule.arg, int):
        raise CfiError(f"register rule {rule.type} with a non-integer argument")
    return rule.arg


def _expr_arg(rule: RegisterRule) -> list[int]:
    if rule.arg is None or isinstance(rule.arg, int):
        raise CfiError(f"register rule {rule.type} without an expression")
    return [int(b) for b in rule.arg]


#: compiled register rules: what cfi_step does for each rule kind, by a small int
_OFFSET, _VAL_OFFSET, _SAME_VALUE, _UNDEFINED, _REGISTER = range(5)


@dataclass(frozen=True)
class _Plan:
    """A row as :func:`cfi_step` reads it, with the names looked up: CFA = ``cfa_reg`` + ``cfa_offset``,
    then (kind, register name, argument or source register name, DWARF number) per rule, in order."""

    cfa_reg: str
    cfa_offset: int
    ops: tuple[tuple[int, str, Any, int], ...]
    ra_register: int
    has_ra_rule: bool
    #: the common row of 64-bit code, every rule "saved at CFA + offset" and the return address among them:
    #: the saved words read by one unpack (``words``, from CFA + ``lo``, ``span`` bytes), each register's
    #: word by its place in that unpack, in the order of ``ops`` (``order``); None for any other row
    words: struct.Struct | None = None
    lo: int = 0
    span: int = 0
    order: tuple[tuple[str, int], ...] = ()


def _compile(row: CfiRow, arch: CfiArch) -> _Plan | None:
    """The plan of ``row``; None when it has an expression or a rule :func:`_run_plan` does not do."""
    if row.cfa.expr is not None:
        return None
    cfa_reg = arch.registers.get(int(row.cfa.reg or 0))
    if cfa_reg is None:
        return None
    ops: list[tuple[int, str, Any, int]] = []
    for num, rule in row.rules.items():
        name = arch.registers.get(num)
        if name is None or name == arch.sp:
            continue
        kind = rule.type
        if kind in (RegisterRule.OFFSET, RegisterRule.VAL_OFFSET, RegisterRule.REGISTER):
            if rule.arg is not None and not isinstance(rule.arg, int):
                return None  # cfi_step raises its error
            arg = 0 if rule.arg is None else rule.arg
            if kind == RegisterRule.REGISTER:
                ops.append((_REGISTER, name, arch.registers.get(arg), num))
            else:
                ops.append((_OFFSET if kind == RegisterRule.OFFSET else _VAL_OFFSET, name, arg, num))
        elif kind == RegisterRule.SAME_VALUE:
            ops.append((_SAME_VALUE, name, None, num))
        elif kind == RegisterRule.UNDEFINED:
            ops.append((_UNDEFINED, name, None, num))
        else:
            return None
    plan = _Plan(cfa_reg, int(row.cfa.offset or 0), tuple(ops), row.ra_register, row.ra_register in row.rules)
    return _with_words(plan, arch)


def _with_words(plan: _Plan, arch: CfiArch) -> _Plan:
    """``plan`` with its one-unpack read (see :class:`_Plan`) where the row allows one: 64-bit, every rule
    an offset from the CFA, at distinct offsets, one of them the return address's."""
    if arch.address_size != 8 or not plan.ops or any(kind != _OFFSET for kind, *_ in plan.ops):
        return plan
    if arch.ip not in {name for _k, name, _a, _n in plan.ops}:
        return plan
    offsets = sorted({arg for _k, _name, arg, _n in plan.ops})
    if len(offsets) != len(plan.ops):
        return plan
    fmt, at = "<", offsets[0]
    for off in offsets:
        fmt += f"{off - at}xQ" if off > at else "Q"
        at = off + 8
    order = tuple((name, offsets.index(arg)) for _k, name, arg, _n in plan.ops)
    return _Plan(plan.cfa_reg, plan.cfa_offset, plan.ops, plan.ra_register, plan.has_ra_rule,
                 struct.Struct(fmt), offsets[0], at - offsets[0], order)  # fmt: skip


#: a compiled row's step: the caller's registers from the callee's and the memory, None where
#: :func:`_run_plan` gives None
QuickStep = Callable[[Mapping[str, int], CaptureMemory], "dict[str, int] | None"]


def _quick(plan: _Plan, arch: CfiArch) -> QuickStep:
    """:func:`_run_plan` of ``plan`` as one function, its one-unpack path with every name it reads bound
    once (the step most frames of a walk take); any other case goes through :func:`_run_plan`."""
    words = plan.words
    if words is None:
        return functools.partial(_plan_step, plan, arch)
    cfa_reg, cfa_offset, mask, sp = plan.cfa_reg, plan.cfa_offset, arch.mask, arch.sp
    callee_saved, order, lo, span = arch.callee_saved, plan.order, plan.lo, plan.span
    unpack = words.unpack_from

    def step(regs: Mapping[str, int], memory: CaptureMemory) -> dict[str, int] | None:
        base = regs.get(cfa_reg)
        if base is None:
            return None
        cfa = (base + cfa_offset) & mask
        # the saved words by one unpack, where the segment the memory read last holds them all and no
        # emulation wrote over it (else _run_plan reads them one by one, and says where one is missing)
        start, end, data = memory._hot
        at = cfa + lo
        if start <= at and at + span <= end and not memory._written:
            values = unpack(data, at - start)
            quick: dict[str, int] = {sp: cfa}
            for name in callee_saved:
                if name in regs:
                    quick[name] = regs[name]
            for name, k in order:
                quick[name] = values[k]
            return quick
        return _run_plan(plan, regs, memory, arch)

    return step


def _plan_step(
    plan: _Plan, arch: CfiArch, regs: Mapping[str, int], memory: CaptureMemory
) -> dict[str, int] | None:
    return _run_plan(plan, regs, memory, arch)


def _run_plan(
    plan: _Plan, regs: Mapping[str, int], memory: CaptureMemory, arch: CfiArch
) -> dict[str, int] | None:
    """What cfi_step gives for the row of ``plan``; None where cfi_step would raise (it then does)."""
    base = regs.get(plan.cfa_reg)
    if base is None:
        return None
    mask = arch.mask
    cfa = (base + plan.cfa_offset) & mask
    out: dict[str, int] = {arch.sp: cfa}
    for name in arch.callee_saved:
        if name in regs:
            out[name] = regs[name]
    wide = arch.address_size == 8
    try:
        for kind, name, arg, num in plan.ops:
            if kind == _OFFSET:
                at = (cfa + arg) & mask
                out[name] = memory.read_u64(at) if wide else _read_word(memory, at, arch)
            elif kind == _VAL_OFFSET:
                out[name] = (cfa + arg) & mask
            elif kind == _SAME_VALUE:
                if name in regs:
                    out[name] = regs[name]
            elif kind == _UNDEFINED:
                out.pop(name, None)
                if num == plan.ra_register:
                    out[arch.ip] = 0
            elif arg is not None and arg in regs:  # _REGISTER
                out[name] = regs[arg]
            else:
                out.pop(name, None)
    except MemoryFault:
        return None
    if arch.ip not in out:
        if not plan.has_ra_rule:
            return None
        ra = arch.registers.get(plan.ra_register, arch.ip)
        out[arch.ip] = out.pop(ra) if ra != arch.ip else 0
    return out


def cfi_step(
    row: CfiRow, regs: Mapping[str, int], memory: CaptureMemory, arch: CfiArch = X64
) -> dict[str, int]:
    """The caller's registers by ``row``: SP (rsp, esp) = CFA, IP (rip, eip) = the return address,
    callee-saved registers restored (or carried as they are); registers the rules cannot give are absent
    (unknown)."""
    cfa_rule = row.cfa
    mask = arch.mask
    try:
        if cfa_rule.expr is not None:
            cfa = _eval_expr(cfa_rule.expr, regs, memory, None, arch)
        else:
            reg = arch.registers.get(int(cfa_rule.reg or 0))
            if reg is None or reg not in regs:
                raise CfiError(f"CFA is based on register {reg or cfa_rule.reg}, whose value is unknown")
            cfa = (regs[reg] + int(cfa_rule.offset or 0)) & mask
        out: dict[str, int] = {arch.sp: cfa}
        for name in arch.callee_saved:
            if name in regs:
                out[name] = regs[name]
        for num, rule in row.rules.items():
            reg_name = arch.registers.get(num)
            if reg_name is None or reg_name == arch.sp:
                continue
            name = reg_name
            kind = rule.type
            if kind == RegisterRule.OFFSET:
                out[name] = _read_word(memory, (cfa + _int_arg(rule)) & mask, arch)
            elif kind == RegisterRule.VAL_OFFSET:
                out[name] = (cfa + _int_arg(rule)) & mask
            elif kind == RegisterRule.SAME_VALUE:
                if name in regs:
                    out[name] = regs[name]
            elif kind == RegisterRule.UNDEFINED:
                out.pop(name, None)
                if num == row.ra_register:
                    out[arch.ip] = 0
            elif kind == RegisterRule.REGISTER:
                src = arch.registers.get(_int_arg(rule))
                if src is not None and src in regs:
                    out[name] = regs[src]
                else:
                    out.pop(name, None)
            elif kind == RegisterRule.EXPRESSION:
                out[name] = _read_word(memory, _eval_expr(_expr_arg(rule), regs, memory, cfa, arch), arch)
            elif kind == RegisterRule.VAL_EXPRESSION:
                out[name] = _eval_expr(_expr_arg(rule), regs, memory, cfa, arch)
            else:
                raise CfiError(f"register rule {kind} is not supported")
    except MemoryFault as exc:
        raise CfiError(f"CFI reads memory outside the capture ({exc.reason} at {exc.address:#x})") from None
    except IndexError:
        raise CfiError("DWARF expression pops an empty stack") from None
    if arch.ip not in out:
        ra = arch.registers.get(row.ra_register, arch.ip)
        if row.ra_register not in row.rules:
            raise CfiError("the row has no rule for the return address")
        out[arch.ip] = out.pop(ra) if ra != arch.ip else 0
    return out
