"""The binary trace (issue 23; the writer is ``conformance/native/common/trace.cpp``, its layout in
``include/profharness/trace.h`` "Format"): a frames v1 file (:mod:`conformance.core.frames`) whose file
header carries the flag ``TRACE_FLAG`` and whose frames define interned strings, record shapes and threads
before the records that use them. :func:`decode` turns it back into exactly the dicts ``json.loads`` makes of
the JSON Lines trace the same writer would have written, so every reader judges the same records.

:func:`raw_records` is the one reader of a trace file of either format: (number, dict) of every complete
record, in file order; for a JSON Lines trace the number is the line, for a binary one the record's ordinal.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.core import interrupt
from conformance.core.errors import HarnessError
from conformance.core.frames import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, MAGIC, FramesError, parse_frames

__all__ = ["TRACE_FLAG", "VERSION_TEXT", "BinaryTrace", "decode", "is_binary", "raw_records", "read_binary"]

#: the frames file header's flags of a binary trace ("TR")
TRACE_FLAG = 0x5452
#: the first frame's payload: the record encoding's version
VERSION_TEXT = b"profharness-trace 1"
_INFO, _STRING, _SHAPE, _THREAD, _RECORD = 1, 2, 3, 4, 5
_DOUBLE = struct.Struct("<d")
_FRAME = struct.Struct("<IIHH")  # a frame's header (frames v1): length, CRC-32, type, reserved

# a decoded type: (code, keys, types) for an object, (code,) otherwise
_Type = tuple[Any, ...]


class _Corrupt(Exception):
    """A frame whose content does not decode (the reader says which record)."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _type(buf: bytes, pos: int, strings: list[str]) -> tuple[_Type, int]:
    code = buf[pos]
    pos += 1
    if code != 0x6F:  # 'o'
        if code not in b"ntfiudsa":
            raise _Corrupt(f"unknown type byte {code:#04x}")
        return (code,), pos
    n, pos = _varint(buf, pos)
    keys: list[str] = []
    types: list[_Type] = []
    for _ in range(n):
        k, pos = _varint(buf, pos)
        keys.append(strings[k])
        t, pos = _type(buf, pos, strings)
        types.append(t)
    return (code, tuple(keys), tuple(types)), pos


def _value(t: _Type, buf: bytes, pos: int, strings: list[str]) -> tuple[Any, int]:
    code = t[0]
    if code == 0x75:  # u
        return _varint(buf, pos)
    if code == 0x73:  # s
        k, pos = _varint(buf, pos)
        return strings[k], pos
    if code == 0x69:  # i
        v, pos = _varint(buf, pos)
        return (v >> 1) ^ -(v & 1), pos
    if code == 0x6F:  # o
        out: dict[str, Any] = {}
        for key, sub in zip(t[1], t[2], strict=True):
            out[key], pos = _value(sub, buf, pos, strings)
        return out, pos
    if code == 0x6E:  # n
        return None, pos
    if code == 0x74:  # t
        return True, pos
    if code == 0x66:  # f
        return False, pos
    if code == 0x64:  # d
        return _DOUBLE.unpack_from(buf, pos)[0], pos + 8
    # a: each element's type, then its value
    n, pos = _varint(buf, pos)
    items: list[Any] = []
    for _ in range(n):
        sub, pos = _type(buf, pos, strings)
        v, pos = _value(sub, buf, pos, strings)
        items.append(v)
    return items, pos


def _array(buf: bytes, pos: int, strings: list[str]) -> tuple[list[Any], int]:
    return _value((0x61,), buf, pos, strings)


_Decoder = Any  # (buf, pos, strings, seq, kind, os_tid, tid) -> (record, pos)


def _compile(kind: str, fields: _Type) -> _Decoder:
    """A shape's decoder as straight-line Python (a record's fields read in the shape's order, one-byte
    varints inline, the dict built as one literal): several times faster than walking the type per record."""
    lines: list[str] = []
    counter = iter(range(1 << 30))

    def read(t: _Type, indent: str) -> str:
        """Code reading one value of type t onto a fresh local; returns the expression of the value."""
        code = t[0]
        if code == 0x6E:
            return "None"
        if code == 0x74:
            return "True"
        if code == 0x66:
            return "False"
        v = f"v{next(counter)}"
        if code in (0x75, 0x69, 0x73):  # u i s: a varint, its loop inline (a call costs more than a byte)
            lines.append(f"{indent}{v} = buf[pos]; pos += 1")
            lines.append(f"{indent}if {v} >= 128:")
            lines.append(f"{indent}    {v} &= 127; s = 7")
            lines.append(f"{indent}    while True:")
            lines.append(f"{indent}        b = buf[pos]; pos += 1; {v} |= (b & 127) << s")
            lines.append(f"{indent}        if b < 128: break")
            lines.append(f"{indent}        s += 7")
            if code == 0x69:
                return f"(({v} >> 1) ^ -({v} & 1))"
            if code == 0x73:
                return f"S[{v}]"
            return v
        if code == 0x64:
            lines.append(f"{indent}{v} = D(buf, pos)[0]; pos += 8")
            return v
        if code == 0x61:
            lines.append(f"{indent}{v}, pos = A(buf, pos, S)")
            return v
        members = [f"{key!r}: {read(sub, indent)}" for key, sub in zip(t[1], t[2], strict=True)]
        return "{" + ", ".join(members) + "}"

    body = read(fields, "    ")
    head = f"{{'seq': seq, 'kind': {kind!r}, 'os_tid': os_tid, 'tid': tid"
    record = head + (", " + body[1:] if body != "{}" else "}")
    source = "def decode(buf, pos, S, seq, os_tid, tid):\n" + "\n".join(lines)
    source += f"\n    return {record}, pos\n"
    scope: dict[str, Any] = {"V": _varint, "D": _DOUBLE.unpack_from, "A": _array}
    exec(compile(source, f"<binary trace shape {kind}>", "exec"), scope)  # our own generated code
    return scope["decode"]


@dataclass(frozen=True)
class BinaryTrace:
    """The complete records of a binary trace. ``torn``: the file ends in a torn frame (a writer killed
    mid-record); ``problem``: (record number, what) where a corrupt frame or one that does not decode
    stopped the reading (the records before it are kept)."""

    records: list[dict[str, Any]]
    torn: bool
    problem: tuple[int, str] | None


def is_binary(path: Path) -> bool:
    """Whether the file starts as a frames file (a binary trace, or not a trace at all)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def decode(data: bytes, name: str = "<trace>") -> BinaryTrace:
    """The records of a binary trace's bytes; not a binary trace: :class:`HarnessError`."""
    end: list[Any] = []
    records = list(_records(data, name, end))
    return BinaryTrace(records, end[0], end[1])


def _records(data: bytes, name: str, end_state: list[Any]) -> Iterator[dict[str, Any]]:
    """The records of a binary trace's bytes one by one (a recording's dicts are never all held at once); at
    the end ``end_state`` gets (torn, problem) (:class:`BinaryTrace`). The frames are read as
    :func:`conformance.core.frames.parse_frames` reads them (every complete frame, its CRC checked; a torn
    last frame is the mark of a killed writer), in one loop with the decoding, without a copy of each."""
    try:
        flags = parse_frames(data[:FILE_HEADER_SIZE], name).flags  # the file header: magic, version
    except FramesError as exc:
        raise HarnessError(str(exc)) from None
    if flags != TRACE_FLAG:
        raise HarnessError(f"{name}: a frames file, not a binary trace (flags {flags:#06x})")
    strings: list[str] = []
    shapes: list[tuple[str, _Type]] = []
    threads: list[tuple[int, Any]] = []
    decoders: list[_Decoder] = []
    count = 0
    problem: tuple[int, str] | None = None
    torn = False
    view = memoryview(data)
    unpack = _FRAME.unpack_from
    crc32 = zlib.crc32
    offset, end, index = FILE_HEADER_SIZE, len(data), 0
    last_seq = -1
    while offset < end:
        where = f"{name}: frame {index} at offset {offset}"
        if end - offset < FRAME_HEADER_SIZE:
            torn = True
            break
        length, crc, frame_type, reserved = unpack(data, offset)
        start = offset + FRAME_HEADER_SIZE
        stop = start + length
        if stop > end:
            torn = True
            break
        try:
            if reserved != 0:
                raise _Corrupt(f"corrupt: reserved field {reserved}, expected 0")
            if crc32(view[start:stop]) != crc:
                raise _Corrupt(f"corrupt: the CRC-32 of its {length} bytes is not the header's {crc:#010x}")
            if frame_type == _RECORD:
                shape_id = data[start]
                pos = start + 1
                if shape_id >= 0x80:
                    shape_id, pos = _varint(data, start)
                delta = data[pos]
                pos += 1
                if delta >= 0x80:
                    delta, pos = _varint(data, pos - 1)
                seq = last_seq = last_seq + 1 + ((delta >> 1) ^ -(delta & 1))
                thread_id = data[pos]
                pos += 1
                if thread_id >= 0x80:
                    thread_id, pos = _varint(data, pos - 1)
                os_tid, tid = threads[thread_id]
                record, pos = decoders[shape_id](data, pos, strings, seq, os_tid, tid)
                if pos != stop:
                    raise _Corrupt(f"does not decode: {stop - pos} bytes left over")
                count += 1
                yield record
            elif index == 0:
                if frame_type != _INFO:
                    raise HarnessError(f"{name}: a binary trace without its version frame")
                if data[start:stop] != VERSION_TEXT:
                    version = data[start:stop]
                    raise HarnessError(f"{name}: binary trace version {version!r}, this reader reads "
                                       f"{VERSION_TEXT.decode()}")  # fmt: skip
            else:
                _define(frame_type, data, start, stop, strings, shapes, threads, decoders)
        except (_Corrupt, IndexError, UnicodeDecodeError, ValueError, struct.error) as exc:
            what = str(exc) if isinstance(exc, _Corrupt) else f"does not decode ({type(exc).__name__}: {exc})"
            problem = (count + 1, f"{where}: {what}")
            break
        offset = stop
        index += 1
    if index == 0 and not torn and problem is None and end > FILE_HEADER_SIZE:
        raise HarnessError(f"{name}: a binary trace without its version frame")
    end_state.extend((torn, problem))


def _define(
    frame_type: int,
    data: bytes,
    start: int,
    stop: int,
    strings: list[str],
    shapes: list[tuple[str, _Type]],
    threads: list[tuple[int, Any]],
    decoders: list[_Decoder],
) -> None:
    """One definition frame (a string, a shape, a thread) added to its table."""
    ident, pos = _varint(data, start)
    if frame_type == _STRING:
        table: list[Any] = strings
        item: Any = data[pos:stop].decode("utf-8")
    elif frame_type == _SHAPE:
        table = shapes
        kind_id, pos = _varint(data, pos)
        fields, pos = _type(data, pos, strings)
        if fields[0] != 0x6F:
            raise _Corrupt("does not decode: a shape whose fields are not an object")
        item = (strings[kind_id], fields)
    elif frame_type == _THREAD:
        table = threads
        z, pos = _varint(data, pos)
        t, pos = _type(data, pos, strings)
        tid, pos = _value(t, data, pos, strings)
        item = ((z >> 1) ^ -(z & 1), tid)
    else:
        raise _Corrupt(f"does not decode: unknown frame type {frame_type}")
    if frame_type != _STRING and pos != stop:
        raise _Corrupt(f"does not decode: {stop - pos} bytes left over")
    if ident != len(table):
        raise _Corrupt(f"does not decode: definition {ident} out of order (expected {len(table)})")
    table.append(item)
    if frame_type == _SHAPE:
        decoders.append(_compile(*item))


def read_binary(path: Path) -> BinaryTrace:
    """:func:`decode` of a file."""
    try:
        with interrupt.opening(lambda: path.open("rb")) as handle:  # a signal never leaves it open
            data = handle.read()
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    return decode(data, str(path))


def raw_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Every record of a trace of either format, in file order: (number, record, None); a record that does not
    parse gives (number, None, what) and ends it; a torn last record ends it quietly (after (0, None, None),
    which says it was torn). JSON Lines: number is the line (a blank line is skipped); binary: the record's
    ordinal."""
    if is_binary(path):
        try:
            with interrupt.opening(lambda: path.open("rb")) as handle:  # a signal never leaves it open
                data = handle.read()
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
        end: list[Any] = []
        for number, record in enumerate(_records(data, str(path), end), 1):
            yield number, record, None
        torn, problem = end
        if problem is not None:
            yield problem[0], None, problem[1]
        elif torn:
            yield 0, None, None
        return
    with interrupt.opening(lambda: path.open("rb")) as handle:  # a signal never leaves it open
        for number, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n"):
                yield 0, None, None
                return
            text = raw.strip()
            if not text:
                continue
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                yield number, None, f"not JSON ({exc})"
                return
            if not isinstance(data, dict):
                yield number, None, "a record must be a JSON object"
                return
            yield number, data, None
