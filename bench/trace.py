"""The trace's size and speed (issue 23 part 8): bytes per record, and records per second written and
judged, JSON Lines (before) against the binary trace (after, PROFHARNESS_TRACE_FORMAT=binary), in one run.

1. A real recording: the recording proxy with the document-written ``object_tracker`` behind it on
   tests/conformance/validator/apps/heapchurn (thousands of Info calls, allocations, GCs), made once per
   format (``--rounds`` times each, alternating): the file's bytes per record, the process's wall and CPU.
2. Written: the JSON recording's records replayed ``--repeat`` times through the common trace writer
   (bench/trace_replay.cpp compiled against conformance/native/common), in bursts of 20,000 each flushed
   before the next, each record built before its burst and moved into the writer as the proxy does: JSON
   Lines one write per record (the writer before issue 23), JSON Lines buffered (per-thread buffers and a
   writer thread) and binary buffered: records per second on the calling thread (what the profiled process's
   threads pay) and until every record is in the file (the writer's throughput).
3. Judged: the binary recording, and the same records as JSON Lines (``profharness trace dump --jsonl``),
   judged by every validator rule (judge_run) in child processes: records per CPU second and the findings
   of each, which must be the same.

Target: a typical record <= 48 bytes in the binary trace (the median record of the real recording).

    python bench/trace.py [--runtime 8.0] [--rounds 3] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_BYTES = 48
PROXY_CLSID = "{00000000-0000-0000-0000-000000000001}"


def child(path: Path) -> None:
    """Every validator rule over ``path``: CPU seconds, records, the findings (clause and message)."""
    from conformance.core.findings import Finding
    from conformance.core.runner import RunOutcome, RunResult
    from conformance.validator.rules import judge_run

    found: list[Finding] = []
    run = RunResult(scenario="bench", runtime="bench", runtime_source="bench", outcome=RunOutcome.OK,
                    seconds=0.0, run_dir=path.parent, trace_path=path)  # fmt: skip
    cpu = time.process_time()
    records = judge_run(run, found.append).records
    cpu = time.process_time() - cpu
    findings = sorted(json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in found)
    print(json.dumps({"cpu": cpu, "records": records, "findings": findings}))


def judge(path: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(path)]
    done = subprocess.run(command, stdout=subprocess.PIPE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the judge over {path} failed (exit status {done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def record_sizes(path: Path) -> list[int]:
    """The bytes each record takes in the file (binary: its frame and the definitions frames before it)."""
    from conformance.core.frames import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, read_frames

    data = path.read_bytes()
    if not data.startswith(b"PHFRAMES"):
        return [len(line) for line in data.splitlines(keepends=True)]
    sizes: list[int] = []
    pending = FILE_HEADER_SIZE
    for frame in read_frames(path).frames:
        pending += FRAME_HEADER_SIZE + len(frame.payload)
        if frame.type == 5:
            sizes.append(pending)
            pending = 0
    return sizes


def build_replay(folder: Path) -> Path:
    from conformance.core.paths import NATIVE_DIR

    exe = folder / "trace_replay"
    common = NATIVE_DIR / "common"
    subprocess.run(
        ["g++", "-std=c++17", "-O2", "-pthread", f"-I{NATIVE_DIR / 'include'}",
         str(ROOT / "bench/trace_replay.cpp"), str(common / "trace.cpp"), str(common / "json.cpp"),
         str(common / "frames.cpp"), "-o", str(exe)],
        check=True, timeout=600,
    )  # fmt: skip
    return exe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runtime", default="8.0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0

    import resource

    from bench._common import load_averages
    from conformance.core import runner, runtimes, scenarios
    from conformance.validator import launch
    from conformance.validator.build import build_proxy
    from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_profiler
    from tests.conformance.validator.test_proxy_records import APPS, DOCS

    rt = runtimes.select(args.runtime)[0]
    profiler = build_profiler(DOCS / "object_tracker.cpp", "validator-docs", [DOCS])
    proxy = build_proxy()
    folder_app = APPS / "heapchurn"
    scenario = scenarios.Scenario(name="heapchurn", folder=folder_app, sources=[folder_app / "app.cs"],
                                  plan={"version": 1}, description="heapchurn")  # fmt: skip
    dll = scenarios.compile_scenario(scenario, runner.reference_runtime())
    load = load_averages()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        app = scenarios.prepare_run_dir(dll, rt, folder)
        ours = ("CORECLR_", "DOTNET_", "PROFHARNESS_")
        base = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        base.update(rt.env())
        base.update({"CORECLR_ENABLE_PROFILING": "1", "CORECLR_PROFILER": PROXY_CLSID,
                     "CORECLR_PROFILER_PATH": str(proxy)})  # fmt: skip
        base.update(launch.proxy_environment(profiler, FIXTURE_CLSID))
        paths = {"jsonl": folder / "trace.jsonl", "binary": folder / "trace.bin"}
        runs: dict[str, list[tuple[float, float]]] = {f: [] for f in paths}
        for _ in range(args.rounds):
            for fmt, path in paths.items():
                env = {**base, "PROFHARNESS_TRACE": str(path), "PROFHARNESS_TRACE_FORMAT": fmt}
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                subprocess.run([str(rt.host), str(app)], env=env, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=300)  # fmt: skip
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                runs[fmt].append((wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
        print(f"runtime {rt.version}, object_tracker on heapchurn behind the proxy, {args.rounds} rounds "
              f"(medians); load {load}")  # fmt: skip
        sizes = {fmt: record_sizes(path) for fmt, path in paths.items()}
        print("1. the recording (the last round's file):")
        for fmt, path in paths.items():
            s = sizes[fmt]
            wall = statistics.median(r[0] for r in runs[fmt])
            cpu = statistics.median(r[1] for r in runs[fmt])
            size = path.stat().st_size
            print(f"  {fmt:6s}: {len(s)} records, {size} bytes: {size / len(s):.1f} bytes/record (median "
                  f"{statistics.median(s):.0f}, p90 {sorted(s)[len(s) * 9 // 10]}); process wall "
                  f"{wall * 1000:.0f} ms, CPU {cpu * 1000:.0f} ms")  # fmt: skip
        ratio = paths["binary"].stat().st_size / paths["jsonl"].stat().st_size
        print(f"  binary / jsonl bytes: {ratio:.2f}")

        print(f"2. written: the JSON recording's records, {args.repeat} times, through the trace writer:")
        exe = build_replay(folder)
        out = folder / "replay.out"
        arms = {"jsonl, one write per record (before)": ("jsonl", "sync"),
                "jsonl, buffered": ("jsonl", "buffered"),
                "binary, buffered (after)": ("binary", "buffered"),
                "binary, one write per record": ("binary", "sync")}  # fmt: skip
        written: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for _ in range(args.rounds):
            for arm, (fmt, mode) in arms.items():
                env = {**{k: v for k, v in os.environ.items() if not k.startswith("PROFHARNESS_")},
                       "PROFHARNESS_TRACE_FORMAT": fmt}  # fmt: skip
                command = [str(exe), str(paths["jsonl"]), str(out), mode, str(args.repeat)]
                done = subprocess.run(command, env=env, stdout=subprocess.PIPE, check=True, timeout=600)
                written[arm].append(json.loads(done.stdout))
        for arm, results in written.items():
            n = results[0]["records"]
            calling = statistics.median(r["calling"] for r in results)
            total = statistics.median(r["total"] for r in results)
            print(f"  {arm:38s}: {n / calling / 1e6:6.2f} M records/s on the calling thread, "
                  f"{n / total / 1e6:5.2f} M/s into the file, {results[0]['bytes'] / n:.1f} bytes/record")

        print("3. judged (every validator rule, child processes, CPU time):")
        as_jsonl = folder / "binary-as.jsonl"
        with as_jsonl.open("w") as fh:
            command = [sys.executable, "-m", "conformance", "trace", "dump", "--jsonl", str(paths["binary"])]
            subprocess.run(command, stdout=fh, check=True, cwd=ROOT)
        judged: dict[str, list[dict[str, Any]]] = {"jsonl": [], "binary": []}
        for _ in range(args.rounds):
            judged["jsonl"].append(judge(as_jsonl))
            judged["binary"].append(judge(paths["binary"]))
        for fmt, results in judged.items():
            cpu = statistics.median(r["cpu"] for r in results)
            n = results[0]["records"]
            print(f"  {fmt:6s}: {n} records, {n / cpu / 1e3:.0f}k records per CPU second, "
                  f"{len(results[0]['findings'])} findings")
        same = judged["jsonl"][0]["findings"] == judged["binary"][0]["findings"]
        verdict = "identical" if same else "DIFFERENT"
        print(f"  findings of the binary trace and of its JSON Lines dump: {verdict}")
    typical = statistics.median(sizes["binary"])
    ok = typical <= TARGET_BYTES and same
    print(f"{'PASS' if ok else 'FAIL'} (target: median binary record <= {TARGET_BYTES} bytes, same findings)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
