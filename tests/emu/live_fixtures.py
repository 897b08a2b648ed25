"""The committed live-runtime captures: ``python -m tests.emu.live_fixtures [OUT]`` takes them again.

For each bundled runtime it samples the ``capture-sampling`` scenario (``profharness capture``), replays every
sample, and keeps one per place the scenario visits, in :data:`WANTED` order: the first sample of that place
whose replay recovers the scenario's known frames, preferring one whose live walk succeeded (so the test can
hold the replay against the live runtime's own frames). Each kept sample is made self-contained with
``emu.embed`` (the module CFI its replay used, cut to those entries), written to
``tests/data/captures/live/<version>/<place>.phcap`` with its replay as ``<place>.expected.json``.

The expected replay is a regression reference; what makes it right comes from elsewhere, and
``tests/emu/test_live_captures.py`` checks that too: the scenario's own known frames (recovered), and the
live runtime's DoStackSnapshot at the instant (the replay's managed frames equal its FunctionIDs and IPs).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from emu.embed import embed_cfi
from emu.replay import ReplayResult, replay_capture

#: the bundled runtimes, and the places kept for each: managed code, P/Invoked native code, and four
#: kinds of runtime helper (a GC on the sampled thread, stubs in anonymous memory, the JIT, a contended
#: Monitor); about 130 KiB each, most of it the manifest's module and JIT maps
RUNTIMES = ("3.1.23", "8.0.4")
WANTED = (
    "managed",
    "native:libprofharness_probe",
    "helper:gc",
    "helper:monitor",
    "helper:jit",
    "helper:dispatch",
)
DATA = Path(__file__).parents[1] / "data" / "captures" / "live"
SAMPLES = 200


def place_file(place: str) -> str:
    return place.replace(":", "-")


def _choose(results: list[tuple[Path, ReplayResult]]) -> dict[str, Path]:
    chosen: dict[str, tuple[Path, bool]] = {}
    for path, r in results:
        if r.place not in WANTED or r.recovered is not True:
            continue
        live_ok = r.live_matches is True
        have = chosen.get(r.place)
        if have is None or (live_ok and not have[1]):
            chosen[r.place] = (path, live_ok)
    return {place: chosen[place][0] for place in WANTED if place in chosen}


def regenerate(out: Path, samples: int = SAMPLES) -> None:
    for version in RUNTIMES:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "conformance", "capture", "capture-sampling", "--runtime", version,
                 "--samples", str(samples), "--out", tmp],
                check=True,
            )  # fmt: skip
            paths = sorted(Path(tmp).rglob("*.phcap"))
            results = [(p, replay_capture(p)) for p in paths]
            target = out / version
            target.mkdir(parents=True, exist_ok=True)
            for old in target.glob("*"):
                old.unlink()
            for place, path in _choose(results).items():
                name = place_file(place)
                report = embed_cfi(path, target / f"{name}.phcap")
                result = replay_capture(report.path, allow_disk=False)
                (target / f"{name}.expected.json").write_text(result.model_dump_json(indent=1) + "\n")
                print(f"{version} {place}: {path.name} -> {report.path} ({report.size_after} bytes)")


if __name__ == "__main__":
    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
