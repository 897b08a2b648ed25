"""Fixture profilers for the validator's tests: C++ sources in ``profilers/``, built with g++ on first use
into the harness cache (``cache_dir()/validator-fixtures/<sha256>/``), keyed by the sha256 of every input:
the fixture's source, ``profilers/fixture.h``, the generated ``callbacks.h``, the interface headers and
``g++ --version``.

``callbacks.h`` is generated from the API table by :mod:`conformance.codegen.fixtures`: ``CallbacksN``
implements every method of ICorProfilerCallback..N as a do-nothing ``S_OK``, so a fixture overrides only
what its fault needs and declares how far it implements the callback interfaces by its base class.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from conformance.codegen.fixtures import render_callbacks
from conformance.core.paths import NATIVE_DIR, cache_dir, staged
from conformance.core.probe import write_generated_headers

PROFILERS = Path(__file__).resolve().parent / "profilers"
INCLUDE = NATIVE_DIR / "include"
#: The CLSID every fixture registers (the validator is told it with --clsid).
FIXTURE_CLSID = "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}"


def _gxx_version(gxx: str) -> str:
    done = subprocess.run([gxx, "--version"], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


def same_source(compiled: str | None, source: Path) -> bool:
    """Whether a site's file (the path the compiler was given) is ``source``: the same path below the
    repository (a cached build may come from another checkout of the same sources)."""
    if compiled is None:
        return False
    inside = source.resolve().relative_to(Path(__file__).resolve().parents[3]).as_posix()
    return compiled == str(source) or compiled.endswith("/" + inside)


def build_fixture(name: str) -> Path:
    """The built ``lib<name>.so`` of ``profilers/<name>.cpp``."""
    return build_profiler(PROFILERS / f"{name}.cpp", "validator-fixtures")


def build_profiler(source: Path, area: str, includes: Sequence[Path] = ()) -> Path:
    """``lib<stem>.so`` of ``source`` built on the fixture plumbing (``profilers/fixture.h``, the generated
    ``callbacks.h``, the interface headers) and the folders ``includes`` (their headers keyed too), in
    ``cache_dir()/<area>/<sha256 of every input>/``."""
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("g++ is needed to build the fixture profilers")
    header = render_callbacks()
    digest = hashlib.sha256()
    for part in (
        source.read_bytes(),
        (PROFILERS / "fixture.h").read_bytes(),
        header.encode(),
        _gxx_version(gxx).encode(),
    ):
        digest.update(part)
        digest.update(b"\0")
    for path in [*sorted(INCLUDE.rglob("*.h")), *(h for d in includes for h in sorted(d.glob("*.h")))]:
        digest.update(path.read_bytes())
    final = cache_dir() / area / digest.hexdigest()
    built = final / f"lib{source.stem}.so"
    if built.is_file():
        return built
    with staged(final, prefix=f".{source.stem}-") as work:
        (work / "callbacks.h").write_text(header)
        write_generated_headers(work / "generated")
        cmd = [
            gxx,
            "-shared",
            "-fPIC",
            "-std=c++17",
            "-O1",
            "-g",
            "-Wall",
            "-Wno-unused-parameter",
            "-pthread",
            f"-I{work}",
            *(f"-I{d}" for d in includes),
            f"-I{PROFILERS}",
            f"-I{INCLUDE}",
            f"-I{work / 'generated'}",
            str(source),
            "-o",
            str(work / built.name),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors = [
                line for line in done.stderr.splitlines() if "error" in line
            ] or done.stderr.splitlines()
            raise RuntimeError(f"{source}: g++ failed: {errors[0] if errors else done.returncode}")
    return built
