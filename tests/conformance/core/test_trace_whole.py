"""The judge's trace reader (:func:`conformance.core.trace.read_trace_whole`, one pydantic call per fuzz
example): the same :class:`Trace` as ``read_trace`` for every file, good or not."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from conformance.core.trace import CallbackRecord, HeaderRecord, read_trace, read_trace_whole
from conformance.fuzz.child import FakeRuntime
from conformance.fuzz.world import World
from tests.conformance.fuzz.fixtures import CLSID, build

GOOD = [
    {"seq": 0, "kind": "header", "os_tid": 10, "tid": None, "probe": "profharness-fakeruntime 1", "pid": 42,
     "runtime": {"clr_type": 2, "major": 8, "minor": 0, "build": 4, "qfe": 0}, "context_size": 1232,
     "proxy": {"callbackLevel": 11, "fake": True}},
    {"seq": 1, "kind": "callback", "os_tid": 11, "tid": 140000, "name": "ThreadCreated", "phase": "enter",
     "depth": 1, "args": {"threadId": 140000}},
    {"seq": 2, "kind": "call", "os_tid": 11, "tid": 140000, "name": "GetClassFromObject",
     "args": {"objectId": 65536}, "out": {"classId": 7}, "hr": 0},
    {"seq": 3, "kind": "mark", "os_tid": 10, "tid": None, "name": "fuzz.heap", "payload": None, "version": 2},
    {"seq": 4, "kind": "callback", "os_tid": 11, "tid": 140000, "name": "ThreadCreated", "phase": "return",
     "depth": 1, "hr": 0},
    {"seq": 5, "kind": "end", "os_tid": 10, "tid": None},
]
GOOD_TEXT = "".join(json.dumps(r) + "\n" for r in GOOD).encode()
#: What may go wrong in a trace: a blank line, two values on a line, a repeated seq, a record that does not
#: validate, a value that is no object, bytes that are not UTF-8, a torn line, CRLF, whitespace.
DAMAGE = [b"\n", b"\n\n", b" ", b"\r", b",", b"}", b"{", b"[", b"]", b"\xff", b"\x00", b"5",
          b'{"seq": 0, "kind": "end", "os_tid": 1}', b'{"seq": 99, "kind": "end", "os_tid": -1}',
          b'{"seq": 98, "kind": "what", "os_tid": 1}', b'{"seq": 97, "kind": "end", "os_tid": 1} {"seq": 96}',
          b'{"seq": 95, "kind": "end", "os_tid": 1},{"seq": 94, "kind": "end", "os_tid": 1}']


def same_as_read_trace(path: Path) -> None:
    whole, each = read_trace_whole(path), read_trace(path)
    assert whole == each
    assert [type(r) for r in whole.records] == [type(r) for r in each.records]
    assert [r.model_extra for r in whole.records] == [r.model_extra for r in each.records]


def test_a_good_trace_reads_the_same_with_its_types_and_extras(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD_TEXT)
    trace = read_trace_whole(path)
    assert trace.problem is None and not trace.torn_tail and len(trace.records) == len(GOOD)
    assert isinstance(trace.header, HeaderRecord) and trace.header.runtime is not None
    assert trace.header.runtime.version == "8.0.4"
    first = trace.records[1]
    assert isinstance(first, CallbackRecord) and first.model_extra == {"phase": "enter", "depth": 1}
    same_as_read_trace(path)


def test_a_fake_runtime_trace_reads_the_same(tmp_path: Path) -> None:
    world = World(world="documented")  # a growing, non-ASCII name and a GC that moves nothing: documents'
    tid = world.create_thread()
    cls = world.load_class(tid, world.load_module(tid, ["a.dll", "a-longer-name-é€𝄞.dll"]), ["C"])
    world.allocate(tid, cls, [24, 32])
    world.gc(tid, [1, 0, 0, 0, 0])
    path = tmp_path / "trace.jsonl"
    with FakeRuntime(build("correct"), CLSID) as runtime:
        runtime.run_example(path, world.commands)
    assert len(read_trace_whole(path).records) > world.events
    same_as_read_trace(path)


def test_an_empty_file_and_a_torn_only_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    for text in (b"", b'{"seq": 0, "ki'):
        path.write_bytes(text)
        same_as_read_trace(path)


@given(at=st.integers(min_value=0, max_value=len(GOOD_TEXT)), damage=st.sampled_from(DAMAGE),
       cut=st.integers(min_value=0, max_value=len(GOOD_TEXT) + 100))
def test_any_damaged_or_cut_trace_reads_the_same(at: int, damage: bytes, cut: int) -> None:
    """Whatever is wrong (and wherever), the reader gives what ``read_trace`` gives: the same records, the
    same problem at the same line, the same torn tail."""
    text = (GOOD_TEXT[:at] + damage + GOOD_TEXT[at:])[:cut]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(text)
        same_as_read_trace(path)
