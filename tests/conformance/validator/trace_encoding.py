"""A binary trace written from records in Python, for tests (the layout of
``conformance/native/include/profharness/trace.h`` "Format"; the native writer is the product's). Each
record is a dict as the JSON trace has it ({"seq", "kind", "os_tid", "tid", ...fields}); strings, shapes and
threads are defined before their first use, as the native writer does."""

from __future__ import annotations

import struct
from typing import Any

from conformance.core.binary_trace import TRACE_FLAG, VERSION_TEXT
from conformance.core.frames import encode_file_header, encode_frame

_INFO, _STRING, _SHAPE, _THREAD, _RECORD = 1, 2, 3, 4, 5


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(n: int) -> bytes:
    return varint((n << 1) ^ (n >> 63) if n < 0 else n << 1)


class Encoder:
    """Records in, the frames of a binary trace out (:meth:`frames`, or :meth:`data` for the whole file)."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.shapes: dict[bytes, int] = {}
        self.threads: dict[tuple[int, bytes], int] = {}
        self.out: list[bytes] = [encode_frame(_INFO, VERSION_TEXT)]
        self.last_seq = -1

    def _string(self, s: str) -> bytes:
        if s not in self.strings:
            self.strings[s] = len(self.strings)
            self.out.append(encode_frame(_STRING, varint(self.strings[s]) + s.encode()))
        return varint(self.strings[s])

    def _type(self, v: Any) -> bytes:
        if v is None:
            return b"n"
        if v is True:
            return b"t"
        if v is False:
            return b"f"
        if isinstance(v, int):
            return b"u" if v >= 0 else b"i"
        if isinstance(v, float):
            return b"d"
        if isinstance(v, str):
            return b"s"
        if isinstance(v, list):
            return b"a"
        members = b"".join(self._string(k) + self._type(x) for k, x in v.items())
        return b"o" + varint(len(v)) + members

    def _value(self, v: Any) -> bytes:
        if v is None or v is True or v is False:
            return b""
        if isinstance(v, int):
            return varint(v) if v >= 0 else zigzag(v)
        if isinstance(v, float):
            return struct.pack("<d", v)
        if isinstance(v, str):
            return self._string(v)
        if isinstance(v, list):
            return varint(len(v)) + b"".join(self._type(x) + self._value(x) for x in v)
        return b"".join(self._value(x) for x in v.values())

    def add(self, record: dict[str, Any]) -> None:
        fields = {k: v for k, v in record.items() if k not in ("seq", "kind", "os_tid", "tid")}
        kind = self._string(record["kind"])
        fields_type = self._type(fields)
        key = kind + fields_type
        if key not in self.shapes:
            self.shapes[key] = len(self.shapes)
            self.out.append(encode_frame(_SHAPE, varint(self.shapes[key]) + key))
        tid = record.get("tid")
        thread_key = (record.get("os_tid", 0), self._type(tid) + self._value(tid))
        if thread_key not in self.threads:
            self.threads[thread_key] = len(self.threads)
            self.out.append(encode_frame(_THREAD, varint(self.threads[thread_key]) + zigzag(thread_key[0])
                                         + thread_key[1]))  # fmt: skip
        seq = record["seq"]
        head = varint(self.shapes[key]) + zigzag(seq - self.last_seq - 1) + varint(self.threads[thread_key])
        self.last_seq = seq
        self.out.append(encode_frame(_RECORD, head + self._value(fields)))

    def data(self) -> bytes:
        return encode_file_header(TRACE_FLAG) + b"".join(self.out)


def encode(records: list[dict[str, Any]]) -> bytes:
    """The binary trace of ``records`` (each with its seq, kind, os_tid and tid)."""
    enc = Encoder()
    for r in records:
        enc.add(r)
    return enc.data()
