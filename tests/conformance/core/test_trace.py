"""The trace reader: good records kept, the first bad one reported as file:line, torn tails tolerated."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.core.errors import HarnessError
from conformance.core.trace import (
    CallRecord,
    FrameRecord,
    HeaderRecord,
    MarkRecord,
    read_trace,
    record_schema,
)

HEADER = {
    "seq": 0,
    "kind": "header",
    "os_tid": 10,
    "tid": None,
    "probe": "0.1",
    "pid": 42,
    "runtime": {"clr_type": 2, "major": 8, "minor": 0, "build": 4, "qfe": 0},
    "plan": {"version": 1},
    "context_size": 1232,
}
FRAME = {
    "seq": 1,
    "kind": "frame",
    "os_tid": 10,
    "tid": 140000,
    "walk": 0,
    "index": 0,
    "funcId": 0x7F0012345678,
    "ip": 0x7F0000001000,
    "frameInfo": 0,
    "clientData": 0xC0FFEE,
    "contextSize": 0,
    "context": None,
    "hr": 0,
}
CALL = {
    "seq": 2,
    "kind": "call",
    "os_tid": 10,
    "tid": 140000,
    "name": "DoStackSnapshot",
    "experiment": "walk-default",
    "args": {"walk": 0, "infoFlags": 0},
    "out": {"frames": [{"funcId": 1, "token": 0x06000001}]},
    "hr": 0,
}
MARK = {"seq": 3, "kind": "mark", "os_tid": 10, "tid": 140000, "name": "done", "payload": None}


def write_lines(path: Path, records: list[dict[str, object]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_reads_every_kind(tmp_path: Path) -> None:
    trace = read_trace(write_lines(tmp_path / "t.jsonl", [HEADER, FRAME, CALL, MARK]))
    assert trace.problem is None and not trace.torn_tail
    assert isinstance(trace.header, HeaderRecord) and trace.header.runtime is not None
    assert trace.header.runtime.version == "8.0.4"
    assert [type(r) for r in trace.records] == [HeaderRecord, FrameRecord, CallRecord, MarkRecord]
    assert trace.frames(0)[0].clientData == 0xC0FFEE
    assert (
        trace.calls("DoStackSnapshot", experiment="walk-default")[0].out["frames"][0]["token"] == 0x06000001
    )
    assert not trace.ended


def test_malformed_record_is_reported_as_file_line_and_prefix_kept(tmp_path: Path) -> None:
    bad = dict(FRAME, seq=4, funcId=-1)
    path = write_lines(tmp_path / "t.jsonl", [HEADER, FRAME, CALL, bad, MARK])
    trace = read_trace(path)
    assert len(trace.records) == 3
    assert trace.problem is not None
    assert str(trace.problem).startswith(f"{path}:4: frame record: funcId:")
    with pytest.raises(HarnessError, match=r"t\.jsonl:4: frame record: funcId"):
        read_trace(path, strict=True)


def test_not_json_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [HEADER], tail='{"seq": 1, "kind": \n')
    trace = read_trace(path)
    assert trace.problem is not None and trace.problem.line == 2 and "not JSON" in trace.problem.what
    assert len(trace.records) == 1


def test_unknown_kind_and_duplicate_seq(tmp_path: Path) -> None:
    trace = read_trace(write_lines(tmp_path / "a.jsonl", [HEADER, {"seq": 1, "kind": "what", "os_tid": 1}]))
    assert trace.problem is not None and trace.problem.line == 2 and "kind" in trace.problem.what
    trace = read_trace(write_lines(tmp_path / "b.jsonl", [HEADER, dict(MARK, seq=0)]))
    assert trace.problem is not None and "appears twice" in trace.problem.what


def test_torn_tail_is_not_corruption(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [HEADER, FRAME], tail='{"seq": 2, "kind": "ca')
    trace = read_trace(path)
    assert trace.problem is None and trace.torn_tail and len(trace.records) == 2


def test_missing_trace_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="no trace file"):
        read_trace(tmp_path / "absent.jsonl")


@given(cut=st.integers(min_value=0, max_value=2000))
def test_any_prefix_of_a_good_trace_parses(cut: int) -> None:
    """What a SIGKILL leaves (any byte prefix) parses without a problem, losing at most the torn line."""
    text = "".join(json.dumps(r) + "\n" for r in [HEADER, FRAME, CALL, MARK])
    prefix = text[: cut % (len(text) + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text(prefix)
        trace = read_trace(path)
    assert trace.problem is None
    assert len(trace.records) == prefix.count("\n")


def test_schema_names_every_kind() -> None:
    schema = json.dumps(record_schema())
    for kind in ("header", "callback", "call", "frame", "mark", "counts", "probe_error", "end"):
        assert f'"{kind}"' in schema
