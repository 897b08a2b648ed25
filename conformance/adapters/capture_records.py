"""The probe's sampling records in its capture sidecar (issue 23 part 4): one binary frame per sample.

The probe's ``capture_sample`` experiment (``conformance/native/src/experiments_capture.cpp``) writes no JSON
per sample: its profiler thread writes one ``capture_sampling`` call record per job (what every sample
shares: the target thread, the signal, the seed kind, the stack bounds, ``out.framesFile`` and ``out.job``),
then each sample as one frame of the frames v1 sidecar beside the trace (:mod:`conformance.core.frames`):

* ``FRAME_SAMPLE_RECORD`` (2): a fixed head (:data:`_HEAD`: job, sample, walk number, handler tid, phase,
  the 23 ucontext registers, fs_base, SP, the end of the stack copy, the IP window's address, the handler's
  and the profiler thread's timings, GetFunctionFromIP's answer, the walk's HRESULT, where the IP was, the
  lengths of what follows), the live walk's frames (32 bytes each), the candidate code windows (address and
  length, 16 bytes each), then the raw bytes: stack, red zone, code around the IP, seed CONTEXT;
* ``FRAME_CODE_PAGE`` (3): one page of code (u64 address, 4096 bytes), written when a window first needs it
  and again when a later sample finds the bytes of its windows in that page changed (the JIT places new
  methods, OSR and tiered versions among them, in the free part of a page it filled partly before); a
  window's bytes are cut from the newest frame of each page written before its sample;
* ``FRAME_STRING`` (4): an interned string (u32 id, UTF-8), a module path a head names by id.

:func:`sample_records` turns them back into what the JSON record of an earlier probe held (the same
``args`` and ``out``, the byte buffers as ``bytes``), so :mod:`conformance.adapters.capture` reads both. A
torn or damaged sidecar costs one line and only what it lost: a frame whose CRC-32 fails is skipped (its
length field leads to the next), a torn end loses the torn frame alone; a sample whose code page was lost is
left out with one line. :func:`encode_sample_record` writes the layout (tests; the twin of the probe's).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from conformance.core.frames import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, FramesError, parse_frames
from conformance.core.trace import CallRecord, Trace

__all__ = [
    "FRAME_CODE_PAGE",
    "FRAME_SAMPLE_RECORD",
    "FRAME_STRING",
    "GREG_NAMES",
    "JOB_CALL",
    "PAGE",
    "SampleRecord",
    "encode_code_page",
    "encode_sample_record",
    "encode_string",
    "sample_records",
]

#: The probe's names (experiments_capture.cpp).
SAMPLE_CALL = "capture_sample"  # one JSON record per sample (an earlier probe)
JOB_CALL = "capture_sampling"  # one JSON record per job; its samples are frames
FRAME_SAMPLE_RECORD = 2
FRAME_CODE_PAGE = 3
FRAME_STRING = 4
PAGE = 4096
#: ucontext gregs in sys/ucontext.h order (REG_R8 = 0 ... REG_CR2 = 22), as the JSON record named them.
GREG_NAMES = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx", "rax",
              "rcx", "rsp", "rip", "efl", "csgsfs", "err", "trapno", "oldmask", "cr2")  # fmt: skip
#: SampleHead: u32 headSize, u32 job, i64 sample, walk, handlerOsTid, phase; u64 gregs[23], fsBase, sp,
#: capturedEnd, codeAddress, copyNs, walkNs, candidatesCpuNs, recordCpuNs, functionId; u32
#: functionFromIpHr, walkHr, flags, kind, module, frameCount, framesListed, stackLen, redZoneLen, codeLen,
#: windows, seedLen.
_HEAD = struct.Struct("<IIqqqq23Q9Q12I")
_FRAME = struct.Struct("<QQQII")
_WINDOW = struct.Struct("<QII")
_FRAME_HEADER = struct.Struct("<IIHH")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_FS_OK, _IN_RANGE = 1, 2  # head flags
_SP_KNOWN, _IN_CALL = 1, 2  # frame flags
KINDS = {1: "managed", 2: "unmapped", 3: "anonymous-executable", 4: "anonymous", 5: "module"}
_KIND_CODES = {v: k for k, v in KINDS.items()}
assert _HEAD.size == 344 and len(GREG_NAMES) == 23


@dataclass(frozen=True)
class SampleRecord:
    """One sample as the JSON record of an earlier probe held it: ``args`` and ``out`` (byte buffers as
    ``bytes``, or as that record's base64 strings and frame references). ``label`` says where it is, for
    messages: ``seq N`` of the trace, or ``frame at offset N of FILE``."""

    label: str
    args: Mapping[str, Any]
    out: Mapping[str, Any]

    @classmethod
    def of(cls, record: CallRecord) -> SampleRecord:
        return cls(f"seq {record.seq}", record.args, record.out)


@dataclass
class _Sidecar:
    """What one scan of a sidecar found: its sample frames (offset, payload), code pages and strings."""

    samples: list[tuple[int, bytes]] = field(default_factory=list)
    #: page address -> every frame of it, in file order: (the frame's offset, the page's bytes)
    pages: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _scan(path: Path) -> _Sidecar:
    """Every intact frame of ``path``, read one at a time (memory: one frame, the pages and the samples);
    a frame that fails its checks is skipped, with one line, when its length still leads to a frame boundary
    inside the file; a torn end stops the scan, with one line."""
    got = _Sidecar()
    try:
        with path.open("rb") as handle:
            parse_frames(handle.read(FILE_HEADER_SIZE), str(path))  # magic, version
            for offset, frame_type, payload, note in _frames(handle, path):
                if note is not None:
                    got.notes.append(note)
                elif frame_type == FRAME_SAMPLE_RECORD:
                    got.samples.append((offset, payload))
                elif frame_type == FRAME_CODE_PAGE and len(payload) == 8 + PAGE:
                    got.pages.setdefault(_U64.unpack_from(payload)[0], []).append((offset, payload[8:]))
                elif frame_type == FRAME_STRING and len(payload) >= 4:
                    got.strings[_U32.unpack_from(payload)[0]] = payload[4:].decode("utf-8", "replace")
    except OSError as exc:
        got.notes.append(f"{path}: cannot read the capture sidecar: {exc.strerror or exc}")
    except FramesError as exc:
        got.notes.append(exc.message)
    return got


def _frames(handle: BinaryIO, path: Path) -> Iterator[tuple[int, int, bytes, str | None]]:
    offset = FILE_HEADER_SIZE
    handle.seek(offset)
    while True:
        head = handle.read(FRAME_HEADER_SIZE)
        if not head:
            return
        where = f"{path}: frame at offset {offset}"
        if len(head) < FRAME_HEADER_SIZE:
            yield offset, 0, b"", f"{where}: torn: {len(head)} of its 12 header bytes, the file ends there"
            return
        length, crc, frame_type, reserved = _FRAME_HEADER.unpack(head)
        payload = handle.read(length)
        if len(payload) < length:
            yield offset, 0, b"", f"{where}: torn: {len(payload)} of its {length} payload bytes, then the end"
            return
        if reserved != 0 or zlib.crc32(payload) != crc:
            what = f"reserved field {reserved}" if reserved else f"CRC-32 mismatch over its {length} bytes"
            yield offset, 0, b"", f"{where}: corrupt ({what}): skipped"
        else:
            yield offset, frame_type, payload, None
        offset += FRAME_HEADER_SIZE + length


class _BadRecord(ValueError):
    """A sample frame that does not hold a whole record (its sample is left out, with this line)."""


def _page_before(sidecar: _Sidecar, page: int, offset: int) -> bytes | None:
    """The newest frame of ``page`` written before the frame at ``offset`` (the bytes its sample's windows
    were read with), None when none was."""
    got = None
    for at, data in sidecar.pages.get(page, ()):
        if at >= offset:
            break
        got = data
    return got


def _decode(
    payload: bytes, job: CallRecord, sidecar: _Sidecar, name: str, offset: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One sample frame's payload (the frame at ``offset``) as the JSON record's args and out."""
    if len(payload) < _HEAD.size:
        raise _BadRecord(f"{len(payload)} bytes, shorter than the {_HEAD.size}-byte record head")
    v = _HEAD.unpack_from(payload)
    head_size, _job, sample, walk_no, handler_tid, phase = v[:6]
    gregs = v[6:29]
    fs_base, sp, captured_end, code_address, copy_ns, walk_ns, cand_ns, record_ns, function_id = v[29:38]
    fip_hr, walk_hr, flags, kind, module, frame_count, listed = v[38:45]
    n_stack, n_red, n_code, n_windows, n_seed = v[45:]
    if head_size < _HEAD.size:
        raise _BadRecord(f"its head is {head_size} bytes, this reader needs {_HEAD.size}")
    at = head_size
    need = at + listed * _FRAME.size + n_windows * _WINDOW.size + n_stack + n_red + n_code + n_seed
    if need != len(payload):
        raise _BadRecord(f"its lengths add up to {need} bytes, the frame holds {len(payload)}")
    if kind not in KINDS:
        raise _BadRecord(f"where-kind {kind} is none this reader knows")
    if module and module not in sidecar.strings:
        raise _BadRecord(f"module string {module} is not in {name}")
    frames = []
    for _ in range(listed):
        fid, ip, fsp, fflags, _r = _FRAME.unpack_from(payload, at)
        at += _FRAME.size
        frames.append({"funcId": fid, "ip": ip, "sp": fsp if fflags & _SP_KNOWN else None,
                       "inCall": bool(fflags & _IN_CALL)})  # fmt: skip
    spans = []
    for _ in range(n_windows):
        address, length, _r = _WINDOW.unpack_from(payload, at)
        at += _WINDOW.size
        spans.append((address, length))

    def take(n: int) -> bytes:
        nonlocal at
        at += n
        return payload[at - n : at]

    stack, red, code, seed = take(n_stack), take(n_red), take(n_code), take(n_seed)
    windows = []
    for address, length in spans:
        data = bytearray()
        page = address - address % PAGE
        while len(data) < length:
            got = _page_before(sidecar, page, offset)
            if got is None:
                raise _BadRecord(f"its code window at {address:#x} needs the code page {page:#x}, which "
                                 f"{name} does not hold whole")  # fmt: skip
            lo = max(address, page) - page
            data += got[lo : lo + length - len(data)]
            page += PAGE
        windows.append({"address": address, "bytes": bytes(data)})
    regs: dict[str, Any] = dict(zip(GREG_NAMES, gregs, strict=True))
    regs["fs_base"] = fs_base if flags & _FS_OK else None
    out_job = job.out
    args = {"sample": sample, "target": job.args.get("target"), "signal": job.args.get("signal"),
            "seed": job.args.get("seed"), "infoFlags": job.args.get("infoFlags"),
            "walk": walk_no}  # fmt: skip
    out: dict[str, Any] = {
        "handlerOsTid": handler_tid,
        "phase": phase if phase >= 0 else None,
        "registers": regs,
        "stack": {"sp": sp, "inRange": bool(flags & _IN_RANGE), "stackLow": out_job.get("stackLow"),
                  "stackHigh": out_job.get("stackHigh"), "capturedEnd": captured_end, "bytes": stack,
                  "redZone": red},
        "code": {"address": code_address, "bytes": code},
        "candidateCode": windows,
        "candidateCodeTaken": out_job.get("candidateCodeTaken"),
        "seedContext": seed,
        "framesFile": out_job.get("framesFile"),
        "walk": {"hr": walk_hr, "frameCount": frame_count, "frames": frames},
        "where": {"functionFromIpHr": fip_hr, "functionId": function_id, "kind": KINDS[kind],
                  "module": sidecar.strings[module] if module else None},
        "timing": {"copyNs": copy_ns, "walkNs": walk_ns, "candidatesCpuNs": cand_ns,
                   "recordCpuNs": record_ns},
    }  # fmt: skip
    return args, out


def sample_records(trace: Trace) -> tuple[list[SampleRecord], list[str]]:
    """Every sample of ``trace`` in the order taken: an earlier probe's ``capture_sample`` call records, and
    each ``capture_sampling`` job's frames in its sidecar; and one line per thing lost (a damaged or torn
    sidecar, a sample that is not whole)."""
    records = [SampleRecord.of(c) for c in trace.calls(SAMPLE_CALL)]
    notes: list[str] = []
    jobs = trace.calls(JOB_CALL)
    scanned: dict[str, _Sidecar] = {}
    by_job: dict[tuple[str, int], CallRecord] = {}
    for job in jobs:
        name, number = job.out.get("framesFile"), job.out.get("job")
        if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
            notes.append(f"{trace.path}: seq {job.seq}: {JOB_CALL}: out.framesFile {name!r} is not a file "
                         "name beside the trace; its samples are not read")  # fmt: skip
            continue
        if not isinstance(number, int) or isinstance(number, bool):
            notes.append(f"{trace.path}: seq {job.seq}: {JOB_CALL}: out.job {number!r} is not an integer")
            continue
        by_job[(name, number)] = job
        if name not in scanned:
            scanned[name] = _scan(trace.path.parent / name)
            notes.extend(scanned[name].notes)
    for name, sidecar in scanned.items():
        path = trace.path.parent / name
        for offset, payload in sidecar.samples:
            label = f"frame at offset {offset} of {path}"
            job_no = _U32.unpack_from(payload, 4)[0] if len(payload) >= 8 else -1
            owner = by_job.get((name, job_no))
            if owner is None:
                notes.append(f"{label}: a sample of job {job_no}, which no {JOB_CALL} record names")
                continue
            try:
                args, out = _decode(payload, owner, sidecar, str(path), offset)
            except _BadRecord as exc:
                notes.append(f"{label}: {exc}")
                continue
            records.append(SampleRecord(label, args, out))
    return records, notes


# -- the writer's side (tests): the probe's layout ----------------------------------------------------------


def encode_string(string_id: int, text: str) -> bytes:
    """A FRAME_STRING payload."""
    return _U32.pack(string_id) + text.encode()


def encode_code_page(address: int, data: bytes) -> bytes:
    """A FRAME_CODE_PAGE payload (``data``: the page's 4096 bytes)."""
    if address % PAGE or len(data) != PAGE:
        raise ValueError("a code page is 4096 bytes at a page-aligned address")
    return _U64.pack(address) + data


def encode_sample_record(
    *, job: int, args: Mapping[str, Any], out: Mapping[str, Any], windows: Sequence[tuple[int, int]],
    module: int, stack: bytes, red_zone: bytes, code: bytes, seed: bytes,
) -> bytes:  # fmt: skip
    """A FRAME_SAMPLE_RECORD payload of the values a JSON sample record holds (``windows``: address and length
    of each candidate window, whose bytes go into code pages; ``module``: the module path's string id)."""
    regs, stack_out, walk, where = out["registers"], out["stack"], out["walk"], out["where"]
    timing = out.get("timing", {})
    flags = (_FS_OK if regs.get("fs_base") is not None else 0) | (_IN_RANGE if stack_out["inRange"] else 0)
    frames = walk.get("frames", [])
    phase = out.get("phase")
    head = _HEAD.pack(
        _HEAD.size, job, args["sample"], args.get("walk", 0), out.get("handlerOsTid", 0),
        -1 if phase is None else phase,
        *(regs[n] for n in GREG_NAMES), regs.get("fs_base") or 0, stack_out["sp"], stack_out["capturedEnd"],
        out["code"]["address"], timing.get("copyNs", 0), timing.get("walkNs", 0),
        timing.get("candidatesCpuNs", 0), timing.get("recordCpuNs", 0), where.get("functionId", 0),
        where.get("functionFromIpHr", 0), walk["hr"], flags, _KIND_CODES[where["kind"]], module,
        walk["frameCount"], len(frames), len(stack), len(red_zone), len(code), len(windows), len(seed),
    )  # fmt: skip
    body = b"".join(
        _FRAME.pack(f["funcId"], f["ip"], f["sp"] or 0, (_SP_KNOWN if f["sp"] is not None else 0)
                    | (_IN_CALL if f["inCall"] else 0), 0)
        for f in frames
    )  # fmt: skip
    body += b"".join(_WINDOW.pack(a, n, 0) for a, n in windows)
    return head + body + stack + red_zone + code + seed
