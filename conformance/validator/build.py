"""Build and cache the recording proxy (``conformance/native/proxy``, CMake target ``profharness_proxy``).

Same pattern as :mod:`conformance.core.probe`: the key is the probe's build key (every file under
``conformance/native``, the generated headers, the compiler and cmake versions); a build lives in
``cache_dir()/proxy/<key>/`` and is renamed into place whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conformance.core import probe
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR, cache_dir, staged

PROXY_FILE_NAME = "libprofharness_proxy.so"
TARGET = "profharness_proxy"


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


def build_proxy(native_dir: Path = NATIVE_DIR) -> Path:
    """The path of the built proxy ``.so``, building it into the cache when needed."""
    key = probe.build_key(native_dir)
    root = cache_dir() / "proxy"
    final = root / key
    built = final / PROXY_FILE_NAME
    if built.is_file():
        return built
    with staged(final, prefix=f"{key[:12]}-") as work:
        log = work / probe.BUILD_LOG_NAME
        build_dir = work / "build"
        generated = work / probe.GENERATED_DIR_NAME
        probe.write_generated_headers(generated, native_dir)
        cmake = shutil.which("cmake") or "cmake"
        configure = [
            cmake,
            "-S",
            str(native_dir),
            "-B",
            str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPROFHARNESS_GENERATED_DIR={generated}",
        ]
        build_cmd = [cmake, "--build", str(build_dir), "--target", TARGET, "-j", str(os.cpu_count() or 1)]
        ok = _run_logged(configure, log, work) and _run_logged(build_cmd, log, work)
        produced = build_dir / PROXY_FILE_NAME
        if not ok or not produced.is_file():
            failed_log = root / f"{key}.failed.log"
            shutil.copyfile(log, failed_log)
            text = log.read_text(errors="replace")
            raise HarnessError(f"proxy build failed: {probe.first_error_line(text)} (full log: {failed_log})")
        shutil.copyfile(produced, work / PROXY_FILE_NAME)
        shutil.rmtree(build_dir, ignore_errors=True)
    if not built.is_file():
        raise HarnessError(f"proxy build produced no {PROXY_FILE_NAME} in {final}")
    return built
