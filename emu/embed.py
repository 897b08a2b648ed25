"""Make a capture self-contained: embed the call frame information its replay reads from module files.

A live capture names its modules (path and build-id) and leaves their ``.eh_frame`` on disk, where the replay
reads it (checked against the build-id). A capture meant to travel (a test fixture, a bug report) must carry
that CFI itself, and a whole ``.eh_frame`` of libcoreclr is about 250 KiB compressed. :func:`embed_cfi`
keeps only what the replay used, as breakpad's symbol files keep only the unwind rules: it replays the
capture with the files on disk, notes every FDE the walk decoded (and their CIEs), and embeds per module

* an ``.eh_frame`` of the module's own bytes for those entries, at their own offsets (the FDEs' pc-relative
  addresses and CIE pointers stay valid), zeros elsewhere, cut to the span they cover;
* an ``.eh_frame_hdr`` search table that lists those FDEs only.

A lookup of any address the replay asked about finds the same FDE (or the same absence of one) as with the
whole section: the search table keeps every FDE the walk looked at, and an FDE that was not looked at was
never the nearest one below an address the walk asked about. The copy is then replayed without disk files
and must give the same result, field for field; otherwise nothing is written.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from emu import cfi
from emu.capture import EmbeddedCfi, SegmentPayload, read_capture, write_capture
from emu.cfi import (
    DW_EH_PE_DATAREL_SDATA4,
    DW_EH_PE_PCREL_SDATA4,
    DW_EH_PE_UDATA4,
    EH_FRAME_HDR_VERSION,
    CfiError,
    CfiTable,
)
from emu.errors import EmuError
from emu.replay import ReplayResult, replay
from emu.unwind import CodeMap, unwind

__all__ = ["EmbedError", "EmbedReport", "embed_cfi", "trim_table"]


class EmbedError(EmuError):
    """A capture whose CFI cannot be embedded (one line naming the capture and the reason)."""


@dataclass(frozen=True)
class TrimmedCfi:
    """A module's CFI cut to the entries a replay used."""

    eh_frame: bytes
    eh_frame_vaddr: int
    eh_frame_hdr: bytes
    eh_frame_hdr_vaddr: int
    fdes: int


@dataclass(frozen=True)
class EmbedReport:
    path: Path
    #: module basename -> FDEs embedded
    modules: dict[str, int]
    size_before: int
    size_after: int


def _entry_span(data: bytes, offset: int) -> tuple[int, int, int]:
    """(end, id field offset, id field size) of the CIE or FDE at ``offset`` (32- or 64-bit DWARF length)."""
    if offset + 4 > len(data):
        raise CfiError(f".eh_frame entry at {offset:#x} runs past the section")
    (length,) = struct.unpack_from("<I", data, offset)
    if length == 0xFFFFFFFF:
        if offset + 12 > len(data):
            raise CfiError(f".eh_frame entry at {offset:#x} runs past the section")
        (length,) = struct.unpack_from("<Q", data, offset + 4)
        start, id_size = offset + 12, 8
    else:
        start, id_size = offset + 4, 4
    end = start + length
    if length < id_size or end > len(data):
        raise CfiError(f".eh_frame entry at {offset:#x}: length {length} runs past the section")
    return end, start, id_size


def trim_table(table: CfiTable, hdr_vaddr: int | None) -> TrimmedCfi:
    """``table``'s section reduced to the FDEs it decoded so far, their CIEs, and a search table of them.

    ``hdr_vaddr`` is the link-time address of the module's ``.eh_frame_hdr`` (None when it has none: the new
    search table is then placed at the section's own address; only differences of addresses matter)."""
    data = table.eh_frame
    used = table.decoded_entries()
    if not used:
        raise CfiError("no FDE of this module was used")
    spans: list[tuple[int, int]] = []
    for _loc, offset in used:
        end, id_at, id_size = _entry_span(data, offset)
        spans.append((offset, end))
        pointer = int.from_bytes(data[id_at : id_at + id_size], "little")
        cie = id_at - pointer
        if pointer == 0 or not 0 <= cie < offset:
            raise CfiError(f"FDE at .eh_frame offset {offset:#x} points to no CIE")
        spans.append((cie, _entry_span(data, cie)[0]))
    lo = min(s for s, _ in spans)
    hi = max(e for _, e in spans)
    body = bytearray(hi - lo)
    for s, e in spans:
        body[s - lo : e - lo] = data[s:e]
    eh_vaddr = table.vaddr + lo
    base = hdr_vaddr if hdr_vaddr is not None else eh_vaddr
    pairs = sorted((loc - base, table.vaddr + off - base) for loc, off in used)
    # eh_frame_ptr pcrel|sdata4, fde_count udata4, table datarel|sdata4 (the one table encoding emu.cfi reads)
    encodings = (DW_EH_PE_PCREL_SDATA4, DW_EH_PE_UDATA4, DW_EH_PE_DATAREL_SDATA4)
    hdr = bytearray(struct.pack("<BBBB", EH_FRAME_HDR_VERSION, *encodings))
    try:
        hdr += struct.pack("<iI", eh_vaddr - (base + 4), len(pairs))
        for loc, fde in pairs:
            hdr += struct.pack("<ii", loc, fde)
    except struct.error:
        raise CfiError("an FDE lies more than 2 GiB from .eh_frame_hdr") from None
    return TrimmedCfi(bytes(body), eh_vaddr, bytes(hdr), base, len(pairs))


def _comparable(result: ReplayResult) -> str:
    return result.model_copy(update={"capture": ""}).model_dump_json()


def embed_cfi(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> EmbedReport:
    """Write to ``out`` a copy of the capture ``source`` with the CFI its replay used embedded (see the
    module docstring). The copy replays without disk files to the same result, or :class:`EmbedError`."""
    src = Path(source)
    capture = read_capture(src)
    cfi.clear_caches()  # fresh tables: only this replay's FDEs count as used
    try:
        before = replay(capture, allow_disk=True)
        tables = _code_tables(unwind(capture, allow_disk=True).code)
    finally:
        cfi.clear_caches()
    man = capture.manifest
    already = {e.path for e in man.cfi}
    payloads = [
        SegmentPayload(
            name=s.name, kind=s.kind, role=s.role, data=capture.segments[s.name], address=s.address
        )
        for s in man.segments
    ]
    embedded = list(man.cfi)
    modules: dict[str, int] = {}
    for path, (table, bias, build_id, hdr_vaddr) in sorted(tables.items()):
        if path in already or not table.decoded_entries():
            continue
        try:
            trimmed = trim_table(table, hdr_vaddr)
        except CfiError as exc:
            raise EmbedError(f"{src}: {path}: {exc}") from None
        n = len(embedded)
        payloads.append(SegmentPayload(name=f"cfi.{n}.eh_frame", kind="blob", role="eh_frame",
                                       data=trimmed.eh_frame))  # fmt: skip
        payloads.append(SegmentPayload(name=f"cfi.{n}.eh_frame_hdr", kind="blob", role="eh_frame_hdr",
                                       data=trimmed.eh_frame_hdr))  # fmt: skip
        embedded.append(
            EmbeddedCfi(
                path=path, build_id=build_id, load_bias=bias, eh_frame_vaddr=trimmed.eh_frame_vaddr,
                eh_frame=f"cfi.{n}.eh_frame", eh_frame_hdr_vaddr=trimmed.eh_frame_hdr_vaddr,
                eh_frame_hdr=f"cfi.{n}.eh_frame_hdr",
            )
        )  # fmt: skip
        modules[os.path.basename(path)] = trimmed.fdes
    fields = man.model_dump(mode="python", exclude={"segments"})
    fields["cfi"] = tuple(e.model_dump(mode="python") for e in embedded)
    target = Path(out)
    if target.resolve() == src.resolve():
        raise EmbedError(f"{src}: the copy must go to another file")
    staging = target.with_name(f".{target.name}.embed")
    write_capture(staging, fields, payloads)
    try:
        after = replay(read_capture(staging), allow_disk=False)
        if _comparable(after) != _comparable(before):
            raise EmbedError(
                f"{src}: the copy with embedded CFI replays differently (stop {after.stop.kind.value}: "
                f"{after.stop.detail}; with the files: {before.stop.kind.value}); not written"
            )
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return EmbedReport(target, modules, src.stat().st_size, target.stat().st_size)


def _code_tables(code: CodeMap) -> dict[str, tuple[CfiTable, int, str | None, int | None]]:
    """path -> (table, load bias, build-id, .eh_frame_hdr address) of every module file ``code`` (a
    replay's code map) read CFI from."""
    out: dict[str, tuple[CfiTable, int, str | None, int | None]] = {}
    for path, (table, bias) in code.loaded_tables().items():
        module = next((m for m in code.modules if m.path == path), None)
        hdr_vaddr: int | None = None
        try:
            elf = cfi.read_elf(path)
        except CfiError:
            elf = None
        if elf is not None and elf.eh_frame_hdr is not None:
            hdr_vaddr = elf.eh_frame_hdr_vaddr
        out[path] = (table, bias, module.build_id if module is not None else None, hdr_vaddr)
    return out
