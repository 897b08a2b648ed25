"""The unwinder on real x64 and x86 programs stopped with ptrace (gcc fixtures: ground truth from the
program itself), and on small hostile captures: every walk ends with a stop reason, in bounded time."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emu.capture import ModuleEntry, read_capture
from emu.replay import replay
from emu.unwind import StopKind, Trust, unwind
from tests.emu.fixtures import FIXTURES, X64
from tests.emu.synth import CODE, FID, STACK, STACK_SIZE, rewrite, write_synthetic

needs_gcc = pytest.mark.skipif(not X64.compiler_available(), reason="gcc is not installed")


NATIVE_PLACES = [(fixture.arch, place) for fixture in FIXTURES.values() for place in fixture.places]


@pytest.mark.parametrize(("arch", "place"), NATIVE_PLACES)
def test_replayed_frames_equal_the_programs_own_frames(
    native_program: Callable[[str], Path], tmp_path: Path, arch: str, place: str
) -> None:
    fixture = FIXTURES[arch]  # type: ignore[index]
    stopped = fixture.capture_at(native_program(arch), place, tmp_path / f"{place}.phcap")
    cap = read_capture(tmp_path / f"{place}.phcap")
    assert cap.manifest.arch == arch
    # the thread pointer is the TLS base: glibc's TCB there begins with a pointer to itself
    assert stopped.tcb_self == getattr(cap.manifest.registers, fixture.thread_pointer) != 0
    result = unwind(cap, allow_disk=False)
    got = [(f.ip, f.sp) for f in result.frames]
    n = len(stopped.truth)
    assert got[:n] == list(stopped.truth)
    assert [f.trust.value for f in result.frames[:n]] == fixture.expected_trust(place)
    # past the program's last known frame: the rest of libc's start code and _start, then CFI's undefined
    # return address
    assert result.stop is StopKind.END_OF_STACK, result.detail
    assert 0 < len(result.frames) - n <= 3
    for index, fid, _name in stopped.managed:
        assert result.frames[index].function_id == fid
    assert replay(cap, allow_disk=False).recovered is True


@pytest.mark.parametrize("arch", FIXTURES)
def test_cfi_read_from_the_module_files_when_their_build_id_matches(
    native_program: Callable[[str], Path], tmp_path: Path, arch: str
) -> None:
    fixture = FIXTURES[arch]  # type: ignore[index]
    stopped = fixture.capture_at(native_program(arch), "native", tmp_path / "n.phcap", embed_cfi=False)
    cap = read_capture(tmp_path / "n.phcap")
    assert cap.manifest.cfi == ()
    result = unwind(cap, allow_disk=True)
    assert [(f.ip, f.sp) for f in result.frames[: len(stopped.truth)]] == list(stopped.truth)
    assert unwind(cap, allow_disk=False).stop is StopKind.MODULE_UNAVAILABLE


@needs_gcc
def test_a_module_file_whose_build_id_differs_is_not_used(program: Path, tmp_path: Path) -> None:
    X64.capture_at(program, "native", tmp_path / "n.phcap", embed_cfi=False)
    cap = read_capture(tmp_path / "n.phcap")
    modules = tuple(
        m.model_copy(update={"build_id": "00" * 20}) if m.path == str(program) else m
        for m in cap.manifest.modules
    )
    forged = read_capture(rewrite(cap, tmp_path / "forged.phcap", modules=modules))
    result = unwind(forged, allow_disk=True)
    assert result.stop is StopKind.MODULE_UNAVAILABLE
    assert "build-id" in result.detail and len(result.frames) == 1


def test_frame_limit(tmp_path: Path) -> None:
    deep = Path(__file__).parents[1] / "data" / "captures" / "fixture-deep.phcap"
    result = unwind(read_capture(deep), allow_disk=False, max_frames=5)
    assert result.stop is StopKind.FRAME_LIMIT and len(result.frames) == 5


# -- synthetic captures ----------------------------------------------------------------------------------

NOPS = b"\x90" * 0x40
TOP = STACK + STACK_SIZE - 0x1000  # default rsp of write_synthetic


def test_frame_pointer_cycle_stops(tmp_path: Path) -> None:
    # managed code; RBP points at a saved RBP equal to itself, with a managed return address above it
    path = write_synthetic(
        tmp_path / "cycle.phcap", code=NOPS, managed=True, rip=CODE + 8,
        stack_words=[0, 0, TOP + 0x10, CODE + 0x20], regs={"rbp": TOP + 0x10},
    )  # fmt: skip
    t0 = time.monotonic()
    result = unwind(read_capture(path))
    assert time.monotonic() - t0 < 1
    assert result.stop is StopKind.SP_NOT_INCREASING, result.detail
    assert [f.trust for f in result.frames] == [Trust.CONTEXT, Trust.FRAME_POINTER]
    assert [f.function_id for f in result.frames] == [FID, FID]


def test_ip_zero_ends_the_walk(tmp_path: Path) -> None:
    # managed code at its first instruction: the return address is at [rsp], and it is 0
    path = write_synthetic(tmp_path / "zero.phcap", code=NOPS, managed=True, stack_words=[0])
    result = unwind(read_capture(path))
    assert result.stop is StopKind.IP_ZERO and len(result.frames) == 1


def test_scan_when_the_frame_pointer_chain_is_broken(tmp_path: Path) -> None:
    code = NOPS[:0x10] + b"\xe8\x00\x00\x00\x00" + NOPS[:0x10]  # a call ending at CODE + 0x15
    path = write_synthetic(
        tmp_path / "scan.phcap", code=code, managed=True, rip=CODE + 4,
        stack_words=[7, CODE + 0x15, TOP + 0x40, 0, 0, 0, 0, 0, 0, 1], regs={"rbp": TOP + 0x40},
    )  # fmt: skip
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames[:2]] == [Trust.CONTEXT, Trust.SCAN]
    assert (result.frames[1].ip, result.frames[1].sp) == (CODE + 0x15, TOP + 0x10)


def stub_capture(tmp_path: Path, code: bytes, **kw: object) -> StopKind:
    path = write_synthetic(tmp_path / "stub.phcap", code=code, stack_words=[0], **kw)  # type: ignore[arg-type]
    t0 = time.monotonic()
    result = unwind(read_capture(path))
    assert time.monotonic() - t0 < 2
    assert len(result.frames) == 1 and result.frames[0].trust is Trust.CONTEXT
    return result.stop


def test_stub_jumping_outside_the_capture(tmp_path: Path) -> None:
    code = b"\x48\xb8" + (0x6666_0000).to_bytes(8, "little") + b"\xff\xe0"
    assert stub_capture(tmp_path, code) is StopKind.MEMORY


def test_stub_reading_outside_the_capture(tmp_path: Path) -> None:
    assert stub_capture(tmp_path, b"\x48\xa1" + (0x1234_0000).to_bytes(8, "little")) is StopKind.MEMORY


def test_stub_that_never_returns_exhausts_the_budget(tmp_path: Path) -> None:
    assert stub_capture(tmp_path, b"\xeb\xfe") is StopKind.BUDGET


def test_stub_calling_out_is_not_followed(tmp_path: Path) -> None:
    # the stub at CODE + 0x200 calls the managed function at CODE (call rel32 back by 0x205)
    code = b"\xe8" + (-0x205 & 0xFFFFFFFF).to_bytes(4, "little")
    path = write_synthetic(
        tmp_path / "s.phcap", code=code, code_at=CODE + 0x200, managed=True, stack_words=[0]
    )
    result = unwind(read_capture(path))
    assert result.stop is StopKind.NO_UNWIND_INFO and "calls out" in result.detail


def test_a_return_address_into_code_without_unwind_info(tmp_path: Path) -> None:
    # managed top at its first instruction returns into anonymous non-JIT code: nothing can unwind it
    path = write_synthetic(tmp_path / "r.phcap", code=NOPS, managed=True, stack_words=[CODE + 0x200])
    result = unwind(read_capture(path))
    assert result.stop is StopKind.NO_UNWIND_INFO and len(result.frames) == 2


def test_an_ip_in_no_mapping(tmp_path: Path) -> None:
    path = write_synthetic(tmp_path / "o.phcap", code=NOPS, stack_words=[0], rip=0x5555_0000)
    result = unwind(read_capture(path))
    assert result.stop is StopKind.OUTSIDE_MAPPINGS


def test_module_without_file_on_disk(tmp_path: Path) -> None:
    lib = ModuleEntry(
        start=0x10_0000, end=0x20_0000, perms="r-xp", path="/nonexistent/libx.so", build_id="ab" * 20
    )
    path = write_synthetic(
        tmp_path / "m.phcap", code=NOPS, stack_words=[0], rip=0x10_0100, extra_modules=[lib]
    )
    result = unwind(read_capture(path))
    assert result.stop is StopKind.MODULE_UNAVAILABLE and "/nonexistent/libx.so" in result.detail


def test_ready_to_run_code_is_unwound_by_its_frame_pointer_not_by_cfi(tmp_path: Path) -> None:
    # a file-backed module that is a ReadyToRun image (PE: no .eh_frame), listed in the JIT map's
    # ready_to_run ranges: its frames follow the frame-pointer chain, the file is never opened
    from emu.capture import JitMap, ReadyToRunModule

    r2r = ModuleEntry(start=0x10_0000, end=0x20_0000, perms="r-xp", path="/x/System.Private.CoreLib.dll")
    jit = JitMap(ready_to_run=(ReadyToRunModule(path=r2r.path or "", start=r2r.start, end=r2r.end),))
    path = write_synthetic(
        tmp_path / "r2r.phcap",
        code=NOPS,
        stack_words=[0, 0, 0, CODE + 0x400],
        rip=0x10_0100,
        regs={"rbp": TOP + 0x10},
        extra_modules=[r2r],
        jit=jit,
    )
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames] == [Trust.CONTEXT, Trust.FRAME_POINTER]
    assert result.frames[0].ready_to_run and result.frames[1].ip == CODE + 0x400


PROLOGUE = b"\x55\x48\x89\xe5" + b"\x90" * 8 + b"\x5d\xc3"  # push rbp; mov rbp,rsp; nops; pop rbp; ret


@pytest.mark.parametrize(
    ("offset", "words", "caller_ip", "caller_sp"),
    [
        (0, [CODE + 0x40], CODE + 0x40, TOP + 8),  # first instruction: return address at [rsp]
        (1, [0xAAAA, CODE + 0x40], CODE + 0x40, TOP + 16),  # after push rbp: at [rsp + 8]
        (13, [CODE + 0x40], CODE + 0x40, TOP + 8),  # at ret, after pop rbp: at [rsp]
    ],
)
def test_top_managed_frame_in_its_prologue_or_epilogue(
    tmp_path: Path, offset: int, words: list[int], caller_ip: int, caller_sp: int
) -> None:
    code = PROLOGUE + b"\x90" * 0x30 + b"\xe8\x00\x00\x00\x00" + b"\x90" * 8  # a call ending at CODE + 0x43
    path = write_synthetic(
        tmp_path / "p.phcap", code=code, managed=True, rip=CODE + offset, stack_words=words, regs={"rbp": 1}
    )
    result = unwind(read_capture(path), max_frames=2)
    assert (result.frames[1].ip, result.frames[1].sp) == (caller_ip, caller_sp)
    assert result.frames[1].trust is Trust.FRAME_POINTER
    if offset == 1:
        assert result.frames[1].registers["rbp"] == 0xAAAA


def test_pe_image_without_ready_to_run_ranges_is_unwound_by_its_frame_pointer(tmp_path: Path) -> None:
    # 3.1 captures list no ReadyToRun ranges: CoreLib's executable mapping (a PE image the runtime mapped
    # itself, no build-id) is still ReadyToRun code, walked by the frame-pointer chain, never by CFI
    r2r = ModuleEntry(start=0x10_0000, end=0x20_0000, perms="r-xp", path="/x/System.Private.CoreLib.dll")
    path = write_synthetic(
        tmp_path / "pe.phcap",
        code=NOPS,
        stack_words=[0, 0, 0, CODE + 0x400],
        rip=0x10_0100,
        regs={"rbp": TOP + 0x10},
        extra_modules=[r2r],
    )
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames] == [Trust.CONTEXT, Trust.FRAME_POINTER]
    assert result.frames[0].ready_to_run and result.frames[1].ip == CODE + 0x400


# an OSR method (on-stack replacement): mov rax,[rbp]; push rax; mov rbp,rsp; nops; add rsp,0x20; pop rbp; ret
OSR = bytes.fromhex("488b4500504889e5") + b"\x90" * 8 + bytes.fromhex("4883c4205dc3")
OSR_AT, TIER0_AT = CODE + 0x200, CODE + 0x300
CALLER_RET = CODE + 0x43  # after the call at CODE + 0x3e


@pytest.mark.parametrize("offset", [0, 5, 8, 12])
def test_osr_frame_and_its_tier0_frame_unwind_as_one_frame(tmp_path: Path, offset: int) -> None:
    # stack, from TOP: [OSR frame: saved RBP copy][pseudo return into Tier0][Tier0 locals x2]
    # [Tier0 frame: saved RBP][return into the caller]; the runtime reports the OSR method, then its
    # caller: the Tier0 frame is not a frame of its own
    from emu.capture import CodeRange, JitMap, JitMethod

    caller_rbp = TOP + 0x200
    tier0_rbp = TOP + 0x20
    words = [caller_rbp, TIER0_AT + 0x13, 0x55, 0x66, caller_rbp, CALLER_RET]
    code = bytearray(0x400)
    code[0x3E:0x43] = b"\xe8\x00\x00\x00\x00"
    code[0x30E:0x313] = b"\xe8\x00\x00\x00\x00"  # the Tier0 patchpoint call, returning to TIER0_AT + 0x13
    code[0x200 : 0x200 + len(OSR)] = OSR
    jit = JitMap(
        methods=(
            JitMethod(
                function_id=FID, name="Synth.Caller", ranges=(CodeRange(start=CODE, end=CODE + 0x100),)
            ),
            JitMethod(
                function_id=FID + 1,
                name="Synth.Loop",
                ranges=(
                    CodeRange(start=OSR_AT, end=OSR_AT + 0x100),
                    CodeRange(start=TIER0_AT, end=TIER0_AT + 0x100),
                ),
            ),
        )
    )
    if offset < 8:  # before mov rbp,rsp: RBP is still the Tier0 frame's, the stack top is lower
        rsp, rbp = TOP + (0 if offset == 5 else 8), tier0_rbp  # push rax is at offset 4
    else:
        rsp, rbp = TOP, TOP
    path = write_synthetic(
        tmp_path / "osr.phcap",
        code=bytes(code),
        stack_words=words if rsp == TOP else words[(rsp - TOP) // 8 :],
        rsp=rsp,
        rip=OSR_AT + offset,
        regs={"rbp": rbp},
        jit=jit,
    )
    result = unwind(read_capture(path), max_frames=2)
    assert [f.function_id for f in result.frames] == [FID + 1, FID]
    assert (result.frames[1].ip, result.frames[1].sp) == (CALLER_RET, tier0_rbp + 16)
    assert result.frames[1].registers["rbp"] == caller_rbp
