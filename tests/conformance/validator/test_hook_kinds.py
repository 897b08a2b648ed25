"""Issue 19: validate checks every registered hook as the runtime calls it.

SetEnterLeaveFunctionHooks3WithInfo hooks were skipped; now each registration's hooks go to the checker
with the kind of their registration in the API table (FunctionEnter2 -> enter2, FunctionEnter3 -> fast,
FunctionEnter3WithInfo -> slow). A WithInfo hook is an ordinary C function for the checker: it may call
printf and ICorProfilerInfo. A hook the checker could not emulate in any run is a note (``problem``),
never a finding. ``docs/withinfo_hooks.cpp``, written from the documentation alone, gives no FE2 finding.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.core.runtimes import Runtime
from conformance.validator import api
from conformance.validator.hooks import HookChecks, RegisteredHook, registered_hooks, run_checker
from emu.hookcheck.build import build_hook_library
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_fixture, build_profiler
from tests.conformance.validator.test_rules import _call, _callback, _recording

DOCS = PROFILERS / "docs"
HOOKS = Path(__file__).resolve().parents[2] / "emu" / "hooks"


def build_docs_fixture(name: str) -> Path:
    """``lib<name>.so`` of ``profilers/docs/<name>.cpp`` (with the docs fixtures' own ``common.h``)."""
    return build_profiler(DOCS / f"{name}.cpp", "validator-docs", includes=[DOCS])


def _hook(offset: int) -> dict[str, object]:
    return {"address": 0x7F0000000000 + offset, "module": "/nowhere/libp.so", "offset": offset}


def test_every_registration_is_checked_with_its_kind(tmp_path: Path) -> None:
    calls = [
        _call("SetEnterLeaveFunctionHooks2", args={"pFuncEnter": _hook(0x10), "pFuncLeave": {"address": 0},
                                                   "pFuncTailcall": {"address": 0}}),
        _call("SetEnterLeaveFunctionHooks3", args={"pFuncEnter3": _hook(0x20), "pFuncLeave3": {"address": 0},
                                                   "pFuncTailcall3": {"address": 0}}),
        _call("SetEnterLeaveFunctionHooks3WithInfo", args={
            "pFuncEnter3WithInfo": _hook(0x30), "pFuncLeave3WithInfo": _hook(0x40),
            "pFuncTailcall3WithInfo": {"address": 0}}),
    ]
    rec, _run = _recording(
        tmp_path, [_callback("Initialize", "enter"), *calls, _callback("Initialize", "return", 0)]
    )
    found = [(h.registration, h.parameter, h.offset, h.kind) for h in registered_hooks(rec)]
    assert found == [
        ("SetEnterLeaveFunctionHooks2", "pFuncEnter", 0x10, "enter2"),
        ("SetEnterLeaveFunctionHooks3", "pFuncEnter3", 0x20, "fast"),
        ("SetEnterLeaveFunctionHooks3WithInfo", "pFuncEnter3WithInfo", 0x30, "slow"),
        ("SetEnterLeaveFunctionHooks3WithInfo", "pFuncLeave3WithInfo", 0x40, "slow"),
    ]


def test_a_withinfo_hook_is_checked_as_an_ordinary_c_function() -> None:
    """withinfo_bad_hook's enter hook calls printf (lawful there), then zeroes RBX: FE2-08 alone."""
    so = build_fixture("withinfo_bad_hook")
    slow = run_checker(so, "fixture_withinfo_bad_enter", "slow")
    assert slow.problem is None and slow.kind == "slow" and slow.not_emulated == 0
    assert [(f.clause, f.register_name) for f in slow.faults] == [("FE2-08", "RBX")]
    naked = run_checker(so, "fixture_withinfo_bad_enter", "fast")  # were it called from JIT code
    # the printf is answered (an FE2-12 note): what it may change, no JIT-called hook may change
    assert {f.clause for f in naked.faults} == {"FE2-07", "FE2-08"}
    assert ("FE2-12", "stays-in-object") in [(n.clause, n.rule) for n in naked.notes]


def test_hooks_are_asked_once_per_kind() -> None:
    so = build_fixture("withinfo_bad_hook")
    checks = HookChecks()
    hook = RegisteredHook("SetEnterLeaveFunctionHooks3WithInfo", "pFuncEnter3WithInfo", 0, 1, str(so), 0,
                          "fixture_withinfo_bad_enter", "slow")
    first = checks.check(hook)
    assert checks.check(hook) is first and first.faults
    fast = RegisteredHook(**{**hook.__dict__, "kind": "fast"})
    assert checks.check(fast) is not first and "FE2-07" in {f.clause for f in checks.check(fast).faults}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_hook_never_emulated_is_a_note_never_a_finding(tmp_path: Path) -> None:
    """Every run reads through a global only the profiler's Initialize sets: not checked, with why."""
    lib = build_hook_library([HOOKS / "slow_x64.S"], "x64", name="slow_x64", cache_root=tmp_path)
    answer = run_checker(lib, "reads_through_global", "slow")
    assert answer.faults == () and answer.not_emulated == answer.runs > 0
    assert answer.problem is not None and "could be emulated" in answer.problem
    assert "through the pointer read from profiler" in answer.problem


def test_the_docs_withinfo_profiler_hooks_keep_every_rule() -> None:
    """Its three hooks, found through the symbol table as validate finds them, under the slow kind."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    so = build_docs_fixture("withinfo_hooks")
    with so.open("rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        assert isinstance(symtab, SymbolTableSection)
        hooks = sorted(s.name for s in symtab.iter_symbols() if s.name.startswith("_ZN8withinfo")
                       and s["st_info"]["type"] == "STT_FUNC" and "3WithInfoEN" in s.name)
    assert len(hooks) == 3
    for symbol in hooks:
        answer = run_checker(so, symbol, "slow")
        assert answer.problem is None and answer.faults == () and answer.not_emulated == 0, answer


@pytest.mark.live
def test_validate_checks_withinfo_hooks(runtimes: list[Runtime]) -> None:
    result = api.validate(build_fixture("withinfo_bad_hook"), FIXTURE_CLSID, hang_s=10.0)
    for rt in runtimes:
        found = {g.clause for g in result.findings if rt.version in g.runtimes}
        assert found == {"FE2-08"}, api.table(result)
    assert not result.notes, result.notes


@pytest.mark.live
def test_the_docs_withinfo_profiler_gives_no_fe2_finding(runtimes: list[Runtime]) -> None:
    result = api.validate(build_docs_fixture("withinfo_hooks"), FIXTURE_CLSID, hang_s=10.0)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    assert not [g for g in result.findings if g.clause.startswith("FE2")], api.table(result)
