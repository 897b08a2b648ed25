"""emu.embed: a capture made self-contained with only the CFI entries its replay used.

The x64 gcc fixture (tests/emu/fixtures.py) is captured without CFI, so its replay must read the module files;
the embedded copy must then replay with no file at all, to the same result, and carry far less than the
whole sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import cfi
from emu.capture import read_capture
from emu.cfi import CfiError, CfiRow, read_elf, table_for
from emu.embed import EmbedError, embed_cfi, trim_table
from emu.replay import replay, replay_capture
from emu.unwind import StopKind
from tests.emu.fixtures import X64

needs_gcc = pytest.mark.skipif(not X64.compiler_available(), reason="gcc is not installed")
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@needs_gcc
@pytest.mark.parametrize("place", X64.places)
def test_embedded_copy_replays_alone_to_the_same_result(program: Path, tmp_path: Path, place: str) -> None:
    stopped = X64.capture_at(program, place, tmp_path / "bare.phcap", embed_cfi=False)
    bare = read_capture(tmp_path / "bare.phcap")
    assert bare.manifest.cfi == ()
    assert replay(bare, allow_disk=False).stop.kind is StopKind.MODULE_UNAVAILABLE
    report = embed_cfi(tmp_path / "bare.phcap", tmp_path / "out" / "copy.phcap")
    alone = replay_capture(report.path, allow_disk=False)
    # the program's own frames, found with the embedded entries only
    assert [(f.ip, f.sp) for f in alone.frames[: len(stopped.truth)]] == list(stopped.truth)
    assert alone.model_copy(update={"capture": ""}) == replay(bare).model_copy(update={"capture": ""})
    assert set(report.modules) == {program.name, "libc.so.6"}
    # a few FDEs, not the sections: libc's .eh_frame alone is over 100 KiB
    assert all(0 < n <= 8 for n in report.modules.values())
    assert report.size_after - report.size_before < 4096


@needs_gcc
def test_embedding_refuses_to_overwrite_its_source(program: Path, tmp_path: Path) -> None:
    X64.capture_at(program, "native", tmp_path / "n.phcap", embed_cfi=False)
    with pytest.raises(EmbedError, match="another file"):
        embed_cfi(tmp_path / "n.phcap", tmp_path / "n.phcap")


def test_trimmed_table_answers_every_lookup_made_as_the_whole_one() -> None:
    elf = read_elf(LIBC)
    assert elf.eh_frame is not None and elf.eh_frame_hdr is not None
    cfi.clear_caches()
    whole = table_for(elf.eh_frame, elf.eh_frame_vaddr, elf.eh_frame_hdr, elf.eh_frame_hdr_vaddr)
    assert whole.decoded_entries() == []
    # lookups: inside some functions, and in gaps between them
    symbols = [s for s in elf.symbols if s[1] > 16][:: max(1, len(elf.symbols) // 40)]
    pcs = [start + size // 2 for start, size, _ in symbols] + [start - 1 for start, _, _ in symbols]
    rows = {pc: whole.row_for(pc) for pc in pcs}
    trimmed = trim_table(whole, elf.eh_frame_hdr_vaddr)
    assert trimmed.fdes == len(whole.decoded_entries()) <= len(pcs)
    assert len(trimmed.eh_frame) < len(elf.eh_frame)
    small = table_for(
        trimmed.eh_frame, trimmed.eh_frame_vaddr, trimmed.eh_frame_hdr, trimmed.eh_frame_hdr_vaddr
    )
    for pc, row in rows.items():
        got = small.row_for(pc)
        if row is None:
            assert got is None, hex(pc)
        else:
            assert got is not None and _shape(got) == _shape(row), hex(pc)
    cfi.clear_caches()


def _shape(row: CfiRow) -> tuple[object, ...]:
    """A row as comparable values (pyelftools' rule objects compare by identity)."""
    rules = sorted((k, r.type, r.arg) for k, r in row.rules.items())
    return row.start, row.end, row.cfa.reg, row.cfa.offset, row.cfa.expr, rules, row.ra_register


def test_a_table_nothing_was_looked_up_in_is_not_embedded() -> None:
    elf = read_elf(LIBC)
    assert elf.eh_frame is not None
    cfi.clear_caches()
    table = table_for(elf.eh_frame, elf.eh_frame_vaddr, elf.eh_frame_hdr, elf.eh_frame_hdr_vaddr)
    with pytest.raises(CfiError, match="no FDE"):
        trim_table(table, elf.eh_frame_hdr_vaddr)
