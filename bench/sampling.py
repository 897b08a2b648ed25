"""Benchmark: what sampling at 100 Hz costs a CPU-bound thread (issue 8): sampled vs unsampled, in one run.

Run from the repository root:  python bench/sampling.py  [--runtime all|3.1|8.0] [--rounds N] [--chunks N]

The scenario ``capture-cpu`` does a fixed amount of managed work (``--chunks`` calls of a xorshift loop of
1,000,000 steps, below 32 frames) on one thread and times it itself: wall (Stopwatch), the thread's CPU
time and the process's (clock_gettime), reported in its ``cpu.work`` mark. The same compiled app runs
under the probe with two plans, alternating (the order flips every round), ``--rounds`` times each:

* sampled: the scenario's own plan, whose ``capture_sample`` entry has a profiler thread send SIGPROF to
  the work thread every 10 ms (intervalUs 10000, on fixed deadlines; the output gives the rate measured)
  for more samples than the work lasts (counted from a first, unsampled run), jitMap false;
* unsampled: the same plan without its ``capture_sample`` entry (the thread is registered all the same).

Each sample's record (a binary frame of the capture sidecar, read by
``conformance.adapters.capture_records``) holds the handler's timestamps (``out.timing``): ``copyNs``, the
copy of registers, stack and code into the preallocated buffers, and ``walkNs``, the DoStackSnapshot call
seeded from the ucontext. The phase cell the scenario writes (1 during the measured work) tells which
samples fell in the work; their p50/p99 are printed with their count.

Overheads are sampled median / unsampled median - 1, scaled from the rate measured to 100 Hz. The target
(issue 23: at most 2% at 100 Hz) is on the process's CPU time: what the sampled thread pays (signal
delivery, the handler's copy and walk, the caches it disturbs) and what the probe's profiler thread spends
turning each sample into a record (a fixed binary head, the walk's frames and the sample's raw bytes as one
frame of the frames v1 sidecar; the code around candidate return addresses, read once per code page and
again when the JIT put code into it since). The
work thread's overhead is printed beside it, and the profiler thread's CPU time per sample (the probe's
``capture_done`` out.profilerCpuNs over the samples taken; the median ``timing.recordCpuNs``: building one
record, before its write; and out.writeCpuNs per sample: writing the frames).
Wall time is printed too (noisy on a shared machine).
Exit status 0 on PASS on every runtime, 1 on FAIL; a run that goes wrong is one line naming its trace.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import BenchError, bench_runtimes, checked_trace, parse_runtime_counts, percentile
from clr_model.hresults import HResult
from conformance.adapters.capture import SAMPLE_CALL
from conformance.adapters.capture_records import sample_records
from conformance.cli.capture import sampling_plan
from conformance.core import probe, runner, scenarios
from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.trace import Trace

SCENARIO = "capture-cpu"
TARGET_PCT = 2.0
#: The rate the target is for (the plan's intervalUs 10000).
RATE_HZ = 100.0
#: The scenario's mark with its own measurement of the work, and the environment variable it reads the
#: number of chunks from (conformance/scenarios/capture-cpu/app.cs).
WORK_MARK = "cpu.work"
CHUNKS_ENV = "PROFHARNESS_CPU_CHUNKS"
#: The phase cell's value during the measured work (app.cs).
PHASE_WORK = 1
DONE_CALL = "capture_done"
#: Samples asked for: the work's unsampled duration at the plan's rate, times this, plus SAMPLE_SLACK (on a
#: loaded machine a later run's work can take twice the first one's wall time: the sampling must outlast it).
SAMPLE_MARGIN = 3.0
SAMPLE_SLACK = 40


@dataclass(frozen=True)
class Work:
    """The scenario's own measurement of one run's fixed work (the ``cpu.work`` mark)."""

    chunks: int
    depth: int
    wall_ns: int
    thread_cpu_ns: int
    process_cpu_ns: int
    checksum: int


@dataclass(frozen=True)
class Sample:
    """One sample taken during the measured work (a ``capture_sample`` record with phase PHASE_WORK)."""

    copy_ns: int
    walk_ns: int
    hr: int
    frames: int


@dataclass(frozen=True)
class Run:
    work: Work
    #: the samples taken during the work (none when unsampled)
    samples: tuple[Sample, ...]
    #: every sample the run took (before, during and after the work)
    taken: int
    #: the profiler thread's CPU time over the whole sampling (capture_done out.profilerCpuNs), if recorded
    profiler_cpu_ns: int | None = None
    #: the profiler thread's CPU time building each record, before its write (timing.recordCpuNs)
    record_cpu_ns: tuple[int, ...] = ()
    #: the profiler thread's CPU time writing the records' frames (capture_done out.writeCpuNs), if recorded
    write_cpu_ns: int | None = None


@dataclass
class RuntimeResult:
    """Every round on one runtime."""

    runtime: str
    interval_us: int
    samples_asked: int
    sampled: list[Run] = field(default_factory=list)
    unsampled: list[Run] = field(default_factory=list)

    @property
    def samples(self) -> list[Sample]:
        return [s for run in self.sampled for s in run.samples]

    def overhead_pct(self, metric: str) -> float:
        """sampled median / unsampled median - 1, in percent, of a Work field (``thread_cpu_ns``...)."""
        s: float = statistics.median(getattr(r.work, metric) for r in self.sampled)
        u: float = statistics.median(getattr(r.work, metric) for r in self.unsampled)
        return (s / u - 1.0) * 100.0

    @property
    def rate_hz(self) -> float:
        """Samples per second of sampled work (the rate measured, not the one asked for)."""
        return sum(len(r.samples) for r in self.sampled) / (sum(r.work.wall_ns for r in self.sampled) / 1e9)

    @property
    def cpu_rate_hz(self) -> float:
        """Samples per second of the sampled work's thread CPU time: on an idle machine the thread runs all
        the time and this is :attr:`rate_hz`; on a loaded one it waits for a core between samples, and a
        fixed amount of work takes more samples (the signals keep wall-clock time)."""
        cpu_s = sum(r.work.thread_cpu_ns for r in self.sampled) / 1e9
        return sum(len(r.samples) for r in self.sampled) / cpu_s

    @property
    def handler_share_pct(self) -> float:
        """The handlers' time (copy + walk) over the sampled work's thread CPU time, in percent."""
        spent = sum(s.copy_ns + s.walk_ns for s in self.samples)
        return spent / sum(r.work.thread_cpu_ns for r in self.sampled) * 100.0

    @property
    def cost_per_sample_ns(self) -> float:
        """The work thread's extra CPU time per sample: the medians' difference over the median number of
        samples a run took during its work."""
        s = statistics.median(r.work.thread_cpu_ns for r in self.sampled)
        u = statistics.median(r.work.thread_cpu_ns for r in self.unsampled)
        return (s - u) / statistics.median(len(r.samples) for r in self.sampled)

    @property
    def overhead_at_rate_pct(self) -> float:
        """The work thread's CPU overhead scaled from the rate measured to RATE_HZ."""
        return self.overhead_pct("thread_cpu_ns") * RATE_HZ / self.rate_hz

    @property
    def process_overhead_at_rate_pct(self) -> float:
        """The process's CPU overhead scaled from the rate measured to RATE_HZ (what is judged)."""
        return self.overhead_pct("process_cpu_ns") * RATE_HZ / self.rate_hz

    @property
    def process_overhead_at_cpu_rate_pct(self) -> float:
        """The process's CPU overhead scaled to RATE_HZ samples per second of the work thread's CPU time
        (as :attr:`process_overhead_at_rate_pct` on an idle machine; printed beside it, not judged)."""
        return self.overhead_pct("process_cpu_ns") * RATE_HZ / self.cpu_rate_hz

    @property
    def profiler_cpu_per_sample_ns(self) -> float | None:
        """The profiler thread's CPU time per sample taken (median over the sampled runs)."""
        per = [r.profiler_cpu_ns / r.taken for r in self.sampled if r.profiler_cpu_ns is not None and r.taken]
        return statistics.median(per) if per else None

    @property
    def write_cpu_per_sample_ns(self) -> float | None:
        """The profiler thread's CPU time writing one sample's frame (median over the sampled runs)."""
        per = [r.write_cpu_ns / r.taken for r in self.sampled if r.write_cpu_ns is not None and r.taken]
        return statistics.median(per) if per else None

    @property
    def passed(self) -> bool:
        return bool(self.samples) and self.process_overhead_at_rate_pct <= TARGET_PCT


def unsampled_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """``plan`` without its capture_sample entries (there must be one)."""
    out = copy.deepcopy(dict(plan))
    experiments = out.get("experiments", [])
    kept = [e for e in experiments if not (isinstance(e, dict) and e.get("run") == SAMPLE_CALL)]
    if len(kept) == len(experiments):
        raise HarnessError(f"{SCENARIO}/plan.json: no {SAMPLE_CALL} experiment to leave out")
    out["experiments"] = kept
    return out


def plan_interval_us(plan: Mapping[str, Any]) -> int:
    """The capture_sample entry's args.intervalUs (the probe's default, 1000, when absent)."""
    for e in plan.get("experiments", []):
        if isinstance(e, dict) and e.get("run") == SAMPLE_CALL:
            return int(e.get("args", {}).get("intervalUs", 1000))
    raise HarnessError(f"{SCENARIO}/plan.json: no {SAMPLE_CALL} experiment")


@contextmanager
def chunks_env(chunks: int) -> Iterator[None]:
    """$PROFHARNESS_CPU_CHUNKS for the runs started inside (the runner passes the environment on)."""
    before = os.environ.get(CHUNKS_ENV)
    os.environ[CHUNKS_ENV] = str(chunks)
    try:
        yield
    finally:
        if before is None:
            del os.environ[CHUNKS_ENV]
        else:
            os.environ[CHUNKS_ENV] = before


def _int(payload: Mapping[str, Any], key: str, where: str) -> int:
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BenchError(f"{where}: {key} is {value!r}, not a non-negative integer")
    return value


def read_work(trace: Trace) -> Work:
    where = f"{trace.path}: mark {WORK_MARK}"
    marks = trace.marks(WORK_MARK)
    if len(marks) != 1 or marks[0].payload is None:
        raise BenchError(f"{trace.path}: {len(marks)} {WORK_MARK} marks with a payload, expected 1")
    try:
        payload = json.loads(marks[0].payload)
    except json.JSONDecodeError as exc:
        raise BenchError(f"{where}: payload is not JSON: {exc.msg}") from exc
    if not isinstance(payload, dict):
        raise BenchError(f"{where}: payload is not a JSON object")
    checksum = payload.get("checksum")
    if not isinstance(checksum, int):
        raise BenchError(f"{where}: checksum is {checksum!r}, not an integer")
    return Work(
        chunks=_int(payload, "chunks", where),
        depth=_int(payload, "depth", where),
        wall_ns=_int(payload, "wallNs", where),
        thread_cpu_ns=_int(payload, "threadCpuNs", where),
        process_cpu_ns=_int(payload, "processCpuNs", where),
        checksum=checksum,
    )


def read_samples(trace: Trace, asked: int) -> tuple[tuple[Sample, ...], int]:
    """The samples taken during the work, and how many were taken in all; the sampling must have run to
    the end (``asked`` samples, none timed out) and outlasted the work (its last sample after it)."""
    return _read_samples(trace, asked)[:2]


def _read_samples(
    trace: Trace, asked: int
) -> tuple[tuple[Sample, ...], int, int | None, tuple[int, ...], int | None]:
    """:func:`read_samples`, with the profiler thread's CPU time: in all, per record, and writing."""
    calls, lost = sample_records(trace)
    if lost:
        raise BenchError(f"{trace.path}: {lost[0]}")
    done = trace.calls(DONE_CALL)
    if len(done) != 1 or done[0].out.get("timedOut") != 0 or len(calls) != asked:
        raise BenchError(
            f"{trace.path}: {len(calls)} of {asked} samples taken, {DONE_CALL}: {[d.out for d in done]}"
        )
    if calls and calls[-1].out.get("phase") == PHASE_WORK:
        raise BenchError(f"{trace.path}: the sampling ended before the work did (its last sample was in it)")
    found: list[Sample] = []
    record_cpu: list[int] = []
    for call in calls:
        timing_any = call.out.get("timing")
        if isinstance(timing_any, dict) and isinstance(timing_any.get("recordCpuNs"), int):
            record_cpu.append(timing_any["recordCpuNs"])
        if call.out.get("phase") != PHASE_WORK:
            continue
        where = f"{trace.path}: {SAMPLE_CALL} {call.label}"
        timing = call.out.get("timing")
        walk = call.out.get("walk")
        if not isinstance(timing, dict) or not isinstance(walk, dict):
            raise BenchError(f"{where}: no out.timing or out.walk (a probe without the handler's timing)")
        found.append(
            Sample(
                copy_ns=_int(timing, "copyNs", where),
                walk_ns=_int(timing, "walkNs", where),
                hr=_int(walk, "hr", where),
                frames=_int(walk, "frameCount", where),
            )
        )
    profiler, write = done[0].out.get("profilerCpuNs"), done[0].out.get("writeCpuNs")
    return (tuple(found), len(calls), profiler if isinstance(profiler, int) else None, tuple(record_cpu),
            write if isinstance(write, int) else None)  # fmt: skip


def measure(result: runner.RunResult, asked: int) -> Run:
    """One run's measurement (``asked``: the samples its plan asked for, 0 unsampled)."""
    trace = checked_trace(result)
    work = read_work(trace)
    if asked == 0:
        if sample_records(trace)[0]:
            raise BenchError(f"{trace.path}: samples in an unsampled run")
        return Run(work=work, samples=(), taken=0)
    samples, taken, profiler, record_cpu, write = _read_samples(trace, asked)
    return Run(work=work, samples=samples, taken=taken, profiler_cpu_ns=profiler, record_cpu_ns=record_cpu,
               write_cpu_ns=write)  # fmt: skip


def execute(
    scenario: scenarios.Scenario, app: Path, rt: Runtime, probe_so: Path, plan: Mapping[str, Any], asked: int
) -> Run:
    """One run in a folder of its own that is deleted after (a sampled trace is megabytes)."""
    with tempfile.TemporaryDirectory(prefix="profharness-bench-sampling-") as tmp:
        return measure(runner.execute(scenario, app, rt, probe_so, plan=plan, run_dir=Path(tmp)), asked)


def bench_runtime(rt: Runtime, rounds: int, chunks: int) -> RuntimeResult:
    """Calibrate on one unsampled run, then ``rounds`` sampled and unsampled runs, interleaved."""
    scenario = scenarios.load_scenario(SCENARIO)
    app = scenarios.compile_scenario(scenario, runner.reference_runtime())
    probe_so = probe.build_probe()
    quiet = unsampled_plan(scenario.plan)
    interval_us = plan_interval_us(scenario.plan)
    with chunks_env(chunks):
        first = execute(scenario, app, rt, probe_so, quiet, 0)  # also warms the page cache
        asked = math.ceil(first.work.wall_ns / 1000 / interval_us * SAMPLE_MARGIN) + SAMPLE_SLACK
        sampled = sampling_plan(dict(scenario.plan), asked, f"{SCENARIO}/plan.json")
        result = RuntimeResult(runtime=rt.version, interval_us=interval_us, samples_asked=asked)
        for i in range(rounds):
            order = ((sampled, asked), (quiet, 0)) if i % 2 == 0 else ((quiet, 0), (sampled, asked))
            for plan, n in order:
                run = execute(scenario, app, rt, probe_so, plan, n)
                (result.sampled if n else result.unsampled).append(run)
    checksums = {r.work.checksum for r in [first, *result.sampled, *result.unsampled]}
    if len(checksums) != 1:
        raise BenchError(f"{SCENARIO} on {rt.version}: the work's checksum differs between runs: {checksums}")
    return result


def _ms(ns: float) -> str:
    return f"{ns / 1e6:8.1f} ms"


def _us(ns: float) -> str:
    return f"{ns / 1e3:6.1f} us"


def format_result(res: RuntimeResult) -> list[str]:
    """The lines printed for one runtime."""
    lines = [f"runtime {res.runtime}: {len(res.sampled)} sampled and {len(res.unsampled)} unsampled runs"]
    for name, runs in (("unsampled", res.unsampled), ("sampled", res.sampled)):
        thread_cpu = [r.work.thread_cpu_ns for r in runs]
        lines.append(
            f"  {name:<9} median: wall {_ms(statistics.median(r.work.wall_ns for r in runs))}"
            f"  thread CPU {_ms(statistics.median(thread_cpu))} "
            f"[{min(thread_cpu) / 1e6:.1f}..{max(thread_cpu) / 1e6:.1f}]"
            f"  process CPU {_ms(statistics.median(r.work.process_cpu_ns for r in runs))}"
        )
    thread, wall, proc = (res.overhead_pct(m) for m in ("thread_cpu_ns", "wall_ns", "process_cpu_ns"))
    lines.append(
        f"  overhead (sampled/unsampled - 1): thread CPU {thread:+.2f}%, "
        f"wall {wall:+.2f}%, process CPU {proc:+.2f}% (with the probe's profiler thread)"
    )
    samples = res.samples
    if not samples:
        lines.append("  no sample fell in the work")
        return lines
    copies, walks = [s.copy_ns for s in samples], [s.walk_ns for s in samples]
    ok = sum(1 for s in samples if s.hr == HResult.S_OK)
    lines.append(
        f"  samples in the work: {len(samples)} ({res.samples_asked} asked per run, "
        f"interval {res.interval_us} us: {res.rate_hz:.1f} Hz measured); handlers "
        f"{res.handler_share_pct:.2f}% of the work's thread CPU"
    )
    lines.append(
        f"  work thread CPU per sample: {_us(res.cost_per_sample_ns)}; work thread CPU overhead at "
        f"{RATE_HZ:.0f} Hz: {res.overhead_at_rate_pct:+.2f}%"
    )
    profiler = res.profiler_cpu_per_sample_ns
    records = [n for r in res.sampled for n in r.record_cpu_ns]
    if profiler is not None and records:
        write = res.write_cpu_per_sample_ns
        lines.append(
            f"  profiler thread CPU per sample: {_us(profiler)} (building a record, before its write: "
            f"p50 {_us(percentile(records, 0.5))}"
            + (f"; writing its frame: {_us(write)}" if write is not None else "") + ")"
        )
    lines.append(
        f"  process CPU overhead at {RATE_HZ:.0f} Hz: {res.process_overhead_at_rate_pct:+.2f}% "
        f"(target <= {TARGET_PCT:.0f}%)"
    )
    lines.append(
        f"  process CPU overhead at {RATE_HZ:.0f} samples per second of the work thread's CPU: "
        f"{res.process_overhead_at_cpu_rate_pct:+.2f}% ({res.cpu_rate_hz:.1f} measured; the line above on an "
        "idle machine, lower under load; not judged)"
    )
    lines.append(
        f"  handler copy:    p50 {_us(percentile(copies, 0.5))}  p99 {_us(percentile(copies, 0.99))}"
        f"  max {_us(max(copies))}"
    )
    lines.append(
        f"  DoStackSnapshot: p50 {_us(percentile(walks, 0.5))}  p99 {_us(percentile(walks, 0.99))}"
        f"  max {_us(max(walks))}  (S_OK {ok}/{len(samples)}, "
        f"median {statistics.median(s.frames for s in samples):.0f} frames)"
    )
    lines.append(f"  {'PASS' if res.passed else 'FAIL'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_runtime_counts(__doc__, argv, {
        "rounds": (5, "sampled and unsampled runs each (default 5)"),
        "chunks": (800, "work: chunks of 1,000,000 steps (default 800)"),
    })  # fmt: skip

    def bench_one(rt: Runtime) -> bool:
        res = bench_runtime(rt, args.rounds, args.chunks)
        print("\n".join(format_result(res)), flush=True)
        return res.passed

    header = (f"{SCENARIO}: {args.chunks} chunks of 1,000,000 xorshift steps per run; sampled and unsampled "
              f"runs alternating, {args.rounds} each per runtime")  # fmt: skip
    return bench_runtimes("bench/sampling.py", args.runtime, bench_one, header)


if __name__ == "__main__":
    sys.exit(main())
