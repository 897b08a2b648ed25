"""Issue 21's acceptance on profilers nobody here wrote against the rules: the fixtures of
``profilers/docs/`` added for it (a startup-race sampler, SIGPROF samplers whose handlers allocate or lock, a
sampler Shutdown does not stop, an attach-only agent and one that leaves a thread running across its detach,
IL rewriters that rewrite on every JITCompilationStarted or once; and their correct counterparts) were
written from Microsoft's documentation and signal-safety(7) alone. Each faulty one is found on both bundled
runtimes with its clause at its own source line (the line found by text in its source); each correct one is
clean. What is expected comes from the fixture's source and the workload's own facts, never from what the
validator printed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.core.runtimes import Runtime
from conformance.validator.launch import AttachPlan
from conformance.validator.report import render_text
from conformance.validator.result import Group, ValidationResult
from tests.conformance.validator.test_docs_fixtures import DOCS, apps, source_line, validate, versions

__all__ = ["apps"]  # the module-scoped fixture, shared

#: the perturbation seed the races are judged with (run i of a repetition uses SEED + i)
SEED = 2100
SHORT = {"PROFHARNESS_APP_SECONDS": "1"}


def groups_of(result: ValidationResult, clause: str) -> list[Group]:
    return [g for g in result.findings if g.clause == clause]


def at_line(result: ValidationResult, clause: str, fixture: str, text: str) -> Group:
    """The finding group of ``clause`` at the fixture's line holding ``text``, found on every runtime."""
    line = source_line(fixture, text)
    found = [g for g in groups_of(result, clause) if g.site is not None and g.site.line == line]
    assert found, f"no {clause} at {fixture}.cpp:{line}\n{render_text(result)}"
    assert found[0].site is not None and found[0].site.file is not None
    assert found[0].site.file.endswith(f"profilers/docs/{fixture}.cpp"), found[0].site
    return found[0]


@pytest.mark.live
def test_VAL_CRASH_a_startup_race_is_found_in_10_of_10_perturbed_runs(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """startup_race_sampler starts its sampler thread in Initialize before it stores the ICorProfilerInfo
    the thread calls: with --perturb the proxy holds the Initialize thread at its calls, and the sampler
    calls through the null pointer in every run; without, it loses the race now and then (printed)."""
    result = validate("startup_race_sampler", apps("basic"), runtimes, perturb=SEED, repeat=10, compare=True)
    first_call = "initThreadHr_ = info_->InitializeCurrentThread()"
    group = at_line(result, "VAL-CRASH", "startup_race_sampler", first_call)
    runs = [result.runs[k] for k in group.runs]
    for runtime in versions(runtimes):
        perturbed = {r.seed for r in runs if r.runtime == runtime and r.seed is not None}
        assert perturbed == set(range(SEED, SEED + 10)), (runtime, group.runs)
        plain = sum(1 for r in runs if r.runtime == runtime and r.seed is None)
        print(f"startup race on {runtime}: 10/10 perturbed, {plain}/10 unperturbed")


@pytest.mark.live
@pytest.mark.parametrize("repeat", [pytest.param(2, id="2runs"),
                                    pytest.param(10, id="10runs", marks=pytest.mark.long)])  # fmt: skip
@pytest.mark.parametrize(("fixture", "app", "env"), [("sampler_walk_all", "long", SHORT),
                                                     ("sampler_signal_safe", "long", SHORT)])  # fmt: skip
def test_correct_samplers_are_clean_over_perturbed_runs(
    fixture: str, app: str, env: dict[str, str], repeat: int, apps: Callable[[str], Path],
    runtimes: list[Runtime],
) -> None:
    result = validate(fixture, apps(app), runtimes, env=env, perturb=SEED, repeat=repeat)
    text = render_text(result)
    assert len(result.runs) == repeat * len(runtimes) and all(r.outcome == "ok" for r in result.runs), text
    assert result.findings == [], text


@pytest.mark.live
@pytest.mark.parametrize(("fixture", "clause", "text"), [
    ("sampler_signal_malloc", "ASYNC-01", "auto* s = new Sample{"),
    ("sampler_signal_mutex", "ASYNC-03", "std::lock_guard<std::mutex> g(g_bufMu);"),
])  # fmt: skip
def test_ASYNC_a_sigprof_handler_that_allocates_or_locks_is_found_at_its_line(
    fixture: str, clause: str, text: str, apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """The handlers run only when SIGPROF comes: plainly the samplers work (the docs fixtures' README: 25/25
    stress runs clean), so only the preload sees what they call."""
    # timeout: the fault can really deadlock (a SIGPROF inside malloc, the handler's malloc on its lock)
    result = validate(fixture, apps("long"), runtimes, env=SHORT, timeout_s=30.0)
    lines = (DOCS / f"{fixture}.cpp").read_text().splitlines()
    (line,) = [n for n, line in enumerate(lines, 1) if text in line and n < 80]  # the handler's own line
    found = [g for g in groups_of(result, clause) if g.site is not None and g.site.line == line]
    assert found and found[0].runtimes == versions(runtimes), render_text(result)


@pytest.mark.live
def test_SHD_01_a_sampler_shutdown_does_not_stop_is_found_with_perturbation(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    """sampler_outlives_shutdown's monitor thread ticks every 100 ms and Shutdown neither stops nor joins it:
    perturbed, the proxy holds the Shutdown point while the thread runs, and its next tick's call is
    judged in every run."""
    result = validate("sampler_outlives_shutdown", apps("basic"), runtimes, perturb=SEED, repeat=3)
    text = render_text(result)
    sites = {g.site.line for g in groups_of(result, "SHD-01") if g.site is not None}
    tick = {source_line("sampler_outlives_shutdown", "HRESULT hr = info_->EnumThreads(&e);"),
            source_line("sampler_outlives_shutdown", "if (failed(info_->GetThreadInfo(ids[i], &tid))")}
    assert sites and sites <= tick, text
    runs = {(result.runs[k].runtime, result.runs[k].seed) for g in groups_of(result, "SHD-01")
            for k in g.runs}  # fmt: skip
    assert {rt for rt, _ in runs} == set(versions(runtimes)) and len(runs) == 3 * len(runtimes), text


@pytest.mark.live
def test_attach_the_attach_only_agent_is_clean_when_attached(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    data = b"detach_after_ms=1500;poll_ms=100"
    result = validate("attach_only", apps("long"), runtimes, env={"PROFHARNESS_APP_SECONDS": "4"},
                      attach=AttachPlan(after_s=1.0, client_data=data))  # fmt: skip
    text = render_text(result)
    assert all(r.outcome == "ok" for r in result.runs) and result.findings == [], text
    assert sum("AttachProfiler answered OK with 0x00000000" in n for n in result.notes) == len(runtimes), text


@pytest.mark.live
def test_DET_01_DET_02_a_thread_left_running_across_the_detach_is_found(
    apps: Callable[[str], Path], runtimes: list[Runtime]
) -> None:
    data = b"detach_after_ms=1500;poll_ms=100"
    result = validate("attach_detach_bad", apps("long"), runtimes, env={"PROFHARNESS_APP_SECONDS": "4"},
                      attach=AttachPlan(after_s=1.0, client_data=data))  # fmt: skip
    census_call = "if (failed(info_->EnumThreads(&e)) || e == nullptr)"
    census = at_line(result, "DET-01", "attach_detach_bad", census_call)
    assert census.runtimes == versions(runtimes)
    assert groups_of(result, "DET-02") and {g.clause for g in result.findings} == {"DET-01", "DET-02"}


@pytest.mark.live
def test_REJIT_01_an_il_rewriter_that_rewrites_every_compilation_is_found_at_its_line(
    runtimes: list[Runtime],
) -> None:
    """The standard workload's methods are recompiled (tier-up on both runtimes, on-stack replacement on
    .NET 8): il_rewriter_every_jit replaces the body again in each recompilation's JITCompilationStarted
    (on 8.0.4 the OSR version of the rewritten loop ends the app with InvalidProgramException, a crash
    note beside it); il_rewriter_once rewrites each method once and is clean."""
    faulty = validate("il_rewriter_every_jit", None, runtimes, workload="standard")
    rewrite = "hr = info_->SetILFunctionBody(module, token, buf);"
    group = at_line(faulty, "REJIT-01", "il_rewriter_every_jit", rewrite)
    assert group.runtimes == versions(runtimes)
    for crash in (g for g in faulty.groups if g.clause == "VAL-CRASH"):  # 8.0.4: the OSR version's invalid IL
        assert "unhandled System.InvalidProgramException" in crash.first.message, crash.first.message
    correct = validate("il_rewriter_once", None, runtimes, workload="standard")
    text = render_text(correct)
    assert correct.findings == [] and all(r.outcome == "ok" for r in correct.runs), text
    recompiled = [r.counts.recompilations or 0 for r in correct.runs if r.counts is not None]
    assert len(recompiled) == len(runtimes) and min(recompiled) > 0, text

