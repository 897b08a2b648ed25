"""Fixture profilers for the fuzzer's tests: C++ sources in ``profilers/`` (with their own headers) on the
validator's fixture plumbing (``tests/conformance/validator/profilers/fixture.h`` and its generated
``callbacks.h``), built by the validator's builder into ``cache_dir()/fuzz-fixtures/<sha256>/``."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.validator import fixtures as validator_fixtures

PROFILERS = Path(__file__).resolve().parent / "profilers"
CLSID = validator_fixtures.FIXTURE_CLSID


def build(name: str) -> Path:
    """The built ``lib<name>.so`` of ``profilers/<name>.cpp``."""
    return validator_fixtures.build_profiler(PROFILERS / f"{name}.cpp", "fuzz-fixtures", [PROFILERS])
