"""The capture file: round trip, schema, atomic writes, and one clear error for every bad file."""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from clr_model.context import AMD64_CONTEXT, AMD64_PAL_XSTATE, CONTEXT_AMD64, runtime_context_size
from emu.capture import (
    MAGIC,
    MAX_SEGMENTS,
    CaptureManifest,
    RuntimeContext,
    SegmentPayload,
    capture_schema,
    is_runtime_module,
    parse_capture,
    read_capture,
    write_capture,
)
from emu.errors import CaptureFormatError
from tests.emu.synth import CODE, STACK, STACK_SIZE, expect_error, manifest_fields, write_synthetic

STUB = bytes.fromhex("48b8efbeadde00000000ffe0")  # movabs rax, 0xdeadbeef; jmp rax


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_synthetic(tmp_path / "good.phcap", code=STUB, stack_words=[0x1111, 0x2222])


def raw_file(manifest: dict[str, Any], tail: bytes, *, old_start: int | None = None) -> bytes:
    """Header + manifest + tail; with ``old_start`` (where the tail began), payload offsets are moved so
    that they point into the tail as before although the manifest's length changed."""
    for _ in range(4):
        body = json.dumps(manifest, separators=(",", ":")).encode()
        start = 20 + len(body)
        if old_start is None or start == old_start:
            break
        for seg in manifest["segments"]:
            seg["offset"] += start - old_start
        old_start = start
    return struct.pack("<8sIII", MAGIC, 1, len(body), zlib.crc32(body)) + body + tail


def manifest_and_tail(path: Path) -> tuple[dict[str, Any], bytes, int]:
    data = path.read_bytes()
    mlen = struct.unpack_from("<I", data, 12)[0]
    return json.loads(data[20 : 20 + mlen]), data[20 + mlen :], 20 + mlen


def test_round_trip_keeps_manifest_and_bytes(good: Path) -> None:
    cap = read_capture(good)
    assert cap.manifest.registers.rip == CODE
    assert cap.segments["code"] == STUB
    assert cap.segments["stack"][:16] == (0x1111).to_bytes(8, "little") + (0x2222).to_bytes(8, "little")
    assert cap.manifest.stack.truncated is False and cap.manifest.stack.captured_end == STACK + STACK_SIZE
    assert cap.memory_ranges()[0][0] == CODE


def test_schema_is_the_manifest_model() -> None:
    schema = capture_schema()
    assert schema["title"] == "CaptureManifest"
    for key in (
        "registers",
        "context",
        "stack",
        "modules",
        "jit",
        "live",
        "known_managed",
        "segments",
        "arch",
    ):
        assert key in schema["properties"], key
    json.dumps(schema)  # serialisable as is


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path, good: Path) -> None:
    before = good.read_bytes()
    fields = manifest_fields(rsp=STACK, rip=CODE, stack_len=0)
    with pytest.raises(CaptureFormatError, match="not written"):
        write_capture(good, fields, [])  # no stack segment: invalid, nothing published
    assert good.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["good.phcap"]


@pytest.mark.parametrize("runtime", ["3.1.23", "8.0.4"])
def test_context_of_the_runtime_size_is_kept(tmp_path: Path, runtime: str) -> None:
    size = runtime_context_size(runtime)
    assert size in (AMD64_CONTEXT.size, AMD64_PAL_XSTATE.size)
    ctx = AMD64_CONTEXT.with_size(size).pack({"ContextFlags": CONTEXT_AMD64 | 3, "Rip": CODE})
    rsp = STACK + STACK_SIZE - 64
    fields = manifest_fields(
        rsp=rsp, rip=CODE, stack_len=64, context=RuntimeContext(runtime=runtime, size=size, segment="ctx")
    )
    payloads = [
        SegmentPayload(name="stack", kind="memory", role="stack", address=rsp, data=bytes(64)),
        SegmentPayload(name="ctx", kind="blob", role="context", data=ctx),
    ]
    cap = read_capture(write_capture(tmp_path / "c.phcap", fields, payloads))
    assert cap.context_bytes() == ctx


def test_context_of_the_wrong_size_for_the_runtime_is_refused(tmp_path: Path) -> None:
    rsp = STACK + STACK_SIZE - 64
    fields = manifest_fields(
        rsp=rsp, rip=CODE, stack_len=64, context=RuntimeContext(runtime="8.0.4", size=1232, segment="ctx")
    )
    payloads = [
        SegmentPayload(name="stack", kind="memory", role="stack", address=rsp, data=bytes(64)),
        SegmentPayload(name="ctx", kind="blob", role="context", data=bytes(1232)),
    ]
    with pytest.raises(
        CaptureFormatError, match=r"manifest: context.size: 1232 is not sizeof\(CONTEXT\) 3104"
    ):
        write_capture(tmp_path / "c.phcap", fields, payloads)


def test_stack_truncation_is_stated_not_guessed(tmp_path: Path) -> None:
    fields = manifest_fields(rsp=STACK, rip=CODE, stack_len=STACK_SIZE)
    fields["stack"] = fields["stack"].model_copy(update={"truncated": True})
    with pytest.raises(Exception, match="truncated is True, the bounds say False"):
        CaptureManifest.model_validate({**fields, "segments": []})


# -- bad files: one CaptureFormatError naming the file and the offset or field, in bounded time ---------


def test_every_truncation_is_one_error_naming_an_offset(tmp_path: Path, good: Path) -> None:
    data = good.read_bytes()
    cuts = sorted({*range(0, 40), *range(40, len(data), max(1, len(data) // 97)), len(data) - 1})
    t0 = time.monotonic()
    for cut in cuts:
        expect_error(tmp_path, data[:cut], r"offset \d+")
    assert time.monotonic() - t0 < 10


def test_bad_magic_and_version(tmp_path: Path, good: Path) -> None:
    data = good.read_bytes()
    expect_error(tmp_path, b"GARBAGE!" + data[8:], "offset 0: not a capture file")
    expect_error(tmp_path, data[:8] + struct.pack("<I", 99) + data[12:], "offset 8: capture version 99")


def test_manifest_length_past_the_file(tmp_path: Path, good: Path) -> None:
    data = good.read_bytes()
    expect_error(tmp_path, data[:12] + struct.pack("<I", len(data)) + data[16:], "offset 12: manifest length")


def test_corrupt_manifest_and_payload(tmp_path: Path, good: Path) -> None:
    data = bytearray(good.read_bytes())
    data[30] ^= 0xFF
    expect_error(tmp_path, bytes(data), "offset 20: manifest checksum mismatch")
    manifest, tail, start = manifest_and_tail(good)
    flipped = bytearray(tail)
    flipped[-3] ^= 0x55
    expect_error(
        tmp_path, raw_file(manifest, bytes(flipped), old_start=start), r"offset \d+: segments\.\d \(\w+\)"
    )


def stored_capture(path: Path) -> Path:
    """The synthetic capture with both segments written uncompressed (``compression: "none"``)."""
    rsp = STACK + STACK_SIZE - 64
    stack = (0x1111).to_bytes(8, "little") + bytes(56)
    payloads = [
        SegmentPayload(name="stack", kind="memory", role="stack", address=rsp, data=stack, compress=False),
        SegmentPayload(name="code", kind="memory", role="code", address=CODE, data=STUB, compress=False),
    ]
    return write_capture(path, manifest_fields(rsp=rsp, rip=CODE, stack_len=len(stack)), payloads)


def test_uncompressed_segments_round_trip(tmp_path: Path) -> None:
    path = stored_capture(tmp_path / "stored.phcap")
    manifest, tail, _ = manifest_and_tail(path)
    assert [s["compression"] for s in manifest["segments"]] == ["none", "none"]
    assert STUB in tail  # stored as is
    cap = read_capture(path)
    assert cap.segments["code"] == STUB and cap.segments["stack"][:8] == (0x1111).to_bytes(8, "little")


def test_flipped_byte_in_an_uncompressed_segment_is_a_checksum_mismatch(tmp_path: Path) -> None:
    # zlib catches a flipped byte in a compressed segment on its own (its Adler-32, or a bad stream); a
    # stored segment has only the manifest's CRC-32 to catch it
    path = stored_capture(tmp_path / "stored.phcap")
    manifest, tail, start = manifest_and_tail(path)
    code = manifest["segments"][1]
    assert code["name"] == "code" and code["compression"] == "none"
    flipped = bytearray(tail)
    flipped[code["offset"] - start + 5] ^= 0x01
    expect_error(
        tmp_path,
        raw_file(manifest, bytes(flipped), old_start=start),
        rf"offset {code['offset']}: segments\.1 \(code\) checksum mismatch",
    )


def test_segment_past_the_end_of_the_file(tmp_path: Path, good: Path) -> None:
    manifest, tail, start = manifest_and_tail(good)
    manifest["segments"][1]["stored_size"] += 10_000
    expect_error(
        tmp_path,
        raw_file(manifest, tail, old_start=start),
        r"offset \d+: segments\.1 \(code\) stored_size \d+ runs past",
    )


def test_overlapping_memory_segments(tmp_path: Path, good: Path) -> None:
    manifest, tail, start = manifest_and_tail(good)
    code = manifest["segments"][1]
    code["address"] = manifest["stack"]["sp"] + 8
    expect_error(
        tmp_path,
        raw_file(manifest, tail, old_start=start),
        "segments: memory segments 'stack' and 'code' overlap",
    )


def test_overlapping_payloads(tmp_path: Path, good: Path) -> None:
    manifest, tail, start = manifest_and_tail(good)
    manifest["segments"][1]["offset"] = manifest["segments"][0]["offset"]
    manifest["segments"][1]["stored_size"] = manifest["segments"][0]["stored_size"]
    data = raw_file(manifest, tail, old_start=start)
    expect_error(tmp_path, data, r"overlaps the manifest or another segment's payload")


def test_address_near_2_to_the_64(tmp_path: Path, good: Path) -> None:
    manifest, tail, start = manifest_and_tail(good)
    manifest["segments"][1]["address"] = 2**64 - 8
    expect_error(
        tmp_path, raw_file(manifest, tail, old_start=start), r"segments\.1: .*ends above 2\*\*64 - 4096"
    )


def test_too_many_segments(tmp_path: Path, good: Path) -> None:
    manifest, tail, _ = manifest_and_tail(good)
    blob = {"name": "b", "kind": "blob", "role": "other", "size": 0, "offset": 0, "stored_size": 0,
            "compression": "none", "crc32": 0}  # fmt: skip
    manifest["segments"] += [{**blob, "name": f"b{i}"} for i in range(MAX_SEGMENTS)]
    expect_error(tmp_path, raw_file(manifest, tail), "segments: .*at most 4096")


def test_decompression_bomb_costs_at_most_the_declared_size(tmp_path: Path, good: Path) -> None:
    manifest, tail, start = manifest_and_tail(good)
    bomb = zlib.compress(bytes(32 << 20), 9)  # 32 MiB of zeros in about 32 KB, declared as 12 bytes
    seg = manifest["segments"][1]
    seg["offset"] = start + len(tail)  # appended after the tail
    seg["stored_size"] = len(bomb)
    data = raw_file(manifest, tail + bomb, old_start=start)
    expect_error(tmp_path, data, r"segments\.1 \(code\) does not decompress to its size 12")


def test_not_json_and_invalid_field(tmp_path: Path, good: Path) -> None:
    body = b"{not json"
    data = struct.pack("<8sIII", MAGIC, 1, len(body), zlib.crc32(body)) + body
    expect_error(tmp_path, data, r"offset 2\d: manifest is not JSON")
    manifest, tail, start = manifest_and_tail(good)
    manifest["registers"]["rip"] = -1
    expect_error(tmp_path, raw_file(manifest, tail, old_start=start), r"registers\.rip: ")


def test_parse_capture_names_the_given_name() -> None:
    with pytest.raises(CaptureFormatError, match=r"^mem: offset 0"):
        parse_capture(b"", "mem")


@pytest.mark.parametrize(
    ("path", "runtime"),
    [("/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.4/libcoreclr.so", True), ("libclrjit.so", True),
     ("/x/libclrgc.so", True), ("/x/libmscordaccore.so", True), ("/x/libclrjit_unix_x64_x64.so", True),
     ("/x/libprofharness_probe.so", False), ("/usr/lib/x86_64-linux-gnu/libc.so.6", False), ("", False),
     ("/x/libcoreclr_not/libfoo.so", False)],
)  # fmt: skip
def test_runtime_modules_are_one_table_for_places_and_the_replay(path: str, runtime: bool) -> None:
    """One table says which native modules are the runtime's: the capture writer's places
    (conformance.adapters.capture.place_of) and the replay's model (a frame in one, on top, is helper
    code) both ask :func:`emu.capture.is_runtime_module`."""
    assert is_runtime_module(path) is runtime
