"""The recording proxy's overhead (issue 10): a callback-heavy scenario (validate-basic: allocations, GCs,
exceptions, JIT, threads) with a do-nothing profiler (tests/conformance/validator/profilers/noop.cpp) loaded
directly and behind the proxy, alternating, in one run; prints the median wall time of each and the ratio.
Target: ratio <= 1.5.

    python bench/proxy.py [--runtime 8.0] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.core import runner, runtimes, scenarios  # noqa: E402
from conformance.validator import api, launch  # noqa: E402
from conformance.validator.build import build_proxy  # noqa: E402
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture  # noqa: E402

TARGET = 1.5


def _run(host: Path, app: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(host), str(app)], env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runtime", default="8.0")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rt = runtimes.select(args.runtime)[0]
    noop = build_fixture("noop")
    proxy = build_proxy()
    scenario = api.validator_scenarios()[0]
    dll = scenarios.compile_scenario(scenario, runner.reference_runtime())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        app = scenarios.prepare_run_dir(dll, rt, folder)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CORECLR_", "DOTNET_"))}
        base.update(rt.env())
        base["CORECLR_ENABLE_PROFILING"] = "1"
        direct = {**base, "CORECLR_PROFILER": FIXTURE_CLSID, "CORECLR_PROFILER_PATH": str(noop)}
        proxied = {
            **base,
            "CORECLR_PROFILER": "{00000000-0000-0000-0000-000000000001}",
            "CORECLR_PROFILER_PATH": str(proxy),
            "PROFHARNESS_TRACE": str(folder / "trace.jsonl"),
            **launch.proxy_environment(noop, FIXTURE_CLSID),
        }
        _run(rt.host, app, direct)  # warm the page cache
        times: dict[str, list[float]] = {"direct": [], "proxy": []}
        for _ in range(args.rounds):
            times["direct"].append(_run(rt.host, app, direct))
            times["proxy"].append(_run(rt.host, app, proxied))
    d, p = statistics.median(times["direct"]), statistics.median(times["proxy"])
    ratio = p / d
    print(
        f"runtime {rt.version}, {args.rounds} rounds: direct {d * 1000:.0f} ms, behind the proxy "
        f"{p * 1000:.0f} ms, ratio {ratio:.2f} (target <= {TARGET})"
    )
    print("PASS" if ratio <= TARGET else "FAIL")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
