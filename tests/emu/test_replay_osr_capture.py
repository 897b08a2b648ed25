"""A live 8.0.4 capture taken while the sampled thread ran the OSR version of CaptureSampling::Work (issue 24;
tests/data/captures/osr/, ``profharness capture capture-sampling --runtime 8.0 --samples 2000``, sample 1995,
made self-contained with ``emu.embed``): the replay reports Work once, as the live runtime's DoStackSnapshot
at that instant did (the independent truth), with the expected replay as a regression reference.

In this capture the code page holding the OSR method was read by the probe before the JIT wrote the method
into it, so the sample's bytes there are zeros: only the JIT map's ``tier="osr"`` label says the range is an
OSR version."""

from __future__ import annotations

import json
from pathlib import Path

from emu.capture import JitMap, read_capture
from emu.errors import MemoryFault
from emu.memory import CaptureMemory
from emu.replay import replay, replay_capture
from emu.unwind import OSR_TIER, Trust, is_osr_entry
from tests.emu.synth import rewrite

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "captures" / "osr" / "8.0.4-managed-osr.phcap"
WORK = "ProfHarness.Scenarios.CaptureSampling::Work"


def _work_ranges(jit: JitMap) -> tuple[int, list[tuple[int, int, str]]]:
    method = next(m for m in jit.methods if m.name == WORK)
    return method.function_id, [(r.start, r.end, r.tier) for r in method.ranges]


def test_osr_capture_replays_to_its_expected_replay() -> None:
    result = replay_capture(CAPTURE, allow_disk=False)
    expected = json.loads(CAPTURE.with_suffix(".expected.json").read_text())
    assert json.loads(result.model_dump_json()) == expected


def test_osr_capture_reports_work_once_as_the_live_walk_does_DSS_03() -> None:
    cap = read_capture(CAPTURE)
    fid, ranges = _work_ranges(cap.manifest.jit)
    osr = [(s, e) for s, e, tier in ranges if tier == OSR_TIER]
    assert len(osr) == 1 and len(ranges) == 2
    result = replay_capture(CAPTURE, allow_disk=False)
    works = [f for f in result.frames if f.function_id == fid]
    assert len(works) == 1
    work = works[0]
    assert osr[0][0] <= work.ip < osr[0][1]  # in the OSR version
    below = result.frames[work.index + 1]
    assert below.function == "ProfHarness.Recursion::Deep" and below.trust is Trust.FRAME_POINTER
    live = cap.manifest.live
    assert live is not None and live.hresult == 0
    assert [f.function_id for f in live.frames].count(fid) == 1
    assert result.live_matches is True and result.recovered is True


def test_the_capture_bytes_alone_do_not_show_the_osr_entry() -> None:
    cap = read_capture(CAPTURE)
    _fid, ranges = _work_ranges(cap.manifest.jit)
    start = next(s for s, _e, tier in ranges if tier == OSR_TIER)
    memory = CaptureMemory(cap.memory_ranges(), [])
    try:
        head = memory.read(start, 5)
    except MemoryFault:
        head = b""
    assert not is_osr_entry(head)


def test_without_the_label_the_replay_reports_work_twice(tmp_path: Path) -> None:
    # what the replay gave before the label (issue 24): the OSR frame, then the Tier0 frame it continues
    cap = read_capture(CAPTURE)
    jit = cap.manifest.jit
    methods = tuple(
        m.model_copy(update={"ranges": tuple(
            r.model_copy(update={"tier": "version1"}) if r.tier == OSR_TIER else r for r in m.ranges
        )}) if m.name == WORK else m
        for m in jit.methods
    )  # fmt: skip
    unlabelled = JitMap(methods=methods, ready_to_run=jit.ready_to_run)
    path = rewrite(cap, tmp_path / "unlabelled.phcap", jit=unlabelled)
    result = replay(read_capture(path), allow_disk=False)
    fid, _ranges = _work_ranges(jit)
    assert [f.function_id for f in result.frames].count(fid) == 2
    assert result.live_matches is False
