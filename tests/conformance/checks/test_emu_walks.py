"""The emu layer's judges on the live captures kept in tests/data (no runtime): the live walk of each
instant against the emulator's replay of the same capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.checks.emu_walks import Sample, dss16_emu
from conformance.suite.verdicts import Status
from emu.capture import read_capture
from tests.emu.synth import rewrite

LIVE = Path(__file__).resolve().parents[2] / "data" / "captures" / "live"
RUNTIMES = ("3.1.23", "8.0.4")


@pytest.mark.parametrize("version", RUNTIMES)
def test_DSS_16_emu_live_walks_are_the_replays_frames_leaf_first_main_last(version: str) -> None:
    samples = [Sample.of(read_capture(p)) for p in sorted((LIVE / version).glob("*.phcap"))]
    judged = [s for s in samples if s.live is not None]
    assert judged and all(s.live == tuple(f.function_id for f in s.replay.frames if f.function_id)
                          for s in judged)  # fmt: skip
    verdict = dss16_emu(samples)
    assert verdict.status is Status.CONFORMS, verdict.disagreements
    assert verdict.observed.startswith(f"{len(judged)} sample(s) in ")


@pytest.mark.parametrize(
    ("version", "lost"), [("3.1.23", "leaf"), ("3.1.23", "main"), ("8.0.4", "leaf")]
)  # fmt: skip
def test_DSS_16_emu_a_live_walk_that_loses_the_leaf_or_main_differs_from_the_replay(
    tmp_path: Path, version: str, lost: str
) -> None:
    """The live walk loses its first managed frame (Dispatch, a callee the scenario declares above its own
    frames) or its outermost (ThreadStart on 3.1; on 8.0 the outermost is Run, one of the scenario's): it
    still gives the scenario's own frames (Work, Deep x70, Run) leaf first, so only the comparison with the
    replay, which unwinds from the leaf to the thread's first frame, sees it."""
    cap = read_capture(LIVE / version / "managed.phcap")
    live = cap.manifest.live
    assert live is not None and live.hresult == 0
    managed = [i for i, f in enumerate(live.frames) if f.function_id]
    drop = managed[0] if lost == "leaf" else managed[-1]
    cut = live.model_copy(update={"frames": live.frames[:drop] + live.frames[drop + 1 :]})
    sample = Sample.of(read_capture(rewrite(cap, tmp_path / "cut.phcap", live=cut)))
    assert sample.replay.live_recovered is True  # the known frames alone do not tell
    verdict = dss16_emu([sample, Sample.of(cap)])
    assert verdict.status is Status.DIVERGES
    assert verdict.disagreements == (
        "managed: the live walk's managed frames are not the replay's, leaf first and main last",
    )
    assert verdict.observed.startswith("1 of 2 sample(s) (DSS-16): managed: ")
