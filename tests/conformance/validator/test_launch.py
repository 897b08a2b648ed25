"""The validator's limits (no runtime): the hang limit the proxy is given (a callback, or a call outside any
callback, open longer is a hang the proxy reports, naming the stuck thread and what was open), and the run
limit, the harness's own watchdog, separate from it (default 600 s)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import build_parser
from conformance.core import runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator import api, launch

#: the documented defaults (``profharness validate --help``: "default 10.0"; issue 19: the run as a whole
#: has --timeout, default 10 minutes)
DOCUMENTED_HANG_S = 10.0
DOCUMENTED_TIMEOUT_S = 600.0


def test_default_hang_limit_is_10_s_everywhere_it_is_a_default() -> None:
    assert launch.DEFAULT_HANG_S == DOCUMENTED_HANG_S
    args = build_parser().parse_args(
        ["validate", "p.so", "--clsid", "{00000000-0000-0000-0000-000000000000}"]
    )
    assert args.hang_seconds == DOCUMENTED_HANG_S
    assert inspect.signature(api.validate).parameters["hang_s"].default == DOCUMENTED_HANG_S
    env = launch.proxy_environment(Path("/p.so"), "{C}")
    assert env["PROFHARNESS_PROXY_HANG_MS"] == "10000"
    assert launch.proxy_environment(Path("/p.so"), "{C}", hang_s=2.5)["PROFHARNESS_PROXY_HANG_MS"] == "2500"


def test_the_proxy_writes_the_binary_trace_unless_the_user_asks_for_json_lines() -> None:
    """Issue 23: validate's recording is the binary trace, named so in the run folder (and the trace of a
    profiler behind the proxy too); the user's own PROFHARNESS_TRACE_FORMAT wins."""
    env = launch.proxy_environment(Path("/p.so"), "{C}")
    assert env["PROFHARNESS_TRACE_FORMAT"] == "binary"
    assert launch.target_trace_file(env) == "target-trace.phtrace"
    mine = launch.proxy_environment(Path("/p.so"), "{C}", extra_env={"PROFHARNESS_TRACE_FORMAT": "jsonl"})
    assert mine["PROFHARNESS_TRACE_FORMAT"] == "jsonl"
    assert launch.target_trace_file(mine) == launch.TARGET_TRACE_FILE == "target-trace.jsonl"


@pytest.fixture
def watchdog_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """The ``timeout_s`` each :func:`launch.run_under_proxy` hands the runner (which is not run)."""
    seen: list[float] = []

    def execute(*_args: Any, timeout_s: float, **_kw: Any) -> None:
        seen.append(timeout_s)

    monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(launch, "build_proxy", lambda: tmp_path / "proxy.so")
    monkeypatch.setattr(launch, "new_run_dir", lambda _label, _rt: tmp_path)
    return seen


def _run(**kw: Any) -> None:
    scenario = scenarios.Scenario(name="s", folder=Path("/"), sources=[], plan={"version": 1}, description="")
    rt = Runtime(version="8.0.4", host=Path("/dotnet"), framework_dir=Path("/fw"), source="test")
    launch.run_under_proxy(scenario, Path("/app.dll"), rt, {}, **kw)


def test_harness_watchdog_is_the_run_limit_not_the_hang_limit(watchdog_limit: list[float]) -> None:
    _run()
    _run(hang_s=3.0)
    _run(hang_s=0.0)  # the proxy's watchdog off: the harness's still guards the run
    _run(hang_s=3.0, timeout_s=7.0)
    assert launch.DEFAULT_TIMEOUT_S == DOCUMENTED_TIMEOUT_S
    assert inspect.signature(api.validate).parameters["timeout_s"].default == DOCUMENTED_TIMEOUT_S
    assert watchdog_limit == [DOCUMENTED_TIMEOUT_S, DOCUMENTED_TIMEOUT_S, DOCUMENTED_TIMEOUT_S, 7.0]


def test_validate_hands_both_limits_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """api.validate(hang_s=, timeout_s=): the hang limit goes to the proxy's environment, the run limit to
    the harness's watchdog."""
    seen: list[tuple[str, float | None]] = []

    def run_under_proxy(_s: Any, _dll: Any, _rt: Any, env: dict[str, str], **kw: Any) -> None:
        seen.append((env["PROFHARNESS_PROXY_HANG_MS"], kw.get("timeout_s")))
        raise StopIteration  # nothing is run

    monkeypatch.setattr(launch, "run_under_proxy", run_under_proxy)
    monkeypatch.setattr(launch, "check_profiler", lambda p: p)
    app = tmp_path / "app.dll"
    app.write_bytes(b"")
    with pytest.raises(StopIteration):
        api.validate(Path("/p.so"), "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}", app=app, hang_s=2.0,
                     timeout_s=30.0)  # fmt: skip
    assert seen == [("2000", 30.0)]
