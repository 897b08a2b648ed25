"""Unwind a captured thread, frame by frame, recording how each frame was found.

Each step takes the registers of one frame and gives its caller's, by the first rule that applies:

- the IP is in the JIT map or a ReadyToRun module's range (managed code): the frame-pointer chain
  (caller IP = [RBP + 8], caller SP = RBP + 16, caller RBP = [RBP]; on x86, with 4-byte words,
  caller EIP = [EBP + 4], ESP = EBP + 8, EBP = [EBP]). On the frame whose registers are exact (the
  top, or the state an emulation stopped in), a function's first instruction, the instruction after
  ``push rbp`` and a ``ret`` (x86: also ``ret imm16``, the callee-pops return) are recognised from the
  code bytes, since the chain is not set up there. The caller IP must lie in executable memory of the
  capture (checked against the JIT map and the module map), else the stack is scanned for a return
  address (``scan``, word by word). On x86 a frame found by scan gets its EBP back when the managed
  method it returns from begins with ``push ebp`` and the walk is past that instruction: the slot under
  the return address holds the caller's EBP (a method that keeps EBP as a scratch register after saving
  it, as the x86 JIT's EBP-less frames do);
- the IP is in a module file: the module's ``.eh_frame`` CFI (:mod:`emu.cfi`), embedded in the capture or
  read from the file on disk when its build-id matches the capture's;
- the IP is in anonymous executable memory outside the JIT map (runtime stubs, the write-barrier copy: no
  unwind information): the code is emulated forward (:mod:`emu.machine`) under an instruction budget
  (never the clock) until it reaches code that can be unwound (a module or managed code, which is never
  executed: glibc's AVX code is not emulated), and the caller is unwound from there. Only the frame whose
  registers are exact can be emulated.

x86 captures (``arch`` "x86") are unwound the same way with the i386 registers, 4-byte words, i386 CFI
(:data:`emu.cfi.X86`) and a 32-bit CPU (:class:`~emu.machine.UnicornMachine` in ``UC_MODE_32``).

The frame found first carries trust ``context``; the others carry how their registers were found
(``cfi``, ``frame_pointer``, ``emulated``, ``scan``: breakpad's trust levels). The walk stops at a
return address CFI declares undefined (the end of the stack), IP 0, an SP that does not increase (a cycle),
the frame limit, or a step that cannot be made (with the reason).
"""

from __future__ import annotations

import bisect
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, NamedTuple, TypedDict, Unpack

import capstone  # type: ignore[import-untyped]
import capstone.x86  # type: ignore[import-untyped]

from emu.capture import Capture, CaptureArch, ModuleEntry
from emu.cfi import X64, X86, CfiArch, CfiError, CfiTable, load_bias, read_elf, table_for
from emu.errors import EmulationFault, MemoryFault
from emu.machine import UnicornMachine
from emu.memory import CaptureMemory

__all__ = [
    "OSR_TIER", "CodeMap", "RawFrame", "RawUnwind", "StopKind", "Trust", "UnwindResult", "UnwoundFrame",
    "is_osr_entry", "unwind", "walk_frames",
]  # fmt: skip

MAX_FRAMES = 1024
_SCAN_BYTES = 1024
_PE_SUFFIXES = (".dll", ".exe")
#: an OSR method's prologue (.NET 6+ on-stack replacement, x64): ``mov rax,[rbp]; push rax`` then
#: ``mov rbp,rsp``: it runs on top of its Tier0 frame, whose RBP it inherits, and copies the Tier0
#: frame's saved RBP (the caller's) into its own frame
_OSR_PROLOGUE = bytes.fromhex("488b450050")
#: the JIT map's label (:attr:`emu.capture.CodeRange.tier`) of an OSR method's code range: the capture's own
#: record that the range is an OSR version, which the code bytes a sample holds may not show (a code page
#: the probe read before the JIT wrote the OSR method into it holds stale bytes there)
OSR_TIER = "osr"
_OSR_FP_SET = 8  # offset of the first instruction after ``mov rbp,rsp`` (when the bytes do not say)
#: how far above an OSR frame its Tier0 frame's saved-RBP slot is searched for
_OSR_SEARCH_BYTES = 4096


@dataclass(frozen=True)
class _Isa:
    """The register names and word size a walk of one architecture uses (plain attributes: read on every
    step of a walk)."""

    cfi: CfiArch
    fp: str
    machine: Literal["x64", "x86"]
    ip: str = field(init=False)
    sp: str = field(init=False)
    word: int = field(init=False)
    #: one past the highest address (2**64, 2**32)
    end: int = field(init=False)

    def __post_init__(self) -> None:
        for name, value in (("ip", self.cfi.ip), ("sp", self.cfi.sp), ("word", self.cfi.address_size),
                            ("end", self.cfi.mask + 1)):  # fmt: skip
            object.__setattr__(self, name, value)


_X64 = _Isa(cfi=X64, fp="rbp", machine="x64")
_X86 = _Isa(cfi=X86, fp="ebp", machine="x86")


#: how far into a method the IP may be for :meth:`_Walker._leaf_without_frame` to decode up to it
_LEAF_SCAN_BYTES = 256
_X86_REG_RSP = capstone.x86.X86_REG_RSP
_X86_REG_RBP = capstone.x86.X86_REG_RBP


@functools.cache
def _disassembler() -> capstone.Cs:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


#: how many first bytes of a managed method the prologue reader looks at (the probe records 32)
_PROLOGUE_BYTES = 32
_PUSH_REG = {0x50: "rax", 0x51: "rcx", 0x52: "rdx", 0x53: "rbx", 0x55: "rbp", 0x56: "rsi", 0x57: "rdi"}
_PUSH_REX_REG = {0x54: "r12", 0x55: "r13", 0x56: "r14", 0x57: "r15"}


@dataclass(frozen=True)
class _Prologue:
    """What an x64 managed method's prologue does before its body: pushes and ``sub rsp, imm``."""

    length: int
    #: bytes from the SP after the prologue to the return address slot
    frame_size: int
    #: callee-saved register -> its slot, as an offset from the SP after the prologue
    saved: Mapping[str, int]
    #: whether it sets up a frame pointer (``mov rbp, rsp`` or ``lea rbp, [rsp+imm]``)
    sets_fp: bool
    #: each push or ``sub rsp`` in order: (offset of the next instruction, bytes it moves RSP down, the
    #: register it pushes or None)
    steps: tuple[tuple[int, int, str | None], ...] = ()

    def upto(self, offset: int) -> _Prologue:
        """The frame as it stands with the IP ``offset`` bytes into the method: only the steps that ended
        at or before it have run (the frame-pointer set-up, at :attr:`length`, has not)."""
        done = [step for step in self.steps if step[0] <= offset]
        size = sum(n for _end, n, _reg in done)
        saved, below = {}, size
        for _end, n, reg in done:
            below -= n
            if reg is not None:
                saved[reg] = below
        return _Prologue(length=offset, frame_size=size, saved=saved, sets_fp=False, steps=tuple(done))


def _read_prologue(code: bytes) -> _Prologue | None:
    """Decode the pushes, ``sub rsp, imm8/imm32`` and frame-pointer set-up a JIT or crossgen prologue
    starts with (a flat match over the encodings they use); None when the first instruction is none of
    them (nothing to learn) or the bytes end inside one."""
    pos = 0
    steps: list[tuple[int, int, str | None]] = []
    sets_fp = False
    while pos < len(code):
        b = code[pos]
        if b in _PUSH_REG:
            pos += 1
            steps.append((pos, 8, _PUSH_REG[b]))
        elif b == 0x41 and pos + 1 < len(code) and code[pos + 1] in _PUSH_REX_REG:
            pos += 2
            steps.append((pos, 8, _PUSH_REX_REG[code[pos - 1]]))
        elif code[pos : pos + 3] == b"\x48\x83\xec" and pos + 3 < len(code):  # sub rsp, imm8
            pos += 4
            steps.append((pos, code[pos - 1], None))
        elif code[pos : pos + 3] == b"\x48\x81\xec" and pos + 7 <= len(code):  # sub rsp, imm32
            pos += 7
            steps.append((pos, int.from_bytes(code[pos - 4 : pos], "little"), None))
        elif code[pos : pos + 3] in (b"\x48\x8b\xec", b"\x48\x89\xe5"):  # mov rbp, rsp
            sets_fp = True
            break
        elif code[pos : pos + 3] == b"\x48\x8d\xac":  # lea rbp, [rsp+disp32] (SIB 0x24)
            sets_fp = True
            break
        elif code[pos : pos + 3] == b"\x48\x8d\x6c":  # lea rbp, [rsp+disp8] (SIB 0x24)
            sets_fp = True
            break
        else:
            break
    if pos == 0 and not sets_fp:
        return None
    if any(reg == "rbp" for _end, _n, reg in steps) and not sets_fp:
        return None  # RBP saved but the set-up not seen (an encoding not read here): let the chain decide
    whole = _Prologue(length=pos, frame_size=0, saved={}, sets_fp=sets_fp, steps=tuple(steps)).upto(pos)
    return _Prologue(length=pos, frame_size=whole.frame_size, saved=whole.saved, sets_fp=sets_fp,
                     steps=tuple(steps))  # fmt: skip


def _isa(capture: Capture) -> _Isa:
    return _X86 if capture.manifest.arch is CaptureArch.X86 else _X64


class Trust(StrEnum):
    """How a frame's registers were found (breakpad's frame trust, plus ``emulated``)."""

    CONTEXT = "context"
    CFI = "cfi"
    FRAME_POINTER = "frame_pointer"
    EMULATED = "emulated"
    SCAN = "scan"
    #: a managed method with no frame pointer: its frame size read from its prologue (pushes, sub rsp)
    PROLOGUE = "prologue"
    #: the interrupted instruction in an epilogue's tail (pops, then ret): the instructions run forward
    EPILOGUE = "epilogue"


class StopKind(StrEnum):
    #: CFI says the return address is undefined (the thread's first frame)
    END_OF_STACK = "end_of_stack"
    IP_ZERO = "ip_zero"
    #: the caller's SP is not above the frame's (a cycle or corrupt chain)
    SP_NOT_INCREASING = "sp_not_increasing"
    FRAME_LIMIT = "frame_limit"
    NO_UNWIND_INFO = "no_unwind_info"
    OUTSIDE_MAPPINGS = "outside_mappings"
    MEMORY = "memory"
    CFI_ERROR = "cfi_error"
    MODULE_UNAVAILABLE = "module_unavailable"
    BUDGET = "budget"
    EMULATION = "emulation"
    FRAME_POINTER = "frame_pointer"


@dataclass(frozen=True)
class UnwoundFrame:
    ip: int
    sp: int
    trust: Trust
    #: the registers known in this frame (a subset of rip, rsp, rbp, rbx, r12..r15 below the top; on x86
    #: of eip, esp, ebp, ebx, esi, edi)
    registers: Mapping[str, int]
    function_id: int | None = None
    module: ModuleEntry | None = None
    #: in a ReadyToRun module's range (managed code; its FunctionID only if the JIT map lists the method)
    ready_to_run: bool = False


def _unwound_frame(
    ip: int, sp: int, trust: Trust, registers: dict[str, int], function_id: int | None,
    module: ModuleEntry | None, ready_to_run: bool,
) -> UnwoundFrame:
    """``UnwoundFrame(...)`` with its fields set in one step (a frozen dataclass's ``__init__`` sets them
    one ``object.__setattr__`` at a time: a walk makes one per frame)."""
    frame = object.__new__(UnwoundFrame)
    frame.__dict__.update(ip=ip, sp=sp, trust=trust, registers=registers, function_id=function_id,
                          module=module, ready_to_run=ready_to_run)  # fmt: skip
    return frame


@dataclass(frozen=True)
class UnwindResult:
    frames: tuple[UnwoundFrame, ...]
    stop: StopKind
    detail: str
    #: where code is in the capture (the JIT map's names, modules), as the walk used it
    code: CodeMap
    #: instructions emulated in all (deterministic: a count, not a time)
    emulated_instructions: int = 0
    #: the capture's memory as the walk read it
    memory: CaptureMemory | None = None


class _Stop(Exception):
    def __init__(self, kind: StopKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


#: what an address is (:meth:`CodeMap.places`): its FunctionID (0: none), module (None: none), whether it is
#: ReadyToRun code, the start of its JIT range (None: none), the path whose CFI covers it (None: none)
Place = tuple[int, "ModuleEntry | None", bool, "int | None", "str | None"]


def _same_place(a: Place, b: Place) -> bool:
    return a[0] == b[0] and a[1] is b[1] and a[2] == b[2] and a[3] == b[3] and a[4] == b[4]


#: markers of the prologue cache
_UNREAD, _NOT_CAPTURED = object(), object()


@dataclass
class CodeMap:
    """Where code is in a capture: the module map, the JIT map, and each module's CFI (loaded lazily)."""

    capture: Capture
    allow_disk: bool = True
    _tables: dict[str, tuple[CfiTable, int] | str] = field(default_factory=dict)
    #: managed method start -> its decoded prologue (None: none read there; _NOT_CAPTURED: no bytes);
    #: derived from the capture's bytes only, so kept across unwinds of one capture
    prologues: dict[int, object] = field(default_factory=dict)
    #: managed method start -> whether it begins with the OSR prologue (filled first from the JIT map's
    #: ranges labelled :data:`OSR_TIER`, then from the capture's bytes as the walk asks)
    osr: dict[int, bool] = field(default_factory=dict)
    #: OSR method start -> the offset of the first instruction after the one that sets its RBP
    osr_fp_set: dict[int, int] = field(default_factory=dict)
    #: funclet start -> the end of its ``sub rsp, N`` and N, or None where the code there is no PSPSym
    #: funclet's prolog (emu.replay's funclet rule; from the capture's bytes, kept like ``prologues``)
    funclet_prologs: dict[int, tuple[int, int] | None] = field(default_factory=dict)
    #: managed method start -> True where :func:`_quick_frame_pointer`'s checks of the method alone (its
    #: prologue read and setting a frame pointer, or none decoded; not OSR code) passed: the walk then
    #: follows the chain without asking again (derived from the cached prologue and OSR check)
    fp_chain: dict[int, bool] = field(default_factory=dict)
    #: return address -> the target of the ``call rel32`` ending there when later than it, else None
    #: (emu.replay's funclet rule; from the capture's bytes, kept like ``prologues``)
    forward_calls: dict[int, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        man = self.capture.manifest
        self.cfi_arch = _isa(self.capture).cfi
        self.modules = sorted(man.modules, key=lambda m: m.start)
        self._mod_starts = [m.start for m in self.modules]
        spans = sorted((r.start, r.end, m.function_id) for m in man.jit.methods for r in m.ranges)
        self._jit_starts = [s for s, _, _ in spans]
        self._jit = spans
        #: the lowest and highest address of JIT code: no return address into it lies outside
        self.jit_span = (spans[0][0], max(e for _, e, _ in spans)) if spans else (0, 0)
        self.names = {m.function_id: m.name for m in man.jit.methods if m.name}
        # OSR code versions by the JIT map's own label (issue 24): one frame with the Tier0 frame below them
        for m in man.jit.methods:
            for r in m.ranges:
                if r.tier == OSR_TIER:
                    self.osr[r.start] = True
        # ReadyToRun code: the ranges the JIT map lists, and, when it lists none for an image, the
        # executable mappings of PE images (a ``.dll``/``.exe`` the runtime mapped itself: no build-id,
        # no .eh_frame; the 3.1 capture records no ReadyToRun ranges at all)
        listed = {r.path for r in man.jit.ready_to_run}
        pe_images = [
            (m.start, m.end)
            for m in self.modules
            if m.is_file and "x" in m.perms and m.build_id is None and m.path not in listed
            and (m.path or "").lower().endswith(_PE_SUFFIXES)
        ]  # fmt: skip
        self._r2r = sorted([(r.start, r.end) for r in man.jit.ready_to_run] + pe_images)
        self._r2r_starts = [s for s, _ in self._r2r]
        # in_ready_to_run by one bisect: the ranges merged where they overlap or touch
        merged: list[list[int]] = []
        for s, e in self._r2r:
            if e <= s:
                continue
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self._r2r_merged_starts = [s for s, _ in merged]
        self._r2r_merged_ends = [e for _, e in merged]
        #: id(module) -> (the module, whether it names a file, its file's base name): read once per map
        self._module_info = {
            id(m): (m, m.is_file, os.path.basename(m.path) if m.is_file and m.path else None)
            for m in self.modules
        }
        self._ids_by_name: dict[str, int] | None = None
        self._places: tuple[list[int], list[Place]] | None = None

    def places(self) -> tuple[list[int], list[Place]]:
        """The address space cut where any JIT range, module or ReadyToRun range starts or ends: the
        piece starts (the first 0) and, for each piece, what :meth:`function_from_ip`, :meth:`module_at`
        and :meth:`in_ready_to_run` give anywhere in it, the start of the JIT range it lies in (None
        outside one) and the path whose CFI covers it (None outside a module file): a walk finds all of
        them for an address by one bisection (pieces that give the same are joined). Built once per map."""
        if self._places is None:
            points = {0}
            for s, e, _fid in self._jit:
                points.update((s, e))
            for m in self.modules:
                points.update((m.start, m.end))
            points.update(self._r2r_merged_starts)
            points.update(self._r2r_merged_ends)
            starts: list[int] = []
            values: list[Place] = []
            for at in sorted(points):
                k = bisect.bisect_right(self._jit_starts, at) - 1
                in_jit = k >= 0 and at < self._jit[k][1]
                module = self.module_at(at)
                value = (
                    self._jit[k][2] if in_jit else 0, module, self.in_ready_to_run(at),
                    self._jit[k][0] if in_jit else None,
                    (module.path or "") if module is not None and self.is_file(module) else None,
                )  # fmt: skip
                if values and _same_place(values[-1], value):
                    continue
                starts.append(at)
                values.append(value)
            self._places = (starts, values)
        return self._places

    def function_from_ip(self, ip: int) -> int:
        """GetFunctionFromIP over the capture's JIT map: the FunctionID, 0 for code that is not managed."""
        k = bisect.bisect_right(self._jit_starts, ip) - 1
        if k >= 0 and ip < self._jit[k][1]:
            return self._jit[k][2]
        return 0

    def method_range(self, ip: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(self._jit_starts, ip) - 1
        if k >= 0 and ip < self._jit[k][1]:
            return self._jit[k][0], self._jit[k][1]
        return None

    def in_ready_to_run(self, ip: int) -> bool:
        k = bisect.bisect_right(self._r2r_merged_starts, ip) - 1
        return k >= 0 and ip < self._r2r_merged_ends[k]

    def is_file(self, module: ModuleEntry) -> bool:
        """``module.is_file``, read once per module of the map."""
        info = self._module_info.get(id(module))
        return info[1] if info is not None and info[0] is module else module.is_file

    def file_name(self, module: ModuleEntry) -> str | None:
        """The base name of the file ``module`` maps (None when it maps none)."""
        info = self._module_info.get(id(module))
        if info is not None and info[0] is module:
            return info[2]
        return os.path.basename(module.path) if module.is_file and module.path else None

    def ids_by_name(self) -> dict[str, int]:
        """Method name -> FunctionID (the last of the JIT map's methods with that name)."""
        if self._ids_by_name is None:
            self._ids_by_name = {v: k for k, v in self.names.items()}
        return self._ids_by_name

    def module_at(self, ip: int) -> ModuleEntry | None:
        k = bisect.bisect_right(self._mod_starts, ip) - 1
        if k >= 0 and ip < self.modules[k].end:
            return self.modules[k]
        return None

    def executable(self, ip: int) -> bool:
        if self.function_from_ip(ip):
            return True
        m = self.module_at(ip)
        return m is not None and "x" in m.perms

    def loaded_tables(self) -> dict[str, tuple[CfiTable, int]]:
        """path -> (CFI table, load bias) of every module whose CFI was loaded so far."""
        return {path: got for path, got in self._tables.items() if not isinstance(got, str)}

    def table(self, module: ModuleEntry) -> tuple[CfiTable, int]:
        """The CFI table and load bias of ``module``'s file; :class:`CfiError` says why there is none."""
        path = module.path or ""
        got = self._tables.get(path)
        if got is None:
            try:
                got = self._load(module)
            except CfiError as exc:
                got = str(exc)
            self._tables[path] = got
        if isinstance(got, str):
            raise CfiError(got)
        return got

    def _load(self, module: ModuleEntry) -> tuple[CfiTable, int]:
        path = module.path or ""
        for emb in self.capture.manifest.cfi:
            if emb.path == path:
                if emb.build_id and module.build_id and emb.build_id != module.build_id:
                    raise CfiError(
                        f"{path}: embedded CFI has build-id {emb.build_id}, the map says {module.build_id}"
                    )
                hdr = self.capture.blob(emb.eh_frame_hdr) if emb.eh_frame_hdr else None
                table = table_for(
                    self.capture.blob(emb.eh_frame), emb.eh_frame_vaddr, hdr, emb.eh_frame_hdr_vaddr,
                    arch=self.cfi_arch,
                )  # fmt: skip
                return table, emb.load_bias
        if not self.allow_disk:
            raise CfiError(f"{path}: no CFI embedded in the capture (disk files not allowed)")
        if module.build_id is None:
            raise CfiError(f"{path}: the capture has no build-id to check the file against")
        elf = read_elf(path)
        if elf.build_id != module.build_id:
            raise CfiError(f"{path}: build-id {elf.build_id} on disk, {module.build_id} in the capture")
        if elf.eh_frame is None:
            raise CfiError(f"{path}: no .eh_frame")
        first = next((m for m in self.modules if m.path == path and m.offset == 0), module)
        bias = load_bias(elf.loads, first.start, first.offset)
        if bias is None:
            raise CfiError(f"{path}: no load segment maps file offset {first.offset:#x}")
        table = table_for(
            elf.eh_frame, elf.eh_frame_vaddr, elf.eh_frame_hdr, elf.eh_frame_hdr_vaddr, arch=self.cfi_arch
        )
        return table, bias


def looks_like_return_address(memory: CaptureMemory, ip: int) -> bool:
    """A call instruction ends right before ``ip`` (e8 rel32, ff /2 with a register or memory operand;
    the same encodings on x86, where they have no REX prefix)."""
    try:
        before = memory.read(ip - 7, 7)
    except MemoryFault:
        return False
    if before[2] == 0xE8:
        return True
    for back in (2, 3, 4, 6, 7):  # ff /2: call r/m64 with modrm (+sib, disp8/disp32)
        op, modrm = before[7 - back], before[7 - back + 1]
        if op == 0xFF and (modrm >> 3) & 7 == 2:
            return True
    return False


class _Walker:
    def __init__(
        self, capture: Capture, code: CodeMap, memory: CaptureMemory, machine: UnicornMachine
    ) -> None:
        self.capture = capture
        self.code = code
        self.memory = memory
        self.machine = machine
        self.emulated = 0
        self.isa = _isa(capture)

    def word(self, address: int) -> int:
        """The little-endian word (8 bytes on x64, 4 on x86) at ``address``; MemoryFault if not captured."""
        if address + self.isa.word > self.isa.end:
            raise MemoryFault(address, self.isa.word, f"read past the {8 * self.isa.word}-bit address space")
        if self.isa.word == 8:
            return self.memory.read_u64(address)
        return int.from_bytes(self.memory.read(address, 4), "little")

    def caller(
        self, regs: Mapping[str, int], exact: bool, index: int,
        where: tuple[bool, ModuleEntry | None] | None = None,
    ) -> tuple[dict[str, int], Trust]:
        """The caller's registers and how they were found. ``where``: whether the IP looked up (the IP on
        an exact frame, IP - 1 above it) is managed code and its module, when the walk has them already."""
        ip = regs[self.isa.ip]
        lookup = ip if exact else ip - 1
        if where is None:
            where = (bool(self.code.function_from_ip(lookup)) or self.code.in_ready_to_run(lookup),
                     self.code.module_at(lookup))  # fmt: skip
        managed, module = where
        if managed:
            return self.managed(regs, exact, lookup)
        if module is None:
            raise _Stop(
                StopKind.OUTSIDE_MAPPINGS, f"frame {index}: IP {ip:#x} is in no mapping of the capture"
            )
        if self.code.is_file(module):
            epilogue = self._epilogue(regs) if exact else None
            if epilogue is not None:
                return epilogue, Trust.EPILOGUE
            try:
                return self.cfi(regs, module, lookup, index), Trust.CFI
            except _Stop as stop:
                # the interrupted instruction is in hand-written code of a module that has no FDE for it
                # (the runtime's assembly helpers): its caller is found as a stub's would be, by scan
                if not exact or stop.kind is not StopKind.NO_UNWIND_INFO:
                    raise
                return self._scan_past_stub(regs, stop)
        if "x" not in module.perms:
            raise _Stop(
                StopKind.OUTSIDE_MAPPINGS, f"frame {index}: IP {ip:#x} is in memory that is not executable"
            )
        if not exact:
            raise _Stop(
                StopKind.NO_UNWIND_INFO,
                f"frame {index}: return address {ip:#x} is in anonymous code with no unwind information",
            )
        try:
            state, returned = self.emulate(regs, index)
        except _Stop as stop:
            if stop.kind is not StopKind.MEMORY:
                raise
            # The stub reads data no capture holds (the write barrier's card table, a dispatch stub's
            # cache, a precode's data page): its caller is found by scanning from SP instead, and the
            # frame says so (trust "scan").
            return self._scan_past_stub(regs, stop)
        if returned:  # the code returned: the state is its caller's frame
            return state, Trust.EMULATED
        caller, _trust = self.caller(state, True, index)  # it tail-called: the state is a callee's entry
        return caller, Trust.EMULATED

    def _scan_past_stub(self, regs: Mapping[str, int], stop: _Stop) -> tuple[dict[str, int], Trust]:
        """The caller of interrupted code no unwind rule covers, by scan (``stop`` is raised when the scan
        finds nothing). The ABI's callee-saved registers still hold the caller's values unless that code
        changed them, which code that never ran cannot show: they are carried over (the trust says scan).
        One change shows: a return address found right above the frame pointer (at ``[rbp + 8]``) means
        that code set up a frame (``push rbp; mov rbp, rsp``, as the vDSO's clock_gettime does), so the
        caller's frame pointer is the one it saved at ``[rbp]``."""
        try:
            caller, trust = self.scan(regs, stop.detail)
        except _Stop:
            raise stop from None
        fp, word = regs.get(self.isa.fp), self.isa.word
        if fp is not None and caller[self.isa.sp] == fp + 2 * word:
            try:
                caller[self.isa.fp] = self.word(fp)
            except MemoryFault:
                pass
        for name in self.isa.cfi.callee_saved:
            if name in regs:
                caller.setdefault(name, regs[name])
        return caller, trust

    def cfi(self, regs: Mapping[str, int], module: ModuleEntry, pc: int, index: int) -> dict[str, int]:
        try:
            table, bias = self.code.table(module)
        except CfiError as exc:
            raise _Stop(StopKind.MODULE_UNAVAILABLE, f"frame {index}: {exc}") from None
        try:
            row = table.row_for((pc - bias) & (2**64 - 1))
            if row is None:
                raise _Stop(
                    StopKind.NO_UNWIND_INFO,
                    f"frame {index}: no FDE covers {regs[self.isa.ip]:#x} in {module.path}",
                )
            out = table.step(row, regs, self.memory)
        except CfiError as exc:
            raise _Stop(StopKind.CFI_ERROR, f"frame {index}: {exc}") from None
        ra_rule = row.rules.get(row.ra_register)
        if out.get(self.isa.ip) == 0 and ra_rule is not None and ra_rule.type == "UNDEFINED":
            raise _Stop(StopKind.END_OF_STACK, f"frame {index}: CFI marks the return address undefined")
        return out

    def managed(self, regs: Mapping[str, int], exact: bool, pc: int) -> tuple[dict[str, int], Trust]:
        isa = self.isa
        w = isa.word
        sp = regs[isa.sp]
        rng = self.code.method_range(pc)  # None in ReadyToRun code the JIT map has no method for
        start = rng[0] if rng is not None else None
        fp_name = isa.fp.upper()
        try:
            if exact:
                ip = regs[isa.ip]
                first = self._byte(start) if start is not None else None
                osr = start is not None and self._is_osr(start)
                # x86 managed code also returns with ``ret imm16`` (callee pops; the CFA is the same)
                rets = (0xC3,) if isa.machine == "x64" else (0xC3, 0xC2)
                if (ip == start and not osr) or self._byte(ip) in rets or self._tail_jump_next(start, ip):
                    return self._ret_at(regs, sp, keep_fp=True), Trust.FRAME_POINTER
                if start is not None and first == 0x55 and ip == start + 1:
                    out = self._ret_at(regs, sp + w, keep_fp=False)
                    out[isa.fp] = self.word(sp)
                    return out, Trust.FRAME_POINTER
            frameless = self._frameless(start, regs[isa.ip], exact) if start is not None else None
            if frameless is not None:
                caller = self._frameless_caller(regs, frameless)
                ret = caller[isa.ip]
                # the prologue's frame size must lead to a return address (a call ends right before it);
                # otherwise the frame-pointer chain and the scan below decide
                if self.code.executable(ret) and looks_like_return_address(self.memory, ret):
                    return caller, Trust.PROLOGUE
            rbp = regs.get(isa.fp)
            if rbp is None:
                raise _Stop(
                    StopKind.FRAME_POINTER, f"managed frame at {regs[isa.ip]:#x}: {fp_name} is unknown"
                )
            if start is not None and self._is_osr(start):
                rbp = self._osr_tier0_rbp(regs, rbp, start, exact)
            if rbp < sp or rbp > isa.end - 3 * w:
                raise _Stop(
                    StopKind.SP_NOT_INCREASING,
                    f"managed frame at {regs[isa.ip]:#x}: the frame-pointer chain goes down or cycles "
                    f"({fp_name} {rbp:#x}, SP {sp:#x})",
                )
            caller = {
                isa.ip: self.word(rbp + w),
                isa.sp: rbp + 2 * w,
                isa.fp: self.word(rbp),
            }
        except MemoryFault as exc:
            return self.scan(regs, f"frame-pointer chain reads outside the capture ({exc.address:#x})")
        if not self.code.executable(caller[isa.ip]):
            return self.scan(regs, f"frame-pointer chain gives IP {caller[isa.ip]:#x}, not executable code")
        return caller, Trust.FRAME_POINTER

    def _frameless(self, start: int, ip: int, exact: bool) -> _Prologue | None:
        """The frame of a managed method whose frame pointer is not (yet) set up (x64): the prologue of one
        that sets none, when the frame is past it, or the part of any prologue that ran before the
        interrupted IP. None when the method sets one up and is past that, or its first bytes are not in
        the capture. ReadyToRun code and optimised JIT code omit the frame pointer where they can."""
        if self.isa.machine != "x64":
            return None
        got = self.code.prologues.get(start, _UNREAD)
        if got is _UNREAD:
            try:
                got = _read_prologue(self.memory.read(start, _PROLOGUE_BYTES))
            except MemoryFault:
                got = _NOT_CAPTURED
            self.code.prologues[start] = got
        if got is _NOT_CAPTURED:
            return None
        prologue = got if isinstance(got, _Prologue) else None
        if prologue is None and exact and not self._is_osr(start):
            return self._leaf_without_frame(start, ip)
        if prologue is None:
            return None
        if exact and ip - start <= prologue.length:
            # interrupted inside the prologue, before any frame-pointer set-up: the steps that ran so far
            return prologue.upto(ip - start)
        if prologue.sets_fp or start + prologue.length > ip - (0 if exact else 1):
            return None
        return prologue

    def _tail_jump_next(self, start: int | None, ip: int) -> bool:
        """x64: the IP is a tail call's ``jmp`` right after the epilogue's ``pop rbp`` (CoreLib's
        CastHelpers.StelemRef jumps to the write barrier so): the frame is gone, RBP is the caller's and
        the return address is on top of the stack, as at a ``ret``."""
        if self.isa.machine != "x64" or start is None or not 0 < ip - start <= _LEAF_SCAN_BYTES:
            return False
        try:
            code = self.memory.read(start, ip - start + 15)  # up to the longest instruction at the IP
        except MemoryFault:
            return False
        last = None
        for insn in _disassembler().disasm(code, start):
            if insn.address == ip:
                return last == "pop rbp" and insn.mnemonic == "jmp"
            last = f"{insn.mnemonic} {insn.op_str}"
        return False

    def _leaf_without_frame(self, start: int, ip: int) -> _Prologue | None:
        """The interrupted method when nothing from its first instruction up to the IP writes RSP or RBP
        (a leaf with no frame, as optimised code often is): its return address is on top of the stack.
        None when those bytes are not all in the capture or any of them touches the stack pointer."""
        if not 0 < ip - start <= _LEAF_SCAN_BYTES:
            return None
        try:
            code = self.memory.read(start, ip - start)
        except MemoryFault:
            return None
        end = start
        for insn in _disassembler().disasm(code, start):
            _read, written = insn.regs_access()
            if _X86_REG_RSP in written or _X86_REG_RBP in written:
                return None
            end = insn.address + insn.size
        if end != ip:
            return None  # the bytes do not decode to instructions ending at the IP
        return _Prologue(length=0, frame_size=0, saved={}, sets_fp=False)

    def _frameless_caller(self, regs: Mapping[str, int], prologue: _Prologue) -> dict[str, int]:
        sp = regs["rsp"]
        out = {"rip": self.word(sp + prologue.frame_size), "rsp": sp + prologue.frame_size + 8}
        for name in self.isa.cfi.callee_saved:
            if name in prologue.saved:
                out[name] = self.word(sp + prologue.saved[name])
            elif name in regs:
                out[name] = regs[name]  # the method left it alone: it still holds the caller's value
        return out

    def _is_osr(self, start: int) -> bool:
        if self.isa.machine != "x64":  # the OSR prologue below is x64 code
            return False
        got = self.code.osr.get(start)
        if got is None:
            try:
                got = self.memory.read(start, len(_OSR_PROLOGUE)) == _OSR_PROLOGUE
            except MemoryFault:
                got = False
            self.code.osr[start] = got
        return got

    def _osr_tier0_rbp(self, regs: Mapping[str, int], rbp: int, start: int, exact: bool) -> int:
        """The RBP of the Tier0 frame an OSR frame sits on: the runtime unwinds both as one frame (the
        OSR method's caller is the Tier0 method's caller), so the chain continues from the Tier0 frame.

        Before ``mov rbp,rsp`` RBP is still the Tier0 frame's. After it, RBP is the OSR frame's, whose
        saved-RBP slot holds a copy of the Tier0 frame's saved RBP: the Tier0 frame's RBP is the first
        slot above the OSR frame's return slot that holds the same value under a return address."""
        if exact and regs["rip"] < start + self._osr_fp_set(start):
            return rbp
        saved = self.memory.read_u64(rbp)
        for slot in range(rbp + 16, rbp + 16 + _OSR_SEARCH_BYTES, 8):
            try:
                if self.memory.read_u64(slot) != saved:
                    continue
                ret = self.memory.read_u64(slot + 8)
            except MemoryFault:
                break
            if self.code.executable(ret) and looks_like_return_address(self.memory, ret):
                return slot
        raise _Stop(
            StopKind.FRAME_POINTER,
            f"OSR frame at {regs['rip']:#x}: no Tier0 frame found above RBP {rbp:#x}",
        )

    def _osr_fp_set(self, start: int) -> int:
        """Where an OSR method's RBP is its own: the offset after its prologue's first instruction that
        writes RBP (``mov rbp,rsp``; on .NET 8 ``lea rbp,[rsp+n]`` after ``sub rsp,n``), read from the
        capture's bytes; :data:`_OSR_FP_SET` when they do not show one (not captured, or stale)."""
        got = self.code.osr_fp_set.get(start)
        if got is None:
            got = _OSR_FP_SET
            try:
                code = self.memory.read(start, 32)
            except MemoryFault:
                code = b""
            if is_osr_entry(code):
                for insn in _disassembler().disasm(code, start):
                    if _X86_REG_RBP in insn.regs_access()[1]:
                        got = insn.address + insn.size - start
                        break
            self.code.osr_fp_set[start] = got
        return got

    def _epilogue(self, regs: Mapping[str, int]) -> dict[str, int] | None:
        """The caller's registers when the interrupted instruction (x64) is in an epilogue's tail: ``pop
        r64`` instructions then ``ret``, run forward (each pop loads a register and moves SP up a word, the
        ret loads the IP). A module's FDE may leave its epilogues out: libcoreclr 3.1's do, and after the
        first pop its CFA is a word off (docs/seeding.md). None when the bytes at the IP are not such a
        tail, or a byte or word is not in the capture."""
        isa = self.isa
        if isa.machine != "x64":
            return None
        ip, sp = regs[isa.ip], regs[isa.sp]
        out = dict(regs)
        at = ip
        for _ in range(16):
            op = self._byte(at)
            rex_b = op == 0x41
            if rex_b:
                at += 1
                op = self._byte(at)
            if op is None:
                return None
            try:
                if op == 0xC3 and not rex_b:
                    out[isa.ip], out[isa.sp] = self.word(sp), sp + isa.word
                    keep = (isa.ip, isa.sp, *isa.cfi.callee_saved)
                    return {k: v for k, v in out.items() if k in keep}
                if not 0x58 <= op <= 0x5F or (op == 0x5C and not rex_b):  # pop r64 (pop rsp refused)
                    return None
                out[f"r{8 + op - 0x58}" if rex_b else _POP_X64[op - 0x58]] = self.word(sp)
            except MemoryFault:
                return None
            sp += isa.word
            at += 1
        return None

    def _byte(self, address: int) -> int | None:
        memory = self.memory
        if not memory.has(address):  # (asked first: a module's code is seldom captured, and a fault costs)
            return None
        return memory.read(address, 1)[0]

    def _ret_at(self, regs: Mapping[str, int], slot: int, *, keep_fp: bool) -> dict[str, int]:
        isa = self.isa
        out = {isa.ip: self.word(slot), isa.sp: slot + isa.word}
        if keep_fp and isa.fp in regs:
            out[isa.fp] = regs[isa.fp]
        return out

    def scan(self, regs: Mapping[str, int], why: str) -> tuple[dict[str, int], Trust]:
        isa = self.isa
        sp = regs[isa.sp]
        for slot in range(sp, sp + _SCAN_BYTES, isa.word):
            try:
                value = self.word(slot)
            except MemoryFault:
                break
            if self.code.executable(value) and looks_like_return_address(self.memory, value):
                out = {isa.ip: value, isa.sp: slot + isa.word}
                if isa.machine == "x86":
                    saved = self._saved_fp_under(regs, slot)
                    if saved is not None:
                        out[isa.fp] = saved
                return out, Trust.SCAN
        raise _Stop(
            StopKind.FRAME_POINTER,
            f"managed frame at {regs[isa.ip]:#x}: {why}; no return address found by scan",
        )

    def _saved_fp_under(self, regs: Mapping[str, int], slot: int) -> int | None:
        """x86: the caller's EBP a managed method saved with its first instruction ``push ebp``, in the
        slot right under its return address at ``slot`` (None when the method does not begin so, or the
        walk is not past that instruction)."""
        ip = regs[self.isa.ip]
        rng = self.code.method_range(ip)
        if rng is None or self._byte(rng[0]) != 0x55 or ip <= rng[0]:
            return None
        try:
            return self.word(slot - self.isa.word)
        except MemoryFault:
            return None

    def emulate(self, regs: Mapping[str, int], index: int) -> tuple[dict[str, int], bool]:
        """The registers where code with no unwind information reaches code that can be unwound, and
        whether it got there by returning (``ret``, ``ret imm16``, ``rep ret``) rather than by a jump."""
        start_sp = regs[self.isa.sp]
        code = self.code

        def should_stop(address: int) -> str | None:
            if code.function_from_ip(address):
                return "managed code"
            m = code.module_at(address)
            if m is not None and m.is_file:
                return f"module code ({m.path})"  # never run module code (glibc's AVX) forward
            if m is None or "x" not in m.perms:
                raise EmulationFault(
                    "memory", f"jump to {address:#x}, outside the capture's executable memory"
                )
            return None

        try:
            run = self.machine.run(regs, should_stop)
        except EmulationFault as exc:
            kind = {"budget": StopKind.BUDGET, "memory": StopKind.MEMORY}.get(exc.kind, StopKind.EMULATION)
            raise _Stop(kind, f"frame {index}: emulating code with no unwind information: {exc}") from None
        self.emulated += run.instructions
        if run.registers[self.isa.sp] < start_sp:
            raise _Stop(
                StopKind.NO_UNWIND_INFO,
                f"frame {index}: the code with no unwind information calls out at {run.stopped_at:#x}",
            )
        returned = False
        if run.last_instruction is not None:
            # it was executed: its first byte exists; the second is read only where it can matter (rep ret)
            op = self.memory.read(run.last_instruction, 1)
            if op[0] == 0xF3 and self.memory.has(run.last_instruction + 1):
                op = self.memory.read(run.last_instruction, 2)
            returned = op[0] in (0xC3, 0xC2) or op == b"\xf3\xc3"
        return run.registers, returned


_MASK64 = 2**64 - 1
#: the registers ``pop`` (58+r, no REX) loads on x64, in encoding order (4, rsp, is refused before)
_POP_X64 = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi")


def is_osr_entry(head: bytes) -> bool:
    """Whether a code range's first bytes are an x64 OSR method's entry: it reads the saved RBP of the Tier0
    frame it runs on (the OSR method is never called: the patchpoint helper enters it with the Tier0
    frame's RBP and SP, and its frame incorporates the Tier0 frame; dotnet/runtime
    docs/design/features/OsrDetailsAndDebugging.md)."""
    return head.startswith(_OSR_PROLOGUE)


def _initial_registers(capture: Capture) -> dict[str, int]:
    """The capture's registers by name (a new dict: the walk's first frame keeps it), read from the manifest
    once per capture."""
    got = capture.cache.get("unwind:registers")
    if not isinstance(got, dict):
        got = capture.manifest.registers.general()
        capture.cache["unwind:registers"] = got
    return dict(got)


def _quick_frame_pointer(
    code: CodeMap, memory: CaptureMemory, regs: Mapping[str, int], start: int | None, ip: int, sp: int
) -> dict[str, int] | None:
    """What :meth:`_Walker.managed` gives for a frame above the top (x64) when it follows the frame-pointer
    chain: a JIT-compiled method (``start``: the start of the JIT range its IP - 1 lies in, None when it
    lies in none) whose prologue and OSR check are cached and say the chain applies, RBP above SP, both
    words captured and the return address in executable code. None in every other case, which the walker
    then decides (prologue frames, OSR frames, scans, stops)."""
    if start is None:
        return None  # ReadyToRun code the JIT map has no method for
    prologue = code.prologues.get(start, _UNREAD)
    if prologue is _UNREAD:
        return None
    if isinstance(prologue, _Prologue) and not (prologue.sets_fp or start + prologue.length > ip - 1):
        return None  # a frame without a frame pointer: its prologue decides
    if code.osr.get(start) is not False:
        return None
    if not isinstance(prologue, _Prologue) or prologue.sets_fp:
        code.fp_chain[start] = True  # the checks above hold for every IP of the method
    return _fp_caller(code, memory, regs, sp)


def _fp_caller(
    code: CodeMap, memory: CaptureMemory, regs: Mapping[str, int], sp: int
) -> dict[str, int] | None:
    """The caller by the frame-pointer chain once the method's checks passed (:func:`_quick_frame_pointer`):
    RBP above SP, both words captured and the return address in executable code; None otherwise."""
    rbp = regs.get("rbp")
    if rbp is None or rbp < sp or rbp > _MASK64 - 23:
        return None
    try:
        saved, ret = memory.read_u64_pair(rbp)
    except MemoryFault:
        return None
    # code.executable(ret), by the map's pieces
    starts, places = code.places()
    fid, module, _r2r, _start, _cfi = places[bisect.bisect_right(starts, ret) - 1]
    if not fid and (module is None or "x" not in module.perms):
        return None
    return {"rip": ret, "rsp": rbp + 16, "rbp": saved}


class WalkOptions(TypedDict, total=False):
    """The keyword options of :func:`unwind` and :func:`walk_frames` (their defaults: walk_frames')."""

    code: CodeMap | None
    memory: CaptureMemory | None
    max_frames: int
    allow_disk: bool
    max_instructions: int
    max_seconds: float | None


def unwind(capture: Capture, **options: Unpack[WalkOptions]) -> UnwindResult:
    """Unwind ``capture``'s thread from its registers (see the module docstring).

    Emulation is bounded by ``max_instructions``; by default no time budget is set (``max_seconds``), so a
    replay never reads the clock and gives the same result however loaded the machine is.

    The code map, memory and CPU are kept in ``capture.cache`` for the next unwind of the same capture
    (they hold no result of a walk, so every unwind of a capture gives the same result)."""
    raw = walk_frames(capture, **options)
    new_frame = object.__new__
    frames: list[UnwoundFrame] = []
    for ip, sp, trust, regs, fid, module, r2r in raw.frames:
        # UnwoundFrame(...) with its fields set in one step (a frozen dataclass's __init__ sets them one
        # at a time)
        frame = new_frame(UnwoundFrame)
        frame.__dict__.update(ip=ip, sp=sp, trust=trust, registers=regs, function_id=fid, module=module,
                              ready_to_run=r2r)  # fmt: skip
        frames.append(frame)
    return UnwindResult(
        frames=tuple(frames),
        stop=raw.stop,
        detail=raw.detail,
        code=raw.code,
        emulated_instructions=raw.emulated_instructions,
        memory=raw.memory,
    )


#: an :class:`UnwoundFrame`'s fields as a plain tuple, in its order (what :func:`walk_frames` gives: one per
#: frame, the cheapest object to make)
RawFrame = tuple[int, int, Trust, Mapping[str, int], int | None, ModuleEntry | None, bool]


class RawUnwind(NamedTuple):
    """:class:`UnwindResult` with its frames as :class:`RawFrame` tuples."""

    frames: list[RawFrame]
    stop: StopKind
    detail: str
    code: CodeMap
    emulated_instructions: int
    memory: CaptureMemory


def walk_frames(
    capture: Capture,
    *,
    code: CodeMap | None = None,
    memory: CaptureMemory | None = None,
    max_frames: int = MAX_FRAMES,
    allow_disk: bool = True,
    max_instructions: int = 10_000,
    max_seconds: float | None = None,
) -> RawUnwind:
    """:func:`unwind`'s walk, its frames as tuples (a replay makes its own frames of them)."""
    key = f"unwind:{allow_disk}:{max_instructions}:{max_seconds}"
    cached = capture.cache.get(key)
    if isinstance(cached, tuple) and code is None and memory is None:
        code, memory, machine = cached
    else:
        code = code or CodeMap(capture, allow_disk=allow_disk)
        if memory is None:
            writable = [(m.start, m.end) for m in capture.manifest.modules if "w" in m.perms]
            memory = CaptureMemory(capture.memory_ranges(), writable)
        machine = UnicornMachine(
            memory, max_instructions=max_instructions, max_seconds=max_seconds, arch=_isa(capture).machine
        )
        capture.cache[key] = (code, memory, machine)
    walker = _Walker(capture, code, memory, machine)
    isa = walker.isa
    regs = _initial_registers(capture)
    trust = Trust.CONTEXT
    frames: list[RawFrame] = []
    stop, detail = StopKind.FRAME_LIMIT, f"{max_frames} frames"
    ip_name, sp_name = isa.ip, isa.sp
    bisect_right = bisect.bisect_right
    place_starts, places = code.places()
    tables = code._tables
    quick_managed = isa.machine == "x64"
    fp_chain = code.fp_chain
    while True:
        ip, sp = regs[ip_name], regs[sp_name]
        if ip == 0:
            stop, detail = StopKind.IP_ZERO, f"frame {len(frames)}: IP is 0"
            break
        pc = ip if not frames else ip - 1
        # function_from_ip, module_at and in_ready_to_run by one bisection (once per frame)
        fid, module, r2r, method_start, cfi_path = places[bisect_right(place_starts, pc) - 1]
        # ``regs`` is a dict of this walk's own, which nothing changes after this
        frames.append((ip, sp, trust, regs, fid or None, module, r2r))
        if len(frames) >= max_frames:
            break
        exact = len(frames) == 1
        # The two steps most frames take, done here when their cached tables have the answer: a CFI row
        # already compiled (above the interrupted frame, which may be in an epilogue: the walker's
        # _epilogue), and a managed frame's frame-pointer chain. Anything else (and any step that fails)
        # goes through the walker, which decides (and says why) as always.
        caller: dict[str, int] | None = None
        if fid or r2r:
            if quick_managed and not exact:
                if method_start is not None and fp_chain.get(method_start) is True:
                    caller = _fp_caller(code, memory, regs, sp)  # the method's checks cached
                else:
                    caller = _quick_frame_pointer(code, memory, regs, method_start, ip, sp)
                trust = Trust.FRAME_POINTER
        elif cfi_path is not None and not exact:
            got = tables.get(cfi_path)
            if type(got) is tuple:
                table, bias = got
                rel = (pc - bias) & _MASK64
                step = table.steps.get(rel)  # the row's compiled step, once quick_step has seen the address
                caller = step(regs, memory) if step is not None else table.quick_step(rel, regs, memory)
                if caller is not None and caller.get(ip_name) == 0:
                    caller = None  # (the end of the stack: the walker says so)
                trust = Trust.CFI
        if caller is None:
            try:
                caller, trust = walker.caller(regs, exact=exact, index=len(frames) - 1,
                                              where=(bool(fid) or r2r, module))  # fmt: skip
            except _Stop as s:
                stop, detail = s.kind, s.detail
                break
        if caller[ip_name] != 0 and caller[sp_name] <= sp:
            stop = StopKind.SP_NOT_INCREASING
            detail = f"frame {len(frames)}: SP {caller[sp_name]:#x} is not above the callee's {sp:#x}"
            break
        regs = caller
    return RawUnwind(frames, stop, detail, code, walker.emulated, memory)
