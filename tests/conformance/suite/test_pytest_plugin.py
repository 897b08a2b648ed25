"""The pytest plugin: a user's own clause check, collected as one test per clause x runtime."""

from __future__ import annotations

import pytest

from conformance.core.runtimes import Runtime

pytestmark = pytest.mark.live

USER_MODULE = """
from conformance.suite.pytest_plugin import ProfharnessSuite
from conformance.suite.verdicts import Judge, Judgement, LiveExperiment, Status


def leaf_method(evidence):
    (call,) = evidence.trace.calls("DoStackSnapshot", experiment="walk-default")
    leaf = call.out["frames"][0]["method"]
    status = Status.CONFORMS if leaf == "{expected}" else Status.DIVERGES
    return Judgement(
        status=status, observed=f"leaf {{leaf}}", expected="leaf {expected}", evidence=(call.seq,)
    )


profharness_suite = ProfharnessSuite(
    experiments=[
        LiveExperiment(
            id="user-leaf",
            scenario="stack-basic",
            judges=(Judge("DSS-16", leaf_method, "the leaf frame is the throwing method"),),
        )
    ]
)
"""


def test_user_check_is_collected_per_clause_and_runtime(
    pytester: pytest.Pytester, runtimes: list[Runtime]
) -> None:
    pytester.makepyfile(test_user=USER_MODULE.format(expected="Thrower"))
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(runtimes))
    result.stdout.fnmatch_lines([f"*profharness_suite::DSS-16?{rt.version}? PASSED*" for rt in runtimes])


def test_unexpected_divergence_fails_naming_clause_runtime_and_trace(
    pytester: pytest.Pytester, runtimes: list[Runtime]
) -> None:
    pytester.makepyfile(test_user=USER_MODULE.format(expected="Main"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--profharness-runtime", "8.0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*DSS-16[[]8.0.4[]]: diverges and no expectation explains it*trace.jsonl*"])
