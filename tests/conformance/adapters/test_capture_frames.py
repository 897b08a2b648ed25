"""conformance.adapters.capture reading a sample's bytes from the probe's frames v1 sidecar (one frame per
sample, the record's references {offset, at, length}): the same captures, byte for byte, as from the same
bytes inline as base64; a torn or damaged sidecar leaves out only the samples whose frame it lost, each with
one line; a reference outside its frame leaves out its sample, with one line."""

from __future__ import annotations

import base64
import copy
import io
import struct
from pathlib import Path
from typing import Any

import pytest

from conformance.adapters.capture import FRAME_SAMPLE, write_captures
from conformance.core.errors import HarnessError
from conformance.core.frames import FrameWriter, encode_frame
from tests.conformance.adapters.test_capture import sample, write_trace

SIDECAR = "trace.jsonl.capture.frames"


def _unb64(value: str) -> bytes:
    return base64.b64decode(value)


def as_frames(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bytes]:
    """The records as the probe writes them now: each sample's bytes (stack, red zone, IP code, candidate
    windows, seed) in one frame of a sidecar, the record referring to each part."""
    out = io.BytesIO()
    writer = FrameWriter(out)
    converted: list[dict[str, Any]] = []
    for rec in records:
        rec = copy.deepcopy(rec)
        o = rec["out"]
        stack = _unb64(o["stack"]["bytes"])
        red = _unb64(o["stack"]["redZone"]) if "redZone" in o["stack"] else b""
        code = _unb64(o["code"]["bytes"])
        windows = b"".join(
            struct.pack("<QI", c["address"], len(_unb64(c["bytes"]))) + _unb64(c["bytes"])
            for c in o["candidateCode"]
        )
        seed = _unb64(o["seedContext"])
        offset = writer.append(FRAME_SAMPLE, stack + red + code + windows + seed)
        starts = iter([0, len(stack), len(stack) + len(red), len(stack) + len(red) + len(code),
                       len(stack) + len(red) + len(code) + len(windows)])  # fmt: skip

        def ref(n: int, at: int, frame: int = offset) -> dict[str, int]:
            return {"offset": frame, "at": at, "length": n}

        o["stack"]["bytes"] = ref(len(stack), next(starts))
        o["stack"]["redZone"] = ref(len(red), next(starts))
        o["code"]["bytes"] = ref(len(code), next(starts))
        o["candidateCode"] = {**ref(len(windows), next(starts)), "count": len(o["candidateCode"])}
        o["seedContext"] = ref(len(seed), next(starts))
        o["framesFile"] = SIDECAR
        converted.append(rec)
    return converted, out.getvalue()


def _samples() -> list[dict[str, Any]]:
    with_red = sample(1, hr=0x8013135F)
    with_red["out"]["stack"]["redZone"] = base64.b64encode(b"\x77" * 128).decode()
    return [sample(0), with_red, sample(2)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_sidecar_references_give_the_captures_base64_gives(tmp_path: Path) -> None:
    inline = tmp_path / "inline"
    framed = tmp_path / "framed"
    inline.mkdir()
    framed.mkdir()
    records, sidecar = as_frames(_samples())
    (framed / SIDECAR).write_bytes(sidecar)
    a = write_captures(write_trace(inline / "trace.jsonl", _samples()), inline / "out", runtime="3.1.23")
    b = write_captures(write_trace(framed / "trace.jsonl", records), framed / "out", runtime="3.1.23")
    assert (len(a.paths), a.skipped) == (3, ())
    assert (b.skipped, b.live_successes, b.live_walks) == (a.skipped, a.live_successes, a.live_walks)
    assert _files(framed / "out") == _files(inline / "out")


def test_torn_sidecar_leaves_out_only_the_samples_it_lost(tmp_path: Path) -> None:
    records, sidecar = as_frames(_samples())
    last = records[-1]["out"]["stack"]["bytes"]["offset"]
    (tmp_path / SIDECAR).write_bytes(sidecar[: last + 20])  # the process died while writing the last frame
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    assert [p.name for p in written.paths] == ["sample-0000.phcap", "sample-0001.phcap"]
    assert len(written.skipped) == 1
    note = written.skipped[0]
    assert note.startswith(f"sample 2: out.stack.bytes: {tmp_path / SIDECAR}: frame at offset {last}: torn")


@pytest.mark.parametrize("damage", ["flip", "type", "short"])
def test_one_damaged_frame_loses_its_sample_alone(tmp_path: Path, damage: str) -> None:
    """A flipped byte in the first sample's frame (CRC mismatch), or a frame with an intact CRC that is not a
    sample's or holds less than its record names: that sample is left out with one line; the frames after it
    are read on their own, so every other sample is kept."""
    records, sidecar = as_frames(_samples())
    first = records[0]["out"]["stack"]["bytes"]["offset"]
    data = bytearray(sidecar)
    if damage == "flip":
        data[first + 12 + 5] ^= 0xFF
    else:
        length = struct.unpack_from("<I", data, first)[0]
        payload = bytes(data[first + 12 : first + 12 + length])
        if damage == "type":
            data[first : first + 12 + length] = encode_frame(7, payload)
        else:  # the same length, its record's windows and seed past a shorter sample
            cut = payload[:100] + bytes(length - 100)
            data[first : first + 12 + length] = encode_frame(FRAME_SAMPLE, cut)
            records[0]["out"]["stack"]["bytes"]["length"] = length + 1
    (tmp_path / SIDECAR).write_bytes(bytes(data))
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    assert [p.name for p in written.paths] == ["sample-0001.phcap", "sample-0002.phcap"]
    (note,) = written.skipped
    assert note.startswith("sample 0: out.stack.bytes") and "\n" not in note
    assert {"flip": "corrupt: CRC-32", "type": "of type 7", "short": "names bytes"}[damage] in note


def test_missing_sidecar_and_null_reference_leave_samples_out(tmp_path: Path) -> None:
    records, _ = as_frames(_samples()[:1])
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    assert written.paths == () and len(written.skipped) == 1
    assert "cannot read frames file" in written.skipped[0]
    records, sidecar = as_frames(_samples()[:1])
    (tmp_path / SIDECAR).write_bytes(sidecar)
    out = records[0]["out"]
    for holder, key in ((out["stack"], "bytes"), (out["stack"], "redZone"), (out["code"], "bytes"),
                        (out, "candidateCode"), (out, "seedContext")):  # fmt: skip
        holder[key] = None  # the probe could not write the sample's frame
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out2")
    says = "sample 0: out.stack.bytes: the probe could not write its frame (a null reference)"
    assert written.skipped == (says,)


@pytest.mark.parametrize(
    ("field", "change", "says"),
    [
        ("stack", {"at": 10**6}, "out.stack.bytes names bytes 1000000..1000768 of the frame at offset 16"),
        ("stack", {"offset": 10**9}, "frame at offset 1000000000: outside the file's frames"),
        ("stack", {"offset": 17}, "frame at offset 17: "),
    ],
)
def test_reference_outside_its_frame_leaves_its_sample_out_in_one_line(
    tmp_path: Path, field: str, change: dict[str, int], says: str
) -> None:
    records, sidecar = as_frames(_samples()[:1])
    (tmp_path / SIDECAR).write_bytes(sidecar)
    records[0]["out"][field]["bytes"].update(change)
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    (note,) = written.skipped
    assert written.paths == () and says in note and "\n" not in note


def test_a_negative_length_or_a_bad_file_name_is_one_line(tmp_path: Path) -> None:
    records, sidecar = as_frames(_samples()[:1])
    (tmp_path / SIDECAR).write_bytes(sidecar)
    records[0]["out"]["stack"]["bytes"]["length"] = -1
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    assert written.skipped == (f"sample 0: out.stack.bytes names bytes 0..-1 of the frame at offset 16 of "
                               f"{SIDECAR}, which holds {len(sidecar) - 28}",)  # fmt: skip
    for name in ("a\x00b", "..", "."):
        records, _ = as_frames(_samples()[:1])
        records[0]["out"]["framesFile"] = name
        with pytest.raises(HarnessError, match=r"a frame reference without out\.framesFile"):
            write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")


def test_candidate_windows_that_do_not_add_up_leave_the_sample_out(tmp_path: Path) -> None:
    records, sidecar = as_frames(_samples()[:1])
    (tmp_path / SIDECAR).write_bytes(sidecar)
    records[0]["out"]["candidateCode"]["count"] = 3
    written = write_captures(write_trace(tmp_path / "trace.jsonl", records), tmp_path / "out")
    assert written.skipped == ("sample 0: out.candidateCode: its frame does not hold 3 whole code windows",)
