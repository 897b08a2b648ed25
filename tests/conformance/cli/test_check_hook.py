"""``profharness check-hook``: exit 0 when every rule holds, 1 when one is broken, 2 with one line on bad
input; ``--json`` prints the stable report, text a table of findings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from emu.hookcheck.build import REFERENCE_X86_SYMBOL, build_hook_library, reference_x86_library

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (and gcc-multilib for -m32)")

HOOKS = Path(__file__).resolve().parents[2] / "emu" / "hooks"


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cache = tmp_path_factory.mktemp("hook-cache")
    return (build_hook_library([HOOKS / "faults_x86.S"], "x86", name="faults_x86", cache_root=cache),
            reference_x86_library(cache_root=cache))


def test_FE2_08_a_broken_rule_exits_1_with_a_table(libs: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-hook", str(libs[0]), "x86_clobbers_ebx", "--arch", "x86"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "1 rule(s) broken:"
    assert lines[2].split() == ["clause", "rule", "register", "before", "after", "instruction", "runs",
                                "detail"]
    row = lines[3].split()
    assert row[:3] == ["FE2-08", "register-preserved", "EBX"] and "x86_clobbers_ebx+0x1a:" in row
    assert row[-4:] == ["100", "EBX", "not", "preserved"]


def test_a_correct_hook_exits_0(libs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-hook", str(libs[1]), REFERENCE_X86_SYMBOL, "--arch", "x86"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "every rule holds"


def test_FE2_09_json_report_is_stable(libs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check-hook", str(libs[0]), "x86_ret_12", "--arch", "x86", "--json", "--runs", "100",
            "--seed", "3"]
    assert main(argv) == 1
    first = capsys.readouterr().out
    assert main(argv) == 1
    assert capsys.readouterr().out == first
    report = json.loads(first)
    assert list(report) == ["file", "symbol", "arch", "kind", "seed", "runs", "budget", "returned",
                            "not_emulated", "instructions_min", "instructions_max", "unapplied_relocations",
                            "findings", "notes", "not_emulated_reasons", "info_pointers"]
    assert report["kind"] == "enter2" and report["notes"] == [] and report["not_emulated"] == 0
    (f,) = report["findings"]
    assert (f["clause"], f["rule"], f["register"], f["runs"]) == ("FE2-09", "stack-restored", "ESP", 100)
    assert int(f["after"], 16) - int(f["before"], 16) == 16 and f["instruction"].endswith(": ret 0xc")


def test_only_notes_exit_0(libs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 19: the EFLAGS status flags `sub esp`/`add esp` change are a note; the hook breaks no rule."""
    assert main(["check-hook", str(libs[0]), "x86_sub_add_esp", "--arch", "x86", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["findings"] == [] and report["notes"]
    assert all(n["note"] and n["register"] == "EFLAGS status flags" for n in report["notes"])


@pytest.mark.parametrize(("kind", "code"), [("slow", 0), ("fast", 1), ("enter2", 0)])
def test_kind_says_how_the_runtime_calls_the_hook(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  kind: str, code: int) -> None:
    lib = build_hook_library([HOOKS / "slow_x64.S"], "x64", name="slow_x64", cache_root=tmp_path)
    assert main(["check-hook", str(lib), "calls_printf", "--arch", "x64", "--kind", kind, "--json"]) == code
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == kind and {f["clause"] for f in report["findings"]} == (
        set() if code == 0 else {"FE2-07", "FE2-08"})  # fast: the registers printf may change, not kept
    calls = [n["clause"] for n in report["notes"] if n["rule"] == "stays-in-object"]
    assert calls == ([] if kind == "slow" else ["FE2-12"])


def test_FE2_10_an_endless_loop_is_a_finding_not_an_error(libs: tuple[Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-hook", str(libs[0]), "x86_loops_forever", "--arch", "x86", "--runs", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[3].startswith("FE2-10  returns")


@pytest.mark.parametrize(("args", "message"), [
    (["/nonexistent/hook.so", "h"], "/nonexistent/hook.so: no such file"),
    (["LIB", "no_such_hook"], "no symbol 'no_such_hook'"),
    (["LIB", "printf"], "printf is not in the object"),
])
def test_bad_input_exits_2_with_one_line(libs: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                                         args: list[str], message: str) -> None:
    argv = ["check-hook", *(str(libs[0]) if a == "LIB" else a for a in args), "--arch", "x86"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("profharness: error: ") and message in err


def test_wrong_arch_exits_2(libs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-hook", str(libs[0]), "x86_ok", "--arch", "x64"]) == 2
    assert "a 32-bit x86 object, not x64" in capsys.readouterr().err
