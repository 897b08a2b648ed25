"""The FunctionEnter2 hook ABI of each architecture as data, and one machine state for every architecture.

Like pyelftools' ``DWARFStructs(address_size=...)``, what differs between the architectures is a field of
a table, not a branch or a parallel class:

* :class:`Isa` (``ISA["x86"]``, ``ISA["x64"]``): the register file: word size, the general registers (in
  the order the hook checker draws them), the instruction and stack pointers, the flags register and how
  many SSE registers there are. The x87 stack (8 registers of 80 bits, control/status/tag words) and MXCSR
  are the same on both.
* :class:`HookAbi` (``ABI["x86"]``, ``ABI["x64"]``): how a FunctionEnter2-style hook is called and what it
  must give back: where its parameters are, how many parameter bytes its return pops, the registers
  (or bits of them) that must come back and the clause each reports, the stack alignment at calls, and the
  clauses the model checks on that architecture. ``ABI["x86"]`` is the page's own reading (a naked
  __stdcall function, FE2-06..09); ``ABI["x64"]`` is the System V reading (FE2-13 model choice, see
  :mod:`clr_model.function_enter`).
* :data:`HOOK_ABIS` (``HOOK_ABIS[kind][arch]``, :func:`hook_abi`): one table per hook *kind* and
  architecture, the kind being how the runtime calls the hook (:data:`KIND_OF_REGISTRATION` maps the API
  table's registrations to it). ``enter2`` (FunctionEnter2, SetEnterLeaveFunctionHooks2) is :data:`ABI`.
  ``fast`` (FunctionEnter3/Leave3/Tailcall3, SetEnterLeaveFunctionHooks3) is called straight from JIT code
  with one parameter (FunctionIDOrClientID): every register kept (naked, everything the JIT relies on: on
  x86 ``enter2``'s table, on x64 the System V volatile registers too, :data:`_X64_NAKED`), x86 __stdcall
  ``ret 4``. ``slow`` (the ...3WithInfo hooks) is called by the runtime's
  register-saving stub (ProfileEnterNaked -> ProfileEnter) as an ordinary C function with
  (FunctionIDOrClientID, COR_PRF_ELT_INFO): the System V callee-saved registers (i386 psABI on x86, cdecl:
  the project's headers define STDMETHODCALLTYPE empty), DF clear, the x87 stack empty, the stack aligned
  at calls; the rest is the caller's (research/api-facts.md section 4.7).
* A :class:`Kept` rule may be a *note* (``note=True``): what the runtime does not rely on. The x86
  EFLAGS status flags (CF PF AF ZF SF OF) are one: the JIT's call to a hook does not rely on them (its
  code sets them again before any use), so a hook that changes them (``sub esp``/``add esp`` alone do) is
  told so, never failed. DF is a rule wherever the ABI says it is clear at calls and returns (both i386
  and AMD64 do).
* :class:`MachineState`: the registers at one instant, named by ``ISA[arch]`` (``state["ebx"]``,
  ``state.sp``), with the x87/SSE state and an optional view of the stack.

The predicates over states (FE2-06..09) are :func:`clr_model.function_enter.check_hook_entry`,
:func:`~clr_model.function_enter.hook_register_changes` and :func:`~clr_model.function_enter.check_hook_abi`:
one function each, reading the table of the state's architecture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clr_model.api import HookKind
from clr_model.errors import InvalidInput

__all__ = [
    "ABI",
    "ARCHES",
    "EFLAGS_DF",
    "EFLAGS_PRESERVED",
    "EFLAGS_STATUS",
    "ELT3_PARAMETERS",
    "FAST_PARAMETERS",
    "HOOK_ABIS",
    "HOOK_PARAMETERS",
    "ISA",
    "KINDS",
    "KIND_OF_REGISTRATION",
    "MXCSR_CONTROL",
    "X87_ALL_EMPTY",
    "Arch",
    "ArgumentSlot",
    "HookAbi",
    "InRegister",
    "Isa",
    "Kept",
    "Kind",
    "MachineState",
    "OnStack",
    "RegisterReader",
    "hook_abi",
]

Arch = Literal["x86", "x64"]
ARCHES: tuple[Arch, ...] = ("x86", "x64")

#: EFLAGS bits a naked hook gives back: CF PF AF ZF SF OF (status) and DF. System bits (TF, IF, RF, ...)
#: are not the hook's to change either, but an emulator or debugger may touch them, so they are left out.
EFLAGS_PRESERVED = 0x0CD5
#: the EFLAGS status flags CF PF AF ZF SF OF: no caller relies on them across a call (a note, not a rule)
EFLAGS_STATUS = 0x08D5
#: the direction flag (System V: clear on entry and on return)
EFLAGS_DF = 0x0400
#: MXCSR bits a System V callee preserves (control: DAZ, masks, RC, FZ); bits 0-5 are status flags
MXCSR_CONTROL = 0xFFC0
#: an x87 tag word with every register empty (System V: the x87 stack is empty at calls and returns)
X87_ALL_EMPTY = 0xFFFF
#: FunctionEnter2's parameters, in order (FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, pointer)
HOOK_PARAMETERS = ("funcId", "clientData", "func", "argumentInfo")
#: FunctionEnter3's (the fast path's) one parameter
FAST_PARAMETERS = ("functionIDOrClientID",)
#: FunctionEnter3WithInfo's (the slow path's) parameters: the ID and the ELT info handle
ELT3_PARAMETERS = ("functionIDOrClientID", "eltInfo")

#: how the runtime calls a hook: straight from JIT code with FunctionEnter2's four parameters (``enter2``)
#: or FunctionEnter3's one (``fast``), or through its own register-saving stub as an ordinary C function
#: (``slow``: the ...3WithInfo hooks)
Kind = Literal["enter2", "fast", "slow"]
KINDS: tuple[Kind, ...] = ("enter2", "fast", "slow")

#: the x87/SSE state's names beside the general registers: the words, then st0-st7 and xmm0-xmmN
_FPU_WORDS = ("fpu_control", "fpu_status", "fpu_tag", "mxcsr")
X87_REGISTERS = 8


@dataclass(frozen=True)
class Isa:
    """The register file of one architecture, by the names states and CPUs use."""

    arch: Arch
    bits: int
    #: the general registers, the stack pointer among them, in the order the hook checker draws them
    general: tuple[str, ...]
    ip: str
    sp: str
    flags: str
    #: how many SSE registers (XMM0-7 on x86, XMM0-15 on x64)
    xmm: int
    #: what a stack slot is called in messages
    word_name: str
    #: the general registers an ordinary function preserves for its caller (System V AMD64 and i386 psABI)
    callee_saved: tuple[str, ...]
    #: where an ordinary function returns an integer (the first, then the second register of a pair)
    returns: tuple[str, str]

    @property
    def word(self) -> int:
        return self.bits // 8

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def registers(self) -> tuple[str, ...]:
        """Every integer register a :class:`MachineState` holds: the general ones, IP and flags."""
        return (*self.general, self.ip, self.flags)

    @property
    def caller_saved(self) -> tuple[str, ...]:
        """The general registers an ordinary function may change for its caller (the return registers
        among them)."""
        return tuple(r for r in self.general if r not in self.callee_saved and r != self.sp)


ISA: Mapping[Arch, Isa] = {
    "x86": Isa(arch="x86", bits=32, general=("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp"),
               ip="eip", sp="esp", flags="eflags", xmm=8, word_name="dword",
               callee_saved=("ebx", "esi", "edi", "ebp"), returns=("eax", "edx")),
    "x64": Isa(arch="x64", bits=64, general=("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
                                             *(f"r{i}" for i in range(8, 16))),
               ip="rip", sp="rsp", flags="rflags", xmm=16, word_name="qword",
               callee_saved=("rbx", "rbp", "r12", "r13", "r14", "r15"), returns=("rax", "rdx")),
}


@dataclass(frozen=True)
class OnStack:
    """A parameter in the stack slot ``offset`` bytes above SP at the hook's first instruction."""

    offset: int


@dataclass(frozen=True)
class InRegister:
    """A parameter in a register at the hook's first instruction."""

    register: str


ArgumentSlot = OnStack | InRegister


class RegisterReader(Protocol):
    """Anything that gives a register's value by its :class:`Isa` name (a state, a CPU)."""

    def __getitem__(self, name: str, /) -> int: ...


@dataclass(frozen=True)
class Kept:
    """A register, or bits of one, that a hook must give back, and the clause that says so.

    ``fixed`` None: its value after the return is its value at entry. Otherwise the ABI fixes it at entry
    and on return (System V: DF clear, the x87 stack empty); ``at_entry`` is the message when an entry
    state breaks that (``{value}``: the value read). ``note``: the runtime does not rely on it, so a change
    is told (a note), never a finding (the x86 EFLAGS status flags)."""

    clause: str
    #: the register as messages and findings name it ("EBX", "x87 control word", "MXCSR control", "DF")
    name: str
    #: the register as :class:`Isa` and :class:`MachineState` name it ("ebx", "fpu_control", "st3")
    register: str
    mask: int | None = None
    #: the masked bits read as one flag (0 or 1)
    flag: bool = False
    fixed: int | None = None
    at_entry: str = ""
    note: bool = False

    def read(self, registers: RegisterReader) -> int:
        """The value this rule compares, read from a state or a CPU."""
        value = registers[self.register]
        if self.mask is not None:
            value &= self.mask
        return int(value != 0) if self.flag else value


@dataclass(frozen=True)
class HookAbi:
    """How a hook of one kind is called on one architecture and what it must give back."""

    isa: Isa
    #: where the rules come from
    reading: str
    #: whether FunctionEnter2.md states these rules (FE2-13: only the x86 ones)
    stated: bool
    #: where the parameters (``parameters``: funcId, clientData, func and argumentInfo for FunctionEnter2)
    #: are at the hook's first instruction
    arguments: tuple[ArgumentSlot, ...]
    #: parameter bytes the hook's return pops (__stdcall: the callee cleans the stack)
    popped: int
    #: what must come back, in the order changes are reported
    kept: tuple[Kept, ...]
    #: SP + one word is a multiple of this at the hook's entry and at the calls it makes (None: no rule)
    stack_alignment: int | None
    #: the ABI clauses the hook checker judges on this architecture
    clauses: tuple[str, ...]
    #: how the runtime calls the hook (:data:`Kind`)
    kind: Kind = "enter2"
    #: the parameters' names, in the order of ``arguments``
    parameters: tuple[str, ...] = HOOK_PARAMETERS
    #: the calls ``stack_alignment`` judges: ``every`` call, or only calls ``out`` of the hook's object
    #: (i386: gcc keeps the stack aligned where a callee needs it, and calls its own PIC thunks unaligned)
    aligned_calls: Literal["every", "out"] = "every"

    @property
    def arch(self) -> Arch:
        return self.isa.arch

    @property
    def frame_bytes(self) -> int:
        """The bytes above SP at the hook's first instruction that are its own: the return address and
        the parameters on the stack (whoever pops them)."""
        return self.isa.word * (1 + sum(isinstance(a, OnStack) for a in self.arguments))

    @property
    def return_delta(self) -> int:
        """How far SP rises from the hook's first instruction to the caller's next: the return address
        and the popped parameters."""
        return self.isa.word + self.popped

    def fixed(self, register: str, mask: int | None = None) -> int | None:
        """The value the ABI fixes ``register`` (masked by ``mask``) to at entry and return, if it does."""
        for k in self.kept:
            if k.register == register and k.mask == mask and k.fixed is not None:
                return k.fixed
        return None


def _unchanged(clause: str, *registers: str) -> tuple[Kept, ...]:
    return tuple(Kept(clause, r.upper(), r) for r in registers)


def _x87_and_sse(clause: str, xmm: int) -> tuple[Kept, ...]:
    """The whole x87 and SSE state unchanged: R0-R7, the three x87 words, MXCSR, XMM0-XMM{xmm - 1}."""
    return (
        *(Kept(clause, f"x87 R{i}", f"st{i}") for i in range(X87_REGISTERS)),
        Kept(clause, "x87 control word", "fpu_control"),
        Kept(clause, "x87 status word", "fpu_status"),
        Kept(clause, "x87 tag word", "fpu_tag"),
        Kept(clause, "MXCSR", "mxcsr"),
        *(Kept(clause, f"XMM{i}", f"xmm{i}") for i in range(xmm)),
    )


_X86_EFLAGS = (
    # the status flags: a note (the JIT's call does not rely on them); DF: clear at calls and returns
    Kept("FE2-07", "EFLAGS status flags", "eflags", mask=EFLAGS_STATUS, note=True),
    Kept("FE2-07", "DF", "eflags", mask=EFLAGS_DF, flag=True, fixed=0, at_entry="DF set at entry"),
)
_X86_NAKED = (
    *_unchanged("FE2-07", "eax", "ecx", "edx"),
    *_X86_EFLAGS,
    *_unchanged("FE2-08", "ebx", "esi", "edi", "ebp"),
    *_x87_and_sse("FE2-08", ISA["x86"].xmm),
)


#: the fast path on x64 (FunctionEnter3.md: "The execution engine does not save any registers before calling
#: this function"): JIT code keeps live values in every register across its call of the hook, the System V
#: volatile ones included (argument registers at an enter, rax/rdx and xmm0/xmm1 holding the return value
#: at a leave): observed, a hook written as an ordinary System V C function (clobbering rdi, rdx, rax)
#: crashes 3.1.23 and 8.0.4 in JIT code after it returns (the document-written fixture call_counter.cpp);
#: the proxy's own trampolines save them for that reason (proxy/hooks3.cpp). FE2-07 for the registers System
#: V lets a callee clobber (the RFLAGS status flags a note, as on x86), FE2-08 for every other one
_X64_NAKED = (
    *_unchanged("FE2-07", *ISA["x64"].caller_saved),
    Kept("FE2-07", "RFLAGS status flags", "rflags", mask=EFLAGS_STATUS, note=True),
    Kept("FE2-07", "DF", "rflags", mask=EFLAGS_DF, flag=True, fixed=0, at_entry="DF set at entry"),
    *_unchanged("FE2-08", *ISA["x64"].callee_saved),
    *_x87_and_sse("FE2-08", ISA["x64"].xmm),
)


def _system_v(isa: Isa) -> tuple[Kept, ...]:
    """What an ordinary System V function gives back: the callee-saved registers, the x87 control word,
    the MXCSR control bits, DF clear and the x87 stack empty (AMD64 and i386 psABI alike)."""
    return (
        *_unchanged("FE2-08", *isa.callee_saved),
        Kept("FE2-08", "x87 control word", "fpu_control"),
        Kept("FE2-08", "MXCSR control", "mxcsr", mask=MXCSR_CONTROL),
        Kept("FE2-08", "DF", isa.flags, mask=EFLAGS_DF, flag=True, fixed=0, at_entry="DF set at entry"),
        Kept("FE2-08", "x87 tag word", "fpu_tag", fixed=X87_ALL_EMPTY,
             at_entry="x87 stack not empty at entry (tag {value:#x})"),
    )


ABI: Mapping[Arch, HookAbi] = {
    # FunctionEnter2.md: naked __stdcall; the parameters pushed right to left above the return address and
    # popped by the hook (ret 16); FE2-07 for the registers __stdcall would let a callee clobber (the EFLAGS
    # status flags a note), FE2-08 for every other one (the x87 and SSE state included)
    "x86": HookAbi(
        isa=ISA["x86"],
        reading="FunctionEnter2.md: naked __stdcall",
        stated=True,
        arguments=(OnStack(4), OnStack(8), OnStack(12), OnStack(16)),
        popped=16,
        kept=_X86_NAKED,
        stack_alignment=None,
        clauses=("FE2-06", "FE2-07", "FE2-08", "FE2-09"),
    ),
    # System V AMD64 (FE2-13 model choice): an ordinary function called from the runtime's register-saving
    # helper; FE2-08 is the callee-saved set, the x87 control word, the MXCSR control bits, DF clear and the
    # x87 stack empty; FE2-07 does not apply
    "x64": HookAbi(
        isa=ISA["x64"],
        reading="System V AMD64 (FE2-13 model choice)",
        stated=False,
        arguments=(InRegister("rdi"), InRegister("rsi"), InRegister("rdx"), InRegister("rcx")),
        popped=0,
        kept=_system_v(ISA["x64"]),
        stack_alignment=16,
        clauses=("FE2-06", "FE2-08", "FE2-09"),
    ),
}

HOOK_ABIS: Mapping[Kind, Mapping[Arch, HookAbi]] = {
    "enter2": ABI,
    # FunctionEnter3.md: naked, "the execution engine does not save any registers"; called straight from
    # JIT code with FunctionIDOrClientID alone (x86: __stdcall, ret 4): what FunctionEnter2's tables keep
    "fast": {
        "x86": HookAbi(
            isa=ISA["x86"], reading="FunctionEnter3.md: naked __stdcall, called from JIT code", stated=True,
            arguments=(OnStack(4),), popped=4, kept=_X86_NAKED, stack_alignment=None,
            clauses=("FE2-06", "FE2-07", "FE2-08", "FE2-09"), kind="fast", parameters=FAST_PARAMETERS,
        ),
        "x64": HookAbi(
            isa=ISA["x64"], reading="FunctionEnter3.md: naked, called from JIT code (argument in rdi)",
            stated=False, arguments=(InRegister("rdi"),), popped=0, kept=_X64_NAKED,
            stack_alignment=16, clauses=("FE2-06", "FE2-07", "FE2-08", "FE2-09"), kind="fast",
            parameters=FAST_PARAMETERS,
        ),
    },
    # the ...3WithInfo hooks: an ordinary C function called by the runtime's ProfileEnter (after its
    # ProfileEnterNaked stub saved the registers), research/api-facts.md 4.7: the System V callee-saved
    # registers and nothing else
    "slow": {
        "x86": HookAbi(
            isa=ISA["x86"], reading="i386 System V psABI (cdecl), called by the runtime's ProfileEnter",
            stated=False, arguments=(OnStack(4), OnStack(8)), popped=0, kept=_system_v(ISA["x86"]),
            stack_alignment=16, clauses=("FE2-06", "FE2-08", "FE2-09"), kind="slow",
            parameters=ELT3_PARAMETERS, aligned_calls="out",
        ),
        "x64": HookAbi(
            isa=ISA["x64"], reading="System V AMD64, called by the runtime's ProfileEnter", stated=False,
            arguments=(InRegister("rdi"), InRegister("rsi")), popped=0, kept=_system_v(ISA["x64"]),
            stack_alignment=16, clauses=("FE2-06", "FE2-08", "FE2-09"), kind="slow",
            parameters=ELT3_PARAMETERS,
        ),
    },
}

#: the kind of the hooks each registration hands the runtime (the API table's HookKind); the .NET
#: Framework 1.x hooks and the FunctionIDMappers have none (the checker does not run them)
KIND_OF_REGISTRATION: Mapping[HookKind, Kind] = {
    HookKind.FUNCTION_ENTER2: "enter2",
    HookKind.FUNCTION_ENTER3: "fast",
    HookKind.FUNCTION_ENTER3_WITH_INFO: "slow",
}


def hook_abi(arch: str, kind: str = "enter2") -> HookAbi:
    """``HOOK_ABIS[kind][arch]``, or :class:`InvalidInput` for an architecture or kind without a table."""
    for known_kind in KINDS:
        if kind == known_kind:
            break
    else:
        raise InvalidInput(f"no hook kind {kind!r}: expected one of {', '.join(KINDS)}")
    for known in ARCHES:
        if arch == known:
            return HOOK_ABIS[known_kind][known]
    raise InvalidInput(f"no hook ABI table for {arch!r}: expected one of {', '.join(ARCHES)}")


class MachineState(BaseModel):
    """Register state at one instant, every integer unsigned, the registers named by ``ISA[arch]``.

    ``registers``: every name of :attr:`Isa.registers`, given as a mapping or by name
    (``MachineState(arch="x86", eip=..., esp=..., ...)``). ``st``: x87 R0-R7 (80 bits each), ``xmm``: the
    architecture's SSE registers (zeros when not given). ``stack``: words by address, optional."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arch: Arch
    registers: dict[str, int]
    st: tuple[int, ...] = (0,) * X87_REGISTERS
    fpu_control: int = Field(default=0x037F, ge=0, le=0xFFFF)
    fpu_status: int = Field(default=0, ge=0, le=0xFFFF)
    fpu_tag: int = Field(default=X87_ALL_EMPTY, ge=0, le=0xFFFF)
    mxcsr: int = Field(default=0x1F80, ge=0, le=2**32 - 1)
    xmm: tuple[int, ...] = ()
    stack: dict[int, int] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _registers_by_name(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("arch") not in ISA:
            return data
        isa = ISA[data["arch"]]
        out = {k: v for k, v in data.items() if k not in isa.registers}
        named = {k: data[k] for k in isa.registers if k in data}
        if named:
            out["registers"] = {**dict(data.get("registers") or {}), **named}
        out.setdefault("xmm", (0,) * isa.xmm)
        return out

    @model_validator(mode="after")
    def _widths(self) -> MachineState:
        isa = self.isa
        missing = [r for r in isa.registers if r not in self.registers]
        unknown = sorted(set(self.registers) - set(isa.registers))
        if missing or unknown:
            raise ValueError(f"{self.arch} registers: missing {missing}, unknown {unknown}")
        for name, value in self.registers.items():
            if not 0 <= value <= isa.mask:
                raise ValueError(f"{name}={value:#x} is not a {isa.bits}-bit value")
        if len(self.st) != X87_REGISTERS:
            raise ValueError(f"{len(self.st)} x87 registers, expected {X87_REGISTERS}")
        for i, r in enumerate(self.st):
            if not 0 <= r < 2**80:
                raise ValueError(f"st[{i}]={r:#x} is not an 80-bit value")
        if len(self.xmm) != isa.xmm:
            raise ValueError(f"{len(self.xmm)} XMM registers, {self.arch} has {isa.xmm}")
        for i, r in enumerate(self.xmm):
            if not 0 <= r < 2**128:
                raise ValueError(f"xmm{i}={r:#x} is not a 128-bit value")
        for addr, word in self.stack.items():
            if not (0 <= addr <= isa.mask and 0 <= word <= isa.mask):
                raise ValueError(f"stack[{addr:#x}]={word:#x} is not a {isa.word_name} at a {isa.bits}-bit "
                                 "address")
        return self

    @property
    def isa(self) -> Isa:
        return ISA[self.arch]

    @property
    def ip(self) -> int:
        return self.registers[self.isa.ip]

    @property
    def sp(self) -> int:
        return self.registers[self.isa.sp]

    @property
    def flags(self) -> int:
        return self.registers[self.isa.flags]

    def __getitem__(self, name: str) -> int:
        """A register by name: a general register, IP, flags, ``fpu_control``, ``fpu_status``,
        ``fpu_tag``, ``mxcsr``, ``st0``-``st7`` or ``xmm0``-``xmmN``."""
        if name in self.registers:
            return self.registers[name]
        if name in _FPU_WORDS:
            return int(getattr(self, name))
        for prefix, values in (("st", self.st), ("xmm", self.xmm)):
            index = name.removeprefix(prefix)
            if index != name and index.isdigit() and int(index) < len(values):
                return values[int(index)]
        raise KeyError(name)

    def replace(self, **changes: Any) -> MachineState:
        """A validated copy with ``changes``: registers by name, or fields (``stack``, ``st``, ...)."""
        data = self.model_dump()
        for name, value in changes.items():
            if name in self.isa.registers:
                data["registers"][name] = value
            else:
                data[name] = value
        return MachineState.model_validate(data)
