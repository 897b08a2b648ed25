"""The memory seam: which bytes exist, pages, reads that fail with a reason (never zeros); no unicorn."""

from __future__ import annotations

import pytest

from emu.errors import EmuError, MemoryFault
from emu.memory import PAGE_SIZE, CaptureMemory, page_base

BASE = 0x10_0000


def mem() -> CaptureMemory:
    return CaptureMemory(
        [
            (BASE + 0x10, bytes(range(1, 33))),
            (BASE + 0x30, b"\xaa" * 16),
            (BASE + 0x2000, b"\xbb" * PAGE_SIZE),
        ],
        writable=[(BASE + 0x3000, BASE + 0x5000)],
    )


def test_reads_inside_and_across_adjacent_ranges() -> None:
    m = mem()
    assert m.read(BASE + 0x10, 4) == bytes([1, 2, 3, 4])
    assert m.read(BASE + 0x2E, 4) == bytes([31, 32, 0xAA, 0xAA])  # two ranges that touch
    assert m.read_u64(BASE + 0x2000) == 0xBBBB_BBBB_BBBB_BBBB


@pytest.mark.parametrize("address", [BASE, BASE + 0x0F, BASE + 0x3C, BASE + 0x40, 2**64 - 4, 0])
def test_a_read_outside_the_capture_fails_with_the_first_missing_byte(address: int) -> None:
    with pytest.raises(MemoryFault) as info:
        mem().read(address, 8)
    assert isinstance(info.value, EmuError)
    assert "not in the capture" in info.value.reason or "64-bit" in info.value.reason
    assert info.value.address == address


def test_missing_names_the_first_gap() -> None:
    m = mem()
    assert m.missing(BASE + 0x10, 0x30) is None
    assert m.missing(BASE + 0x3C, 8) == BASE + 0x40


def test_pages_say_whether_they_are_complete() -> None:
    m = mem()
    partial = m.page(BASE + 0x15)
    assert partial is not None and partial.address == BASE and not partial.complete
    assert partial.data[0x10:0x14] == bytes([1, 2, 3, 4])
    full = m.page(BASE + 0x2FFF)
    assert full is not None and full.complete and full.address == BASE + 0x2000
    assert m.page(BASE + 0x1000) is None  # nothing captured, not writable: outside the capture
    writable = m.page(BASE + 0x3000)
    assert writable is not None and writable.writable and not writable.complete
    assert page_base(BASE + 0x3FFF) == BASE + 0x3000


def test_writes_make_bytes_exist_only_where_the_process_could_write() -> None:
    m = mem()
    run = m.fork()
    run.write(BASE + 0x3100, b"\x01\x02")
    assert run.read(BASE + 0x3100, 2) == b"\x01\x02"
    with pytest.raises(MemoryFault):
        run.read(BASE + 0x3100, 3)  # the third byte was never written nor captured
    with pytest.raises(MemoryFault, match="write outside"):
        run.write(BASE + 0x1000, b"\x00")
    run.write(BASE + 0x10, b"\xff")  # captured bytes may be overwritten
    assert run.read(BASE + 0x10, 2) == b"\xff\x02"
    # the fork's writes do not reach the capture or another fork
    assert m.read(BASE + 0x10, 1) == b"\x01"
    with pytest.raises(MemoryFault):
        m.fork().read(BASE + 0x3100, 1)


def test_overlapping_ranges_are_refused() -> None:
    with pytest.raises(EmuError, match="overlap"):
        CaptureMemory([(BASE, b"x" * 16), (BASE + 8, b"y" * 16)])
