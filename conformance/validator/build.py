"""Build and cache the recording proxy (``conformance/native/proxy``, CMake target ``profharness_proxy``).

Same pattern as :mod:`conformance.core.probe`: the key is the probe's build key (every file under
``conformance/native``, the generated headers, the compiler and cmake versions); a build lives in
``cache_dir()/proxy/<key>/`` and is renamed into place whole.
"""

from __future__ import annotations

from pathlib import Path

from conformance.core import probe
from conformance.core.paths import NATIVE_DIR

PROXY_FILE_NAME = "libprofharness_proxy.so"
TARGET = "profharness_proxy"


def build_proxy(native_dir: Path = NATIVE_DIR) -> Path:
    """The path of the built proxy ``.so``, building it into the cache when needed."""
    return probe.build_target(TARGET, PROXY_FILE_NAME, "proxy", native_dir)


PRELOAD_FILE_NAME = "libprofharness_preload.so"
PRELOAD_TARGET = "profharness_preload"


def build_preload(native_dir: Path = NATIVE_DIR) -> Path:
    """The built signal-safety preload ``.so`` (``conformance/native/preload``), built when needed."""
    return probe.build_target(PRELOAD_TARGET, PRELOAD_FILE_NAME, "preload", native_dir)
