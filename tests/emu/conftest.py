"""Fixtures shared by the emulator tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.emu.fixtures import X64


@pytest.fixture(scope="session")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The x64 gcc fixture program (tests/emu/fixture), built once per session."""
    if not X64.compiler_available():
        pytest.skip("gcc is not installed")
    return X64.build(tmp_path_factory.mktemp("emu-fixture"))
