"""Cache entries (issue 13): published whole with their sha256 (conformance.core.paths.seal), reused only
when the content still matches, moved aside and rebuilt when it does not; compiles in two processes at once
share one entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.core import paths, scenarios
from conformance.core.runner import reference_runtime
from conformance.core.runtimes import Runtime


def test_sealed_entry_is_reused_only_while_its_content_matches(tmp_path: Path) -> None:
    final = tmp_path / "key"
    final.mkdir()
    (final / "lib.so").write_bytes(b"built")
    assert paths.sealed_entry(final, "lib.so") is None  # unsealed: moved aside
    assert not final.exists() and len(list(tmp_path.glob(".key.corrupt-*"))) == 1
    with paths.staged(final, prefix="x-") as work:
        (work / "lib.so").write_bytes(b"built")
        paths.seal(work / "lib.so")
    assert paths.sealed_entry(final, "lib.so") == final / "lib.so"
    (final / "lib.so").write_bytes(b"bui1t")
    assert paths.sealed_entry(final, "lib.so") is None and not final.exists()


@pytest.mark.live
def test_a_corrupted_compile_is_rebuilt(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scenarios, "cache_dir", lambda: tmp_path)
    scenario = scenarios.load_scenario("stack-basic")
    dll = scenarios.compile_scenario(scenario, reference_runtime())
    good = dll.read_bytes()
    dll.write_bytes(good[: len(good) // 2])  # cut short
    again = scenarios.compile_scenario(scenario, reference_runtime())
    assert again == dll and again.read_bytes() == good


_COMPILE = """
import sys
from pathlib import Path
from conformance.core import scenarios
from conformance.core.runner import reference_runtime
scenarios.cache_dir = lambda: Path(sys.argv[1])
print(scenarios.compile_scenario(scenarios.load_scenario("stack-basic"), reference_runtime()))
"""


@pytest.mark.live
def test_two_processes_compiling_at_once_share_one_entry(runtimes: list[Runtime], tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _COMPILE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and Path(outs[0]).is_file()
    entries = [p.name for p in (tmp_path / "scenarios").iterdir()]
    assert entries == [Path(outs[0]).parent.name]  # one entry, no staging folder left behind
