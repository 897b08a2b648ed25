"""Judging a binary trace as columns (issue 23 part 2): constant memory, a record no rule acts on never
decoded.

The binary trace (:mod:`conformance.core.binary_trace`) is read in chunks of :data:`CHUNK` bytes. Each chunk's
frames are found and checked with numpy (every frame's header; the chain of lengths from the first frame to
the last complete one; the CRC-32s of its short payloads by one equation, :func:`_crc_ok`, longer ones one by
one), its definitions (strings, shapes, threads) read in order, and each record's head decoded into columns:
shape, seq, thread, and the ``name`` and ``phase`` the shapes of calls, callbacks and marks begin with. From
the columns and what the rules read (:attr:`StreamRule.reads`) follows which records must be decoded into the
dict :meth:`Judging.take` hands the rules, in file order:

- every record of a kind other than call, callback and mark (few: the header, the counts, the end);
- the first record of each (os_tid, tid) pair (the ThreadID map), a record whose shape or phase looks wrong
  (:meth:`Judging.take` refuses it as the dict path does), a ``proxy.module`` mark, ThreadAssignedToOSThread;
- a call, callback or mark some rule reads, unless every rule that reads it has a :class:`Quiet` contract
  (:attr:`StreamRule.quiet`, set beside the rule) saying it does nothing with it now: an inspection that
  carries no shadow-heap verdict, a call from no enter/leave hook, ...; the contract's conditions on the
  moment (a rule's state, the callbacks open on the record's thread) are asked between the records decoded,
  so a run of calls no rule acts on is skipped as a whole;
- a callback nobody acts on is not decoded either, only pushed or popped on its thread's stack (what the rules
  see of it: :meth:`Judging.callback_of` names it for a record inside it); of the ``proxy.*`` marks nobody
  acts on, the last of each name in a chunk is decoded for :attr:`Judging.notes`.

A rule with no contract gets every record it reads, as from the dict path; so a new rule is judged right
before it is judged fast. Anything the chunk's checks do not accept (a CRC-32 that does not match, a frame
that does not chain, a definition out of order, a record that does not decode) hands the rest of the file,
from the chunk's first record, to the dict path (every record decoded, as ``judge_run(columnar=False)``),
which refuses it with the same ``file:number`` as before. A torn last frame (a killed writer) ends the
recording quietly, as there. A record whose frame checks but whose body is never decoded is not checked
beyond its head (only a writer's bug can make such a record; the CRC-32 covers damage).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from conformance.core import interrupt
from conformance.core.binary_trace import TRACE_FLAG, VERSION_TEXT, _define
from conformance.core.errors import HarnessError
from conformance.core.frames import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, MAGIC, VERSION
from conformance.validator.stream import Frame, Quiet, _binary_records

if TYPE_CHECKING:
    from conformance.validator.stream import Judging, StreamRule

__all__ = ["CHUNK", "judge_columns"]

#: the bytes read at a time (a chunk's columns are a few times this)
CHUNK = 8 << 20
_INFO, _STRING, _SHAPE, _THREAD, _RECORD = 1, 2, 3, 4, 5
_CALL, _CALLBACK, _MARK, _OTHER = 0, 1, 2, 3
#: the kinds whose records may be left undecoded, by code
_KINDS = ("call", "callback", "mark")
#: marks always decoded (Judging.take keeps the profiler's modules from them)
_MODULE = "proxy.module"
#: the proxy's own marks, of which Judging keeps the last of each name
_NOTE = "proxy."
_ENTER, _RETURN, _WHOLE, _BAD = 1, 2, 0, 3
_PHASE_CODES = {"enter": _ENTER, "return": _RETURN, "whole": _WHOLE}
#: a record's columns that its decoder takes
_HEAD = ("shape", "thread", "body", "seq", "stop")
#: the callback that maps a ThreadID to an OS thread (Judging.take keeps it)
_ASSIGNED = "ThreadAssignedToOSThread"

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class _Fallback(Exception):
    """The rest of the file goes to the dict path, from record ``done`` (0-based)."""

    def __init__(self, done: int) -> None:
        super().__init__(done)
        self.done = done


# --- frames -------------------------------------------------------------------------------------------------


def _u32(buf: bytes) -> npt.NDArray[np.uint32]:
    """Every little-endian u32 of ``buf`` by its byte offset (an unaligned view, no copy)."""
    return np.ndarray((max(len(buf) - 3, 0),), "<u4", buffer=buf, strides=(1,))


def _frames(buf: bytes) -> tuple[Ints, int]:
    """The header offsets of the complete frames chained from ``buf[0]`` (a frame's start), and where the
    chain stops (the offset after the last complete one). A frame is found as a candidate (its type word a
    known type, the reserved half zero), then followed by its length: a candidate inside a payload is jumped
    over."""
    n = len(buf)
    if n < FRAME_HEADER_SIZE:
        return np.zeros(0, np.int64), 0
    words = (n - FRAME_HEADER_SIZE) // 4 + 1  # type words at offsets 8 + k + 4i, i < words, k = 0..3
    mask = np.zeros((words, 4), np.bool_)
    for k in range(4):
        count = (n - FRAME_HEADER_SIZE - k) // 4 + 1
        w = np.frombuffer(buf, "<u4", count=count, offset=8 + k) if count > 0 else np.zeros(0, np.uint32)
        np.less(w - np.uint32(1), np.uint32(_RECORD), out=mask[:count, k])
    starts = np.flatnonzero(mask)  # sorted: frame offset = 4i + k
    if not len(starts) or starts[0] != 0:
        return np.zeros(0, np.int64), 0
    u32 = _u32(buf)
    ends = starts + FRAME_HEADER_SIZE + u32[starts + 0].astype(np.int64)
    nxt = np.searchsorted(starts, ends)
    lands = nxt < len(starts)
    lands[lands] = starts[nxt[lands]] == ends[lands]
    regular = lands & (nxt == np.arange(1, len(starts) + 1))
    irregular = np.flatnonzero(~regular)  # the last candidate is always there
    pieces: list[Ints] = []
    i = 0
    while True:
        stop = int(irregular[np.searchsorted(irregular, i)])
        pieces.append(np.arange(i, stop + 1))
        if not lands[stop]:
            break
        i = int(nxt[stop])
    chain = np.concatenate(pieces)
    if ends[chain[-1]] > n:  # the last one is cut short
        chain = chain[:-1]
    return starts[chain].astype(np.int64), int(ends[chain[-1]]) if len(chain) else 0


#: payloads up to this many bytes are checked together (:func:`_crc_ok`); longer ones one by one
_BATCH = 256
#: the CRC-32 of n zero bytes, n = 0.._BATCH
_ZEROS = np.array([zlib.crc32(bytes(n)) for n in range(_BATCH + 1)], np.uint64)


def _crc_ok(buf: bytes, starts: Ints, lengths: Ints, crcs: Ints) -> bool:
    """Every frame's payload has its header's CRC-32, checked for a chunk's short payloads at once.

    CRC-32 is affine: ``crc32(m) = A(m) ^ crc32(zeros(len(m)))`` with ``A`` linear in the bytes, each byte's
    part depending on its value and its distance from the end only (so zeros in front add nothing). Hence
    the XOR of the payloads' CRCs equals ``A(X)`` XOR that of ``crc32(zeros(len))`` over them, where ``X`` is
    the XOR of the payloads aligned at their ends; ``A(X) = crc32(X) ^ crc32(zeros(len(X)))``. One damaged
    frame always breaks the equation (its CRC-32 differs, nothing else does); several break it unless their
    CRC-32 errors cancel exactly (about 2^-32 for random damage). A broken equation sends the chunk to the
    dict path, which names the frame. ``X`` is built 8 bytes at a time from each payload's end (an unaligned
    u64 view of the chunk, the bytes before a payload masked off)."""
    short = lengths <= _BATCH
    view = memoryview(buf)
    crc32 = zlib.crc32
    for s, n, c in zip((starts[~short] + FRAME_HEADER_SIZE).tolist(), lengths[~short].tolist(),
                       crcs[~short].tolist(), strict=True):  # fmt: skip
        if crc32(view[s : s + n]) != c:
            return False
    if not short.any():
        return True
    lengths = lengths[short]
    ends = starts[short] + FRAME_HEADER_SIZE + lengths
    u64 = np.ndarray((len(buf) - 7,), "<u8", buffer=buf, strides=(1,))
    x = bytearray(_BATCH)
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    for w in range(_BATCH // 8):
        at = np.flatnonzero(lengths > 8 * w)
        if not len(at):
            break
        words = u64[ends[at] - 8 * (w + 1)]
        valid = np.minimum(lengths[at] - 8 * w, 8).astype(np.uint64)  # the payload's bytes in the word
        words &= ones << (np.uint64(8) * (np.uint64(8) - valid))  # its high bytes; shifts of 64 never occur
        x[_BATCH - 8 * (w + 1) : _BATCH - 8 * w] = int(np.bitwise_xor.reduce(words)).to_bytes(8, "little")
    want = int(np.bitwise_xor.reduce(crcs[short].astype(np.uint64)))
    zeros = int(np.bitwise_xor.reduce(_ZEROS[lengths]))
    return crc32(x) ^ int(_ZEROS[_BATCH]) ^ zeros == want


def _varints(data: npt.NDArray[np.uint8], pos: Ints) -> tuple[Ints, Ints]:
    """The LEB128 varints at ``pos`` and the offsets after them."""
    b = data[pos].astype(np.int64)
    value = b & 0x7F
    after = pos + 1
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise _Refused("a varint longer than 64 bits")
        b = data[after[more]].astype(np.int64)
        value[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return value, after


class _Refused(Exception):
    """A chunk the columns do not take (the dict path reads it)."""


# --- what each record needs ---------------------------------------------------------------------------------


@dataclass
class _Shape:
    kind: int  # _CALL, _CALLBACK, _MARK, _OTHER
    named: bool  # its first field is name, a string
    phased: bool  # its second field is phase, a string
    force: bool  # every record of it decoded (another kind, or fields the columns do not judge)
    hook: bool  # a callback marked hook: true
    keys: frozenset[str]


def _shape(kind: str, fields: tuple[Any, ...]) -> _Shape:
    keys: tuple[str, ...] = fields[1]
    types = [t[0] for t in fields[2]]
    code = _KINDS.index(kind) if kind in _KINDS else _OTHER
    named = bool(keys) and keys[0] == "name" and types[0] == ord("s")
    phased = len(keys) > 1 and keys[1] == "phase" and types[1] == ord("s")
    odd_phase = "phase" in keys and not phased
    hook = "hook" in keys and types[keys.index("hook")] == ord("t")
    force = code == _OTHER or not named or odd_phase
    return _Shape(code, named, phased, force, hook, frozenset(keys))


class _Reading:
    """What the live rules read, as lookups by string id and shape id (grown as the trace defines them)."""

    def __init__(self, judging: Judging, live: list[StreamRule]) -> None:
        self.readers: dict[tuple[int, str], list[StreamRule]] = {}
        self.any: dict[int, list[StreamRule]] = {code: [] for code in range(len(_KINDS))}
        for rule in live:
            for kind, name in rule.reads:
                if kind not in _KINDS:
                    continue
                code = _KINDS.index(kind)
                if name is None:
                    self.any[code].append(rule)
                else:
                    self.readers.setdefault((code, name), []).append(rule)
        #: the rules with a contract for a kind: (rule, contract)
        self.quiet: list[tuple[StreamRule, Quiet]] = [(rule, rule.quiet) for rule in live if rule.quiet]
        self.judging = judging
        self.strings = 0
        self.names: list[str] = []
        # by string id, per kind: always decoded (a reader without a contract, or a contract's names)
        self.always = {code: np.zeros(0, np.bool_) for code in range(len(_KINDS))}
        # by string id, per kind and contract: the rule reads it
        self.reads = {code: [np.zeros(0, np.bool_) for _ in self.quiet] for code in range(len(_KINDS))}
        # by string id, per kind: the contracts (bits) with a busy state whose rules read it (their state may
        # change when it is handed to them)
        self.busy_readers = {code: np.zeros(0, np.int64) for code in range(len(_KINDS))}
        self.phase = np.zeros(0, np.int8)
        self.shapes: list[_Shape] = []
        self.force = np.zeros(0, np.bool_)
        self.kind = np.zeros(0, np.int8)
        self.keyed: list[Bools] = [np.zeros(0, np.bool_) for _ in self.quiet]  # by shape, per contract

    def _reader_quiet(self, rule: StreamRule, code: int) -> Quiet | None:
        q = rule.quiet
        return q if q is not None and _KINDS[code] in q.kinds else None

    def grow(self, strings: list[str], shapes: list[tuple[str, Any]]) -> None:
        if len(strings) > self.strings:
            new = strings[self.strings :]
            for code in range(len(_KINDS)):
                always = []
                busy_bits = []
                reads: list[list[bool]] = [[] for _ in self.quiet]
                for s in new:
                    rules = [*self.readers.get((code, s), ()), *self.any[code]]
                    keep = (code == _CALLBACK and s == _ASSIGNED) or (code == _MARK and s == _MODULE)
                    for rule in rules:
                        q = self._reader_quiet(rule, code)
                        keep = keep or q is None or s in q.names
                    always.append(keep)
                    bits = 0
                    for k, (rule, contract) in enumerate(self.quiet):
                        reads[k].append(rule in rules)
                        if rule in rules and contract.busy is not None:
                            bits |= 1 << k
                    busy_bits.append(bits)
                self.always[code] = np.concatenate([self.always[code], np.array(always, np.bool_)])
                more = np.array(busy_bits, np.int64)
                self.busy_readers[code] = np.concatenate([self.busy_readers[code], more])
                for k in range(len(self.quiet)):
                    self.reads[code][k] = np.concatenate([self.reads[code][k], np.array(reads[k], np.bool_)])
            phase = [_PHASE_CODES.get(s, _BAD) for s in new]
            self.phase = np.concatenate([self.phase, np.array(phase, np.int8)])
            self.names.extend(new)
            self.strings = len(strings)
        if len(shapes) > len(self.shapes):
            new_shapes = [_shape(kind, fields) for kind, fields in shapes[len(self.shapes) :]]
            self.shapes.extend(new_shapes)
            self.force = np.array([s.force for s in self.shapes], np.bool_)
            self.kind = np.array([s.kind for s in self.shapes], np.int8)
            self.keyed = [np.array([bool(s.keys & q.keys) for s in self.shapes], np.bool_)
                          for _r, q in self.quiet]  # fmt: skip

    def static(self, shape: Ints, kind: Ints, name: Ints, phase: Ints) -> Bools:
        """The records decoded whatever the moment (calls and callbacks; ``name`` -1 where none)."""
        need = self.force[shape].copy()
        for code in range(len(_KINDS)):
            of = np.flatnonzero((kind == code) & ~need)
            ids = name[of]
            hit = self.always[code][ids]
            for k in range(len(self.quiet)):
                hit |= self.reads[code][k][ids] & self.keyed[k][shape[of]]
            need[of[hit]] = True
        need |= phase == _BAD
        return need


# --- the pass -----------------------------------------------------------------------------------------------


class _Pass:
    def __init__(self, judging: Judging, path: Path, live: list[StreamRule]) -> None:
        self.j = judging
        self.path = path
        self.plan = _Reading(judging, live)
        self.strings: list[str] = []
        self.shapes: list[tuple[str, Any]] = []
        self.threads: list[tuple[int, Any]] = []
        self.decoders: list[Any] = []
        self.seen_threads: set[int] = set()
        self.frames = 0  # frames read so far (the next one's index)
        self.done = 0  # records judged so far
        self.last_seq = -1
        # contract k: the OS threads with one of its frames open
        self.hot: list[set[int]] = [set() for _ in self.plan.quiet]
        self.busy: list[bool] = [False] * len(self.plan.quiet)
        #: the callbacks whose frames some contract asks about
        self.hot_names = frozenset().union(*(q.frames for _r, q in self.plan.quiet))
        #: a callback's name -> the contracts that ask whether it is open
        self.frames_of: dict[str, tuple[int, ...]] = {
            name: tuple(k for k, (_r, q) in enumerate(self.plan.quiet) if name in q.frames)
            for name in self.hot_names
        }
        # contract k: OS thread -> how many of its frames are open there
        self.hot_count: list[dict[int, int]] = [{} for _ in self.plan.quiet]
        self._update_busy(-1)

    def _update_busy(self, bits: int) -> None:
        """The busy state of the contracts ``bits`` (those whose rules were just handed a record)."""
        k = 0
        quiet = self.plan.quiet
        while bits and k < len(quiet):
            if bits & 1:
                rule, q = quiet[k]
                self.busy[k] = q.busy is not None and q.busy(rule)
            bits >>= 1
            k += 1

    def _pushed(self, thread: int, name: str) -> None:
        for k in self.frames_of.get(name, ()):
            count = self.hot_count[k]
            count[thread] = count.get(thread, 0) + 1
            self.hot[k].add(thread)

    def _popped(self, thread: int, name: str) -> None:
        for k in self.frames_of.get(name, ()):
            count = self.hot_count[k]
            left = count.get(thread, 0) - 1
            if left > 0:
                count[thread] = left
            else:
                count.pop(thread, None)
                self.hot[k].discard(thread)

    def run(self) -> int:
        try:
            self._chunks()
        except _Fallback as fall:
            for number, r in islice(_binary_records(self.path), fall.done, None):
                self.j.take(self.path, number, r)
                fall.done += 1
            return fall.done
        return self.done

    def _chunks(self) -> None:
        path = self.path
        try:
            handle = interrupt.opening(lambda: path.open("rb"))
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
        with handle as fh:
            head = fh.read(FILE_HEADER_SIZE)
            if len(head) < FILE_HEADER_SIZE or head[:8] != MAGIC:
                raise _Fallback(0)
            version, flags = int.from_bytes(head[8:10], "little"), int.from_bytes(head[10:12], "little")
            if version != VERSION or flags != TRACE_FLAG:
                raise _Fallback(0)
            size = os.fstat(fh.fileno()).st_size
            at = FILE_HEADER_SIZE  # the file offset of carry[0]
            carry = b""
            while True:
                want = CHUNK
                if len(carry) >= FRAME_HEADER_SIZE:  # a frame longer than what is left of the chunk
                    need = FRAME_HEADER_SIZE + int.from_bytes(carry[:4], "little")
                    if at + need > size:
                        return  # it runs past the end of the file: torn, as the dict path says
                    want = max(CHUNK, need - len(carry))
                more = fh.read(want)
                buf = carry + more
                starts, stop = _frames(buf)
                complete = stop == len(buf)
                if not more:  # the end of the file
                    if len(starts):
                        self._chunk(buf, starts)
                    if not complete and not _torn(buf, stop):
                        raise _Fallback(self.done)
                    return
                if len(starts):
                    self._chunk(buf, starts)
                if not complete and _complete_at(buf, stop):
                    raise _Fallback(self.done)  # a whole frame there that the chain did not take
                carry = buf[stop:]
                at += stop

    def _chunk(self, buf: bytes, starts: Ints) -> None:
        data = np.frombuffer(buf, np.uint8)
        u32 = _u32(buf)
        lengths = u32[starts].astype(np.int64)
        crcs = u32[starts + 4].astype(np.int64)
        types = data[starts + 8].astype(np.int64)
        if not _crc_ok(buf, starts, lengths, crcs):
            raise _Fallback(self.done)
        first = self.frames
        defs = np.flatnonzero(types != _RECORD)
        counts_before = {_STRING: len(self.strings), _SHAPE: len(self.shapes), _THREAD: len(self.threads)}
        try:
            for i in defs.tolist():
                s = int(starts[i]) + FRAME_HEADER_SIZE
                e = s + int(lengths[i])
                if first + i == 0:
                    if types[i] != _INFO or buf[s:e] != VERSION_TEXT:
                        raise _Refused("the version frame")
                    continue
                _define(int(types[i]), buf, s, e, self.strings, self.shapes, self.threads, self.decoders)
        except Exception:  # the dict path says what is wrong, naming the record
            raise _Fallback(self.done) from None
        if first == 0 and (not len(types) or types[0] != _INFO):
            raise _Fallback(self.done)
        self.frames += len(starts)
        recs = np.flatnonzero(types == _RECORD)
        if not len(recs):
            return
        self.plan.grow(self.strings, self.shapes)
        try:
            cols = self._columns(data, starts, lengths, types, recs, defs, counts_before)
        except (_Refused, IndexError):
            raise _Fallback(self.done) from None
        self._judge(buf, cols)

    def _columns(self, data: npt.NDArray[np.uint8], starts: Ints, lengths: Ints, types: Ints, recs: Ints,
                 defs: Ints, before: dict[int, int]) -> dict[str, Any]:  # fmt: skip
        """The head of each record frame of a chunk: shape, seq, thread, name and phase ids, where its body
        begins and ends; every id checked against the definitions before it."""
        pos = starts[recs] + FRAME_HEADER_SIZE
        stop = pos + lengths[recs]
        shape, pos = _varints(data, pos)
        delta, pos = _varints(data, pos)
        thread, body = _varints(data, pos)
        if (body > stop).any():
            raise _Refused("a record's head runs past its frame")
        for table, ids, have in ((_SHAPE, shape, len(self.shapes)), (_THREAD, thread, len(self.threads))):
            mine = defs[types[defs] == table]
            limit = before[table] + np.searchsorted(mine, recs)
            if (ids >= limit).any() or ids.max() >= have:
                raise _Refused("a record before its definition")
        plan = self.plan
        named = np.array([s.named for s in plan.shapes], np.bool_)[shape]
        phased = np.array([s.phased for s in plan.shapes], np.bool_)[shape]
        name = np.full(len(recs), -1, np.int64)
        phase_id = np.full(len(recs), -1, np.int64)
        at = np.flatnonzero(named)
        ids, after = _varints(data, body[at])
        name[at] = ids
        at2 = np.flatnonzero(phased)
        pids, _ = _varints(data, after[np.searchsorted(at, at2)])
        phase_id[at2] = pids
        mine = defs[types[defs] == _STRING]
        limit = before[_STRING] + np.searchsorted(mine, recs)
        if (name >= limit).any() or (phase_id >= limit).any() or (after > stop[at]).any():
            raise _Refused("a string before its definition")
        phase = np.where(phase_id >= 0, plan.phase[np.maximum(phase_id, 0)], _WHOLE).astype(np.int64)
        seq = self.last_seq + np.cumsum(1 + ((delta >> 1) ^ -(delta & 1)))
        kind = plan.kind[shape].astype(np.int64)
        need = plan.static(shape, kind, name, phase)
        # the first record of each thread pair (the ThreadID map, a tid of the wrong type)
        uniq, first_at = np.unique(thread, return_index=True)
        for t, i in zip(uniq.tolist(), first_at.tolist(), strict=True):
            if t not in self.seen_threads:
                self.seen_threads.add(t)
                need[i] = True
        return {"shape": shape, "seq": seq, "thread": thread, "body": body, "stop": stop, "name": name,
                "phase": phase, "kind": kind, "need": need}  # fmt: skip

    def _judge(self, buf: bytes, c: dict[str, Any]) -> None:
        j, plan = self.j, self.plan
        kind, need, name, thread = c["kind"], c["need"], c["name"], c["thread"]
        n = len(kind)
        threads = self.threads
        os_of_pair = np.array([ot for ot, _tid in threads], np.int64)
        os_tid = os_of_pair[thread]
        events = np.flatnonzero(need | (kind == _CALLBACK) | (kind == _MARK))
        ev_list = events.tolist()
        ev_need = need[events].tolist()
        ev_kind = kind[events].tolist()
        ev_name = name[events].tolist()
        ev_os = os_tid[events].tolist()
        ev_phase = c["phase"][events].tolist()
        ev_shape = c["shape"][events].tolist()
        # by event: the contracts (bits) whose rules read it and may want it now
        readers = np.zeros(len(events), np.int64)
        ev_k, ev_n = kind[events], name[events]
        for q in range(len(plan.quiet)):
            for code in (_CALLBACK, _MARK):
                at = np.flatnonzero((ev_k == code) & ~need[events])
                readers[at] |= plan.reads[code][q][ev_n[at]].astype(np.int64) << q
        ev_readers = readers.tolist()
        busy_readers = np.full(len(events), -1, np.int64)  # other kinds: every contract asked again
        for code in range(len(_KINDS)):
            at = np.flatnonzero(ev_k == code)
            busy_readers[at] = plan.busy_readers[code][ev_n[at]]
        ev_busy = busy_readers.tolist()
        # by call: the contracts whose rules read it (asked of the calls between events, when any rule is busy
        # or any thread hot)
        call_readers = np.zeros(n, np.int64)
        loose = np.flatnonzero((kind == _CALL) & ~need)
        for q, (_rule, contract) in enumerate(plan.quiet):
            if "call" in contract.kinds:
                call_readers[loose] |= plan.reads[_CALL][q][name[loose]].astype(np.int64) << q
        c["readers"] = call_readers
        c["busy_readers"] = plan.busy_readers[_CALL][np.maximum(name, 0)]
        c["os"] = os_tid
        c["gap_lists"] = None
        c["lists"] = None
        if int(np.count_nonzero(need)) > n // 50:  # many to decode: their fields as Python ints at once
            c["lists"] = [c[k].tolist() for k in _HEAD]
        shapes = plan.shapes
        names = plan.names
        stacks = j.stacks
        busy, hot = self.busy, self.hot
        hot_names = self.hot_names
        calls = kind == _CALL
        base = self.done
        skipped_notes: dict[str, int] = {}  # a proxy.* mark not decoded: its name -> the last one's index
        prev = -1
        for e, needed, k, nm, ot, ph, sh, rd, br in zip(ev_list, ev_need, ev_kind, ev_name, ev_os,
                                                        ev_phase, ev_shape, ev_readers, ev_busy,
                                                        strict=True):  # fmt: skip
            if e > prev + 1 and (any(busy) or any(hot)):
                self._gap(buf, c, os_tid, calls, prev + 1, e, base)
            prev = e
            if rd and not needed:
                q = 0
                while rd:
                    if rd & 1 and (busy[q] or ot in hot[q]):
                        needed = True
                        break
                    rd >>= 1
                    q += 1
            if needed:
                top = None
                if k == _CALLBACK and ph == _RETURN:
                    stack = stacks.get(ot)
                    top = stack[-1].name if stack else None
                self._take(buf, c, e, base)
                if br:
                    self._update_busy(br)
                if k == _CALLBACK:
                    if top is not None and top in hot_names:
                        self._popped(ot, top)
                    elif ph == _ENTER and names[nm] in hot_names:
                        self._pushed(ot, stacks[ot][-1].name)
                elif k == _MARK:
                    skipped_notes.pop(names[nm], None)
            elif k == _MARK:
                if names[nm].startswith(_NOTE):
                    skipped_notes[names[nm]] = e
            elif ph == _ENTER:
                frame = Frame(names[nm], shapes[sh].hook)
                stack = stacks.get(ot)
                if stack is None:
                    stacks[ot] = [frame]
                else:
                    stack.append(frame)
                if frame.name in hot_names:
                    self._pushed(ot, frame.name)
            elif ph == _RETURN:
                stack = stacks.get(ot)
                if stack:
                    popped = stack.pop().name
                    if popped in hot_names:
                        self._popped(ot, popped)
        if n > prev + 1 and (any(busy) or any(hot)):
            self._gap(buf, c, os_tid, calls, prev + 1, n, base)
        for i in skipped_notes.values():  # what Judging.take keeps of the last of each
            r = self._decode(buf, c, i, base)
            j.notes[r["name"]] = r
        self.done = base + n
        self.last_seq = int(c["seq"][-1])

    def _gap(self, buf: bytes, c: dict[str, Any], os_tid: Ints, calls: Bools, lo: int, hi: int,
             base: int) -> None:  # fmt: skip
        """The calls between two events some contract wants now (its rule busy, its frames open)."""
        plan = self.plan
        busy, hot = self.busy, self.hot
        if hi - lo <= 64:  # a few: one by one (numpy's calls cost more)
            if c["gap_lists"] is None:
                c["gap_lists"] = (c["readers"].tolist(), c["os"].tolist(), c["busy_readers"].tolist())
            readers, threads, busy_readers = c["gap_lists"]
            for i in range(lo, hi):
                rd = readers[i]
                q = 0
                while rd:
                    if rd & 1 and (busy[q] or threads[i] in hot[q]):
                        self._take(buf, c, i, base)
                        self._update_busy(busy_readers[i])
                        break
                    rd >>= 1
                    q += 1
            return
        at = lo
        while at < hi:
            want = np.zeros(hi - at, np.bool_)
            names = c["name"][at:hi]
            for q, (_rule, contract) in enumerate(plan.quiet):
                if "call" not in contract.kinds:
                    continue
                if self.busy[q]:
                    want |= plan.reads[_CALL][q][names]
                elif self.hot[q]:
                    on = np.isin(os_tid[at:hi], np.fromiter(self.hot[q], np.int64))
                    want |= plan.reads[_CALL][q][names] & on
            want &= calls[at:hi]
            picked = np.flatnonzero(want)
            if not len(picked):
                return
            state = (list(self.busy), [set(h) for h in self.hot])
            for i in (picked + at).tolist():
                self._take(buf, c, i, base)
                self._update_busy(int(c["busy_readers"][i]))
                if (self.busy, self.hot) != state:
                    at = i + 1
                    break
            else:
                return

    def _take(self, buf: bytes, c: dict[str, Any], i: int, base: int) -> None:
        """Record ``i`` of the chunk decoded into its dict and handed to :meth:`Judging.take`."""
        self.j.take(self.path, base + i + 1, self._decode(buf, c, i, base))

    def _decode(self, buf: bytes, c: dict[str, Any], i: int, base: int) -> dict[str, Any]:
        """Record ``i`` of the chunk as its dict (what does not decode goes to the dict path)."""
        lists = c["lists"]
        if lists is not None:
            shape, thread, body, seq, stop = (col[i] for col in lists)
        else:
            shape, thread, body, seq, stop = (int(c[k][i]) for k in _HEAD)
        os_tid, tid = self.threads[thread]
        try:
            r, end = self.decoders[shape](buf, body, self.strings, seq, os_tid, tid)
            if end != stop:
                raise _Refused("bytes left over")
        except Exception:  # the dict path says what is wrong, naming the record
            raise _Fallback(base + i) from None
        return r  # type: ignore[no-any-return]


def _complete_at(buf: bytes, at: int) -> bool:
    """A whole frame (by its length) starts at ``buf[at]``."""
    if len(buf) - at < FRAME_HEADER_SIZE:
        return False
    return at + FRAME_HEADER_SIZE + int.from_bytes(buf[at : at + 4], "little") <= len(buf)


def _torn(buf: bytes, at: int) -> bool:
    """What follows the last complete frame at the end of the file is a frame cut short (a killed writer)."""
    return not _complete_at(buf, at)


def judge_columns(judging: Judging, path: Path, live: list[StreamRule]) -> int:
    """Judge the binary trace ``path`` (see the module's docstring): every record a rule acts on handed to
    :meth:`Judging.take`; returns the records read."""
    return _Pass(judging, path, live).run()
