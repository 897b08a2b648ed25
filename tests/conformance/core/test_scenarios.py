"""conformance.core.scenarios: loading, mcs compilation and its content-keyed cache, run folders, the apps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.core import scenarios
from conformance.core.errors import HarnessError
from conformance.core.paths import LOCK_NAME, SCENARIOS_DIR
from conformance.core.runtimes import Runtime

#: From corprof.idl (COR_PRF_MONITOR): the bits the plans rely on.
COR_PRF_MONITOR_EXCEPTIONS = 0x40
COR_PRF_MONITOR_GC = 0x80
COR_PRF_ENABLE_STACK_SNAPSHOT = 0x10000000
COR_PRF_SNAPSHOT_REGISTER_CONTEXT = 0x1


def _reference(runtimes: list[Runtime]) -> Runtime:
    return next(rt for rt in runtimes if rt.version.startswith("3.1."))


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PROFHARNESS_CACHE", str(cache))
    return cache


def _scenario_dir(root: Path, name: str, app: str, plan: dict[str, Any] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "app.cs").write_text(app)
    (folder / "plan.json").write_text(json.dumps(plan or {"version": 1, "event_mask": 0}))
    return folder


HELLO = """// hello: prints a line.
// Second line of the description.
//
// Not part of the description.
public static class Hello
{
    public static int Main()
    {
        ProfHarness.Probe.Mark("hello", ProfHarness.Json.Str("a\\"b"));
        return 0;
    }
}
"""


def _run(app: Path, rt: Runtime, echo: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORECLR_", "DOTNET_", "COMPlus_"))}
    env.update(rt.env())
    env["PROFHARNESS_ECHO_MARKS"] = "1" if echo else "0"
    return subprocess.run(
        [str(rt.host), str(app)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def _marks(stdout: str) -> dict[str, str]:
    marks: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("mark "):
            _, name, payload = line.split(" ", 2)
            marks[name] = payload
    return marks


# ----------------------------------------------------------------------------------------------------------
# Loading


def test_list_scenarios_has_the_two_apps() -> None:
    names = [s.name for s in scenarios.list_scenarios()]
    assert "stack-basic" in names
    assert "gc-compact" in names
    assert not any(n.startswith("_") for n in names)


def test_load_unknown_scenario_lists_known_names() -> None:
    with pytest.raises(HarnessError) as info:
        scenarios.load_scenario("no-such-scenario")
    message = info.value.message
    assert message.startswith("unknown scenario 'no-such-scenario'; known scenarios: ")
    assert "gc-compact" in message and "stack-basic" in message


def test_scenario_sources_include_common_helpers() -> None:
    scenario = scenarios.load_scenario("stack-basic")
    names = [p.name for p in scenario.sources]
    assert names[0] == "app.cs"
    assert {"Probe.cs", "Json.cs", "StackReport.cs"} <= set(names)
    assert scenario.folder == SCENARIOS_DIR / "stack-basic"
    assert scenario.description.startswith("stack-basic: ")


def test_description_is_first_comment_paragraph(tmp_path: Path) -> None:
    folder = _scenario_dir(tmp_path, "hello", HELLO)
    scenario = scenarios.load_scenario_dir(folder)
    assert scenario.description == "hello: prints a line. Second line of the description."


def test_invalid_plan_names_file_and_line(tmp_path: Path) -> None:
    folder = _scenario_dir(tmp_path, "bad", HELLO)
    (folder / "plan.json").write_text('{\n  "version": 1,\n  "event_mask": ,\n}\n')
    with pytest.raises(HarnessError, match=rf"^{folder / 'plan.json'}:3:17: invalid JSON: "):
        scenarios.load_scenario_dir(folder)


def test_plan_version_checked(tmp_path: Path) -> None:
    folder = _scenario_dir(tmp_path, "v2", HELLO, {"version": 2})
    with pytest.raises(HarnessError, match=r"unsupported plan version 2 \(expected 1\)"):
        scenarios.load_scenario_dir(folder)


def test_folder_without_app_is_not_a_scenario(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarnessError, match=r"not a scenario: no app\.cs$"):
        scenarios.load_scenario_dir(tmp_path / "empty")


def test_stack_basic_plan() -> None:
    plan = scenarios.load_scenario("stack-basic").plan
    assert plan["event_mask"] & COR_PRF_MONITOR_EXCEPTIONS
    # DoStackSnapshot fails with CORPROF_E_INCONSISTENT_WITH_FLAGS without ENABLE_STACK_SNAPSHOT.
    assert plan["event_mask"] & COR_PRF_ENABLE_STACK_SNAPSHOT
    assert plan["record"] == ["ExceptionThrown"]
    walks = {e["id"]: e for e in plan["experiments"]}
    assert set(walks) == {"walk-default", "walk-register-context"}
    assert walks["walk-default"]["args"]["infoFlags"] == 0
    assert walks["walk-register-context"]["args"]["infoFlags"] == COR_PRF_SNAPSHOT_REGISTER_CONTEXT
    for e in walks.values():
        assert (e["at"], e["run"], e["times"], e["args"]["resolve"]) == (
            "ExceptionThrown",
            "stack_snapshot",
            1,
            True,
        )


def test_gc_compact_plan() -> None:
    plan = scenarios.load_scenario("gc-compact").plan
    assert plan["event_mask"] & COR_PRF_MONITOR_GC
    assert "MovedReferences2" in plan["record"]
    assert "ObjectReferences" in plan["count"]
    assert not set(plan["record"]) & set(plan["count"])


# ----------------------------------------------------------------------------------------------------------
# Compilation


def test_mcs_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    folder = _scenario_dir(tmp_path, "hello", HELLO)
    fake = Runtime(version="3.1.23", host=tmp_path / "dotnet", framework_dir=tmp_path, source="test")
    with pytest.raises(HarnessError, match=r"apt-get install mono-mcs"):
        scenarios.compile_scenario(scenarios.load_scenario_dir(folder), fake)


@pytest.mark.live
def test_compile_cache_miss_then_hit(runtimes: list[Runtime], private_cache: Path, tmp_path: Path) -> None:
    reference = _reference(runtimes)
    folder = _scenario_dir(tmp_path / "src", "hello", HELLO)
    scenario = scenarios.load_scenario_dir(folder)
    first = scenarios.compile_scenario(scenario, reference)
    assert first.parent.parent == private_cache / "scenarios"
    assert first.is_file()
    stamp = first.stat().st_mtime_ns
    again = scenarios.compile_scenario(scenarios.load_scenario_dir(folder), reference)
    assert again == first
    assert again.stat().st_mtime_ns == stamp  # reused, not rebuilt
    # A changed source is a new key.
    (folder / "app.cs").write_text(HELLO.replace("return 0;", "return 3;"))
    changed = scenarios.compile_scenario(scenarios.load_scenario_dir(folder), reference)
    assert changed != first
    assert changed.is_file()
    # Only finished entries in the cache (and the area's lock file), no temporary folders.
    assert sorted(p.name for p in (private_cache / "scenarios").iterdir() if p.name != LOCK_NAME) == sorted(
        [first.parent.name, changed.parent.name]
    )


@pytest.mark.live
def test_compile_key_depends_on_compiler_and_references(runtimes: list[Runtime], tmp_path: Path) -> None:
    reference = _reference(runtimes)
    scenario = scenarios.load_scenario_dir(_scenario_dir(tmp_path, "hello", HELLO))
    key = scenarios.compile_key(scenario, reference, "Mono C# compiler version 6.8.0.105")
    assert key == scenarios.compile_key(scenario, reference, "Mono C# compiler version 6.8.0.105")
    assert key != scenarios.compile_key(scenario, reference, "Mono C# compiler version 6.12.0.200")
    fake_fx = tmp_path / "fx"
    fake_fx.mkdir()
    for ref in scenarios.reference_paths(reference):
        (fake_fx / ref.name).write_bytes(b"x")
    other = reference.model_copy(update={"framework_dir": fake_fx})
    assert key != scenarios.compile_key(scenario, other, "Mono C# compiler version 6.8.0.105")


@pytest.mark.live
def test_compile_error_names_file_and_line(
    runtimes: list[Runtime], private_cache: Path, tmp_path: Path
) -> None:
    broken = HELLO.replace("return 0;", "return undefinedName;")  # line 10
    folder = _scenario_dir(tmp_path, "broken", broken)
    with pytest.raises(HarnessError) as info:
        scenarios.compile_scenario(scenarios.load_scenario_dir(folder), _reference(runtimes))
    message = info.value.message
    assert message.startswith(f"{folder / 'app.cs'}(10,")
    assert ": error CS0103: " in message
    assert "\n" not in message
    assert "Compilation failed" in info.value.detail
    area = private_cache / "scenarios"
    assert not area.exists() or not any(p.name != LOCK_NAME for p in area.iterdir())


@pytest.mark.live
def test_prepare_run_dir(runtimes: list[Runtime], tmp_path: Path) -> None:
    scenario = scenarios.load_scenario("stack-basic")
    app_dll = scenarios.compile_scenario(scenario, _reference(runtimes))
    for rt in runtimes:
        run_dir = tmp_path / rt.version
        app = scenarios.prepare_run_dir(app_dll, rt, run_dir)
        assert app == run_dir / "app.dll"
        assert app.read_bytes() == app_dll.read_bytes()
        config = json.loads((run_dir / "app.runtimeconfig.json").read_text())
        assert config["runtimeOptions"]["framework"] == {
            "name": "Microsoft.NETCore.App",
            "version": rt.version,
        }
        assert config["runtimeOptions"]["tfm"] == rt.tfm


# ----------------------------------------------------------------------------------------------------------
# The scenario apps, without a profiler, on every bundled runtime


@pytest.mark.live
def test_helpers_run_without_probe(runtimes: list[Runtime], private_cache: Path, tmp_path: Path) -> None:
    app_dll = scenarios.compile_scenario(
        scenarios.load_scenario_dir(_scenario_dir(tmp_path / "src", "hello", HELLO)), _reference(runtimes)
    )
    for rt in runtimes:
        proc = _run(scenarios.prepare_run_dir(app_dll, rt, tmp_path / rt.version), rt)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == 'mark hello "a\\"b"\n'


@pytest.mark.live
def test_stack_basic_runs_on_every_runtime(runtimes: list[Runtime], tmp_path: Path) -> None:
    app_dll = scenarios.compile_scenario(scenarios.load_scenario("stack-basic"), _reference(runtimes))
    for rt in runtimes:
        app = scenarios.prepare_run_dir(app_dll, rt, tmp_path / rt.version)
        proc = _run(app, rt)
        assert proc.returncode == 0, proc.stderr
        marks = _marks(proc.stdout)
        assert list(marks) == ["begin", "expect.stack", "done"]
        assert json.loads(marks["done"]) == {"caught": True}
        stack = json.loads(marks["expect.stack"])
        names = [f["method"] for f in stack]
        assert names == ["Thrower", "Level6", "Level5", "Level4", "Level3", "Level2", "Level1", "Main"]
        for frame in stack:
            assert frame["token"] >> 24 == 0x06  # mdtMethodDef
            assert frame["type"] == "ProfHarness.Scenarios.StackBasic"
            assert frame["module"] == "app.dll"
        # Methods are defined in source order, so their tokens rise from Main to Thrower.
        tokens = [f["token"] for f in stack]
        assert tokens == sorted(tokens, reverse=True)
        assert len(set(tokens)) == len(tokens)
        quiet = _run(app, rt, echo=False)
        assert (quiet.returncode, quiet.stdout) == (0, "")


@pytest.mark.live
def test_gc_compact_runs_on_every_runtime(runtimes: list[Runtime], tmp_path: Path) -> None:
    app_dll = scenarios.compile_scenario(scenarios.load_scenario("gc-compact"), _reference(runtimes))
    for rt in runtimes:
        proc = _run(scenarios.prepare_run_dir(app_dll, rt, tmp_path / rt.version), rt)
        assert proc.returncode == 0, proc.stderr
        marks = _marks(proc.stdout)
        assert list(marks) == ["gc.begin", "gc.end", "done"]
        end = json.loads(marks["gc.end"])
        assert end["tag_sum"] == end["expected_tag_sum"] == 20000 * 20001 // 2
        assert end["ok"] is True
        assert end["gen2_count"] - json.loads(marks["gc.begin"])["gen2_count"] >= 3


STUB_PROBE_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static void put(FILE* f, const uint16_t* s) {
  if (!s) { fputs("<null>", f); return; }
  for (; *s; ++s) { if (*s < 0x80) fputc((int)*s, f); else fprintf(f, "\\u%04x", *s); }
}
int32_t profharness_mark(const uint16_t* name, const uint16_t* payload) {
  FILE* f = fopen(getenv("STUB_MARKS"), "a");
  if (!f) return -1;
  put(f, name); fputc(' ', f); put(f, payload); fputc('\n', f); fclose(f);
  return 7;
}
"""

MARKER_APP = """// marker: checks the Probe wrapper against a native library.
public static class Marker
{
    public static int Main()
    {
        int first = ProfHarness.Probe.Mark("uni", "\\u00e9\\u20ac \\"q\\"");
        int second = ProfHarness.Probe.Mark("nul");
        System.Console.WriteLine("returned " + first + " " + second);
        return 0;
    }
}
"""


@pytest.mark.live
def test_probe_wrapper_reaches_the_native_library_next_to_the_app(
    runtimes: list[Runtime], private_cache: Path, tmp_path: Path
) -> None:
    """[DllImport("profharness_probe")] resolves libprofharness_probe.so in the app folder (design.md seam);
    names and payloads arrive as NUL-terminated UTF-16, a null payload as NULL; the result comes back."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build a stand-in probe library")
    (tmp_path / "stub.c").write_text(STUB_PROBE_C)
    stub = tmp_path / "libprofharness_probe.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(stub), str(tmp_path / "stub.c")], check=True)
    app_dll = scenarios.compile_scenario(
        scenarios.load_scenario_dir(_scenario_dir(tmp_path / "src", "marker", MARKER_APP)),
        _reference(runtimes),
    )
    for rt in runtimes:
        app = scenarios.prepare_run_dir(app_dll, rt, tmp_path / rt.version)
        shutil.copyfile(stub, app.parent / stub.name)
        marks = tmp_path / f"marks-{rt.version}.txt"
        env = {**os.environ, **rt.env(), "STUB_MARKS": str(marks), "PROFHARNESS_ECHO_MARKS": "0"}
        proc = subprocess.run([str(rt.host), str(app)], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "returned 7 7\n"
        assert marks.read_text() == 'uni \\u00e9\\u20ac "q"\nnul <null>\n'


@pytest.mark.live
def test_compile_concurrently_from_two_processes(
    runtimes: list[Runtime], private_cache: Path, tmp_path: Path
) -> None:
    folder = _scenario_dir(tmp_path / "src", "hello", HELLO)
    code = (
        "import sys; from pathlib import Path; from conformance.core import runtimes, scenarios; "
        "ref = next(r for r in runtimes.install_bundled() if r.version.startswith('3.1.')); "
        "print(scenarios.compile_scenario(scenarios.load_scenario_dir(Path(sys.argv[1])), ref))"
    )
    env = {**os.environ, "PROFHARNESS_CACHE": str(private_cache)}
    # The bundled runtimes are already installed in the session's cache; share them through a symlink.
    private_cache.mkdir(parents=True, exist_ok=True)
    (private_cache / "runtimes").symlink_to(_reference(runtimes).host.parent.parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(folder)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode() for _, err in outs]
    paths = {out.decode().strip() for out, _ in outs}
    assert len(paths) == 1
    assert Path(paths.pop()).is_file()
    assert len([p for p in (private_cache / "scenarios").iterdir() if p.name != LOCK_NAME]) == 1
