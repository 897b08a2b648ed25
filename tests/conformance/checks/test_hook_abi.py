"""conformance.checks.hook_abi: the emu-layer FE2 verdicts from the hook checker.

The judgements can fail: a report with a finding gives DIVERGES with one stable line per broken rule, a
column where no run returned cannot judge the clauses read at the return (NOT_APPLICABLE), and the x86
reference hook conforms to every clause."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.checks.hook_abi import (
    X64_COLUMN,
    X86_COLUMN,
    hook_abi_judgements,
    judge_reports,
    probe_hooks,
)
from conformance.core.errors import HarnessError
from conformance.suite.verdicts import Status
from emu.hookcheck import HookFinding, HookReport, check_hook


def report(*findings: HookFinding, returned: int = 100) -> HookReport:
    return HookReport(file="h.so", symbol="h", arch="x86", seed=0, runs=100, budget=10, returned=returned,
                      instructions_min=1, instructions_max=1, findings=findings)


EBX = HookFinding(clause="FE2-08", rule="register-preserved", detail="EBX not preserved", register_name="EBX",
              before=1, after=2, instruction="h+0x1a: not ebx", runs=100)
CALL_OUT = HookFinding(clause="FE2-12", rule="stays-in-object",
                   detail="calls or jumps to printf outside the object",
                   instruction="h+0x3: call 0x1030 <printf@plt>", target="printf", runs=100)


def test_FE2_08_a_finding_diverges_with_a_stable_line() -> None:
    verdicts = dict(judge_reports({"enter": report(EBX)}, "x86"))
    assert list(verdicts) == ["FE2-06", "FE2-07", "FE2-08", "FE2-09", "FE2-10", "FE2-12"]
    assert verdicts["FE2-08"].status is Status.DIVERGES
    assert verdicts["FE2-08"].disagreements == ("enter: FE2-08: register not preserved (FE2-07 for the x86 "
                                                "scratch registers): EBX not preserved",)
    assert all(v.status is Status.CONFORMS for c, v in verdicts.items() if c != "FE2-08")


def test_FE2_12_no_return_leaves_the_return_clauses_unjudged() -> None:
    verdicts = dict(judge_reports({"enter": report(CALL_OUT, returned=0)}, "x64"))
    assert list(verdicts) == ["FE2-06", "FE2-08", "FE2-09", "FE2-10", "FE2-12"]  # FE2-07: not on x64
    assert verdicts["FE2-12"].status is Status.DIVERGES
    assert "0x" not in " ".join(verdicts["FE2-12"].disagreements)
    assert verdicts["FE2-08"].status is Status.NOT_APPLICABLE
    assert verdicts["FE2-09"].status is Status.NOT_APPLICABLE
    assert verdicts["FE2-06"].status is Status.CONFORMS


def test_probe_hooks_needs_the_symbols(tmp_path: Path) -> None:
    bogus = tmp_path / "probe.so"
    bogus.write_bytes(b"not an elf")
    with pytest.raises(HarnessError, match="cannot read the probe's symbols"):
        probe_hooks(bogus)


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("cmake") is None,
                    reason="needs gcc, g++ and cmake (the probe build)")
def test_hook_abi_judgements_on_the_probe_and_the_reference_hook() -> None:
    from conformance.core.probe import build_probe

    rows = hook_abi_judgements(build_probe())
    x86 = {c: j for c, col, j in rows if col == X86_COLUMN}
    x64 = {c: j for c, col, j in rows if col == X64_COLUMN}
    assert set(x86) == {"FE2-06", "FE2-07", "FE2-08", "FE2-09", "FE2-10", "FE2-12"}
    assert all(j.status is Status.CONFORMS for j in x86.values()), x86
    assert set(x64) == {"FE2-06", "FE2-08", "FE2-09", "FE2-10", "FE2-12"}
    # the probe's Enter2 hook calls out on purpose (gettid through libc's syscall): answered, a note, never a
    # finding (FE2-12 forbids managed calls, which syscall is not); Leave2 and Tailcall2 make no call
    assert all(j.status is Status.CONFORMS for j in x64.values()), x64
    probe = build_probe()
    notes = {h: check_hook(probe, s, "x64", runs=10).notes for h, s in probe_hooks(probe).items()}
    assert any(n.clause == "FE2-12" and n.target == "syscall" for n in notes["FunctionEnter2"])
    assert not notes["FunctionLeave2"] and not notes["FunctionTailcall2"]
