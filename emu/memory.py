"""What memory a capture holds: which bytes exist, pages of them, reads that fail with a reason.

This is the seam between a capture and any backend (the unicorn machine, the pure-Python unwinder): it
knows nothing of unicorn. A byte exists when a memory segment of the capture holds it, or when the
emulation wrote it (stores below SP while a stub runs). Any other byte does not exist: reading it raises
:class:`~emu.errors.MemoryFault` naming the first missing address; it is never read as zero. Writes are
allowed only where the process had writable memory (the capture's module map says so) or where the
capture holds bytes.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from emu.errors import EmuError, MemoryFault

__all__ = ["PAGE_SIZE", "CaptureMemory", "PageImage", "page_base"]

PAGE_SIZE = 4096
_U64 = struct.Struct("<Q")
_U64_PAIR = struct.Struct("<QQ")


def page_base(address: int) -> int:
    return address & ~(PAGE_SIZE - 1)


@dataclass(frozen=True)
class PageImage:
    """One 4 KiB page as a backend maps it: ``data`` has the existing bytes (zeros elsewhere, which a
    backend must never let be read: check :meth:`CaptureMemory.missing` when ``complete`` is False)."""

    address: int
    data: bytes
    complete: bool
    writable: bool


class CaptureMemory:
    """The bytes of a capture by address, plus an overlay of what an emulation wrote."""

    def __init__(self, ranges: Iterable[tuple[int, bytes]], writable: Iterable[tuple[int, int]] = ()) -> None:
        rows = sorted((addr, bytes(data)) for addr, data in ranges if data)
        for (a0, d0), (a1, _d1) in itertools.pairwise(rows):
            if a1 < a0 + len(d0):
                raise EmuError(f"memory ranges at {a0:#x} and {a1:#x} overlap")
        self._starts = [a for a, _ in rows]
        self._ends = [a + len(d) for a, d in rows]
        self._data = [d for _, d in rows]
        self._writable = sorted((s, e) for s, e in writable if e > s)
        self._writable_starts = [s for s, _ in self._writable]
        self._written: dict[int, int] = {}
        #: the segment :meth:`read_u64` read last (start, end, bytes): a walk reads stack word after word
        self._hot: tuple[int, int, bytes] = (0, 0, b"")

    def fork(self) -> CaptureMemory:
        """The same captured bytes with an empty write overlay (one per emulation run)."""
        other = CaptureMemory.__new__(CaptureMemory)
        other._starts, other._ends, other._data = self._starts, self._ends, self._data
        other._writable, other._writable_starts = self._writable, self._writable_starts
        other._written = {}
        other._hot = self._hot
        return other

    # -- queries -----------------------------------------------------------------------------------
    def _segment(self, address: int) -> int | None:
        k = bisect.bisect_right(self._starts, address) - 1
        if k >= 0 and address < self._ends[k]:
            return k
        return None

    def has(self, address: int) -> bool:
        return address in self._written or self._segment(address) is not None

    def missing(self, address: int, size: int) -> int | None:
        """The first address of [address, address + size) the capture does not hold; None if all exist."""
        k = self._segment(address)
        if k is not None and address + size <= self._ends[k] and not self._written:
            return None
        for a in range(address, address + size):
            if not self.has(a):
                return a
        return None

    def writable(self, address: int, size: int) -> bool:
        k = bisect.bisect_right(self._writable_starts, address) - 1
        if k >= 0 and address + size <= self._writable[k][1]:
            return True
        return self.missing(address, size) is None

    def ranges(self) -> list[tuple[int, int]]:
        """The captured [start, end) ranges, by address."""
        return list(zip(self._starts, self._ends, strict=True))

    # -- reads and writes --------------------------------------------------------------------------
    def read(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address``, or :class:`MemoryFault` naming the first byte not captured."""
        if address < 0 or size < 0 or address + size > 2**64:
            raise MemoryFault(address, size, "address outside the 64-bit space")
        k = self._segment(address)
        if k is not None and address + size <= self._ends[k] and not self._written:
            off = address - self._starts[k]
            return self._data[k][off : off + size]
        gap = self.missing(address, size)
        if gap is not None:
            raise MemoryFault(address, size, f"byte {gap:#x} is not in the capture")
        out = bytearray()
        for a in range(address, address + size):
            if a in self._written:
                out.append(self._written[a])
            else:
                j = self._segment(a)
                assert j is not None
                out.append(self._data[j][a - self._starts[j]])
        return bytes(out)

    def read_u64(self, address: int) -> int:
        start, end, data = self._hot
        if start <= address and address + 8 <= end and not self._written:  # the segment read last holds it
            return int(_U64.unpack_from(data, address - start)[0])
        k = bisect.bisect_right(self._starts, address) - 1
        if k >= 0 and address + 8 <= self._ends[k] and not self._written:  # one segment holds it
            self._hot = (self._starts[k], self._ends[k], self._data[k])
            return int(_U64.unpack_from(self._data[k], address - self._starts[k])[0])
        return int.from_bytes(self.read(address, 8), "little")

    def read_u64_pair(self, address: int) -> tuple[int, int]:
        """The little-endian words at ``address`` and ``address + 8`` (:meth:`read_u64` of each, by one
        unpack where the segment read last holds both)."""
        start, end, data = self._hot
        if start <= address and address + 16 <= end and not self._written:
            first, second = _U64_PAIR.unpack_from(data, address - start)
            return first, second
        return self.read_u64(address), self.read_u64(address + 8)

    def write(self, address: int, data: bytes) -> None:
        """Store ``data`` in the overlay: those bytes exist from now on (an emulation's stores)."""
        if not self.writable(address, len(data)):
            raise MemoryFault(
                address, len(data), "write outside the process's writable memory and the capture"
            )
        for i, b in enumerate(data):
            self._written[address + i] = b

    # -- pages -------------------------------------------------------------------------------------
    def page(self, address: int) -> PageImage | None:
        """The 4 KiB page holding ``address``; None when the page holds no captured byte and the process
        could not write there (an access to it is outside the capture)."""
        base = page_base(address)
        buf = bytearray(PAGE_SIZE)
        covered = 0
        k = max(bisect.bisect_right(self._starts, base) - 1, 0)
        while k < len(self._starts) and self._starts[k] < base + PAGE_SIZE:
            lo = max(self._starts[k], base)
            hi = min(self._ends[k], base + PAGE_SIZE)
            if lo < hi:
                buf[lo - base : hi - base] = self._data[k][lo - self._starts[k] : hi - self._starts[k]]
                covered += hi - lo
            k += 1
        for a, b in self._written.items():
            if base <= a < base + PAGE_SIZE:
                buf[a - base] = b
        j = bisect.bisect_right(self._writable_starts, base) - 1
        writable = j >= 0 and base + PAGE_SIZE <= self._writable[j][1]
        if covered == 0 and not writable:
            return None
        return PageImage(address=base, data=bytes(buf), complete=covered == PAGE_SIZE, writable=writable)
