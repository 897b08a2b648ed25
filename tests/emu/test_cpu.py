"""emu.cpu: the one unicorn wrapper: mode and registers from the architecture's table, context save and
restore, and a hook's exception stored, stopping the run, raised after it."""

from __future__ import annotations

import pytest
from unicorn import UC_HOOK_CODE, UC_HOOK_MEM_UNMAPPED, UC_PROT_ALL
from unicorn import x86_const as X

from clr_model.abi import ARCHES, ISA, Arch
from emu.cpu import Cpu, UcError, register_id

CODE = 0x10_0000
NOPS = b"\x90" * 8  # nop x8


def cpu_with(arch: Arch, code: bytes) -> Cpu:
    cpu = Cpu(arch)
    cpu.mem_map(CODE, 0x1000, UC_PROT_ALL)
    cpu.mem_write(CODE, code)
    return cpu


def test_register_ids_by_the_names_of_the_table_the_captures_and_unicorn() -> None:
    assert register_id("rsp") == X.UC_X86_REG_RSP and register_id("esp") == X.UC_X86_REG_ESP
    assert register_id("efl") == register_id("eflags") == register_id("rflags") == X.UC_X86_REG_EFLAGS
    assert (register_id("fpu_control"), register_id("fpu_tag")) == (X.UC_X86_REG_FPCW, X.UC_X86_REG_FPTAG)
    assert register_id("st3") == X.UC_X86_REG_FP3 and register_id("xmm15") == X.UC_X86_REG_XMM15
    assert register_id("fs_base") == X.UC_X86_REG_FS_BASE
    with pytest.raises(KeyError):
        register_id("nosuch")


@pytest.mark.parametrize("arch", ARCHES)
def test_the_mode_and_pointers_come_from_the_table(arch: Arch) -> None:
    isa = ISA[arch]
    cpu = cpu_with(arch, NOPS)
    cpu[isa.sp] = 0x8000
    cpu.start(CODE, CODE + 3)
    assert (cpu.ip, cpu.sp, cpu.end) == (CODE + 3, 0x8000, isa.mask)
    cpu["st5"] = (0x4003 << 64) | 0xA000_0000_0000_0000  # 10.0, an 80-bit value both ways
    assert cpu["st5"] == (0x4003 << 64) | 0xA000_0000_0000_0000


def test_restore_returns_to_the_saved_context() -> None:
    cpu = cpu_with("x64", NOPS)
    cpu["rax"] = 7
    cpu.save()
    cpu["rax"] = 9
    cpu.start(CODE, CODE + 8)
    cpu.restore()
    assert cpu["rax"] == 7


def test_a_hooks_exception_stops_the_run_and_is_raised_after_it() -> None:
    cpu = cpu_with("x86", NOPS)
    seen: list[int] = []

    def on_code(address: int, _size: int) -> None:
        seen.append(address)
        if address == CODE + 2:
            raise ValueError("the hook's own error")
        if address == CODE + 3:
            raise RuntimeError("never the second one")

    cpu.hook(UC_HOOK_CODE, on_code)
    with pytest.raises(ValueError, match="the hook's own error"):
        cpu.start(CODE, CODE + 8)
    assert seen[-1] <= CODE + 3 and cpu.error is None
    assert cpu.ip < CODE + 8  # stopped: the rest of the code never ran


def test_a_hooks_exception_comes_before_the_cpus_own_fault() -> None:
    cpu = cpu_with("x64", b"\xff\x24\x25\x00\x00\x00\x60")  # jmp [0x60000000]: unmapped

    def on_unmapped(_access: int, address: int, _size: int, _value: int) -> bool:
        raise LookupError(f"no page at {address:#x}")

    cpu.hook(UC_HOOK_MEM_UNMAPPED, on_unmapped)
    with pytest.raises(LookupError, match="no page at 0x60000000"):
        cpu.start(CODE, CODE + 7)
    plain = cpu_with("x64", b"\xff\x24\x25\x00\x00\x00\x60")
    with pytest.raises(UcError):
        plain.start(CODE, CODE + 7)
