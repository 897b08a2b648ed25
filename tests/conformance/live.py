"""Shared assertion of the per-area live tests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from conformance.core.runtimes import Runtime
from conformance.suite.orchestrate import run_suite
from conformance.suite.verdicts import Status, SuiteResult, VerdictOutcome


def assert_area_as_documented_or_expected(
    clauses: Sequence[str], runtimes: Sequence[Runtime], *, may_be_not_applicable: Sequence[str] = ()
) -> SuiteResult:
    """Run the suite for ``clauses`` on every bundled runtime and check what the suite promises.

    Each clause is judged on each runtime; nothing is unexpected (so a not-applicable verdict is one an
    expectation entry allows); no clause is "not applicable" unless listed here too; every verdict names a
    trace file whose sha256 matches the one recorded.
    """
    result = run_suite("all", clauses=list(clauses), layers=("live",))
    judged = {(v.clause, v.runtime) for v in result.verdicts}  # a clause may be judged by several experiments
    assert judged == {(c, rt.version) for c in clauses for rt in runtimes}
    for verdict in result.verdicts:
        accepted = (VerdictOutcome.AS_DOCUMENTED, VerdictOutcome.EXPECTED_DIVERGENCE)
        assert verdict.outcome in accepted, verdict.outcome_message
        if verdict.clause not in may_be_not_applicable:
            assert verdict.status is not Status.NOT_APPLICABLE, f"{verdict.clause}: {verdict.observed}"
        assert verdict.trace is not None and Path(verdict.trace).is_file()
        assert hashlib.sha256(Path(verdict.trace).read_bytes()).hexdigest() == verdict.trace_sha256
    return result
