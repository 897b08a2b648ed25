"""Frames v1: the framed binary sidecar format (``docs/design.md`` "Frames"), the twin of
``conformance/native/include/profharness/frames.h``.

Layout, little-endian: a 16-byte file header (magic ``PHFRAMES``, u16 version 1, u16 flags, u32 reserved),
then frames, each a 12-byte header (u32 payload length, u32 CRC-32 of the payload as :func:`zlib.crc32`
computes it, u16 frame type, u16 reserved) and the payload. A frame is referred to by its file offset (of its
header) or its index.

The native writer puts each frame out with one ``write(2)``, so a killed process leaves at most one torn frame
at the end. :func:`parse_frames` keeps every complete frame and stops at the first torn or corrupt one with a
one-line ``stopped`` note naming the file, the frame's index and offset and what is wrong; only a file that is
not a frames file at all (bad magic, unknown version, a header cut short) raises :class:`FramesError`.
:class:`FrameWriter` writes the same format (tests; a Python producer).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from conformance.core.errors import HarnessError
from conformance.core.fsio import file_header

__all__ = [
    "FILE_HEADER_SIZE",
    "FRAME_HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "BinaryFrame",
    "FrameFile",
    "FrameReader",
    "FrameWriter",
    "FramesError",
    "encode_file_header",
    "encode_frame",
    "parse_frames",
    "read_frames",
]

MAGIC = b"PHFRAMES"
VERSION = 1
_FILE_HEADER = struct.Struct("<8sHHI")
_FRAME_HEADER = struct.Struct("<IIHH")
FILE_HEADER_SIZE = _FILE_HEADER.size  # 16
FRAME_HEADER_SIZE = _FRAME_HEADER.size  # 12


class FramesError(HarnessError):
    """Not a frames v1 file (bad magic, another version, a file header cut short), or a reference to a frame
    the file does not hold."""


@dataclass(frozen=True)
class BinaryFrame:
    """One complete frame: its index, the file offset of its header, its type and payload."""

    index: int
    offset: int
    type: int
    payload: bytes


@dataclass(frozen=True)
class FrameFile:
    """The complete frames of one file. ``stopped`` is ``None`` when the file ended at a frame boundary, else
    one line saying where reading stopped and why (a torn frame at the end, a CRC mismatch, a nonzero reserved
    field); ``size`` is the file's length in bytes."""

    name: str
    flags: int
    frames: tuple[BinaryFrame, ...]
    stopped: str | None
    size: int

    def at_offset(self, offset: int) -> BinaryFrame:
        """The frame whose header starts at ``offset``; :class:`FramesError` if none does."""
        frame = self._by_offset().get(offset)
        if frame is None:
            raise FramesError(self._missing(f"offset {offset}"))
        return frame

    def at_index(self, index: int) -> BinaryFrame:
        """The frame with this index; :class:`FramesError` if the file holds no such complete frame."""
        if 0 <= index < len(self.frames):
            return self.frames[index]
        raise FramesError(self._missing(f"index {index}"))

    def _by_offset(self) -> dict[int, BinaryFrame]:
        cached: dict[int, BinaryFrame] | None = self.__dict__.get("_offsets")
        if cached is None:
            cached = {f.offset: f for f in self.frames}
            object.__setattr__(self, "_offsets", cached)
        return cached

    def _missing(self, what: str) -> str:
        why = f" ({self.stopped})" if self.stopped else ""
        return f"{self.name}: no complete frame at {what}: the file holds {len(self.frames)} frames{why}"


def encode_file_header(flags: int = 0) -> bytes:
    return _FILE_HEADER.pack(MAGIC, VERSION, flags, 0)


def encode_frame(frame_type: int, payload: bytes) -> bytes:
    """One frame (header and payload) as the native writer writes it."""
    return _FRAME_HEADER.pack(len(payload), zlib.crc32(payload), frame_type, 0) + payload


def _frame_at(data: bytes | memoryview, offset: int, index: int, where: str) -> BinaryFrame | str:
    """The complete, intact frame whose header starts at ``data[offset]``, or one line (``where`` first)
    saying why there is none: torn (the data ends inside it), a nonzero reserved field, a CRC-32 mismatch."""
    end = len(data)
    if end - offset < FRAME_HEADER_SIZE:
        return f"{where}: torn: {end - offset} bytes of its 12-byte header, the file ends there"
    length, crc, frame_type, reserved = _FRAME_HEADER.unpack_from(data, offset)
    start = offset + FRAME_HEADER_SIZE
    if end - start < length:
        return f"{where}: torn: {end - start} of its {length} payload bytes, the file ends there"
    if reserved != 0:
        return f"{where}: corrupt: reserved field {reserved}, expected 0"
    payload = bytes(data[start : start + length])
    actual = zlib.crc32(payload)
    if actual != crc:
        return f"{where}: corrupt: CRC-32 {actual:#010x} of its {length} bytes, header says {crc:#010x}"
    return BinaryFrame(index, offset, frame_type, payload)


def parse_frames(data: bytes, name: str = "<frames>") -> FrameFile:
    """The complete frames of ``data`` (a whole frames file); see the module's docstring."""
    _magic, _version, flags, _reserved = file_header(
        data, _FILE_HEADER, kind="frames", magic=MAGIC, version=VERSION, name=name, error=FramesError
    )
    frames: list[BinaryFrame] = []
    view = memoryview(data)
    offset = FILE_HEADER_SIZE
    stopped: str | None = None
    end = len(data)
    while offset < end:
        got = _frame_at(view, offset, len(frames), f"{name}: frame {len(frames)} at offset {offset}")
        if isinstance(got, str):
            stopped = got
            break
        frames.append(got)
        offset += FRAME_HEADER_SIZE + len(got.payload)
    return FrameFile(name, flags, tuple(frames), stopped, len(data))


class FrameReader:
    """Frames of one file looked up by the offsets records name, each read and checked on its own (header,
    reserved field, length, CRC-32): a damaged frame loses itself alone, never the frames after it, and only
    the frames asked for are read (memory stays bounded by one frame however long the file). The file
    header is checked when it is made (:class:`FramesError`: not a frames v1 file, or unreadable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with path.open("rb") as handle:
                head = handle.read(FILE_HEADER_SIZE)
                self.size = os.fstat(handle.fileno()).st_size
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
            raise FramesError(f"{path}: cannot read frames file: {getattr(exc, 'strerror', None) or exc}"
                              ) from None  # fmt: skip
        parse_frames(head, str(path))  # the file header alone: magic and version

    def at_offset(self, offset: int) -> BinaryFrame:
        """The frame whose header starts at ``offset`` (its ``index`` is -1: unknown without reading every
        frame before it); :class:`FramesError`, one line, when there is no complete, intact frame there."""
        where = f"{self.path}: frame at offset {offset}"
        if offset < FILE_HEADER_SIZE or offset >= self.size:
            raise FramesError(f"{where}: outside the file's frames ({FILE_HEADER_SIZE}..{self.size})")
        try:
            with self.path.open("rb") as handle:
                handle.seek(offset)
                head = handle.read(FRAME_HEADER_SIZE)
                length = _FRAME_HEADER.unpack(head)[0] if len(head) == FRAME_HEADER_SIZE else 0
                if length > self.size - offset - FRAME_HEADER_SIZE:  # read no more than the file holds
                    raise FramesError(f"{where}: torn or corrupt: its length {length} runs past the file's "
                                      f"end ({self.size} bytes)")  # fmt: skip
                chunk = head + handle.read(length)
        except OSError as exc:
            raise FramesError(f"{where}: cannot read it: {exc.strerror or exc}") from None
        got = _frame_at(chunk, 0, -1, where)  # the checks of parse_frames, on this frame alone
        if isinstance(got, str):
            raise FramesError(got)
        return BinaryFrame(-1, offset, got.type, got.payload)


def read_frames(path: Path) -> FrameFile:
    """:func:`parse_frames` of a file; an unreadable file is a :class:`FramesError` naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FramesError(f"{path}: cannot read frames file: {exc.strerror or exc}") from None
    return parse_frames(data, str(path))


class FrameWriter:
    """Writes a frames v1 file (tests; a Python producer): the header at construction, one frame per
    :meth:`append`, which returns the frame's offset."""

    def __init__(self, out: BinaryIO, flags: int = 0) -> None:
        self._out = out
        self._offset = FILE_HEADER_SIZE
        self.count = 0
        out.write(encode_file_header(flags))

    def append(self, frame_type: int, payload: bytes) -> int:
        at = self._offset
        data = encode_frame(frame_type, payload)
        self._out.write(data)
        self._offset += len(data)
        self.count += 1
        return at

    def extend(self, frames: Iterable[tuple[int, bytes]]) -> list[int]:
        return [self.append(t, p) for t, p in frames]
