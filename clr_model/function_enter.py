"""FunctionEnter2 (FunctionEnter2.md): event rules over recorded hook sequences, and ABI predicates.

Event rules (:func:`check_hook_events`, over the shared vocabulary of :mod:`clr_model.events`): FE2-01
funcId is the entered function, FE2-02 clientData is
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

ABI predicates, over :class:`clr_model.abi.MachineState` snapshots, one function each for every
architecture: each reads the table of the state's architecture (:data:`clr_model.abi.ABI`).

* ``before`` is taken at the hook's first instruction, i.e. right after the runtime's ``call``: [SP] holds
  the return address and the four parameters (funcId, clientData, func, argumentInfo) are where the table
  says (FE2-06, :func:`check_hook_entry`).
* ``after`` is taken at the first instruction back in the caller, i.e. right after the hook's return: IP
  is the return address and SP = before.SP + the return address + the parameter bytes the hook pops
  (FE2-09, :func:`check_hook_abi`). The registers of the table's ``kept`` rules must be unchanged (or, where
  the table fixes them, have that value), each reported with its clause (:func:`hook_register_changes`).

On x86 (the page's rules) the naked __stdcall hook finds its parameters at ESP+4, +8, +12, +16, pushed
right to left, and returns with ``ret 16``: ESP = before.ESP + 4 + 16. FE2-07 covers the registers
__stdcall would let a callee clobber (EAX, ECX, EDX; DF, clear at the call as at every call, must be clear
on return; the EFLAGS status flags are a *note*: the JIT's call does not rely on them, so a change is told,
never a finding), FE2-08 the rest (EBX, ESI, EDI, EBP, the x87 registers and control/status/tag words,
MXCSR, XMM0-7).

Each predicate takes the hook's ``kind`` (:data:`clr_model.abi.KINDS`, default ``enter2``) and reads
``HOOK_ABIS[kind][arch]``: the fast path (FunctionEnter3, one parameter, called from JIT code) keeps what
``enter2`` keeps; the slow path (the ...3WithInfo hooks, called by the runtime's stub as ordinary C
functions) keeps the System V callee-saved set.

On x64 Unix (FE2-13 model choice for the hook checker) the runtime calls the hooks as ordinary functions
from its own register-saving helpers (ProfileEnter/ProfileLeave), so the page's x86 rules are read as the
System V AMD64 ABI's:

* FE2-06 (the hook's inputs): the four parameters arrive in RDI, RSI, RDX, RCX, the return address at
  [RSP], RSP + 8 a multiple of 16; the hook's memory is its own stack, what argumentInfo points to and its
  object's data.
* FE2-07 does not apply: the runtime's helper saves the registers System V lets a callee clobber.
* FE2-08 ("save every register you use") is the System V callee-saved set: RBX, RBP, R12-R15, the x87
  control word and the MXCSR control bits (DAZ, exception masks, rounding, FZ); the x87 stack empty and DF
  clear on return, as they are on entry. The other registers (XMM0-15, x87 R0-R7, the MXCSR status flags)
  are the caller's to save.
* FE2-09 ("restore the stack"): no parameter is on the stack, so RSP after the return is the entry RSP + 8
  and control returns to the return address; the stack is 16-byte aligned at every call the hook makes
  (RSP + 8 a multiple of 16 at the callee's first instruction, :func:`check_call_alignment`), the only
  other stack rule System V states.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from clr_model import api
from clr_model.abi import ISA, Arch, HookAbi, InRegister, MachineState, hook_abi
from clr_model.errors import InvalidInput
from clr_model.events import (
    Event,
    InfoCall,
    ProfilerCallback,
    ThreadOperation,
    ThreadOperationName,
    begins,
    ends,
    int_arg,
)
from clr_model.flags import CorPrfMonitor
from clr_model.hresults import format_hresult, hresult_failed, to_unsigned
from clr_model.violations import Violation

__all__ = [
    "ARGUMENT_TYPE_SIZES",
    "HOOK_RULES",
    "Argument",
    "ArgumentPrediction",
    "Event",
    "HookEvent",
    "ObservedArgumentInfo",
    "ObservedRange",
    "RegisterChange",
    "abi_clauses",
    "check_argument_info",
    "check_call_alignment",
    "check_hook_abi",
    "check_hook_entry",
    "check_hook_events",
    "hook_register_changes",
    "predict_argument_ranges",
]


class RegisterChange(BaseModel):
    """A register the rules say must come back unchanged, with its value before and after the hook.

    ``name`` names it as the messages do (``EBX``, ``x87 control word``, ``XMM3``, ``MXCSR control``);
    ``note``: the runtime does not rely on it (:attr:`clr_model.abi.Kept.note`): told, never a finding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clause: str
    name: str
    before: int = Field(ge=0)
    after: int = Field(ge=0)
    note: bool = False

    @property
    def message(self) -> str:
        return f"{self.name} changed: {self.before:#x} -> {self.after:#x}"


def abi_clauses(arch: str) -> tuple[str, ...]:
    """The FE2 ABI clauses the page states on ``arch`` (FE2-13: only x86 has stated rules; the System V
    reading the hook checker uses on x64 is ``ABI["x64"].clauses``)."""
    if arch in _ABI_NAMES:
        abi = hook_abi(_ABI_NAMES[arch])
        return abi.clauses if abi.stated else ()
    if arch in ("arm64", "arm"):
        return ()
    raise InvalidInput(f"unknown architecture {arch!r}: expected x86, x64, amd64, arm64 or arm")


_ABI_NAMES: dict[str, Arch] = {"x86": "x86", "i386": "x86", "x64": "x64", "amd64": "x64"}


def _pair(before: MachineState, after: MachineState, kind: str) -> HookAbi:
    if before.arch != after.arch:
        raise InvalidInput(f"the state before the hook is {before.arch}, the state after it {after.arch}")
    return hook_abi(before.arch, kind)


def check_hook_entry(state: MachineState, *params: int, kind: str = "enter2") -> list[Violation]:
    """FE2-06: the hook's inputs at its first instruction, where ``HOOK_ABIS[kind][state.arch]`` puts them
    (``params`` in the order of its ``parameters``: funcId, clientData, func, argumentInfo for ``enter2``).

    x86: the parameters at ESP+4, ESP+8, ..., in order, read from ``state.stack`` (a missing dword is
    reported, not guessed). x64 (System V reading): the parameters in RDI, RSI, RDX, RCX; RSP + 8 16-byte
    aligned; DF clear; the x87 stack empty. Every table fixing a register (DF clear) is checked too."""
    abi = hook_abi(state.arch, kind)
    isa = abi.isa
    out: list[Violation] = []
    if len(params) != len(abi.parameters):
        raise InvalidInput(f"{len(params)} parameters given, a {kind} hook has {len(abi.parameters)} "
                           f"({', '.join(abi.parameters)})")
    for slot, (name, want, where) in enumerate(zip(abi.parameters, params, abi.arguments, strict=True)):
        if isinstance(where, InRegister):
            got: int | None = state[where.register]
            if got != want & isa.mask:
                out.append(Violation(clause="FE2-06", index=slot, message=f"{name} in "
                                     f"{where.register.upper()}: {got:#x}, expected {want:#x}"))
            continue
        addr = state.sp + where.offset
        got = state.stack.get(addr)
        if got is None:
            out.append(Violation(clause="FE2-06", index=slot,
                                 message=f"{name}: no stack {isa.word_name} at {addr:#x}"))
        elif got != want & isa.mask:
            out.append(Violation(clause="FE2-06", index=slot, message=f"{name} at {isa.sp.upper()}+"
                                 f"{where.offset}: {got:#x}, expected {want:#x}"))
    align = abi.stack_alignment
    if align is not None and (state.sp + isa.word) % align:
        sp = isa.sp.upper()
        out.append(Violation(clause="FE2-06", message=f"{sp} {state.sp:#x} at entry: {sp} + {isa.word} "
                             f"is not a multiple of {align}"))
    for kept in abi.kept:
        if kept.fixed is not None and (value := kept.read(state)) != kept.fixed:
            out.append(Violation(clause="FE2-06", message=kept.at_entry.format(value=value)))
    return out


def hook_register_changes(
    before: MachineState, after: MachineState, kind: str = "enter2"
) -> list[RegisterChange]:
    """FE2-07/08: every register the hook must give back (``HOOK_ABIS[kind][arch].kept``) that it did not,
    in the table's order, with its clause; a change of a register the runtime does not rely on has
    ``note`` set (x86: the EFLAGS status flags). A register the ABI fixes (DF, System V's x87 tag word) is
    compared with that value, not with its value at entry."""
    out: list[RegisterChange] = []
    for kept in _pair(before, after, kind).kept:
        a = kept.fixed if kept.fixed is not None else kept.read(before)
        b = kept.read(after)
        if a != b:
            out.append(RegisterChange(clause=kept.clause, name=kept.name, before=a, after=b, note=kept.note))
    return out


def check_hook_abi(
    before: MachineState, after: MachineState, pushed_param_bytes: int | None = None, kind: str = "enter2"
) -> list[Violation]:
    """FE2-07/08/09 over the states at the hook's first instruction and right after its return (notes,
    what the runtime does not rely on, are no violations: :func:`hook_register_changes` has them).

    FE2-09: SP after the return is the entry SP + the return address + the parameter bytes the hook pops
    (``pushed_param_bytes``, default the table's ``popped``: 16 on x86, 0 on x64), and control is back at
    the return address (``before.stack[SP]``, when the state holds it)."""
    abi = _pair(before, after, kind)
    isa = abi.isa
    popped = abi.popped if pushed_param_bytes is None else pushed_param_bytes
    if not 0 <= popped < 2**16 or popped % isa.word:
        raise InvalidInput(f"pushed_param_bytes={popped}: expected a multiple of {isa.word} below 65536")
    out = [Violation(clause=c.clause, message=c.message) for c in hook_register_changes(before, after, kind)
           if not c.note]
    sp = isa.sp.upper()
    want_sp = (before.sp + isa.word + popped) & isa.mask
    if after.sp != want_sp:
        pops = f" + {popped}" if abi.popped else ""
        out.append(Violation(clause="FE2-09", message=f"{sp} after return {after.sp:#x}, expected "
                             f"{want_sp:#x} (entry {sp} + {isa.word}{pops})"))
    ret = before.stack.get(before.sp)
    if ret is not None and after.ip != ret:
        out.append(Violation(clause="FE2-09", message=f"returned to {after.ip:#x}, the return address "
                             f"at [{sp}] was {ret:#x}"))
    return out


def check_call_alignment(arch: Arch, sp_at_callee_entry: int, kind: str = "enter2") -> Violation | None:
    """FE2-09 where the ABI aligns the stack at calls (System V reading: at a callee's first instruction
    RSP + 8 is a multiple of 16); None where it holds or the ABI states no alignment (x86 naked)."""
    isa = ISA[arch]
    align = hook_abi(arch, kind).stack_alignment
    if align is None or not (sp_at_callee_entry + isa.word) % align:
        return None
    sp = isa.sp.upper()
    return Violation(clause="FE2-09", message=f"stack misaligned at a call: {sp} {sp_at_callee_entry:#x} "
                     f"at the callee's entry, {sp} + {isa.word} not a multiple of {align}")


#: What the hook checker reports besides register changes (which carry their own clause): rule -> clause,
#: with the sentence it prints. The page states none of these directly; each is read into the clause whose
#: sentence it breaks (model choice, FE2-13 for x64):
#: * memory: FE2-06 gives the hook its frame (return address and parameters); memory other than its own
#:   stack, what the runtime's pointers point to, its object's data and other objects' data is none of its
#:   inputs (an access the emulator caused, through a pointer it never provided, is not a finding: the run
#:   is "not emulated", emu.hookcheck.check);
#: * stack/return/call alignment: FE2-09, the page's one rule on the stack;
#: * leaving the object (a call or jump to another object's symbol) from a hook called straight from JIT
#:   code (kinds enter2 and fast): an FE2-12 note, never a finding. The page forbids calling managed code
#:   and allocating managed memory; a call to libc (a timing hook's clock_gettime) does neither, and what
#:   the callee does is out of the checker's sight. The checker answers the call as an ordinary one (as it
#:   does every call of a slow-path hook), so the register rules are judged across it;
#: * not returning within the instruction budget: FE2-10, a hook that never returns blocks forever.
HOOK_RULES: dict[str, tuple[str, str]] = {
    "memory": ("FE2-06", "memory access outside the frame, the runtime's blocks and the objects' data"),
    "stack-restored": ("FE2-09", "stack pointer after the return is not entry + return address + parameters"),
    "returns-to-caller": ("FE2-09", "control does not return to the return address"),
    "call-alignment": ("FE2-09", "stack not 16-byte aligned at a call"),
    "stays-in-object": ("FE2-12", "call or jump out of the object (a note: what it calls is not checked)"),
    "returns": ("FE2-10", "no return within the instruction budget"),
    "register-preserved": ("FE2-08", "register not preserved (FE2-07 for the x86 scratch registers)"),
}


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
    """One step of a recorded FunctionEnter2 trace, per thread (``thread``) in order.

    The FE2 rules' own shorthand from before the shared vocabulary: :meth:`to_event` gives the
    :mod:`clr_model.events` event it stands for, and :func:`check_hook_events` accepts either."""

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

    def to_event(self) -> Event:
        """The event of the shared vocabulary this step stands for."""
        t = self.thread
        hook = "FunctionEnter2"
        if self.kind == "set_event_mask":
            return InfoCall(thread=t, name="SetEventMask", args=_present(dwEvents=self.mask))
        if self.kind == "mapper":
            return ProfilerCallback(thread=t, name="FunctionIDMapper", args=_present(funcId=self.func_id),
                                    out=_present(clientData=self.client_data))
        if self.kind == "enter":
            args = _present(funcId=self.func_id, clientData=self.client_data, func=self.func,
                            argumentInfo=self.argument_info)
            return ProfilerCallback(thread=t, name=hook, phase="enter", args=args,
                                    truth=_present(funcId=self.target, token=self.token))
        if self.kind == "leave":
            return ProfilerCallback(thread=t, name=hook, phase="return")
        if self.kind == "use_frame_info":
            try:
                hr = to_unsigned(self.hr) if self.hr is not None else None
            except ValueError as err:
                raise InvalidInput(f"use_frame_info: hr {err}") from None
            return InfoCall(thread=t, name=self.api or "GetFunctionInfo2", args={"frameInfo": self.func},
                            out=_present(token=self.token), hr=hr)
        if self.kind == "use_argument_info":
            if self.argument_info is not None and not 0 <= self.argument_info < 2**64:
                raise InvalidInput(f"use_argument_info: argumentInfo {self.argument_info} is not an address")
            return ThreadOperation(thread=t, op="ReadArgumentInfo", address=self.argument_info)
        if self.kind == "gc":
            return InfoCall(thread=t, name="ForceGC")
        return ThreadOperation(thread=t, op=_INSIDE_OPS[self.kind])


_INSIDE_OPS: dict[str, ThreadOperationName] = {
    "block": "Block", "managed_call": "ManagedCodeRan", "managed_alloc": "ManagedAllocation"}
#: what a hook must not do (FE2-10/11/12): thread operations, and calls that trigger a GC
_INSIDE_RULES: dict[str, tuple[str, str]] = {
    "Block": ("FE2-10", "blocks"), "ManagedCodeRan": ("FE2-12", "calls managed code"),
    "ManagedAllocation": ("FE2-12", "allocates managed memory")}
_HOOK = "FunctionEnter2"
_MAPPERS = api.hooks_of([api.HookKind.FUNCTION_ID_MAPPER])


def _present(**values: int | None) -> dict[str, JsonValue]:
    return {k: v for k, v in values.items() if v is not None}


def check_hook_events(
    events: Sequence[Event | HookEvent],
    event_mask: int = int(CorPrfMonitor.COR_PRF_MONITOR_ENTERLEAVE),
    mapper_installed: bool = False,
) -> list[Violation]:
    """Check the FE2 event rules. Without a FunctionIDMapper the runtime's default gives clientData =
    funcId (``mapper_installed=False``); a FunctionIDMapper callback in the sequence means one is installed.

    Reads (:mod:`clr_model.events`): SetEventMask/SetEventMask2 calls that did not fail, FunctionIDMapper
    callbacks (``args.funcId``, ``out.clientData``), FunctionEnter2 callbacks (``args``: funcId,
    clientData, func, argumentInfo; ``truth``: the funcId and token of the function really entered),
    calls with a ``frameInfo`` argument (``out.token``), ReadArgumentInfo, Block, ManagedCodeRan,
    ManagedAllocation and calls that trigger a GC; every other event is ignored. :class:`HookEvent` steps
    are read as :meth:`HookEvent.to_event`. Violations carry the index in ``events``."""
    out: list[Violation] = []
    mask = event_mask
    mapped: dict[int, int] = {}
    current: dict[int, tuple[int, ProfilerCallback]] = {}  # thread -> (index, FunctionEnter2 whose hook runs)
    expired_frames: set[int] = set()
    expired_args: set[int] = set()

    def enter(i: int, ev: ProfilerCallback) -> None:
        inside = current.get(ev.thread)
        if inside is not None:
            out.append(Violation(clause="FE2-12", index=i, message="FunctionEnter2 entered again while "
                                 f"the hook of #{inside[0]} runs: the hook ran managed code"))
        func_id, client_data = int_arg(ev.args, "funcId"), int_arg(ev.args, "clientData")
        target = int_arg(ev.truth, "funcId")
        argument_info = int_arg(ev.args, "argumentInfo")
        if target is not None and func_id != target:
            out.append(Violation(clause="FE2-01", index=i, message=f"funcId {func_id} but control "
                                 f"passes to {target}"))
        if func_id is not None and client_data is not None:
            want = mapped.get(func_id) if mapper_installed else func_id
            if want is not None and client_data != want:
                out.append(Violation(clause="FE2-02", index=i, message=f"clientData {client_data:#x} "
                                     f"for funcId {func_id:#x}, the mapper gave {want:#x}"))
        if argument_info and not mask & CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS:
            out.append(Violation(clause="FE2-04", index=i, message="argumentInfo is non-NULL without "
                                 "COR_PRF_ENABLE_FUNCTION_ARGS"))
        elif argument_info == 0 and mask & CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS:
            out.append(Violation(clause="FE2-04", index=i, message="argumentInfo is NULL with "
                                 "COR_PRF_ENABLE_FUNCTION_ARGS set"))
        current[ev.thread] = (i, ev)
        func = int_arg(ev.args, "func")
        if func is not None:
            expired_frames.discard(func)
        if argument_info:
            expired_args.discard(argument_info)

    def leave(thread: int) -> None:
        inside = current.pop(thread, None)
        if inside is not None:
            func = int_arg(inside[1].args, "func")
            if func is not None:
                expired_frames.add(func)
            argument_info = int_arg(inside[1].args, "argumentInfo")
            if argument_info:
                expired_args.add(argument_info)

    def use_frame_info(i: int, ev: InfoCall) -> None:
        inside = current.get(ev.thread)
        func = int_arg(ev.args, "frameInfo")
        live = inside is not None and func == int_arg(inside[1].args, "func")
        token = int_arg(ev.out, "token")
        entered = int_arg(inside[1].truth, "token") if inside is not None else None
        if not live and func is not None and func in expired_frames:
            out.append(Violation(clause="FE2-05", index=i, message=f"frame info {func:#x} used after "
                                 "its FunctionEnter2 returned"))
        elif live and ev.hr is not None and hresult_failed(ev.hr):
            out.append(Violation(clause="FE2-03", index=i, message=f"{ev.name} refused the hook's own "
                                 f"frame info: {format_hresult(ev.hr)}"))
        elif live and token is not None and entered is not None and token != entered:
            out.append(Violation(clause="FE2-03", index=i, message=f"{ev.name} with the hook's frame info "
                                 f"gave token {token:#010x}, the entered function is {entered:#010x}"))

    def inside_rule(i: int, thread: int, clause: str, what: str) -> None:
        if thread in current:
            out.append(Violation(clause=clause, index=i, message=f"FunctionEnter2 hook {what}"))

    for i, item in enumerate(events):
        ev = item.to_event() if isinstance(item, HookEvent) else item
        if isinstance(ev, ProfilerCallback):
            if ev.name in _MAPPERS and begins(ev):
                func_id, client_data = int_arg(ev.args, "funcId"), int_arg(ev.out, "clientData")
                if func_id is not None and client_data is not None:
                    mapped[func_id] = client_data
                    mapper_installed = True
            elif ev.name == _HOOK:
                if begins(ev):
                    enter(i, ev)
                if ends(ev):
                    leave(ev.thread)
        elif isinstance(ev, InfoCall):
            if ev.name in api.names_with(api.Fact.SETS_EVENT_MASK) and ends(ev):
                new_mask = int_arg(ev.args, "dwEvents", "dwEventsLow")
                if new_mask is not None and (ev.hr is None or not hresult_failed(ev.hr)):
                    mask = new_mask
            elif "frameInfo" in ev.args and ends(ev):
                use_frame_info(i, ev)
            elif ev.triggers_gc and begins(ev):
                inside_rule(i, ev.thread, "FE2-11", "attempts a GC")
        elif isinstance(ev, ThreadOperation):
            if ev.op == "ReadArgumentInfo":
                inside = current.get(ev.thread)
                live = inside is not None and ev.address == int_arg(inside[1].args, "argumentInfo")
                if not live and ev.address is not None and ev.address in expired_args:
                    out.append(Violation(clause="FE2-05", index=i, message=f"argumentInfo {ev.address:#x} "
                                         "used after its FunctionEnter2 returned"))
            elif ev.op in _INSIDE_RULES:
                inside_rule(i, ev.thread, *_INSIDE_RULES[ev.op])
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
