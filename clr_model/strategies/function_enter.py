"""Hypothesis strategies for FunctionEnter2 (clr_model.function_enter): x86 machine states, conforming
hook returns, and recorded hook event sequences."""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model.function_enter import (
    ARGUMENT_TYPE_SIZES,
    COR_PRF_ENABLE_FUNCTION_ARGS,
    HOOK_PARAM_BYTES,
    Argument,
    HookEvent,
    MachineState,
)

__all__ = ["arguments", "conforming_returns", "entry_states", "hook_event_sequences", "machine_states"]

_u32 = st.integers(0, 2**32 - 1)


@st.composite
def machine_states(draw: st.DrawFn) -> MachineState:
    """Any x86 state (ESP leaves room for the return address and the parameters below 2**32)."""
    regs = {r: draw(_u32) for r in ("eip", "ebp", "eax", "ebx", "ecx", "edx", "esi", "edi", "eflags")}
    return MachineState(
        esp=draw(st.integers(0, 2**32 - 1 - 4 - HOOK_PARAM_BYTES)) & ~3,
        st=tuple(draw(st.lists(st.integers(0, 2**80 - 1), min_size=8, max_size=8))),
        xmm=tuple(draw(st.lists(st.integers(0, 2**128 - 1), min_size=8, max_size=8))),
        fpu_control=draw(st.integers(0, 0xFFFF)),
        fpu_status=draw(st.integers(0, 0xFFFF)),
        fpu_tag=draw(st.integers(0, 0xFFFF)),
        mxcsr=draw(st.integers(0, 0xFFFF)),
        **regs,
    )


@st.composite
def entry_states(draw: st.DrawFn) -> tuple[MachineState, tuple[int, int, int, int]]:
    """A state at a naked hook's first instruction with its stack: return address, then the 4 params."""
    state = draw(machine_states())
    params = (draw(_u32), draw(_u32), draw(_u32), draw(st.one_of(st.just(0), _u32)))
    stack = {state.esp: draw(_u32)} | {state.esp + 4 + 4 * i: p for i, p in enumerate(params)}
    return state.model_copy(update={"stack": stack}), params


@st.composite
def conforming_returns(draw: st.DrawFn) -> tuple[MachineState, MachineState]:
    """(before, after) of a hook that keeps the rules: same registers, ESP + 20, EIP = return address;
    system EFLAGS bits (TF/IF/...) may differ."""
    before, _params = draw(entry_states())
    noise = draw(st.integers(0, 2**32 - 1)) & ~0x0CD5
    after = before.model_copy(update={
        "esp": before.esp + 4 + HOOK_PARAM_BYTES, "eip": before.stack[before.esp],
        "eflags": (before.eflags & 0x0CD5) | noise, "stack": {}})
    return before, after


@st.composite
def hook_event_sequences(
    draw: st.DrawFn, conforming: bool = True, threads: tuple[int, ...] = (0, 1, 2)
) -> tuple[list[HookEvent], int]:
    """(events, event mask) of enter/leave pairs on a few ``threads``; conforming ones keep every rule,
    the others may also contain any event anywhere (on those threads)."""
    mask = draw(st.sampled_from([0x20, 0x20 | COR_PRF_ENABLE_FUNCTION_ARGS]))
    events: list[HookEvent] = []
    mapped: dict[int, int] = {}
    for n in range(draw(st.integers(0, 8))):
        fid = draw(st.integers(1, 6))
        if fid not in mapped:
            mapped[fid] = draw(st.integers(0, 2**32 - 1))
            events.append(HookEvent(kind="mapper", func_id=fid, client_data=mapped[fid]))
        thread = draw(st.sampled_from(threads))
        args = 0x1000 + n * 16 if mask & COR_PRF_ENABLE_FUNCTION_ARGS else 0
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
