"""Build and cache the native probe profiler (``conformance/native``, CMake) in the harness cache.

The cache key is the sha256 of every file under ``conformance/native`` plus the first lines of
``g++ --version`` and ``cmake --version``; a build lives in ``cache_dir()/probe/<key>/`` and is reused.
Builds happen in a temporary folder beside it and are renamed into place, so concurrent builds (two
pytest workers) never leave a half-written cache entry.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, cache_dir, staged

#: The probe's class id (CORECLR_PROFILER), as probe.cpp declares it.
CLSID = "{8C3B5D2E-6F4A-4B1C-9E7D-2A5F3C1B0D9E}"
#: The file name of the built probe, and of its copy next to a scenario app.
PROBE_FILE_NAME = "libprofharness_probe.so"
BUILD_LOG_NAME = "build.log"

_SKIPPED_PARTS = {"__pycache__"}


def _tool_version(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        raise HarnessError(f"{tool} not found on PATH: it is needed to build the probe ({NATIVE_DIR})")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessError(f"{exe} --version failed: {exc}") from exc
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else ""


def _source_files(native_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in native_dir.rglob("*")
        if p.is_file() and not _SKIPPED_PARTS.intersection(p.relative_to(native_dir).parts)
    )


def build_key(native_dir: Path = NATIVE_DIR) -> str:
    """sha256 over every source file (path and content) and the compiler and cmake versions."""
    digest = hashlib.sha256()
    for path in _source_files(native_dir):
        digest.update(path.relative_to(native_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    digest.update(_tool_version("g++").encode())
    digest.update(b"\0")
    digest.update(_tool_version("cmake").encode())
    return digest.hexdigest()


def first_error_line(log: str) -> str:
    """The first compiler or CMake error line of a build log (or its last non-empty line)."""
    for line in log.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line.strip()
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _run_logged(cmd: list[str], log: Path, cwd: Path) -> bool:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            done = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            fh.write(f"{exc}\n")
            return False
    return done.returncode == 0


def build_probe(native_dir: Path = NATIVE_DIR) -> Path:
    """The path of the built probe ``.so``, building it into the cache when needed."""
    key = build_key(native_dir)
    root = cache_dir() / "probe"
    final = root / key
    built = final / PROBE_FILE_NAME
    if built.is_file():
        return built
    with staged(final, prefix=f"{key[:12]}-") as work:
        log = work / BUILD_LOG_NAME
        build_dir = work / "build"
        cmake = shutil.which("cmake") or "cmake"
        ok = _run_logged(
            [cmake, "-S", str(native_dir), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"], log, work
        ) and _run_logged([cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 1)], log, work)
        produced = build_dir / PROBE_FILE_NAME
        if not ok or not produced.is_file():
            failed_log = root / f"{key}.failed.log"
            shutil.copyfile(log, failed_log)
            text = log.read_text(errors="replace")
            raise HarnessError(f"probe build failed: {first_error_line(text)} (full log: {failed_log})")
        shutil.copyfile(produced, work / PROBE_FILE_NAME)
        shutil.rmtree(build_dir, ignore_errors=True)
    if not built.is_file():
        raise HarnessError(f"probe build produced no {PROBE_FILE_NAME} in {final}")
    return built
