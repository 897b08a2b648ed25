"""One unicorn CPU wrapper for every emulator in emu: the capture replay's machine (:mod:`emu.machine`) and
the hook checker (:mod:`emu.hookcheck.check`).

:class:`Cpu` takes an architecture and reads the rest from its table (:data:`clr_model.abi.ISA`): the unicorn
mode from the word size, the instruction and stack pointers, the highest address. Registers are read and
written by name (``cpu["rsp"]``, ``cpu["efl"]``, ``cpu["st3"]``, ``cpu["fpu_tag"]``): the names of the ABI
table and of :class:`clr_model.abi.MachineState`, the capture's (``efl``) and unicorn's own in lower case
(:func:`register_id`); x87 registers are 80-bit integers both ways. :meth:`save` keeps the CPU context once
it is set up and :meth:`restore` starts every run from it, so runs are independent while translated code
stays cached.

Hooks are added with :meth:`hook` in unicorn's ``uccallback`` style: an exception inside a hook is stored,
emulation is stopped, and :meth:`start` raises it after ``emu_start`` returns, before any error of
``emu_start`` itself (:data:`UcError`): never swallowed, never mistaken for a CPU fault. Callbacks get
unicorn's arguments without the ``Uc`` and the user data (a code hook ``(address, size)``, a memory hook
``(access, address, size, value)``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import unicorn as _unicorn
from unicorn import UC_ARCH_X86, UC_MODE_32, UC_MODE_64
from unicorn import x86_const as _x86

from clr_model.abi import ISA, X87_REGISTERS, Arch

__all__ = ["Cpu", "UcError", "register_id"]

_UNICORN: Any = _unicorn
#: unicorn's error type (raised by emu_start, mem_map, mem_read, ...)
UcError: type[Exception] = _UNICORN.UcError

_MODES = {32: UC_MODE_32, 64: UC_MODE_64}
#: names that are not unicorn's own ``UC_X86_REG_<NAME>``: the capture's ``efl`` and the state's
#: ``eflags``/``rflags`` (EFLAGS in both modes), the x87 words, and the x87 stack ``st0``-``st7``
_ALIASES = {
    "efl": "EFLAGS", "rflags": "EFLAGS", "fpu_control": "FPCW", "fpu_status": "FPSW", "fpu_tag": "FPTAG",
    **{f"st{i}": f"FP{i}" for i in range(X87_REGISTERS)},
}  # fmt: skip
_X87 = frozenset(f"st{i}" for i in range(X87_REGISTERS))
#: unicorn 2.1+ reads and writes several registers in one call
_BATCH = hasattr(_UNICORN.Uc, "reg_write_batch") and hasattr(_UNICORN.Uc, "reg_read_batch")
_UC_ERR_OK = _UNICORN.UC_ERR_OK
_NO_BATCH = object()


@functools.cache
def register_id(name: str) -> int:
    """unicorn's id of the register called ``name``; KeyError for a name unicorn does not know."""
    reg = getattr(_x86, f"UC_X86_REG_{_ALIASES.get(name, name.upper())}", None)
    if not isinstance(reg, int):
        raise KeyError(name)
    return reg


class _Uc(Protocol):
    """The part of unicorn's ``Uc`` the wrapper uses."""

    def emu_start(self, begin: int, until: int) -> None: ...
    def emu_stop(self) -> None: ...
    def mem_map(self, address: int, size: int, perms: int) -> None: ...
    def mem_write(self, address: int, data: bytes) -> None: ...
    def mem_read(self, address: int, size: int) -> bytearray: ...
    def reg_write(self, reg: int, value: object) -> None: ...
    def reg_read(self, reg: int) -> Any: ...
    def reg_write_batch(self, items: Sequence[tuple[int, Any]]) -> None: ...
    def reg_read_batch(self, regs: Sequence[int]) -> tuple[Any, ...]: ...
    def hook_add(self, htype: int, callback: Callable[..., Any]) -> int: ...
    def hook_del(self, handle: int) -> None: ...
    def ctl_flush_tb(self) -> None: ...
    def context_save(self) -> object: ...
    def context_restore(self, context: object) -> None: ...


class Cpu:
    """One unicorn CPU of ``arch`` (not thread-safe)."""

    def __init__(self, arch: Arch) -> None:
        self.arch: Arch = arch
        self.isa = ISA[arch]
        self.uc = cast(_Uc, _UNICORN.Uc(UC_ARCH_X86, _MODES[self.isa.bits]))
        #: the first exception a hook raised in the current :meth:`start`
        self.error: BaseException | None = None
        self._saved: object = None
        #: names of a batch -> its ctypes arrays (:meth:`_batch`)
        self._batches: dict[tuple[str, ...], object] = {}

    # -- registers ---------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> int:
        value = self.uc.reg_read(register_id(name))
        if name in _X87:
            mantissa, exponent = value
            return (int(exponent) << 64) | int(mantissa)
        return int(value)

    def __setitem__(self, name: str, value: int | tuple[int, ...]) -> None:
        if name in _X87 and isinstance(value, int):
            value = (value & (2**64 - 1), value >> 64)
        self.uc.reg_write(register_id(name), value)

    def _batch(self, names: tuple[str, ...]) -> tuple[Any, Any, Any, int] | None:
        """The ctypes arrays of one batch call for these registers, made once per list of names: their ids,
        a 64-bit slot per register and a pointer to each slot, and the slots' size in bytes. None where the
        call must go through unicorn's own batch methods: a register whose unicorn type is not the 64-bit
        integer (x87, vector, MSR), a unicorn without the batch call."""
        got = self._batches.get(names, _NO_BATCH)
        if got is _NO_BATCH:
            got = None
            do_read = getattr(self.uc, "_do_reg_read_batch", None)
            select = getattr(self.uc, "_select_reg_class", None)
            default = getattr(self.uc, "_DEFAULT_REGTYPE", None)
            ids = [register_id(name) for name in names if name not in _X87]
            if (
                _BATCH and callable(do_read) and callable(getattr(self.uc, "_do_reg_write_batch", None))
                and callable(select) and default is ctypes.c_uint64
                and len(ids) == len(names) and all(select(reg) is default for reg in ids)
            ):  # fmt: skip
                n = len(names)
                slots = (ctypes.c_uint64 * n)()
                base = ctypes.addressof(slots)
                pointers = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
                got = ((ctypes.c_int * n)(*ids), slots, pointers, 8 * n)
            if len(self._batches) >= 64:
                self._batches.clear()
            self._batches[names] = got
        return cast("tuple[Any, Any, Any, int] | None", got)

    def write_registers(self, values: Sequence[tuple[str, int]]) -> None:
        """Write several registers in order (not the x87 stack), in one call to unicorn where it can."""
        batch = self._batch(tuple(name for name, _ in values))
        if batch is not None:
            # unicorn's reg_write_batch, its arrays made once: each value in a 64-bit slot, as it passes
            # them (ctypes.c_uint64 of the value; unicorn reads the register's width of it)
            ids, slots, pointers, _size = batch
            slots[:] = [value for _, value in values]
            status = self.uc._do_reg_write_batch(ids, pointers, ctypes.c_int(len(ids)))  # type: ignore[attr-defined]
            if status != _UC_ERR_OK:
                raise UcError(status)
            return
        items = [(register_id(name), value) for name, value in values]
        if any(name in _X87 for name, _ in values):
            for name, value in values:
                self[name] = value
        elif _BATCH:
            self.uc.reg_write_batch(items)
        else:  # pragma: no cover - unicorn before 2.1
            for reg, value in items:
                self.uc.reg_write(reg, value)

    def read_registers(self, names: Sequence[str]) -> list[int]:
        """Read several registers (not the x87 stack), in one call to unicorn where it can."""
        batch = self._batch(tuple(names))
        if batch is not None:
            # unicorn's reg_read_batch, its arrays made once: each register into a zeroed 64-bit slot, as
            # it reads them (ctypes.c_uint64(); unicorn writes the register's width of it)
            ids, slots, pointers, size = batch
            ctypes.memset(slots, 0, size)
            status = self.uc._do_reg_read_batch(ids, pointers, ctypes.c_int(len(ids)))  # type: ignore[attr-defined]
            if status != _UC_ERR_OK:
                raise UcError(status)
            return list(slots)
        if any(name in _X87 for name in names) or not _BATCH:
            return [self[name] for name in names]
        return [int(v) for v in self.uc.reg_read_batch([register_id(name) for name in names])]

    @property
    def ip(self) -> int:
        return self[self.isa.ip]

    @property
    def sp(self) -> int:
        return self[self.isa.sp]

    @property
    def end(self) -> int:
        """The highest address: the ``until`` of a run that only a hook stops."""
        return self.isa.mask

    # -- memory ------------------------------------------------------------------------------------
    def mem_map(self, address: int, size: int, perms: int) -> None:
        self.uc.mem_map(address, size, perms)

    def mem_write(self, address: int, data: bytes) -> None:
        self.uc.mem_write(address, data)

    def mem_read(self, address: int, size: int) -> bytes:
        return bytes(self.uc.mem_read(address, size))

    # -- hooks and runs ----------------------------------------------------------------------------
    def hook(self, kind: int, callback: Callable[..., Any]) -> int:
        """Add a unicorn hook of ``kind`` (``UC_HOOK_*``); what ``callback`` raises is stored, stops the
        emulation and is raised by :meth:`start`. A memory hook that raises answers False (not handled)."""

        def guarded(_uc: object, *args: Any) -> Any:
            try:
                return callback(*args[:-1])
            except BaseException as exc:
                self.fail(exc)
                return False

        return self.uc.hook_add(kind, guarded)

    def unhook(self, handle: int) -> None:
        self.uc.hook_del(handle)

    def flush(self) -> None:
        """Drop the translated code (code translated without a code hook would not call one added later)."""
        self.uc.ctl_flush_tb()

    def fail(self, exc: BaseException) -> None:
        """Keep ``exc`` (the first one of a run) and stop the emulation."""
        if self.error is None:
            self.error = exc
        self.uc.emu_stop()

    def stop(self) -> None:
        self.uc.emu_stop()

    def start(self, begin: int, until: int) -> None:
        """Run from ``begin`` until ``until``, a stop or a fault; a hook's exception is raised first, then
        unicorn's :data:`UcError`."""
        self.error = None
        fault: Exception | None = None
        try:
            self.uc.emu_start(begin, until)
        except UcError as exc:
            fault = exc
        error, self.error = self.error, None
        try:
            if error is not None:
                raise error
            if fault is not None:
                raise fault
        finally:
            # the exception's traceback holds this frame: its locals must not hold the exception (a cycle
            # that keeps every caller's frame, and what their locals hold, alive until a full collection)
            error = fault = None

    def save(self) -> None:
        """Keep the CPU context as it is now: every :meth:`restore` returns to it."""
        self._saved = self.uc.context_save()

    def restore(self) -> None:
        self.uc.context_restore(self._saved)
