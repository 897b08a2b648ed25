"""Issue 25's fuzz side of the ReJIT failures: the fake runtime plays ReJITError and RequestRevert as the
pages say (behaviours rejit.error, rejit.revert, rejit.revert-documented, rejit.revert-null in
docs/fake-runtime.md), and a client that mishandles them is found (profilers/rejit_failures.cpp, one mistake
per run): ReJITError's NULL functionId passed on to GetFunctionInfo (REJIT-29; the documented world, where
an invalid methodDef token gets its ReJITError) and RequestRevert without a status array (REJIT-17). The
same client with the mistake fixed is clean over 500 examples."""

from __future__ import annotations

import pytest

from conformance.fuzz.machine import FuzzReport, fuzz
from tests.conformance.fuzz.fixtures import CLSID, build

SEED = 25


def _fuzz(mistake: str, *, checked: bool = False, world: str = "documented") -> FuzzReport:
    env = {"PROFHARNESS_FIXTURE_MISTAKE": mistake}
    if checked:
        env["PROFHARNESS_FIXTURE_CHECKED"] = "1"
    return fuzz(build("rejit_failures"), CLSID, max_examples=500, seed=SEED, shrink=False, env=env,
                world=world)  # fmt: skip


def test_REJIT_29_a_NULL_functionId_passed_on_is_found_within_500_examples() -> None:
    report = _fuzz("error")
    assert report.first_failure is not None and report.first_failure <= 500, report.reached
    assert {f.clause for f in report.findings} == {"REJIT-29"}
    assert all(f.callback == "ReJITError" for f in report.findings)
    print(f"rejit_failures (error): first failure at example {report.first_failure}")


def test_REJIT_29_the_observed_world_reports_no_ReJITError_for_an_invalid_token() -> None:
    """rejit.error rests on the page alone (no run showed it): the observed world leaves the pair waiting,
    so the same client is clean there."""
    report = _fuzz("error", world="observed")
    assert report.findings == [], [f.message for f in report.findings]
    assert report.reached.get("RequestReJIT", (0, 0))[1] > 0


def test_REJIT_17_a_revert_without_a_status_array_is_found_within_500_examples() -> None:
    report = _fuzz("revert", world="observed")
    assert report.first_failure is not None and report.first_failure <= 500, report.reached
    assert {f.clause for f in report.findings} == {"REJIT-17"}
    print(f"rejit_failures (revert): first failure at example {report.first_failure}")


@pytest.mark.parametrize(("mistake", "world", "called"), [
    ("error", "documented", "RequestReJIT"),
    ("revert", "observed", "RequestRevert"),
    ("revert", "documented", "RequestRevert"),
])  # fmt: skip
def test_the_client_with_its_mistake_fixed_is_clean_over_500_examples(mistake: str, world: str,
                                                                      called: str) -> None:
    report = _fuzz(mistake, checked=True, world=world)
    assert report.findings == [], [f.message for f in report.findings]
    assert report.examples >= 500
    assert report.reached.get(called, (0, 0))[1] > 0, report.reached
