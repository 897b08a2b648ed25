"""Captures taken on the bundled live runtimes, committed with the CFI their replay uses
(tests/data/captures/live/<version>/, ``python -m tests.emu.live_fixtures``), replayed with no runtime and no
module file, in the manner of libunwindstack's offline unwind tests.

Each replay is held against three things: its committed expected replay (a regression reference), the
scenario's own account of the managed frames on the sampled thread (recovered leaf first), and, where the
live DoStackSnapshot at that instant succeeded, the live runtime's frames (FunctionIDs and IPs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clr_model.context import runtime_context_layout
from emu.capture import read_capture
from emu.replay import replay_capture
from emu.unwind import Trust
from tests.emu.live_fixtures import DATA, RUNTIMES, WANTED, place_file

CAPTURES = sorted(DATA.glob("*/*.phcap"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_every_runtime_has_its_places_committed() -> None:
    for version in RUNTIMES:
        names = {p.stem for p in (DATA / version).glob("*.phcap")}
        assert names == {place_file(p) for p in WANTED}, version
    assert sum(p.stat().st_size for p in DATA.rglob("*")) < 4 * 2**20  # "a few MB at most"


@pytest.mark.parametrize("path", CAPTURES, ids=_id)
def test_live_capture_replays_to_its_expected_replay(path: Path) -> None:
    result = replay_capture(path, allow_disk=False)
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    assert json.loads(result.model_dump_json()) == expected


@pytest.mark.parametrize("path", CAPTURES, ids=_id)
def test_live_capture_recovers_the_scenarios_known_frames_DSS_03(path: Path) -> None:
    result = replay_capture(path, allow_disk=False)
    assert result.place == path.stem.replace("-", ":", 1) or result.place == path.stem
    assert result.known_managed and result.recovered is True
    assert result.seed is not None and result.frames[result.seed.frame_index].function_id
    assert result.frames[0].trust is Trust.CONTEXT


@pytest.mark.parametrize("path", CAPTURES, ids=_id)
def test_live_capture_replay_equals_the_live_walk_where_it_succeeded(path: Path) -> None:
    cap = read_capture(path)
    live = cap.manifest.live
    assert live is not None
    result = replay_capture(path, allow_disk=False)
    if live.hresult == 0:
        assert result.live_matches is True
    else:
        assert result.live_matches is None


@pytest.mark.parametrize("path", CAPTURES, ids=_id)
def test_live_capture_holds_the_runtimes_own_CONTEXT(path: Path) -> None:
    ctx = read_capture(path).manifest.context
    assert ctx is not None and ctx.runtime == path.parent.name
    layout = runtime_context_layout(ctx.runtime)
    assert layout is not None and ctx.size == layout.size == {"3.1.23": 1232, "8.0.4": 3104}[ctx.runtime]
