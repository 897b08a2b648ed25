"""Live runs of a probe or scenario built from a deliberately broken copy of the sources (issue 7).

Each test copies the probe's sources or a scenario folder, plants exactly one fault (the patch must match
exactly once, so a test whose target moved fails loudly instead of passing), builds and runs the affected
clauses on 8.0.4, and asserts that the suite fails naming the clause. These are the audit's mutations that
used to leave the suite green:

- a probe that ignores the plan's ``replies`` (finding 1: MR2-12 went n/a and passed);
- a probe whose stack callback never aborts the walk it was asked to abort, while recording the planned
  reply (finding 2: DSS-26 believed the probe's record);
- a buffer scenario whose target method is renamed (finding 1: every BUF clause went n/a, known divergences
  included, and passed).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conformance.core.paths import NATIVE_DIR, SCENARIOS_DIR
from conformance.core.runtimes import Runtime
from conformance.suite.orchestrate import run_suite
from conformance.suite.verdicts import SuiteResult, VerdictOutcome

pytestmark = pytest.mark.live

RUNTIME = "8.0.4"


def plant(root: Path, pattern: str, replacement: str, *, glob: str, times: int = 1) -> Path:
    """Replace the ``times`` matches of ``pattern``, all in one of the files ``glob`` under ``root``."""
    hits = [
        (path, len(re.findall(pattern, path.read_text(encoding="utf-8"), flags=re.MULTILINE)))
        for path in sorted(root.glob(glob))
    ]
    matched = [(p, n) for p, n in hits if n]
    counts = [n for _, n in matched]
    assert counts == [times], f"the fault's target {pattern!r} must match {times}x in one file: {matched}"
    path = matched[0][0]
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(pattern, replacement, text, flags=re.MULTILINE), encoding="utf-8")
    return path


def broken_native(tmp_path: Path, pattern: str, replacement: str) -> Path:
    copy = tmp_path / "native"
    shutil.copytree(NATIVE_DIR, copy, ignore=shutil.ignore_patterns("build", "__pycache__"))
    plant(copy, pattern, replacement, glob="src/**/*.cpp")
    return copy


def failures_of(result: SuiteResult) -> dict[str, list[str]]:
    bad = (VerdictOutcome.UNEXPECTED, VerdictOutcome.STALE_EXPECTATION, VerdictOutcome.ERROR)
    out: dict[str, list[str]] = {}
    for verdict in result.verdicts:
        if verdict.outcome in bad:
            out.setdefault(verdict.clause, []).append(verdict.outcome_message)
    return out


def test_mr2_12_a_probe_that_ignores_the_plans_replies_fails_the_suite(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    native = broken_native(tmp_path, r"if \(g_reply_set\[id_\]\) hr = g_reply\[id_\];", "/* fault */")
    result = run_suite(RUNTIME, clauses=["MR2-12"], native_dir=native)
    failed = failures_of(result)
    assert "MR2-12" in failed, [v.outcome_message for v in result.verdicts]
    assert all("MR2-12[8.0.4]" in m for m in failed["MR2-12"])


def test_dss_26_a_probe_that_records_an_abort_it_never_made_fails_the_suite(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    # The callback records the planned reply but always returns S_OK, so the walk goes on.
    native = broken_native(
        tmp_path,
        r"(w->on_frame\(funcId, ip, frameInfo, contextSize, context, clientData, reply\);\s*)return reply;",
        r"\1return S_OK;",
    )
    result = run_suite(RUNTIME, clauses=["DSS-26"], native_dir=native)
    failed = failures_of(result)
    assert "DSS-26" in failed, [v.outcome_message for v in result.verdicts]


def test_buf_a_scenario_whose_target_method_is_renamed_fails_the_suite(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios)
    # the method that throws (where the probe runs its buffer calls) and its call site
    plant(scenarios / "buffers-basic", r"\bPick<", "PickRenamed<", glob="app.cs", times=2)
    clauses = ["BUF-01", "BUF-02", "BUF-03", "BUF-05", "BUF-09", "BUF-10"]
    result = run_suite(RUNTIME, clauses=clauses, scenarios_root=scenarios)
    failed = failures_of(result)
    assert failed, [v.outcome_message for v in result.verdicts]
