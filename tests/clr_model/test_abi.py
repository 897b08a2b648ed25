"""clr_model.abi: one ABI table per architecture and one machine state named by it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from clr_model.abi import (
    ABI,
    ARCHES,
    EFLAGS_DF,
    EFLAGS_STATUS,
    HOOK_ABIS,
    HOOK_PARAMETERS,
    ISA,
    KIND_OF_REGISTRATION,
    KINDS,
    X87_ALL_EMPTY,
    InRegister,
    MachineState,
    OnStack,
    hook_abi,
)
from clr_model.api import HookKind
from clr_model.errors import InvalidInput


def _zeros(arch: str) -> MachineState:
    return MachineState.model_validate({"arch": arch, "registers": dict.fromkeys(ISA[arch].registers, 0)})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ARCHES)
def test_every_table_names_only_registers_its_states_hold(arch: str, kind: str) -> None:
    abi = hook_abi(arch, kind)
    state = _zeros(arch)
    assert abi.arch == arch and abi.isa is ISA[arch] and abi.kind == kind
    assert len(abi.arguments) == len(abi.parameters)
    for slot in abi.arguments:
        if isinstance(slot, InRegister):
            assert slot.register in abi.isa.general and slot.register != abi.isa.sp
    for kept in abi.kept:
        assert isinstance(state[kept.register], int)
        assert kept.clause in abi.clauses
        assert (kept.fixed is None) == (kept.at_entry == "")
    # the clauses the checker judges: FE2-06 (entry, memory), every kept rule's, FE2-09 (stack, return)
    assert abi.clauses == ("FE2-06", *sorted({k.clause for k in abi.kept}), "FE2-09")
    assert len({k.name for k in abi.kept}) == len(abi.kept)


def test_x86_is_the_pages_stdcall_frame() -> None:
    abi = ABI["x86"]
    assert abi.stated and abi.stack_alignment is None
    assert abi.arguments == tuple(OnStack(4 + 4 * i) for i in range(4))
    assert abi.popped == 4 * len(abi.arguments) == 16 and abi.return_delta == 20
    assert abi.parameters == HOOK_PARAMETERS
    scratch = [k.name for k in abi.kept if k.clause == "FE2-07"]
    assert scratch == ["EAX", "ECX", "EDX", "EFLAGS status flags", "DF"]
    # the status flags: a note (the JIT's call does not rely on them); DF: clear at calls and returns
    assert [(k.mask, k.note) for k in abi.kept if k.register == "eflags"] == [(EFLAGS_STATUS, True),
                                                                              (EFLAGS_DF, False)]
    assert [k.name for k in abi.kept if k.name.startswith("XMM")] == [f"XMM{i}" for i in range(8)]
    assert abi.fixed("eflags", EFLAGS_DF) == 0 and abi.fixed("fpu_tag") is None


def test_x64_is_the_system_v_reading() -> None:
    abi = ABI["x64"]
    assert not abi.stated and abi.stack_alignment == 16
    assert [a.register for a in abi.arguments if isinstance(a, InRegister)] == ["rdi", "rsi", "rdx", "rcx"]
    assert abi.popped == 0 and abi.return_delta == 8
    assert {k.clause for k in abi.kept} == {"FE2-08"}
    assert abi.fixed("rflags", EFLAGS_DF) == 0 and abi.fixed("fpu_tag") == X87_ALL_EMPTY


def test_unknown_architecture_is_one_line() -> None:
    with pytest.raises(InvalidInput, match="no hook ABI table for 'arm64'"):
        hook_abi("arm64")
    with pytest.raises(InvalidInput, match="no hook kind 'naked'"):
        hook_abi("x64", "naked")


def test_the_kinds_of_hook() -> None:
    """enter2 is ABI; fast keeps every register, with FunctionEnter3's one parameter (x86: enter2's naked
    table, ret 4; x64: the System V volatile registers too, FE2-07, as JIT code relies on); slow is an
    ordinary System V C function with FunctionEnter3WithInfo's two parameters (x86: cdecl)."""
    assert HOOK_ABIS["enter2"] is ABI and hook_abi("x86") is ABI["x86"]
    assert hook_abi("x86", "fast").kept == ABI["x86"].kept
    fast64 = hook_abi("x64", "fast")
    kept64 = {k.register for k in fast64.kept if not k.note}
    assert set(ISA["x64"].general) - {"rsp"} <= kept64 and {f"xmm{i}" for i in range(16)} <= kept64
    assert {k.register for k in fast64.kept if k.clause == "FE2-07" and k.register != "rflags"} == set(
        ISA["x64"].caller_saved
    )
    for arch in ARCHES:
        fast, slow = hook_abi(arch, "fast"), hook_abi(arch, "slow")
        assert fast.parameters == ("functionIDOrClientID",)
        assert slow.parameters == ("functionIDOrClientID", "eltInfo")
        assert {k.clause for k in slow.kept} == {"FE2-08"} and not any(k.note for k in slow.kept)
        assert [k.register for k in slow.kept][:len(ISA[arch].callee_saved)] == list(ISA[arch].callee_saved)
        assert slow.fixed(ISA[arch].flags, EFLAGS_DF) == 0 and slow.stack_alignment == 16
    fast86, slow86, slow64 = hook_abi("x86", "fast"), hook_abi("x86", "slow"), hook_abi("x64", "slow")
    assert fast86.arguments == (OnStack(4),) and fast86.popped == 4
    assert slow86.arguments == (OnStack(4), OnStack(8)) and slow86.popped == 0
    assert slow86.frame_bytes == 12 and slow86.return_delta == 4 and slow86.aligned_calls == "out"
    assert [a.register for a in slow64.arguments if isinstance(a, InRegister)] == ["rdi", "rsi"]
    assert KIND_OF_REGISTRATION == {HookKind.FUNCTION_ENTER2: "enter2", HookKind.FUNCTION_ENTER3: "fast",
                                    HookKind.FUNCTION_ENTER3_WITH_INFO: "slow"}


def test_machine_state_registers_by_name_or_mapping() -> None:
    named = MachineState(arch="x86", eip=1, esp=0x1000, ebp=2, eax=3, ebx=4, ecx=5, edx=6, esi=7,
                         edi=8, eflags=2)
    mapped = MachineState(arch="x86", registers=dict(named.registers))
    assert named == mapped and (named.ip, named.sp, named.flags) == (1, 0x1000, 2)
    assert named["ebx"] == 4 and named["fpu_tag"] == X87_ALL_EMPTY and named["xmm7"] == 0
    assert len(named.xmm) == 8 and len(_zeros("x64").xmm) == 16
    moved = named.replace(esp=0x1014, st=(1, 0, 0, 0, 0, 0, 0, 0))
    assert (moved.sp, moved["st0"], named.sp) == (0x1014, 1, 0x1000)
    with pytest.raises(KeyError):
        named["rax"]


@pytest.mark.parametrize(("arch", "change", "message"), [
    ("x86", {"eax": 2**32}, "eax=0x100000000 is not a 32-bit value"),
    ("x64", {"rax": -1}, "is not a 64-bit value"),
    ("x86", {"xmm": (0,) * 16}, "16 XMM registers, x86 has 8"),
    ("x86", {"st": (2**80, 0, 0, 0, 0, 0, 0, 0)}, "80-bit"),
    ("x64", {"xmm": (2**128,) + (0,) * 15}, "128-bit"),
    ("x86", {"stack": {0: 2**32}}, "is not a dword at a 32-bit address"),
    ("x64", {"stack": {2**64: 0}}, "is not a qword at a 64-bit address"),
])
def test_machine_state_rejects_what_its_architecture_cannot_hold(
    arch: str, change: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _zeros(arch).replace(**change)


def test_machine_state_needs_every_register_of_its_architecture() -> None:
    regs = dict.fromkeys(ISA["x86"].registers, 0)
    del regs["ebp"]
    with pytest.raises(ValidationError, match=r"missing \['ebp'\]"):
        MachineState(arch="x86", registers=regs)
    with pytest.raises(ValidationError, match=r"unknown \['rax'\]"):
        MachineState(arch="x86", registers={**dict.fromkeys(ISA["x86"].registers, 0), "rax": 0})
