"""The unicorn backend: run captured x64 or x86 code forward under budgets, over a :class:`CaptureMemory`.

- Pages are mapped lazily (4 KiB) from a ``UC_HOOK_MEM_UNMAPPED`` hook, from :meth:`CaptureMemory.page`.
  A page the capture does not hold is never mapped: the access fails with its reason. Pages the capture
  holds only in part are mapped, and every read and instruction fetch on them is checked against the
  capture (a ``UC_HOOK_MEM_READ`` hook and the code hook), so no byte outside the capture is ever read as
  zero. Stores go to the capture's overlay and are allowed only where the process could write.
- Registers are restored from a name -> value mapping (the names of :data:`REGISTERS`, ids from
  :class:`emu.cpu.Cpu`), ``fs_base`` through ``UC_X86_REG_FS_BASE`` (writing the FS selector would not set
  it). On x86 (``UC_MODE_32``) unicorn has no writable GS base: ``gs_base`` (the i386 TLS base) is given to
  the CPU as a GDT descriptor on a page no 32-bit process can map (:data:`X86_GDT_PAGE`, above the compat
  task size), which the emulated code may not read or write.
- Budgets: an instruction budget counted in the code hook (no ``count`` argument to ``emu_start``, which
  installs a hook of its own), and, when ``max_seconds`` is given, a time budget measured with
  :func:`time.monotonic` only to abort a run. The capture replay gives none (:func:`emu.unwind.unwind`):
  it never reads the clock, so whether a run ends cannot depend on the machine's load.
- ``should_stop(address)`` is asked before every instruction; a reason stops the run before it executes
  (this is how the unwinder refuses to run libc forward: AVX is not emulated).
- An exception inside a hook is stored, emulation is stopped, and the exception is raised after
  ``emu_start`` returns: never swallowed (:meth:`emu.cpu.Cpu.hook`, the one unicorn wrapper of emu).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from unicorn import (
    UC_HOOK_CODE,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_UNMAPPED,
    UC_HOOK_MEM_WRITE,
    UC_MEM_FETCH_UNMAPPED,
    UC_MEM_WRITE_UNMAPPED,
    UC_PROT_ALL,
)

from clr_model.abi import ISA
from emu.cpu import Cpu, UcError
from emu.errors import EmulationFault, MemoryFault
from emu.memory import PAGE_SIZE, CaptureMemory

__all__ = ["REGISTERS", "X86_GDT_PAGE", "MachineRun", "UnicornMachine"]

#: the registers a run restores and reports, by the names of :class:`emu.capture.X64Registers` and
#: :class:`emu.capture.X86Registers`: the architecture's general registers and IP (:data:`clr_model.abi.ISA`),
#: EFLAGS (``efl``) and, on x64, the FS base (x86's ``gs_base`` goes through a GDT descriptor, see the
#: module docstring)
REGISTERS: Mapping[Literal["x64", "x86"], tuple[str, ...]] = {
    "x64": (*ISA["x64"].general, ISA["x64"].ip, "efl", "fs_base"),
    "x86": (*ISA["x86"].general, ISA["x86"].ip, "efl"),
}
#: the page holding the emulator's GDT on x86: above TASK_SIZE of a 32-bit task on x86-64 (0xFFFFE000) and
#: in the kernel half of a native i386 kernel, so never memory of the captured process
X86_GDT_PAGE = 0xFFFF_F000
#: GDT entry 1 is the GS segment (base ``gs_base``), entry 2 a flat segment for SS: loading any segment
#: register makes the CPU recompute its stack size from SS's descriptor, which must then say 32-bit
_GS_SELECTOR = 1 << 3
_SS_SELECTOR = 2 << 3


def _data_descriptor(base: int) -> bytes:
    """A present, writable, ring-0 32-bit data segment descriptor with ``base`` and a 4 GiB limit."""
    limit = 0xFFFFF
    access = 0x92  # present, DPL 0, data, writable
    flags = 0xC  # 4 KiB granularity, 32-bit
    return struct.pack(
        "<HHBBBB", limit & 0xFFFF, base & 0xFFFF, (base >> 16) & 0xFF, access,
        ((limit >> 16) & 0xF) | (flags << 4), (base >> 24) & 0xFF,
    )  # fmt: skip


#: how often (in instructions) the time budget is looked at
_CLOCK_EVERY = 64


@dataclass(frozen=True)
class MachineRun:
    """How a run ended cleanly: the registers before the instruction it stopped at, and why."""

    registers: dict[str, int]
    instructions: int
    stopped_at: int
    reason: str
    #: the address of the last instruction executed (None when none was): what brought the run to the stop
    #: (a ``ret`` means the code returned to its caller, a ``jmp`` that it tail-called)
    last_instruction: int | None = None


@dataclass
class _RunState:
    memory: CaptureMemory
    should_stop: Callable[[int], str | None]
    deadline: float | None
    count: int = 0
    error: BaseException | None = None
    stop: tuple[int, str] | None = None
    last: int | None = None


class UnicornMachine:
    """One emulated x64 (or, with ``arch="x86"``, 32-bit x86) CPU over one capture's memory.

    The CPU is created once and reused by every run: each run starts from the CPU state saved at creation
    (``context_restore``) plus the given registers, and every page an earlier run wrote is rewritten with
    the capture's bytes, so runs are independent and deterministic while translated code stays cached
    (translating is most of the cost of a short run). Not thread-safe."""

    def __init__(
        self,
        memory: CaptureMemory,
        *,
        max_instructions: int = 10_000,
        max_seconds: float | None = 0.5,
        arch: Literal["x64", "x86"] = "x64",
    ) -> None:
        self.memory = memory
        self.arch: Literal["x64", "x86"] = arch
        self.registers = REGISTERS[arch]
        self._register_set = frozenset(self.registers)  # (the names a run writes, looked up per register)
        self.ip_name = ISA[arch].ip
        self.max_instructions = max_instructions
        self.max_seconds = max_seconds
        #: x86: the emulator's own GDT page, which no access of the captured code may touch
        self._gdt = X86_GDT_PAGE if arch == "x86" else None
        self._cpu: Cpu | None = None
        self._pages: dict[int, bytes] = {}
        self._partial: set[int] = set()
        self._dirty: set[int] = set()
        self._run: _RunState | None = None

    # -- hooks (installed once; they act on the current run's state; what they raise, the run raises) ----
    def _on_gdt(self, address: int, size: int) -> bool:
        return self._gdt is not None and address + max(size, 1) > self._gdt

    def _on_unmapped(self, access: int, address: int, size: int, _value: int) -> bool:
        run = self._run
        assert run is not None
        cpu = self._cpu
        assert cpu is not None
        if self._on_gdt(address, size):
            raise MemoryFault(address, size, "access above the 32-bit process's address space")
        if access == UC_MEM_FETCH_UNMAPPED:
            reason = run.should_stop(address)
            if reason is not None:
                run.stop = (address, reason)
                cpu.stop()
                return False
        for base in sorted({address & ~(PAGE_SIZE - 1), (address + max(size, 1) - 1) & ~(PAGE_SIZE - 1)}):
            if base in self._pages:
                continue
            page = self.memory.page(base)  # the captured bytes only: pages outlive a run
            if page is None:
                what = {UC_MEM_FETCH_UNMAPPED: "fetch", UC_MEM_WRITE_UNMAPPED: "write"}.get(access, "read")
                raise MemoryFault(address, size, f"{what} outside the capture (page {base:#x})")
            if not page.complete:
                self._partial.add(base)
            cpu.mem_map(base, PAGE_SIZE, UC_PROT_ALL)
            cpu.mem_write(base, page.data)
            self._pages[base] = page.data
        return True

    def _on_read(self, _access: int, address: int, size: int, _value: int) -> None:
        run = self._run
        if run is None:  # the CPU's own descriptor loads while the registers are set (x86 GS)
            return
        if self._on_gdt(address, size):
            raise MemoryFault(address, size, "read of the emulator's GDT page, not in the capture")
        lo, hi = address & ~(PAGE_SIZE - 1), (address + size - 1) & ~(PAGE_SIZE - 1)
        if lo in self._partial or hi in self._partial:
            gap = run.memory.missing(address, size)
            if gap is not None:
                raise MemoryFault(address, size, f"read of byte {gap:#x}, which is not in the capture")

    def _on_write(self, _access: int, address: int, size: int, value: int) -> None:
        run = self._run
        assert run is not None
        if self._on_gdt(address, size):
            raise MemoryFault(address, size, "write to the emulator's GDT page, not in the capture")
        self._dirty.add(address & ~(PAGE_SIZE - 1))
        self._dirty.add((address + size - 1) & ~(PAGE_SIZE - 1))
        run.memory.write(address, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))

    def _on_code(self, address: int, size: int) -> None:
        run = self._run
        assert run is not None
        reason = run.should_stop(address)
        if reason is not None:
            run.stop = (address, reason)
            assert self._cpu is not None
            self._cpu.stop()
            return
        gap = run.memory.missing(address, size)
        if gap is not None:
            raise MemoryFault(address, size, f"instruction byte {gap:#x} is not in the capture")
        run.count += 1
        run.last = address
        if run.count > self.max_instructions:
            raise EmulationFault("budget", f"{self.max_instructions} instructions run, no stop reached")
        if run.deadline is not None and run.count % _CLOCK_EVERY == 0 and time.monotonic() > run.deadline:
            raise EmulationFault("budget", f"time budget of {self.max_seconds} s exhausted")

    def _new_cpu(self) -> Cpu:
        if self._cpu is None:
            cpu = Cpu(self.arch)
            if self._gdt is not None:
                cpu.mem_map(self._gdt, PAGE_SIZE, UC_PROT_ALL)
                cpu["gdtr"] = (0, self._gdt, 3 * 8 - 1, 0)
                cpu.mem_write(self._gdt + _SS_SELECTOR, _data_descriptor(0))
            cpu.hook(UC_HOOK_MEM_UNMAPPED, self._on_unmapped)
            cpu.hook(UC_HOOK_MEM_READ, self._on_read)
            cpu.hook(UC_HOOK_MEM_WRITE, self._on_write)
            cpu.hook(UC_HOOK_CODE, self._on_code)
            cpu.save()
            self._cpu = cpu
        return self._cpu

    # -- running -----------------------------------------------------------------------------------
    def run(
        self,
        registers: Mapping[str, int],
        should_stop: Callable[[int], str | None],
    ) -> MachineRun:
        """Run from ``registers['rip']`` (x86: ``registers['eip']``) until ``should_stop`` gives a reason;
        faults and exhausted budgets raise :class:`EmulationFault` (kind ``memory``, ``budget``, ``cpu``),
        hook errors are re-raised."""
        cpu = self._new_cpu()
        cpu.restore()
        for base in sorted(self._dirty):
            if base in self._pages:
                cpu.mem_write(base, self._pages[base])
        self._dirty.clear()
        names = self._register_set
        cpu.write_registers([(name, value) for name, value in registers.items() if name in names])
        if self._gdt is not None:
            cpu["ss"] = _SS_SELECTOR
            cpu.mem_write(self._gdt + _GS_SELECTOR, _data_descriptor(registers.get("gs_base", 0)))
            cpu["gs"] = _GS_SELECTOR
        run = _RunState(
            memory=self.memory.fork(), should_stop=should_stop,
            deadline=None if self.max_seconds is None else time.monotonic() + self.max_seconds,
        )
        self._run = run
        # (the text only: the exception's traceback holds this frame, whose locals must not hold it)
        cpu_error: str | None = None
        try:
            cpu.start(registers[self.ip_name], cpu.end)
        except UcError as exc:
            cpu_error = str(exc)
        except MemoryFault as exc:
            raise EmulationFault("memory", str(exc)) from exc
        finally:
            self._run = None
        if run.stop is not None:
            address, reason = run.stop
            regs = dict(zip(self.registers, cpu.read_registers(self.registers), strict=True))
            regs[self.ip_name] = address
            if self._gdt is not None and "gs_base" in registers:
                regs["gs_base"] = registers["gs_base"]
            return MachineRun(
                registers=regs, instructions=run.count, stopped_at=address, reason=reason,
                last_instruction=run.last,
            )  # fmt: skip
        pc = cpu.ip
        if cpu_error is not None:
            raise EmulationFault("cpu", f"{cpu_error} at {pc:#x} after {run.count} instruction(s)")
        raise EmulationFault("cpu", f"emulation ended at {pc:#x} with no stop reason")  # pragma: no cover
