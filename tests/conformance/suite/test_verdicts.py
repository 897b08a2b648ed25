"""Verdicts measured against expectation files: what makes the suite fail, and the message it gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.core.errors import HarnessError
from conformance.suite.verdicts import Expectation, Outcome, Status, Verdict, classify, load_expectations


def verdict(status: Status, observed: str = "hr=0x80070057") -> Verdict:
    return Verdict(
        clause="DSS-12", runtime="8.0.4", experiment="x", status=status, observed=observed, expected="S_OK"
    )


WHY = "The runtime checks contextSize against its own CONTEXT size."


def test_conforming_without_expectation_is_as_documented() -> None:
    assert classify(verdict(Status.CONFORMS), None)[0] is Outcome.AS_DOCUMENTED


def test_divergence_without_expectation_is_unexpected_and_names_the_clause() -> None:
    outcome, message = classify(verdict(Status.DIVERGES), None)
    assert outcome is Outcome.UNEXPECTED
    assert message.startswith("DSS-12[8.0.4]: diverges")


def test_expected_divergence() -> None:
    expectation = Expectation(status=Status.DIVERGES, why=WHY, observed="0x80070057")
    assert classify(verdict(Status.DIVERGES), expectation)[0] is Outcome.EXPECTED_DIVERGENCE


def test_expected_divergence_with_other_observation_is_unexpected() -> None:
    expectation = Expectation(status=Status.DIVERGES, why=WHY, observed="0x8013135F")
    outcome, message = classify(verdict(Status.DIVERGES), expectation)
    assert outcome is Outcome.UNEXPECTED and "0x8013135F" in message


def test_divergence_that_no_longer_occurs_is_stale() -> None:
    outcome, message = classify(verdict(Status.CONFORMS), Expectation(status=Status.DIVERGES, why=WHY))
    assert outcome is Outcome.STALE_EXPECTATION
    assert "DSS-12[8.0.4]" in message and "no longer occurs" in message


def test_error_is_always_a_failure() -> None:
    assert classify(verdict(Status.ERROR, "crashed (SIGSEGV)"), None)[0] is Outcome.ERROR


def test_expectation_file_errors_name_file_and_clause(tmp_path: Path) -> None:
    (tmp_path / "8.0.4.toml").write_text('[DSS-12]\nstatus = "sideways"\nwhy = "x"\n')
    with pytest.raises(HarnessError, match=r"8\.0\.4\.toml: \[DSS-12\] status"):
        load_expectations("8.0.4", tmp_path)
    (tmp_path / "8.0.4.toml").write_text("[DSS-12\n")
    with pytest.raises(HarnessError, match=r"8\.0\.4\.toml: not valid TOML"):
        load_expectations("8.0.4", tmp_path)
    assert load_expectations("9.9.9", tmp_path) == {}


def test_shipped_expectation_files_parse_and_explain_every_entry() -> None:
    from conformance.core.paths import EXPECTATIONS_DIR

    for path in sorted(EXPECTATIONS_DIR.glob("*.toml")):
        for clause_id, expectation in load_expectations(path.stem).items():
            assert len(expectation.why.split()) >= 5, f"{path.name} [{clause_id}] needs a real explanation"


def test_not_applicable_run_does_not_contradict_an_expected_divergence() -> None:
    outcome, message = classify(
        verdict(Status.NOT_APPLICABLE, "the signal landed in runtime code"),
        Expectation(status=Status.DIVERGES, why=WHY),
    )
    assert outcome is Outcome.AS_DOCUMENTED and "expectation not exercised" in message
