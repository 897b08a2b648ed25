"""CFI from .eh_frame with pyelftools: the header index, build-ids, load bias, expressions, one step."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
from elftools.dwarf.callframe import CFARule, RegisterRule

from emu.cfi import CfiError, CfiRow, CfiTable, cfi_step, load_bias, read_elf
from emu.memory import CaptureMemory

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


def readelf_build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=True).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert found is not None
    return found.group(1)


def test_build_id_agrees_with_readelf(program: Path) -> None:
    assert read_elf(str(program)).build_id == readelf_build_id(program)


@pytest.mark.parametrize("which", ["program", "libc"])
def test_the_header_index_finds_the_same_rows_as_a_full_parse(program: Path, which: str) -> None:
    path = program if which == "program" else LIBC
    if not path.exists():
        pytest.skip(f"{path} is absent")
    elf = read_elf(str(path))
    assert elf.eh_frame is not None and elf.eh_frame_hdr is not None
    indexed = CfiTable(elf.eh_frame, elf.eh_frame_vaddr, elf.eh_frame_hdr, elf.eh_frame_hdr_vaddr)
    parsed = CfiTable(elf.eh_frame, elf.eh_frame_vaddr)
    starts = [start for start, _size, _name in elf.symbols][:: max(1, len(elf.symbols) // 200)]
    checked = 0
    for start in starts:
        a, b = indexed.row_for(start + 1), parsed.row_for(start + 1)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.start, a.end, repr(a.cfa)) == (b.start, b.end, repr(b.cfa))
            checked += 1
    assert checked > 0


def test_load_bias_from_a_mapping() -> None:
    loads = [(0, 0, 0x1000, 0x1000), (0x1000, 0x1000, 0x2000, 0x2000)]
    assert load_bias(loads, 0x5555_0000_0000, 0) == 0x5555_0000_0000
    assert load_bias(loads, 0x5555_0000_1000, 0x1000) == 0x5555_0000_0000
    non_pie = [(0, 0x40_0000, 0x1000, 0x1000)]
    assert load_bias(non_pie, 0x40_0000, 0) == 0


def test_a_plt_style_cfa_expression() -> None:
    # CFA = rsp + 8 + ((rip & 15) >= 11) << 3 : glibc's .plt rule
    expr = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    ret = 0x4000
    mem = CaptureMemory([(0x1000, ret.to_bytes(8, "little") * 4)])
    row = CfiRow(
        start=0,
        end=16,
        cfa=CFARule(expr=cast(Any, list(expr))),
        rules={16: RegisterRule("OFFSET", -8)},
        ra_register=16,
    )
    out = cfi_step(row, {"rsp": 0x1000, "rip": 0x100C}, mem)
    assert out["rsp"] == 0x1000 + 8 + 8 and out["rip"] == ret


def test_undefined_return_address_gives_ip_zero() -> None:
    row = CfiRow(
        start=0, end=16, cfa=CFARule(reg=7, offset=8), rules={16: RegisterRule("UNDEFINED")}, ra_register=16
    )
    assert cfi_step(row, {"rsp": 0x1000, "rip": 5}, CaptureMemory([]))["rip"] == 0


def test_a_rule_needing_an_unknown_register_or_missing_memory_is_a_cfi_error() -> None:
    row = CfiRow(
        start=0, end=16, cfa=CFARule(reg=6, offset=16), rules={16: RegisterRule("OFFSET", -8)}, ra_register=16
    )
    with pytest.raises(CfiError, match="whose value is unknown"):
        cfi_step(row, {"rsp": 0x1000, "rip": 5}, CaptureMemory([]))
    with pytest.raises(CfiError, match="outside the capture"):
        cfi_step(row, {"rsp": 0x1000, "rbp": 0x2000, "rip": 5}, CaptureMemory([]))


def test_malformed_eh_frame_is_a_cfi_error() -> None:
    with pytest.raises(CfiError, match="malformed"):
        CfiTable(b"\x10\x00\x00\x00" + b"\xff" * 12, 0x1000).row_for(0x1000)


def test_read_elf_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    """A capture names the module files a replay opens: a FIFO would block the read for ever."""
    fifo = tmp_path / "libhang.so"
    os.mkfifo(fifo)
    with pytest.raises(CfiError, match=r"libhang.so: not a regular file$"):
        read_elf(str(fifo))
    with pytest.raises(CfiError, match=r"^/dev/null: not a regular file$"):
        read_elf("/dev/null")
