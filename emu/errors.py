"""Errors of the emulator. Everything a user can meet is a :class:`HarnessError` with one line."""

from __future__ import annotations

from conformance.core.errors import HarnessError, InputError

__all__ = ["CaptureFormatError", "EmuError", "EmulationFault", "MemoryFault"]


class EmuError(HarnessError):
    """A failure of the emulator (a capture that cannot be read, an emulation that cannot go on)."""


class CaptureFormatError(EmuError, InputError):
    """A truncated, corrupt or hostile capture file: ``FILE: offset N: what`` or ``FILE: FIELD: what``
    (input: exit 2)."""


class MemoryFault(EmuError):
    """An access to bytes the capture does not hold (never read as zeros)."""

    def __init__(self, address: int, size: int, reason: str) -> None:
        super().__init__(f"{reason}: {size} byte(s) at {address:#x}")
        self.address = address
        self.size = size
        self.reason = reason


class EmulationFault(EmuError):
    """Emulation stopped for a reason that is not a clean end (fault, budget, forbidden code)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
