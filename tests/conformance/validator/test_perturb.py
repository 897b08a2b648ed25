"""Reproducible races (issue 21, part 2): ``validate --repeat N --perturb SEED [--compare]``.

The schedule: the proxy's (conformance/native/proxy/perturb.h, through a driver built from that header alone)
equals the Python reference (conformance/validator/perturb.py) draw for draw, and a seed's delays in a run's
trace are that schedule's. Live: the startup race fixture (a sampler thread started in Initialize before the
interface is stored) crashes in every perturbed run on both runtimes, at its own source line, and the report
says how often it showed without perturbation; correct profilers stay clean over ten perturbed runs.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli_main
from conformance.core.paths import NATIVE_DIR
from conformance.core.runtimes import Runtime
from conformance.core.trace import read_trace
from conformance.validator import api, perturb
from conformance.validator.groups import Grouper
from conformance.validator.report import render_text, runs_text, to_html
from conformance.validator.result import Group, Occurrence, RunSummary, ValidationResult
from conformance.validator.rules import UNSEEN_FAULT
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_fixture, same_source
from tests.conformance.validator.test_docs_fixtures import DOCS, compile_app

_DRIVER = r"""
#include <cstdio>
#include "perturb.h"
using namespace profharness::perturb;
int main() {
    for (int k = 0; k < static_cast<int>(Point::Count_); ++k)
        std::printf("rule %s %u %u %u %u\n", kPointNames[k], kRules[k].chance, kRules[k].min_us,
                    kRules[k].max_us, kRules[k].budget_ms);
    const unsigned long long seeds[] = {0ULL, 1ULL, 7ULL, 12345ULL, 0xFFFFFFFFFFFFFFFFULL,
                                        0x8000000000000000ULL};
    for (unsigned long long seed : seeds)
        for (int k = 0; k < static_cast<int>(Point::Count_); ++k)
            for (unsigned long long i = 0; i < 40; ++i)
                std::printf("draw %llu %d %llu %llu %u\n", seed, k, i,
                            static_cast<unsigned long long>(draw(seed, k, i)), delay_us(seed, k, i));
}
"""


def test_native_schedule_equals_the_python_reference(tmp_path: Path) -> None:
    """perturb.h's rules and draws, printed by a driver built from the header alone, are the reference's."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is needed to build the schedule's driver")
    (tmp_path / "driver.cpp").write_text(_DRIVER)
    exe = tmp_path / "driver"
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{NATIVE_DIR / 'proxy'}", str(tmp_path / "driver.cpp"), "-o",
                    str(exe)], check=True)  # fmt: skip
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = [line.split() for line in lines]
    rules = {f[1]: perturb.PointRule(*map(int, f[2:])) for f in fields if f[0] == "rule"}
    assert rules == perturb.RULES and list(rules) == list(perturb.POINTS)
    draws = [line.split()[1:] for line in lines if line.startswith("draw ")]
    assert len(draws) == 6 * len(perturb.POINTS) * 40
    delayed = 0
    for seed, kind, index, value, delay in ((int(x) for x in d) for d in draws):
        assert perturb.draw(seed, kind, index) == value
        assert perturb.delay_us(seed, kind, index) == delay
        delayed += delay > 0
    assert 0 < delayed < len(draws)  # the schedule delays some points, not all
    # every call made during Initialize is delayed (20 to 50 ms), whatever the seed
    assert all(20_000 <= perturb.delay_us(s, 0, i) <= 50_000 for s in range(50) for i in range(5))


def test_splitmix64_first_outputs() -> None:
    """The mixer is splitmix64's: from state 0 the generator's first outputs are these (its published
    reference values), i.e. mix(0), mix(0x9E37...) ..."""
    state, outputs = 0, []
    for _ in range(3):
        outputs.append(perturb._mix(state))
        state = (state + 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
    assert outputs == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_run_seeds() -> None:
    assert api.run_seeds(3, None, False) == [None, None, None]
    assert api.run_seeds(3, 7, False) == [7, 8, 9]
    assert api.run_seeds(2, 7, True) == [None, None, 7, 8]
    assert api.run_seeds(1, 2**64 - 1, False) == [2**64 - 1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--repeat", "0"], "--repeat 0: must be a whole number of runs, at least 1"),
        (["--perturb", "-1"], "--perturb -1: a seed is a whole number from 0"),
        (["--perturb", str(2**64 - 1), "--repeat", "2"], "run i uses seed"),
        (["--compare"], "--compare: compares perturbed runs with unperturbed ones; give --perturb SEED too"),
    ],
)
def test_cli_bad_repeat_or_seed_is_one_line_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["validate", str(build_fixture("correct")), "--clsid", FIXTURE_CLSID, *extra]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_cli_help_says_run_i_uses_seed_plus_i(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["validate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "run i (from 0) uses seed SEED+i" in text and "--compare" in text


def _group(clause: str, runs: list[int]) -> Group:
    seen = Occurrence(runtime="8.0.4", scenario="s", message="m")
    return Group(clause=clause, title="t", first=seen, last=seen, occurrences=[seen], count=len(runs),
                 runs=runs, runtimes=["8.0.4"])  # fmt: skip


def _run(runtime: str, seed: int | None) -> RunSummary:
    return RunSummary(runtime=runtime, scenario="s", outcome="ok", seconds=0.1, trace="t", records=1,
                      seed=seed, delays={"initialize-call": 2} if seed is not None else {})  # fmt: skip


def test_groups_count_the_runs_they_appeared_in_perturbed_and_not() -> None:
    """A group's runs are the union of the runs it appeared in; the report counts them per runtime, the
    perturbed ones (with the seeds it appeared under) apart from the unperturbed ones."""
    runs = [_run("8.0.4", None), _run("8.0.4", None), _run("8.0.4", 5), _run("8.0.4", 6), _run("8.0.4", 7),
            _run("3.1.23", 5)]  # fmt: skip
    grouper = Grouper()
    for index in (1, 2, 4):
        one = Grouper()
        one._groups[("VAL-CRASH", "", False)] = _group("VAL-CRASH", [])
        one.in_run(index, runs[index].seed)
        grouper.merge(one)
    (group,) = grouper.groups()
    assert group.runs == [1, 2, 4]
    assert group.first.seed is None and [o.seed for o in group.occurrences] == [None, 5, 7]  # each its run's
    result = ValidationResult(profiler="p", clsid="c", runs=runs, groups=[group])
    assert runs_text(result, group) == (
        "in 2/3 perturbed runs (seeds 5,7) and 1/2 unperturbed runs on 8.0.4; in 0/1 perturbed runs on 3.1.23"
    )
    text = render_text(result)
    assert "    in 2/3 perturbed runs (seeds 5,7)" in text and "seed (delays)" in text
    assert "8.0.4  s seed 7  thread -" in render_text(result, verbose=True)
    assert "in 2/3 perturbed runs (seeds 5,7)" in to_html(result)
    plain = ValidationResult(profiler="p", clsid="c", runs=runs[:2], groups=[_group("VAL-CRASH", [0])])
    assert runs_text(plain, plain.groups[0]) == "in 1/2 runs on 8.0.4"
    assert "seed (delays)" not in render_text(plain)
    once = ValidationResult(profiler="p", clsid="c", runs=runs[:1], groups=[_group("VAL-CRASH", [0])])
    assert "in 1/1" not in render_text(once)  # one unperturbed run: nothing to count


def test_seeds_text() -> None:
    assert perturb.seeds_text([9, 3, 4, 5, 11, 12]) == "3-5,9,11-12"
    assert perturb.seeds_text([]) == ""


# --------------------------------------------------------------------------------------------------------
# live

RACE_LINE = next(
    n for n, line in enumerate((PROFILERS / "startup_race.cpp").read_text().splitlines(), 1)
    if "info->EnumThreads" in line
)  # fmt: skip


def _delays_mark(run: RunSummary) -> dict[str, Any]:
    marks = read_trace(Path(run.trace)).marks(perturb.DELAYS_MARK)
    assert len(marks) == 1, run.trace
    return marks[0].model_extra or {}


@pytest.mark.live
def test_startup_race_found_in_every_perturbed_run_on_both_runtimes(runtimes: list[Runtime]) -> None:
    """``--repeat 10 --perturb 2100 --compare``: the sampler thread started in Initialize calls through the
    interface pointer before Initialize stored it, a crash at its own line (VAL-CRASH, the thread's frame) in
    10 of 10 perturbed runs on each runtime; how often without perturbation is printed, never asserted beyond
    at most all of them (it depends on the machine's scheduling)."""
    started = time.monotonic()
    result = api.validate(build_fixture("startup_race"), FIXTURE_CLSID, repeat=10, perturb=2100, compare=True,
                          hang_s=3.0)  # fmt: skip
    text = render_text(result)
    print(text, f"\n({time.monotonic() - started:.1f} s)")
    (group,) = result.findings
    assert group.clause == "VAL-CRASH" and group.site is not None, text
    assert same_source(group.site.file, PROFILERS / "startup_race.cpp") and group.site.line == RACE_LINE, text
    assert "SIGSEGV outside any callback" in group.first.message
    for rt in runtimes:
        perturbed = [i for i, r in enumerate(result.runs) if r.runtime == rt.version and r.seed is not None]
        plain = [i for i, r in enumerate(result.runs) if r.runtime == rt.version and r.seed is None]
        assert [result.runs[i].seed for i in perturbed] == list(range(2100, 2110)) and len(plain) == 10
        assert set(perturbed) <= set(group.runs), text
        assert "in 10/10 perturbed runs (seeds 2100-2109) and " in runs_text(result, group)
        for i in perturbed:  # each crashed run's trace names its seed and the delays applied before the crash
            assert result.runs[i].outcome == "crashed", text
            assert set(result.runs[i].delays) == set(perturb.POINTS), result.runs[i]
            budget_us = min(sum(r.budget_ms for r in perturb.RULES.values()) * 1000, 3_000_000 // 2)
            assert read_trace(Path(result.runs[i].trace)).mark(perturb.START_MARK).model_extra == {
                "seed": result.runs[i].seed, "maxDelayUs": 50_000, "budgetUs": budget_us}  # fmt: skip
        print(f"{rt.version}: {sum(i in group.runs for i in plain)}/10 unperturbed runs crashed")


@pytest.mark.live
def test_correct_sampler_clean_over_ten_perturbed_runs(runtimes: list[Runtime]) -> None:
    """The document-written sampler (docs/sampler_signal.cpp: a sampler thread started in Initialize after
    the interface is stored, joined first in Shutdown) keeps every rule in 10 perturbed runs per runtime."""
    from tests.conformance.validator.fixtures import build_profiler

    app = compile_app("basic")
    so = build_profiler(DOCS / "sampler_signal.cpp", "validator-docs", [DOCS])
    result = api.validate(so, FIXTURE_CLSID, app=app, repeat=10, perturb=31)
    text = render_text(result)
    assert len(result.runs) == 10 * len(runtimes), text
    # .NET 8.0.4 ends about 1 run in 400 here with a SIGSEGV no handler saw: the sampler's SIGPROF came while
    # the runtime handled the app's NullReferenceException on its alternate signal stack (the runtime's
    # doing, shown on its own by the next test)
    unseen = [g for g in result.groups if g.clause == "VAL-CRASH" and g.note
              and all(UNSEEN_FAULT in o.message for o in g.occurrences)]  # fmt: skip
    killed = {i for g in unseen for i in g.runs}
    assert all(result.runs[i].runtime == "8.0.4" and result.runs[i].signal == "SIGSEGV" for i in killed), text
    assert all(r.outcome == "ok" and sum(r.delays.values()) > 0
               for i, r in enumerate(result.runs) if i not in killed), text  # fmt: skip
    assert [g for g in result.groups if g not in unseen] == [] and result.notes == [], text


def signal_frame_bytes() -> int:
    """The kernel's signal frame on this CPU: AT_MINSIGSTKSZ of the auxiliary vector (its size grows with the
    CPU's extended register state: 1,776 bytes on an AVX2 CPU, about 3.4 KiB with AVX-512); 0 when the kernel
    does not say."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    libc.getauxval.argtypes = [ctypes.c_ulong]
    return int(libc.getauxval(51))  # AT_MINSIGSTKSZ (linux/auxvec.h)


#: the signal frames 8.0.4's nested SIGPROF was seen to fit beside its fault handler (AMD EPYC, AVX2: 1,776
#: bytes, 3 of 3 runs to the end) and not to fit (an AVX-512 CPU, about 3.4 KiB: every run ended); between
#: them either is the runtime's behaviour
FITS_UP_TO, ENDS_FROM = 2048, 3072


@pytest.mark.live
def test_VAL_CRASH_a_signal_during_a_hardware_exception_kills_8_0_not_the_profiler(
    runtimes: list[Runtime],
) -> None:
    """The runtime behaviour behind the note: the app takes NullReferenceExceptions on its main thread while
    another thread sends that thread SIGPROF; the document-written sampler handles SIGPROF. On 8.0.4, on a CPU
    whose signal frame is large (AVX-512), the kernel ends the process with SIGSEGV (a second signal frame
    that does not fit on the alternate stack the runtime handles the fault on; no handler runs) and VAL-CRASH
    says so in a note, blaming nothing; where the frame is small (AVX2) it fits and the run goes to its end,
    clean. 3.1.23 runs to its end either way. Which one this machine is comes from the kernel's frame size,
    never from the run."""
    from tests.conformance.validator.fixtures import build_profiler

    app = compile_app("nrestorm")
    so = build_profiler(DOCS / "sampler_signal.cpp", "validator-docs", [DOCS])
    result = api.validate(so, FIXTURE_CLSID, app=app, timeout_s=60.0)
    text = render_text(result)
    frame = signal_frame_bytes()
    text += f"\nthis CPU's signal frame (AT_MINSIGSTKSZ): {frame} bytes"
    outcomes = {r.runtime: (r.outcome, r.signal) for r in result.runs}
    ended = ("crashed", "SIGSEGV")
    if frame >= ENDS_FROM:
        expected: set[tuple[str, str | None]] = {ended}
    elif 0 < frame <= FITS_UP_TO:
        expected = {("ok", None)}
    else:
        expected = {ended, ("ok", None)}
    assert outcomes["3.1.23"] == ("ok", None) and outcomes["8.0.4"] in expected, text
    if outcomes["8.0.4"] == ended:
        noted = [(g.clause, g.note, g.runtimes) for g in result.groups]
        assert noted == [("VAL-CRASH", True, ["8.0.4"])], text
        assert UNSEEN_FAULT in result.groups[0].first.message, text
    else:
        assert result.groups == [], text


@pytest.mark.live
@pytest.mark.long
def test_correct_fixture_clean_over_ten_perturbed_runs(runtimes: list[Runtime]) -> None:
    result = api.validate(build_fixture("correct"), FIXTURE_CLSID, repeat=10, perturb=500, hang_s=3.0)
    text = render_text(result)
    assert len(result.runs) == 10 * len(runtimes) and all(r.outcome == "ok" for r in result.runs), text
    assert result.groups == [] and result.notes == [], text


@pytest.mark.live
def test_a_seed_replays_its_schedule(runtimes: list[Runtime]) -> None:
    """``--perturb SEED`` twice: the delays the proxy applied at the points one thread meets in a fixed
    order before any other (the calls made during Initialize, Initialize's return) are the same, and are the
    reference schedule's; every delay within its bounds. Another seed gives another schedule."""
    so = build_fixture("correct")
    rt = runtimes[-1].version
    hang_s = 0.4  # every delay at most 100 ms (capped at 50), all together at most 200 ms

    def startup(seed: int) -> tuple[list[list[Any]], dict[str, Any]]:
        result = api.validate(so, FIXTURE_CLSID, runtime=rt, perturb=seed, hang_s=hang_s)
        (run,) = result.runs
        assert result.groups == [] and run.outcome == "ok" and run.seed == seed, render_text(result)
        mark = _delays_mark(run)
        assert mark["seed"] == seed
        first = mark["first"]
        assert all(0 < us <= 50_000 for _kind, _index, us in first)
        assert sum(mark["delayMs"].values()) <= hang_s * 1000 / 2
        # before any other point: the same whatever the threads after them do with the run's budget
        mine = [entry for entry in first if entry[0] in ("initialize-call", "initialize-return")]
        points = {k: mark["points"][k] for k in ("initialize-call", "initialize-return", "shutdown")}
        return mine, points

    one, points_one = startup(77)
    two, points_two = startup(77)
    assert one == two and points_one == points_two
    assert points_one["initialize-call"] >= 2  # QueryInterface and SetEventMask2 during Initialize
    kinds = list(perturb.POINTS)
    for kind, index, us in one:
        assert us == min(perturb.delay_us(77, kinds.index(kind), index), 50_000)
    calls = [entry for entry in one if entry[0] == "initialize-call"]
    assert [index for _k, index, _us in calls] == list(range(len(calls)))  # every call delayed, in order
    other, _ = startup(78)
    assert other != one
    plain = api.validate(so, FIXTURE_CLSID, runtime=rt, hang_s=hang_s)  # unperturbed: no mark, no delay
    (run,) = plain.runs
    assert run.seed is None and run.delays == {}
    assert read_trace(Path(run.trace)).marks(perturb.START_MARK) == []
    assert read_trace(Path(run.trace)).marks(perturb.DELAYS_MARK) == []
