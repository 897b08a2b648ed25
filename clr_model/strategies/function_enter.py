"""Hypothesis strategies for FunctionEnter2 (clr_model.function_enter): machine states of either
architecture, entry states and conforming hook returns read from the ABI table, and recorded hook event
sequences."""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model.abi import ABI, ISA, X87_REGISTERS, Arch, InRegister, Kept, MachineState
from clr_model.flags import CorPrfMonitor
from clr_model.function_enter import (
    ARGUMENT_TYPE_SIZES,
    Argument,
    HookEvent,
)

__all__ = ["arguments", "conforming_returns", "entry_states", "hook_event_sequences", "machine_states"]

_u32 = st.integers(0, 2**32 - 1)
_FPU_WORDS = {"fpu_control": 0xFFFF, "fpu_status": 0xFFFF, "fpu_tag": 0xFFFF, "mxcsr": 0xFFFF}


@st.composite
def machine_states(draw: st.DrawFn, arch: Arch = "x86") -> MachineState:
    """Any state of ``arch`` (SP word-aligned, leaving room for the return address, the parameters and
    the stack alignment below the top of the address space)."""
    isa, abi = ISA[arch], ABI[arch]
    word = st.integers(0, isa.mask)
    top = isa.mask - isa.word - abi.popped - (abi.stack_alignment or 0)
    registers = {r: draw(word) for r in isa.registers}
    registers[isa.sp] = draw(st.integers(0, top)) & ~(isa.word - 1)
    return MachineState(
        arch=arch,
        registers=registers,
        st=tuple(draw(st.lists(st.integers(0, 2**80 - 1), min_size=8, max_size=8))),
        xmm=tuple(draw(st.lists(st.integers(0, 2**128 - 1), min_size=isa.xmm, max_size=isa.xmm))),
        fpu_control=draw(st.integers(0, 0xFFFF)),
        fpu_status=draw(st.integers(0, 0xFFFF)),
        fpu_tag=draw(st.integers(0, 0xFFFF)),
        mxcsr=draw(st.integers(0, 0xFFFF)),
    )


def _set(state: MachineState, values: dict[str, int]) -> MachineState:
    """``state`` with registers set by their table names (general, IP, flags, x87/SSE words, stN, xmmN)."""
    st_, xmm = list(state.st), list(state.xmm)
    changes: dict[str, object] = {}
    for name, value in values.items():
        if name.startswith("st") and name[2:].isdigit():
            st_[int(name[2:])] = value
        elif name.startswith("xmm") and name[3:].isdigit():
            xmm[int(name[3:])] = value
        else:
            changes[name] = value
    return state.replace(st=tuple(st_), xmm=tuple(xmm), **changes)


def _fixed(state: MachineState, kept: Kept) -> int:
    """The whole register ``kept.register`` with the bits ``kept`` reads set to ``kept.fixed``."""
    assert kept.fixed is not None
    value = state[kept.register]
    if kept.mask is None:
        return kept.fixed
    bits = (kept.mask if kept.fixed else 0) if kept.flag else kept.fixed & kept.mask
    return (value & ~kept.mask) | bits


@st.composite
def entry_states(draw: st.DrawFn, arch: Arch = "x86") -> tuple[MachineState, tuple[int, int, int, int]]:
    """A state at a hook's first instruction as ``ABI[arch]`` has it: the return address at [SP], the four
    parameters in their slots (stack or registers), SP aligned as the ABI says, the fixed registers at
    their values."""
    abi, isa = ABI[arch], ISA[arch]
    state = draw(machine_states(arch))
    word = st.integers(0, isa.mask)
    params = (draw(word), draw(word), draw(word), draw(st.one_of(st.just(0), word)))
    sp = state.sp
    if abi.stack_alignment is not None:
        sp += -(sp + isa.word) % abi.stack_alignment
    values = {isa.sp: sp}
    stack = {sp: draw(word)}
    for value, where in zip(params, abi.arguments, strict=True):
        if isinstance(where, InRegister):
            values[where.register] = value
        else:
            stack[sp + where.offset] = value
    state = state.replace(stack=stack, **values)
    fixed = {k.register: _fixed(state, k) for k in abi.kept if k.fixed is not None}
    return _set(state, fixed), params


@st.composite
def conforming_returns(draw: st.DrawFn, arch: Arch = "x86") -> tuple[MachineState, MachineState]:
    """(before, after) of a hook that keeps the rules of ``ABI[arch]``: SP raised by the return address and
    the popped parameters, IP = the return address, every register a ``kept`` rule reads unchanged (the
    fixed ones at their value); every bit no rule reads (x86: the system EFLAGS bits; x64: the scratch
    registers, the flags but DF, the MXCSR status bits, the x87 and XMM registers) drawn anew."""
    abi, isa = ABI[arch], ISA[arch]
    before, _params = draw(entry_states(arch))
    names = (*isa.registers, *_FPU_WORDS, *(f"st{i}" for i in range(X87_REGISTERS)),
             *(f"xmm{i}" for i in range(isa.xmm)))
    values: dict[str, int] = {}
    for name in names:
        if name in (isa.sp, isa.ip):
            continue
        width = (1 << 80) - 1 if name.startswith("st") else (1 << 128) - 1 if name.startswith("xmm") \
            else _FPU_WORDS.get(name, isa.mask)
        rules = [k for k in abi.kept if k.register == name]
        if any(k.mask is None for k in rules):
            continue
        read = 0
        for k in rules:
            read |= k.mask or 0
        values[name] = (before[name] & read) | (draw(st.integers(0, width)) & ~read & width)
    values[isa.sp] = before.sp + abi.return_delta
    values[isa.ip] = before.stack[before.sp]
    return before, _set(before.replace(stack={}), values)


@st.composite
def hook_event_sequences(
    draw: st.DrawFn, conforming: bool = True, threads: tuple[int, ...] = (0, 1, 2)
) -> tuple[list[HookEvent], int]:
    """(events, event mask) of enter/leave pairs on a few ``threads``; conforming ones keep every rule,
    the others may also contain any event anywhere (on those threads)."""
    mask = draw(st.sampled_from([0x20, 0x20 | int(CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS)]))
    events: list[HookEvent] = []
    mapped: dict[int, int] = {}
    for n in range(draw(st.integers(0, 8))):
        fid = draw(st.integers(1, 6))
        if fid not in mapped:
            mapped[fid] = draw(st.integers(0, 2**32 - 1))
            events.append(HookEvent(kind="mapper", func_id=fid, client_data=mapped[fid]))
        thread = draw(st.sampled_from(threads))
        args = 0x1000 + n * 16 if mask & CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS else 0
        frame = 0x9000 + n
        token = 0x06000000 + fid
        events.append(HookEvent(kind="enter", thread=thread, func_id=fid, client_data=mapped[fid],
                                func=frame, argument_info=args, target=fid, token=token))
        if draw(st.booleans()):
            events.append(HookEvent(kind="use_frame_info", thread=thread, func=frame, api="GetFunctionInfo2",
                                    hr=0, token=token))
        events.append(HookEvent(kind="leave", thread=thread))
    if not conforming:
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["block", "gc", "managed_call", "managed_alloc", "use_frame_info",
                                         "use_argument_info", "enter", "leave", "set_event_mask"]))
            at = draw(st.integers(0, len(events)))
            events.insert(at, HookEvent(kind=kind, thread=draw(st.sampled_from(threads)),
                                        func_id=draw(st.integers(0, 6)), client_data=draw(st.integers(0, 9)),
                                        func=draw(st.integers(0x9000, 0x9008)),
                                        argument_info=draw(st.integers(0, 0x1100)),
                                        mask=draw(st.integers(0, 2**32 - 1)),
                                        hr=draw(st.sampled_from([0, 0x80070057]))))
    return events, mask


_RANGES = {"bool": (0, 1), "byte": (0, 255), "sbyte": (-128, 127), "char": (0, 0xFFFF),
           "short": (-(2**15), 2**15 - 1), "ushort": (0, 2**16 - 1), "int": (-(2**31), 2**31 - 1),
           "uint": (0, 2**32 - 1), "long": (-(2**63), 2**63 - 1), "ulong": (0, 2**64 - 1),
           "ptr": (0, 2**32 - 1), "object": (0, 2**32 - 1), "nint": (-(2**31), 2**31 - 1),
           "nuint": (0, 2**32 - 1)}


@st.composite
def arguments(draw: st.DrawFn) -> Argument:
    """One argument of a known type with a value that fits it (pointer types: values fit 4 bytes), or no
    value at all."""
    kind = draw(st.sampled_from(sorted(set(ARGUMENT_TYPE_SIZES) | set(_RANGES))))
    if draw(st.integers(0, 9)) == 0:
        return Argument(type=kind)
    if kind in ("float", "double"):
        value: int | float = draw(st.floats(allow_nan=False, width=32 if kind == "float" else 64))
    else:
        lo, hi = _RANGES[kind]
        value = draw(st.integers(lo, hi))
    return Argument(type=kind, value=value)
