"""pytest items per clause for users' CI: one test per rule the validator holds a profiler to.

In a test module::

    from conformance.validator.pytest_items import clause_tests

    test_my_profiler = clause_tests("build/libmyprofiler.so", "{...}", runtime="8.0")

pytest collects ``test_my_profiler[BUF-04]``, ``test_my_profiler[DSS-13]``, ... (every id of
:func:`conformance.validator.api.rule_ids`, catalog clauses and the validator's own VAL-* rules), each
marked ``clause(ID)`` (the marker is registered by profharness' pytest plugin, so ``--strict-markers``
passes and ``-m "clause"`` or ``-k MR2`` select them). The
validation runs once, at the first item that needs it (the options are those of
:func:`~conformance.validator.api.validate`); each item then fails with the findings of its clause (one line
each: runtime, scenario, thread, callback, message, trace records), is skipped when no run reached what it
judges (every run crashed or was cut short: the reason names the run), and passes otherwise. Input the
validator refuses (no such file, a bad CLSID) errors every item with its one-line message.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.validator.api import rule_ids, validate
from conformance.validator.result import ClauseStatus, ValidationResult


def clause_tests(profiler: str | Path, clsid: str, **options: object) -> Callable[[str], None]:
    """A test function parametrised by clause id (assign it to a module-level name that starts with
    ``test``); see the module's docstring."""
    done: list[ValidationResult] = []

    def result() -> ValidationResult:
        if not done:
            done.append(validate(Path(profiler), clsid, **options))  # type: ignore[arg-type]
        return done[0]

    @pytest.mark.parametrize(
        "clause", [pytest.param(c, id=c, marks=pytest.mark.clause(c)) for c in rule_ids()]
    )
    def test_profiling_contract(clause: str) -> None:
        broken = [g for g in result().findings if g.clause == clause]
        if broken:
            pytest.fail(
                f"{clause} ({broken[0].title}): {sum(g.count for g in broken)} finding(s)\n"
                + "\n".join(
                    f"x{g.count} on {', '.join(g.runtimes)}"
                    + (f" at {g.site.text()}" if g.site else "")
                    + f": {g.first.message}"
                    for g in broken
                ),
                pytrace=False,
            )
        statuses = [s for s in result().rules if s.clause == clause]
        if statuses and all(s.status is ClauseStatus.SKIPPED for s in statuses):
            pytest.skip("; ".join(dict.fromkeys(f"{s.runtime}: {s.reason}" for s in statuses)))

    return test_profiling_contract
