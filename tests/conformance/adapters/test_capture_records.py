"""conformance.adapters.capture_records: the probe's sampling records as binary frames of the capture sidecar
(issue 23 part 4: no JSON per sample). The same samples give the same capture files, byte for byte, as the
JSON records of an earlier probe; a torn or damaged sidecar costs one line and only what it lost."""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from conformance.adapters.capture import write_captures
from conformance.adapters.capture_records import (
    FRAME_CODE_PAGE,
    FRAME_SAMPLE_RECORD,
    FRAME_STRING,
    JOB_CALL,
    PAGE,
    encode_code_page,
    encode_sample_record,
    encode_string,
    sample_records,
)
from conformance.core.frames import FrameWriter, encode_frame
from conformance.core.trace import read_trace
from tests.conformance.adapters.test_capture import IP, JIT, b64, sample, write_trace

SIDECAR = "trace.jsonl.capture.frames"
MODULE = "/usr/lib/libcoreclr.so"


def page_bytes(page: int) -> bytes:
    """A code page's content: what the process held there (every window of it agrees)."""
    return bytes((page // PAGE + 3 * i) & 0xFF for i in range(PAGE))


def code_at(address: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        page = (address + len(out)) - (address + len(out)) % PAGE
        lo = address + len(out) - page
        out += page_bytes(page)[lo : lo + n - len(out)]
    return bytes(out)


def samples() -> list[dict[str, Any]]:
    """Three JSON sample records whose candidate windows hold the process's code (one crosses a page)."""
    out = []
    for i, hr in enumerate((0, 0x8013135F, 0)):
        rec = sample(i, hr=hr)
        o = rec["out"]
        spans = ((IP - 0x10, 0x100), (JIT + 0x400, 0x20), (JIT + 0xFF0, 0x40))
        o["candidateCode"] = [{"address": a, "bytes": b64(code_at(a, n))} for a, n in spans]
        o["phase"] = i
        o["handlerOsTid"] = 42
        o["where"] = {"kind": "module" if i == 1 else "managed", "functionId": 0x1111 if i != 1 else 0,
                      "functionFromIpHr": 0 if i != 1 else 0x80004005,
                      "module": MODULE if i == 1 else None}  # fmt: skip
        if i == 1:
            o["stack"]["redZone"] = b64(b"\x77" * 128)
        out.append(rec)
    return out


def as_records(
    records: list[dict[str, Any]], rewritten: dict[int, dict[int, bytes]] | None = None
) -> tuple[list[dict[str, Any]], bytes]:
    """The records as the probe writes them now: one capture_sampling call record, and a sidecar of strings,
    code pages (each once, before the first sample that needs it) and one frame per sample; ``rewritten``:
    sample index -> pages written again (page -> its new bytes) right before that sample's frame."""
    first = records[0]
    job = {"kind": "call", "name": JOB_CALL, "experiment": "sample", "hr": 0, "os_tid": 11,
           "args": {k: first["args"][k] for k in ("target", "signal", "seed", "infoFlags")},
           "out": {"job": 1, "framesFile": SIDECAR, "stackLow": first["out"]["stack"]["stackLow"],
                   "stackHigh": first["out"]["stack"]["stackHigh"],
                   "candidateCodeTaken": "first-needed"}}  # fmt: skip
    out = io.BytesIO()
    writer = FrameWriter(out)
    pages: set[int] = set()
    strings: dict[str, int] = {}
    for rec in records:
        o = rec["out"]
        module = o["where"].get("module")
        if module and module not in strings:
            strings[module] = len(strings) + 1
            writer.append(FRAME_STRING, encode_string(strings[module], module))
        windows = [(c["address"], len(base64.b64decode(c["bytes"]))) for c in o["candidateCode"]]
        for address, n in windows:
            for page in range(address - address % PAGE, address + n, PAGE):
                if page not in pages:
                    pages.add(page)
                    writer.append(FRAME_CODE_PAGE, encode_code_page(page, page_bytes(page)))
        for page, data in (rewritten or {}).get(records.index(rec), {}).items():
            writer.append(FRAME_CODE_PAGE, encode_code_page(page, data))
        red = o["stack"].get("redZone")
        writer.append(FRAME_SAMPLE_RECORD, encode_sample_record(
            job=1, args=rec["args"], out=o, windows=windows, module=strings.get(module or "", 0),
            stack=base64.b64decode(o["stack"]["bytes"]), red_zone=base64.b64decode(red) if red else b"",
            code=base64.b64decode(o["code"]["bytes"]), seed=base64.b64decode(o["seedContext"]),
        ))  # fmt: skip
    return [job], out.getvalue()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _framed(tmp_path: Path, sidecar: bytes | None = None) -> tuple[Path, list[dict[str, Any]]]:
    folder = tmp_path / "framed"
    folder.mkdir(exist_ok=True)
    jobs, data = as_records(samples())
    (folder / SIDECAR).write_bytes(data if sidecar is None else sidecar)
    return folder, jobs


def _offsets(data: bytes) -> list[tuple[int, int]]:
    """(offset, type) of every frame of a whole sidecar."""
    at, out = 16, []
    while at < len(data):
        length, _crc, kind, _r = struct.unpack_from("<IIHH", data, at)
        out.append((at, kind))
        at += 12 + length
    return out


def test_sample_records_give_the_captures_json_records_give(tmp_path: Path) -> None:
    inline = tmp_path / "inline"
    inline.mkdir()
    a = write_captures(write_trace(inline / "trace.jsonl", samples()), inline / "out", runtime="3.1.23")
    framed, jobs = _framed(tmp_path)
    b = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out", runtime="3.1.23")
    assert (len(a.paths), a.skipped) == (3, ())
    assert (b.skipped, b.live_successes, b.live_walks) == (a.skipped, a.live_successes, a.live_walks)
    assert _files(framed / "out") == _files(inline / "out")


def test_a_decoded_record_holds_what_the_json_record_held(tmp_path: Path) -> None:
    framed, jobs = _framed(tmp_path)
    records, notes = sample_records(write_trace(framed / "trace.jsonl", jobs))
    assert notes == [] and [r.args["sample"] for r in records] == [0, 1, 2]
    want = samples()[1]
    got = records[1]
    assert got.label.startswith("frame at offset ") and got.label.endswith(str(framed / SIDECAR))
    assert got.args == {**want["args"], "walk": 1}
    o = got.out
    assert (o["phase"], o["handlerOsTid"], o["registers"]) == (1, 42, want["out"]["registers"])
    assert o["where"] == want["out"]["where"] and o["walk"] == want["out"]["walk"]
    assert o["stack"]["redZone"] == b"\x77" * 128
    assert [(c["address"], c["bytes"]) for c in o["candidateCode"]] == [
        (c["address"], base64.b64decode(c["bytes"])) for c in want["out"]["candidateCode"]
    ]


def test_a_torn_end_loses_the_torn_sample_alone_in_one_line(tmp_path: Path) -> None:
    _, data = as_records(samples())
    last = _offsets(data)[-1][0]
    framed, jobs = _framed(tmp_path, data[: last + 500])  # the process died writing the last sample
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    assert [p.name for p in written.paths] == ["sample-0000.phcap", "sample-0001.phcap"]
    (note,) = written.skipped
    length = len(data) - last - 12
    says = f"torn: 488 of its {length} payload bytes, then the end"
    assert note == f"{framed / SIDECAR}: frame at offset {last}: {says}"


@pytest.mark.parametrize("cut", [1, 11])
def test_a_torn_frame_header_is_one_line(tmp_path: Path, cut: int) -> None:
    _, data = as_records(samples())
    last = _offsets(data)[-1][0]
    framed, jobs = _framed(tmp_path, data[: last + cut])
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    assert len(written.paths) == 2
    assert written.skipped == (f"{framed / SIDECAR}: frame at offset {last}: torn: {cut} of its 12 header "
                               "bytes, the file ends there",)  # fmt: skip


def test_a_corrupt_sample_frame_loses_that_sample_and_no_other(tmp_path: Path) -> None:
    _, data = as_records(samples())
    first = next(at for at, kind in _offsets(data) if kind == FRAME_SAMPLE_RECORD)
    damaged = bytearray(data)
    damaged[first + 12 + 400] ^= 0xFF
    framed, jobs = _framed(tmp_path, bytes(damaged))
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    assert [p.name for p in written.paths] == ["sample-0001.phcap", "sample-0002.phcap"]
    (note,) = written.skipped
    assert note.startswith(f"{framed / SIDECAR}: frame at offset {first}: corrupt (CRC-32 mismatch over its ")
    assert note.endswith(" bytes): skipped")


def test_a_lost_code_page_leaves_out_the_samples_that_need_it(tmp_path: Path) -> None:
    _, data = as_records(samples())
    at = [a for a, kind in _offsets(data) if kind == FRAME_CODE_PAGE][-1]  # the page JIT + 0x1000
    damaged = bytearray(data)
    damaged[at + 12 + 100] ^= 0xFF
    framed, jobs = _framed(tmp_path, bytes(damaged))
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    assert written.paths == ()
    assert written.skipped[0].endswith(": corrupt (CRC-32 mismatch over its 4104 bytes): skipped")
    assert len(written.skipped) == 4 and all("\n" not in s for s in written.skipped)
    assert all(f"needs the code page {JIT + PAGE:#x}, which {framed / SIDECAR} does not hold whole" in s
               for s in written.skipped[1:])  # fmt: skip


def test_a_page_written_again_gives_its_new_bytes_to_later_samples_only(tmp_path: Path) -> None:
    """The probe writes a code page again when a later sample finds its windows' bytes changed there (the
    JIT put a new method, an OSR version say, into the free part of a page read earlier: a run under load
    replayed a frameless leaf's caller from the stale zeros, DSS-03/07/16 [emu 8.0.4]). Each sample's
    windows are cut from the newest frame of the page written before that sample, never a later one."""
    page = JIT
    new = bytes((0xC3 + i) & 0xFF for i in range(PAGE))
    jobs, data = as_records(samples(), rewritten={1: {page: new}})
    folder = tmp_path / "framed"
    folder.mkdir()
    (folder / SIDECAR).write_bytes(data)
    records, notes = sample_records(write_trace(folder / "trace.jsonl", jobs))
    assert notes == []
    got = [{w["address"]: w["bytes"] for w in r.out["candidateCode"]} for r in records]
    assert got[0][JIT + 0x400] == page_bytes(page)[0x400:0x420]
    assert got[1][JIT + 0x400] == got[2][JIT + 0x400] == new[0x400:0x420]
    # the window that crosses into the next page takes the old page's first part no more either
    assert got[2][JIT + 0xFF0][:0x10] == new[0xFF0:]
    assert got[0][JIT + 0xFF0][:0x10] == page_bytes(page)[0xFF0:]


def test_a_record_whose_lengths_do_not_add_up_is_one_line(tmp_path: Path) -> None:
    _, data = as_records(samples())
    first = next(at for at, kind in _offsets(data) if kind == FRAME_SAMPLE_RECORD)
    length = struct.unpack_from("<I", data, first)[0]
    payload = data[first + 12 : first + 12 + length - 8]  # 8 bytes short, a valid frame all the same
    damaged = data[:first] + encode_frame(FRAME_SAMPLE_RECORD, payload) + data[first + 12 + length :]
    framed, jobs = _framed(tmp_path, damaged)
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    assert len(written.paths) == 2
    assert written.skipped == (f"frame at offset {first} of {framed / SIDECAR}: its lengths add up to "
                               f"{length} bytes, the frame holds {length - 8}",)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "says"),
    [(b"", "shorter than the 16-byte file header"), (b"NOTFRAMES" + bytes(20), "not a frames file: magic"),
     (None, "cannot read")],
)  # fmt: skip
def test_a_sidecar_that_is_no_frames_file_is_one_line(tmp_path: Path, data: bytes | None, says: str) -> None:
    framed, jobs = _framed(tmp_path)
    if data is None:
        (framed / SIDECAR).unlink()
    else:
        (framed / SIDECAR).write_bytes(data)
    written = write_captures(write_trace(framed / "trace.jsonl", jobs), framed / "out")
    (note,) = written.skipped
    assert written.paths == () and says in note and "\n" not in note


def test_a_job_without_a_sidecar_name_or_samples_of_an_unknown_job_are_one_line(tmp_path: Path) -> None:
    framed, jobs = _framed(tmp_path)
    bad = copy.deepcopy(jobs)
    bad[0]["out"]["framesFile"] = "../x"
    records, notes = sample_records(write_trace(framed / "trace.jsonl", bad))
    says = "out.framesFile '../x' is not a file name beside the trace; its samples are not read"
    assert records == [] and notes == [f"{framed / 'trace.jsonl'}: seq 3: {JOB_CALL}: {says}"]
    other = copy.deepcopy(jobs)
    other[0]["out"]["job"] = 2
    records, notes = sample_records(write_trace(framed / "trace.jsonl", other))
    assert records == [] and len(notes) == 3
    assert all(n.endswith(f"a sample of job 1, which no {JOB_CALL} record names") for n in notes)


def test_the_trace_names_no_sample_but_its_job(tmp_path: Path) -> None:
    """No JSON per sample: the trace holds the job's one record; its samples are in the sidecar."""
    framed, jobs = _framed(tmp_path)
    trace = read_trace(write_trace(framed / "trace.jsonl", jobs).path)
    assert trace.calls("capture_sample") == [] and len(trace.calls(JOB_CALL)) == 1
    assert json.loads(json.dumps(jobs[0]["out"]))["framesFile"] == SIDECAR
