"""``profharness skeleton DIR``: a minimal profiler project to start from (CMake, the profiling API's headers,
a profiler that keeps the documented rules and validates clean); prints how to build and validate it.

Exit status: 0 written; 2 DIR is not a new or empty folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.validator.skeleton import SKELETON_CLSID, write_skeleton

HELP = "write a minimal profiler project (CMake, headers, a profiler that validates clean) into DIR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, metavar="DIR", help="a new or empty folder")


def main(args: argparse.Namespace) -> int:
    files = write_skeleton(args.folder)
    print(f"wrote {len(files)} files into {args.folder}:")
    for path in files:
        print(f"  {path.relative_to(args.folder)}")
    build = args.folder / "build"
    print(f"build:    cmake -S {args.folder} -B {build} && cmake --build {build}")
    print(f"validate: profharness validate {build / 'libskeleton_profiler.so'} --clsid {SKELETON_CLSID}")
    return 0
