"""Issue 25's fuzz side of the ReJIT failures: the fake runtime plays ReJITError and RequestRevert as the
runtimes and pages do (behaviours rejit.error, rejit.revert, rejit.revert-documented, rejit.revert-null in
docs/fake-runtime.md), and a client that mishandles them is found (profilers/rejit_failures.cpp, one mistake
per run): ReJITError's NULL functionId passed on to GetFunctionInfo (REJIT-29: an invalid methodDef token
gets its ReJITError inside RequestReJIT, as 3.1.23 and 8.0.4 do) and RequestRevert without a status array
(REJIT-17). The same client with the mistake fixed is clean over 500 examples; under validate on the
bundled runtimes it gets the same verdicts."""

from __future__ import annotations

import pytest

from conformance.core.runtimes import Runtime
from conformance.fuzz.machine import FuzzReport, fuzz
from conformance.validator.api import validate
from conformance.validator.report import render_text
from tests.conformance.fuzz.fixtures import CLSID, PROFILERS, build

SEED = 25


def _fuzz(mistake: str, *, checked: bool = False, world: str = "documented") -> FuzzReport:
    env = {"PROFHARNESS_FIXTURE_MISTAKE": mistake}
    if checked:
        env["PROFHARNESS_FIXTURE_CHECKED"] = "1"
    return fuzz(build("rejit_failures"), CLSID, max_examples=500, seed=SEED, shrink=False, env=env,
                world=world)  # fmt: skip


@pytest.mark.parametrize("world", ["observed", "documented"])
def test_REJIT_29_a_NULL_functionId_passed_on_is_found_within_500_examples(world: str) -> None:
    report = _fuzz("error", world=world)
    assert report.first_failure is not None and report.first_failure <= 500, report.reached
    assert {f.clause for f in report.findings} == {"REJIT-29"}
    assert all(f.callback == "ReJITError" for f in report.findings)
    print(f"rejit_failures (error, {world}): first failure at example {report.first_failure}")


def test_REJIT_17_a_revert_without_a_status_array_is_found_within_500_examples() -> None:
    report = _fuzz("revert", world="observed")
    assert report.first_failure is not None and report.first_failure <= 500, report.reached
    assert {f.clause for f in report.findings} == {"REJIT-17"}
    print(f"rejit_failures (revert): first failure at example {report.first_failure}")


@pytest.mark.parametrize(("mistake", "world", "called"), [
    ("error", "observed", "RequestReJIT"),
    ("revert", "observed", "RequestRevert"),
    ("revert", "documented", "RequestRevert"),
])  # fmt: skip
def test_the_client_with_its_mistake_fixed_is_clean_over_500_examples(mistake: str, world: str,
                                                                      called: str) -> None:
    report = _fuzz(mistake, checked=True, world=world)
    assert report.findings == [], [f.message for f in report.findings]
    assert report.examples >= 500
    assert report.reached.get(called, (0, 0))[1] > 0, report.reached


@pytest.mark.live
@pytest.mark.parametrize(("mistake", "clause", "text"), [
    ("revert", "REJIT-17", "info->RequestRevert(n, modules.data()"),
    ("error", "REJIT-29", "info->GetFunctionInfo(functionId, &cls, &mod, &tok);"),
])  # fmt: skip
def test_the_same_client_under_validate_on_both_runtimes(mistake: str, clause: str, text: str,
                                                         runtimes: list[Runtime]) -> None:
    """One verdict per profiler: under validate on 3.1.23 and 8.0.4 (the standard workload) each mistake is
    its clause at its own line, on both runtimes (the runtimes' ReJITError for the TypeDef tokens runs the
    faulty handler); with it fixed, nothing."""
    result = validate(build("rejit_failures"), CLSID, env={"PROFHARNESS_FIXTURE_MISTAKE": mistake},
                      workload="standard")  # fmt: skip
    report = render_text(result)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    assert all(r.outcome == "ok" for r in result.runs), report
    assert {g.clause for g in result.findings} == {clause}, report
    source = (PROFILERS / "rejit_failures.cpp").read_text().splitlines()
    line = 1 + next(k for k, t in enumerate(source) if text in t)
    [group] = result.findings
    assert group.site is not None and group.site.line == line, report
    assert sorted(group.runtimes) == sorted(rt.version for rt in runtimes)
    fixed = validate(build("rejit_failures"), CLSID, workload="standard",
                     env={"PROFHARNESS_FIXTURE_MISTAKE": mistake, "PROFHARNESS_FIXTURE_CHECKED": "1"})
    assert fixed.findings == [], render_text(fixed)
