"""The unicorn backend: lazy pages, faults with reasons (never zeros), FS_BASE, budgets, hook errors."""

from __future__ import annotations

import time

import pytest

from emu.errors import EmulationFault
from emu.machine import UnicornMachine
from emu.memory import CaptureMemory

CODE = 0x40_0000
DATA = 0x60_0000
STACK = 0x7000_0000
TARGET = 0x50_0000


def machine(code: bytes, *, data: bytes = b"", **budget: float) -> UnicornMachine:
    ranges = [(CODE, code), (STACK - 0x100, bytes(0x100))]
    if data:
        ranges.append((DATA, data))
    mem = CaptureMemory(ranges, writable=[(STACK - 0x1000, STACK)])
    return UnicornMachine(mem, **budget)  # type: ignore[arg-type]


def regs(**more: int) -> dict[str, int]:
    return {"rip": CODE, "rsp": STACK - 0x80, **more}


def stop_at_target(address: int) -> str | None:
    return "target" if address == TARGET else None


def test_runs_a_tail_jumping_stub_to_its_target() -> None:
    code = b"\x48\xb8" + TARGET.to_bytes(8, "little") + b"\xff\xe0"  # movabs rax, TARGET; jmp rax
    run = machine(code).run(regs(), stop_at_target)
    assert (run.stopped_at, run.reason, run.instructions) == (TARGET, "target", 2)
    assert run.registers["rax"] == TARGET and run.registers["rsp"] == STACK - 0x80


def test_fs_base_is_restored() -> None:
    # mov rax, fs:[0x28]; jmp rax
    code = b"\x64\x48\x8b\x04\x25\x28\x00\x00\x00\xff\xe0"
    data = bytes(0x28) + TARGET.to_bytes(8, "little")
    run = machine(code, data=data).run(regs(fs_base=DATA), stop_at_target)
    assert run.stopped_at == TARGET


def test_pushes_below_sp_are_allowed_and_read_back() -> None:
    # push rax; pop rbx; push rbx; ret  (returns to TARGET through memory the run wrote)
    code = b"\x50\x5b\x53\xc3"
    run = machine(code).run(regs(rax=TARGET), stop_at_target)
    assert run.stopped_at == TARGET and run.registers["rbx"] == TARGET


def test_a_read_outside_the_capture_is_a_fault_with_its_address() -> None:
    code = b"\x48\xa1" + (0x1234_0000).to_bytes(8, "little")  # movabs rax, [0x12340000]
    with pytest.raises(EmulationFault, match=r"memory: read outside the capture .* at 0x12340000"):
        machine(code).run(regs(), stop_at_target)


def test_a_byte_of_a_partial_page_that_was_not_captured_is_never_read_as_zero() -> None:
    # mov rax, [rsp - 0x180]: STACK - 0x200, on the stack's last page (mapped: the capture holds its top
    # 0x100 bytes, the process could write it) but not captured: the read fails instead of giving 0
    code = b"\x48\x8b\x84\x24\x80\xfe\xff\xff\xff\xe0"
    with pytest.raises(EmulationFault, match=r"read of byte 0x6ffffe00, which is not in the capture"):
        machine(code).run(regs(), stop_at_target)


def test_a_jump_outside_the_capture_fails() -> None:
    code = b"\x48\xb8" + (0x6666_0000).to_bytes(8, "little") + b"\xff\xe0"
    with pytest.raises(EmulationFault, match=r"memory: fetch outside the capture"):
        machine(code).run(regs(), stop_at_target)


def test_instruction_budget() -> None:
    with pytest.raises(EmulationFault, match="budget: 500 instructions"):
        machine(b"\xeb\xfe", max_instructions=500).run(regs(), stop_at_target)  # jmp $


def test_time_budget_bounds_the_run() -> None:
    t0 = time.monotonic()
    with pytest.raises(EmulationFault, match=r"budget: time budget of 0\.05 s"):
        machine(b"\xeb\xfe", max_instructions=10**9, max_seconds=0.05).run(regs(), stop_at_target)
    assert time.monotonic() - t0 < 2


class Boom(Exception):
    pass


def test_an_exception_inside_a_hook_is_raised_after_the_run() -> None:
    def explode(address: int) -> str | None:
        if address == CODE + 1:
            raise Boom("from the hook")
        return None

    with pytest.raises(Boom, match="from the hook"):
        machine(b"\x90\x90\x90\xeb\xfe").run(regs(), explode)


def test_runs_are_independent_on_a_reused_cpu() -> None:
    # mov [rsp], rbx; mov rax, [rsp]; jmp rax: the first run stores TARGET on the stack and jumps to it
    code = b"\x48\x89\x1c\x24\x48\x8b\x04\x24\xff\xe0"
    m = machine(code)
    assert m.run(regs(rbx=TARGET), stop_at_target).stopped_at == TARGET
    # the second run starts after the store: it must read the captured 0, not the first run's TARGET
    with pytest.raises(EmulationFault, match=r"fetch outside the capture \(page 0x0\)"):
        m.run(regs(rip=CODE + 4), stop_at_target)
    # and a third run like the first gives the same result again
    again = m.run(regs(rbx=TARGET), stop_at_target)
    assert (again.stopped_at, again.instructions) == (TARGET, 3)
