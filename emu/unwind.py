"""Unwind a captured thread, frame by frame, recording how each frame was found.

Each step takes the registers of one frame and gives its caller's, by the first rule that applies:

- the IP is in the JIT map or a ReadyToRun module's range (managed code): the frame-pointer chain
  (caller IP = [RBP + 8], caller SP = RBP + 16, caller RBP = [RBP]). On the frame whose registers are
  exact (the top, or the state an emulation stopped in), a function's first instruction, the instruction
  after ``push rbp`` and a ``ret`` are recognised from the code bytes, since the chain is not set up
  there. The caller IP must lie in executable memory of the capture (checked against the JIT map and the
  module map), else the stack is scanned for a return address (``scan``);
- the IP is in a module file: the module's ``.eh_frame`` CFI (:mod:`emu.cfi`), embedded in the capture or
  read from the file on disk when its build-id matches the capture's;
- the IP is in anonymous executable memory outside the JIT map (runtime stubs, the write-barrier copy: no
  unwind information): the code is emulated forward (:mod:`emu.machine`) under an instruction and time
  budget until it reaches code that can be unwound (a module or managed code, which is never executed:
  glibc's AVX code is not emulated), and the caller is unwound from there. Only the frame whose
  registers are exact can be emulated.

The frame found first carries trust ``context``; the others carry how their registers were found
(``cfi``, ``frame_pointer``, ``emulated``, ``scan``: breakpad's trust levels). The walk stops at a
return address CFI declares undefined (the end of the stack), IP 0, an SP that does not increase (a cycle),
the frame limit, or a step that cannot be made (with the reason).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from emu.capture import Capture, ModuleEntry
from emu.cfi import CfiError, CfiTable, cfi_step, load_bias, read_elf, table_for
from emu.errors import EmulationFault, MemoryFault
from emu.machine import UnicornMachine
from emu.memory import CaptureMemory

__all__ = ["CodeMap", "StopKind", "Trust", "UnwindResult", "UnwoundFrame", "unwind"]

MAX_FRAMES = 1024
_SCAN_BYTES = 1024
_PE_SUFFIXES = (".dll", ".exe")
#: an OSR method's prologue (.NET 6+ on-stack replacement, x64): ``mov rax,[rbp]; push rax`` then
#: ``mov rbp,rsp``: it runs on top of its Tier0 frame, whose RBP it inherits, and copies the Tier0
#: frame's saved RBP (the caller's) into its own frame
_OSR_PROLOGUE = bytes.fromhex("488b450050")
_OSR_FP_SET = 8  # offset of the first instruction after ``mov rbp,rsp``
#: how far above an OSR frame its Tier0 frame's saved-RBP slot is searched for
_OSR_SEARCH_BYTES = 4096


class Trust(StrEnum):
    """How a frame's registers were found (breakpad's frame trust, plus ``emulated``)."""

    CONTEXT = "context"
    CFI = "cfi"
    FRAME_POINTER = "frame_pointer"
    EMULATED = "emulated"
    SCAN = "scan"


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
    #: the registers known in this frame (a subset of rip, rsp, rbp, rbx, r12..r15 below the top)
    registers: Mapping[str, int]
    function_id: int | None = None
    module: ModuleEntry | None = None
    #: in a ReadyToRun module's range (managed code; its FunctionID only if the JIT map lists the method)
    ready_to_run: bool = False


@dataclass(frozen=True)
class UnwindResult:
    frames: tuple[UnwoundFrame, ...]
    stop: StopKind
    detail: str
    #: where code is in the capture (the JIT map's names, modules), as the walk used it
    code: CodeMap
    #: instructions emulated in all (deterministic: a count, not a time)
    emulated_instructions: int = 0


class _Stop(Exception):
    def __init__(self, kind: StopKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass
class CodeMap:
    """Where code is in a capture: the module map, the JIT map, and each module's CFI (loaded lazily)."""

    capture: Capture
    allow_disk: bool = True
    _tables: dict[str, tuple[CfiTable, int] | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        man = self.capture.manifest
        self.modules = sorted(man.modules, key=lambda m: m.start)
        self._mod_starts = [m.start for m in self.modules]
        spans = sorted((r.start, r.end, m.function_id) for m in man.jit.methods for r in m.ranges)
        self._jit_starts = [s for s, _, _ in spans]
        self._jit = spans
        self.names = {m.function_id: m.name for m in man.jit.methods if m.name}
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
        return any(s <= ip < e for s, e in self._r2r)

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
                    self.capture.blob(emb.eh_frame), emb.eh_frame_vaddr, hdr, emb.eh_frame_hdr_vaddr
                )
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
        return table_for(elf.eh_frame, elf.eh_frame_vaddr, elf.eh_frame_hdr, elf.eh_frame_hdr_vaddr), bias


def _looks_like_return_address(memory: CaptureMemory, ip: int) -> bool:
    """A call instruction ends right before ``ip`` (e8 rel32, ff /2 with a register or memory operand)."""
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

    def caller(self, regs: Mapping[str, int], exact: bool, index: int) -> tuple[dict[str, int], Trust]:
        ip = regs["rip"]
        lookup = ip if exact else ip - 1
        if self.code.function_from_ip(lookup) or self.code.in_ready_to_run(lookup):
            return self.managed(regs, exact, lookup)
        module = self.code.module_at(lookup)
        if module is None:
            raise _Stop(
                StopKind.OUTSIDE_MAPPINGS, f"frame {index}: IP {ip:#x} is in no mapping of the capture"
            )
        if module.is_file:
            return self.cfi(regs, module, lookup, index), Trust.CFI
        if "x" not in module.perms:
            raise _Stop(
                StopKind.OUTSIDE_MAPPINGS, f"frame {index}: IP {ip:#x} is in memory that is not executable"
            )
        if not exact:
            raise _Stop(
                StopKind.NO_UNWIND_INFO,
                f"frame {index}: return address {ip:#x} is in anonymous code with no unwind information",
            )
        state = self.emulate(regs, index)
        caller, _trust = self.caller(state, True, index)
        return caller, Trust.EMULATED

    def cfi(self, regs: Mapping[str, int], module: ModuleEntry, pc: int, index: int) -> dict[str, int]:
        try:
            table, bias = self.code.table(module)
        except CfiError as exc:
            raise _Stop(StopKind.MODULE_UNAVAILABLE, f"frame {index}: {exc}") from None
        try:
            row = table.row_for((pc - bias) & (2**64 - 1))
            if row is None:
                raise _Stop(
                    StopKind.NO_UNWIND_INFO, f"frame {index}: no FDE covers {regs['rip']:#x} in {module.path}"
                )
            out = cfi_step(row, regs, self.memory)
        except CfiError as exc:
            raise _Stop(StopKind.CFI_ERROR, f"frame {index}: {exc}") from None
        ra_rule = row.rules.get(row.ra_register)
        if out.get("rip") == 0 and ra_rule is not None and ra_rule.type == "UNDEFINED":
            raise _Stop(StopKind.END_OF_STACK, f"frame {index}: CFI marks the return address undefined")
        return out

    def managed(self, regs: Mapping[str, int], exact: bool, pc: int) -> tuple[dict[str, int], Trust]:
        sp = regs["rsp"]
        rng = self.code.method_range(pc)  # None in ReadyToRun code the JIT map has no method for
        start = rng[0] if rng is not None else None
        try:
            if exact:
                ip = regs["rip"]
                first = self._byte(start) if start is not None else None
                osr = start is not None and self._is_osr(start)
                if (ip == start and not osr) or self._byte(ip) == 0xC3:
                    return self._ret_at(regs, sp, keep_fp=True), Trust.FRAME_POINTER
                if start is not None and first == 0x55 and ip == start + 1:
                    out = self._ret_at(regs, sp + 8, keep_fp=False)
                    out["rbp"] = self.memory.read_u64(sp)
                    return out, Trust.FRAME_POINTER
            rbp = regs.get("rbp")
            if rbp is None:
                raise _Stop(StopKind.FRAME_POINTER, f"managed frame at {regs['rip']:#x}: RBP is unknown")
            if start is not None and self._is_osr(start):
                rbp = self._osr_tier0_rbp(regs, rbp, start, exact)
            if rbp < sp or rbp > 2**64 - 24:
                raise _Stop(
                    StopKind.SP_NOT_INCREASING,
                    f"managed frame at {regs['rip']:#x}: the frame-pointer chain goes down or cycles "
                    f"(RBP {rbp:#x}, SP {sp:#x})",
                )
            caller = {
                "rip": self.memory.read_u64(rbp + 8),
                "rsp": rbp + 16,
                "rbp": self.memory.read_u64(rbp),
            }
        except MemoryFault as exc:
            return self.scan(regs, f"frame-pointer chain reads outside the capture ({exc.address:#x})")
        if not self.code.executable(caller["rip"]):
            return self.scan(regs, f"frame-pointer chain gives IP {caller['rip']:#x}, not executable code")
        return caller, Trust.FRAME_POINTER

    def _is_osr(self, start: int) -> bool:
        try:
            return self.memory.read(start, len(_OSR_PROLOGUE)) == _OSR_PROLOGUE
        except MemoryFault:
            return False

    def _osr_tier0_rbp(self, regs: Mapping[str, int], rbp: int, start: int, exact: bool) -> int:
        """The RBP of the Tier0 frame an OSR frame sits on: the runtime unwinds both as one frame (the
        OSR method's caller is the Tier0 method's caller), so the chain continues from the Tier0 frame.

        Before ``mov rbp,rsp`` RBP is still the Tier0 frame's. After it, RBP is the OSR frame's, whose
        saved-RBP slot holds a copy of the Tier0 frame's saved RBP: the Tier0 frame's RBP is the first
        slot above the OSR frame's return slot that holds the same value under a return address."""
        if exact and regs["rip"] < start + _OSR_FP_SET:
            return rbp
        saved = self.memory.read_u64(rbp)
        for slot in range(rbp + 16, rbp + 16 + _OSR_SEARCH_BYTES, 8):
            try:
                if self.memory.read_u64(slot) != saved:
                    continue
                ret = self.memory.read_u64(slot + 8)
            except MemoryFault:
                break
            if self.code.executable(ret) and _looks_like_return_address(self.memory, ret):
                return slot
        raise _Stop(
            StopKind.FRAME_POINTER,
            f"OSR frame at {regs['rip']:#x}: no Tier0 frame found above RBP {rbp:#x}",
        )

    def _byte(self, address: int) -> int | None:
        try:
            return self.memory.read(address, 1)[0]
        except MemoryFault:
            return None

    def _ret_at(self, regs: Mapping[str, int], slot: int, *, keep_fp: bool) -> dict[str, int]:
        out = {"rip": self.memory.read_u64(slot), "rsp": slot + 8}
        if keep_fp and "rbp" in regs:
            out["rbp"] = regs["rbp"]
        return out

    def scan(self, regs: Mapping[str, int], why: str) -> tuple[dict[str, int], Trust]:
        sp = regs["rsp"]
        for slot in range(sp, sp + _SCAN_BYTES, 8):
            try:
                value = self.memory.read_u64(slot)
            except MemoryFault:
                break
            if self.code.executable(value) and _looks_like_return_address(self.memory, value):
                return {"rip": value, "rsp": slot + 8}, Trust.SCAN
        raise _Stop(
            StopKind.FRAME_POINTER,
            f"managed frame at {regs['rip']:#x}: {why}; no return address found by scan",
        )

    def emulate(self, regs: Mapping[str, int], index: int) -> dict[str, int]:
        start_sp = regs["rsp"]
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
        if run.registers["rsp"] < start_sp:
            raise _Stop(
                StopKind.NO_UNWIND_INFO,
                f"frame {index}: the code with no unwind information calls out at {run.stopped_at:#x}",
            )
        return run.registers


def unwind(
    capture: Capture,
    *,
    code: CodeMap | None = None,
    memory: CaptureMemory | None = None,
    max_frames: int = MAX_FRAMES,
    allow_disk: bool = True,
    max_instructions: int = 10_000,
    max_seconds: float = 0.5,
) -> UnwindResult:
    """Unwind ``capture``'s thread from its registers (see the module docstring).

    The code map, memory and CPU are kept in ``capture.cache`` for the next unwind of the same capture
    (they hold no result of a walk, so every unwind of a capture gives the same result)."""
    key = f"unwind:{allow_disk}:{max_instructions}:{max_seconds}"
    cached = capture.cache.get(key)
    if isinstance(cached, tuple) and code is None and memory is None:
        code, memory, machine = cached
    else:
        code = code or CodeMap(capture, allow_disk=allow_disk)
        if memory is None:
            writable = [(m.start, m.end) for m in capture.manifest.modules if "w" in m.perms]
            memory = CaptureMemory(capture.memory_ranges(), writable)
        machine = UnicornMachine(memory, max_instructions=max_instructions, max_seconds=max_seconds)
        capture.cache[key] = (code, memory, machine)
    walker = _Walker(capture, code, memory, machine)
    regs: dict[str, int] = capture.manifest.registers.general()
    trust = Trust.CONTEXT
    frames: list[UnwoundFrame] = []
    stop, detail = StopKind.FRAME_LIMIT, f"{max_frames} frames"
    while True:
        ip, sp = regs["rip"], regs["rsp"]
        if ip == 0:
            stop, detail = StopKind.IP_ZERO, f"frame {len(frames)}: IP is 0"
            break
        pc = ip if not frames else ip - 1
        fid = code.function_from_ip(pc)
        frames.append(
            UnwoundFrame(
                ip=ip, sp=sp, trust=trust, registers=dict(regs), function_id=fid or None,
                module=code.module_at(pc), ready_to_run=code.in_ready_to_run(pc),
            )
        )  # fmt: skip
        if len(frames) >= max_frames:
            break
        try:
            caller, trust = walker.caller(regs, exact=len(frames) == 1, index=len(frames) - 1)
        except _Stop as s:
            stop, detail = s.kind, s.detail
            break
        if caller["rip"] != 0 and caller["rsp"] <= sp:
            stop = StopKind.SP_NOT_INCREASING
            detail = f"frame {len(frames)}: SP {caller['rsp']:#x} is not above the callee's {sp:#x}"
            break
        regs = caller
    return UnwindResult(
        frames=tuple(frames), stop=stop, detail=detail, code=code, emulated_instructions=walker.emulated
    )
