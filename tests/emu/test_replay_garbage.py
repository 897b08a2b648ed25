"""A warm replay leaves no reference cycle behind (issue 23, part 5).

Garbage in a cycle is freed only by the collector, and a cycle through a frame keeps every caller's frame and
what their locals hold (a whole replay's result) alive until then: each replay of a process's samples would
pay for collections it need not cause. An exception kept in a local of the frame its traceback holds is
such a cycle (the CPU's stop, reported by unicorn as an error, was one).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from emu.capture import read_capture
from emu.errors import EmuError
from emu.replay import replay

CAPTURES = sorted((Path(__file__).resolve().parents[1] / "data" / "captures").rglob("*.phcap"))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_a_warm_replay_leaves_no_cycle(path: Path) -> None:
    cap = read_capture(path)
    try:
        replay(cap, allow_disk=False, max_frames=64)  # cold: caches fill
    except EmuError:
        pytest.skip("the capture does not replay")
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            replay(cap, allow_disk=False, max_frames=64)
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
