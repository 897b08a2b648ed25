"""Run a FunctionEnter2 hook under unicorn from many randomised states and report every rule it breaks.

One check = one unicorn CPU (``UC_MODE_32`` for x86, ``UC_MODE_64`` for x64) over the loaded object, reused
by every run (translated code stays cached); each run starts from the CPU context saved at creation, the
object's pristine writable pages, a fresh stack and argument block, and a state drawn from
``random.Random(seed)`` (never the clock): general registers, EFLAGS, the x87 stack (contents, TOP, which
registers are in use), control and status words, MXCSR and XMM0-7 (x86) / XMM0-15 (x64), and the call frame
of the four documented parameters (x86: __stdcall on the stack below the return address; x64: System V
RDI, RSI, RDX, RCX, RSP + 8 a multiple of 16). The entry state is checked against the model (FE2-06,
:func:`check_hook_entry`) before the hook runs: a failure there is the
checker's own bug and raises.

What each run checks (rules and clauses from :data:`clr_model.function_enter.HOOK_RULES`):

* after the return (the return address reached, ``emu_start``'s ``until``): the registers the rules say
  must come back (x86 FE2-07/08, x64 FE2-08: :func:`hook_register_changes` over ``ABI[arch].kept``)
  and the stack pointer and return address (FE2-09). A changed register is then attributed to the last
  instruction that changed it by running the same state again, single-stepping with a code hook that
  watches only the changed registers (cheap runs stay cheap);
* while it runs (a block hook and memory hooks): a block outside the object's executable segments, a call
  or jump to a trap address (a symbol of another object: FE2-12), a fetch from an unmapped address or a data
  access outside the hook's stack frame, what argumentInfo points to, its thread block (x64 FS) and the
  object's own data (FE2-06; writes to read-only segments included), a misaligned stack at the entry of a
  callee (x64, FE2-09), and the instruction budget (FE2-10: a hook that does not return within it never
  does, for the checker).

A run that stops on a finding is not checked at its return (there is none). An exception inside a unicorn
hook is stored, emulation stopped, and raised after ``emu_start`` returns (as :mod:`emu.machine` does).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import capstone  # type: ignore[import-untyped]
import unicorn as _unicorn
from unicorn import (
    UC_ARCH_X86,
    UC_HOOK_BLOCK,
    UC_HOOK_CODE,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_UNMAPPED,
    UC_HOOK_MEM_WRITE,
    UC_MEM_FETCH_UNMAPPED,
    UC_MEM_WRITE,
    UC_MEM_WRITE_UNMAPPED,
    UC_MODE_32,
    UC_MODE_64,
    UC_PROT_ALL,
)
from unicorn import x86_const as X

from clr_model.abi import ABI, EFLAGS_DF, EFLAGS_PRESERVED, MXCSR_CONTROL, X87_ALL_EMPTY, MachineState
from clr_model.function_enter import (
    HOOK_RULES,
    RegisterChange,
    check_call_alignment,
    check_hook_abi,
    check_hook_entry,
    hook_register_changes,
)
from emu.errors import EmuError
from emu.hookcheck.loader import PAGE, Arch, HookInputError, LoadedObject, find_symbol, load_object
from emu.hookcheck.report import HookFinding, HookReport, aggregate

__all__ = ["DEFAULT_BUDGET", "DEFAULT_RUNS", "check_hook"]

DEFAULT_RUNS = 100
#: instructions one run may execute before it counts as never returning (FE2-10)
DEFAULT_BUDGET = 10_000

_UC: Any = _unicorn
UcError: type[Exception] = _UC.UcError


class HookCpu(Protocol):
    """The part of unicorn's ``Uc`` the checker uses (the binding's methods are not annotated)."""

    def emu_start(self, begin: int, until: int) -> None: ...
    def emu_stop(self) -> None: ...
    def mem_map(self, address: int, size: int, perms: int) -> None: ...
    def mem_write(self, address: int, data: bytes) -> None: ...
    def mem_read(self, address: int, size: int) -> bytearray: ...
    def reg_write(self, reg: int, value: object) -> None: ...
    def reg_read(self, reg: int) -> Any: ...
    def hook_add(self, htype: int, callback: Callable[..., Any]) -> int: ...
    def hook_del(self, handle: int) -> None: ...
    def ctl_flush_tb(self) -> None: ...
    def context_save(self) -> object: ...
    def context_restore(self, context: object) -> None: ...


@dataclass(frozen=True)
class Layout:
    """Where a check puts things (none overlaps a loaded object at ``base``)."""

    base: int
    stack: int  # stack region [stack, stack + STACK_SIZE)
    args: int  # argumentInfo block (read-only for the hook)
    ret: int  # the caller's page: the return address is ret + 0x10
    tls: int  # x64 thread block (FS base = tls + TLS_SIZE // 2)


_LAYOUTS: dict[Arch, Layout] = {
    "x86": Layout(base=0x1000_0000, stack=0x3000_0000, args=0x4000_0000, ret=0x6000_0000, tls=0x5000_0000),
    "x64": Layout(base=0x7F3A_0000_0000, stack=0x7FFE_0000_0000, args=0x7F55_0000_0000, ret=0x7F66_0000_0000,
                  tls=0x7F44_0000_0000),
}
STACK_SIZE = 0x10000
#: bytes of the caller's frame above the hook's parameters (mapped, so an access there is reported, not fatal)
CALLER_FRAME = 0x100
ARGS_SIZE = 0x1000
TLS_SIZE = 0x2000

_X86_GPR = {"eax": X.UC_X86_REG_EAX, "ebx": X.UC_X86_REG_EBX, "ecx": X.UC_X86_REG_ECX,
            "edx": X.UC_X86_REG_EDX, "esi": X.UC_X86_REG_ESI, "edi": X.UC_X86_REG_EDI,
            "ebp": X.UC_X86_REG_EBP, "esp": X.UC_X86_REG_ESP}
_X64_GPR = {"rax": X.UC_X86_REG_RAX, "rbx": X.UC_X86_REG_RBX, "rcx": X.UC_X86_REG_RCX,
            "rdx": X.UC_X86_REG_RDX, "rsi": X.UC_X86_REG_RSI, "rdi": X.UC_X86_REG_RDI,
            "rbp": X.UC_X86_REG_RBP, "rsp": X.UC_X86_REG_RSP, "r8": X.UC_X86_REG_R8, "r9": X.UC_X86_REG_R9,
            "r10": X.UC_X86_REG_R10, "r11": X.UC_X86_REG_R11, "r12": X.UC_X86_REG_R12,
            "r13": X.UC_X86_REG_R13, "r14": X.UC_X86_REG_R14, "r15": X.UC_X86_REG_R15}
_FP = [X.UC_X86_REG_FP0 + i for i in range(8)]
_XMM = [X.UC_X86_REG_XMM0 + i for i in range(8)] + [X.UC_X86_REG_XMM8 + i for i in range(8)]
#: EFLAGS bits the state draws: CF PF AF ZF SF OF (DF separately)
_STATUS_FLAGS = (0x1, 0x4, 0x10, 0x40, 0x80, 0x800)


def _fp_value(raw: Any) -> int:
    mant, exp = raw
    return (int(exp) << 64) | int(mant)


def _watch_readers(arch: Arch) -> dict[str, Callable[[HookCpu], int]]:
    """Register name (as :class:`RegisterChange` names it) -> how to read it from the CPU."""
    def plain(reg: int) -> Callable[[HookCpu], int]:
        return lambda uc: int(uc.reg_read(reg))

    def fp(reg: int) -> Callable[[HookCpu], int]:
        return lambda uc: _fp_value(uc.reg_read(reg))

    r: dict[str, Callable[[HookCpu], int]] = {}
    if arch == "x86":
        for name, reg in _X86_GPR.items():
            r[name.upper()] = plain(reg)
        r["EFLAGS (status/DF)"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_EFLAGS)) & EFLAGS_PRESERVED
        r["MXCSR"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_MXCSR))
        r["x87 status word"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_FPSW))
        xmm = _XMM[:8]
    else:
        for name, reg in _X64_GPR.items():
            r[name.upper()] = plain(reg)
        r["MXCSR control"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_MXCSR)) & MXCSR_CONTROL
        r["DF"] = lambda uc: 1 if int(uc.reg_read(X.UC_X86_REG_EFLAGS)) & EFLAGS_DF else 0
        xmm = _XMM
    r["x87 control word"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_FPCW))
    r["x87 tag word"] = lambda uc: int(uc.reg_read(X.UC_X86_REG_FPTAG))
    for i, reg in enumerate(_FP):
        r[f"x87 R{i}"] = fp(reg)
    for i, reg in enumerate(xmm):
        r[f"XMM{i}"] = plain(reg)
    return r


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

    registers: dict[int, Any]
    stack: bytes
    args: bytes
    params: tuple[int, int, int, int]
    sp: int


@dataclass
class _HookRun:
    start: _Start
    frame_end: int
    count: int = 0
    blocks: list[tuple[int, int]] = field(default_factory=list)
    findings: list[HookFinding] = field(default_factory=list)
    error: BaseException | None = None
    stopped: bool = False
    #: attribution: register name -> (reader, last value, instruction that last changed it)
    watch: dict[str, tuple[Callable[[HookCpu], int], int, _Insn | None]] = field(default_factory=dict)
    prev_insn: _Insn | None = None


class HookChecker:
    """The CPU, the object and the hooks of one check (one hook symbol, one architecture)."""

    def __init__(self, obj: LoadedObject, entry: int, symbol: str, budget: int) -> None:
        self.obj = obj
        self.arch: Arch = obj.arch
        self.entry = entry
        self.symbol = symbol
        self.budget = budget
        self.layout = _LAYOUTS[obj.arch]
        self.ret = self.layout.ret + 0x10
        self.word = 4 if obj.arch == "x86" else 8
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_32 if self.arch == "x86"
                               else capstone.CS_MODE_64)
        self._decoded: dict[tuple[int, int], list[_Insn]] = {}
        self._readers = _watch_readers(self.arch)
        self._run: _HookRun | None = None
        uc = cast(HookCpu, _UC.Uc(UC_ARCH_X86, UC_MODE_32 if self.arch == "x86" else UC_MODE_64))
        uc.mem_map(obj.image_start, len(obj.image), UC_PROT_ALL)
        uc.mem_write(obj.image_start, bytes(obj.image))
        uc.mem_map(self.layout.stack, STACK_SIZE, UC_PROT_ALL)
        uc.mem_map(self.layout.args, ARGS_SIZE, UC_PROT_ALL)
        uc.mem_map(self.layout.ret, PAGE, UC_PROT_ALL)
        uc.mem_write(self.layout.ret, b"\xf4" * PAGE)  # hlt: the caller's code is never run
        if self.arch == "x64":
            uc.mem_map(self.layout.tls, TLS_SIZE, UC_PROT_ALL)
        self._writable = [(s.start, s.end) for s in obj.segments if s.writable]
        uc.hook_add(UC_HOOK_BLOCK, self._on_block)
        uc.hook_add(UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, self._on_access)
        uc.hook_add(UC_HOOK_MEM_UNMAPPED, self._on_unmapped)
        self._pristine = uc.context_save()
        self.uc = uc

    # -- decoding ------------------------------------------------------------------------------------
    def _block(self, address: int, size: int) -> list[_Insn]:
        key = (address, size)
        if key not in self._decoded:
            code = bytes(self.uc.mem_read(address, size))
            self._decoded[key] = [_Insn(i.address, i.size, i.mnemonic, i.op_str)
                                  for i in self._cs.disasm(code, address)]
        return self._decoded[key]

    def _insn_at(self, address: int) -> _Insn | None:
        try:
            code = bytes(self.uc.mem_read(address, 16))
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

    # -- findings ------------------------------------------------------------------------------------
    def _finding(self, run: _HookRun, rule: str, detail: str, insn: _Insn | None, **kw: Any) -> None:
        clause = HOOK_RULES[rule][0]
        run.findings.append(HookFinding(clause=clause, rule=rule, detail=detail,
                                        instruction=self._describe(insn), **kw))

    def _stop(self, uc: HookCpu) -> None:
        run = self._run
        if run is not None:
            run.stopped = True
        uc.emu_stop()

    def _fail(self, uc: HookCpu, exc: BaseException) -> None:
        run = self._run
        if run is not None and run.error is None:
            run.error = exc
        self._stop(uc)

    # -- hooks ---------------------------------------------------------------------------------------
    def _on_block(self, uc: HookCpu, address: int, size: int, _data: object) -> None:
        run = self._run
        assert run is not None
        try:
            if run.stopped or address == self.ret:
                return
            prev = self._last_branch(run, outside_stubs=False)
            if address in self.obj.traps:  # reached only if the trap page were mapped; kept for safety
                self._call_out(uc, run, address)
                return
            if not self.obj.executable_at(address):
                self._finding(run, "memory", f"runs code outside the object's code ({self._region(address)})",
                              self._last_branch(run))
                self._stop(uc)
                return
            if self.arch == "x64" and prev is not None and prev.mnemonic == "call":
                self._check_alignment(uc, run, prev)
            insns = self._block(address, size)
            run.blocks.append((address, size))
            if len(run.blocks) > 64:
                del run.blocks[:32]
            run.count += max(len(insns), 1)
            if run.count > self.budget:
                self._finding(run, "returns", f"no return within {self.budget} instructions",
                              insns[-1] if insns else None)
                self._stop(uc)
        except BaseException as exc:
            self._fail(uc, exc)

    def _check_alignment(self, uc: HookCpu, run: _HookRun, call: _Insn) -> None:
        rsp = int(uc.reg_read(X.UC_X86_REG_RSP))
        pushed = int.from_bytes(bytes(uc.mem_read(rsp, 8)), "little")
        if pushed != call.address + call.size:
            return
        violation = check_call_alignment("x64", rsp)
        if violation is not None:
            self._finding(run, "call-alignment",
                          f"RSP + 8 = {(rsp + 8) % 16} (mod 16) at the callee's entry", call)

    def _call_out(self, uc: HookCpu, run: _HookRun, address: int) -> None:
        name = self.obj.traps[address]
        if self.arch == "x64":
            call = self._last_branch(run)
            if call is not None and call.mnemonic == "call":
                self._check_alignment(uc, run, call)
        self._finding(run, "stays-in-object", f"calls or jumps to {name} outside the object",
                      self._last_branch(run), target=name)
        self._stop(uc)

    def _region(self, address: int, size: int = 1) -> str:
        lay = self.layout
        run = self._run
        if run is not None and run.frame_end <= address < lay.stack + STACK_SIZE:
            return f"the caller's frame at entry SP+{address - run.start.sp:#x}"
        if lay.stack <= address < lay.stack + STACK_SIZE:
            return "the stack"
        if address in self.obj.traps or (self.obj.traps and min(self.obj.traps) <= address
                                         <= max(self.obj.traps) + 15):
            base = address - address % 16
            return f"{self.obj.traps.get(base, 'a symbol')} of another object"
        if lay.args <= address < lay.args + ARGS_SIZE:
            return "argumentInfo"
        if self.obj.image_start <= address < self.obj.image_end:
            return f"the object at {self.obj.location(address)}"
        if lay.ret <= address < lay.ret + PAGE:
            return "the caller's code"
        return f"unmapped memory at {address:#x}"

    def _allowed(self, address: int, size: int, write: bool) -> bool:
        run = self._run
        assert run is not None
        lay = self.layout
        if lay.stack <= address and address + size <= run.frame_end:
            return True
        if self.arch == "x64" and lay.tls <= address and address + size <= lay.tls + TLS_SIZE:
            return True
        if not write and lay.args <= address and address + size <= lay.args + ARGS_SIZE:
            return True
        if write:
            return self.obj.writable_at(address, size)
        return self.obj.readable_at(address, size)

    def _on_access(
        self, uc: HookCpu, access: int, address: int, size: int, _value: int, _data: object
    ) -> None:
        run = self._run
        assert run is not None
        try:
            if run.stopped:
                return
            write = access == UC_MEM_WRITE
            if not self._allowed(address, size, write):
                pc = int(uc.reg_read(X.UC_X86_REG_EIP if self.arch == "x86" else X.UC_X86_REG_RIP))
                kind = "write" if write else "read"
                self._finding(run, "memory", f"{kind} of {size} byte(s) in {self._region(address, size)}",
                              self._insn_at(pc))
                self._stop(uc)
        except BaseException as exc:
            self._fail(uc, exc)

    def _on_unmapped(
        self, uc: HookCpu, access: int, address: int, size: int, _value: int, _data: object
    ) -> bool:
        run = self._run
        assert run is not None
        try:
            if run.stopped:
                return False
            if access == UC_MEM_FETCH_UNMAPPED:
                if address in self.obj.traps:
                    self._call_out(uc, run, address)
                else:
                    self._finding(run, "memory", f"jumps to {self._region(address)}", self._last_branch(run),
                                  target=f"{address:#x}")
                    self._stop(uc)
                return False
            kind = "write" if access == UC_MEM_WRITE_UNMAPPED else "read"
            pc = int(uc.reg_read(X.UC_X86_REG_EIP if self.arch == "x86" else X.UC_X86_REG_RIP))
            self._finding(run, "memory", f"{kind} of {size} byte(s) in {self._region(address, size)}",
                          self._insn_at(pc))
            self._stop(uc)
        except BaseException as exc:
            self._fail(uc, exc)
        return False

    def _on_code(self, uc: HookCpu, address: int, size: int, _data: object) -> None:
        """Attribution runs only: which instruction last changed each watched register."""
        run = self._run
        assert run is not None
        try:
            self._note_changes(uc, run)
            run.prev_insn = self._insn_at(address)
        except BaseException as exc:
            self._fail(uc, exc)

    @staticmethod
    def _note_changes(uc: HookCpu, run: _HookRun) -> None:
        for name, (read, last, who) in run.watch.items():
            now = read(uc)
            if now != last:
                run.watch[name] = (read, now, run.prev_insn if run.prev_insn is not None else who)

    # -- one run -------------------------------------------------------------------------------------
    def draw(self, rng: random.Random) -> _Start:
        """One random start state (see the module's docstring)."""
        regs: dict[int, Any] = {}
        x86 = self.arch == "x86"
        bits = 32 if x86 else 64
        for reg in (_X86_GPR if x86 else _X64_GPR).values():
            regs[reg] = rng.getrandbits(bits)
        flags = 0x2
        for bit in _STATUS_FLAGS:
            flags |= bit if rng.getrandbits(1) else 0
        if x86 and rng.getrandbits(1):
            flags |= EFLAGS_DF  # the EE saves nothing (FE2-07): DF may be anything; System V: clear
        regs[X.UC_X86_REG_EFLAGS] = flags
        # x87: masked exceptions (an unmasked one would fault a correct hook too), random precision and
        # rounding; TOP, condition codes and sticky flags random; x86: ST(0)..ST(k-1) in use, x64: empty
        regs[X.UC_X86_REG_FPCW] = 0x7F | (rng.choice((0, 2, 3)) << 8) | (rng.randrange(4) << 10)
        top = rng.randrange(8)
        status = (top << 11) | rng.getrandbits(6) | (rng.getrandbits(3) << 8) | (rng.getrandbits(1) << 14)
        regs[X.UC_X86_REG_FPSW] = status
        used = rng.randrange(9) if x86 else 0
        tag = X87_ALL_EMPTY
        for i in range(used):
            tag &= ~(3 << (2 * ((top + i) % 8)))
        regs[X.UC_X86_REG_FPTAG] = tag
        for reg in _FP:
            mant = rng.getrandbits(64) | (1 << 63)
            exp = rng.randrange(1, 0x7FFF) | (rng.getrandbits(1) << 15)
            regs[reg] = (mant, exp)
        regs[X.UC_X86_REG_MXCSR] = (0x1F80 | rng.getrandbits(6) | (rng.getrandbits(1) << 6)
                                    | (rng.randrange(4) << 13) | (rng.getrandbits(1) << 15))
        for reg in _XMM[: 8 if x86 else 16]:
            regs[reg] = rng.getrandbits(128)
        # the frame: funcId, clientData, func, argumentInfo
        args = self._argument_info(rng)
        params = (rng.getrandbits(bits) | 1, rng.getrandbits(bits), rng.getrandbits(bits), self.layout.args)
        top_of_frame = self.layout.stack + STACK_SIZE - CALLER_FRAME
        if x86:
            sp = top_of_frame - ABI["x86"].popped - 4 - 4 * rng.randrange(16)
        else:
            sp = (top_of_frame - 8 - 16 * rng.randrange(16)) & ~0xF
            sp -= 8  # the call pushed the return address onto a 16-byte aligned stack
            for reg, value in zip((X.UC_X86_REG_RDI, X.UC_X86_REG_RSI, X.UC_X86_REG_RDX, X.UC_X86_REG_RCX),
                                  params, strict=True):
                regs[reg] = value
            regs[X.UC_X86_REG_FS_BASE] = self.layout.tls + TLS_SIZE // 2
        regs[X.UC_X86_REG_ESP if x86 else X.UC_X86_REG_RSP] = sp
        stack = bytearray(rng.randbytes(STACK_SIZE))
        off = sp - self.layout.stack
        words = (self.ret, *params) if x86 else (self.ret,)
        fmt = "<I" if x86 else "<Q"
        import struct

        for i, w in enumerate(words):
            struct.pack_into(fmt, stack, off + self.word * i, w)
        return _Start(registers=regs, stack=bytes(stack), args=args, params=params, sp=sp)

    def _argument_info(self, rng: random.Random) -> bytes:
        """COR_PRF_FUNCTION_ARGUMENT_INFO {numRanges, totalArgumentSize, ranges[] {startAddress, length}}
        followed by the arguments' bytes, all in the read-only argument page."""
        import struct

        block = bytearray(rng.randbytes(ARGS_SIZE))
        n = rng.randrange(5)
        lengths = [rng.choice((1, 2, 4, 8, 16)) for _ in range(n)]
        struct.pack_into("<II", block, 0, n, sum(lengths))
        for i, length in enumerate(lengths):
            start = self.layout.args + 0x200 + 0x20 * i
            if self.arch == "x86":
                struct.pack_into("<II", block, 8 + 8 * i, start, length)
            else:
                struct.pack_into("<QII", block, 8 + 16 * i, start, length, 0)
        return bytes(block)

    def _load(self, start: _Start) -> _HookRun:
        uc = self.uc
        uc.context_restore(self._pristine)
        for lo, hi in self._writable:
            page_lo = lo & ~(PAGE - 1)
            page_hi = (hi + PAGE - 1) & ~(PAGE - 1)
            off = page_lo - self.obj.image_start
            uc.mem_write(page_lo, bytes(self.obj.image[off: off + page_hi - page_lo]))
        uc.mem_write(self.layout.stack, start.stack)
        uc.mem_write(self.layout.args, start.args)
        if self.arch == "x64":
            uc.mem_write(self.layout.tls, bytes(TLS_SIZE))
        for reg, value in start.registers.items():
            if reg != X.UC_X86_REG_FPTAG:
                uc.reg_write(reg, value)
        uc.reg_write(X.UC_X86_REG_FPTAG, start.registers[X.UC_X86_REG_FPTAG])  # after the contents
        frame_end = start.sp + (4 + ABI["x86"].popped if self.arch == "x86" else 8)
        return _HookRun(start=start, frame_end=frame_end)

    def _state(self) -> MachineState:
        uc = self.uc
        st = tuple(_fp_value(uc.reg_read(r)) for r in _FP)
        common: dict[str, Any] = dict(
            st=st, fpu_control=int(uc.reg_read(X.UC_X86_REG_FPCW)),
            fpu_status=int(uc.reg_read(X.UC_X86_REG_FPSW)), fpu_tag=int(uc.reg_read(X.UC_X86_REG_FPTAG)),
            mxcsr=int(uc.reg_read(X.UC_X86_REG_MXCSR)))
        if self.arch == "x86":
            gpr = {n: int(uc.reg_read(r)) for n, r in _X86_GPR.items()}
            esp = gpr["esp"]
            stack = {}
            for i in range(5):
                stack[esp + 4 * i] = int.from_bytes(bytes(self._try_read(esp + 4 * i, 4)), "little")
            gpr.update(eip=int(uc.reg_read(X.UC_X86_REG_EIP)), eflags=int(uc.reg_read(X.UC_X86_REG_EFLAGS)))
            return MachineState(arch="x86", registers=gpr, xmm=tuple(int(uc.reg_read(r)) for r in _XMM[:8]),
                                stack=stack, **common)
        gpr = {n: int(uc.reg_read(r)) for n, r in _X64_GPR.items()}
        rsp = gpr["rsp"]
        gpr.update(rip=int(uc.reg_read(X.UC_X86_REG_RIP)), rflags=int(uc.reg_read(X.UC_X86_REG_EFLAGS)))
        return MachineState(arch="x64", registers=gpr, xmm=tuple(int(uc.reg_read(r)) for r in _XMM),
                            stack={rsp: int.from_bytes(bytes(self._try_read(rsp, 8)), "little")}, **common)

    def _try_read(self, address: int, size: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(address, size))
        except UcError:
            return bytes(size)

    def _emulate(self, run: _HookRun) -> None:
        self._run = run
        try:
            self.uc.emu_start(self.entry, self.ret)
        except UcError:
            if not run.findings and run.error is None:
                pc = int(self.uc.reg_read(X.UC_X86_REG_EIP if self.arch == "x86" else X.UC_X86_REG_RIP))
                self._finding(run, "memory", f"the CPU faulted at {self.obj.location(pc)}", self._insn_at(pc))
        finally:
            self._run = None
        if run.error is not None:
            raise run.error

    def run_once(self, start: _Start) -> tuple[list[HookFinding], int, bool]:
        """One run: its findings, instructions run and whether it returned."""
        run = self._load(start)
        before = self._state()
        self._check_entry(before, start)
        self._emulate(run)
        if run.stopped:
            return run.findings, run.count, False
        after = self._state()
        findings = list(run.findings)
        changes = hook_register_changes(before, after)
        stack_violations = [v for v in check_hook_abi(before, after) if v.clause == "FE2-09"]
        sp_before, sp_after, sp_name = before.sp, after.sp, before.isa.sp.upper()
        want = ABI[self.arch].return_delta
        ret_insn = self._last_branch(run, outside_stubs=False)
        for v in stack_violations:
            if v.message.startswith(("ESP", "RSP")):
                delta = (sp_after - sp_before) % 2**(8 * self.word)
                self._finding(run, "stack-restored", f"{sp_name} raised by {delta} bytes, expected {want}",
                              ret_insn, register_name=sp_name, before=sp_before, after=sp_after)
            else:
                self._finding(run, "returns-to-caller", v.message, ret_insn)
        findings = list(run.findings)
        if changes:
            findings.extend(self._attribute(start, changes))
        return findings, run.count, True

    def _check_entry(self, before: MachineState, start: _Start) -> None:
        bad = check_hook_entry(before, *start.params)
        if bad:
            raise EmuError(f"hook checker set-up breaks {bad[0]}")  # the checker's own bug

    def _attribute(self, start: _Start, changes: list[RegisterChange]) -> list[HookFinding]:
        """Run ``start`` again, single-stepping, to find the last instruction that changed each register."""
        run = self._load(start)
        for c in changes:
            read = self._readers[c.name]
            run.watch[c.name] = (read, read(self.uc), None)
        handle = self.uc.hook_add(UC_HOOK_CODE, self._on_code)
        self.uc.ctl_flush_tb()  # code translated without the code hook would not call it
        try:
            self._emulate(run)
        finally:
            self.uc.hook_del(handle)
            self.uc.ctl_flush_tb()
        self._note_changes(self.uc, run)
        out = []
        for c in changes:
            who = run.watch[c.name][2]
            out.append(HookFinding(clause=c.clause, rule="register-preserved",
                                   detail=f"{c.name} not preserved", register_name=c.name, before=c.before,
                                   after=c.after, instruction=self._describe(who)))
        return out


def check_hook(
    path: Path, symbol: str, arch: Arch, *, runs: int = DEFAULT_RUNS, seed: int = 0,
    budget: int = DEFAULT_BUDGET,
) -> HookReport:
    """Check ``symbol`` of the shared object ``path`` over ``runs`` random states drawn from ``seed``.

    Input errors (no such file, not an ELF object of ``arch``, no such symbol, a symbol not defined in the
    object or not in its code) raise :class:`HookInputError`; every rule the hook breaks is a finding of
    the report (an endless loop and a jump to an unmapped address included)."""
    if arch not in _LAYOUTS:
        raise HookInputError(f"unknown architecture {arch!r}: expected x86 or x64")
    if runs < 1:
        raise HookInputError(f"runs={runs}: at least one run is needed")
    if budget < 1:
        raise HookInputError(f"budget={budget}: at least one instruction is needed")
    obj = load_object(path, arch, _LAYOUTS[arch].base)
    entry = find_symbol(obj, symbol)
    checker = HookChecker(obj, entry, symbol, budget)
    rng = random.Random(seed)
    per_run: list[list[HookFinding]] = []
    counts: list[int] = []
    returned = 0
    for _ in range(runs):
        findings, count, did_return = checker.run_once(checker.draw(rng))
        per_run.append(findings)
        counts.append(count)
        returned += did_return
    return HookReport(file=str(path), symbol=symbol, arch=arch, seed=seed, runs=runs, budget=budget,
                      returned=returned, instructions_min=min(counts), instructions_max=max(counts),
                      unapplied_relocations=obj.unapplied, findings=aggregate(per_run))
