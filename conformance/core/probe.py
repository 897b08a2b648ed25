"""Build and cache the native probe profiler (``conformance/native``, CMake) in the harness cache.

The headers generated from the Python tables (``profharness/hresults.h`` from ``clr_model/hresults.py``,
``profharness/flags.h`` from ``clr_model/flags.py``, by :mod:`conformance.codegen.constants`) are
written into the build folder before CMake runs and never committed, so they cannot go stale.

The cache key is the sha256 of every file under ``conformance/native``, of the generated headers (a change
to a Python table rebuilds the probe) and of the first lines of ``g++ --version`` and ``cmake --version``;
a build lives in ``cache_dir()/probe/<key>/`` and is reused. Builds happen in a temporary folder beside it
and are renamed into place, so a reader never sees a half-written cache entry; they are made holding the
area's lock (:func:`~conformance.core.paths.area_lock`), so two processes that need one build at once
(two pytest workers, two ``profharness`` commands) build it once: the second waits and reuses it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from conformance.codegen import constants
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, cache_dir, sealed_build

#: The probe's class id (CORECLR_PROFILER), as src/factory.cpp declares it.
CLSID = "{8C3B5D2E-6F4A-4B1C-9E7D-2A5F3C1B0D9E}"
#: The file name of the built probe, and of its copy next to a scenario app.
PROBE_FILE_NAME = "libprofharness_probe.so"
#: its CMake target (CMakeLists.txt also builds the recording proxy, which the probe does not need)
PROBE_TARGET = "profharness_probe"
BUILD_LOG_NAME = "build.log"
#: Where the generated headers go in a build folder (passed to CMake as PROFHARNESS_GENERATED_DIR).
GENERATED_DIR_NAME = "generated"

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


def generated_headers() -> dict[str, str]:
    """The headers :mod:`conformance.codegen.constants` renders from the Python tables: relative path ->
    text."""
    try:
        outputs = constants.outputs()
    except Exception as exc:  # a broken table or emitter is a build failure, reported in one line
        raise HarnessError(
            f"{constants.__name__}: cannot generate the constant headers: {type(exc).__name__}: {exc}"
        ) from exc
    return dict(sorted(outputs.items()))


def write_generated_headers(out_dir: Path) -> dict[str, str]:
    """Writes the generated headers under ``out_dir``; returns what was written."""
    headers = generated_headers()
    for rel, text in headers.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return headers


def build_key(native_dir: Path = NATIVE_DIR) -> str:
    """sha256 over every source file (path and content), the generated headers and the compiler and cmake
    versions."""
    digest = hashlib.sha256()
    for path in _source_files(native_dir):
        digest.update(path.relative_to(native_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for rel, text in generated_headers().items():
        digest.update(f"{GENERATED_DIR_NAME}/{rel}".encode())
        digest.update(b"\0")
        digest.update(text.encode())
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


def build_target(target: str, file_name: str, what: str, native_dir: Path = NATIVE_DIR) -> Path:
    """The path of ``file_name``, the shared library CMake target ``target`` of ``native_dir`` builds,
    building only that target (and what it links) into ``cache_dir()/<what>/<key>/`` when needed. ``what``
    names it in errors ("probe", "proxy")."""
    root = cache_dir() / what
    final = root / build_key(native_dir)

    def build(work: Path) -> None:
        log = work / BUILD_LOG_NAME
        build_dir = work / "build"
        generated = work / GENERATED_DIR_NAME
        write_generated_headers(generated)
        cmake = shutil.which("cmake") or "cmake"
        configure = [cmake, "-S", str(native_dir), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPROFHARNESS_GENERATED_DIR={generated}"]
        build_cmd = [cmake, "--build", str(build_dir), "--target", target, "-j", str(os.cpu_count() or 1)]
        ok = _run_logged(configure, log, work) and _run_logged(build_cmd, log, work)
        produced = build_dir / file_name
        if not ok or not produced.is_file():
            failed_log = root / f"{final.name}.failed.log"
            shutil.copyfile(log, failed_log)
            text = log.read_text(errors="replace")
            raise HarnessError(f"{what} build failed: {first_error_line(text)} (full log: {failed_log})")
        shutil.copy2(produced, work / file_name)
        shutil.rmtree(build_dir, ignore_errors=True)

    built = sealed_build(final, file_name, build)
    if not built.is_file():
        raise HarnessError(f"{what} build produced no {file_name} in {final}")
    return built


def build_probe(native_dir: Path = NATIVE_DIR) -> Path:
    """The path of the built probe ``.so``, building it into the cache when needed."""
    return build_target(PROBE_TARGET, PROBE_FILE_NAME, "probe", native_dir)
