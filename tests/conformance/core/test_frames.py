"""Frames v1 in Python (:mod:`conformance.core.frames`): round trip, a torn tail, a flipped byte, a bad
magic or version; every complete frame before the damage is kept, and the note names where reading stopped."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.core.frames import (
    FILE_HEADER_SIZE,
    FRAME_HEADER_SIZE,
    FramesError,
    FrameWriter,
    encode_file_header,
    parse_frames,
    read_frames,
)

frame_lists = st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=300)), max_size=12)


def _file(frames: list[tuple[int, bytes]], flags: int = 0) -> tuple[bytes, list[int]]:
    out = io.BytesIO()
    offsets = FrameWriter(out, flags).extend(frames)
    return out.getvalue(), offsets


@settings(max_examples=60, deadline=None)
@given(frame_lists, st.integers(0, 0xFFFF))
def test_round_trip(frames: list[tuple[int, bytes]], flags: int) -> None:
    data, offsets = _file(frames, flags)
    got = parse_frames(data, "f")
    assert got.stopped is None
    assert got.flags == flags and got.size == len(data)
    assert [(f.type, f.payload) for f in got.frames] == frames
    assert [f.offset for f in got.frames] == offsets
    assert [f.index for f in got.frames] == list(range(len(frames)))
    for f in got.frames:
        assert got.at_offset(f.offset) is f and got.at_index(f.index) is f


@settings(max_examples=60, deadline=None)
@given(frame_lists.filter(bool), st.data())
def test_torn_tail_keeps_every_complete_frame(frames: list[tuple[int, bytes]], data: st.DataObject) -> None:
    whole, offsets = _file(frames)
    last = offsets[-1]
    cut = data.draw(st.integers(last, len(whole) - 1))
    got = parse_frames(whole[:cut], "t.frames")
    assert [(f.type, f.payload) for f in got.frames] == frames[:-1]
    if cut == last:
        assert got.stopped is None  # a cut at a frame boundary is a shorter file, not damage
    else:
        assert got.stopped is not None
        assert got.stopped.startswith(f"t.frames: frame {len(frames) - 1} at offset {last}: torn: ")


@settings(max_examples=60, deadline=None)
@given(frame_lists.filter(lambda fs: any(p for _, p in fs)), st.data())
def test_flipped_payload_byte_stops_at_that_frame(
    frames: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    whole, offsets = _file(frames)
    victim = data.draw(st.sampled_from([i for i, (_, p) in enumerate(frames) if p]))
    at = offsets[victim] + FRAME_HEADER_SIZE + data.draw(st.integers(0, len(frames[victim][1]) - 1))
    bad = bytearray(whole)
    bad[at] ^= 1 << data.draw(st.integers(0, 7))
    got = parse_frames(bytes(bad), "c")
    assert [(f.type, f.payload) for f in got.frames] == frames[:victim]
    assert got.stopped is not None
    assert f"frame {victim} at offset {offsets[victim]}: corrupt: CRC-32" in got.stopped


def test_flipped_crc_and_reserved_bytes_are_corrupt() -> None:
    whole, offsets = _file([(1, b"abc"), (2, b"defg")])
    bad = bytearray(whole)
    bad[offsets[1] + 4] ^= 0x80
    got = parse_frames(bytes(bad), "c")
    assert [f.payload for f in got.frames] == [b"abc"] and got.stopped and "corrupt: CRC-32" in got.stopped
    bad = bytearray(whole)
    bad[offsets[1] + 10] = 1
    got = parse_frames(bytes(bad), "c")
    assert [f.payload for f in got.frames] == [b"abc"] and got.stopped and "reserved field 1" in got.stopped


def test_crc_is_zlibs() -> None:
    whole, _ = _file([(3, b"123456789")])
    assert int.from_bytes(whole[FILE_HEADER_SIZE + 4 : FILE_HEADER_SIZE + 8], "little") == 0xCBF43926
    assert zlib.crc32(b"123456789") == 0xCBF43926


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"PHFRAMEX" + encode_file_header()[8:], "magic b'PHFRAMEX'"),
        (encode_file_header()[:8] + b"\x02\x00\x00\x00\x00\x00\x00\x00", "frames version 2"),
        (encode_file_header()[:10], "10 bytes, shorter than the 16-byte file header"),
        (b"", "0 bytes"),
    ],
)
def test_not_a_frames_file_is_one_line(data: bytes, says: str) -> None:
    with pytest.raises(FramesError) as err:
        parse_frames(data, "x.frames")
    assert err.value.message.startswith("x.frames: ") and says in err.value.message
    assert "\n" not in err.value.message


def test_missing_reference_and_unreadable_file(tmp_path: Path) -> None:
    whole, offsets = _file([(1, b"a"), (1, b"bb")])
    got = parse_frames(whole[:-1], "m")
    says = r"m: no complete frame at offset \d+: the file holds 1 frames \(m: frame 1"
    with pytest.raises(FramesError, match=says):
        got.at_offset(offsets[1])
    with pytest.raises(FramesError, match="no complete frame at index 5"):
        got.at_index(5)
    with pytest.raises(FramesError, match="cannot read frames file"):
        read_frames(tmp_path / "absent.frames")
    (tmp_path / "ok.frames").write_bytes(whole)
    assert [f.payload for f in read_frames(tmp_path / "ok.frames").frames] == [b"a", b"bb"]
