"""The walk's quick steps (issue 23, part 5) give what the walker's own steps give.

:func:`emu.unwind.walk_frames` takes two steps itself when the tables a warm walk has cached answer them
(a compiled CFI row, :meth:`emu.cfi.CfiTable.quick_step`; a managed frame's frame-pointer chain) and hands
every other step to the walker. For every committed capture, each step of a warm walk (where the quick
steps apply) must equal the walker's step from the same registers: the caller's registers, in the same
order, and the trust.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import cfi
from emu.capture import read_capture
from emu.errors import EmuError
from emu.unwind import _Walker, unwind

CAPTURES = sorted((Path(__file__).resolve().parents[1] / "data" / "captures").rglob("*.phcap"))


@pytest.mark.parametrize("allow_disk", [False, True])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_warm_walk_steps_equal_the_walkers(path: Path, allow_disk: bool) -> None:
    cfi.clear_caches()
    cap = read_capture(path)
    try:
        unwind(cap, allow_disk=allow_disk)  # cold: the caches fill
        result = unwind(cap, allow_disk=allow_disk)  # warm: the quick steps apply
    except EmuError:
        pytest.skip("the capture does not unwind")
    code, memory, machine = cap.cache[f"unwind:{allow_disk}:10000:None"]  # type: ignore[misc]
    walker = _Walker(cap, code, memory, machine)
    frames = result.frames
    assert len(frames) >= 1
    for i in range(len(frames) - 1):
        caller, trust = walker.caller(frames[i].registers, exact=i == 0, index=i)
        nxt = frames[i + 1]
        assert list(caller.items()) == list(nxt.registers.items()), f"frame {i}"
        assert trust is nxt.trust, f"frame {i}"


def test_quick_steps_are_taken() -> None:
    """The committed captures exercise both quick steps (else the test above would prove nothing)."""
    taken = {"cfi": 0, "frame_pointer": 0}
    original_step, original_fp = cfi.CfiTable.quick_step, None
    import emu.unwind as unwind_module

    original_fp = unwind_module._quick_frame_pointer

    def count_step(self: cfi.CfiTable, *args: object) -> object:
        got = original_step(self, *args)  # type: ignore[arg-type]
        taken["cfi"] += got is not None
        return got

    def count_fp(*args: object) -> object:
        got = original_fp(*args)  # type: ignore[arg-type]
        taken["frame_pointer"] += got is not None
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(cfi.CfiTable, "quick_step", count_step)
    mp.setattr(unwind_module, "_quick_frame_pointer", count_fp)
    try:
        for path in CAPTURES:
            cap = read_capture(path)
            for _ in range(2):
                try:
                    unwind(cap, allow_disk=False)
                except EmuError:
                    break
    finally:
        mp.undo()
    assert taken["cfi"] > 100 and taken["frame_pointer"] > 20, taken
