"""Bad input (issue 13): every file profharness reads, mutated from a real one or generated, is either read
or rejected with one typed error (:class:`HarnessError`) on one line naming the file and where in it (line,
offset or field). Never another exception, never a hang.

Each reader is in :data:`tests.robustness.inputs.READERS`; the profile is short in CI and long with
``--long``; outcomes are counted for the summary table.
"""

from __future__ import annotations

import json
import signal
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.core.errors import HarnessError
from conformance.core.trace import Trace, read_trace
from tests.robustness.conftest import OUTCOMES
from tests.robustness.inputs import READERS, Reader, json_replaced, mutated

#: an input that takes longer than this to read or reject is a hang (not a speed target: the slowest real
#: read here takes well under a second)
HANG_SECONDS = 30


class Hang(Exception):
    pass


@contextmanager
def hang_guard(what: str) -> Iterator[None]:
    def on_alarm(_sig: int, _frame: FrameType | None) -> None:
        raise Hang(f"{what}: no answer within {HANG_SECONDS} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_one(reader: Reader, path: Path, data: bytes, source: str) -> None:
    """Read ``data`` (written to ``path``) with ``reader``: read, or one line naming file and place."""
    path.write_bytes(data)
    try:
        with hang_guard(f"{reader.name} {path}"):
            reader.read(path)
    except HarnessError as exc:
        message = str(exc)
        assert "\n" not in message, f"{reader.name}: a rejection of more than one line: {message!r}"
        assert message.startswith(str(path)), (
            f"{reader.name}: the rejection does not name the file: {message}"
        )
        rest = message[len(str(path)) :]
        assert reader.where.match(rest), f"{reader.name}: the rejection does not say where: {message}"
        OUTCOMES[(reader.name, f"{source} inputs rejected with one line")] += 1
        return
    OUTCOMES[(reader.name, f"{source} inputs read")] += 1


def run_property(examples: int, long_profile: bool, strategy: st.SearchStrategy[bytes],
                 body: Callable[[bytes], None]) -> None:  # fmt: skip
    @settings(
        max_examples=examples,
        derandomize=not long_profile,
        database=None,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy)
    def prop(data: bytes) -> None:
        body(data)

    prop()


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.name)
def test_the_real_sample_reads(reader: Reader) -> None:
    reader.read(reader.sample)


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.name)
def test_mutated_file_is_read_or_rejected_with_one_line(
    reader: Reader, tmp_path: Path, examples: int, long_profile: bool
) -> None:
    sample = reader.sample.read_bytes()
    target = tmp_path / f"mutated{reader.sample.suffix}"
    run_property(
        examples, long_profile, mutated(sample), lambda data: check_one(reader, target, data, "mutated")
    )


def _json_documents(reader: Reader) -> st.SearchStrategy[bytes]:
    """Structure-aware inputs: the sample with one JSON value replaced (one record of a trace; the whole
    plan; a capture's manifest, re-framed with its own length and checksum so the reader gets past them)."""
    raw = reader.sample.read_bytes()
    if reader.name in ("trace", "recording"):
        lines = raw.splitlines(keepends=True)

        @st.composite
        def one_record(draw: st.DrawFn) -> bytes:
            k = draw(st.integers(0, len(lines) - 1))
            doc = draw(json_replaced(json.loads(lines[k])))
            return b"".join([*lines[:k], json.dumps(doc).encode() + b"\n", *lines[k + 1 :]])

        return one_record()
    if reader.name in ("plan", "reproducer"):
        return json_replaced(json.loads(raw)).map(lambda d: json.dumps(d, indent=1).encode())
    if reader.name == "capture":
        header = struct.Struct("<8sIII")
        magic, version, mlen, _crc = header.unpack_from(raw, 0)
        manifest = json.loads(raw[header.size : header.size + mlen])
        body = raw[header.size + mlen :]

        def frame(doc: object) -> bytes:
            text = json.dumps(doc, separators=(",", ":")).encode()
            # keep the segments where the offsets say: pad or cut the manifest to its old length when it can
            if len(text) < mlen:
                text += b" " * (mlen - len(text))
            return header.pack(magic, version, len(text), zlib.crc32(text)) + text + body

        return json_replaced(manifest).map(frame)
    raise AssertionError(reader.name)


@pytest.mark.parametrize("reader", [r for r in READERS if r.name != "expectations"], ids=lambda r: r.name)
def test_wrong_json_value_anywhere_is_read_or_rejected_with_one_line(
    reader: Reader, tmp_path: Path, examples: int, long_profile: bool
) -> None:
    target = tmp_path / f"generated{reader.sample.suffix}"
    run_property(
        examples,
        long_profile,
        _json_documents(reader),
        lambda data: check_one(reader, target, data, "structured"),
    )


def test_generated_bytes_are_rejected_with_one_line(
    tmp_path: Path, examples: int, long_profile: bool
) -> None:
    """Files that never were one of ours: any bytes, as every kind of input."""

    def body(data: bytes) -> None:
        for reader in READERS:
            check_one(reader, tmp_path / f"random{reader.sample.suffix}", data, "random-bytes")

    run_property(examples, long_profile, st.binary(max_size=512), body)


def test_a_damaged_trace_keeps_every_record_before_the_damage(
    tmp_path: Path, examples: int, long_profile: bool
) -> None:
    """The tolerant read keeps every complete record that precedes the first changed byte."""
    sample = READERS[0].sample.read_bytes()
    whole = read_trace(READERS[0].sample)
    target = tmp_path / "damaged.jsonl"

    def body(data: bytes) -> None:
        target.write_bytes(data)
        first = next((i for i, (a, b) in enumerate(zip(sample, data, strict=False)) if a != b), None)
        if first is None:
            first = min(len(sample), len(data))
        intact = sample[:first].count(b"\n")  # lines ended before the first changed byte
        trace: Trace = read_trace(target)
        kept = [r.seq for r in trace.records]
        assert kept[:intact] == [r.seq for r in whole.records[:intact]]
        OUTCOMES[("trace", "damaged traces with every earlier record kept")] += 1

    run_property(examples, long_profile, mutated(sample), body)


def test_hostile_stack_replays_to_a_stop(tmp_path: Path, examples: int, long_profile: bool) -> None:
    """A well-formed capture whose stack words were rewritten (pointers into the stack itself: frame-pointer
    cycles; into code; near 2**64; random): the replay ends with a stop reason, or one EmuError line."""
    from emu.capture import SegmentPayload, read_capture, write_capture
    from emu.replay import replay

    reader = next(r for r in READERS if r.name == "capture")
    cap = read_capture(reader.sample)
    man = cap.manifest
    stack_name = man.stack.segment
    stack = cap.segments[stack_name]
    sp = man.stack.sp
    code = [s.address for s in man.segments if s.role == "code" and s.address is not None]
    words = len(stack) // 8
    word = st.one_of(
        st.integers(sp, sp + len(stack) - 8),
        st.sampled_from(code).flatmap(lambda a: st.integers(a, a + 256)),
        st.integers(2**64 - 4096, 2**64 - 1),
        st.integers(0, 2**64 - 1),
    )
    edits = st.lists(st.tuples(st.integers(0, min(words, 512) - 1), word), min_size=1, max_size=24)
    fields = man.model_dump(mode="python", exclude={"segments"})
    others = [
        SegmentPayload(name=s.name, kind=s.kind, role=s.role, data=cap.segments[s.name], address=s.address)
        for s in man.segments
        if s.name != stack_name
    ]
    target = tmp_path / "hostile.phcap"

    def body(raw: bytes) -> None:
        changes = json.loads(raw)
        data = bytearray(stack)
        for index, value in changes:
            data[index * 8 : index * 8 + 8] = int(value).to_bytes(8, "little")
        write_capture(
            target,
            fields,
            [
                SegmentPayload(name=stack_name, kind="memory", role="stack", data=bytes(data), address=sp),
                *others,
            ],
        )
        try:
            with hang_guard(f"replay {target}"):
                result = replay(read_capture(target), allow_disk=False, max_frames=512)
        except HarnessError as exc:
            assert "\n" not in str(exc)
            OUTCOMES[("capture", "hostile stacks rejected with one line")] += 1
            return
        assert result.stop.kind is not None and len(result.frames) <= 512
        OUTCOMES[("capture", "hostile stacks replayed to a stop")] += 1

    run_property(examples, long_profile, edits.map(lambda e: json.dumps(e).encode()), body)
