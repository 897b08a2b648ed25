"""Fixtures shared by the emulator tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.emu.fixtures import FIXTURES


@pytest.fixture(scope="session")
def native_program(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The gcc fixture program of an architecture (tests/emu/fixtures.py), built once per session; the test
    is skipped where gcc cannot build it (x86: gcc-multilib)."""
    built: dict[str, Path] = {}

    def program(arch: str) -> Path:
        fixture = FIXTURES[arch]  # type: ignore[index]
        if not fixture.compiler_available():
            pytest.skip(f"gcc cannot build the {arch} fixture here")
        if arch not in built:
            built[arch] = fixture.build(tmp_path_factory.mktemp(fixture.name))
        return built[arch]

    return program


@pytest.fixture(scope="session")
def program(native_program: Callable[[str], Path]) -> Path:
    """The x64 gcc fixture program (tests/emu/fixture)."""
    return native_program("x64")


@pytest.fixture(scope="session")
def program32(native_program: Callable[[str], Path]) -> Path:
    """The 32-bit x86 gcc fixture program (tests/emu/fixture32, ``gcc -m32``)."""
    return native_program("x86")
