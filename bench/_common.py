"""What the bench scripts share: the children that judge a recording and report one JSON line
(bench/stream.py, bench/validate.py), the real run they start from and the plan of the recording they build
from it; the check that a probe run can be measured and the exit status of a run of runtimes
(bench/sampling.py, bench/seeding.py); the nearest-rank percentile (those two and bench/replay.py); the load
averages as the benches print them."""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from conformance.core.errors import HarnessError

if TYPE_CHECKING:
    from conformance.core.findings import Finding
    from conformance.core.runner import RunResult
    from conformance.core.runtimes import Runtime
    from conformance.core.trace import Trace
    from conformance.validator.result import RunSummary, ValidationResult


def percentile(values: Iterable[float], q: float) -> float:
    """The q-quantile of ``values`` by nearest rank on the sorted values (NaN for none)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def load_averages() -> str:
    """The machine's 1, 5 and 15 minute load averages now, as a bench prints them beside its numbers."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class BenchError(HarnessError):
    """A run that cannot be measured (one line naming the run and its trace)."""


# --- a child: one measurement, its result as one JSON line -----------------------------------------------


def status_kib(field: str) -> int:
    """A memory line of /proc/self/status (``VmRSS``: now, ``VmHWM``: the peak), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/self/status has no {field}")


def timed_child(path: Path, work: Callable[[RunResult, list[Finding]], int]) -> None:
    """Runs ``work`` over a run whose trace is ``path`` (it returns the records it went through and adds its
    findings to the list) and prints its CPU and wall seconds, the records, the findings by clause, the RSS
    before it (the interpreter and the imports) and the peak, as one JSON line."""
    from conformance.core.runner import RunOutcome, RunResult

    found: list[Finding] = []
    run = RunResult(scenario="bench", runtime="bench", runtime_source="bench", outcome=RunOutcome.OK,
                    seconds=0.0, run_dir=path.parent, trace_path=path)  # fmt: skip
    before = status_kib("VmRSS")
    cpu, wall = time.process_time(), time.perf_counter()
    records = work(run, found)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    clauses = collections.Counter(f.clause for f in found)
    print(json.dumps({"cpu": cpu, "wall": wall, "records": records, "findings": dict(sorted(clauses.items())),
                      "rss_before_kib": before, "peak_kib": status_kib("VmHWM")}))  # fmt: skip


def measure(script: str, mode: str, path: Path) -> dict[str, Any]:
    """One child of ``script`` (``--child mode path``): what it printed."""
    done = subprocess.run([sys.executable, script, "--child", mode, str(path)], stdout=subprocess.PIPE,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the {mode} child over {path} failed (exit status {done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def findings_text(found: dict[str, int]) -> str:
    return ", ".join(f"{clause} x{n}" for clause, n in found.items()) or "none"


def print_verdicts(*checks: tuple[bool, str]) -> int:
    """Prints each check as ``PASS: what`` or ``FAIL: what``; the exit status: 0 if all passed, else 1."""
    for ok, what in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {what}")
    return 0 if all(ok for ok, _what in checks) else 1


def rate_verdict(rate: float, target: int) -> tuple[bool, str]:
    """A judge's speed for :func:`print_verdicts`: ``rate`` records judged per CPU second >= ``target``."""
    return rate >= target, f"{rate:,.0f} records judged per CPU second (target >= {target:,})"


# --- the real run and the recording made from it ---------------------------------------------------------


def heapchurn_run(
    profiler: str, runtime: str, env: dict[str, str] | None = None
) -> tuple[ValidationResult, RunSummary, float]:
    """``validate`` of the document-written ``profiler`` on tests/conformance/validator/apps/heapchurn: the
    result, its one run (which must have ended normally) and the wall seconds it took."""
    from conformance.core import runner, scenarios
    from conformance.validator import api
    from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_profiler
    from tests.conformance.validator.test_proxy_records import APPS, DOCS

    so = build_profiler(DOCS / f"{profiler}.cpp", "validator-docs", [DOCS])
    folder = APPS / "heapchurn"
    scenario = scenarios.Scenario(name="heapchurn", folder=folder, sources=[folder / "app.cs"],
                                  plan={"version": 1}, description="heapchurn")  # fmt: skip
    dll = scenarios.compile_scenario(scenario, runner.reference_runtime())
    started = time.perf_counter()
    result = api.validate(so, FIXTURE_CLSID, runtime=runtime, app=dll, env=env)
    wall = time.perf_counter() - started
    (run,) = result.runs
    if run.outcome != "ok":
        raise SystemExit(f"the real run did not end normally: {run.outcome} ({run.trace})")
    return result, run, wall


class RepeatPlan(NamedTuple):
    """How a recording of about the records asked for is made from a real one: its records up to
    ``start`` (Initialize's return), then its body (``start`` + 1 up to ``end``, Shutdown's enter, not
    included) ``copies`` times and its first ``cut`` records once more, then its tail (``end`` on)."""

    start: int
    end: int
    total: int
    body: int
    copies: int
    cut: int


class _Shape(NamedTuple):
    """What a recording's plan needs of it, whatever the count: Initialize's return, Shutdown's enter, the
    records and the body lengths after which nothing is open on any thread."""

    start: int
    end: int
    total: int
    cuts: list[int]


_shapes: dict[tuple[Path, int, int], _Shape] = {}  # (file, size, mtime) -> its shape: one scan per file


def _shape(records: Iterable[dict[str, Any]], source: Path) -> _Shape:
    stat = source.stat()
    key = (source.resolve(), stat.st_size, stat.st_mtime_ns)
    if key in _shapes:
        return _shapes[key]
    start = end = -1
    depth: collections.Counter[int] = collections.Counter()  # thread -> callbacks and calls open on it
    cuts = [0]  # body lengths (in records) after which nothing is open
    total = 0
    for i, r in enumerate(records):
        total += 1
        if start < 0:
            if r.get("name") == "Initialize" and r.get("phase") == "return":
                start = i
            continue
        if end >= 0:
            continue
        if r.get("name") == "Shutdown" and r.get("phase") == "enter":
            end = i
            continue
        phase = r.get("phase")
        if phase in ("enter", "return"):
            depth[r.get("os_tid", 0)] += 1 if phase == "enter" else -1
        if not +depth:
            cuts.append(i - start)
    if start < 0 or end <= start + 1:
        raise SystemExit(f"{source}: no records between Initialize's return and Shutdown to repeat")
    _shapes[key] = _Shape(start, end, total, cuts)
    return _shapes[key]


def repeat_plan(records: Iterable[dict[str, Any]], source: Path, wanted: int) -> RepeatPlan:
    """The plan for about ``wanted`` records from ``records`` (every record of ``source``, in order, read
    only the first time a plan is asked of ``source``): the last copy of the body is cut where nothing is
    open on any thread, the place nearest the count."""
    start, end, total, cuts = _shape(records, source)
    body = end - start - 1
    room = max(0, wanted - (start + 1) - (total - end))
    copies, rest = divmod(room, body)
    cut = min(cuts, key=lambda c: (abs(c - rest), c))
    return RepeatPlan(start, end, total, body, copies, cut)


# --- probe runs ------------------------------------------------------------------------------------------


def checked_trace(result: RunResult) -> Trace:
    """The trace of a run that can be measured: it ended normally and the probe reported no error."""
    from conformance.core.runner import RunOutcome
    from conformance.core.trace import ProbeErrorRecord

    trace = result.trace
    if result.outcome is not RunOutcome.OK or trace is None:
        raise BenchError(result.describe_failure())
    errors = trace.of_kind(ProbeErrorRecord)
    if errors:
        raise BenchError(f"{trace.path}: probe_error: {errors[0].what}")
    return trace


def parse_runtime_counts(
    doc: str | None, argv: list[str] | None, counts: Mapping[str, tuple[int, str]]
) -> argparse.Namespace:
    """The command line of a bench over the bundled runtimes (its description: ``doc``'s first line):
    ``--runtime`` and, for each name of ``counts``, a count that must be positive (its default, its help)."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--runtime", default="all", help="runtime version, prefix (8.0) or 'all' (default)")
    for name, (default, what) in counts.items():
        ap.add_argument(f"--{name}", type=int, default=default, help=what)
    args = ap.parse_args(argv)
    if any(getattr(args, name) < 1 for name in counts):
        ap.error(" and ".join(f"--{name}" for name in counts) + " must be positive")
    return args


def bench_runtimes(script: str, runtime: str, bench_one: Callable[[Runtime], bool], header: str = "") -> int:
    """``bench_one`` on each runtime ``runtime`` selects (it prints its own lines and says whether the runtime
    passed), after ``header`` if any; then PASS and exit status 0 if every runtime passed, else FAIL and 1. A
    run that went wrong (HarnessError) is one line on stderr, naming ``script``, and exit status 1."""
    from conformance.core import runtimes

    try:
        selected = runtimes.select(runtime)
        if header:
            print(header)
        ok = True
        for rt in selected:
            ok = bench_one(rt) and ok
    except HarnessError as exc:
        print(f"{script}: {exc.message}", file=sys.stderr)
        return 1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
