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

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from conformance.core.errors import HarnessError

__all__ = [
    "FILE_HEADER_SIZE",
    "FRAME_HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "BinaryFrame",
    "FrameFile",
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


def parse_frames(data: bytes, name: str = "<frames>") -> FrameFile:
    """The complete frames of ``data`` (a whole frames file); see the module's docstring."""
    if len(data) < FILE_HEADER_SIZE:
        raise FramesError(
            f"{name}: not a frames file: {len(data)} bytes, shorter than the 16-byte file header"
        )
    magic, version, flags, _reserved = _FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FramesError(f"{name}: not a frames file: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FramesError(f"{name}: frames version {version}, this reader reads version {VERSION}")
    frames: list[BinaryFrame] = []
    view = memoryview(data)
    offset = FILE_HEADER_SIZE
    stopped: str | None = None
    end = len(data)
    while offset < end:
        where = f"{name}: frame {len(frames)} at offset {offset}"
        if end - offset < FRAME_HEADER_SIZE:
            stopped = f"{where}: torn: {end - offset} bytes of its 12-byte header, the file ends there"
            break
        length, crc, frame_type, reserved = _FRAME_HEADER.unpack_from(data, offset)
        start = offset + FRAME_HEADER_SIZE
        if end - start < length:
            stopped = f"{where}: torn: {end - start} of its {length} payload bytes, the file ends there"
            break
        if reserved != 0:
            stopped = f"{where}: corrupt: reserved field {reserved}, expected 0"
            break
        payload = bytes(view[start : start + length])
        actual = zlib.crc32(payload)
        if actual != crc:
            stopped = (
                f"{where}: corrupt: CRC-32 {actual:#010x} of its {length} bytes, header says {crc:#010x}"
            )
            break
        frames.append(BinaryFrame(len(frames), offset, frame_type, payload))
        offset = start + length
    return FrameFile(name, flags, tuple(frames), stopped, len(data))


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
