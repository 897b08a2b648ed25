"""Trace -> emu captures: the probe's sampling records (``capture_sample``) as :mod:`emu.capture` files.

The probe's ``capture_sample`` experiment (``conformance/native/src/experiments_capture.cpp``) takes samples
(registers, fs_base, the stack from SP to min(SP + 64 KiB, stack end), code around the IP, code around
candidate return addresses read after the handler, the naive-seed CONTEXT it passed and the live
DoStackSnapshot result), then writes ``capture_maps`` (``/proc/self/maps``) and ``capture_jit_map``
(FunctionID -> every native code version's ranges). The scenario's ``capture.stack`` mark names the managed
frames it knows are on the sampled thread's stack. :func:`captures_from_trace` turns each sample into a
manifest and its segments; :func:`write_captures` writes them with emu's writer, one file per sample.

Samples are read by :func:`conformance.adapters.capture_records.sample_records`: the probe writes each as one
binary frame of the capture sidecar (no JSON per sample), which it turns back into what the JSON record of
an earlier probe held, the byte buffers as ``bytes``. Those earlier records are read too: their bytes were
in a frame per sample, referred to as ``{"offset", "at", "length"}`` (the frame's file offset, the part's
position in its payload, its length; candidate code a run of windows, each u64 address, u32 length and the
bytes, with ``"count"``), or base64 strings (a test's synthetic record). A sample whose bytes are missing or
damaged (a torn sidecar) is left out with the reader's note; the others are kept.

Both maps are taken once per run, after the last sample: the module map and the JIT map hold every mapping
and method of the instant (the runtime never frees code of a non-collectible method) and perhaps some
added later.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from clr_model.context import runtime_context_layout
from conformance.adapters.capture_records import SAMPLE_CALL, SampleRecord, sample_records
from conformance.core.errors import HarnessError
from conformance.core.frames import FrameReader, FramesError
from conformance.core.trace import CallRecord, Trace
from emu.capture import (
    STACK_CAPTURE_BYTES,
    CaptureManifest,
    CodeRange,
    JitMap,
    JitMethod,
    KnownCallees,
    KnownFrame,
    LiveFrame,
    LiveRecovery,
    LiveWalk,
    ModuleEntry,
    RecoveredSeed,
    RecoveryStep,
    RuntimeContext,
    SegmentPayload,
    StackInfo,
    X64Registers,
    is_runtime_module,
    write_capture,
)
from emu.errors import EmuError
from emu.procfs import parse_maps
from emu.unwind import OSR_TIER, is_osr_entry

__all__ = [
    "CAPTURE_SUFFIX",
    "KNOWN_STACK_MARK",
    "SAMPLE_CALL",
    "CaptureSpec",
    "WrittenCaptures",
    "captures_from_trace",
    "place_of",
    "write_captures",
]

#: The probe's record names (experiments_capture.cpp).
MAPS_CALL = "capture_maps"
JIT_MAP_CALL = "capture_jit_map"
REGISTER_CALL = "capture_register_thread"
#: The scenario's mark naming the managed frames on the sampled thread's stack (leaf first).
KNOWN_STACK_MARK = "capture.stack"
CAPTURE_SUFFIX = ".phcap"
#: The sidecar's frame type of one sample's bytes (experiments_capture.cpp kFrameSample).
FRAME_SAMPLE = 1
_WINDOW_HEAD = struct.Struct("<QI")

_PLACE_PART = re.compile(r"[^a-z0-9_-]+")


@dataclass(frozen=True)
class CaptureSpec:
    """One sample ready to write: its manifest and its segments."""

    sample: int
    manifest: CaptureManifest
    payloads: tuple[SegmentPayload, ...]


@dataclass(frozen=True)
class WrittenCaptures:
    """What :func:`write_captures` wrote, and the samples it left out with the reason (one line each)."""

    paths: tuple[Path, ...]
    skipped: tuple[str, ...]
    live_successes: int
    live_walks: int
    #: samples with a recovered-seed attempt (``--seed recovered``) and those whose walk returned S_OK
    recovered_walks: int = 0
    recovered_successes: int = 0


#: the probe's per-sample record of the seed mode and the recovered seed (experiments_capture.cpp record_seed)
SEED_CALL = "capture_seed"


def _first(exc: ValueError) -> str:
    """The first error of a pydantic validation error as one line (``field: message``)."""
    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "manifest"
        return f"{loc}: {str(err['msg']).removeprefix('Value error, ')}"
    return str(exc).splitlines()[0]


def _where(trace: Trace, what: str) -> str:
    return f"{trace.path}: {what}"


class _MissingFrame(HarnessError):
    """A sample's frame the sidecar does not hold whole (the sample is left out, with this line)."""


class _Sidecars:
    """The frames sidecars of one trace (by file name, beside the trace), each frame read on its own when a
    record names it (:class:`FrameReader`): a damaged frame, or one that does not hold what its record says,
    leaves out that sample alone (:class:`_MissingFrame`), never the others."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        self._files: dict[str, FrameReader | FramesError] = {}

    def payload(self, record: SampleRecord, field: str, ref: Mapping[str, Any]) -> bytes:
        trace = self._trace
        name = record.out.get("framesFile")
        if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
            raise HarnessError(
                _where(trace, f"{record.label}: {field}: a frame reference without out.framesFile (a file "
                              "name beside the trace)")
            )  # fmt: skip
        offset = _int(trace, record, f"{field}.offset", ref.get("offset"))
        at = _int(trace, record, f"{field}.at", ref.get("at", 0))
        length = _int(trace, record, f"{field}.length", ref.get("length"))
        got = self._files.get(name)
        if got is None:
            try:
                got = FrameReader(trace.path.parent / name)
            except FramesError as exc:
                got = exc
            self._files[name] = got
        if isinstance(got, FramesError):
            raise _MissingFrame(got.message)
        try:
            frame = got.at_offset(offset)
        except FramesError as exc:
            raise _MissingFrame(f"{field}: {exc.message}") from None
        if frame.type != FRAME_SAMPLE:
            raise _MissingFrame(f"{field}: the frame at offset {offset} of {name} is of type {frame.type}, "
                                f"not a sample's ({FRAME_SAMPLE})")  # fmt: skip
        if at < 0 or length < 0 or at + length > len(frame.payload):
            raise _MissingFrame(f"{field} names bytes {at}..{at + length} of the frame at offset {offset} of "
                                f"{name}, which holds {len(frame.payload)}")  # fmt: skip
        return frame.payload[at : at + length]


def _bytes(
    trace: Trace, record: SampleRecord, field: str, value: object, sidecars: _Sidecars | None = None
) -> bytes:
    """A byte buffer of a record: a frame reference (resolved in the sidecar) or a base64 string."""
    if isinstance(value, bytes):
        return value  # a sample record of the sidecar (conformance.adapters.capture_records)
    if isinstance(value, dict) and sidecars is not None:
        return sidecars.payload(record, field, value)
    if value is None and sidecars is not None and record.out.get("framesFile") is not None:
        raise _MissingFrame(f"{field}: the probe could not write its frame (a null reference)")
    if not isinstance(value, str):
        raise HarnessError(_where(trace, f"{record.label}: {field} is not a base64 string"))
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise HarnessError(_where(trace, f"{record.label}: {field} is not valid base64")) from None


def _candidate_windows(
    trace: Trace, record: SampleRecord, value: object, sidecars: _Sidecars
) -> list[tuple[int, bytes]]:
    """``out.candidateCode``: a reference to a run of windows in the sample's frame, or a list of {address,
    bytes}."""
    field = "out.candidateCode"
    if isinstance(value, list):
        windows: list[tuple[int, bytes]] = []
        for i, c in enumerate(value):
            c = _obj(trace, record, f"{field}[{i}]", c)
            windows.append(
                (_int(trace, record, f"{field}[{i}].address", c.get("address")),
                 _bytes(trace, record, f"{field}[{i}].bytes", c.get("bytes"), sidecars))
            )  # fmt: skip
        return windows
    if value is None and record.out.get("framesFile") is None:
        return []
    data = _bytes(trace, record, field, value, sidecars)
    count = _int(trace, record, f"{field}.count", _obj(trace, record, field, value).get("count"))
    windows = []
    at = 0
    while at < len(data):
        if len(data) - at < _WINDOW_HEAD.size:
            break
        address, length = _WINDOW_HEAD.unpack_from(data, at)
        at += _WINDOW_HEAD.size
        if len(data) - at < length:
            break
        windows.append((address, data[at : at + length]))
        at += length
    if at != len(data) or len(windows) != count:
        raise _MissingFrame(f"{field}: its frame does not hold {count} whole code windows")
    return windows


def _int(trace: Trace, record: SampleRecord, field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise HarnessError(_where(trace, f"{record.label}: {field} is not an integer"))
    return value


def _obj(trace: Trace, record: SampleRecord, field: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise HarnessError(_where(trace, f"{record.label}: {field} is not an object"))
    return value


def place_of(where: Mapping[str, Any]) -> str:
    """The capture's place from the probe's per-sample hint: ``managed`` (GetFunctionFromIP knew the IP),
    ``helper:runtime`` (:data:`emu.capture.RUNTIME_MODULES`: libcoreclr, libclrjit...), ``helper:stub``
    (executable memory no ELF file holds: stubs, the write-barrier copy, the double-mapped code heap),
    ``native:<module>`` (any other module), ``unknown``."""
    kind = where.get("kind")
    module = where.get("module") if isinstance(where.get("module"), str) else None
    if kind == "managed":
        return "managed"
    if kind == "anonymous-executable" or (module is not None and module.startswith("/memfd:")):
        return "helper:stub"
    if kind == "module" and module:
        if is_runtime_module(module):
            return "helper:runtime"
        stem = module.rsplit("/", 1)[-1].split(".so", 1)[0].lower()
        part = _PLACE_PART.sub("-", stem).strip("-") or "module"
        return f"native:{part[:48]}"
    return "unknown"


def _merge_code(windows: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Non-overlapping code segments from windows; where windows overlap the earlier one's bytes win (the
    first window is the one copied at the instant)."""
    merged: list[tuple[int, bytearray]] = []
    ordered = sorted(range(len(windows)), key=lambda i: windows[i][0])
    for i in ordered:
        start, data = windows[i]
        if not data:
            continue
        if merged and start <= merged[-1][0] + len(merged[-1][1]):
            m_start, m_data = merged[-1]
            end = start + len(data)
            m_end = m_start + len(m_data)
            if end > m_end:
                m_data.extend(data[m_end - start :])
            merged[-1] = (m_start, m_data)
        else:
            merged.append((start, bytearray(data)))
    # the instant's window (index 0) is laid over whatever later reads put in the same bytes
    if windows and windows[0][1]:
        first_start, first = windows[0]
        for m_start, m_data in merged:
            if m_start <= first_start < m_start + len(m_data):
                off = first_start - m_start
                m_data[off : off + len(first)] = first
                break
    return [(s, bytes(d)) for s, d in merged]


@dataclass(frozen=True)
class _Prologues:
    """The first bytes of every JIT map code range (the probe reads them when it writes the map), by start:
    a capture carries those of the methods its code windows fall in, so the unwinder can tell an OSR
    method's prologue from a plain one."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    heads: tuple[bytes, ...] = ()

    def for_windows(self, windows: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        out: dict[int, bytes] = {}
        for address, data in windows:
            for probe in (address, address + max(len(data) - 1, 0)):
                k = bisect.bisect_right(self.starts, probe) - 1
                if k >= 0 and probe < self.ends[k] and self.heads[k]:
                    out[self.starts[k]] = self.heads[k]
        return sorted(out.items())


def _jit_map(trace: Trace) -> tuple[JitMap, dict[str, int], _Prologues]:
    calls = trace.calls(JIT_MAP_CALL)
    if not calls:
        return JitMap(), {}, _Prologues()
    record = SampleRecord.of(calls[-1])
    methods_raw = record.out.get("methods")
    if not isinstance(methods_raw, list):
        raise HarnessError(_where(trace, f"{record.label}: out.methods is not a list"))
    by_fid: dict[int, tuple[str | None, list[tuple[int, int]]]] = {}
    precompiled: set[int] = set()
    osr: set[int] = set()  # the starts of ranges whose recorded first bytes are an OSR method's entry
    heads: dict[int, tuple[int, bytes]] = {}
    for i, m in enumerate(methods_raw):
        m = _obj(trace, record, f"out.methods[{i}]", m)
        fid = _int(trace, record, f"out.methods[{i}].functionId", m.get("functionId"))
        name = m.get("name") if isinstance(m.get("name"), str) and m.get("name") else None
        if m.get("tier") == "r2r":
            precompiled.add(fid)  # ReadyToRun code (JITCachedFunctionSearchFinished), not JIT-compiled
        slot = by_fid.setdefault(fid, (name, []))
        versions = m.get("versions")
        if not isinstance(versions, list):
            raise HarnessError(_where(trace, f"{record.label}: out.methods[{i}].versions is not a list"))
        for j, v in enumerate(versions):
            ranges = _obj(trace, record, f"out.methods[{i}].versions[{j}]", v).get("ranges")
            for k, r in enumerate(ranges if isinstance(ranges, list) else []):
                r = _obj(trace, record, f"out.methods[{i}].versions[{j}].ranges[{k}]", r)
                start = _int(trace, record, "range start", r.get("start"))
                size = _int(trace, record, "range size", r.get("size"))
                if "prologue" in r:
                    head = _bytes(trace, record, f"out.methods[{i}].versions[{j}].ranges[{k}].prologue",
                                  r["prologue"])  # fmt: skip
                    heads[start] = (start + size, head[:size])
                    if is_osr_entry(head[:size]):
                        osr.add(start)
                if size > 0 and (start, size) not in slot[1]:
                    slot[1].append((start, size))
    methods: list[JitMethod] = []
    names: dict[str, list[int]] = {}
    for fid, (name, spans) in sorted(by_fid.items()):
        if not spans:
            continue
        tiered = len(spans) > 1
        # an OSR version (a method with another version, entered by the OSR prologue) is labelled so in the
        # capture (issue 24): the replay unwinds it and the Tier0 frame below it as one frame
        ranges = tuple(
            CodeRange(start=s, end=s + n,
                      tier="r2r" if fid in precompiled else OSR_TIER if tiered and s in osr
                      else f"version{i}" if tiered else "jit")
            for i, (s, n) in enumerate(sorted(spans))
        )  # fmt: skip
        methods.append(JitMethod(function_id=fid, name=name[:1024] if name else None, ranges=ranges))
        if name:
            names.setdefault(name, []).append(fid)
    try:
        jit = JitMap(methods=tuple(methods))
    except ValueError as exc:
        raise HarnessError(_where(trace, f"{record.label}: JIT map: {_first(exc)}")) from None
    unique = {n: fids[0] for n, fids in names.items() if len(fids) == 1}
    order = sorted(heads)
    prologues = _Prologues(
        starts=tuple(order), ends=tuple(heads[a][0] for a in order), heads=tuple(heads[a][1] for a in order)
    )
    return jit, unique, prologues


@dataclass(frozen=True)
class _Phase:
    """One phase the scenario cycles through (its ``capture.stack`` payload's ``phases``)."""

    place: str
    callees: tuple[str, ...]
    prefixes: tuple[str, ...]


def _phases(trace: Trace, seq: int, raw: object) -> dict[int, _Phase]:
    if raw is None:
        return {}
    where = f"seq {seq}: mark {KNOWN_STACK_MARK} payload.phases"
    if not isinstance(raw, list):
        raise HarnessError(_where(trace, f"{where} is not a list"))
    out: dict[int, _Phase] = {}
    for i, p in enumerate(raw):
        if not (isinstance(p, dict) and isinstance(p.get("phase"), int) and isinstance(p.get("place"), str)):
            raise HarnessError(_where(trace, f"{where}[{i}] needs an integer phase and a string place"))
        callees, prefixes = p.get("callees", []), p.get("calleePrefixes", [])
        if not all(isinstance(c, str) and c for c in [*callees, *prefixes]):
            raise HarnessError(_where(trace, f"{where}[{i}]: callees and calleePrefixes are lists of names"))
        out[p["phase"]] = _Phase(place=p["place"], callees=tuple(callees), prefixes=tuple(prefixes))
    return out


def _known_frames(
    trace: Trace, target: str, fid_by_name: Mapping[str, int]
) -> tuple[tuple[KnownFrame, ...] | None, dict[int, _Phase]]:
    """The scenario's known frames of ``target`` (leaf first) and the phases it declares."""
    for mark in reversed(trace.marks(KNOWN_STACK_MARK)):
        if mark.payload is None:
            continue
        try:
            payload = json.loads(mark.payload)
        except json.JSONDecodeError:
            raise HarnessError(
                _where(trace, f"seq {mark.seq}: mark {KNOWN_STACK_MARK} payload is not JSON")
            ) from None
        if not isinstance(payload, dict) or payload.get("name") != target:
            continue
        stack = payload.get("stack")
        if not isinstance(stack, list):
            raise HarnessError(
                _where(trace, f"seq {mark.seq}: mark {KNOWN_STACK_MARK} payload.stack is not a list")
            )
        frames: list[KnownFrame] = []
        own_module: object = None
        for f in stack:
            if not isinstance(f, dict) or not f.get("method"):
                continue
            # The scenario's own frames (its module, JIT-compiled, in the JIT map), leaf first, up to the
            # first frame of another module: below them the runtimes differ (3.1's reflection shows
            # CoreLib's ReadyToRun thread-start frames, 8.0's does not); those are not the scenario's own.
            if own_module is None:
                own_module = f.get("module")
            elif f.get("module") != own_module:
                break
            name = f"{f.get('type') or '?'}::{f['method']}"
            frames.append(KnownFrame(function_id=fid_by_name.get(name), name=name[:1024]))
        return tuple(frames), _phases(trace, mark.seq, payload.get("phases"))
    return None, {}


def _registers(
    trace: Trace, record: SampleRecord, regs: Mapping[str, Any], fs_fallback: int | None
) -> X64Registers:
    values: dict[str, int] = {}
    for name in X64Registers.model_fields:
        if name == "arch":
            continue
        value = regs.get(name)
        if name == "fs_base" and value is None:
            value = fs_fallback if fs_fallback is not None else 0
        values[name] = _int(trace, record, f"out.registers.{name}", value)
    try:
        return X64Registers(**values)
    except ValueError as exc:
        raise HarnessError(_where(trace, f"{record.label}: out.registers: {_first(exc)}")) from None


def captures_from_trace(
    trace: Trace, *, runtime: str | None = None, scenario: str | None = None
) -> tuple[list[CaptureSpec], list[str]]:
    """Every ``capture_sample`` record of ``trace`` as a capture, and one line per sample left out.

    ``runtime`` is the version the harness ran (it picks the CONTEXT layout); without it the trace header's
    GetRuntimeInformation answer is used, which .NET Core 3.1 gives as 4.0.30319 (then no CONTEXT is kept)."""
    header = trace.header
    if runtime is None:
        runtime = header.runtime.version if header and header.runtime else None
    layout = runtime_context_layout(runtime) if runtime else None
    maps_calls = trace.calls(MAPS_CALL)
    modules: tuple[ModuleEntry, ...] = ()
    if maps_calls and isinstance(maps_calls[-1].out.get("maps"), str):
        try:
            modules = tuple(parse_maps(maps_calls[-1].out["maps"]))
        except (ValueError, EmuError) as exc:
            raise HarnessError(_where(trace, f"seq {maps_calls[-1].seq}: /proc/self/maps: {exc}")) from None
    jit, fid_by_name, prologues = _jit_map(trace)
    fs_by_tid: dict[int, int] = {}
    for reg in trace.calls(REGISTER_CALL):
        if isinstance(reg.out.get("osTid"), int) and isinstance(reg.out.get("fsBase"), int):
            fs_by_tid[reg.out["osTid"]] = reg.out["fsBase"]
    specs: list[CaptureSpec] = []
    skipped: list[str] = []
    known_cache: dict[str, tuple[tuple[KnownFrame, ...] | None, dict[int, _Phase]]] = {}
    sidecars = _Sidecars(trace)
    records, lost = sample_records(trace)
    skipped.extend(lost)
    # the probe's capture_seed record of each sample (a job given args.seed: docs/seeding.md), by sample
    seeds = {c.args["sample"]: c for c in trace.calls(SEED_CALL) if isinstance(c.args.get("sample"), int)}
    for record in records:
        sample = _int(trace, record, "args.sample", record.args.get("sample"))
        try:
            spec = _capture_of(trace, record, sample, sidecars, layout, runtime, scenario, modules, jit,
                               fid_by_name, prologues, fs_by_tid, known_cache, seeds.get(sample))  # fmt: skip
        except _MissingFrame as exc:
            skipped.append(f"sample {sample}: {exc.message}")
            continue
        if isinstance(spec, str):
            skipped.append(spec)
        else:
            specs.append(spec)
    return specs, skipped


def _capture_of(
    trace: Trace, record: SampleRecord, sample: int, sidecars: _Sidecars, layout: Any, runtime: str | None,
    scenario: str | None, modules: tuple[ModuleEntry, ...], jit: JitMap, fid_by_name: dict[str, int],
    prologues: _Prologues, fs_by_tid: dict[int, int],
    known_cache: dict[str, tuple[tuple[KnownFrame, ...] | None, dict[int, _Phase]]],
    seed_call: CallRecord | None = None,
) -> CaptureSpec | str:  # fmt: skip
    """One sample as a capture, or the line saying why it is left out."""
    header = trace.header
    out = record.out
    target = _obj(trace, record, "args.target", record.args.get("target"))
    target_name = str(target.get("name") or "")
    os_tid = target.get("osTid") if isinstance(target.get("osTid"), int) else None
    stack = _obj(trace, record, "out.stack", out.get("stack"))
    if not stack.get("inRange"):
        return f"sample {sample}: SP outside the registered stack; no stack was copied"
    regs = _registers(trace, record, _obj(trace, record, "out.registers", out.get("registers")),
                      fs_by_tid.get(os_tid) if os_tid is not None else None)  # fmt: skip
    sp = _int(trace, record, "out.stack.sp", stack.get("sp"))
    stack_bytes = _bytes(trace, record, "out.stack.bytes", stack.get("bytes"), sidecars)
    high = stack.get("stackHigh") if isinstance(stack.get("stackHigh"), int) else None
    limit = sp + STACK_CAPTURE_BYTES
    captured_end = limit if high is None else min(limit, high)
    if sp + len(stack_bytes) != captured_end:
        return (
            f"sample {sample}: {len(stack_bytes)} stack bytes, min(SP + 64 KiB, stack end) needs "
            f"{captured_end - sp}"
        )
    stack_info = StackInfo(
        sp=sp, captured_end=captured_end, stack_end=high,
        truncated=high is None or limit < high, segment="stack",
    )  # fmt: skip
    payloads: list[SegmentPayload] = [
        SegmentPayload(name="stack", kind="memory", role="stack", data=stack_bytes, address=sp)
    ]
    code = _obj(trace, record, "out.code", out.get("code"))
    code_bytes = _bytes(trace, record, "out.code.bytes", code.get("bytes"), sidecars)
    windows = [(_int(trace, record, "out.code.address", code.get("address")), code_bytes)]
    windows.extend(_candidate_windows(trace, record, out.get("candidateCode"), sidecars))
    red = stack.get("redZone")
    red_zone = (
        _bytes(trace, record, "out.stack.redZone", red, sidecars)
        if red is not None or out.get("framesFile") is not None else b""
    )  # fmt: skip
    if red_zone and len(red_zone) <= sp:
        # the 128 bytes below SP a leaf function may use (System V red zone), copied at the instant
        payloads.append(SegmentPayload(name="red-zone", kind="memory", role="stack", data=red_zone,
                                       address=sp - len(red_zone)))  # fmt: skip
    windows.extend(prologues.for_windows(windows))  # read after the instant, as candidate code is
    stack_lo, stack_hi = sp - len(red_zone), captured_end
    for n, (addr, data) in enumerate(_merge_code(windows)):
        if addr < stack_hi and stack_lo < addr + len(data):
            continue  # stack words pointing into the stack itself: the stack segment holds those bytes
        payloads.append(
            SegmentPayload(name=f"code-{n}", kind="memory", role="code", data=data, address=addr)
        )
    context: RuntimeContext | None = None
    seed_ref = out.get("seedContext")
    if layout is not None and runtime is not None and isinstance(seed_ref, (str, dict, bytes)):
        seed = _bytes(trace, record, "out.seedContext", seed_ref, sidecars)[: layout.size]
        blob = seed + bytes(layout.size - len(seed))
        payloads.append(SegmentPayload(name="context", kind="blob", role="context", data=blob))
        context = RuntimeContext(runtime=runtime, size=layout.size, segment="context")
    walk = _obj(trace, record, "out.walk", out.get("walk"))
    seed_args: Mapping[str, Any] = seed_call.args if seed_call is not None else record.args
    seed_out: Mapping[str, Any] = seed_call.out if seed_call is not None else {}
    naive_walked = seed_args.get("naiveWalk", True) is not False
    live = _live_walk(trace, record, "out.walk", walk, "naive") if naive_walked else None
    rec_raw = out.get("recovered", seed_out.get("recovered"))
    recovery = _live_recovery(trace, record, rec_raw) if rec_raw is not None else None
    if target_name not in known_cache:
        known_cache[target_name] = _known_frames(trace, target_name, fid_by_name)
    where_raw = out.get("where")
    where: Mapping[str, Any] = where_raw if isinstance(where_raw, dict) else {}
    known, phases = known_cache[target_name]
    place = place_of(where)
    callees: KnownCallees | None = None
    phase_no = out.get("phase")
    if isinstance(phase_no, int) and not isinstance(phase_no, bool) and phases:
        phase = phases.get(phase_no)
        if phase is None:
            raise HarnessError(
                _where(trace, f"{record.label}: phase {phase_no} is not one the scenario declares")
            )
        callees = KnownCallees(phase=phase.place[:64], names=phase.callees, prefixes=phase.prefixes)
        # the scenario's account of what the thread was doing names the helper kind, unless the IP is
        # managed code (then the place is managed, whatever the phase)
        if place != "managed" and phase.place.startswith("helper:"):
            place = _PLACE_PART.sub("-", phase.place.lower()).strip("-").replace("helper-", "helper:", 1)
    # The manifest's cross-checks need its segment table, which the writer fills in: build it unchecked
    # here; write_capture validates the whole (and names the field) before anything is written.
    manifest = CaptureManifest.model_construct(
        place=place,
        scenario=scenario,
        pid=header.pid if header else None,
        tid=os_tid,
        registers=regs,
        context=context,
        stack=stack_info,
        modules=modules,
        jit=jit,
        live=live,
        live_recovery=recovery,
        known_managed=known,
        known_callees=callees,
    )
    return CaptureSpec(sample=sample, manifest=manifest, payloads=tuple(payloads))


def _live_walk(
    trace: Trace, record: SampleRecord, field: str, walk: Mapping[str, Any],
    seed: Literal["naive", "recovered"],
) -> LiveWalk:  # fmt: skip
    frames_raw = walk.get("frames")
    return LiveWalk(
        seed=seed,
        hresult=_int(trace, record, f"{field}.hr", walk.get("hr")),
        frames=tuple(
            LiveFrame(
                function_id=_int(trace, record, "frame funcId", f.get("funcId")),
                ip=_int(trace, record, "frame ip", f.get("ip")),
                sp=f.get("sp") if isinstance(f.get("sp"), int) else None,
            )
            for f in (frames_raw if isinstance(frames_raw, list) else [])
            if isinstance(f, dict)
        ),
    )


def _live_recovery(trace: Trace, record: SampleRecord, raw: object) -> LiveRecovery:
    """The record's out.recovered (``--seed recovered``) as the manifest's ``live_recovery``."""
    rec = _obj(trace, record, "out.recovered", raw)
    try:
        return _recovery_of(trace, record, rec)
    except ValueError as exc:
        raise HarnessError(_where(trace, f"{record.label}: out.recovered: {_first(exc)}")) from exc


def _recovery_of(trace: Trace, record: SampleRecord, rec: Mapping[str, Any]) -> LiveRecovery:
    seed_raw = rec.get("seed")
    seed: RecoveredSeed | None = None
    if seed_raw is not None:
        regs = _obj(trace, record, "out.recovered.seed", seed_raw)
        seed = RecoveredSeed(
            ip=_int(trace, record, "out.recovered.seed.rip", regs.get("rip")),
            sp=_int(trace, record, "out.recovered.seed.rsp", regs.get("rsp")),
            fp=regs.get("rbp") if isinstance(regs.get("rbp"), int) else None,
            function_id=_int(trace, record, "out.recovered.functionId", rec.get("functionId")),
        )
    steps_raw = rec.get("steps")
    steps = []
    for i, st in enumerate(steps_raw if isinstance(steps_raw, list) else []):
        step = _obj(trace, record, f"out.recovered.steps[{i}]", st)
        steps.append(RecoveryStep(
            ip=_int(trace, record, f"out.recovered.steps[{i}].ip", step.get("ip")),
            sp=_int(trace, record, f"out.recovered.steps[{i}].sp", step.get("sp")),
            rule=step.get("rule"),
        ))  # fmt: skip
    walk_raw = rec.get("walk")
    walk = (
        _live_walk(trace, record, "out.recovered.walk", _obj(trace, record, "out.recovered.walk", walk_raw),
                   "recovered")
        if walk_raw is not None else None
    )  # fmt: skip
    return LiveRecovery(
        status=rec.get("status"), reason=rec.get("reason") if isinstance(rec.get("reason"), str) else None,
        path=rec.get("path"),
        steps=tuple(steps), seed=seed, walk=walk,
    )  # fmt: skip


def write_captures(
    trace: Trace, out_dir: Path, *, runtime: str | None = None, scenario: str | None = None, prefix: str = ""
) -> WrittenCaptures:
    """Write every sample of ``trace`` as ``out_dir/<prefix>sample-NNNN.phcap`` (emu's writer)."""
    specs, skipped = captures_from_trace(trace, runtime=runtime, scenario=scenario)
    paths: list[Path] = []
    successes = naive = recovered = recovered_ok = 0
    for spec in specs:
        path = out_dir / f"{prefix}sample-{spec.sample:04d}{CAPTURE_SUFFIX}"
        write_capture(path, spec.manifest, spec.payloads)
        paths.append(path)
        if spec.manifest.live is not None:
            naive += 1
            successes += spec.manifest.live.hresult == 0
        rec = spec.manifest.live_recovery
        if rec is not None:
            recovered += 1
            recovered_ok += rec.walk is not None and rec.walk.hresult == 0
    return WrittenCaptures(
        paths=tuple(paths), skipped=tuple(skipped), live_successes=successes, live_walks=naive,
        recovered_walks=recovered, recovered_successes=recovered_ok,
    )  # fmt: skip
