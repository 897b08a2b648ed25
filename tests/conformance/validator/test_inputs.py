"""What a user brings to ``validate`` besides the profiler (issue 10): their own app (``--app``), extra
environment (``--env K=V``), companion libraries to preload (``--preload LIB``), and pytest items per clause
for their CI (:mod:`conformance.validator.pytest_items`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.core import runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator import api
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture

USER_APP = """\
// A user's own app: calls into a native library of its own (the validator copies it beside the app),
// throws and catches, collects, and exits 0 when the library answered.
using System;
using System.Runtime.InteropServices;
public static class UserApp
{
    [DllImport("userhelper")]
    static extern int fixture_companion_answer();

    public static int Main()
    {
        try { throw new InvalidOperationException("user"); } catch (InvalidOperationException) { }
        GC.Collect();
        return fixture_companion_answer() == 42 ? 0 : 1;
    }
}
"""


@pytest.fixture(scope="module")
def user_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``myapp.dll`` (compiled with mcs) and its native ``libuserhelper.so`` in a folder of their own."""
    src = tmp_path_factory.mktemp("user-src")
    out = tmp_path_factory.mktemp("user-app")
    (src / "myapp.cs").write_text(USER_APP)
    scenario = scenarios.Scenario(
        name="myapp", folder=src, sources=[src / "myapp.cs"], plan={"version": 1}, description="a user's app"
    )
    built = scenarios.compile_scenario(scenario, runner.reference_runtime())
    (out / "myapp.dll").write_bytes(built.read_bytes())
    (out / "libuserhelper.so").write_bytes(build_fixture("companion").read_bytes())
    return out / "myapp.dll"


@pytest.mark.live
def test_user_app_runs_behind_the_proxy_BUF_04(user_app: Path, runtimes: list[Runtime]) -> None:
    """--app: the user's app (and the library beside it) runs instead of the scenarios; a fault the
    profiler makes in it is found there, and a correct profiler is clean on it."""
    result = api.validate(build_fixture("null_buffer"), FIXTURE_CLSID, app=user_app)
    assert [(r.scenario, r.outcome) for r in result.runs] == [("myapp", "ok")] * len(runtimes)
    seen = {(g.clause, o.runtime, o.scenario) for g in result.findings for o in g.occurrences}
    assert seen == {("BUF-04", rt.version, "myapp") for rt in runtimes}
    clean = api.validate(build_fixture("correct"), FIXTURE_CLSID, app=user_app)
    assert clean.findings == [] and [r.outcome for r in clean.runs] == ["ok"] * len(runtimes)


@pytest.mark.live
def test_env_and_preload_make_a_profiler_load(runtimes: list[Runtime]) -> None:
    """--env K=V and --preload LIB reach the profiled process: without them each fixture fails to load
    (VAL-LOAD: Initialize fails / dlopen finds no symbol), with them it validates clean."""
    needs_env, needs_companion = build_fixture("needs_env"), build_fixture("needs_companion")
    companion = build_fixture("companion")
    without = (
        api.validate(needs_env, FIXTURE_CLSID).findings
        + api.validate(needs_companion, FIXTURE_CLSID).findings
    )
    assert sorted(o.runtime for g in without for o in g.occurrences if g.clause == "VAL-LOAD") == sorted(
        [rt.version for rt in runtimes] * 2
    )
    assert {g.clause for g in without} == {"VAL-LOAD"}
    assert any("fixture_companion_answer" in o.message for g in without for o in g.occurrences)
    assert api.validate(needs_env, FIXTURE_CLSID, env={"FIXTURE_GREETING": "hello"}).clean
    assert api.validate(needs_companion, FIXTURE_CLSID, preload=[companion]).clean


@pytest.mark.live
def test_cli_env_and_preload(runtimes: list[Runtime], capsys: pytest.CaptureFixture[str]) -> None:
    rt = runtimes[-1].version
    argv = ["validate", str(build_fixture("needs_env")), "--clsid", FIXTURE_CLSID, "--runtime", rt,
            "--workload", "basic"]
    assert cli_main(argv) == 1
    assert "VAL-LOAD" in capsys.readouterr().out
    assert cli_main([*argv, "--env", "FIXTURE_GREETING=hello"]) == 0
    argv = ["validate", str(build_fixture("needs_companion")), "--clsid", FIXTURE_CLSID, "--runtime", rt,
            "--workload", "basic"]
    assert cli_main([*argv, "--preload", str(build_fixture("companion"))]) == 0
    assert "0 finding group(s)" in capsys.readouterr().out


@pytest.mark.live
def test_pytest_items_one_per_clause_BUF_04_fails(pytester: pytest.Pytester, runtimes: list[Runtime]) -> None:
    """clause_tests: one pytest item per rule id; the fixture's fault fails exactly its clause's item, a rule
    the run never showed what it judges is skipped (not passed), every other item passes."""
    so = build_fixture("null_buffer")
    pytester.makepyfile(
        test_profiler=textwrap.dedent(
            f"""
            from conformance.validator.pytest_items import clause_tests

            test_null_buffer = clause_tests({str(so)!r}, {FIXTURE_CLSID!r}, runtime={runtimes[-1].version!r})
            """
        )
    )
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")  # a user's strict CI: the marker is known
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["passed"] >= 1
    assert pytester.runpytest("-p", "no:cacheprovider", "-q", "--co", "-m", "clause").ret == 0
    assert outcomes["passed"] + outcomes.get("skipped", 0) == len(api.rule_ids()) - 1
    result.stdout.fnmatch_lines(
        ["*test_null_buffer?BUF-04?*", "*BUF-04 (NULL buffer needs size 0): * finding(s)*"]
    )


@pytest.mark.live
def test_pytest_items_of_a_crashed_run_skip_what_it_never_reached(
    pytester: pytest.Pytester, runtimes: list[Runtime]
) -> None:
    """A crash fails VAL-CRASH; a clause whose rule the run never reached is skipped, not passed."""
    so = build_fixture("crash")
    pytester.makepyfile(
        test_profiler=textwrap.dedent(
            f"""
            from conformance.validator.pytest_items import clause_tests

            test_crash = clause_tests({str(so)!r}, {FIXTURE_CLSID!r}, runtime={runtimes[-1].version!r})
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["skipped"] >= 1
    assert outcomes["skipped"] + outcomes.get("passed", 0) == len(api.rule_ids()) - 1
    result.stdout.fnmatch_lines(
        ["*test_crash?VAL-CRASH?*", "*no run on * showed what * judges (* crashed after *"]
    )
