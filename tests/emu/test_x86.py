"""x86 (32-bit) captures: real ``gcc -m32`` programs stopped with ptrace replay to the frames the program
knows it had (each frame saying how it was found), the committed x86 captures replay to their expected
frames with no compiler, the seed is an x86 CONTEXT (716 bytes), and hostile x86 files and walks end with
one clear line or a stated stop."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from clr_model.context import CONTEXT_I386, CONTROL, INTEGER, X86_CONTEXT
from emu.capture import (
    MAGIC,
    STACK_CAPTURE_BYTES,
    CaptureArch,
    CodeRange,
    JitMap,
    JitMethod,
    ModuleEntry,
    RuntimeContext,
    SegmentPayload,
    StackInfo,
    X64Registers,
    X86Registers,
    capture_schema,
    read_capture,
    write_capture,
)
from emu.cfi import DWARF_REGISTERS_X86
from emu.errors import CaptureFormatError, EmulationFault
from emu.machine import X86_GDT_PAGE, UnicornMachine
from emu.memory import CaptureMemory
from emu.replay import replay, replay_capture, seed_context
from emu.unwind import StopKind, Trust, unwind
from tests.emu.fixtures import X86
from tests.emu.synth import expect_error

DATA = Path(__file__).parents[1] / "data" / "captures" / "x86"
needs_gcc32 = pytest.mark.skipif(not X86.compiler_available(), reason="gcc -m32 cannot build here")

# -- synthetic x86 captures ------------------------------------------------------------------------------

CODE = 0x0804_0000  # an anonymous executable page (stubs, or JIT code when in the JIT map)
STACK = 0xBFFF_0000  # a 16 KiB stack mapping
STACK_SIZE = 0x4000
TOP = STACK + STACK_SIZE - 0x1000  # default esp
FID = 0x4321


def write32(
    path: Path,
    *,
    code: bytes,
    stack_words: Sequence[int],
    code_at: int = CODE,
    esp: int = TOP,
    eip: int | None = None,
    regs: dict[str, int] | None = None,
    managed: bool = False,
    extra: Sequence[SegmentPayload] = (),
    **more: Any,
) -> Path:
    """An x86 capture whose stack runs from ``esp`` to the stack end, holding ``stack_words`` (4 bytes each)
    first, and whose code page holds ``code`` at ``code_at``; with ``managed`` the page's first 0x100 bytes
    are a JIT method."""
    end = STACK + STACK_SIZE
    stack = b"".join(w.to_bytes(4, "little") for w in stack_words)
    stack += bytes(end - esp - len(stack))
    jit = JitMap(
        methods=(
            JitMethod(function_id=FID, name="Synth32.M", ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),
        )
    )
    fields: dict[str, Any] = {
        "arch": "x86",
        "place": "helper:stub",
        "registers": X86Registers(esp=esp, eip=eip if eip is not None else code_at, **(regs or {})),
        "stack": StackInfo(
            sp=esp, captured_end=min(esp + STACK_CAPTURE_BYTES, end), stack_end=end,
            truncated=esp + STACK_CAPTURE_BYTES < end, segment="stack",
        ),
        "modules": (
            ModuleEntry(start=CODE, end=CODE + 0x1000, perms="r-xp", anonymous_executable=True),
            ModuleEntry(start=STACK, end=end, perms="rw-p", path="[stack]"),
        ),
        "jit": jit if managed else JitMap(),
        **more,
    }  # fmt: skip
    payloads = [
        SegmentPayload(name="stack", kind="memory", role="stack", address=esp, data=stack),
        SegmentPayload(name="code", kind="memory", role="code", address=code_at, data=code),
        *extra,
    ]
    return write_capture(path, fields, payloads)


def manifest_and_tail(path: Path) -> tuple[dict[str, Any], bytes, int]:
    data = path.read_bytes()
    mlen = struct.unpack_from("<I", data, 12)[0]
    return json.loads(data[20 : 20 + mlen]), data[20 + mlen :], 20 + mlen


def raw_file(manifest: dict[str, Any], tail: bytes, old_start: int) -> bytes:
    """Header + manifest + tail, payload offsets moved so that they still point into the tail."""
    for _ in range(4):
        body = json.dumps(manifest, separators=(",", ":")).encode()
        start = 20 + len(body)
        if start == old_start:
            break
        for seg in manifest["segments"]:
            seg["offset"] += start - old_start
        old_start = start
    return struct.pack("<8sIII", MAGIC, 1, len(body), zlib.crc32(body)) + body + tail


STUB = b"\xb8" + (CODE + 0x10).to_bytes(4, "little") + b"\xff\xe0"  # mov eax, CODE+0x10; jmp eax


@pytest.fixture
def good32(tmp_path: Path) -> Path:
    return write32(tmp_path / "good32.phcap", code=STUB, code_at=CODE + 0x200, stack_words=[0x1111, 0x2222])


# -- the format -----------------------------------------------------------------------------------------


def test_x86_capture_round_trip_keeps_32_bit_registers(good32: Path) -> None:
    cap = read_capture(good32)
    assert cap.manifest.arch is CaptureArch.X86
    regs = cap.manifest.registers
    assert isinstance(regs, X86Registers) and (regs.eip, regs.esp) == (CODE + 0x200, TOP)
    assert regs.general()["eip"] == CODE + 0x200 and "cs" not in regs.general()
    assert cap.segments["stack"][:8] == (0x1111).to_bytes(4, "little") + (0x2222).to_bytes(4, "little")
    assert "X86Registers" in json.dumps(capture_schema())


def test_registers_of_the_other_architecture_are_refused(tmp_path: Path, good32: Path) -> None:
    cap = read_capture(good32)
    fields = cap.manifest.model_dump(mode="python", exclude={"segments"})
    fields["registers"] = X64Registers(rsp=TOP, rip=CODE)
    with pytest.raises(CaptureFormatError, match="registers: x64 registers in an x86 capture"):
        write_capture(tmp_path / "mixed.phcap", fields, [])
    manifest, tail, start = manifest_and_tail(good32)
    manifest["arch"] = "x64"
    expect_error(tmp_path, raw_file(manifest, tail, start), r"manifest: registers: x86 registers in an x64")


def test_x86_context_must_be_716_bytes(tmp_path: Path) -> None:
    ctx = X86_CONTEXT.pack({"ContextFlags": CONTEXT_I386 | CONTROL, "Eip": CODE, "Esp": TOP})
    assert len(ctx) == 716
    ok = write32(
        tmp_path / "ctx.phcap", code=STUB, stack_words=[0],
        context=RuntimeContext(runtime="8.0.4", size=716, segment="ctx"),
        extra=[SegmentPayload(name="ctx", kind="blob", role="context", data=ctx)],
    )  # fmt: skip
    assert read_capture(ok).context_bytes() == ctx
    with pytest.raises(CaptureFormatError, match=r"context.size: 1232 is not sizeof\(CONTEXT\) 716"):
        write32(
            tmp_path / "ctx2.phcap", code=STUB, stack_words=[0],
            context=RuntimeContext(runtime="8.0.4", size=1232, segment="ctx"),
            extra=[SegmentPayload(name="ctx", kind="blob", role="context", data=bytes(1232))],
        )  # fmt: skip


def test_hostile_size_past_the_file_names_file_and_offset(tmp_path: Path, good32: Path) -> None:
    manifest, tail, start = manifest_and_tail(good32)
    manifest["segments"][1]["stored_size"] += 10_000
    expect_error(
        tmp_path,
        raw_file(manifest, tail, start),
        r"offset \d+: segments\.1 \(code\) stored_size \d+ runs past",
    )


def test_hostile_every_truncation_is_one_error_naming_an_offset(tmp_path: Path, good32: Path) -> None:
    data = good32.read_bytes()
    for cut in sorted({*range(0, 40), *range(40, len(data), max(1, len(data) // 61)), len(data) - 1}):
        expect_error(tmp_path, data[:cut], r"offset \d+")


def test_hostile_overlapping_segments(tmp_path: Path, good32: Path) -> None:
    manifest, tail, start = manifest_and_tail(good32)
    manifest["segments"][1]["address"] = manifest["stack"]["sp"] + 4
    expect_error(
        tmp_path, raw_file(manifest, tail, start), "segments: memory segments 'stack' and 'code' overlap"
    )
    manifest, tail, start = manifest_and_tail(good32)
    manifest["segments"][1]["offset"] = manifest["segments"][0]["offset"]
    manifest["segments"][1]["stored_size"] = manifest["segments"][0]["stored_size"]
    expect_error(tmp_path, raw_file(manifest, tail, start), r"offset \d+: .*overlaps the manifest or another")


@pytest.mark.parametrize(
    ("where", "value", "pattern"),
    [
        ("segment", 2**32 - 4, r"segments\.1 \(code\): memory at 0xfffffffc\+0x7 ends above 2\*\*32"),
        ("module", 2**32 + 0x1000, r"modules\.0: ends at 0x100001000, above 2\*\*32"),
        ("esp", 2**32 + 8, r"registers\.esp: "),
        ("jit", 2**32 + 0x100, r"jit: FunctionID 0x4321 has code up to 0x100000100, above 2\*\*32"),
    ],
)
def test_hostile_addresses_near_2_to_the_32(
    tmp_path: Path, good32: Path, where: str, value: int, pattern: str
) -> None:
    manifest, tail, start = manifest_and_tail(good32)
    if where == "segment":
        manifest["segments"][1]["address"] = value
    elif where == "module":
        manifest["modules"][0]["end"] = value
    elif where == "esp":
        manifest["registers"]["esp"] = value
    else:
        manifest["jit"] = {
            "methods": [{"function_id": FID, "ranges": [{"start": 2**32 - 0x100, "end": value}]}]
        }
    expect_error(tmp_path, raw_file(manifest, tail, start), pattern)


# -- the walk on synthetic x86 captures -----------------------------------------------------------------

NOPS = b"\x90" * 0x40


def test_hostile_ebp_cycle_stops_with_a_stated_reason(tmp_path: Path) -> None:
    # managed code; EBP points at a saved EBP equal to itself, with a managed return address above it
    path = write32(
        tmp_path / "cycle.phcap", code=NOPS, managed=True, eip=CODE + 8,
        stack_words=[0, 0, TOP + 8, CODE + 0x20], regs={"ebp": TOP + 8},
    )  # fmt: skip
    t0 = time.monotonic()
    result = replay_capture(path)
    assert time.monotonic() - t0 < 1
    assert result.stop.kind is StopKind.SP_NOT_INCREASING, result.stop.detail
    assert "EBP 0xbfff3008" in result.stop.detail
    assert [f.trust for f in result.frames] == [Trust.CONTEXT, Trust.FRAME_POINTER]
    assert [f.sp for f in result.frames] == [TOP, TOP + 16]


def test_hostile_ebp_near_2_to_the_32_stops(tmp_path: Path) -> None:
    path = write32(
        tmp_path / "high.phcap",
        code=NOPS,
        managed=True,
        eip=CODE + 8,
        stack_words=[0],
        regs={"ebp": 2**32 - 8},
    )
    result = unwind(read_capture(path))
    assert result.stop is StopKind.SP_NOT_INCREASING and "EBP 0xfffffff8" in result.detail
    assert len(result.frames) == 1


def test_ebp_chain_uses_4_byte_words(tmp_path: Path) -> None:
    # [EBP] = caller's EBP, [EBP + 4] = return address into managed code (after a call rel32)
    code = NOPS[:0x10] + b"\xe8\x00\x00\x00\x00" + NOPS[:0x10]
    path = write32(
        tmp_path / "fp.phcap", code=code, managed=True, eip=CODE + 4,
        stack_words=[7, 8, TOP + 0x40, CODE + 0x15], regs={"ebp": TOP + 8},
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert (frames[1].ip, frames[1].sp, frames[1].trust) == (CODE + 0x15, TOP + 16, Trust.FRAME_POINTER)
    assert frames[1].registers["ebp"] == TOP + 0x40 and frames[1].function_id == FID


def test_scan_when_the_ebp_chain_is_broken(tmp_path: Path) -> None:
    code = NOPS[:0x10] + b"\xe8\x00\x00\x00\x00" + NOPS[:0x10]  # a call ending at CODE + 0x15
    path = write32(
        tmp_path / "scan.phcap", code=code, managed=True, eip=CODE + 4,
        stack_words=[7, CODE + 0x15, 0, 1], regs={"ebp": TOP + 0x800},  # EBP above SP, outside the capture
    )  # fmt: skip
    cap = read_capture(path)
    result = unwind(cap)
    assert [f.trust for f in result.frames[:2]] == [Trust.CONTEXT, Trust.SCAN]
    assert (result.frames[1].ip, result.frames[1].sp) == (CODE + 0x15, TOP + 8)


def test_callee_pops_return_at_the_top_frame(tmp_path: Path) -> None:
    # managed code stopped at `ret 16` (x86 callee-pops): the return address is at [ESP]
    code = NOPS[:0x20] + b"\xc2\x10\x00" + NOPS[:0x10]
    path = write32(
        tmp_path / "ret16.phcap", code=code, managed=True, eip=CODE + 0x20,
        stack_words=[CODE + 0x80, 1, 2, 3, 4], regs={"ebp": 0x1234},
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert (frames[1].ip, frames[1].sp, frames[1].trust) == (CODE + 0x80, TOP + 4, Trust.FRAME_POINTER)


def test_stub_reads_tls_through_gs_base_and_tail_jumps(tmp_path: Path) -> None:
    # mov eax, gs:[0x10]; jmp eax -- the TLS slot (in the captured stack) holds a managed address
    tls = TOP + 0x100
    stub = b"\x65\xa1\x10\x00\x00\x00\xff\xe0"
    words = [CODE + 0x40] + [0] * ((tls + 0x10 - TOP) // 4 - 1) + [CODE]
    path = write32(
        tmp_path / "tls.phcap", code=NOPS + NOPS + NOPS + NOPS + stub, managed=True, eip=CODE + 0x100,
        stack_words=words, regs={"gs_base": tls},
    )  # fmt: skip
    # the page's first 0x100 bytes are the managed method; the stub at 0x100 is anonymous code
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames[:2]] == [Trust.CONTEXT, Trust.EMULATED]
    # the emulation stopped at the managed method's first instruction, whose return address is [ESP]
    assert (result.frames[1].ip, result.frames[1].sp) == (CODE + 0x40, TOP + 4)


def test_stub_that_returns_gives_its_caller_directly(tmp_path: Path) -> None:
    # push ebx; pop ebx; ret: the emulation returns into managed code, which is the stub's caller
    stub = b"\x53\x5b\xc3"
    path = write32(
        tmp_path / "ret.phcap", code=NOPS * 4 + stub, managed=True, eip=CODE + 0x100,
        stack_words=[CODE + 0x30, TOP + 0x40], regs={"ebp": TOP + 0x40},
    )  # fmt: skip
    result = unwind(read_capture(path))
    assert [(f.ip, f.sp, f.trust) for f in result.frames[:2]] == [
        (CODE + 0x100, TOP, Trust.CONTEXT), (CODE + 0x30, TOP + 4, Trust.EMULATED),
    ]  # fmt: skip


# -- the 32-bit machine --------------------------------------------------------------------------------


def machine32(code: bytes, **budget: Any) -> UnicornMachine:
    mem = CaptureMemory([(CODE, code), (TOP, bytes(0x100))], writable=[(STACK, STACK + STACK_SIZE)])
    return UnicornMachine(mem, arch="x86", **budget)


def test_machine_32_bit_push_pop_ret() -> None:
    code = b"\x68" + (CODE + 0x40).to_bytes(4, "little") + b"\xc3"  # push CODE+0x40; ret
    run = machine32(code).run(
        {"eip": CODE, "esp": TOP + 0x80}, lambda a: "there" if a == CODE + 0x40 else None
    )
    assert (run.stopped_at, run.instructions, run.registers["esp"]) == (CODE + 0x40, 2, TOP + 0x80)
    assert run.last_instruction == CODE + 5


def test_machine_32_bit_refuses_the_gdt_page_and_loops() -> None:
    code = b"\xa1" + (X86_GDT_PAGE + 8).to_bytes(4, "little")  # mov eax, [GDT + 8]
    with pytest.raises(EmulationFault, match="GDT page"):
        machine32(code).run({"eip": CODE, "esp": TOP + 0x80}, lambda a: None)
    with pytest.raises(EmulationFault, match="budget"):
        machine32(b"\xeb\xfe", max_instructions=500).run({"eip": CODE, "esp": TOP + 0x80}, lambda a: None)


def test_i386_dwarf_register_numbers() -> None:
    # System V i386 psABI, DWARF register number mapping (independent of the x86-64 table)
    assert dict(DWARF_REGISTERS_X86) == {
        0: "eax", 1: "ecx", 2: "edx", 3: "ebx", 4: "esp", 5: "ebp", 6: "esi", 7: "edi", 8: "eip",
    }  # fmt: skip


# -- committed captures of the 32-bit program (no compiler; their frames and callbacks: test_replay.py) ----

COMMITTED = X86.committed


expected = X86.committed_record


@pytest.mark.parametrize("place", COMMITTED)
def test_x86_seed_is_the_first_managed_frame_in_an_x86_context_DSS_19(place: str) -> None:
    exp = expected(place)
    result = replay_capture(DATA / f"fixture32-{place}.phcap", allow_disk=False)
    first = exp["managed"][0]
    frame = exp["frames"][first["index"]]
    seed = result.seed
    assert seed is not None
    assert (seed.frame_index, seed.function_id, seed.ip, seed.sp) == (
        first["index"], exp["known"][0], frame["ip"], frame["sp"],
    )  # fmt: skip
    assert seed.native_frames_skipped == first["index"] and seed.context_size == 716
    ctx = seed_context(seed)
    assert len(ctx) == X86_CONTEXT.size == 716
    X86_CONTEXT.validate(ctx)
    values = X86_CONTEXT.unpack(ctx, ["ContextFlags", "Eip", "Esp", "Ebp"])
    assert values["ContextFlags"] == CONTEXT_I386 | CONTROL | INTEGER
    assert (values["Eip"], values["Esp"]) == (frame["ip"], frame["sp"])
    assert seed.fp is not None and values["Ebp"] == seed.fp


def test_x86_replay_is_deterministic() -> None:
    path = DATA / "fixture32-stub_ret.phcap"
    outputs = {replay_capture(path, allow_disk=False).model_dump_json() for _ in range(200)}
    assert len(outputs) == 1
    cap = read_capture(path)
    assert {replay(cap, allow_disk=False).model_dump_json() for _ in range(20)} == outputs


# -- live: the 32-bit program built, stopped with ptrace and captured here -------------------------------


@needs_gcc32
def test_x86_tracee_registers_are_the_32_bit_ones(program32: Path, tmp_path: Path) -> None:
    """PTRACE_GETREGS (64-bit layout) on a 32-bit tracee: the 32-bit code selector, and gs_base is the TLS
    base (the frames of every place: tests/emu/test_unwind.py)."""
    X86.capture_at(program32, "native", tmp_path / "n.phcap")
    cap = read_capture(tmp_path / "n.phcap")
    assert cap.manifest.arch is CaptureArch.X86
    regs = cap.manifest.registers
    assert isinstance(regs, X86Registers) and regs.cs == 0x23 and regs.gs_base != 0


@needs_gcc32
def test_regenerated_x86_captures_agree_with_the_committed_ones(tmp_path: Path) -> None:
    """Rebuild the committed captures here (new addresses: ASLR) and compare what does not depend on
    where things were mapped: the frames' count, how each is found, which are managed, the known frames."""
    fresh = X86.regenerate(tmp_path, COMMITTED)
    for stopped in fresh:
        place = stopped.place
        new = json.loads((tmp_path / f"fixture32-{place}.expected.json").read_text())
        old = expected(place)
        for key in ("place", "trust", "managed", "known"):
            assert new[key] == old[key], (place, key)
        assert len(new["frames"]) == len(old["frames"])
        result = replay_capture(tmp_path / f"fixture32-{place}.phcap", allow_disk=False)
        assert [(f.ip, f.sp) for f in result.frames[: len(stopped.truth)]] == list(stopped.truth)
        assert (tmp_path / f"fixture32-{place}.phcap").stat().st_size < 64 << 10


def test_without_the_jit_map_the_known_frames_are_not_recovered(tmp_path: Path) -> None:
    """The recovery verdict can fail: the same stack without the JIT map has no managed frame."""
    cap = read_capture(DATA / "fixture32-managed.phcap")
    fields = cap.manifest.model_dump(mode="python", exclude={"segments"})
    fields["jit"] = JitMap()
    payloads = [
        SegmentPayload(name=s.name, kind=s.kind, role=s.role, address=s.address, data=cap.segments[s.name])
        for s in cap.manifest.segments
    ]
    result = replay_capture(write_capture(tmp_path / "nojit.phcap", fields, payloads), allow_disk=False)
    assert result.recovered is False and result.seed is None


@needs_gcc32
def test_a_breakpoint_never_reached_is_one_error_in_bounded_time(program32: Path) -> None:
    import select
    import subprocess

    from emu.errors import EmuError
    from emu.ptrace import Tracee

    proc = subprocess.Popen([str(program32), "plain"], stdout=subprocess.PIPE, env={}, cwd="/")
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 10)[0]
        setup = json.loads(proc.stdout.readline())
        with Tracee.attach(proc.pid) as tracee:
            tracee.set_breakpoint(setup["stub_ret"])  # the returning stub: never called in plain mode
            t0 = time.monotonic()
            with pytest.raises(EmuError, match=rf"^pid {proc.pid}: did not stop within the time allowed$"):
                tracee.cont_until_breakpoint(timeout=0.3)
            assert time.monotonic() - t0 < 5
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
