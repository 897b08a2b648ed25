"""The validator's hang limits (no runtime): the default limit the proxy is given, and the harness's own
watchdog set far enough behind it that a callback that stays open is reported by the proxy (which names the
stuck thread and callback) before the harness kills the process."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import build_parser
from conformance.core import runner, scenarios
from conformance.core.runtimes import Runtime
from conformance.validator import api, launch

#: the documented default (``profharness validate --help``: "default 10.0"), and the harness's margin
DOCUMENTED_HANG_S = 10.0
DOCUMENTED_MARGIN_S = 10.0


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


def test_harness_watchdog_fires_only_after_the_proxys_hang_limit(watchdog_limit: list[float]) -> None:
    _run()
    _run(hang_s=3.0)
    _run(hang_s=0.0)  # the proxy's watchdog off: the harness's still guards the default limit
    _run(hang_s=3.0, timeout_s=7.0)
    assert launch.WATCHDOG_MARGIN_S == DOCUMENTED_MARGIN_S
    assert watchdog_limit == [DOCUMENTED_HANG_S + DOCUMENTED_MARGIN_S, 13.0, 20.0, 7.0]
