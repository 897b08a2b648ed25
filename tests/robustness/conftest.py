"""The robustness profile: a short one in CI, a long one with ``--long`` (examples per property).

Every property counts what it did in :data:`OUTCOMES` ((area, what) -> count); the terminal summary prints
them, which is where the README's "fault injected -> outcome" table comes from.
"""

from __future__ import annotations

from collections import Counter

import pytest

SHORT, LONG = 100, 2500

#: (area, outcome) -> count, over the session
OUTCOMES: Counter[tuple[str, str]] = Counter()


@pytest.fixture(scope="session")
def examples(long_profile: bool) -> int:
    return LONG if long_profile else SHORT


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not OUTCOMES:
        return
    terminalreporter.section("robustness: fault injected -> outcome")
    for area in sorted({a for a, _ in OUTCOMES}):
        parts = ", ".join(f"{n} {what}" for (a, what), n in sorted(OUTCOMES.items()) if a == area)
        terminalreporter.write_line(f"{area}: {parts}")
