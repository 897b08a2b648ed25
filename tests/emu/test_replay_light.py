"""The light replay (:func:`emu.replay.replay_light`, issue 23 part 5) gives what :func:`emu.replay.replay`
gives: its frames are the result's frames, its callbacks the model's exact outcome
(:func:`clr_model.stacksnapshot.snapshot`, asked through :func:`emu.replay._model_walk`), its other fields
the result's; on every committed capture, and (the callbacks) on generated frame sequences.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.context import AMD64_CONTEXT, Arch
from clr_model.hresults import HResult, format_hresult
from emu import cfi
from emu.capture import read_capture
from emu.errors import EmuError
from emu.replay import (
    FrameKind,
    LightFrame,
    LightReplay,
    ReplayResult,
    ReplaySeed,
    _frame_models,
    _light_model_walk,
    _model_walk,
    replay,
    replay_light,
)
from emu.unwind import Trust

CAPTURES = sorted((Path(__file__).resolve().parents[1] / "data" / "captures").rglob("*.phcap"))


def assert_light_is_the_result(light: LightReplay, full: ReplayResult) -> None:
    """Every field of the light replay equals the result's (frames by field, callbacks by the fields
    that vary, the others to the constants every replayed callback has)."""
    assert len(light.frames) == len(full.frames)
    for i, (lf, mf) in enumerate(zip(light.frames, full.frames, strict=True)):
        assert mf.index == i
        assert lf._asdict() == mf.model_dump(exclude={"index"}), i
    assert light.hresult == full.model.hresult == format_hresult(int(HResult.S_OK))
    assert light.notes == full.model.notes
    assert len(light.callbacks) == len(full.model.callbacks)
    for lc, mc in zip(light.callbacks, full.model.callbacks, strict=True):
        assert mc.context is not None
        assert (lc.func_id, lc.ip, lc.frame_ip, lc.sp) == (mc.func_id, mc.ip, mc.context.ip, mc.context.sp)
        assert (mc.client_data, mc.hr, mc.frame_info) == (0, int(HResult.S_OK), None)
        assert full.seed is not None and mc.context_size == full.seed.context_size
    assert (light.stop, light.stop_detail) == (full.stop.kind, full.stop.detail)
    for name in ("capture", "place", "arch", "seed", "emulated_instructions", "known_managed", "phase",
                 "recovered", "live_hresult", "live_recovered", "live_matches"):  # fmt: skip
        assert getattr(light, name) == getattr(full, name), name


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_light_replay_equals_the_model_replay(path: Path) -> None:
    for allow_disk in (False, True):
        for max_frames in (64, 1024):
            cfi.clear_caches()
            try:
                full = replay(read_capture(path), allow_disk=allow_disk, max_frames=max_frames)
            except EmuError as exc:
                with pytest.raises(EmuError, match="^" + re.escape(str(exc)) + "$"):
                    replay_light(read_capture(path), allow_disk=allow_disk, max_frames=max_frames)
                continue
            cap = read_capture(path)
            for _ in range(2):  # cold, then warm (the same capture object)
                light = replay_light(cap, allow_disk=allow_disk, max_frames=max_frames)
                assert_light_is_the_result(light, full)
                assert light.to_model().model_dump_json() == full.model_dump_json()


KINDS: list[FrameKind] = ["managed", "ready_to_run", "native", "stub"]


@st.composite
def frame_sequences(draw: st.DrawFn) -> list[LightFrame]:
    """Frames as the walk gives them: managed ones with a FunctionID (drawn from a few, so that frames
    repeat one), others without; some managed frames with a reported IP; modules of the runtime or not."""
    n = draw(st.integers(0, 12))
    out: list[LightFrame] = []
    sp = draw(st.integers(0x1000, 0x2000))
    for _ in range(n):
        kind = draw(st.sampled_from(KINDS))
        ip = draw(st.sampled_from([0x401000, 0x401010, 0x7F0000, 0x7F0010]))
        sp += draw(st.integers(8, 64))
        fid = draw(st.sampled_from([0x10, 0x20, 0x30])) if kind == "managed" else None
        modules = [None, "libcoreclr.so", "libc.so.6", "app"]
        module = None if kind == "stub" else draw(st.sampled_from(modules))
        reported = draw(st.one_of(st.none(), st.integers(0x400000, 0x400100))) if fid else None
        out.append(LightFrame(ip, sp, Trust.CFI, kind, fid, None, module, None, reported))
    return out


@settings(max_examples=300, deadline=None)
@given(frame_sequences(), st.sampled_from(["helper", "helper:gc", "managed", "native:syscall"]))
def test_light_callbacks_equal_the_model_exact_outcome(frames: list[LightFrame], place: str) -> None:
    first = next((i for i, f in enumerate(frames) if f.function_id), None)
    seed = None
    if first is not None:
        f = frames[first]
        assert f.function_id is not None
        seed = ReplaySeed(frame_index=first, function_id=f.function_id, ip=f.ip, sp=f.sp, fp=None,
                          context_size=AMD64_CONTEXT.size, native_frames_skipped=first)  # fmt: skip
    model = _model_walk(_frame_models(frames), seed, place, AMD64_CONTEXT.size, Arch.AMD64)
    light = _light_model_walk(frames, first)
    assert model.hresult == format_hresult(int(HResult.S_OK))
    assert [(c.func_id, c.ip, c.context.ip, c.context.sp) for c in model.callbacks if c.context] == [
        tuple(c) for c in light
    ]
    assert len(model.callbacks) == len(light)
