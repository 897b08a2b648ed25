"""A minimal profiler project to start from (issue 19, the author's path): ``profharness skeleton DIR``.

The project is the package's ``conformance/skeleton`` (``CMakeLists.txt``, ``profiler.cpp``: a profiler that
keeps the documented rules and validates clean) with the profiling API's declarations beside it in
``include/profharness``: the interface header in vtable order and its types (``interfaces.h``,
``types.h``), every callback answering S_OK (``callbacks.h``), the COM class factory (``class_factory.h``)
and the constants (``hresults.h``, ``flags.h``) — the same headers the harness's own native parts are
built with, generated from the one API table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conformance.codegen import constants
from conformance.codegen.fixtures import render_callbacks
from conformance.core.errors import InputError
from conformance.core.paths import NATIVE_DIR, PACKAGE_DIR

SKELETON_DIR = PACKAGE_DIR / "skeleton"
#: the skeleton's CLSID (profiler.cpp's kClsid): what `validate --clsid` is given for it
SKELETON_CLSID = "{A1B2C3D4-0000-4000-8000-00000000C0DE}"
#: the headers copied from the native parts' include folder
_COPIED = ("interfaces.h", "types.h", "class_factory.h")


def write_skeleton(folder: Path) -> list[Path]:
    """Write the skeleton project into ``folder`` (created; it must hold nothing yet); returns the files."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"{folder}: not an empty folder (the skeleton goes into a new or empty one)")
    include = folder / "include" / "profharness"
    include.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("CMakeLists.txt", "profiler.cpp"):
        shutil.copyfile(SKELETON_DIR / name, folder / name)
        written.append(folder / name)
    for name in _COPIED:
        shutil.copyfile(NATIVE_DIR / "include" / "profharness" / name, include / name)
        written.append(include / name)
    generated = {**{Path(rel).name: text for rel, text in constants.outputs().items()},
                 "callbacks.h": render_callbacks(namespace="profharness")}  # fmt: skip
    for name, text in generated.items():
        (include / name).write_text(text)
        written.append(include / name)
    return written
