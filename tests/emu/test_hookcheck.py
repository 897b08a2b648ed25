"""emu.hookcheck: the hook checker on hooks built here with gcc (x86 with -m32).

Every planted fault of ``tests/emu/hooks`` is reported with its clause in every one of >= 100 random
states, naming the register, its values before and after and the instruction that changed it; the correct
hooks (the x86 reference hook, ``x86_ok``, ``x64_ok``) are never reported, over several seeds.

Issue 19's misfires, each a fixture: a slow-path (...3WithInfo) hook that calls printf or ICorProfilerInfo
is checked as the runtime calls it (kind ``slow``: calls answered, no FE2-12); an access through a pointer
the emulator never gave (the COR_PRF_ELT_INFO handle's contents, a global only Initialize sets,
thread-local storage) ends the run as not emulated, never FE2-06; EFLAGS status flags changed by
``sub esp``/``add esp`` are a note, never FE2-07.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from conformance.core.paths import NATIVE_DIR
from emu.hookcheck import HookInputError, check_hook, render_text
from emu.hookcheck.build import REFERENCE_X86_SYMBOL, build_hook_library, reference_x86_library
from emu.hookcheck.loader import load_object
from emu.hookcheck.report import HookReport, report_json
from emu.hookcheck.runtime import info_vtable

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (and gcc-multilib for -m32)")

HOOKS = Path(__file__).resolve().parent / "hooks"
RUNS = 100


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hook-cache")


@pytest.fixture(scope="module")
def lib86(cache: Path) -> Path:
    return build_hook_library([HOOKS / "faults_x86.S"], "x86", name="faults_x86", cache_root=cache)


@pytest.fixture(scope="module")
def lib64(cache: Path) -> Path:
    return build_hook_library([HOOKS / "hooks_x64.S"], "x64", name="hooks_x64", cache_root=cache)


@pytest.fixture(scope="module")
def reference86(cache: Path) -> Path:
    return reference_x86_library(cache_root=cache)


@pytest.fixture(scope="module")
def slow64(cache: Path) -> Path:
    return build_hook_library([HOOKS / "slow_x64.S"], "x64", name="slow_x64", cache_root=cache)


@pytest.fixture(scope="module")
def withinfo64(cache: Path) -> Path:
    """C++ WithInfo hooks against the project's own interfaces.h (the vtable as compilers lay it out)."""
    return build_hook_library([HOOKS / "withinfo.cpp"], "x64", name="withinfo", cache_root=cache,
                              includes=[NATIVE_DIR / "include"])


@pytest.fixture(scope="module")
def withinfo86(cache: Path) -> Path:
    return build_hook_library([HOOKS / "withinfo_x86.c"], "x86", name="withinfo_x86", cache_root=cache)


# the planted faults: symbol, clause, register, the instruction that changed it -----------------------

X86_REGISTER_FAULTS = [
    ("x86_clobbers_ebx", "FE2-08", "EBX", "not ebx"),
    ("x86_clobbers_esi", "FE2-08", "ESI", "lea esi, [esi + 1]"),
    ("x86_clobbers_edi", "FE2-08", "EDI", "not edi"),
    ("x86_clobbers_ebp", "FE2-08", "EBP", "lea ebp, [ebp + 4]"),
    ("x86_clobbers_eax", "FE2-07", "EAX", "not eax"),
    ("x86_leaves_df_set", "FE2-07", "DF", "std"),
    ("x86_pushes_x87", "FE2-08", "x87 status word", "fld1"),
    ("x86_changes_fpu_control", "FE2-08", "x87 control word", "fldcw word ptr [esp]"),
    ("x86_clobbers_xmm3", "FE2-08", "XMM3", "paddd xmm3, xmm3"),
    ("x86_changes_mxcsr", "FE2-08", "MXCSR", "ldmxcsr dword ptr [esp]"),
]
X64_REGISTER_FAULTS = [
    *[(f"x64_clobbers_{r}", "FE2-08", r.upper(), f"not {r}")
      for r in ("rbx", "rbp", "r12", "r13", "r14", "r15")],
    ("x64_changes_fpu_control", "FE2-08", "x87 control word", "fldcw word ptr [rsp]"),
    ("x64_changes_mxcsr_control", "FE2-08", "MXCSR control", "ldmxcsr dword ptr [rsp]"),
    ("x64_leaves_df_set", "FE2-08", "DF", "std"),
    ("x64_leaves_x87_value", "FE2-08", "x87 tag word", "fld1"),
]


def _only(report_findings: tuple[object, ...], clause: str) -> None:
    clauses = {f.clause for f in report_findings}  # type: ignore[attr-defined]
    assert clauses == {clause}, clauses


@pytest.mark.parametrize(("symbol", "clause", "register", "instruction"), X86_REGISTER_FAULTS)
def test_FE2_07_08_x86_planted_register_fault_is_reported_in_every_run(
    lib86: Path, symbol: str, clause: str, register: str, instruction: str
) -> None:
    report = check_hook(lib86, symbol, "x86", runs=RUNS)
    assert report.runs == RUNS and report.returned == RUNS
    _only(report.findings, clause)
    found = [f for f in report.findings if f.register_name == register]
    assert len(found) == 1, render_text(report)
    f = found[0]
    assert f.runs == RUNS and f.rule == "register-preserved"
    assert f.before is not None and f.after is not None and f.before != f.after
    assert f.instruction is not None and f.instruction.endswith(f": {instruction}")
    assert f.instruction.startswith(symbol)


@pytest.mark.parametrize(("symbol", "clause", "register", "instruction"), X64_REGISTER_FAULTS)
def test_FE2_08_x64_planted_register_fault_is_reported_in_every_run(
    lib64: Path, symbol: str, clause: str, register: str, instruction: str
) -> None:
    report = check_hook(lib64, symbol, "x64", runs=RUNS)
    assert report.returned == RUNS
    _only(report.findings, clause)
    (f,) = report.findings
    assert (f.register_name, f.runs) == (register, RUNS)
    assert f.before is not None and f.after is not None and f.before != f.after
    assert f.instruction is not None and f.instruction.startswith(symbol)
    assert f.instruction.endswith(f": {instruction}")


def test_FE2_08_x87_push_names_every_changed_x87_register(lib86: Path) -> None:
    report = check_hook(lib86, "x86_pushes_x87", "x86", runs=RUNS)
    names = {f.register_name for f in report.findings}
    assert {"x87 status word", "x87 tag word"} <= names and any(n.startswith("x87 R") for n in names if n)
    assert all(f.instruction == "x86_pushes_x87+0x1a: fld1" for f in report.findings)


@pytest.mark.parametrize(("symbol", "raised", "insn"), [("x86_ret_without_16", 4, "ret"),
                                                        ("x86_ret_12", 16, "ret 0xc")])
def test_FE2_09_x86_wrong_pop_count(lib86: Path, symbol: str, raised: int, insn: str) -> None:
    report = check_hook(lib86, symbol, "x86", runs=RUNS)
    (f,) = report.findings
    assert (f.clause, f.rule, f.register_name, f.runs) == ("FE2-09", "stack-restored", "ESP", RUNS)
    assert f.before is not None and f.after == f.before + raised
    assert f.detail == f"ESP raised by {raised} bytes, expected 20"
    assert f.instruction is not None and f.instruction.endswith(f": {insn}")


def test_FE2_09_x64_stack_restored(lib64: Path) -> None:
    (f,) = check_hook(lib64, "x64_ret_8", "x64", runs=RUNS).findings
    assert (f.clause, f.register_name, f.detail, f.runs) == ("FE2-09", "RSP", "RSP raised by 16 bytes, "
                                                                                  "expected 8", RUNS)


def test_FE2_09_x64_misaligned_stack_at_a_call(lib64: Path) -> None:
    report = check_hook(lib64, "x64_misaligned_call", "x64", runs=RUNS)
    (f,) = report.findings
    assert (f.clause, f.rule, f.runs) == ("FE2-09", "call-alignment", RUNS)
    assert f.instruction is not None and f.instruction.startswith("x64_misaligned_call: call ")
    assert f.instruction.endswith("<record>")
    assert report.returned == RUNS  # the alignment finding does not stop the run


# correct hooks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_hooks_are_never_reported(lib86: Path, lib64: Path, reference86: Path, seed: int) -> None:
    for path, symbol, arch in ((reference86, REFERENCE_X86_SYMBOL, "x86"), (lib86, "x86_ok", "x86"),
                               (lib64, "x64_ok", "x64")):
        report = check_hook(path, symbol, arch, runs=RUNS, seed=seed)  # type: ignore[arg-type]
        assert report.ok and report.returned == RUNS, render_text(report)
        assert render_text(report).endswith("every rule holds")


def test_the_reference_hook_runs_its_helper_through_relocated_pointers(reference86: Path) -> None:
    obj = load_object(reference86, "x86", 0x1000_0000)
    helpers = {name: addr for addr, (name, _) in obj.functions.items()}
    words = {struct.unpack_from("<I", obj.image, i)[0] for i in range(0, len(obj.image) - 3, 4)}
    assert helpers["count_enter"] in words  # R_386_RELATIVE applied at the new base
    report = check_hook(reference86, REFERENCE_X86_SYMBOL, "x86", runs=RUNS)
    assert report.instructions_min > 30  # the helper ran (the hook alone is shorter)


# rules broken while the hook runs ---------------------------------------------------------------------

@pytest.mark.parametrize(("lib", "symbol", "arch"), [("lib86", "x86_loops_forever", "x86"),
                                                     ("lib64", "x64_loops_forever", "x64")])
def test_FE2_10_a_hook_that_loops_forever_ends_with_one_finding(
    request: pytest.FixtureRequest, lib: str, symbol: str, arch: str
) -> None:
    report = check_hook(request.getfixturevalue(lib), symbol, arch, runs=RUNS)  # type: ignore[arg-type]
    (f,) = report.findings
    assert (f.clause, f.rule, f.runs, report.returned) == ("FE2-10", "returns", RUNS, 0)
    assert f.instruction is not None and f.instruction.endswith(f"<{symbol}>")
    assert len(render_text(report).splitlines()) == 4  # summary, count, header, the one finding


@pytest.mark.parametrize(("lib", "symbol", "arch", "insn"),
                         [("lib86", "x86_jumps_to_unmapped", "x86", "jmp eax"),
                          ("lib64", "x64_jumps_to_unmapped", "x64", "jmp rax")])
def test_FE2_06_a_jump_to_an_unmapped_address_ends_with_one_finding(
    request: pytest.FixtureRequest, lib: str, symbol: str, arch: str, insn: str
) -> None:
    report = check_hook(request.getfixturevalue(lib), symbol, arch, runs=RUNS)  # type: ignore[arg-type]
    (f,) = report.findings
    assert (f.clause, f.rule, f.runs, f.target) == ("FE2-06", "memory", RUNS, "0xdead0000")
    assert f.detail == "jumps to unmapped memory at 0xdead0000"
    assert f.instruction is not None and f.instruction.endswith(insn)


@pytest.mark.parametrize(("lib", "symbol", "arch", "where"),
                         [("lib86", "x86_writes_caller_frame", "x86", "SP+0x18"),
                          ("lib64", "x64_writes_caller_frame", "x64", "SP+0x10")])
def test_FE2_06_a_write_above_the_frame_is_reported(
    request: pytest.FixtureRequest, lib: str, symbol: str, arch: str, where: str
) -> None:
    (f,) = check_hook(request.getfixturevalue(lib), symbol, arch, runs=RUNS).findings  # type: ignore[arg-type]
    assert (f.clause, f.runs) == ("FE2-06", RUNS)
    assert f.detail.endswith(f"in the caller's frame at entry {where}")


@pytest.mark.parametrize(("lib", "symbol", "arch"), [("lib86", "x86_calls_printf", "x86"),
                                                     ("lib64", "x64_calls_printf", "x64")])
def test_FE2_12_a_call_out_of_the_object_is_answered_and_told_as_a_note(
    request: pytest.FixtureRequest, lib: str, symbol: str, arch: str
) -> None:
    """A hook that saves what it uses and calls libc breaks no rule: printf calls no managed code. The call is
    answered (the hook returns in every run) and told: what printf does is out of the checker's sight."""
    report = check_hook(request.getfixturevalue(lib), symbol, arch, runs=RUNS)  # type: ignore[arg-type]
    assert report.findings == () and report.returned == RUNS, render_text(report)
    (f,) = report.notes
    assert (f.clause, f.rule, f.target, f.runs, f.note) == ("FE2-12", "stays-in-object", "printf", RUNS, True)
    assert f.instruction is not None and f.instruction.endswith("<printf@plt>")


# determinism and input errors --------------------------------------------------------------------------

def test_a_check_is_deterministic_for_a_seed(lib86: Path) -> None:
    a = report_json(check_hook(lib86, "x86_clobbers_ebx", "x86", runs=20, seed=7))
    assert a == report_json(check_hook(lib86, "x86_clobbers_ebx", "x86", runs=20, seed=7))
    assert a != report_json(check_hook(lib86, "x86_clobbers_ebx", "x86", runs=20, seed=8))


def test_bad_input_is_one_line(tmp_path: Path, lib86: Path, lib64: Path) -> None:
    text = tmp_path / "notelf.so"
    text.write_text("hello\n")
    cases = [
        (tmp_path / "missing.so", "x", "x86", "no such file"),
        (text, "x", "x86", "not an ELF file"),
        (lib64, "x64_ok", "x86", "a 64-bit x64 object, not x86"),
        (lib86, "x86_ok", "x64", "a 32-bit x86 object, not x64"),
        (lib86, "nosuch", "x86", "no symbol 'nosuch'"),
        (lib86, "printf", "x86", "printf is not in the object"),
        (lib86, "message", "x86", "is not in an executable segment"),
    ]
    for path, symbol, arch, message in cases:
        with pytest.raises(HookInputError, match=message) as info:
            check_hook(path, symbol, arch, runs=1)  # type: ignore[arg-type]
        assert "\n" not in info.value.message
    with pytest.raises(HookInputError, match="runs=0"):
        check_hook(lib86, "x86_ok", "x86", runs=0)
    with pytest.raises(HookInputError, match="no hook kind 'naked'"):
        check_hook(lib86, "x86_ok", "x86", kind="naked", runs=1)


# notes: what the runtime does not rely on (issue 19) ---------------------------------------------------

@pytest.mark.parametrize(("symbol", "instructions"), [
    ("x86_clobbers_eflags", {"x86_clobbers_eflags+0x1a: cmc"}),
    # the misfire: a hook that saves everything else; its frame set-up changes the status flags
    ("x86_sub_add_esp", {"x86_sub_add_esp+0x3: sub esp, 0x10", "x86_sub_add_esp+0xd: add esp, 0x10"}),
])
def test_x86_status_flags_changed_are_a_note_never_a_finding(
    lib86: Path, symbol: str, instructions: set[str]
) -> None:
    report = check_hook(lib86, symbol, "x86", runs=RUNS)
    assert report.ok and report.findings == () and report.returned == RUNS, render_text(report)
    assert report.notes and {n.instruction for n in report.notes} <= instructions
    assert all((n.clause, n.register_name, n.note) == ("FE2-07", "EFLAGS status flags", True)
               for n in report.notes)
    assert sum(n.runs for n in report.notes) > RUNS // 2  # random flags at entry: most runs change them
    text = render_text(report)
    assert "every rule holds" in text and f"{len(report.notes)} note(s)" in text


# kinds: how the runtime calls the hook -----------------------------------------------------------------

@pytest.mark.parametrize(("kind", "clobbered"), [("enter2", set()), ("fast", {"FE2-07", "FE2-08"})])
def test_FE2_12_a_hook_called_from_jit_code_that_calls_printf(
    slow64: Path, kind: str, clobbered: set[str]
) -> None:
    """The call is answered as an ordinary one (an FE2-12 note), so the registers printf may change are judged
    across it: a FunctionEnter3 hook (fast) must keep them and this one does not save them."""
    report = check_hook(slow64, "calls_printf", "x64", kind=kind, runs=RUNS)
    assert report.kind == kind and {f.clause for f in report.findings} == clobbered
    assert all(f.register_name for f in report.findings)
    (call,) = [n for n in report.notes if n.rule == "stays-in-object"]
    assert (call.clause, call.target, call.runs) == ("FE2-12", "printf", RUNS)


def test_a_slow_path_hook_that_calls_printf_is_an_ordinary_c_function(slow64: Path) -> None:
    """The misfire: a WithInfo hook calling printf was FE2-12; the runtime calls it through its own
    register-saving stub, so the call is emulated (returning 0, which the hook checks)."""
    report = check_hook(slow64, "calls_printf", "x64", kind="slow", runs=RUNS)
    assert report.ok and report.kind == "slow" and report.returned == RUNS, render_text(report)
    assert report.notes == () and report.not_emulated == 0


@pytest.mark.parametrize(("symbol", "clause", "detail", "instruction"), [
    ("clobbers_rbx_after_printf", "FE2-08", "RBX not preserved", "clobbers_rbx_after_printf+0x12: not rbx"),
    ("printf_misaligned", "FE2-09", "RSP + 8 = 8 (mod 16) at the callee's entry",
     "printf_misaligned+0x9: call 0x7f3a00001030 <printf@plt>"),
    ("uses_rcx_after_printf", "FE2-06", "read of 8 byte(s) through RCX as printf left it (a register a call "
     "may change: garbage after the call)", "uses_rcx_after_printf+0x16: mov rax, qword ptr [rcx]"),
])
def test_a_slow_path_hook_keeps_the_system_v_rules_across_emulated_calls(
    slow64: Path, symbol: str, clause: str, detail: str, instruction: str
) -> None:
    report = check_hook(slow64, symbol, "x64", kind="slow", runs=RUNS)
    (f,) = report.findings
    assert (f.clause, f.detail, f.instruction) == (clause, detail, instruction), render_text(report)
    assert f.runs >= RUNS and report.not_emulated == 0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("symbol", ["withinfo_enter", "withinfo_leave", "withinfo_tailcall"])
def test_withinfo_hooks_get_their_info_calls_answered(withinfo64: Path, symbol: str, seed: int) -> None:
    """C++ hooks calling GetFunctionEnter3Info (double pass), GetFunctionLeave3Info,
    GetFunctionTailcall3Info, GetFunctionInfo, QueryInterface, Release and printf through the pointer only
    Initialize sets: every answer is what the hook checks for (a wrong one would be FE2-06)."""
    report = check_hook(withinfo64, symbol, "x64", kind="slow", runs=RUNS, seed=seed)
    assert report.ok and report.returned == RUNS and report.not_emulated == 0, render_text(report)
    assert report.info_pointers == (f"g_info (withinfo.so+{_offset(withinfo64, 'g_info'):#x})",)


def test_an_x86_withinfo_hook_gets_its_info_calls_answered(withinfo86: Path) -> None:
    source = (HOOKS / "withinfo_x86.c").read_text()
    names = [m.name for m in info_vtable()]
    for method, slot in (("Release", 2), ("GetFunctionInfo", 15), ("GetFunctionEnter3Info", 63)):
        constant = "SLOT_" + "".join(f"_{c}" if c.isupper() else c.upper() for c in method).lstrip("_")
        assert f"{constant} = {slot}" in source and names.index(method) == slot
    report = check_hook(withinfo86, "withinfo_enter_x86", "x86", kind="slow", runs=RUNS)
    assert report.ok and report.returned == RUNS and report.not_emulated == 0, render_text(report)


def test_the_checker_learns_which_global_holds_icorprofilerinfo(slow64: Path) -> None:
    """The latest zero loaded before the vtable read faults is a counter's: tried, unused, dropped."""
    report = check_hook(slow64, "learns_info_past_a_counter", "x64", kind="slow", runs=RUNS)
    assert report.ok and report.returned == RUNS and report.not_emulated == 0, render_text(report)
    (where,) = report.info_pointers
    assert where.startswith("info (slow_x64.so+0x")


def test_a_slow_check_is_deterministic_for_a_seed(withinfo64: Path) -> None:
    a = report_json(check_hook(withinfo64, "withinfo_enter", "x64", kind="slow", runs=20, seed=5))
    assert a == report_json(check_hook(withinfo64, "withinfo_enter", "x64", kind="slow", runs=20, seed=5))
    assert '"kind": "slow"' in a


def _offset(lib: Path, symbol: str) -> int:
    obj = load_object(lib, "x64", 0)
    return next(address for address, (name, _) in obj.data.items() if name == symbol)


# not emulated: never a finding (issue 19) -----------------------------------------------------------------

def _not_emulated(report: HookReport, *words: str) -> None:
    assert report.findings == () and report.ok, render_text(report)
    assert report.not_emulated == report.runs and report.emulated == 0 and report.returned == 0
    (why,) = report.not_emulated_reasons
    assert why.runs == report.runs and all(w in why.reason for w in words), why.reason
    assert "no run could be emulated" in render_text(report)


@pytest.mark.parametrize(("kind", "words"), [
    ("slow", ("through the pointer read from the runtime's COR_PRF_ELT_INFO block", "+0x8")),
    ("enter2", ("through clientData",)),  # the misfire: checked as FunctionEnter2, RSI is clientData
    ("fast", ("through RSI at entry",)),
])
def test_reading_through_the_elt_info_handle_is_not_emulated(
    slow64: Path, kind: str, words: tuple[str, ...]
) -> None:
    _not_emulated(check_hook(slow64, "reads_through_elt_info", "x64", kind=kind, runs=RUNS), *words)


@pytest.mark.parametrize("kind", ["enter2", "fast", "slow"])
def test_reading_through_a_global_only_initialize_sets_is_not_emulated(slow64: Path, kind: str) -> None:
    """The misfire: the unmapped read at 0x8 was FE2-06."""
    report = check_hook(slow64, "reads_through_global", "x64", kind=kind, runs=RUNS)
    _not_emulated(report, "read of 8 byte(s) through the pointer read from profiler (slow_x64.so+0x",
                  "a global the profiler sets at run time", "+0x8")
    where = report.not_emulated_reasons[0].instruction
    assert where == "reads_through_global+0x7: mov rax, qword ptr [rax + 8]"


def test_thread_local_storage_the_emulator_did_not_set_up_is_not_emulated(lib86: Path) -> None:
    _not_emulated(check_hook(lib86, "x86_reads_tls", "x86", runs=RUNS), "thread-local storage")
