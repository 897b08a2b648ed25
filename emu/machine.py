"""The unicorn backend: run captured x64 code forward under budgets, over a :class:`CaptureMemory`.

- Pages are mapped lazily (4 KiB) from a ``UC_HOOK_MEM_UNMAPPED`` hook, from :meth:`CaptureMemory.page`.
  A page the capture does not hold is never mapped: the access fails with its reason. Pages the capture
  holds only in part are mapped, and every read and instruction fetch on them is checked against the
  capture (a ``UC_HOOK_MEM_READ`` hook and the code hook), so no byte outside the capture is ever read as
  zero. Stores go to the capture's overlay and are allowed only where the process could write.
- Registers are restored from a name -> value mapping, ``fs_base`` through ``UC_X86_REG_FS_BASE`` (writing
  the FS selector would not set it).
- Budgets: an instruction budget counted in the code hook (no ``count`` argument to ``emu_start``, which
  installs a hook of its own), and a time budget measured with :func:`time.monotonic` only to abort a run:
  the time never appears in any result, so replays stay deterministic.
- ``should_stop(address)`` is asked before every instruction; a reason stops the run before it executes
  (this is how the unwinder refuses to run libc forward: AVX is not emulated).
- An exception inside a hook is stored, emulation is stopped, and the exception is raised after
  ``emu_start`` returns: never swallowed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import unicorn as _unicorn
from unicorn import (
    UC_ARCH_X86,
    UC_HOOK_CODE,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_UNMAPPED,
    UC_HOOK_MEM_WRITE,
    UC_MEM_FETCH_UNMAPPED,
    UC_MEM_WRITE_UNMAPPED,
    UC_MODE_64,
    UC_PROT_ALL,
)
from unicorn import x86_const as X

from emu.errors import EmulationFault, MemoryFault
from emu.memory import PAGE_SIZE, CaptureMemory

__all__ = ["REGISTERS", "MachineRun", "UnicornMachine"]


class Cpu(Protocol):
    """The part of unicorn's ``Uc`` this backend uses (the binding's methods are not annotated)."""

    def emu_start(self, begin: int, until: int) -> None: ...
    def emu_stop(self) -> None: ...
    def mem_map(self, address: int, size: int, perms: int) -> None: ...
    def mem_write(self, address: int, data: bytes) -> None: ...
    def reg_write(self, reg: int, value: int) -> None: ...
    def reg_read(self, reg: int) -> int: ...
    def hook_add(self, htype: int, callback: Callable[..., Any]) -> int: ...
    def context_save(self) -> object: ...
    def context_restore(self, context: object) -> None: ...


_UNICORN: Any = _unicorn
#: unicorn's error type (raised by emu_start and mem_map)
UcError: type[Exception] = _UNICORN.UcError


def _new_cpu() -> Cpu:
    return cast(Cpu, _UNICORN.Uc(UC_ARCH_X86, UC_MODE_64))


#: register name -> unicorn id (the names of :class:`emu.capture.X64Registers`)
REGISTERS: Mapping[str, int] = {
    "rax": X.UC_X86_REG_RAX,
    "rbx": X.UC_X86_REG_RBX,
    "rcx": X.UC_X86_REG_RCX,
    "rdx": X.UC_X86_REG_RDX,
    "rsi": X.UC_X86_REG_RSI,
    "rdi": X.UC_X86_REG_RDI,
    "rbp": X.UC_X86_REG_RBP,
    "rsp": X.UC_X86_REG_RSP,
    "r8": X.UC_X86_REG_R8,
    "r9": X.UC_X86_REG_R9,
    "r10": X.UC_X86_REG_R10,
    "r11": X.UC_X86_REG_R11,
    "r12": X.UC_X86_REG_R12,
    "r13": X.UC_X86_REG_R13,
    "r14": X.UC_X86_REG_R14,
    "r15": X.UC_X86_REG_R15,
    "rip": X.UC_X86_REG_RIP,
    "efl": X.UC_X86_REG_EFLAGS,
    "fs_base": X.UC_X86_REG_FS_BASE,
}

#: how often (in instructions) the time budget is looked at
_CLOCK_EVERY = 64


@dataclass(frozen=True)
class MachineRun:
    """How a run ended cleanly: the registers before the instruction it stopped at, and why."""

    registers: dict[str, int]
    instructions: int
    stopped_at: int
    reason: str


@dataclass
class _RunState:
    memory: CaptureMemory
    should_stop: Callable[[int], str | None]
    deadline: float
    count: int = 0
    error: BaseException | None = None
    stop: tuple[int, str] | None = None


class UnicornMachine:
    """One emulated x64 CPU over one capture's memory.

    The CPU is created once and reused by every run: each run starts from the CPU state saved at creation
    (``context_restore``) plus the given registers, and every page an earlier run wrote is rewritten with
    the capture's bytes, so runs are independent and deterministic while translated code stays cached
    (translating is most of the cost of a short run). Not thread-safe."""

    def __init__(
        self, memory: CaptureMemory, *, max_instructions: int = 10_000, max_seconds: float = 0.5
    ) -> None:
        self.memory = memory
        self.max_instructions = max_instructions
        self.max_seconds = max_seconds
        self._uc: Cpu | None = None
        self._pristine: object = None
        self._pages: dict[int, bytes] = {}
        self._partial: set[int] = set()
        self._dirty: set[int] = set()
        self._run: _RunState | None = None

    # -- hooks (installed once; they act on the current run's state) -------------------------------
    def _fail(self, uc: Cpu, exc: BaseException) -> None:
        run = self._run
        if run is not None and run.error is None:
            run.error = exc
        uc.emu_stop()

    def _on_unmapped(self, uc: Cpu, access: int, address: int, size: int, _value: int, _data: object) -> bool:
        run = self._run
        assert run is not None
        try:
            if access == UC_MEM_FETCH_UNMAPPED:
                reason = run.should_stop(address)
                if reason is not None:
                    run.stop = (address, reason)
                    uc.emu_stop()
                    return False
            for base in sorted({address & ~(PAGE_SIZE - 1), (address + max(size, 1) - 1) & ~(PAGE_SIZE - 1)}):
                if base in self._pages:
                    continue
                page = self.memory.page(base)  # the captured bytes only: pages outlive a run
                if page is None:
                    what = {UC_MEM_FETCH_UNMAPPED: "fetch", UC_MEM_WRITE_UNMAPPED: "write"}.get(
                        access, "read"
                    )
                    raise MemoryFault(address, size, f"{what} outside the capture (page {base:#x})")
                if not page.complete:
                    self._partial.add(base)
                uc.mem_map(base, PAGE_SIZE, UC_PROT_ALL)
                uc.mem_write(base, page.data)
                self._pages[base] = page.data
            return True
        except BaseException as exc:
            self._fail(uc, exc)
            return False

    def _on_read(self, uc: Cpu, _access: int, address: int, size: int, _value: int, _data: object) -> None:
        run = self._run
        assert run is not None
        try:
            lo, hi = address & ~(PAGE_SIZE - 1), (address + size - 1) & ~(PAGE_SIZE - 1)
            if lo in self._partial or hi in self._partial:
                gap = run.memory.missing(address, size)
                if gap is not None:
                    raise MemoryFault(address, size, f"read of byte {gap:#x}, which is not in the capture")
        except BaseException as exc:
            self._fail(uc, exc)

    def _on_write(self, uc: Cpu, _access: int, address: int, size: int, value: int, _data: object) -> None:
        run = self._run
        assert run is not None
        try:
            self._dirty.add(address & ~(PAGE_SIZE - 1))
            self._dirty.add((address + size - 1) & ~(PAGE_SIZE - 1))
            run.memory.write(address, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
        except BaseException as exc:
            self._fail(uc, exc)

    def _on_code(self, uc: Cpu, address: int, size: int, _data: object) -> None:
        run = self._run
        assert run is not None
        try:
            reason = run.should_stop(address)
            if reason is not None:
                run.stop = (address, reason)
                uc.emu_stop()
                return
            gap = run.memory.missing(address, size)
            if gap is not None:
                raise MemoryFault(address, size, f"instruction byte {gap:#x} is not in the capture")
            run.count += 1
            if run.count > self.max_instructions:
                raise EmulationFault("budget", f"{self.max_instructions} instructions run, no stop reached")
            if run.count % _CLOCK_EVERY == 0 and time.monotonic() > run.deadline:
                raise EmulationFault("budget", f"time budget of {self.max_seconds} s exhausted")
        except BaseException as exc:
            self._fail(uc, exc)

    def _cpu(self) -> Cpu:
        if self._uc is None:
            uc = _new_cpu()
            uc.hook_add(UC_HOOK_MEM_UNMAPPED, self._on_unmapped)
            uc.hook_add(UC_HOOK_MEM_READ, self._on_read)
            uc.hook_add(UC_HOOK_MEM_WRITE, self._on_write)
            uc.hook_add(UC_HOOK_CODE, self._on_code)
            self._pristine = uc.context_save()
            self._uc = uc
        return self._uc

    # -- running -----------------------------------------------------------------------------------
    def run(
        self,
        registers: Mapping[str, int],
        should_stop: Callable[[int], str | None],
    ) -> MachineRun:
        """Run from ``registers['rip']`` until ``should_stop`` gives a reason; faults and exhausted budgets
        raise :class:`EmulationFault` (kind ``memory``, ``budget``, ``cpu``), hook errors are re-raised."""
        uc = self._cpu()
        uc.context_restore(self._pristine)
        for base in sorted(self._dirty):
            if base in self._pages:
                uc.mem_write(base, self._pages[base])
        self._dirty.clear()
        for name, value in registers.items():
            reg = REGISTERS.get(name)
            if reg is not None:
                uc.reg_write(reg, value)
        run = _RunState(
            memory=self.memory.fork(), should_stop=should_stop, deadline=time.monotonic() + self.max_seconds
        )
        self._run = run
        cpu_error: Exception | None = None
        try:
            uc.emu_start(registers["rip"], 2**64 - 1)
        except UcError as exc:
            cpu_error = exc
        finally:
            self._run = None
        if run.error is not None:
            if isinstance(run.error, MemoryFault):
                raise EmulationFault("memory", str(run.error)) from run.error
            raise run.error
        if run.stop is not None:
            address, reason = run.stop
            regs = {name: int(uc.reg_read(reg)) for name, reg in REGISTERS.items()}
            regs["rip"] = address
            return MachineRun(registers=regs, instructions=run.count, stopped_at=address, reason=reason)
        pc = int(uc.reg_read(X.UC_X86_REG_RIP))
        if cpu_error is not None:
            raise EmulationFault("cpu", f"{cpu_error} at {pc:#x} after {run.count} instruction(s)")
        raise EmulationFault("cpu", f"emulation ended at {pc:#x} with no stop reason")  # pragma: no cover
