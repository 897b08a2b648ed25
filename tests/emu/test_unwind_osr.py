"""An OSR frame and the Tier0 frame it continues are one managed frame (issue 24), decided by the JIT map's
label of the code range (``tier="osr"``), not by the code bytes a sample holds nor by a method name seen
twice; genuine recursion (a Tier0 frame of a method calling another version of it) stays two frames.

The runtime's view: an OSR method is never called; the patchpoint helper enters it on top of the Tier0
frame, which it incorporates, and "when an OSR method is active, stack frames will show just that method and
not the Tier0 method" (dotnet/runtime docs/design/features/OsrDetailsAndDebugging.md)."""

from __future__ import annotations

from pathlib import Path

from emu.capture import CodeRange, JitMap, JitMethod, read_capture
from emu.replay import replay
from emu.unwind import OSR_TIER, Trust, unwind
from tests.emu.synth import CODE, FID, STACK, STACK_SIZE, write_synthetic

TOP = STACK + STACK_SIZE - 0x1000  # write_synthetic's default RSP
OSR_AT, TIER0_AT, TIER1_AT = CODE + 0x200, CODE + 0x300, CODE + 0x500
CALLER_RET = CODE + 0x43  # after the call at CODE + 0x3e
#: the OSR method's entry on .NET 8 x64: mov rax,[rbp]; push rax; sub rsp,0x70; lea rbp,[rsp+0x70]; nops
OSR_CODE = bytes.fromhex("488b4500504883ec70488d6c2470") + b"\x90" * 16
#: a plain method: push rbp; mov rbp,rsp; nops
PLAIN_CODE = bytes.fromhex("554889e5") + b"\x90" * 16


def _jit(loop_ranges: tuple[CodeRange, ...]) -> JitMap:
    return JitMap(
        methods=(
            JitMethod(
                function_id=FID, name="Synth.Caller", ranges=(CodeRange(start=CODE, end=CODE + 0x100),)
            ),
            JitMethod(function_id=FID + 1, name="Synth.Loop", ranges=loop_ranges),
        )
    )


def _osr_capture(tmp_path: Path, *, osr_tier: str, code_bytes: bool) -> Path:
    """The thread in the OSR method's body (past its prologue) on top of its Tier0 frame. Stack from TOP:
    [OSR frame: copy of the Tier0 frame's saved RBP][pseudo return into Tier0, after its patchpoint call]
    [Tier0 locals x2][Tier0 frame: saved RBP (the caller's)][return into the caller]. ``code_bytes`` False:
    the sample's copy of the OSR method's page is stale (zeros), as when the probe read the page before the
    JIT wrote the OSR method into it."""
    caller_rbp = TOP + 0x200
    words = [caller_rbp, TIER0_AT + 0x13, 0x55, 0x66, caller_rbp, CALLER_RET]
    code = bytearray(0x600)
    code[0x3E:0x43] = b"\xe8\x00\x00\x00\x00"
    code[0x300 : 0x300 + len(PLAIN_CODE)] = PLAIN_CODE
    code[0x30E:0x313] = b"\xe8\x00\x00\x00\x00"  # the Tier0 patchpoint call, returning to TIER0_AT + 0x13
    if code_bytes:
        code[0x200 : 0x200 + len(OSR_CODE)] = OSR_CODE
    jit = _jit((CodeRange(start=OSR_AT, end=OSR_AT + 0x100, tier=osr_tier),
                CodeRange(start=TIER0_AT, end=TIER0_AT + 0x100, tier="version0")))  # fmt: skip
    return write_synthetic(
        tmp_path / "osr.phcap", code=bytes(code), stack_words=words, rsp=TOP, rip=OSR_AT + 0x18,
        regs={"rbp": TOP}, jit=jit, place="managed",
    )  # fmt: skip


def test_osr_frame_labelled_in_the_jit_map_is_one_frame_with_its_tier0_frame(tmp_path: Path) -> None:
    result = unwind(read_capture(_osr_capture(tmp_path, osr_tier=OSR_TIER, code_bytes=False)), max_frames=2)
    # the OSR method, then the Tier0 method's caller: the Tier0 frame is not a frame of its own
    assert [f.function_id for f in result.frames] == [FID + 1, FID]
    assert (result.frames[1].ip, result.frames[1].sp) == (CALLER_RET, TOP + 0x28 + 8)
    assert result.frames[1].trust is Trust.FRAME_POINTER
    assert result.frames[1].registers["rbp"] == TOP + 0x200


def test_the_replay_reports_the_osr_method_once(tmp_path: Path) -> None:
    result = replay(read_capture(_osr_capture(tmp_path, osr_tier=OSR_TIER, code_bytes=False)), max_frames=2)
    assert [f.function for f in result.frames] == ["Synth.Loop", "Synth.Caller"]


def test_without_the_label_or_the_bytes_the_osr_frame_is_not_recognised(tmp_path: Path) -> None:
    # the label is what decides here: the same capture with the range labelled as a plain code version
    # and no OSR entry bytes unwinds through the pseudo return into the Tier0 code (the method twice)
    result = unwind(read_capture(_osr_capture(tmp_path, osr_tier="version1", code_bytes=False)), max_frames=2)
    assert [f.function_id for f in result.frames] == [FID + 1, FID + 1]
    assert result.frames[1].ip == TIER0_AT + 0x13


def test_osr_entry_bytes_still_decide_for_captures_without_the_label(tmp_path: Path) -> None:
    result = unwind(read_capture(_osr_capture(tmp_path, osr_tier="version1", code_bytes=True)), max_frames=2)
    assert [f.function_id for f in result.frames] == [FID + 1, FID]


def test_tier0_frame_calling_another_version_of_the_same_method_stays_two_frames(tmp_path: Path) -> None:
    # genuine recursion: Loop's Tier0 code calls Loop again, which runs its Tier1 code. Stack from TOP:
    # [Tier1 frame: saved RBP = the Tier0 frame's][return into Tier0 after its call][Tier0 locals x2]
    # [Tier0 frame: saved RBP (the caller's)][return into the caller]
    caller_rbp = TOP + 0x200
    tier0_rbp = TOP + 0x20
    words = [tier0_rbp, TIER0_AT + 0x13, 0x55, 0x66, caller_rbp, CALLER_RET]
    code = bytearray(0x600)
    code[0x3E:0x43] = b"\xe8\x00\x00\x00\x00"
    code[0x300 : 0x300 + len(PLAIN_CODE)] = PLAIN_CODE
    code[0x30E:0x313] = b"\xe8\x00\x00\x00\x00"  # Loop calling Loop, returning to TIER0_AT + 0x13
    code[0x500 : 0x500 + len(PLAIN_CODE)] = PLAIN_CODE
    jit = _jit((CodeRange(start=TIER0_AT, end=TIER0_AT + 0x100, tier="version0"),
                CodeRange(start=TIER1_AT, end=TIER1_AT + 0x100, tier="version1")))  # fmt: skip
    path = write_synthetic(
        tmp_path / "recursion.phcap", code=bytes(code), stack_words=words, rsp=TOP, rip=TIER1_AT + 0x8,
        regs={"rbp": TOP}, jit=jit, place="managed",
    )  # fmt: skip
    result = unwind(read_capture(path), max_frames=3)
    assert [f.function_id for f in result.frames] == [FID + 1, FID + 1, FID]
    assert [f.ip for f in result.frames] == [TIER1_AT + 0x8, TIER0_AT + 0x13, CALLER_RET]


def test_net8_osr_prologue_before_its_rbp_is_set_unwinds_from_the_tier0_rbp(tmp_path: Path) -> None:
    # interrupted in the OSR prologue after ``sub rsp,0x70`` and before ``lea rbp,[rsp+0x70]`` (offset 9):
    # RBP is still the Tier0 frame's, and the OSR method's own locals sit below the pushed copy
    caller_rbp = TOP + 0x200
    words = [0] * 14 + [caller_rbp, TIER0_AT + 0x13, 0x55, 0x66, caller_rbp, CALLER_RET]
    code = bytearray(0x600)
    code[0x3E:0x43] = b"\xe8\x00\x00\x00\x00"
    code[0x200 : 0x200 + len(OSR_CODE)] = OSR_CODE
    code[0x300 : 0x300 + len(PLAIN_CODE)] = PLAIN_CODE
    code[0x30E:0x313] = b"\xe8\x00\x00\x00\x00"
    jit = _jit((CodeRange(start=OSR_AT, end=OSR_AT + 0x100, tier=OSR_TIER),
                CodeRange(start=TIER0_AT, end=TIER0_AT + 0x100, tier="version0")))  # fmt: skip
    path = write_synthetic(
        tmp_path / "osr-prologue.phcap", code=bytes(code), stack_words=words, rsp=TOP - 0x70, rip=OSR_AT + 9,
        regs={"rbp": TOP + 0x20}, jit=jit, place="managed",
    )  # fmt: skip
    result = unwind(read_capture(path), max_frames=2)
    assert [f.function_id for f in result.frames] == [FID + 1, FID]
    assert (result.frames[1].ip, result.frames[1].sp) == (CALLER_RET, TOP + 0x30)
    assert result.frames[1].registers["rbp"] == caller_rbp
