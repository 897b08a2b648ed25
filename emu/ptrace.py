"""Stop a Linux process at chosen instructions with ptrace and read its registers (for native fixtures and
tools; pure Python over libc's ``ptrace`` through ctypes).

The tracer is this (64-bit) Python. ``PTRACE_GETREGS`` from a 64-bit tracer fills the 64-bit
``struct user_regs_struct`` (sys/user.h) whatever the tracee runs: for a 32-bit tracee every register is
zero-extended into its 64-bit slot (``eax`` in ``rax`` ...), ``orig_rax`` holds ``orig_eax``, and
``gs_base`` is the base of the segment GS selects, which the i386 ABI uses for thread-local storage.
Which mode the tracee is in is read from its CS selector: ``__USER32_CS`` (0x23) for 32-bit code,
``__USER_CS`` (0x33) for 64-bit code (arch/x86/include/asm/segment.h); :meth:`Tracee.registers` gives
:class:`~emu.capture.X86Registers` or :class:`~emu.capture.X64Registers` accordingly.

Breakpoints are ``int3`` bytes written through ``/proc/PID/mem`` (a tracer may write read-only text there),
so they need no word alignment and work the same for both modes. Every failure is one
:class:`~emu.errors.EmuError` line naming the process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

from emu.capture import X64Registers, X86Registers
from emu.errors import EmuError

__all__ = ["USER32_CS", "USER_CS", "Tracee", "UserRegs"]

T = TypeVar("T")

_PTRACE_CONT, _PTRACE_GETREGS, _PTRACE_SETREGS = 7, 12, 13
_PTRACE_ATTACH, _PTRACE_DETACH = 16, 17
#: the user code segment selectors of x86-64 Linux (arch/x86/include/asm/segment.h)
USER32_CS = 0x23
USER_CS = 0x33
#: sys/user.h ``struct user_regs_struct`` of x86-64, in order (27 unsigned longs)
_USER_REGS = (
    "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base "
    "ds es fs gs"
).split()


class UserRegs(ctypes.Structure):
    """x86-64 ``struct user_regs_struct``: what PTRACE_GETREGS fills for any tracee of a 64-bit tracer."""

    _fields_ = [(name, ctypes.c_ulonglong) for name in _USER_REGS]


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        lib.ptrace.restype = ctypes.c_long
        _LIBC = lib
    return _LIBC


class Tracee:
    """A process this tracer attached to (``with Tracee.attach(pid) as t: ...`` detaches at the end)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._breakpoints: dict[int, bytes] = {}

    # -- ptrace ------------------------------------------------------------------------------------
    def _ptrace(self, request: int, addr: int = 0, data: Any = None) -> int:
        ctypes.set_errno(0)
        res = int(_libc().ptrace(request, self.pid, ctypes.c_void_p(addr), data))
        err = ctypes.get_errno()
        if res == -1 and err:
            raise EmuError(f"pid {self.pid}: ptrace request {request}: {os.strerror(err)}")
        return res

    @classmethod
    def attach(cls, pid: int) -> Tracee:
        """PTRACE_ATTACH and wait until the process stops."""
        tracee = cls(pid)
        tracee._ptrace(_PTRACE_ATTACH)
        status = tracee._wait()
        if not os.WIFSTOPPED(status):
            raise EmuError(f"pid {pid}: did not stop on attach (status {status:#x})")
        return tracee

    def __enter__(self) -> Tracee:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.detach()

    def detach(self) -> None:
        """Remove the breakpoints left and detach (the process may already be gone)."""
        try:
            for address in list(self._breakpoints):
                self.clear_breakpoint(address)
            self._ptrace(_PTRACE_DETACH, 0, None)
        except EmuError:
            pass

    def _wait(self, deadline: float | None = None) -> int:
        """The next wait status of the tracee; with a ``deadline`` (time.monotonic), an EmuError when it
        does not stop or end before it (polled: a tracee that never stops cannot hang the tracer)."""
        while True:
            try:
                pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            except ChildProcessError:
                raise EmuError(f"pid {self.pid}: not a child this tracer can wait for") from None
            if pid:
                return status
            assert deadline is not None
            if time.monotonic() > deadline:
                raise EmuError(f"pid {self.pid}: did not stop within the time allowed")
            time.sleep(0.001)

    # -- memory ------------------------------------------------------------------------------------
    def _mem(self, mode: int, what: str, size: int, address: int, io: Callable[[int], T]) -> T:
        """``io`` on the tracee's /proc/<pid>/mem opened with ``mode``; its OSError names what it did to
        ``size`` bytes at ``address``."""
        fd = os.open(f"/proc/{self.pid}/mem", mode)
        try:
            return io(fd)
        except OSError as exc:
            raise EmuError(
                f"pid {self.pid}: cannot {what} {size} bytes at {address:#x}: {exc.strerror}"
            ) from None
        finally:
            os.close(fd)

    def read(self, address: int, size: int) -> bytes:
        data = self._mem(os.O_RDONLY, "read", size, address, lambda fd: os.pread(fd, size, address))
        if len(data) != size:
            raise EmuError(f"pid {self.pid}: short read of {size} bytes at {address:#x}")
        return data

    def write(self, address: int, data: bytes) -> None:
        done = self._mem(os.O_WRONLY, "write", len(data), address, lambda fd: os.pwrite(fd, data, address))
        if done != len(data):
            raise EmuError(f"pid {self.pid}: short write of {len(data)} bytes at {address:#x}")

    def set_breakpoint(self, address: int) -> None:
        if address not in self._breakpoints:
            self._breakpoints[address] = self.read(address, 1)
            self.write(address, b"\xcc")

    def clear_breakpoint(self, address: int) -> None:
        original = self._breakpoints.pop(address, None)
        if original is not None:
            self.write(address, original)

    # -- running -----------------------------------------------------------------------------------
    def cont_until_breakpoint(self, timeout: float = 10.0) -> int:
        """Continue until an ``int3`` of :meth:`set_breakpoint` traps; rewind the IP onto it, remove it,
        and return its address. Other signals are passed on; an exit, or no breakpoint within ``timeout``
        seconds, is an EmuError (the tracee is left running: the caller ends it)."""
        deadline = time.monotonic() + timeout
        sig = 0
        while True:
            self._ptrace(_PTRACE_CONT, 0, ctypes.c_void_p(sig))
            status = self._wait(deadline)
            if not os.WIFSTOPPED(status):
                raise EmuError(f"pid {self.pid}: ended before a breakpoint (status {status:#x})")
            stop = os.WSTOPSIG(status)
            if stop == signal.SIGTRAP:
                regs = self.user_regs()
                at = int(regs.rip) - 1
                if at in self._breakpoints:
                    regs.rip = at
                    self._ptrace(_PTRACE_SETREGS, 0, ctypes.byref(regs))
                    self.clear_breakpoint(at)
                    return at
                sig = 0
            else:
                sig = stop

    # -- registers ---------------------------------------------------------------------------------
    def user_regs(self) -> UserRegs:
        regs = UserRegs()
        self._ptrace(_PTRACE_GETREGS, 0, ctypes.byref(regs))
        return regs

    def registers(self) -> X64Registers | X86Registers:
        """The stopped thread's registers as a capture holds them (the mode from the CS selector)."""
        ur = self.user_regs()
        cs = ur.cs & 0xFFFF
        if cs == USER32_CS:
            names = ("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip")
            values = {n: getattr(ur, "r" + n[1:]) & 0xFFFF_FFFF for n in names}
            return X86Registers(
                **values, efl=ur.eflags & 0xFFFF_FFFF, cs=cs, ss=ur.ss & 0xFFFF, ds=ur.ds & 0xFFFF,
                es=ur.es & 0xFFFF, fs=ur.fs & 0xFFFF, gs=ur.gs & 0xFFFF, gs_base=ur.gs_base & 0xFFFF_FFFF,
            )  # fmt: skip
        if cs == USER_CS:
            gregs = "r8 r9 r10 r11 r12 r13 r14 r15 rdi rsi rbp rbx rdx rax rcx rsp rip".split()
            fs, gs = ur.fs & 0xFFFF, ur.gs & 0xFFFF
            return X64Registers(
                **{n: getattr(ur, n) for n in gregs}, efl=ur.eflags, csgsfs=cs | gs << 16 | fs << 32,
                fs_base=ur.fs_base,
            )  # fmt: skip
        raise EmuError(f"pid {self.pid}: code segment selector {cs:#x} is neither 32- nor 64-bit user code")
