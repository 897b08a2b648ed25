"""FunctionEnter2 (FunctionEnter2.md): event rules over recorded hook sequences, and x86 ABI predicates.

Event rules (:func:`check_hook_events`): FE2-01 funcId is the entered function, FE2-02 clientData is
the FunctionIDMapper result, FE2-03 the frame handle is accepted during the hook and names the entered
function, FE2-04 argumentInfo non-NULL exactly when COR_PRF_ENABLE_FUNCTION_ARGS is set, FE2-05 no use of
func/argumentInfo after the hook returned, FE2-10/11/12 no blocking, GC, managed call or managed allocation
inside the hook.

Argument ranges (FE2-14): :func:`predict_argument_ranges` gives, from a method's signature and the values
it was called with, the ranges COR_PRF_FUNCTION_ARGUMENT_INFO should describe; :func:`check_argument_info`
compares what a hook saw with that prediction.

``func`` is opaque (FE2-03 model choice): the model never judges its value, NULL included, and expects
GetFunctionInfo2 to accept it during the hook whatever the event mask, because the page conditions only
argumentInfo on a flag (COR_PRF_ENABLE_FRAME_INFO is not mentioned).

ABI predicates (x86 only, FE2-13 model choice), over :class:`MachineState` snapshots:

* ``before`` is taken at the hook's first instruction, i.e. right after the runtime's ``call``: [ESP]
  holds the return address and the four __stdcall parameters follow at ESP+4, +8, +12, +16
  (funcId, clientData, func, argumentInfo), pushed right to left (FE2-06, :func:`check_hook_entry`).
* ``after`` is taken at the first instruction back in the caller, i.e. right after the hook's
  ``ret 16``: EIP is the return address and ESP = before.ESP + 4 (return address) + 16 (parameters)
  (FE2-09). Every other register must be unchanged (FE2-07 for the registers __stdcall would let a
  callee clobber: EAX, ECX, EDX and the EFLAGS status/direction bits; FE2-08 for the rest: EBX, ESI,
  EDI, EBP, the x87 registers and control/status/tag words, MXCSR, XMM0-7).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from clr_model.errors import InvalidInput
from clr_model.flags import CorPrfMonitor
from clr_model.hresults import format_hresult, hresult_failed, to_unsigned
from clr_model.violations import Violation

__all__ = [
    "ARGUMENT_TYPE_SIZES",
    "COR_PRF_ENABLE_FRAME_INFO",
    "COR_PRF_ENABLE_FUNCTION_ARGS",
    "COR_PRF_ENABLE_FUNCTION_RETVAL",
    "COR_PRF_MONITOR_ENTERLEAVE",
    "EFLAGS_PRESERVED",
    "HOOK_PARAM_BYTES",
    "Argument",
    "ArgumentPrediction",
    "HookEvent",
    "MachineState",
    "ObservedArgumentInfo",
    "ObservedRange",
    "abi_clauses",
    "check_argument_info",
    "check_hook_abi",
    "check_hook_entry",
    "check_hook_events",
    "predict_argument_ranges",
]

# COR_PRF_MONITOR values (corprof.idl)
COR_PRF_MONITOR_ENTERLEAVE = int(CorPrfMonitor.COR_PRF_MONITOR_ENTERLEAVE)
COR_PRF_ENABLE_FUNCTION_ARGS = int(CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS)
COR_PRF_ENABLE_FUNCTION_RETVAL = int(CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_RETVAL)
COR_PRF_ENABLE_FRAME_INFO = int(CorPrfMonitor.COR_PRF_ENABLE_FRAME_INFO)

#: FunctionEnter2's four parameters on x86: FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, pointer.
HOOK_PARAM_BYTES = 16
#: EFLAGS bits a hook must give back: CF PF AF ZF SF OF (status) and DF. System bits (TF, IF, RF, ...)
#: are not the hook's to change either, but an emulator or debugger may touch them, so they are left out.
EFLAGS_PRESERVED = 0x0CD5

_U32 = Field(ge=0, le=2**32 - 1)
_SCRATCH = ("eax", "ecx", "edx")
_SAVED = ("ebx", "esi", "edi", "ebp")


class MachineState(BaseModel):
    """x86 register state at one instant (integers unsigned). ``stack``: dwords by address, optional."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eip: int = _U32
    esp: int = _U32
    ebp: int = _U32
    eax: int = _U32
    ebx: int = _U32
    ecx: int = _U32
    edx: int = _U32
    esi: int = _U32
    edi: int = _U32
    eflags: int = _U32
    st: tuple[int, int, int, int, int, int, int, int] = (0,) * 8  # x87 R0-R7, 80-bit each
    fpu_control: int = Field(default=0x037F, ge=0, le=0xFFFF)
    fpu_status: int = Field(default=0, ge=0, le=0xFFFF)
    fpu_tag: int = Field(default=0xFFFF, ge=0, le=0xFFFF)
    mxcsr: int = Field(default=0x1F80, ge=0, le=2**32 - 1)
    xmm: tuple[int, int, int, int, int, int, int, int] = (0,) * 8  # XMM0-7, 128-bit each
    stack: dict[int, int] = Field(default_factory=dict)

    @field_validator("st")
    @classmethod
    def _x87(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for i, r in enumerate(v):
            if not 0 <= r < 2**80:
                raise ValueError(f"st[{i}]={r:#x} is not an 80-bit value")
        return v

    @field_validator("xmm")
    @classmethod
    def _sse(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for i, r in enumerate(v):
            if not 0 <= r < 2**128:
                raise ValueError(f"xmm{i}={r:#x} is not a 128-bit value")
        return v

    @field_validator("stack")
    @classmethod
    def _dwords(cls, v: dict[int, int]) -> dict[int, int]:
        for addr, word in v.items():
            if not (0 <= addr < 2**32 and 0 <= word < 2**32):
                raise ValueError(f"stack[{addr:#x}]={word:#x} is not a dword at a 32-bit address")
        return v


def abi_clauses(arch: str) -> tuple[str, ...]:
    """The FE2 ABI clauses the model checks on ``arch`` (FE2-13: only x86 has stated rules)."""
    if arch in ("x86", "i386"):
        return ("FE2-06", "FE2-07", "FE2-08", "FE2-09")
    if arch in ("x64", "amd64", "arm64", "arm"):
        return ()
    raise InvalidInput(f"unknown architecture {arch!r}: expected x86, x64, amd64, arm64 or arm")


def check_hook_entry(
    state: MachineState, func_id: int, client_data: int, func: int, argument_info: int
) -> list[Violation]:
    """FE2-06: at the naked hook's first instruction the parameters are at ESP+4..ESP+16, in order.

    Needs ``state.stack`` to hold those four dwords; a missing dword is reported, not guessed.
    """
    out: list[Violation] = []
    for slot, (name, want) in enumerate(
        (("funcId", func_id), ("clientData", client_data), ("func", func), ("argumentInfo", argument_info))
    ):
        addr = state.esp + 4 + 4 * slot
        got = state.stack.get(addr)
        if got is None:
            out.append(Violation(clause="FE2-06", index=slot, message=f"{name}: no stack dword at {addr:#x}"))
        elif got != want & 0xFFFFFFFF:
            out.append(Violation(clause="FE2-06", index=slot,
                                 message=f"{name} at ESP+{4 + 4 * slot}: {got:#x}, expected {want:#x}"))
    return out


def check_hook_abi(
    before: MachineState, after: MachineState, pushed_param_bytes: int = HOOK_PARAM_BYTES
) -> list[Violation]:
    """FE2-07/08/09 over the states at the hook's first instruction and right after its return."""
    if not 0 <= pushed_param_bytes < 2**16 or pushed_param_bytes % 4:
        raise InvalidInput(f"pushed_param_bytes={pushed_param_bytes}: expected a multiple of 4 below 65536")
    out: list[Violation] = []

    def changed(clause: str, name: str, a: int, b: int) -> None:
        if a != b:
            out.append(Violation(clause=clause, message=f"{name} changed: {a:#x} -> {b:#x}"))

    for reg in _SCRATCH:
        changed("FE2-07", reg.upper(), getattr(before, reg), getattr(after, reg))
    changed("FE2-07", "EFLAGS (status/DF)", before.eflags & EFLAGS_PRESERVED, after.eflags & EFLAGS_PRESERVED)
    for reg in _SAVED:
        changed("FE2-08", reg.upper(), getattr(before, reg), getattr(after, reg))
    for i, (a, b) in enumerate(zip(before.st, after.st, strict=True)):
        changed("FE2-08", f"x87 R{i}", a, b)
    changed("FE2-08", "x87 control word", before.fpu_control, after.fpu_control)
    changed("FE2-08", "x87 status word", before.fpu_status, after.fpu_status)
    changed("FE2-08", "x87 tag word", before.fpu_tag, after.fpu_tag)
    changed("FE2-08", "MXCSR", before.mxcsr, after.mxcsr)
    for i, (a, b) in enumerate(zip(before.xmm, after.xmm, strict=True)):
        changed("FE2-08", f"XMM{i}", a, b)
    want_esp = (before.esp + 4 + pushed_param_bytes) & 0xFFFFFFFF
    if after.esp != want_esp:
        out.append(Violation(clause="FE2-09", message=f"ESP after return {after.esp:#x}, expected "
                             f"{want_esp:#x} (entry ESP + 4 + {pushed_param_bytes})"))
    ret = before.stack.get(before.esp)
    if ret is not None and after.eip != ret:
        out.append(Violation(clause="FE2-09", message=f"returned to {after.eip:#x}, the return address "
                             f"at [ESP] was {ret:#x}"))
    return out


# --- event rules --------------------------------------------------------------------------------------

HookKind = Literal[
    "set_event_mask",  # mask
    "mapper",  # FunctionIDMapper(func_id) returned client_data
    "enter",  # FunctionEnter2(func_id, client_data, func, argument_info); target = function really entered
    "leave",  # the hook returned (ret)
    "use_frame_info",  # the profiler passed `func` to api (e.g. GetFunctionInfo2) and got hr (and token)
    "use_argument_info",  # the profiler read through `argument_info`
    "block",  # waited on a lock/event/IO
    "gc",  # attempted a GC (e.g. ForceGC)
    "managed_call",
    "managed_alloc",
]


class HookEvent(BaseModel):
    """One step of a recorded FunctionEnter2 trace, per thread (``thread``) in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: HookKind
    thread: int = 0
    func_id: int | None = None
    client_data: int | None = None
    func: int | None = None
    argument_info: int | None = None
    target: int | None = None
    mask: int | None = None
    api: str | None = None
    hr: int | None = None
    #: "enter": the metadata token of the function really entered (ground truth, optional);
    #: "use_frame_info": the token the API returned for the frame
    token: int | None = None


_INSIDE_RULES = {"block": ("FE2-10", "blocks"), "gc": ("FE2-11", "attempts a GC"),
                 "managed_call": ("FE2-12", "calls managed code"),
                 "managed_alloc": ("FE2-12", "allocates managed memory")}


def check_hook_events(
    events: Sequence[HookEvent], event_mask: int = COR_PRF_MONITOR_ENTERLEAVE, mapper_installed: bool = False
) -> list[Violation]:
    """Check the FE2 event rules. Without a FunctionIDMapper the runtime's default gives clientData =
    funcId (``mapper_installed=False``); a ``mapper`` event in the trace means one is installed."""
    out: list[Violation] = []
    mask = event_mask
    mapped: dict[int, int] = {}
    current: dict[int, HookEvent] = {}  # thread -> the enter event whose hook is running
    expired_frames: set[int] = set()
    expired_args: set[int] = set()

    for i, ev in enumerate(events):
        inside = current.get(ev.thread)
        if ev.kind == "set_event_mask":
            mask = ev.mask if ev.mask is not None else mask
        elif ev.kind == "mapper":
            if ev.func_id is not None and ev.client_data is not None:
                mapped[ev.func_id] = ev.client_data
                mapper_installed = True
        elif ev.kind == "enter":
            if inside is not None:
                out.append(Violation(clause="FE2-12", index=i, message="FunctionEnter2 entered again while "
                                     f"the hook of #{events.index(inside)} runs: the hook ran managed code"))
            if ev.target is not None and ev.func_id != ev.target:
                out.append(Violation(clause="FE2-01", index=i, message=f"funcId {ev.func_id} but control "
                                     f"passes to {ev.target}"))
            if ev.func_id is not None and ev.client_data is not None:
                want = mapped.get(ev.func_id) if mapper_installed else ev.func_id
                if want is not None and ev.client_data != want:
                    out.append(Violation(clause="FE2-02", index=i, message=f"clientData {ev.client_data:#x} "
                                         f"for funcId {ev.func_id:#x}, the mapper gave {want:#x}"))
            if ev.argument_info and not mask & COR_PRF_ENABLE_FUNCTION_ARGS:
                out.append(Violation(clause="FE2-04", index=i, message="argumentInfo is non-NULL without "
                                     "COR_PRF_ENABLE_FUNCTION_ARGS"))
            elif ev.argument_info == 0 and mask & COR_PRF_ENABLE_FUNCTION_ARGS:
                out.append(Violation(clause="FE2-04", index=i, message="argumentInfo is NULL with "
                                     "COR_PRF_ENABLE_FUNCTION_ARGS set"))
            current[ev.thread] = ev
            if ev.func is not None:
                expired_frames.discard(ev.func)
            if ev.argument_info:
                expired_args.discard(ev.argument_info)
        elif ev.kind == "leave":
            if inside is not None:
                if inside.func is not None:
                    expired_frames.add(inside.func)
                if inside.argument_info:
                    expired_args.add(inside.argument_info)
            current.pop(ev.thread, None)
        elif ev.kind == "use_frame_info":
            live = inside is not None and ev.func == inside.func
            if not live and ev.func in expired_frames:
                out.append(Violation(clause="FE2-05", index=i, message=f"frame info {ev.func:#x} used after "
                                     "its FunctionEnter2 returned"))
            elif live and ev.hr is not None and hresult_failed(to_unsigned(ev.hr)):
                out.append(Violation(clause="FE2-03", index=i, message=f"{ev.api or 'GetFunctionInfo2'} "
                                     f"refused the hook's own frame info: {format_hresult(ev.hr)}"))
            elif live and inside is not None and ev.token is not None and inside.token is not None \
                    and ev.token != inside.token:
                out.append(Violation(clause="FE2-03", index=i, message=f"{ev.api or 'GetFunctionInfo2'} "
                                     f"with the hook's frame info gave token {ev.token:#010x}, the entered "
                                     f"function is {inside.token:#010x}"))
        elif ev.kind == "use_argument_info":
            live = inside is not None and ev.argument_info == inside.argument_info
            if not live and ev.argument_info in expired_args:
                out.append(Violation(clause="FE2-05", index=i, message=f"argumentInfo {ev.argument_info:#x} "
                                     "used after its FunctionEnter2 returned"))
        elif inside is not None:
            clause, what = _INSIDE_RULES[ev.kind]
            out.append(Violation(clause=clause, index=i, message=f"FunctionEnter2 hook {what}"))
    return out


# --- FE2-14: argument ranges --------------------------------------------------------------------------

#: bytes of each argument type the model knows; "ptr" (object references, native ints, `this`) is the
#: pointer size, given per call
ARGUMENT_TYPE_SIZES: dict[str, int] = {
    "bool": 1, "byte": 1, "sbyte": 1, "char": 2, "short": 2, "ushort": 2, "int": 4, "uint": 4,
    "long": 8, "ulong": 8, "float": 4, "double": 8,
}
_POINTER_TYPES = ("ptr", "object", "nint", "nuint")
_UNSIGNED = ("bool", "byte", "char", "ushort", "uint", "ulong", "nuint", "ptr", "object")


class Argument(BaseModel):
    """One argument as the caller passed it: its type and value (None: value unknown, size still known)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    value: int | float | None = None


class ArgumentPrediction(BaseModel):
    """What COR_PRF_FUNCTION_ARGUMENT_INFO should describe: per range its length and, where the value is
    known, its bytes (little-endian, as passed); ``total`` = totalArgumentSize."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    labels: tuple[str, ...]
    lengths: tuple[int, ...]
    contents: tuple[bytes | None, ...]
    total: int


class ObservedRange(BaseModel):
    """One COR_PRF_FUNCTION_ARGUMENT_RANGE as a hook saw it, with the first bytes read at it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int = Field(ge=0)
    length: int = Field(ge=0)
    data: bytes = b""


class ObservedArgumentInfo(BaseModel):
    """A hook's argumentInfo: 0 = NULL (then no ranges), else numRanges, totalArgumentSize and ranges."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argument_info: int = Field(ge=0)
    num_ranges: int | None = None
    total_size: int | None = None
    ranges: tuple[ObservedRange, ...] = ()


def _encode(arg: Argument, size: int, where: str) -> bytes | None:
    if arg.value is None:
        return None
    if arg.type in ("float", "double"):
        return struct.pack("<f" if arg.type == "float" else "<d", float(arg.value))
    if isinstance(arg.value, float):
        raise InvalidInput(f"{where}: {arg.type} value {arg.value!r} is not an integer")
    signed = arg.type not in _UNSIGNED
    try:
        return arg.value.to_bytes(size, "little", signed=signed)
    except OverflowError:
        raise InvalidInput(f"{where}: {arg.value} does not fit in a {size}-byte {arg.type}") from None


def predict_argument_ranges(
    args: Sequence[Argument], this: Argument | None = None, pointer_size: int = 8
) -> ArgumentPrediction:
    """FE2-14 (model choice): one range per argument in declaration order, ``this`` first for an instance
    method, each as long as its type and holding the value as passed; totalArgumentSize is their sum."""
    if pointer_size not in (4, 8):
        raise InvalidInput(f"pointer_size={pointer_size}: expected 4 or 8")
    labels: list[str] = []
    lengths: list[int] = []
    contents: list[bytes | None] = []
    whole = ([("this", this)] if this is not None else []) + [(f"arg {j}", a) for j, a in enumerate(args)]
    for label, arg in whole:
        if arg.type in _POINTER_TYPES:
            size = pointer_size
        elif arg.type in ARGUMENT_TYPE_SIZES:
            size = ARGUMENT_TYPE_SIZES[arg.type]
        else:
            raise InvalidInput(f"{label}: unknown argument type {arg.type!r}")
        shown = f"{arg.type} {arg.value}" if arg.value is not None else arg.type
        labels.append(f"{label} ({shown})")
        lengths.append(size)
        contents.append(_encode(arg, size, label))
    return ArgumentPrediction(labels=tuple(labels), lengths=tuple(lengths), contents=tuple(contents),
                              total=sum(lengths))


def check_argument_info(observed: ObservedArgumentInfo, expected: ArgumentPrediction) -> list[Violation]:
    """FE2-14: the hook's argumentInfo against :func:`predict_argument_ranges`; index = the range."""
    if not observed.argument_info:
        return [Violation(clause="FE2-14", message="argumentInfo is NULL: no argument locations")]
    out: list[Violation] = []
    n = len(expected.lengths)
    if observed.num_ranges != n:
        out.append(Violation(clause="FE2-14", message=f"numRanges {observed.num_ranges}, {n} arguments"))
    if observed.total_size != expected.total:
        out.append(Violation(clause="FE2-14", message=f"totalArgumentSize {observed.total_size}, "
                             f"expected {expected.total}"))
    if len(observed.ranges) < n and observed.num_ranges == n:
        out.append(Violation(clause="FE2-14", message=f"{len(observed.ranges)} ranges recorded of {n}"))
    for j, (label, length, want, got) in enumerate(
        zip(expected.labels, expected.lengths, expected.contents, observed.ranges, strict=False)
    ):
        if got.length != length:
            out.append(Violation(clause="FE2-14", index=j, message=f"{label}: range of {got.length} bytes, "
                                 f"expected {length}"))
        elif want is not None and got.data[:length] != want:
            out.append(Violation(clause="FE2-14", index=j, message=f"{label}: range holds "
                                 f"{got.data[:length].hex() or 'nothing'}, expected {want.hex()}"))
    return out
