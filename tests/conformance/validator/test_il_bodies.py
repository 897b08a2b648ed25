"""Issue 25 part 5, the validate side for IL bodies: the proxy records every body a profiler reads and hands
over (proxy/il_bodies.h), and the rule :class:`conformance.validator.il_rules.ILBodies` checks each with the
IL checker against its module's metadata, read from the file the proxy named.

Synthetic recordings (no runtime) show the rule finding a broken body, passing a valid one, leaving alone a
token the module file does not hold, and saying when the runtime refused a body. Live, on both bundled
runtimes: what the proxy records is checked against the app's own file (the bodies the profiler read are the
file's bytes; the bodies it handed over are the allocations it made); the four document-written rewriters of
``profilers/docs/`` (il_branch_mid, il_maxstack_small, il_tiny_over63, il_eh_out_of_range) are each found
with their clause at their own SetILFunctionBody line, and the InvalidProgramException each ends ``ilshapes``
with is tied to that body (VAL-IL-INVALID-PROGRAM); the same rewriter without the mistake (il_rewriter_once)
is clean. What is expected comes from the fixtures' sources and the app's file, never from the validator.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clr_model import il
from clr_model.il_asm import Ins, Label, assemble, encode_body
from clr_model.il_metadata import Assembly
from conformance.core import runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator import api as validator
from conformance.validator.il_rules import CONTROL_SET_IL, FUZZ_MODULE_MARK, MODULE_MARK, SET_IL, TIE
from conformance.validator.report import render_text
from conformance.validator.result import ValidationResult
from conformance.validator.rules import check_recording
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_fixture
from tests.conformance.validator.test_docs_fixtures import APPS, DOCS, apps, validate, versions
from tests.conformance.validator.test_proxy_records import records
from tests.conformance.validator.test_rules import _recording

__all__ = ["apps"]  # the module-scoped fixture, shared

MODULE = 0x7F0000001000
CALLER = 0x1234


def _body_call(name: str, body: bytes, token: int = 0x06000001, *, allocated: bool = True,
               hr: int = 0) -> dict[str, Any]:  # fmt: skip
    ids = {"moduleId": MODULE, "methodid" if name == SET_IL else "methodId": token}
    return {"kind": "call", "name": name, "args": ids, "caller": CALLER, "hr": hr,
            "out": {"body": body.hex(), "allocated": allocated}}  # fmt: skip


def _module(path: str, mark: str = MODULE_MARK) -> dict[str, Any]:
    return {"kind": "mark", "name": mark, "payload": None, "moduleId": MODULE, "path": path}


# ldc.i4 1; brfalse.s <into the next ldc.i4's operand>; ldc.i4 7; pop; ret  (il_branch_mid's guard)
_MID_BRANCH = encode_body(bytes([0x20, 1, 0, 0, 0, 0x2C, 3, 0x20, 7, 0, 0, 0, 0x26, 0x2A]))
_VALID = encode_body(assemble([Ins("ldc.i4.1"), Ins("brfalse.s", "end"), Ins("ldc.i4", 7), Ins("pop"),
                               Label("end"), Ins("ret")])[0])  # fmt: skip


def test_IL_BRANCH_MID_INSTRUCTION_a_broken_body_handed_over_is_found_at_its_call(tmp_path: Path) -> None:
    rec, run = _recording(tmp_path, [_module(str(tmp_path / "absent.dll")), _body_call(SET_IL, _MID_BRANCH)])
    found = [f for f in check_recording(rec, run) if f.clause.startswith("IL-")]
    assert [f.clause for f in found] == ["IL-BRANCH-MID-INSTRUCTION"], found
    assert found[0].records == [2] and "IL_000A" in found[0].message


def _in_parameters(*inside: dict[str, Any]) -> list[dict[str, Any]]:
    """``inside`` within a GetReJITParameters callback, where the function control is used (REJIT-21)."""
    args = {"moduleId": MODULE, "methodId": 0x06000002, "pFunctionControl": 0x5000}
    return [{"kind": "callback", "name": "GetReJITParameters", "phase": "enter", "args": args}, *inside,
            {"kind": "callback", "name": "GetReJITParameters", "phase": "return", "args": args, "hr": 0}]


def test_a_valid_body_is_clean_through_either_interface(tmp_path: Path) -> None:
    control = _in_parameters(_body_call(CONTROL_SET_IL, _VALID, 0x06000002))
    rec, run = _recording(tmp_path, [_body_call(SET_IL, _VALID), *control])
    assert check_recording(rec, run) == []


def test_the_function_control_body_is_checked_too(tmp_path: Path) -> None:
    rec, run = _recording(tmp_path, _in_parameters(_body_call(CONTROL_SET_IL, _MID_BRANCH, 0x06000002)))
    (found,) = check_recording(rec, run)
    assert found.clause == "IL-BRANCH-MID-INSTRUCTION" and CONTROL_SET_IL in found.message


def test_a_body_the_runtime_refused_says_so(tmp_path: Path) -> None:
    rec, run = _recording(tmp_path, [_body_call(SET_IL, _MID_BRANCH, hr=0x80131130)])
    (found,) = check_recording(rec, run)
    assert "refused it: 0x80131130" in found.message


def test_IL_HEADER_TINY_SIZE_needs_the_allocation_length(tmp_path: Path) -> None:
    """A tiny header whose six-bit size wrapped (il_tiny_over63's mistake): blamed when the body came from
    the method allocator (the proxy knows how many bytes were handed over), not otherwise."""
    code = bytes([0x20, 1, 0, 0, 0, 0x26]) + bytes([0x00] * 61) + bytes([0x2A])  # 68 bytes
    wrapped = bytes([(len(code) << 2 | 0x2) & 0xFF]) + code
    rec, run = _recording(tmp_path, [_body_call(SET_IL, wrapped)])
    assert "IL-HEADER-TINY-SIZE" in {f.clause for f in check_recording(rec, run)}
    rec, run = _recording(tmp_path, [_body_call(SET_IL, wrapped[: 1 + (len(code) & 63)], allocated=False)])
    assert "IL-HEADER-TINY-SIZE" not in {f.clause for f in check_recording(rec, run)}


# --- live ---------------------------------------------------------------------------------------------------


def _sites(fixture: str, text: str, after: str | None = None) -> int:
    """The line of ``text`` in the fixture (the first after the line holding ``after``)."""
    lines = (DOCS / f"{fixture}.cpp").read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if after in line) if after else 0
    return next(n for n, line in enumerate(lines[start:], start + 1) if text in line)


_SET = "HRESULT hr = info_->SetILFunctionBody(module, token, body);"


@pytest.mark.live
def test_emitted_tokens_are_left_alone_and_file_tokens_resolved(
    apps: Callable[[str], Path], tmp_path: Path
) -> None:
    """Against the app's own file: a call through a MemberRef row beyond the file's table, and an ldstr of an
    offset past the file's #US heap (both defined at run time: IMetaDataEmit) are no IL-TOKEN; a call
    through a TypeDef token (a table call does not take) is one, and the finding
    names the method by the file's metadata."""
    dll = apps("ilshapes")
    assembly = Assembly(dll.read_bytes())
    beyond = 0x0A000000 | (assembly.rows(0x0A) + 5)
    emitted = encode_body(assemble([Ins("call", beyond), Ins("ret")])[0])
    wrong_table = encode_body(assemble([Ins("call", 0x02000001), Ins("ret")])[0])
    string = 0x70000000 | (assembly.user_strings_size + 8)
    defined_string = encode_body(assemble([Ins("ldstr", string), Ins("pop"), Ins("ldc.i4.0"), Ins("ret")])[0])
    rec, run = _recording(tmp_path, [_module(str(dll)), _body_call(SET_IL, emitted, 0x06000005),
                                     _body_call(SET_IL, wrong_table, 0x06000005),
                                     _body_call(SET_IL, defined_string, 0x06000005)])  # fmt: skip
    found = check_recording(rec, run)
    assert [(f.clause, f.records) for f in found] == [("IL-TOKEN", [3])], found
    assert "Program.Main (0x06000005)" in found[0].message
    # the fake runtime names the assembly with its own mark (fuzz.il.module): the same metadata checks
    (tmp_path / "fuzz").mkdir()
    rec, run = _recording(tmp_path / "fuzz", [_module(str(dll), FUZZ_MODULE_MARK),
                                              _body_call(SET_IL, wrong_table, 0x06000005)])  # fmt: skip
    assert [(f.clause, f.records) for f in check_recording(rec, run)] == [("IL-TOKEN", [2])]


@pytest.fixture(scope="module")
def rewritten(apps: Callable[[str], Path], runtimes: list[Runtime]) -> tuple[ValidationResult, Path]:
    return validate("il_rewriter_once", apps("ilshapes"), runtimes), apps("ilshapes")


@pytest.mark.live
def test_the_proxy_records_the_bodies_read_and_handed_over(rewritten: tuple[ValidationResult, Path]) -> None:
    """il_rewriter_once on ilshapes: each GetILFunctionBody's ``body`` is the method's bytes in the app's
    file; each SetILFunctionBody's is the allocation the profiler's IMethodMalloc::Alloc just made (its
    size, its address); the module mark names a file with the app's bytes; every body is a valid one."""
    result, dll = rewritten
    assembly = Assembly(dll.read_bytes())
    on_disk = {}
    for token, image in assembly.method_bodies():
        body, _ = il.parse_body(bytes(image))
        assert body is not None
        on_disk[token] = bytes(image[: body.size])
    for run in result.runs:
        recs = records(run.trace)
        named = {r["moduleId"]: r for r in recs if r["kind"] == "mark" and r["name"] == MODULE_MARK}
        (module,) = named.values()
        assert Path(module["path"]).read_bytes() == dll.read_bytes()
        reads = [r for r in recs if r["kind"] == "call" and r["name"] == "GetILFunctionBody"]
        assert {r["args"]["methodId"] for r in reads} == set(on_disk), run.runtime
        for r in reads:
            assert bytes.fromhex(r["out"]["body"]) == on_disk[r["args"]["methodId"]]
        allocs = {r["out"]["pointer"]: r["args"]["cb"] for r in recs
                  if r["kind"] == "call" and r["name"] == "IMethodMalloc::Alloc"}  # fmt: skip
        sets = [r for r in recs if r["kind"] == "call" and r["name"] == SET_IL]
        assert len(sets) == len(on_disk) == len(allocs), run.runtime
        for r in sets:
            base, size = r["out"]["allocation"]
            assert r["out"]["allocated"] is True and base == r["args"]["pbNewILMethodHeader"]
            assert allocs[base] == size == len(bytes.fromhex(r["out"]["body"]))


@pytest.mark.live
def test_the_once_rewriter_is_clean(rewritten: tuple[ValidationResult, Path]) -> None:
    result, _ = rewritten
    text = render_text(result)
    assert all(r.outcome == "ok" for r in result.runs) and result.findings == [], text


@pytest.mark.live
@pytest.mark.parametrize(("fixture", "clauses", "method", "after"), [
    ("il_branch_mid", {"IL-BRANCH-MID-INSTRUCTION"}, None, None),
    ("il_maxstack_small", {"IL-MAXSTACK"}, "Program.Add3", None),
    ("il_tiny_over63", {"IL-HEADER-TINY-SIZE", "IL-CODE-TRUNCATED"}, "Program.Mix", "void RewriteTiny("),
    ("il_eh_out_of_range", {"IL-EH-RANGE"}, "Program.Guarded", None),
])  # fmt: skip
def test_IL_a_rewriter_s_broken_body_is_found_at_its_line_and_tied_to_the_exception(
    fixture: str, clauses: set[str], method: str | None, after: str | None,
    apps: Callable[[str], Path], runtimes: list[Runtime],
) -> None:  # fmt: skip
    """Each fixture's mistake is in the bodies it builds (its header comment says which): the clause at its
    SetILFunctionBody call on both runtimes; the app's InvalidProgramException names the method (ilshapes'
    method of that shape) and the note ties it to the same call."""
    result = validate(fixture, apps("ilshapes"), runtimes)
    text = render_text(result)
    line = _sites(fixture, _SET, after)
    il_groups = [g for g in result.findings if g.clause.startswith("IL-")]
    assert {g.clause for g in il_groups} == clauses, text
    for group in il_groups:
        assert group.site is not None and group.site.line == line, text
        assert group.site.file is not None and group.site.file.endswith(f"profilers/docs/{fixture}.cpp")
        assert group.runtimes == versions(runtimes) and group.quote and group.fix, text
    assert all(r.outcome == "crashed" for r in result.runs), text
    (tie,) = [g for g in result.groups if g.clause == TIE]
    assert tie.note and tie.site is not None and tie.site.line == line and tie.runtimes == versions(runtimes)
    for clause in clauses:
        assert clause in tie.first.message, tie.first.message
    if method is not None:
        assert f"the method the exception names ({method})" in tie.first.message, tie.first.message


def test_the_body_a_fixture_builds_is_as_its_header_comment_says() -> None:
    """The fixtures' constants, read from their sources: il_branch_mid skips 3 bytes past a 13-byte guard
    whose probe is a 5-byte ldc.i4 (so the target is inside its operand)."""
    source = (DOCS / "il_branch_mid.cpp").read_text()
    assert "constexpr BYTE kSkipProbe = 3;" in source and "constexpr std::uint32_t kGuardSize = 13;" in source
    probe = struct.pack("<I", 0x7E570001)
    guard = bytes([0x20]) + struct.pack("<i", 1) + bytes([0x2C, 3, 0x20]) + probe + b"\x26"
    instructions, _ = il.decode(guard + b"\x2a")
    starts = {i.offset for i in instructions}
    assert 7 + 3 not in starts and 7 < 7 + 3 < 12


# --- ReJIT: the function control's bodies ------------------------------------------------------------------

_CONTROL_SET = "control->SetILFunctionBody(static_cast<ULONG>(fresh.size()), block);"


@pytest.mark.live
def test_the_function_control_body_is_recorded_and_checked(runtimes: list[Runtime]) -> None:
    """rejit_control_body (profilers/) recompiles rejitloop's methods from its own thread and hands each a
    prologue through the function control: every ICorProfilerFunctionControl::SetILFunctionBody record
    carries the cbNewILMethodHeader bytes it was given, beside its ReJIT's method; the run is clean. With
    REJIT_CONTROL_BAD=1 the prologue's branch lands inside an instruction: IL-BRANCH-MID-INSTRUCTION at its
    call on both runtimes."""
    folder = APPS / "rejitloop"
    scenario = scenarios.Scenario(name="rejitloop", folder=folder, sources=[folder / "app.cs"],
                                  plan={"version": 1}, description="rejitloop")  # fmt: skip
    app = scenarios.compile_scenario(scenario, runner.reference_runtime())
    so = build_fixture("rejit_control_body")
    good = validator.validate(so, FIXTURE_CLSID, app=app)
    text = render_text(good)
    assert all(r.outcome == "ok" for r in good.runs) and good.findings == [], text
    for run in good.runs:
        sets = [r for r in records(run.trace) if r["kind"] == "call" and r["name"] == CONTROL_SET_IL]
        assert sets, run.runtime
        for r in sets:
            assert len(bytes.fromhex(r["out"]["body"])) == r["args"]["cbNewILMethodHeader"]
            assert r["args"]["methodId"] >> 24 == 0x06 and r["out"]["allocated"] is False
    bad = validator.validate(so, FIXTURE_CLSID, app=app, env={"REJIT_CONTROL_BAD": "1"})
    lines = (PROFILERS / "rejit_control_body.cpp").read_text().splitlines()
    (line,) = [n for n, text_line in enumerate(lines, 1) if _CONTROL_SET in text_line]
    found = [g for g in bad.findings if g.clause == "IL-BRANCH-MID-INSTRUCTION"]
    assert found and found[0].site is not None and found[0].site.line == line, render_text(bad)
    assert found[0].runtimes == versions(runtimes)
