"""Win32 CONTEXT layouts (AMD64 and x86): field offsets, pack/unpack/validate, runtime-specific sizes.

DoStackSnapshot takes a seed CONTEXT and hands one out per frame (DSS-05, DSS-06, DSS-12). The layouts
below were read from public headers and declared here by field name, offset and size:

* AMD64: winnt.h ``CONTEXT`` (``DECLSPEC_ALIGN(16)``, 0x4D0 = 1232 bytes), identical in the PAL's
  pal.h (dotnet/runtime ``src/coreclr/pal/inc/pal.h``) up to ``LastExceptionFromRip``. Newer PALs append
  XSTATE state after it (``XStateFeaturesMask``, ``XStateReserved0``, ``Ymm0H..Ymm15H``,
  ``KMask0..KMask7``, ``Zmm0H..Zmm15H``, ``Zmm16..Zmm31``), so the Linux CONTEXT of later runtimes is
  larger (3104 bytes with the AVX-512 tail) while .NET Core 3.1's is 1232: see :data:`AMD64_PAL_XSTATE`.
  The size each known runtime uses is in :data:`RUNTIME_CONTEXT_LAYOUTS` (by runtime version, the one
  table of that fact: :func:`runtime_context_size`); for others use :meth:`ContextLayout.with_size` or
  :func:`amd64_layout_for_size` with the size the runtime reports.
* x86: winnt.h ``CONTEXT`` (716 = 0x2CC bytes, 4-aligned) with its 112-byte ``FLOATING_SAVE_AREA``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from clr_model.errors import ModelError

__all__ = [
    "AMD64_CONTEXT",
    "AMD64_PAL_XSTATE",
    "CONTEXT_AMD64",
    "CONTEXT_I386",
    "RUNTIME_CONTEXT_LAYOUTS",
    "X86_CONTEXT",
    "Arch",
    "ContextError",
    "ContextFieldError",
    "ContextFlagsError",
    "ContextLayout",
    "ContextMisaligned",
    "ContextTooShort",
    "amd64_flags",
    "amd64_layout_for_size",
    "runtime_context_layout",
    "runtime_context_size",
    "x86_flags",
]


class Arch(StrEnum):
    AMD64 = "amd64"
    X86 = "x86"


# ContextFlags (winnt.h): an architecture bit plus the parts of the record that are valid.
CONTEXT_AMD64 = 0x00100000
CONTEXT_I386 = 0x00010000
CONTROL = 0x01
INTEGER = 0x02
SEGMENTS = 0x04
FLOATING_POINT = 0x08
DEBUG_REGISTERS = 0x10
EXTENDED_REGISTERS = 0x20  # x86 only (FXSAVE area in ExtendedRegisters)
XSTATE = 0x40
#: Flags the OS / runtime may set besides the parts (CONTEXT_UNWOUND_TO_CALL, CONTEXT_EXCEPTION_*).
STATUS_FLAGS = 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80000000

# winnt.h's named combinations (one part: amd64_flags(PART), x86_flags(PART))
CONTEXT_AMD64_FULL = CONTEXT_AMD64 | CONTROL | INTEGER | FLOATING_POINT
CONTEXT_AMD64_ALL = CONTEXT_AMD64 | CONTROL | INTEGER | SEGMENTS | FLOATING_POINT | DEBUG_REGISTERS
CONTEXT_I386_FULL = CONTEXT_I386 | CONTROL | INTEGER | SEGMENTS
CONTEXT_I386_ALL = CONTEXT_I386_FULL | FLOATING_POINT | DEBUG_REGISTERS | EXTENDED_REGISTERS


def amd64_flags(*parts: int) -> int:
    """CONTEXT_AMD64 | the given parts (CONTROL, INTEGER, ...)."""
    return functools.reduce(operator.or_, parts, CONTEXT_AMD64)


def x86_flags(*parts: int) -> int:
    """CONTEXT_i386 | the given parts."""
    return functools.reduce(operator.or_, parts, CONTEXT_I386)


class ContextError(ModelError):
    """A CONTEXT buffer or value set that does not fit its layout."""


class ContextTooShort(ContextError):
    """Fewer bytes than the layout needs."""


class ContextMisaligned(ContextError):
    """The buffer's address is not a multiple of the layout's alignment."""


class ContextFlagsError(ContextError):
    """ContextFlags without the layout's architecture bit, or with bits the layout does not define."""


class ContextFieldError(ContextError):
    """An unknown field, a value that does not fit its field, or two overlapping fields given at once."""


#: the ContextFlags parts both architectures define (x86 adds EXTENDED_REGISTERS, its FXSAVE area)
_COMMON_PARTS = CONTROL | INTEGER | SEGMENTS | FLOATING_POINT | DEBUG_REGISTERS | XSTATE
#: what winnt.h fixes for each architecture's CONTEXT: the ContextFlags architecture bit, the part bits the
#: architecture defines and the structure's alignment
_ARCH_CONTEXT: Mapping[Arch, tuple[int, int, int]] = MappingProxyType(
    {
        Arch.AMD64: (CONTEXT_AMD64, _COMMON_PARTS, 16),
        Arch.X86: (CONTEXT_I386, _COMMON_PARTS | EXTENDED_REGISTERS, 4),
    }
)


@dataclass(frozen=True)
class ContextLayout:
    """One CONTEXT structure: field name -> (offset, size in bytes). Fields may overlap (C unions)."""

    arch: Arch
    name: str
    size: int
    fields: Mapping[str, tuple[int, int]]
    #: size of the structure the header declares; ``size`` may be larger (:meth:`with_size`).
    declared_size: int = field(default=0)

    @property
    def arch_flag(self) -> int:
        """The ContextFlags bit of the architecture."""
        return _ARCH_CONTEXT[self.arch][0]

    @property
    def part_flags(self) -> int:
        """The ContextFlags part bits the architecture defines."""
        return _ARCH_CONTEXT[self.arch][1]

    @property
    def alignment(self) -> int:
        """The structure's alignment in bytes (its size is a multiple of it)."""
        return _ARCH_CONTEXT[self.arch][2]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        if self.declared_size == 0:
            object.__setattr__(self, "declared_size", self.size)
        for fname, (offset, fsize) in self.fields.items():
            if offset < 0 or fsize <= 0 or offset + fsize > self.size:
                raise ContextFieldError(f"{self.name}.{fname}: ({offset}, {fsize}) outside {self.size} bytes")
        if self.size % self.alignment:
            raise ContextError(f"{self.name}: size {self.size} is not a multiple of {self.alignment}")

    # -- queries ---------------------------------------------------------------------------------------
    def offset(self, name: str) -> int:
        return self._field(name)[0]

    def field_size(self, name: str) -> int:
        return self._field(name)[1]

    @property
    def flags_field(self) -> tuple[int, int]:
        return self.fields["ContextFlags"]

    @property
    def ip_field(self) -> str:
        return "Rip" if self.arch is Arch.AMD64 else "Eip"

    @property
    def sp_field(self) -> str:
        return "Rsp" if self.arch is Arch.AMD64 else "Esp"

    @property
    def fp_field(self) -> str:
        return "Rbp" if self.arch is Arch.AMD64 else "Ebp"

    def _field(self, name: str) -> tuple[int, int]:
        try:
            return self.fields[name]
        except KeyError:
            raise ContextFieldError(f"{self.name}: no field {name!r}") from None

    # -- sizes -----------------------------------------------------------------------------------------
    def with_size(self, size: int) -> ContextLayout:
        """The same layout in a larger structure (a runtime whose CONTEXT appends state at the end)."""
        if size < self.size:
            raise ContextTooShort(f"{self.name}: {size} bytes cannot hold the {self.size}-byte layout")
        if size % self.alignment:
            raise ContextMisaligned(f"{self.name}: size {size} is not a multiple of {self.alignment}")
        if size == self.size:
            return self
        return replace(self, name=f"{self.name}[{size}]", size=size)

    def extended(self, name: str, size: int, tail: Mapping[str, tuple[int, int]]) -> ContextLayout:
        """A structure of ``size`` bytes that begins with this one (every field where it is) and declares the
        fields ``tail`` after it."""
        return replace(self, name=name, size=size, fields={**self.fields, **tail}, declared_size=size)

    # -- bytes -----------------------------------------------------------------------------------------
    def pack(self, values: Mapping[str, int]) -> bytes:
        """A zero-filled buffer of ``size`` bytes with ``values`` (little-endian unsigned) at their fields."""
        buf = bytearray(self.size)
        taken: list[tuple[str, int, int]] = []
        for name, value in values.items():
            offset, fsize = self._field(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ContextFieldError(f"{self.name}.{name}: an int is needed, not {type(value).__name__}")
            if not 0 <= value < 1 << (8 * fsize):
                raise ContextFieldError(f"{self.name}.{name}: {value:#x} does not fit in {fsize} byte(s)")
            for other, o_off, o_size in taken:
                if offset < o_off + o_size and o_off < offset + fsize:
                    raise ContextFieldError(f"{self.name}: fields {other} and {name} overlap; give one")
            taken.append((name, offset, fsize))
            buf[offset : offset + fsize] = value.to_bytes(fsize, "little")
        return bytes(buf)

    def unpack(self, data: bytes, names: Iterable[str] | None = None) -> dict[str, int]:
        """Every field (or the named ones) read little-endian unsigned; ``data`` must be long enough."""
        if len(data) < self.size:
            raise ContextTooShort(f"{self.name}: {len(data)} bytes given, the layout needs {self.size}")
        wanted = list(self.fields) if names is None else list(names)
        out: dict[str, int] = {}
        for name in wanted:
            offset, fsize = self._field(name)
            out[name] = int.from_bytes(data[offset : offset + fsize], "little")
        return out

    def validate(self, data: bytes, *, address: int | None = None, require_flags: bool = True) -> None:
        """Raise a :class:`ContextError` naming the first problem of ``data`` as a CONTEXT of this layout.

        Checks: length (at least ``size``), the buffer address's alignment (when given), and ContextFlags:
        the architecture bit must be set and no undefined bit may be set (``require_flags``).
        """
        if len(data) < self.size:
            raise ContextTooShort(f"{self.name}: {len(data)} bytes given, the layout needs {self.size}")
        if address is not None and address % self.alignment:
            raise ContextMisaligned(
                f"{self.name}: buffer at {address:#x} is not {self.alignment}-byte aligned"
            )
        if not require_flags:
            return
        offset, fsize = self.flags_field
        flags = int.from_bytes(data[offset : offset + fsize], "little")
        if not flags & self.arch_flag:
            raise ContextFlagsError(
                f"{self.name}: ContextFlags {flags:#010x} at offset {offset:#x} lacks the architecture bit "
                f"{self.arch_flag:#010x}"
            )
        unknown = flags & ~(self.arch_flag | self.part_flags | STATUS_FLAGS)
        if unknown:
            raise ContextFlagsError(
                f"{self.name}: ContextFlags {flags:#010x} has undefined bits {unknown:#x}"
            )


def _seq(names: Iterable[str], start: int, size: int) -> dict[str, tuple[int, int]]:
    return {name: (start + i * size, size) for i, name in enumerate(names)}


def _amd64_fields() -> dict[str, tuple[int, int]]:
    f: dict[str, tuple[int, int]] = {}
    f.update(_seq([f"P{i}Home" for i in range(1, 7)], 0x00, 8))
    f["ContextFlags"] = (0x30, 4)
    f["MxCsr"] = (0x34, 4)
    f.update(_seq(["SegCs", "SegDs", "SegEs", "SegFs", "SegGs", "SegSs"], 0x38, 2))
    f["EFlags"] = (0x44, 4)
    f.update(_seq(["Dr0", "Dr1", "Dr2", "Dr3", "Dr6", "Dr7"], 0x48, 8))
    gprs = ["Rax", "Rcx", "Rdx", "Rbx", "Rsp", "Rbp", "Rsi", "Rdi"] + [f"R{i}" for i in range(8, 16)]
    f.update(_seq(gprs, 0x78, 8))
    f["Rip"] = (0xF8, 8)
    # union { XMM_SAVE_AREA32 FltSave; struct { M128A Header[2]; M128A Legacy[8]; M128A Xmm0..Xmm15; } }
    f["FltSave"] = (0x100, 512)
    f["Header"] = (0x100, 32)
    f["Legacy"] = (0x120, 128)
    f.update(_seq([f"Xmm{i}" for i in range(16)], 0x1A0, 16))
    f["VectorRegister"] = (0x300, 26 * 16)
    f["VectorControl"] = (0x4A0, 8)
    f.update(
        _seq(
            [
                "DebugControl",
                "LastBranchToRip",
                "LastBranchFromRip",
                "LastExceptionToRip",
                "LastExceptionFromRip",
            ],
            0x4A8,
            8,
        )
    )
    return f


def _x86_fields() -> dict[str, tuple[int, int]]:
    f: dict[str, tuple[int, int]] = {"ContextFlags": (0x00, 4)}
    f.update(_seq(["Dr0", "Dr1", "Dr2", "Dr3", "Dr6", "Dr7"], 0x04, 4))
    # FLOATING_SAVE_AREA: 7 DWORDs, RegisterArea[80], Cr0NpxState (112 bytes)
    f["FloatSave"] = (0x1C, 112)
    f["FloatSave.RegisterArea"] = (0x1C + 28, 80)
    f.update(_seq(["SegGs", "SegFs", "SegEs", "SegDs"], 0x8C, 4))
    regs = ["Edi", "Esi", "Ebx", "Edx", "Ecx", "Eax", "Ebp", "Eip", "SegCs", "EFlags", "Esp", "SegSs"]
    f.update(_seq(regs, 0x9C, 4))
    f["ExtendedRegisters"] = (0xCC, 512)
    return f


#: winnt.h AMD64 CONTEXT (also the PAL's up to LastExceptionFromRip): 1232 bytes, 16-aligned.
AMD64_CONTEXT = ContextLayout(Arch.AMD64, "AMD64 CONTEXT", size=0x4D0, fields=_amd64_fields())

#: winnt.h x86 CONTEXT: 716 bytes, 4-aligned.
X86_CONTEXT = ContextLayout(Arch.X86, "x86 CONTEXT", size=0x2CC, fields=_x86_fields())


def _pal_xstate_tail() -> dict[str, tuple[int, int]]:
    f: dict[str, tuple[int, int]] = {}
    f["XStateFeaturesMask"] = (0x4D0, 8)
    f["XStateReserved0"] = (0x4D8, 8)
    f.update(_seq([f"Ymm{i}H" for i in range(16)], 0x4E0, 16))
    f.update(_seq([f"KMask{i}" for i in range(8)], 0x5E0, 8))
    f.update(_seq([f"Zmm{i}H" for i in range(16)], 0x620, 32))
    f.update(_seq([f"Zmm{i}" for i in range(16, 32)], 0x820, 64))
    return f


#: The PAL's AMD64 CONTEXT with the XSTATE / AVX / AVX-512 tail (pal.h of runtimes with AVX-512 context
#: support): 0xC20 = 3104 bytes; a prefix-compatible extension of :data:`AMD64_CONTEXT`.
AMD64_PAL_XSTATE = AMD64_CONTEXT.extended("PAL AMD64 CONTEXT (XSTATE, AVX-512)", 0xC20, _pal_xstate_tail())


def amd64_layout_for_size(size: int) -> ContextLayout:
    """The AMD64 layout a runtime whose sizeof(CONTEXT) is ``size`` uses (known sizes get their fields)."""
    if size == AMD64_PAL_XSTATE.size:
        return AMD64_PAL_XSTATE
    if size > AMD64_PAL_XSTATE.size:
        return AMD64_PAL_XSTATE.with_size(size)
    return AMD64_CONTEXT.with_size(size)


#: The Linux x64 CONTEXT of each known runtime, by version prefix: .NET Core 3.1's pal.h ends the AMD64
#: CONTEXT at LastExceptionFromRip (1232 bytes); .NET 8's appends the XSTATE / AVX / AVX-512 tail (3104).
RUNTIME_CONTEXT_LAYOUTS: Mapping[str, ContextLayout] = MappingProxyType(
    {"3.": AMD64_CONTEXT, "8.": AMD64_PAL_XSTATE}
)


def runtime_context_layout(version: str) -> ContextLayout | None:
    """The CONTEXT layout of runtime ``version`` (e.g. "8.0.4"); None when the harness does not know it."""
    for prefix, layout in RUNTIME_CONTEXT_LAYOUTS.items():
        if version.startswith(prefix):
            return layout
    return None


def runtime_context_size(version: str) -> int | None:
    """sizeof(CONTEXT) of the runtime ``version``; None when the harness does not know it."""
    layout = runtime_context_layout(version)
    return layout.size if layout is not None else None
