"""conformance.adapters.capture on a synthetic trace (no runtime): capture_sample records -> emu files."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from clr_model.context import runtime_context_size
from conformance.adapters.capture import captures_from_trace, place_of, write_captures
from conformance.core.errors import HarnessError
from conformance.core.trace import Trace, read_trace
from emu.capture import STACK_CAPTURE_BYTES, read_capture

SP = 0x7F00_0000_1000
STACK_HIGH = SP + 0x300  # the thread's stack ends 768 bytes above SP: not truncated
IP = 0x5000_0040
JIT = 0x5000_0000
MAPS = (
    "50000000-50010000 r-xp 00000000 00:00 0 \n"
    "7f0000000000-7f0000002000 rw-p 00000000 00:00 0                          [stack]\n"
)
GREGS = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx", "rax",
         "rcx", "rsp", "rip", "efl", "csgsfs", "err", "trapno", "oldmask", "cr2"]  # fmt: skip


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sample(index: int, *, in_range: bool = True, hr: int = 0, stack: bytes | None = None) -> dict[str, Any]:
    regs = {name: i + 1 for i, name in enumerate(GREGS)}
    regs.update(rsp=SP, rip=IP, rbp=SP + 0x40, fs_base=0x7F11_0000_0000)
    stack = stack if stack is not None else bytes(range(256)) * 3
    return {
        "kind": "call", "name": "capture_sample", "experiment": "sample", "hr": 0, "os_tid": 11,
        "args": {"sample": index, "target": {"name": "sampled", "threadId": 77, "osTid": 42},
                 "signal": "SIGPROF", "seed": "naive", "infoFlags": 1, "walk": index},
        "out": {
            "handlerOsTid": 42,
            "registers": regs,
            "stack": {"sp": SP, "inRange": in_range, "stackLow": SP - 0x1000, "stackHigh": STACK_HIGH,
                      "capturedEnd": STACK_HIGH, "bytes": b64(stack)},
            # the instant's window around the IP, then two later reads overlapping it (their bytes lose)
            "code": {"address": IP - 0x40, "bytes": b64(b"\xaa" * 0x80)},
            "candidateCode": [{"address": IP - 0x10, "bytes": b64(b"\xbb" * 0x100)},
                              {"address": JIT + 0x400, "bytes": b64(b"\xcc" * 0x20)}],
            "seedContext": b64(b"\x00" * 0x30 + (0x100003).to_bytes(4, "little") + b"\x00" * (1232 - 0x34)),
            "walk": {"hr": hr, "frameCount": 2,
                     "frames": [{"funcId": 0x1111, "ip": IP, "sp": SP, "inCall": True},
                                {"funcId": 0x2222, "ip": JIT + 0x410, "sp": None, "inCall": True}]},
            "where": {"kind": "managed", "functionId": 0x1111, "module": None},
        },
    }  # fmt: skip


def write_trace(
    path: Path, samples: list[dict[str, Any]], *, version: tuple[int, int, int] = (4, 0, 30319)
) -> Trace:
    known = {"name": "sampled", "stack": [
        {"token": 1, "type": "App.C", "method": "Work", "module": "app.dll"},
        {"token": 2, "type": "App.C", "method": "Run", "module": "app.dll"},
        # 3.1's reflection goes on into CoreLib's ReadyToRun thread start: not the scenario's own frames
        {"token": 3, "type": "System.Threading.ThreadHelper", "method": "ThreadStart",
         "module": "System.Private.CoreLib.dll"},
    ]}  # fmt: skip
    records: list[dict[str, Any]] = [
        {"kind": "header", "probe": "0.1.0", "pid": 1234, "os_tid": 1,
         "runtime": {"clr_type": 2, "major": version[0], "minor": version[1], "build": version[2], "qfe": 0},
         "plan": {}, "context_size": 1232},
        {"kind": "call", "name": "capture_register_thread", "experiment": "register", "hr": 0, "os_tid": 42,
         "args": {"name": "sampled"}, "out": {"osTid": 42, "fsBase": 0x7F11_0000_0000}},
        {"kind": "mark", "name": "capture.stack", "payload": json.dumps(known), "os_tid": 42},
        *samples,
        {"kind": "call", "name": "capture_maps", "experiment": "sample", "hr": 0, "os_tid": 11, "args": {},
         "out": {"maps": MAPS, "taken": "after-sampling"}},
        {"kind": "call", "name": "capture_jit_map", "experiment": "sample", "hr": 0, "os_tid": 11, "args": {},
         "out": {"methods": [
             {"functionId": 0x1111, "reJitId": 0, "name": "App.C::Work",
              "versions": [{"start": JIT, "ranges": [{"start": JIT, "size": 0x100}]}]},
             {"functionId": 0x2222, "reJitId": 0, "name": "App.C::Run",
              "versions": [{"start": JIT + 0x400, "ranges": [{"start": JIT + 0x400, "size": 0x80}]},
                           {"start": JIT + 0x800, "ranges": [{"start": JIT + 0x800, "size": 0x80}]}]},
         ], "withoutCode": 0}},
        {"kind": "end", "os_tid": 1},
    ]  # fmt: skip
    with path.open("w") as fh:
        for seq, rec in enumerate(records):
            fh.write(json.dumps({"seq": seq, **rec}) + "\n")
    return read_trace(path, strict=True)


def test_each_sample_becomes_a_capture_that_reads_back(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "trace.jsonl", [sample(0), sample(1, hr=0x8013135F)])
    written = write_captures(trace, tmp_path / "out", runtime="3.1.23", scenario="capture-sampling")
    assert [p.name for p in written.paths] == ["sample-0000.phcap", "sample-0001.phcap"]
    assert (written.live_successes, written.live_walks, written.skipped) == (1, 2, ())
    cap = read_capture(written.paths[0])
    m = cap.manifest
    assert (m.place, m.scenario, m.pid, m.tid) == ("managed", "capture-sampling", 1234, 42)
    assert (m.registers.rip, m.registers.rsp, m.registers.fs_base, m.registers.cr2) == (
        IP,
        SP,
        0x7F11_0000_0000,
        23,
    )
    # the stack: [SP, min(SP + 64 KiB, stack end)), not truncated since the stack ends first
    assert (m.stack.sp, m.stack.captured_end, m.stack.stack_end, m.stack.truncated) == (
        SP,
        STACK_HIGH,
        STACK_HIGH,
        False,
    )
    assert cap.segments["stack"] == bytes(range(256)) * 3
    # code: the overlapping windows merged into one segment in which the instant's bytes win
    code = [(s.address, cap.segments[s.name]) for s in m.segments if s.role == "code"]
    assert code == [(IP - 0x40, b"\xaa" * 0x80 + b"\xbb" * 0xB0), (JIT + 0x400, b"\xcc" * 0x20)]
    # the CONTEXT in the runtime's size, the live naive-seed walk, the JIT map (no version dropped)
    assert m.context is not None and m.context.size == runtime_context_size("3.1.23") == len(
        cap.segments["context"]
    )
    assert m.live is not None and m.live.seed == "naive" and m.live.hresult == 0
    assert [(f.function_id, f.ip, f.sp) for f in m.live.frames] == [
        (0x1111, IP, SP),
        (0x2222, JIT + 0x410, None),
    ]
    assert {j.function_id: len(j.ranges) for j in m.jit.methods} == {0x1111: 1, 0x2222: 2}
    # the scenario's own known managed frames, leaf first (cut at the first frame of another module, here
    # CoreLib's thread start), with FunctionIDs found by name in the JIT map
    assert m.known_managed is not None
    assert [(k.name, k.function_id) for k in m.known_managed] == [
        ("App.C::Work", 0x1111),
        ("App.C::Run", 0x2222),
    ]
    anon = [e for e in m.modules if e.anonymous_executable]
    assert [(e.start, e.end) for e in anon] == [(0x5000_0000, 0x5001_0000)]
    assert read_capture(written.paths[1]).manifest.live.hresult == 0x8013135F  # type: ignore[union-attr]


def test_the_stack_is_truncated_at_64_kib_when_the_stack_goes_on(tmp_path: Path) -> None:
    rec = sample(0, stack=b"\x01" * STACK_CAPTURE_BYTES)
    rec["out"]["stack"]["stackHigh"] = SP + STACK_CAPTURE_BYTES + 0x2000
    trace = write_trace(tmp_path / "trace.jsonl", [rec], version=(8, 0, 4))  # no runtime given: the header's
    m = read_capture(write_captures(trace, tmp_path / "out").paths[0]).manifest
    assert (m.stack.captured_end, m.stack.truncated) == (SP + STACK_CAPTURE_BYTES, True)
    assert m.context is not None and m.context.size == runtime_context_size("8.0.4")


def test_samples_without_a_consistent_stack_are_skipped_with_a_reason(tmp_path: Path) -> None:
    short = sample(1, stack=b"\x00" * 16)
    trace = write_trace(tmp_path / "trace.jsonl", [sample(0, in_range=False), short])
    specs, skipped = captures_from_trace(trace)
    assert specs == []
    assert skipped == [
        "sample 0: SP outside the registered stack; no stack was copied",
        "sample 1: 16 stack bytes, min(SP + 64 KiB, stack end) needs 768",
    ]


def test_bad_bytes_are_one_line_naming_the_trace_and_record(tmp_path: Path) -> None:
    rec = sample(0)
    rec["out"]["stack"]["bytes"] = "not base64!"
    trace = write_trace(tmp_path / "trace.jsonl", [rec])
    with pytest.raises(HarnessError, match=r"trace\.jsonl: seq 3: out\.stack\.bytes is not valid base64$"):
        captures_from_trace(trace)


@pytest.mark.parametrize(
    ("where", "place"),
    [
        ({"kind": "managed", "module": "/memfd:doublemapper (deleted)"}, "managed"),
        ({"kind": "module", "module": "/x/libcoreclr.so"}, "helper:runtime"),
        ({"kind": "module", "module": "/x/libclrgc.so"}, "helper:runtime"),  # emu.capture.RUNTIME_MODULES
        ({"kind": "module", "module": "/x/libclrjit_unix_x64_x64.so"}, "helper:runtime"),
        ({"kind": "module", "module": "/x/libprofharness_probe.so"}, "native:libprofharness_probe"),
        ({"kind": "module", "module": "/memfd:doublemapper (deleted)"}, "helper:stub"),
        ({"kind": "anonymous-executable", "module": None}, "helper:stub"),
        ({"kind": "module", "module": "/lib/x86_64-linux-gnu/libc.so.6"}, "native:libc"),
        ({"kind": "module", "module": "/lib64/ld-linux-x86-64.so.2"}, "native:ld-linux-x86-64"),
        ({"kind": "unmapped", "module": None}, "unknown"),
    ],
)
def test_place_of_the_probe_hint(where: dict[str, Any], place: str) -> None:
    assert place_of(where) == place
