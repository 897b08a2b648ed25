"""The skeleton profiler (issue 19, the author's path): ``profharness skeleton DIR`` writes a CMake project
that builds and validates clean on every bundled runtime."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.core.runtimes import Runtime
from conformance.validator import api
from conformance.validator.skeleton import SKELETON_CLSID, SKELETON_DIR, write_skeleton


def test_the_skeletons_clsid_is_the_one_its_source_declares() -> None:
    source = (SKELETON_DIR / "profiler.cpp").read_text()
    declared = re.search(r"\{(A1B2C3D4-[0-9A-F-]+)\}: choose your own", source)
    assert declared is not None and "{" + declared.group(1) + "}" == SKELETON_CLSID


def test_a_folder_with_something_in_it_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert cli_main(["skeleton", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an empty folder" in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.live
@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake (installed by ./dev setup)")
def test_the_skeleton_builds_with_cmake_and_validates_clean(tmp_path: Path, runtimes: list[Runtime]) -> None:
    project = tmp_path / "myprofiler"
    names = {p.relative_to(project).as_posix() for p in write_skeleton(project)}
    assert {"CMakeLists.txt", "profiler.cpp", "include/profharness/flags.h",
            "include/profharness/hresults.h", "include/profharness/callbacks.h"} <= names  # fmt: skip
    build = project / "build"
    subprocess.run(["cmake", "-S", str(project), "-B", str(build)], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    result = api.validate(build / "libskeleton_profiler.so", SKELETON_CLSID)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    assert [r.outcome for r in result.runs] == ["ok"] * len(runtimes)
    assert result.groups == [] and result.notes == [], api.table(result)
    # and under the fuzzer's fake runtime, which also answers a longer name on the second GetModuleInfo
    # (BUF-08: a skeleton that asked only twice was found there)
    reproducer = tmp_path / "reproducer.json"
    so = str(build / "libskeleton_profiler.so")
    fuzzed = cli_main(["fuzz", so, "--clsid", SKELETON_CLSID, "--seed", "1", "--max-examples", "300",
                       "--reproducer", str(reproducer)])  # fmt: skip
    assert fuzzed == 0, reproducer.read_text() if reproducer.exists() else "no reproducer"
