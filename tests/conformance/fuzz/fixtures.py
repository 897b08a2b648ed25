"""Fixture profilers for the fuzzer's tests: C++ sources in ``profilers/`` on the validator's fixture
plumbing (``tests/conformance/validator/profilers/fixture.h`` and its generated ``callbacks.h``), built
with g++ on first use into the harness cache (``cache_dir()/fuzz-fixtures/<sha256>/``), keyed by the sha256
of every input (the sources, the shared headers, ``g++ --version``)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from conformance.core.paths import cache_dir, staged
from conformance.core.probe import write_generated_headers
from tests.conformance.validator import fixtures as validator_fixtures

PROFILERS = Path(__file__).resolve().parent / "profilers"
CLSID = validator_fixtures.FIXTURE_CLSID


def build(name: str) -> Path:
    """The built ``lib<name>.so`` of ``profilers/<name>.cpp``."""
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("g++ is needed to build the fixture profilers")
    source = PROFILERS / f"{name}.cpp"
    header = validator_fixtures.callbacks_header()
    digest = hashlib.sha256()
    version = subprocess.run([gxx, "--version"], capture_output=True, text=True, check=True).stdout
    parts = [source.read_bytes(), header.encode(), version.encode()]
    parts += [p.read_bytes() for p in sorted(PROFILERS.glob("*.h"))]
    parts += [(validator_fixtures.PROFILERS / "fixture.h").read_bytes()]
    parts += [p.read_bytes() for p in sorted(validator_fixtures.INCLUDE.rglob("*.h"))]
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    final = cache_dir() / "fuzz-fixtures" / digest.hexdigest()
    built = final / f"lib{name}.so"
    if built.is_file():
        return built
    with staged(final, prefix=f".{name}-") as work:
        (work / "callbacks.h").write_text(header)
        write_generated_headers(work / "generated")
        cmd = [gxx, "-shared", "-fPIC", "-std=c++17", "-O1", "-g", "-Wall", "-Wno-unused-parameter",
               "-pthread",
               f"-I{work}", f"-I{PROFILERS}", f"-I{validator_fixtures.PROFILERS}",
               f"-I{validator_fixtures.INCLUDE}", f"-I{work / 'generated'}", str(source),
               "-o", str(work / f"lib{name}.so")]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = done.stderr.splitlines()
            errors = [line for line in lines if "error" in line] or lines
            raise RuntimeError(f"{source}: g++ failed: {errors[0] if errors else done.returncode}")
    return built
