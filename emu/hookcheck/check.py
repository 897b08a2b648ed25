"""Run an enter/leave hook under unicorn from many randomised states and report every rule it breaks.

One check = one hook symbol, one architecture and one *kind* (how the runtime calls the hook,
:data:`clr_model.abi.KINDS`; its ABI table is ``HOOK_ABIS[kind][arch]``):

* ``enter2`` (FunctionEnter2/Leave2/Tailcall2) and ``fast`` (FunctionEnter3/Leave3/Tailcall3, one parameter):
  called straight from JIT code, naked: every register the table keeps must come back. A call or jump out of
  the object (libc's clock_gettime, ``__tls_get_addr``, ...) is answered as the ``slow`` kind's are (below),
  so the registers are judged across it, and told as an FE2-12 *note*: the page forbids calling managed code
  or allocating managed memory, which a call to another object's symbol need not do (a timing hook reads a
  clock), and the checker cannot see what that code does; never a finding;
* ``slow`` (the ...3WithInfo hooks): called by the runtime's register-saving stub as an ordinary System V C
  function (research/api-facts.md 4.7), so only the callee-saved registers, DF and the stack are judged,
  and calls out of the object are *emulated*: a call to libc (or any symbol of another object) returns 0
  in the return register with the caller-saved registers, the status flags and the SSE registers
  clobbered with random values (as a real callee may), and a call through the hook's ICorProfilerInfo is
  answered by :mod:`emu.hookcheck.runtime`. The hook's second parameter is a COR_PRF_ELT_INFO handle
  pointing at a block the checker provides (read-only for the hook), and GetFunctionEnter3Info /
  GetFunctionLeave3Info / GetFunctionTailcall3Info answer from the run's argument ranges.

**The hook's ICorProfilerInfo pointer** (``slow``). A profiler keeps it in its own writable data, set by
Initialize and zero in the file, so the hook loads NULL and reads the vtable at address 0. The checker
learns where the pointer lives instead of guessing: it remembers every pointer-sized load from memory
whose contents it made up (with the address it came from), and when a pointer-sized read faults at
exactly the value of such a load from the object's writable data, that cell is taken as a COM pointer;
the run is replayed from the same start with the cell holding a stand-in object (one per cell, its first
word the stand-in vtable, whose slots are trap addresses answered as the API table's methods). If the
replay never reads the stand-in's vtable word, the cell was not used as a COM object: it is dropped,
never tried again, and the run replayed without it (at most :data:`MAX_REPLAYS` times). Learned cells
keep their stand-in for every later run of the check (the profiler's Initialize ran before any hook). A
pointer reached otherwise (through a profiler object that holds it, through thread-local storage) is not
guessed at: the run is not emulated, with the reason.

**Not emulated is never a finding.** A run ends as *not emulated*, with a reason and the instruction,
when the hook reaches what the emulator never provided: an access or jump through a pointer read from
memory whose contents the emulator made up (the object's writable data as the file has it, a global the
profiler's Initialize would have set; other objects' data; the runtime's blocks; the caller's frame),
through NULL (within :data:`NEAR` of 0: a pointer such memory, a call out or a zeroed out-parameter gave),
through a value the emulator drew at random (a parameter such as FunctionID or clientData, which really
point at runtime or profiler data, another register at entry, a register a call out clobbered), through
fs:/gs: thread-local storage it did not set up, below its 64 KiB stack, or a call it cannot answer (a
struct passed by value, an out-parameter it cannot size). Every other stray access (an address the hook
made up itself, the caller's frame, a read-only segment written, the runtime's blocks written) is FE2-06.
Rules are judged on the runs emulated: the rules at the return only on runs that returned; a finding
made before a run left what the emulator can follow stands (everything up to it was followed). Other
objects' data (libc's ``stderr``, ...) reads as zeros in every kind.

**Notes.** A register whose rule is a note (:attr:`clr_model.abi.Kept.note`: the x86 EFLAGS status flags,
which the JIT's call does not rely on) is reported as a :class:`HookFinding` with ``note`` set, kept apart
from the findings (:attr:`HookReport.notes`).

One check = one unicorn CPU (:class:`emu.cpu.Cpu`) over the loaded object, reused by every run (translated
code stays cached); each run starts from the CPU context saved at creation, the object's pristine writable
pages (learned ICorProfilerInfo cells filled), a fresh stack and argument block, and a state drawn from
``random.Random(seed)`` (never the clock): general registers, EFLAGS, the x87 stack (contents, TOP, which
registers are in use), control and status words, MXCSR and the SSE registers, and the call frame of the
kind's parameters. Everything that differs between architectures and kinds is read from the ABI table and
the check's :class:`Layout`: where the parameters go, the stack alignment, what the ABI fixes at entry (DF
clear; x64 and slow: the x87 stack empty), the registers read back and the thread block (x64 FS). The
entry state is checked against the model (FE2-06, :func:`check_hook_entry`) before the hook runs: a
failure there is the checker's own bug and raises.

What each run checks (rules and clauses from :data:`clr_model.function_enter.HOOK_RULES`):

* after the return (the return address reached, ``emu_start``'s ``until``): the registers the table keeps
  (:func:`hook_register_changes`) and the stack pointer and return address (FE2-09). A changed register is
  then attributed to the last instruction that changed it by running the same state again, single-stepping
  with a code hook that watches only the changed registers (cheap runs stay cheap);
* while it runs (a block hook and memory hooks): a block outside the object's executable segments, a call
  or jump out of the object (answered; a note for the JIT-called kinds), a stray access (FE2-06, above), a
  misaligned stack at the entry of a callee (where the ABI aligns it, FE2-09), and the instruction budget
  (FE2-10: a hook that does not return within it never does, for the checker).

An exception inside a unicorn hook is stored, emulation stopped, and raised after ``emu_start`` returns
(:meth:`emu.cpu.Cpu.hook`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import capstone  # type: ignore[import-untyped]
from unicorn import (
    UC_HOOK_BLOCK,
    UC_HOOK_CODE,
    UC_HOOK_MEM_FETCH_PROT,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_UNMAPPED,
    UC_HOOK_MEM_WRITE,
    UC_MEM_FETCH_PROT,
    UC_MEM_FETCH_UNMAPPED,
    UC_MEM_WRITE,
    UC_MEM_WRITE_UNMAPPED,
    UC_PROT_ALL,
    UC_PROT_READ,
    UC_PROT_WRITE,
)

from clr_model.abi import (
    EFLAGS_DF,
    EFLAGS_STATUS,
    X87_ALL_EMPTY,
    X87_REGISTERS,
    Kept,
    Kind,
    MachineState,
    OnStack,
    hook_abi,
)
from clr_model.errors import InvalidInput
from clr_model.function_enter import (
    HOOK_RULES,
    RegisterChange,
    check_call_alignment,
    check_hook_abi,
    check_hook_entry,
    hook_register_changes,
)
from emu.cpu import Cpu, UcError
from emu.errors import EmuError
from emu.hookcheck.loader import PAGE, Arch, HookInputError, LoadedObject, find_symbol, load_object
from emu.hookcheck.report import HookFinding, HookReport, aggregate, aggregate_reasons
from emu.hookcheck.runtime import EltFrame, answer, argument_words, info_vtable, type_size, unanswerable

__all__ = ["DEFAULT_BUDGET", "DEFAULT_RUNS", "MAX_REPLAYS", "NEAR", "check_hook"]

DEFAULT_RUNS = 100
#: instructions one run may execute before it counts as never returning (FE2-10)
DEFAULT_BUDGET = 10_000
#: how far past a pointer an access still goes "through" it (a member of a struct, an element)
NEAR = 0x10000
#: replays of one run while learning where the hook's ICorProfilerInfo pointers live (slow kind)
MAX_REPLAYS = 8


@dataclass(frozen=True)
class Layout:
    """Where a check puts things (none overlaps a loaded object at ``base`` or the trap addresses)."""

    base: int
    stack: int  # stack region [stack, stack + STACK_SIZE)
    args: int  # argumentInfo block / the slow kind's COR_PRF_ELT_INFO block (read-only for the hook)
    ret: int  # the caller's page: the return address is ret + 0x10
    #: the stand-in ICorProfilerInfo: its vtable, then the objects (slow kind)
    runtime: int
    #: the vtable's slots: trap addresses, never mapped (slot i at info_traps + 16 i)
    info_traps: int
    #: the thread block (None: none is mapped), its base register pointing at tls + TLS_SIZE // 2
    tls: int | None = None
    tls_register: str = "fs_base"


_LAYOUTS: dict[Arch, Layout] = {
    "x86": Layout(base=0x1000_0000, stack=0x3000_0000, args=0x4000_0000, ret=0x6000_0000, runtime=0x5000_0000,
                  info_traps=0x5100_0000),
    "x64": Layout(base=0x7F3A_0000_0000, stack=0x7FFE_0000_0000, args=0x7F55_0000_0000, ret=0x7F66_0000_0000,
                  runtime=0x7F88_0000_0000, info_traps=0x7F99_0000_0000, tls=0x7F44_0000_0000),
}
STACK_SIZE = 0x10000
#: bytes of the caller's frame above the hook's parameters (mapped, so an access there is reported, not fatal)
CALLER_FRAME = 0x100
ARGS_SIZE = 0x1000
TLS_SIZE = 0x2000
#: in the argument page (slow kind): the COR_PRF_ELT_INFO block the handle points at, the frame handle
#: Get*3Info answers, and where the return value's range is
ELT_OFFSET, ELT_SIZE = 0x800, 0x100
FRAME_OFFSET = 0x900
RETVAL_OFFSET = 0x300
#: the stand-in runtime: the vtable at its start, the objects from OBJECTS_AT, OBJECT_SIZE bytes each
RUNTIME_SIZE = 0x2000
OBJECTS_AT, OBJECT_SIZE = 0x1000, 0x40
MAX_OBJECTS = (RUNTIME_SIZE - OBJECTS_AT) // OBJECT_SIZE
#: trap addresses are this far apart (emu.hookcheck.loader)
TRAP_STRIDE = 16

#: EFLAGS bits the state draws: CF PF AF ZF SF OF (DF separately)
_STATUS_FLAGS = (0x1, 0x4, 0x10, 0x40, 0x80, 0x800)
_CS_MODES = {32: capstone.CS_MODE_32, 64: capstone.CS_MODE_64}
_SEGMENT = re.compile(r"\b[fg]s:")


@dataclass(frozen=True)
class _Insn:
    address: int
    size: int
    mnemonic: str
    op_str: str

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.op_str}".strip()


@dataclass(frozen=True)
class _Start:
    """Everything a run starts from (so the same run can be replayed for attribution)."""

    #: register name (:class:`emu.cpu.Cpu`'s) -> value, in the order they are written
    registers: dict[str, int]
    stack: bytes
    args: bytes
    params: tuple[int, ...]
    sp: int
    #: seeds the values emulated calls clobber registers with
    clobber_seed: int = 0


@dataclass
class _HookRun:
    start: _Start
    frame_end: int
    rng: random.Random
    count: int = 0
    blocks: list[tuple[int, int]] = field(default_factory=list)
    findings: list[HookFinding] = field(default_factory=list)
    #: the emulation was stopped by a hook (a finding, a call to answer, not emulated, a cell learned)
    stopped: bool = False
    #: attribution: register name -> (its rule, last value, instruction that last changed it)
    watch: dict[str, tuple[Kept, int, _Insn | None]] = field(default_factory=dict)
    prev_insn: _Insn | None = None
    #: a call out to answer: ("trap", trap address) or ("info", vtable slot)
    pending: tuple[str, int] | None = None
    #: the run ended on what the emulator never provided: (reason, instruction)
    not_emulated: tuple[str, str | None] | None = None
    #: a cell of the object's writable data to try as the ICorProfilerInfo pointer (slow kind)
    learn: int | None = None
    #: pointer-sized loads from memory whose contents the emulator made up: (value, address), latest last
    loads: list[tuple[int, int]] = field(default_factory=list)
    #: entry values the emulator drew at random that a hook may go through (the parameters...): (name, value)
    drawn: list[tuple[str, int]] = field(default_factory=list)
    #: entry values that hold nothing for the hook (slow kind: the registers but the parameters)
    garbage: list[tuple[str, int]] = field(default_factory=list)
    #: registers an emulated call clobbered: (what, value), e.g. ("RCX as printf left it", ...)
    clobbered: list[tuple[str, int]] = field(default_factory=list)
    #: learned cells whose stand-in object's vtable word the hook read
    used: set[int] = field(default_factory=set)
    #: the next block follows an emulated call's return (no alignment check there)
    after_call: bool = False


@dataclass(frozen=True)
class _Outcome:
    findings: list[HookFinding]
    count: int
    returned: bool
    not_emulated: tuple[str, str | None] | None


class _RunMemory:
    """The hook's memory as :mod:`emu.hookcheck.runtime` sees it when it answers a call: every access
    judged as the hook's own (:meth:`HookChecker._access`)."""

    def __init__(self, checker: HookChecker, run: _HookRun, insn: _Insn | None) -> None:
        self.checker, self.run, self.insn = checker, run, insn

    def read(self, address: int, size: int, what: str) -> bytes | None:
        if not self.checker._access(self.run, address, size, False, self.insn, f"{what} read by the runtime"):
            return None
        return self.checker.cpu.mem_read(address, size)

    def write(self, address: int, data: bytes, what: str) -> bool:
        if not self.checker._access(self.run, address, len(data), True, self.insn,
                                    f"{what} written by the runtime"):
            return False
        self.checker.cpu.mem_write(address, data)
        return True


class HookChecker:
    """The CPU, the object and the hooks of one check (one hook symbol, one architecture, one kind)."""

    def __init__(
        self, obj: LoadedObject, entry: int, symbol: str, budget: int, kind: Kind = "enter2"
    ) -> None:
        self.obj = obj
        self.arch: Arch = obj.arch
        self.kind: Kind = kind
        self.abi = hook_abi(obj.arch, kind)
        self.isa = self.abi.isa
        self.slow = kind == "slow"
        self.entry = entry
        self.symbol = symbol
        self.budget = budget
        self.layout = lay = _LAYOUTS[obj.arch]
        self.ret = lay.ret + 0x10
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, _CS_MODES[self.isa.bits])
        self._decoded: dict[tuple[int, int], list[_Insn]] = {}
        self._kept = {k.name: k for k in self.abi.kept}
        self._run: _HookRun | None = None
        #: learned ICorProfilerInfo cells -> their stand-in object; cells tried and dropped
        self._slots: dict[int, int] = {}
        self._rejected: set[int] = set()
        self._next_object = 0
        cpu = Cpu(self.arch)
        cpu.mem_map(obj.image_start, len(obj.image), UC_PROT_ALL)
        cpu.mem_write(obj.image_start, bytes(obj.image))
        cpu.mem_map(lay.stack, STACK_SIZE, UC_PROT_ALL)
        cpu.mem_map(lay.args, ARGS_SIZE, UC_PROT_ALL)
        cpu.mem_map(lay.ret, PAGE, UC_PROT_ALL)
        cpu.mem_write(lay.ret, b"\xf4" * PAGE)  # hlt: the caller's code is never run
        if lay.tls is not None:
            cpu.mem_map(lay.tls, TLS_SIZE, UC_PROT_ALL)
        # other objects' data (the trap addresses): readable and writable zeros, never executable, so a
        # call or jump there faults on the fetch (UC_HOOK_MEM_FETCH_PROT) and names the symbol
        self._traps = (0, 0)
        if obj.traps:
            lo = min(obj.traps) & ~(PAGE - 1)
            hi = (max(obj.traps) + TRAP_STRIDE + 2 * PAGE - 1) & ~(PAGE - 1)
            cpu.mem_map(lo, hi - lo, UC_PROT_READ | UC_PROT_WRITE)
            self._traps = (lo, hi)
        self._runtime_image = b""
        if self.slow:
            self._runtime_image = self._stand_in()
            cpu.mem_map(lay.runtime, RUNTIME_SIZE, UC_PROT_READ | UC_PROT_WRITE)
        self._writable = [(s.start, s.end) for s in obj.segments if s.writable]
        cpu.hook(UC_HOOK_BLOCK, self._on_block)
        cpu.hook(UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, self._on_access)
        cpu.hook(UC_HOOK_MEM_UNMAPPED | UC_HOOK_MEM_FETCH_PROT, self._on_unmapped)
        cpu.save()
        self.cpu = cpu

    @property
    def learned(self) -> dict[int, int]:
        """The cells of the object's writable data found holding the hook's ICorProfilerInfo pointer, and
        the stand-in object each holds (slow kind)."""
        return dict(self._slots)

    def _stand_in(self) -> bytes:
        """The stand-in runtime's bytes: the vtable (slot i = info_traps + 16 i), then every object's first
        word pointing at it."""
        word, lay = self.isa.word, self.layout
        image = bytearray(RUNTIME_SIZE)
        for i in range(len(info_vtable())):
            image[word * i: word * (i + 1)] = (lay.info_traps + TRAP_STRIDE * i).to_bytes(word, "little")
        for k in range(MAX_OBJECTS):
            at = OBJECTS_AT + OBJECT_SIZE * k
            image[at: at + word] = lay.runtime.to_bytes(word, "little")
        return bytes(image)

    # -- decoding ------------------------------------------------------------------------------------
    def _block(self, address: int, size: int) -> list[_Insn]:
        key = (address, size)
        if key not in self._decoded:
            code = self.cpu.mem_read(address, size)
            self._decoded[key] = [_Insn(i.address, i.size, i.mnemonic, i.op_str)
                                  for i in self._cs.disasm(code, address)]
        return self._decoded[key]

    def _insn_at(self, address: int) -> _Insn | None:
        try:
            code = self.cpu.mem_read(address, 16)
        except UcError:
            return None
        for i in self._cs.disasm(code, address, 1):
            return _Insn(i.address, i.size, i.mnemonic, i.op_str)
        return None

    def _describe(self, insn: _Insn | None) -> str | None:
        if insn is None:
            return None
        text = insn.text
        for word in text.replace(",", " ").split():
            if word.startswith("0x"):
                try:
                    target = int(word, 16)
                except ValueError:
                    continue
                where = self.obj.location(target)
                if not where.startswith("0x"):
                    text = text.replace(word, f"{word} <{where}>", 1)
        return f"{self.obj.location(insn.address)}: {text}"

    def _last_branch(self, run: _HookRun, outside_stubs: bool = True) -> _Insn | None:
        """The last instruction of the latest block run (a branch), skipping PLT stubs if asked."""
        for address, size in reversed(run.blocks):
            if outside_stubs and self.obj.in_stub(address) is not None:
                continue
            insns = self._block(address, size)
            if insns:
                return insns[-1]
        return None

    # -- findings and other ends of a run ------------------------------------------------------------
    def _finding(self, run: _HookRun, rule: str, detail: str, insn: _Insn | None, **kw: Any) -> None:
        clause = HOOK_RULES[rule][0]
        run.findings.append(HookFinding(clause=clause, rule=rule, detail=detail,
                                        instruction=self._describe(insn), **kw))

    def _stop(self) -> None:
        run = self._run
        if run is not None:
            run.stopped = True
        self.cpu.stop()

    def _not_emulated(self, run: _HookRun, reason: str, insn: _Insn | None) -> None:
        run.not_emulated = (reason, self._describe(insn))
        self._stop()

    # -- hooks (what they raise, the run raises: emu.cpu.Cpu.hook) --------------------------------------
    def _on_block(self, address: int, size: int) -> None:
        run = self._run
        assert run is not None
        if run.stopped or address == self.ret:
            return
        prev = self._last_branch(run, outside_stubs=False)
        after_call, run.after_call = run.after_call, False
        if not self.obj.executable_at(address):
            self._finding(run, "memory", f"runs code outside the object's code ({self._region(address)})",
                          self._last_branch(run))
            self._stop()
            return
        if (self.abi.stack_alignment is not None and self.abi.aligned_calls == "every" and prev is not None
                and prev.mnemonic == "call" and not after_call):
            self._check_alignment(run, prev)
        insns = self._block(address, size)
        run.blocks.append((address, size))
        if len(run.blocks) > 64:
            del run.blocks[:32]
        run.count += max(len(insns), 1)
        if run.count > self.budget:
            self._finding(run, "returns", f"no return within {self.budget} instructions",
                          insns[-1] if insns else None)
            self._stop()

    def _check_alignment(self, run: _HookRun, call: _Insn) -> None:
        """FE2-09 at a callee's first instruction, where the ABI aligns the stack at calls."""
        word, align = self.isa.word, self.abi.stack_alignment
        assert align is not None
        sp = self.cpu.sp
        pushed = int.from_bytes(self.cpu.mem_read(sp, word), "little")
        if pushed != call.address + call.size:
            return
        violation = check_call_alignment(self.arch, sp, self.kind)
        if violation is not None:
            self._finding(run, "call-alignment", f"{self.isa.sp.upper()} + {word} = {(sp + word) % align} "
                          f"(mod {align}) at the callee's entry", call)

    def _call_out(self, run: _HookRun, address: int) -> None:
        """A call or jump to another object's symbol: answered as an ordinary call; from a hook JIT code calls
        straight (not the slow kind) also an FE2-12 note (what the symbol's code does is not checked)."""
        name = self.obj.traps[address]
        call = self._last_branch(run)
        if self.abi.stack_alignment is not None and call is not None and call.mnemonic == "call":
            self._check_alignment(run, call)
        if not self.slow:
            self._finding(run, "stays-in-object", f"calls or jumps to {name} outside the object (answered as "
                          "an ordinary call: that it never calls managed code or allocates is not checked)",
                          call, target=name, note=True)
        run.pending = ("trap", address)
        self._stop()

    def _info_call(self, run: _HookRun, slot: int) -> None:
        call = self._last_branch(run)
        if self.abi.stack_alignment is not None and call is not None and call.mnemonic == "call":
            self._check_alignment(run, call)
        run.pending = ("info", slot)
        self._stop()

    def _region(self, address: int, size: int = 1) -> str:
        lay = self.layout
        run = self._run
        if run is not None and run.frame_end <= address < lay.stack + STACK_SIZE:
            return f"the caller's frame at entry SP+{address - run.start.sp:#x}"
        if lay.stack <= address < lay.stack + STACK_SIZE:
            return "the stack"
        if self._traps[0] <= address < self._traps[1]:
            base = address - address % TRAP_STRIDE
            return f"{self.obj.traps.get(base, 'a symbol')} of another object"
        if lay.args <= address < lay.args + ARGS_SIZE:
            if self.slow and lay.args + ELT_OFFSET <= address < lay.args + ELT_OFFSET + ELT_SIZE:
                return "the runtime's COR_PRF_ELT_INFO block"
            return "argumentInfo" if self.kind == "enter2" else "the runtime's argument block"
        if self.slow and lay.runtime <= address < lay.runtime + RUNTIME_SIZE:
            return "the runtime's ICorProfilerInfo"
        if self.obj.image_start <= address < self.obj.image_end:
            return f"the object at {self.obj.location(address)}"
        if lay.ret <= address < lay.ret + PAGE:
            return "the caller's code"
        if lay.tls is not None and lay.tls <= address < lay.tls + TLS_SIZE:
            return "the thread block"
        return f"unmapped memory at {address:#x}"

    def _mapped(self, address: int) -> bool:
        return not self._region(address).startswith("unmapped")

    def _allowed(self, address: int, size: int, write: bool) -> bool:
        run = self._run
        assert run is not None
        lay = self.layout
        if lay.stack <= address and address + size <= run.frame_end:
            return True
        if lay.tls is not None and lay.tls <= address and address + size <= lay.tls + TLS_SIZE:
            return True
        if self._traps[0] <= address and address + size <= self._traps[1]:
            return True  # other objects' data: zeros here
        if not write and lay.args <= address and address + size <= lay.args + ARGS_SIZE:
            return True
        if (not write and self.slow and lay.runtime <= address
                and address + size <= lay.runtime + RUNTIME_SIZE):
            return True
        if write:
            return self.obj.writable_at(address, size)
        return self.obj.readable_at(address, size)

    def _invented(self, address: int) -> bool:
        """Whether the emulator made up the contents at ``address`` (:meth:`_made_up` says what they are)."""
        lay = self.layout
        run = self._run
        return (self.obj.writable_at(address, 1) or self._traps[0] <= address < self._traps[1]
                or lay.args <= address < lay.args + ARGS_SIZE
                or (self.slow and lay.runtime <= address < lay.runtime + RUNTIME_SIZE)
                or (lay.tls is not None and lay.tls <= address < lay.tls + TLS_SIZE)
                or (run is not None and run.frame_end <= address < lay.stack + STACK_SIZE))

    def _made_up(self, address: int) -> str | None:
        """What the emulator made up the contents of, at ``address`` (None: memory whose contents are
        real: the object's code and read-only data, what the hook wrote on its stack)."""
        lay = self.layout
        run = self._run
        if self.obj.writable_at(address, 1):
            return (f"{self.obj.data_location(address)}, as the file has it (a global the profiler sets at "
                    "run time, e.g. in Initialize)")
        if self._traps[0] <= address < self._traps[1]:
            return f"{self._region(address)} (the emulator has none of its data: zeros)"
        if lay.args <= address < lay.args + ARGS_SIZE or (self.slow and lay.runtime <= address
                                                           < lay.runtime + RUNTIME_SIZE):
            return f"{self._region(address)} (runtime data the emulator made up)"
        if lay.tls is not None and lay.tls <= address < lay.tls + TLS_SIZE:
            return "the thread block (zeros here: thread-local storage the emulator did not set up)"
        if run is not None and run.frame_end <= address < lay.stack + STACK_SIZE:
            return f"{self._region(address)} (random here)"
        return None

    def _through(self, value: int, address: int) -> int | None:
        """How far past the pointer ``value`` the faulting ``address`` is, if it is within :data:`NEAR`
        (unicorn reports x64 addresses in their 48 bits: a non-canonical pointer's upper bits are gone)."""
        mask = self.isa.mask if self.isa.bits == 32 else (1 << 48) - 1
        off = (address - value) & mask
        return off if off < NEAR else None

    def _unprovided(self, run: _HookRun, address: int, insn: _Insn | None) -> str | None:
        """Why an access to the unmapped ``address`` is the emulator's doing, not the hook's (None: the hook
        made the address up itself). No per-run value is in the text, so runs aggregate."""
        lay = self.layout
        if insn is not None and _SEGMENT.search(insn.op_str):
            return "through fs:/gs: thread-local storage the emulator did not set up"
        for value, source in reversed(run.loads):
            off = self._through(value, address)
            if off is not None:
                return f"through the pointer read from {self._made_up(source)}{f', +{off:#x}' if off else ''}"
        if address < NEAR:
            return (f"at {address:#x}, through a NULL pointer the emulator gave (a global zero in the file, "
                    "a call out's return value, a zeroed out-parameter)")
        for name, value in run.drawn:
            off = self._through(value, address)
            if off is not None:
                return (f"through {name}{f'+{off:#x}' if off else ''}, which the emulator drew at random "
                        "(the real one may point at real data)")
        if lay.stack - 16 * STACK_SIZE <= address < lay.stack:
            return f"below the emulator's {STACK_SIZE // 1024} KiB stack (a frame larger than it provides)"
        return None

    def _stray(self, run: _HookRun, address: int, size: int) -> str:
        """Where an access the hook made up went, naming a register a call clobbered when it came from one."""
        for name, value in run.clobbered:
            off = self._through(value, address)
            if off is not None:
                return (f"through {name}{f'+{off:#x}' if off else ''} (a register a call may change: "
                        "garbage after the call)")
        for name, value in run.garbage:
            off = self._through(value, address)
            if off is not None:
                return f"through {name}{f'+{off:#x}' if off else ''} (it holds nothing for the hook)"
        region = self._region(address, size)
        # an unmapped address the hook made up: the finding's target, not its detail (runs aggregate)
        return "in unmapped memory" if region.startswith("unmapped") else f"in {region}"

    def _access(self, run: _HookRun, address: int, size: int, write: bool, insn: _Insn | None,
                what: str) -> bool:
        """Judge one access (the hook's, or the runtime's on its behalf): True when it may go on; else the
        run ended with a finding (FE2-06) or as not emulated."""
        if self._allowed(address, size, write):
            return True
        kind = "write" if write else "read"
        if self._mapped(address):
            self._finding(run, "memory", f"{what}: {kind} of {size} byte(s) in {self._region(address, size)}",
                          insn)
            self._stop()
            return False
        why = self._unprovided(run, address, insn)
        if why is not None:
            self._not_emulated(run, f"{what}: {kind} of {size} byte(s) {why}", insn)
        else:
            stray = self._stray(run, address, size)
            self._finding(run, "memory", f"{what}: {kind} of {size} byte(s) {stray}", insn,
                          target=f"{address:#x}")
            self._stop()
        return False

    def _note_load(self, run: _HookRun, address: int) -> None:
        """Remember a pointer-sized load from memory whose contents the emulator made up."""
        lay, word = self.layout, self.isa.word
        if self.slow and lay.runtime + OBJECTS_AT <= address < lay.runtime + RUNTIME_SIZE:
            if (address - lay.runtime - OBJECTS_AT) % OBJECT_SIZE == 0:
                run.used.update(cell for cell, obj in self._slots.items() if obj == address)
        if not self._invented(address):
            return
        value = int.from_bytes(self.cpu.mem_read(address, word), "little")
        run.loads.append((value, address))
        if len(run.loads) > 64:
            del run.loads[:32]

    def _on_access(self, access: int, address: int, size: int, _value: int) -> None:
        run = self._run
        assert run is not None
        if run.stopped:
            return
        write = access == UC_MEM_WRITE
        if not write and size == self.isa.word:
            self._note_load(run, address)
        if not self._allowed(address, size, write):
            kind = "write" if write else "read"
            self._finding(run, "memory", f"{kind} of {size} byte(s) in {self._region(address, size)}",
                          self._insn_at(self.cpu.ip))
            self._stop()

    def _learn(self, run: _HookRun, address: int, insn: _Insn | None) -> bool:
        """Slow kind: a pointer-sized read at ``address`` faulted; if the latest load that gave exactly that
        value came from a cell of the object's writable data not tried yet, try it as the hook's
        ICorProfilerInfo pointer (the run is replayed with a stand-in object there)."""
        if not self.slow or self._next_object >= MAX_OBJECTS:
            return False
        for value, source in reversed(run.loads):
            if self._through(value, address) != 0:
                continue
            if source in self._slots or source in self._rejected or not self.obj.writable_at(source, 1):
                continue
            run.learn = source
            why = self._unprovided(run, address, insn)
            run.not_emulated = (f"read of {self.isa.word} byte(s) {why}", self._describe(insn))
            self._stop()
            return True
        return False

    def _on_unmapped(self, access: int, address: int, size: int, _value: int) -> bool:
        run = self._run
        assert run is not None
        if run.stopped:
            return False
        lay = self.layout
        if access in (UC_MEM_FETCH_UNMAPPED, UC_MEM_FETCH_PROT):
            slot, off = divmod(address - lay.info_traps, TRAP_STRIDE)
            if address in self.obj.traps:
                self._call_out(run, address)
            elif self.slow and not off and 0 <= slot < len(info_vtable()):
                self._info_call(run, slot)
            else:
                self._jump(run, address)
            return False
        write = access == UC_MEM_WRITE_UNMAPPED
        insn = self._insn_at(self.cpu.ip)
        if not write and size == self.isa.word and self._learn(run, address, insn):
            return False
        kind = "write" if write else "read"
        why = self._unprovided(run, address, insn)
        if why is not None:
            self._not_emulated(run, f"{kind} of {size} byte(s) {why}", insn)
        else:
            self._finding(run, "memory", f"{kind} of {size} byte(s) {self._stray(run, address, size)}", insn,
                          target=f"{address:#x}")
            self._stop()
        return False

    def _jump(self, run: _HookRun, address: int) -> None:
        insn = self._last_branch(run)
        why = None if self._mapped(address) else self._unprovided(run, address, insn)
        if why is not None:
            self._not_emulated(run, f"jumps {why}", insn)
            return
        where = self._stray(run, address, 1)
        where = self._region(address) if where.startswith("in ") else where  # a made-up target: it names it
        self._finding(run, "memory", f"jumps to {where}", insn, target=f"{address:#x}")
        self._stop()

    def _on_code(self, address: int, _size: int) -> None:
        """Attribution runs only: which instruction last changed each watched register."""
        run = self._run
        assert run is not None
        self._note_changes(run)
        run.prev_insn = self._insn_at(address)

    def _note_changes(self, run: _HookRun) -> None:
        for name, (kept, last, who) in run.watch.items():
            now = kept.read(self.cpu)
            if now != last:
                run.watch[name] = (kept, now, run.prev_insn if run.prev_insn is not None else who)

    # -- calls the slow kind answers -------------------------------------------------------------------
    def _arguments(self, count: int) -> list[int]:
        """The first ``count`` argument slots of an ordinary call, at the callee's first instruction (System
        V AMD64: RDI, RSI, RDX, RCX, R8, R9, then the stack above the return address; i386: the stack)."""
        word, sp = self.isa.word, self.cpu.sp
        regs = ("rdi", "rsi", "rdx", "rcx", "r8", "r9") if self.arch == "x64" else ()
        out = []
        for i in range(count):
            if i < len(regs):
                out.append(self.cpu[regs[i]])
            else:
                at = sp + word * (1 + i - len(regs))
                out.append(int.from_bytes(self.cpu.mem_read(at, word), "little"))
        return out

    def _elt_frame(self, run: _HookRun) -> EltFrame:
        lay, word = self.layout, self.isa.word
        args = run.start.args
        n = int.from_bytes(args[0:4], "little")
        return EltFrame(handle=lay.args + ELT_OFFSET, frame=lay.args + FRAME_OFFSET,
                        argument_info=args[: 8 + 2 * word * n], retval=(lay.args + RETVAL_OFFSET, 8))

    def _answer(self, run: _HookRun) -> int | None:
        """Answer the pending call out of the hook and return from it: the address to go on at, or None
        when the run ended (a finding, not emulated)."""
        assert run.pending is not None
        what, at = run.pending
        run.pending = None
        run.stopped = False
        cpu, isa = self.cpu, self.isa
        call = self._last_branch(run)
        value = 0
        if what == "info":
            method = info_vtable()[at]
            why = unanswerable(method, self.arch)
            if why is not None:
                self._not_emulated(run, f"calls ICorProfilerInfo::{method.name}: {why}", call)
                return None
            words = argument_words(method, self.arch)
            assert words is not None
            raw = self._arguments(1 + (words[-1] + 2 if words else 0))
            this, rest = raw[0], raw[1:]
            args = []
            for p, w in zip(method.params, words, strict=True):
                size = type_size(p.type, self.arch) or isa.word
                v = rest[w] if self.arch == "x64" or size <= 4 else rest[w] | (rest[w + 1] << 32)
                args.append(v & ((1 << (8 * size)) - 1) if size < 8 else v)
            got = answer(method, this, args, self.arch, self._elt_frame(run), _RunMemory(self, run, call))
            if got is None:
                return None
            value = got
            name = f"ICorProfilerInfo::{method.name}"
        else:
            name = self.obj.traps[at]
        sp = cpu.sp
        back = int.from_bytes(cpu.mem_read(sp, isa.word), "little")
        returned = isa.returns if what == "trap" else isa.returns[:1]  # 0 in a whole pair; an HRESULT
        for reg in isa.caller_saved:
            if reg not in returned:
                v = run.rng.getrandbits(isa.bits)
                cpu[reg] = v
                run.clobbered.append((f"{reg.upper()} as {name} left it", v))
        for i in range(isa.xmm):
            cpu[f"xmm{i}"] = 0 if what == "trap" and i < 2 else run.rng.getrandbits(128)
        flags = cpu[isa.flags] & ~(EFLAGS_STATUS | EFLAGS_DF)
        cpu[isa.flags] = flags | (run.rng.getrandbits(isa.bits) & EFLAGS_STATUS)
        for reg in returned:
            cpu[reg] = value & isa.mask
        cpu[isa.sp] = sp + isa.word
        run.after_call = True
        return back

    # -- one run -------------------------------------------------------------------------------------
    def draw(self, rng: random.Random) -> _Start:
        """One random start state (see the module's docstring)."""
        abi, isa, lay = self.abi, self.isa, self.layout
        regs: dict[str, int] = {}
        for name in isa.general:
            regs[name] = rng.getrandbits(isa.bits)
        flags = 0x2
        for bit in _STATUS_FLAGS:
            flags |= bit if rng.getrandbits(1) else 0
        if abi.fixed(isa.flags, EFLAGS_DF) is None and rng.getrandbits(1):
            flags |= EFLAGS_DF  # no table leaves DF free today: both ABIs have it clear at calls
        regs[isa.flags] = flags
        # x87: masked exceptions (an unmasked one would fault a correct hook too), random precision and
        # rounding; TOP, condition codes and sticky flags random; ST(0)..ST(k-1) in use unless the ABI
        # has the x87 stack empty at entry (System V)
        regs["fpu_control"] = 0x7F | (rng.choice((0, 2, 3)) << 8) | (rng.randrange(4) << 10)
        top = rng.randrange(8)
        status = (top << 11) | rng.getrandbits(6) | (rng.getrandbits(3) << 8) | (rng.getrandbits(1) << 14)
        regs["fpu_status"] = status
        used = rng.randrange(9) if abi.fixed("fpu_tag") is None else 0
        tag = X87_ALL_EMPTY
        for i in range(used):
            tag &= ~(3 << (2 * ((top + i) % 8)))
        regs["fpu_tag"] = tag
        for i in range(X87_REGISTERS):
            mant = rng.getrandbits(64) | (1 << 63)
            exp = rng.randrange(1, 0x7FFF) | (rng.getrandbits(1) << 15)
            regs[f"st{i}"] = (exp << 64) | mant
        regs["mxcsr"] = (0x1F80 | rng.getrandbits(6) | (rng.getrandbits(1) << 6)
                         | (rng.randrange(4) << 13) | (rng.getrandbits(1) << 15))
        for i in range(isa.xmm):
            regs[f"xmm{i}"] = rng.getrandbits(128)
        # the frame: the kind's parameters where the ABI puts them, below the caller's frame; the pointers
        # the runtime passes point at blocks the checker provides, the IDs are random (odd: never NULL)
        args = self._argument_info(rng)
        given = {"argumentInfo": lay.args, "eltInfo": lay.args + ELT_OFFSET}
        params = tuple(given[name] if name in given else rng.getrandbits(isa.bits) | (1 if i == 0 else 0)
                       for i, name in enumerate(abi.parameters))
        top_of_frame = lay.stack + STACK_SIZE - CALLER_FRAME
        align = abi.stack_alignment
        sp = top_of_frame - abi.frame_bytes - (align or isa.word) * rng.randrange(16)
        if align is not None:
            sp = (sp & ~(align - 1)) - isa.word  # the call pushed the return address onto an aligned stack
        words = {0: self.ret}
        for value, where in zip(params, abi.arguments, strict=True):
            if isinstance(where, OnStack):
                words[where.offset] = value
            else:
                regs[where.register] = value
        if lay.tls is not None:
            regs[lay.tls_register] = lay.tls + TLS_SIZE // 2
        regs[isa.sp] = sp
        stack = bytearray(rng.randbytes(STACK_SIZE))
        off = sp - lay.stack
        for offset, value in words.items():
            stack[off + offset: off + offset + isa.word] = value.to_bytes(isa.word, "little")
        return _Start(registers=regs, stack=bytes(stack), args=args, params=params, sp=sp,
                      clobber_seed=rng.getrandbits(64))

    def _argument_info(self, rng: random.Random) -> bytes:
        """COR_PRF_FUNCTION_ARGUMENT_INFO {numRanges, totalArgumentSize, ranges[] {startAddress, length}}
        followed by the arguments' bytes, all in the read-only argument page; the slow kind's
        COR_PRF_ELT_INFO block (opaque to the hook) zeros."""
        word = self.isa.word
        block = bytearray(rng.randbytes(ARGS_SIZE))
        n = rng.randrange(5)
        lengths = [rng.choice((1, 2, 4, 8, 16)) for _ in range(n)]
        block[0:8] = n.to_bytes(4, "little") + sum(lengths).to_bytes(4, "little")
        for i, length in enumerate(lengths):
            start = self.layout.args + 0x200 + 0x20 * i
            at = 8 + 2 * word * i  # COR_PRF_FUNCTION_ARGUMENT_RANGE: UINT_PTR, ULONG, padded to two words
            block[at: at + 2 * word] = (start.to_bytes(word, "little") + length.to_bytes(4, "little")
                                        + bytes(word - 4))
        if self.slow:
            block[ELT_OFFSET: ELT_OFFSET + ELT_SIZE] = bytes(ELT_SIZE)
        return bytes(block)

    def _load(self, start: _Start) -> _HookRun:
        cpu, lay, word = self.cpu, self.layout, self.isa.word
        cpu.restore()
        for lo, hi in self._writable:
            page_lo = lo & ~(PAGE - 1)
            page_hi = (hi + PAGE - 1) & ~(PAGE - 1)
            off = page_lo - self.obj.image_start
            cpu.mem_write(page_lo, bytes(self.obj.image[off: off + page_hi - page_lo]))
        for cell, obj in self._slots.items():
            cpu.mem_write(cell, obj.to_bytes(word, "little"))  # the profiler's Initialize ran
        if self._traps[1]:
            cpu.mem_write(self._traps[0], bytes(self._traps[1] - self._traps[0]))
        if self.slow:
            cpu.mem_write(lay.runtime, self._runtime_image)
        cpu.mem_write(lay.stack, start.stack)
        cpu.mem_write(lay.args, start.args)
        if lay.tls is not None:
            cpu.mem_write(lay.tls, bytes(TLS_SIZE))
        for name, value in start.registers.items():
            if name != "fpu_tag":
                cpu[name] = value
        cpu["fpu_tag"] = start.registers["fpu_tag"]  # after the contents
        run = _HookRun(start=start, frame_end=start.sp + self.abi.frame_bytes,
                       rng=random.Random(start.clobber_seed))
        run.drawn, run.garbage = self._drawn(start)
        return run

    def _drawn(self, start: _Start) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """The entry values the emulator drew at random, by name: (those a hook may go through, those that
        hold nothing for it). The parameters (but the pointers to the checker's blocks) are the first: the
        runtime's would point at real data (a FunctionID at the runtime's, clientData at the profiler's).
        The other general registers are the first too for the naked kinds, called straight from JIT code,
        which leaves its own values there (x64 Unix: RSI the caller's SP); the second for ``slow``, called
        from the runtime's C code: garbage to the hook."""
        mine = {self.layout.args, self.layout.args + ELT_OFFSET}
        params = [(name, value) for name, value in zip(self.abi.parameters, start.params, strict=True)
                  if value not in mine]
        held = {w.register for w in self.abi.arguments if not isinstance(w, OnStack)}
        others = [(f"{reg.upper()} at entry", start.registers[reg]) for reg in self.isa.general
                  if reg not in held and reg != self.isa.sp]
        return (params, others) if self.slow else (params + others, [])

    def _state(self) -> MachineState:
        """The CPU's registers as the model's state, with the stack words the ABI's frame holds."""
        cpu, isa = self.cpu, self.isa
        sp = cpu.sp
        slots = self.abi.frame_bytes // isa.word  # the return address, the parameters on the stack
        stack = {sp + isa.word * i: int.from_bytes(self._try_read(sp + isa.word * i, isa.word), "little")
                 for i in range(slots)}
        return MachineState(
            arch=self.arch, registers={name: cpu[name] for name in isa.registers},
            st=tuple(cpu[f"st{i}"] for i in range(X87_REGISTERS)), fpu_control=cpu["fpu_control"],
            fpu_status=cpu["fpu_status"], fpu_tag=cpu["fpu_tag"], mxcsr=cpu["mxcsr"],
            xmm=tuple(cpu[f"xmm{i}"] for i in range(isa.xmm)), stack=stack,
        )  # fmt: skip

    def _try_read(self, address: int, size: int) -> bytes:
        try:
            return self.cpu.mem_read(address, size)
        except UcError:
            return bytes(size)

    def _emulate(self, run: _HookRun) -> None:
        self._run = run
        begin: int | None = self.entry
        try:
            while begin is not None:
                try:
                    self.cpu.start(begin, self.ret)
                except UcError:
                    if not run.stopped:
                        pc = self.cpu.ip
                        self._finding(run, "memory", f"the CPU faulted at {self.obj.location(pc)}",
                                      self._insn_at(pc))
                        run.stopped = True
                begin = self._answer(run) if run.pending is not None else None
        finally:
            self._run = None

    def run_once(self, start: _Start) -> _Outcome:
        """One run (replayed while it teaches the checker where the hook's ICorProfilerInfo lives)."""
        trial: int | None = None
        for _ in range(MAX_REPLAYS):
            run = self._load(start)
            before = self._state()
            self._check_entry(before, start)
            self._emulate(run)
            if trial is not None and trial not in run.used:
                del self._slots[trial]  # not used as a COM object: never again, and the run as it was
                self._rejected.add(trial)
                trial = None
                continue
            trial = None
            if run.learn is not None:
                trial = run.learn
                self._slots[trial] = self.layout.runtime + OBJECTS_AT + OBJECT_SIZE * self._next_object
                self._next_object += 1
                continue
            break
        if run.stopped:
            return _Outcome(run.findings, run.count, False, run.not_emulated)
        after = self._state()
        changes = hook_register_changes(before, after, self.kind)
        sp_name, want = self.isa.sp.upper(), self.abi.return_delta
        ret_insn = self._last_branch(run, outside_stubs=False)
        for v in check_hook_abi(before, after, kind=self.kind):
            if v.clause != "FE2-09":
                continue
            if v.message.startswith(sp_name):
                delta = (after.sp - before.sp) & self.isa.mask
                self._finding(run, "stack-restored", f"{sp_name} raised by {delta} bytes, expected {want}",
                              ret_insn, register_name=sp_name, before=before.sp, after=after.sp)
            else:
                self._finding(run, "returns-to-caller", v.message, ret_insn)
        findings = list(run.findings)
        if changes:
            findings.extend(self._attribute(start, changes))
        return _Outcome(findings, run.count, True, None)

    def _check_entry(self, before: MachineState, start: _Start) -> None:
        bad = check_hook_entry(before, *start.params, kind=self.kind)
        if bad:
            raise EmuError(f"hook checker set-up breaks {bad[0]}")  # the checker's own bug

    def _attribute(self, start: _Start, changes: list[RegisterChange]) -> list[HookFinding]:
        """Run ``start`` again, single-stepping, to find the last instruction that changed each register."""
        run = self._load(start)
        for c in changes:
            kept = self._kept[c.name]
            run.watch[c.name] = (kept, kept.read(self.cpu), None)
        handle = self.cpu.hook(UC_HOOK_CODE, self._on_code)
        self.cpu.flush()  # code translated without the code hook would not call it
        try:
            self._emulate(run)
        finally:
            self.cpu.unhook(handle)
            self.cpu.flush()
        self._note_changes(run)
        out = []
        for c in changes:
            who = run.watch[c.name][2]
            detail = (f"{c.name} not preserved (the runtime does not rely on it)" if c.note
                      else f"{c.name} not preserved")
            out.append(HookFinding(clause=c.clause, rule="register-preserved", detail=detail,
                                   register_name=c.name, before=c.before, after=c.after,
                                   instruction=self._describe(who), note=c.note))
        return out


def check_hook(
    path: Path, symbol: str, arch: Arch, *, kind: str = "enter2", runs: int = DEFAULT_RUNS, seed: int = 0,
    budget: int = DEFAULT_BUDGET,
) -> HookReport:
    """Check ``symbol`` of the shared object ``path``, a hook of ``kind`` (enter2, fast or slow), over
    ``runs`` random states drawn from ``seed``.

    Input errors (no such file, not an ELF object of ``arch``, no such symbol, a symbol not defined in the
    object or not in its code, an unknown kind) raise :class:`HookInputError`; every rule the hook breaks
    is a finding of the report (an endless loop and a jump to an address the hook made up included), what
    the runtime does not rely on a note, and a run that reached what the emulator never provided is
    counted as not emulated with its reason."""
    if arch not in _LAYOUTS:
        raise HookInputError(f"unknown architecture {arch!r}: expected x86 or x64")
    try:
        table = hook_abi(arch, kind)
    except InvalidInput as exc:
        raise HookInputError(str(exc)) from None
    if runs < 1:
        raise HookInputError(f"runs={runs}: at least one run is needed")
    if budget < 1:
        raise HookInputError(f"budget={budget}: at least one instruction is needed")
    obj = load_object(path, arch, _LAYOUTS[arch].base)
    entry = find_symbol(obj, symbol)
    checker = HookChecker(obj, entry, symbol, budget, table.kind)
    rng = random.Random(seed)
    outcomes = [checker.run_once(checker.draw(rng)) for _ in range(runs)]
    per_run = [[f for f in o.findings if not f.note] for o in outcomes]
    notes = [[f for f in o.findings if f.note] for o in outcomes]
    counts = [o.count for o in outcomes]
    return HookReport(file=str(path), symbol=symbol, arch=arch, kind=table.kind, seed=seed, runs=runs,
                      budget=budget, returned=sum(o.returned for o in outcomes),
                      not_emulated=sum(o.not_emulated is not None for o in outcomes),
                      instructions_min=min(counts), instructions_max=max(counts),
                      unapplied_relocations=obj.unapplied, findings=aggregate(per_run),
                      notes=aggregate(notes),
                      not_emulated_reasons=aggregate_reasons([o.not_emulated for o in outcomes]),
                      info_pointers=tuple(obj.data_location(cell) for cell in sorted(checker.learned)))
