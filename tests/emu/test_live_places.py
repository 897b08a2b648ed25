"""What the live places taught the unwinder and the replay (issue 8): frameless managed code read from its
prologue, ReadyToRun frames reported at their InlinedCallFrame's address, stubs that read data no capture
holds, .NET 8's memfd code mappings, DW_CFA_GNU_args_size, and recovery of the known frames below the
callees a scenario declares for each phase."""

from __future__ import annotations

from pathlib import Path

import capstone  # type: ignore[import-untyped]
import pytest

from emu.capture import (
    CodeRange,
    JitMap,
    JitMethod,
    KnownCallees,
    ModuleEntry,
    ReadyToRunModule,
    names_a_file,
    read_capture,
)
from emu.replay import recovered_leaf_first, replay
from emu.unwind import Trust, _read_prologue, looks_like_return_address, unwind
from tests.emu.synth import CODE, STACK, STACK_SIZE, with_code, write_synthetic

TOP = STACK + STACK_SIZE - 0x1000  # the synthetic captures' default RSP
NOP = b"\x90"


# -- prologues -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "length", "frame_size", "saved", "sets_fp"),
    [
        (b"\x53\x48\x83\xec\x10" + NOP, 5, 0x18, {"rbx": 0x10}, False),  # push rbx; sub rsp, 0x10
        (b"\x50" + b"\x0f\x1f\x40\x00", 1, 8, {"rax": 0}, False),  # push rax (alignment), then a nop
        (b"\x41\x57\x41\x56\x53\x48\x81\xec\x00\x01\x00\x00", 12, 0x118,
         {"r15": 0x110, "r14": 0x108, "rbx": 0x100}, False),  # push r15; push r14; push rbx; sub rsp, 256
        (b"\x55\x48\x8b\xec", 1, 8, {"rbp": 0}, True),  # push rbp; mov rbp, rsp (JIT)
        (b"\x55\x48\x89\xe5", 1, 8, {"rbp": 0}, True),  # push rbp; mov rbp, rsp (gcc)
        (b"\x55\x53\x48\x8d\x6c\x24\x10", 2, 16, {"rbp": 8, "rbx": 0}, True),  # lea rbp, [rsp+0x10]
    ],
)  # fmt: skip
def test_prologues_are_read_push_by_push(
    code: bytes, length: int, frame_size: int, saved: dict[str, int], sets_fp: bool
) -> None:
    p = _read_prologue(code)
    assert p is not None
    assert (p.length, p.frame_size, dict(p.saved), p.sets_fp) == (length, frame_size, saved, sets_fp)


@pytest.mark.parametrize(
    "code",
    [
        b"\x48\x8b\x45\x00\x50",  # an OSR method's first instruction (mov rax, [rbp]): nothing to learn
        b"\x90\x53",  # anything else first
        b"\x55\x48\x83\xec\x10\xc5\xf8\x77",  # RBP pushed but no frame-pointer set-up seen: not trusted
    ],
)
def test_prologues_that_say_nothing_are_none(code: bytes) -> None:
    assert _read_prologue(code) is None


def two_methods() -> JitMap:
    return JitMap(
        methods=(
            JitMethod(
                function_id=0xA1, name="App::Leafless", ranges=(CodeRange(start=CODE, end=CODE + 0x80),)
            ),
            JitMethod(
                function_id=0xB2, name="App::Caller", ranges=(CodeRange(start=CODE + 0x80, end=CODE + 0x100),)
            ),
        )
    )


def test_a_frameless_managed_method_is_unwound_from_its_prologue(tmp_path: Path) -> None:
    # App::Leafless: push rbx; sub rsp, 0x10; its body; App::Caller calls it at CODE + 0x90 (returns to 0x95)
    code = b"\x53\x48\x83\xec\x10" + NOP * (0x90 - 5) + b"\xe8\x00\x00\x00\x00" + NOP * 0x6B
    caller_rbp = TOP + 0x40
    stack = [0x1111, 0x2222, 0x5555, CODE + 0x95] + [0] * 4 + [0, 0]  # locals, saved rbx, return address
    path = write_synthetic(
        tmp_path / "frameless.phcap", code=code, rip=CODE + 0x20, stack_words=stack, jit=two_methods(),
        regs={"rbp": caller_rbp, "rbx": 0x7777}, place="managed",
    )  # fmt: skip
    result = unwind(read_capture(path))
    first, second = result.frames[0], result.frames[1]
    assert (first.function_id, second.function_id) == (0xA1, 0xB2)  # the caller is not skipped
    assert second.trust is Trust.PROLOGUE
    assert (second.ip, second.sp) == (CODE + 0x95, TOP + 0x20)
    # RBX comes back from its push slot; RBP, which the method never touched, is carried over
    assert (second.registers["rbx"], second.registers["rbp"]) == (0x5555, caller_rbp)


def test_an_interrupted_leaf_with_no_frame_returns_from_the_top_of_the_stack(tmp_path: Path) -> None:
    # App::Leafless is a leaf with no frame: mov rax, rdi; imul rax, rax (the IP after it); its caller's
    # return address is on top of the stack, and RBP still holds the caller's frame pointer
    code = b"\x48\x89\xf8\x48\x0f\xaf\xc0" + NOP * (0x90 - 7) + b"\xe8\x00\x00\x00\x00" + NOP * 0x6B
    path = write_synthetic(
        tmp_path / "leaf.phcap", code=code, rip=CODE + 7, stack_words=[CODE + 0x95, 0, 0, 0],
        jit=two_methods(), regs={"rbp": TOP + 0x40}, place="managed",
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert [(f.function_id, f.trust) for f in frames[:2]] == [(0xA1, Trust.CONTEXT), (0xB2, Trust.PROLOGUE)]
    assert (frames[1].ip, frames[1].sp) == (CODE + 0x95, TOP + 8)


def test_prologue_steps_give_the_frame_as_it_stands_part_way() -> None:
    p = _read_prologue(b"\x55\x53\x48\x83\xec\x10\x48\x8d\x6c\x24\x10")  # push rbp; push rbx; sub; lea
    assert p is not None and p.sets_fp and p.length == 6
    assert [(q.frame_size, dict(q.saved)) for q in (p.upto(0), p.upto(1), p.upto(2), p.upto(6))] == [
        (0, {}),
        (8, {"rbp": 0}),
        (16, {"rbp": 8, "rbx": 0}),
        (0x20, {"rbp": 0x18, "rbx": 0x10}),
    ]


def test_a_method_interrupted_before_its_frame_pointer_is_set_returns_past_what_it_pushed(
    tmp_path: Path,
) -> None:
    # push rbp; sub rsp, 0x10 | lea rbp, [rsp+0x10] (the IP): RBP is still the caller's; 3.1 Tier-0 code
    # interrupted there made the walk skip the caller
    code = b"\x55\x48\x83\xec\x10\x48\x8d\x6c\x24\x10" + NOP * (0x90 - 10) + b"\xe8\x00\x00\x00\x00"
    code += NOP * 0x6B
    caller_rbp = TOP + 0x40
    stack = [0x1111, 0x2222, caller_rbp, CODE + 0x95, 0, 0, 0, 0]  # locals, saved rbp, return address
    path = write_synthetic(
        tmp_path / "inprologue.phcap", code=code, rip=CODE + 5, stack_words=stack, jit=two_methods(),
        regs={"rbp": caller_rbp}, place="managed",
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert [(f.function_id, f.trust) for f in frames[:2]] == [(0xA1, Trust.CONTEXT), (0xB2, Trust.PROLOGUE)]
    assert (frames[1].ip, frames[1].sp, frames[1].registers["rbp"]) == (CODE + 0x95, TOP + 0x20, caller_rbp)


def test_a_method_interrupted_at_its_tail_jump_after_pop_rbp_returns_from_the_top(tmp_path: Path) -> None:
    # push rbp; mov rbp, rsp; mov rdi, rax; pop rbp | jmp rel32 (the IP): 8.0's CastHelpers.StelemRef
    # tail-calls the write barrier so; the frame is gone and RBP is the caller's again
    code = b"\x55\x48\x89\xe5\x48\x89\xc7\x5d\xe9\x00\x00\x00\x00" + NOP * (0x90 - 13)
    code += b"\xe8\x00\x00\x00\x00" + NOP * 0x6B
    caller_rbp = TOP + 0x40
    path = write_synthetic(
        tmp_path / "tailjump.phcap", code=code, rip=CODE + 8, stack_words=[CODE + 0x95, 0, 0, 0],
        jit=two_methods(), regs={"rbp": caller_rbp}, place="managed",
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert [f.function_id for f in frames[:2]] == [0xA1, 0xB2]  # the caller is not skipped
    assert (frames[1].ip, frames[1].sp, frames[1].registers["rbp"]) == (CODE + 0x95, TOP + 8, caller_rbp)


def test_an_interrupted_method_that_moved_rsp_is_not_taken_for_a_frameless_leaf(tmp_path: Path) -> None:
    code = b"\x48\x83\xc4\x08\x90" + NOP * 0xFB  # add rsp, 8: the stack pointer moved; not a leaf
    path = write_synthetic(
        tmp_path / "moved.phcap", code=code, rip=CODE + 4, stack_words=[CODE + 0x95, 0, 0, 0],
        jit=two_methods(), regs={"rbp": TOP + 0x40}, place="managed",
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert len(frames) < 2 or frames[1].trust is not Trust.PROLOGUE


# -- stubs, memfd, CFI -----------------------------------------------------------------------------------


def test_a_stub_reading_data_the_capture_lacks_is_passed_by_scan_with_callee_saved_registers(
    tmp_path: Path,
) -> None:
    # a stub (anonymous code, no unwind information) that loads from an address no capture holds, as the
    # write barrier reads its card table; its return address is on top of the stack
    stub_at = CODE + 0x800
    code = NOP * 0x10 + b"\xe8\x00\x00\x00\x00" + NOP * 0x10  # App::Caller's call ends at CODE + 0x15
    stub = b"\x48\xa1" + (0x1234_0000).to_bytes(8, "little") + b"\xc3"
    jit = JitMap(methods=(JitMethod(function_id=0xB2, name="App::Caller",
                                    ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),))  # fmt: skip
    path = write_synthetic(
        tmp_path / "stub.phcap", code=code + NOP * (0x800 - len(code)) + stub, rip=stub_at,
        stack_words=[CODE + 0x15, 0, 0], jit=jit, regs={"rbp": TOP + 0x40, "rbx": 0x42},
    )  # fmt: skip
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames[:2]] == [Trust.CONTEXT, Trust.SCAN]
    assert result.frames[1].function_id == 0xB2
    assert (result.frames[1].registers["rbp"], result.frames[1].registers["rbx"]) == (TOP + 0x40, 0x42)


def test_a_stub_with_a_frame_pointer_passed_by_scan_gives_its_caller_the_rbp_it_saved(tmp_path: Path) -> None:
    """Code the capture has no unwind information for that set up a frame (the vDSO's clock_gettime:
    ``push rbp; mov rbp, rsp``, then reads its data page, which no capture holds): the return address the
    scan finds is at [rbp + 8], so the caller's RBP is the one saved at [rbp], not the stub's own."""
    stub_at = CODE + 0x800
    code = NOP * 0x10 + b"\xe8\x00\x00\x00\x00" + NOP * 0x10  # App::Caller's call ends at CODE + 0x15
    stub = b"\x55\x48\x89\xe5" + b"\x48\xa1" + (0x1234_0000).to_bytes(8, "little") + b"\x5d\xc3"
    jit = JitMap(methods=(JitMethod(function_id=0xB2, name="App::Caller",
                                    ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),))  # fmt: skip
    path = write_synthetic(
        tmp_path / "framed.phcap", code=code + NOP * (0x800 - len(code)) + stub, rip=stub_at + 4,
        stack_words=[TOP + 0x40, CODE + 0x15, 0, 0], jit=jit, regs={"rbp": TOP, "rbx": 0x42},
    )  # fmt: skip
    result = unwind(read_capture(path))
    assert [f.trust for f in result.frames[:2]] == [Trust.CONTEXT, Trust.SCAN]
    assert (result.frames[1].function_id, result.frames[1].sp) == (0xB2, TOP + 0x10)
    assert (result.frames[1].registers["rbp"], result.frames[1].registers["rbx"]) == (TOP + 0x40, 0x42)


@pytest.mark.parametrize(
    ("path", "is_file"),
    [
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", True),
        ("/memfd:doublemapper (deleted)", False),  # .NET 8's JIT code, stubs and write-barrier copy
        ("[stack]", False),
        (None, False),
    ],
)
def test_memfd_mappings_are_anonymous_executable_memory(path: str | None, is_file: bool) -> None:
    assert names_a_file(path) is is_file
    entry = ModuleEntry(start=0x1000, end=0x2000, perms="r-xs", path=path,
                        anonymous_executable=not is_file)  # fmt: skip
    assert entry.is_file is is_file


def test_cfi_with_gnu_args_size_decodes(tmp_path: Path) -> None:
    """g++ emits DW_CFA_GNU_args_size around calls in try blocks (libcoreclr of 3.1 has it); pyelftools'
    decoder stops at it, so without dropping it no row of such an FDE could be read."""
    import subprocess

    src = tmp_path / "a.cpp"
    src.write_text(
        "struct S { long a[8]; };\nvoid g(S, S);\nvoid h(int);\n"
        "void f(long x) { try { S s{}; s.a[0] = x; g(s, s); } catch (...) { h(1); } }\n",
        encoding="utf-8",
    )
    lib = tmp_path / "a.so"
    subprocess.run(["g++", "-Os", "-fPIC", "-shared", "-o", str(lib), str(src)], check=True)
    from emu.cfi import read_elf, table_for

    info = read_elf(str(lib))
    assert info.eh_frame is not None
    listing = subprocess.run(["readelf", "--debug-dump=frames", str(lib)], capture_output=True, text=True)
    assert "DW_CFA_GNU_args_size" in listing.stdout, "the fixture no longer has DW_CFA_GNU_args_size"
    table = table_for(info.eh_frame, info.eh_frame_vaddr, info.eh_frame_hdr, info.eh_frame_hdr_vaddr)
    f_start, f_size = next((a, n) for a, n, name in info.symbols if name == "_Z1fl")
    rows = [table.row_for(pc) for pc in range(f_start, f_start + f_size)]
    assert all(r is not None for r in rows)


# -- recovery of the known frames ------------------------------------------------------------------------


NAMES = {1: "App::Area", 2: "App::Dispatch", 3: "App::Work", 4: "App::Deep", 9: "System.GC::Collect"}


@pytest.mark.parametrize(
    ("managed", "callees", "recovered"),
    [
        ([3, 4, 4], None, True),  # the known frames on top
        ([2, 3, 4, 4], None, False),  # something above them and no callee declared
        ([1, 2, 3, 4, 4], KnownCallees(names=("App::Area", "App::Dispatch")), True),
        ([9, 9, 3, 4, 4], KnownCallees(prefixes=("System.GC::",)), True),
        ([9, 2, 3, 4, 4], KnownCallees(prefixes=("System.GC::",)), False),  # an undeclared frame between
        ([2, 4, 4], KnownCallees(names=("App::Dispatch",)), False),  # Work skipped: not recovered
        ([1, 3, 4], KnownCallees(names=("App::Area",)), False),  # one Deep missing
    ],
)
def test_known_frames_are_recovered_below_declared_callees_only(
    managed: list[int], callees: KnownCallees | None, recovered: bool
) -> None:
    assert recovered_leaf_first([3, 4, 4], managed, NAMES, callees) is recovered


def test_a_frame_without_a_name_is_never_a_declared_callee() -> None:
    assert not KnownCallees(prefixes=("System.",)).allows(None)
    assert KnownCallees(prefixes=("System.",)).allows("System.GC::Collect")


def test_a_ready_to_run_frame_below_native_code_is_reported_at_its_inlined_call_frame(tmp_path: Path) -> None:
    # ReadyToRun App::Collect: `call [PInvokeBegin]` ends at 0x25 (recorded in its InlinedCallFrame), then
    # `call [rax]` into native code ends at 0x34; the native callee (a stub here) returned to 0x34
    image = CODE
    code = bytearray(NOP * 0x100)
    code[0x1F:0x25] = b"\xff\x15\x00\x00\x00\x00"  # call [rip+0]
    code[0x32:0x34] = b"\xff\xd0"  # call rax
    stub = b"\xc3"
    jit = JitMap(
        methods=(
            JitMethod(function_id=0xC3, name="App::Collect", ranges=(CodeRange(start=image, end=image + 0x100),)),  # noqa: E501
        ),
        ready_to_run=(ReadyToRunModule(path="/app/App.dll", start=image, end=image + 0x100),),
    )  # fmt: skip
    stack = [image + 0x34, 0x1, image + 0x25, 0x2, 0, 0, 0, 0]  # return address, then the frame's locals
    path = write_synthetic(
        tmp_path / "r2r.phcap", code=bytes(code) + NOP * (0x800 - 0x100) + stub, rip=image + 0x800,
        stack_words=stack, jit=jit, regs={"rbp": TOP + 0x20},
    )  # fmt: skip
    result = replay(read_capture(path))
    frame = result.frames[1]
    assert (frame.function_id, frame.ip, frame.reported_ip) == (0xC3, image + 0x34, image + 0x25)
    # the model's callback for that frame carries the address the runtime reports
    assert next((c.func_id, c.ip) for c in result.model.callbacks if c.func_id) == (0xC3, image + 0x25)


def test_module_code_with_no_fde_at_the_top_is_passed_by_scan(tmp_path: Path) -> None:
    """The runtime's hand-written helpers (an 8.0 dispatch helper in libcoreclr) have no FDE: interrupted
    there, the walk finds the caller by scan instead of stopping; a return address there still stops."""
    import subprocess

    from emu.cfi import read_elf

    src = tmp_path / "helper.c"
    src.write_text("int helper(int x) { return x * 3 + 1; }\n", encoding="utf-8")
    lib = tmp_path / "libhelper.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-fno-asynchronous-unwind-tables", "-Wl,--build-id",
                    "-o", str(lib), str(src)], check=True)  # fmt: skip
    info = read_elf(str(lib))
    base = 0x7E00_0000_0000
    helper = next(a for a, _n, name in info.symbols if name == "helper")
    size = max(o + f for o, _v, f, _m in info.loads)
    module = ModuleEntry(start=base, end=base + ((size + 0xFFF) & ~0xFFF), offset=0, perms="r-xp",
                         path=str(lib), build_id=info.build_id)  # fmt: skip
    code = NOP * 0x10 + b"\xe8\x00\x00\x00\x00" + NOP * 0xEB  # App::Caller's call ends at CODE + 0x15
    jit = JitMap(methods=(JitMethod(function_id=0xB2, name="App::Caller",
                                    ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),))  # fmt: skip
    path = write_synthetic(
        tmp_path / "nofde.phcap", code=code, rip=base + helper, stack_words=[CODE + 0x15, 0, 0], jit=jit,
        regs={"rbp": TOP + 0x40, "rbx": 0x42}, extra_modules=[module],
    )  # fmt: skip
    frames = unwind(read_capture(path)).frames
    assert [f.trust for f in frames[:2]] == [Trust.CONTEXT, Trust.SCAN]
    assert (frames[1].function_id, frames[1].registers["rbx"]) == (0xB2, 0x42)


# -- a top frame inside its inlined P/Invoke's transition -----------------------------------------------

#: JIT-inlined P/Invokes as the bundled runtimes compiled CaptureSampling::Work (bytes from live captures):
#: the InlinedCallFrame's return address stored, the Frame pushed, the Thread's GC mode byte (+0xc) set to
#: 0 (preemptive), the native call, the byte set back to 1 (cooperative), the GC poll, the Frame popped.
#: (code, offset of the call's return address, offsets where the thread runs in preemptive mode)
PINVOKE_80 = bytes.fromhex(
    "488d052400000048898538ffffff488b4580488d8d10ffffff48894810488b4580c6400c00ff1555c10800488b4d80c6410c01"
    "833d36f0857e007406ff153655847e488b7d80488b8d18ffffff48894f10480345c8488945c8"
)  # lea rax,[rip+0x24]; mov [rbp-0xc8],rax; ...; mov byte [rax+0xc],0; call [rip+..]; mov rcx,[rbp-0x80];
#    mov byte [rcx+0xc],1; cmp [rip+..],0; je; call [rip+..]; mov rdi,[rbp-0x80]; ...; mov [rdi+0x10],rcx
PINVOKE_31 = bytes.fromhex(
    "4533dbbf204e000048b8b0f84e6e917f0000488945a8488d051c000000488945c0488d459848894310c6430c0048b8a0fa4e6e"
    "917f0000ff10c6430c0148bff0b5d5e7917f0000833f00740c48bec8d7d4e7917f0000ff16488b7da048897b10"
)  # ...; lea rax,[rip+0x1c]; mov [rbp-0x40],rax; ...; mov byte [rbx+0xc],0; movabs rax,..; call [rax];
#    mov byte [rbx+0xc],1; movabs rdi,..; cmp [rdi],0; je; movabs rsi,..; call [rsi]; mov rdi,[rbp-0x60]; ...


#: a ReadyToRun P/Invoke (3.1's System.GC::Collect calling its QCall): helpers switch the mode, each given
#: the InlinedCallFrame's address, and JIT_PInvokeBegin's return address is the one the Frame records
PINVOKE_R2R = bytes.fromhex(
    "897dd48bf08975d0488dbd78ffffffff159d08c6ff488b059ec5c7ff8b7dd48b75d0ff10488dbd78ffffffff158908c6ff90"
)  # ...; lea rdi,[rbp-0x88]; call [JIT_PInvokeBegin]; mov rax,[..]; mov edi,..; mov esi,..; call [rax];
#    lea rdi,[rbp-0x88]; call [JIT_PInvokeEnd]; nop


@pytest.mark.parametrize(
    ("code", "ret", "slot", "preemptive"),
    [(PINVOKE_80, 0x2B, 0xC8, {0x25, 0x2B, 0x2F}), (PINVOKE_31, 0x39, 0x40, {0x2D, 0x37, 0x39}),
     (PINVOKE_R2R, 0x15, 0x50, {0x15, 0x1C, 0x1F, 0x22, 0x24, 0x2B})],
    ids=["8.0.4", "3.1.23", "ready-to-run"],
)  # fmt: skip
def test_a_top_frame_in_its_pinvokes_preemptive_window_is_reported_at_its_inlined_call_frame(
    tmp_path: Path, code: bytes, ret: int, slot: int, preemptive: set[int]
) -> None:
    """Interrupted in managed code while its thread is still in preemptive mode (past the switch before the
    native call, or back from it before the switch to cooperative mode: a store to the Thread's mode byte,
    or JIT_PInvokeBegin and JIT_PInvokeEnd in ReadyToRun code), the top frame is reported at the return
    address its InlinedCallFrame recorded: the runtime throws the seed of a thread in preemptive mode out
    and walks from that Frame. Anywhere else the frame is reported where it was interrupted."""
    at = CODE + 0x20
    rbp = TOP + 0x100
    words = [0] * 0x22
    words[(rbp - slot - TOP) // 8] = at + ret  # the InlinedCallFrame's m_pCallerReturnAddress
    jit = JitMap(methods=(JitMethod(function_id=0xA1, name="App::Work",
                                    ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),))  # fmt: skip
    x64 = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    offsets = [i.address - at for i in x64.disasm(code, at)]
    assert preemptive < set(offsets) and ret in offsets
    seen = set()
    for off in offsets:
        path = write_synthetic(
            tmp_path / f"at-{off:x}.phcap", code=NOP * 0x20 + code + NOP * (0xE0 - len(code)), rip=at + off,
            stack_words=words, jit=jit, regs={"rbp": rbp},
        )  # fmt: skip
        result = replay(read_capture(path))
        top = result.frames[0]
        assert (top.function_id, top.ip, top.trust) == (0xA1, at + off, Trust.CONTEXT)
        if top.reported_ip is not None:
            assert top.reported_ip == at + ret
            seen.add(off)
        first = next((c.func_id, c.ip) for c in result.model.callbacks if c.func_id)
        assert first == (0xA1, top.reported_ip or top.ip)
    assert seen == preemptive
    # without the recorded return address in the frame nothing tells the transition: no substitution
    path = write_synthetic(tmp_path / "no-icf.phcap", code=NOP * 0x20 + code + NOP * (0xE0 - len(code)),
                           rip=at + ret, stack_words=[0] * 0x22, jit=jit, regs={"rbp": rbp})  # fmt: skip
    assert replay(read_capture(path)).frames[0].reported_ip is None


# -- a funclet ---------------------------------------------------------------------------------------------

FUNCLET = Path(__file__).resolve().parents[1] / "data" / "captures" / "rare" / "8.0.4-finally-funclet.phcap"
#: in that capture: Places::Contend's Tier0 body calls its ``lock`` statement's finally funclet (``call`` at
#: FUNCLET_CALL, returning to FUNCLET_SITE); the funclet (push rbp; sub rsp, 0x10; mov rbp, [rdi]; ...) was
#: in the PGO count helper, returning to FUNCLET_IP, when the signal came
FUNCLET_CALL, FUNCLET_SITE, FUNCLET_START, FUNCLET_IP = (
    0x7F7338024D6A, 0x7F7338024D6F, 0x7F7338024DC4, 0x7F7338024E06,
)  # fmt: skip


def test_DSS_08_a_frame_in_a_funclet_is_reported_at_its_parents_call_site(tmp_path: Path) -> None:
    """Sampled in CI on 8.0.4 (the monitor phase; the recovered-seed walk "not the replay's" once in 120
    samples): the thread in a finally funclet. Its RBP is the parent's frame pointer, so the frame-pointer
    unwind goes from the funclet to the parent's caller; the runtime's walk, seeded at the funclet's frame,
    reported the method once, at the funclet's call site in the parent's body, and went on as the replay
    does. The replay reports the funclet's frame there; with the bytes that make it a funclet changed it
    does not, and the live walk no longer agrees."""
    cap = read_capture(FUNCLET)
    rec = cap.manifest.live_recovery
    assert rec is not None and rec.walk is not None and rec.seed is not None
    assert [(f.function_id, f.ip) for f in rec.walk.frames[:1]] == [(rec.seed.function_id, FUNCLET_SITE)]
    result = replay(cap, allow_disk=False)
    funclet, parent_caller = result.frames[1], result.frames[2]
    # the helper was at its epilogue's first pop (pop rbx; pop r14; pop rbp; ret): run forward, as its CFI
    # also has it there
    assert (funclet.function, funclet.ip, funclet.trust) == (
        "ProfHarness.Places::Contend", FUNCLET_IP, Trust.EPILOGUE,
    )  # fmt: skip
    assert funclet.reported_ip == FUNCLET_SITE
    assert (parent_caller.function, parent_caller.trust) == (
        "ProfHarness.Scenarios.CaptureSampling::Work", Trust.FRAME_POINTER,
    )  # fmt: skip
    first = next((c.func_id, c.ip) for c in result.model.callbacks if c.func_id)
    assert first == (funclet.function_id, FUNCLET_SITE)
    check = result.live_recovery
    assert check is not None
    assert (check.agrees, check.seed_is_replay_seed, check.violations) == (True, True, ())
    for name, at, code in [
        ("not-psp", FUNCLET_START + 5, b"\x48\x89\xe5"),  # mov rbp, rsp: a frame of its own, not the parent's
        ("bigger", FUNCLET_START + 4, b"\x18"),  # sub rsp, 0x18: the call site is not where it allocates
        ("elsewhere", FUNCLET_CALL + 1, (0x10).to_bytes(4, "little")),  # the call goes somewhere else
    ]:
        broken = replay(read_capture(with_code(cap, tmp_path / f"{name}.phcap", at, code)), allow_disk=False)
        assert broken.frames[1].reported_ip is None, name
        assert broken.live_recovery is not None and broken.live_recovery.agrees is False, name


GC_EPILOGUE = Path(__file__).resolve().parents[1] / "data" / "captures" / "rare" / "3.1.23-gc-epilogue.phcap"


def test_an_epilogue_its_fde_leaves_out_is_run_forward() -> None:
    """3.1.23, the GC phase: the thread interrupted after the first pop of GcSlotDecoder::DecodeSlotTable's
    epilogue (libcoreclr+0x247e03: pop r12, r13, r14, r15, rbp, ret). libcoreclr's FDE has no epilogue rows,
    so its CFA there is a word off and its "return address" the saved RBP (the probe's seed recovery, which
    had no epilogue rule then, stopped at it); run forward, the pops and the ret give the caller, a return
    address after a call, and the replay recovers the scenario's frames. Only the interrupted frame can be in
    an epilogue: every frame above it is a return address's, stepped as before."""
    cap = read_capture(GC_EPILOGUE)
    walk = unwind(cap)
    top, caller = walk.frames[:2]
    assert caller.trust is Trust.EPILOGUE
    assert caller.sp == top.sp + 6 * 8
    words = [walk.memory.read_u64(top.sp + 8 * k) for k in range(6)]
    assert [caller.registers[r] for r in ("r12", "r13", "r14", "r15", "rbp")] == words[:5]
    assert caller.ip == words[5] and looks_like_return_address(walk.memory, caller.ip)
    assert Trust.EPILOGUE not in {f.trust for f in walk.frames[2:]}
    rec = cap.manifest.live_recovery
    assert rec is not None and rec.status == "no-managed-frame"  # what the probe's recovery did, before
    assert replay(cap).recovered is True
