"""The signal-safety preload's overhead (issue 21): the same run with and without
``libprofharness_preload.so`` in LD_PRELOAD, alternating, in one run; prints the median wall and CPU (user +
system) time of each and their ratio. Two profilers, loaded directly (no proxy: the preload's cost alone):
the do-nothing fixture (``noop``: the interposed malloc family, pthread locks and dl* on the runtime's own
calls, one thread-local test each) and the correct SIGPROF sampler (``sampler_ring``: 200 signals a second
into a wrapped handler). ``--workload heapchurn`` (allocation-heavy) or ``basic`` (validate-basic). Reports,
does not judge.

    python bench/preload.py [--runtime 8.0] [--rounds 7] [--workload basic|heapchurn|long]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy import _run  # noqa: E402
from conformance.core import runner, runtimes, scenarios  # noqa: E402
from conformance.validator import api  # noqa: E402
from conformance.validator.build import build_preload  # noqa: E402
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture  # noqa: E402
from tests.conformance.validator.test_proxy_records import APPS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runtime", default="8.0")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workload", choices=("basic", "heapchurn", "long"), default="basic")
    args = parser.parse_args()
    rt = runtimes.select(args.runtime)[0]
    preload = build_preload()
    if args.workload == "basic":
        scenario = api.validator_scenarios()[0]
    else:
        folder = APPS / args.workload
        scenario = scenarios.Scenario(name=args.workload, folder=folder, sources=[folder / "app.cs"],
                                      plan={"version": 1}, description=args.workload)  # fmt: skip
    dll = scenarios.compile_scenario(scenario, runner.reference_runtime())
    with tempfile.TemporaryDirectory() as tmp:
        app = scenarios.prepare_run_dir(dll, rt, Path(tmp))
        skip = ("CORECLR_", "DOTNET_", "LD_PRELOAD")
        base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        base.update(rt.env())
        base.update({"CORECLR_ENABLE_PROFILING": "1", "CORECLR_PROFILER": FIXTURE_CLSID,
                     "PROFHARNESS_APP_SECONDS": "2"})  # fmt: skip
        arms: dict[str, dict[str, str]] = {}
        for name in ("noop", "sampler_ring"):
            so = build_fixture(name)
            plain = {**base, "CORECLR_PROFILER_PATH": str(so)}
            arms[name] = plain
            arms[f"{name} + preload"] = {**plain, "LD_PRELOAD": str(preload),
                                         "PROFHARNESS_PROXY_TARGET": str(so)}  # fmt: skip
        _run(rt.host, app, base)  # warm the page cache
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in arms}
        for _ in range(args.rounds):
            for name, env in arms.items():
                times[name].append(_run(rt.host, app, env))
    print(f"runtime {rt.version}, {args.workload}, {args.rounds} rounds (medians):")
    for name in ("noop", "sampler_ring"):
        for what, k in (("wall", 0), ("CPU", 1)):
            plain = statistics.median(t[k] for t in times[name])
            pre = statistics.median(t[k] for t in times[f"{name} + preload"])
            print(f"  {name:12} {what:4}: without {plain * 1000:6.0f} ms, with the preload "
                  f"{pre * 1000:6.0f} ms (ratio {pre / plain:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
