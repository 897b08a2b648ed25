"""Replay of committed captures (no compiler, no runtime): frames, trust, seed, model, determinism, table.

The captures under tests/data/captures (x86: tests/data/captures/x86) were taken from the gcc fixtures
(tests/emu/fixtures.py, ``python -m tests.emu.fixtures x64|x86``); each ``*.expected.json`` holds the frames
the program recorded itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clr_model.context import AMD64_CONTEXT, X86_CONTEXT
from clr_model.hresults import HResult
from clr_model.stacksnapshot import seed_for
from emu.capture import LiveFrame, LiveWalk, read_capture
from emu.replay import (
    recovery_table,
    render_recovery_table,
    render_text,
    replay,
    replay_capture,
    seed_context,
)
from emu.unwind import StopKind
from tests.emu.fixtures import FIXTURES, X64
from tests.emu.synth import rewrite

DATA = Path(__file__).parents[1] / "data" / "captures"
PLACES = X64.places
FID_B, FID_A = X64.known["managed"]  # the managed frames the program knows, leaf first
#: the CONTEXT a seed and every callback carry, with no runtime to declare its own
CONTEXTS = {"x64": AMD64_CONTEXT, "x86": X86_CONTEXT}


def expected(place: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"fixture-{place}.expected.json").read_text())
    return loaded


COMMITTED = [(fixture.arch, place) for fixture in FIXTURES.values() for place in fixture.committed]


@pytest.mark.parametrize(("arch", "place"), COMMITTED)
def test_committed_capture_replays_to_the_programs_frames(arch: str, place: str) -> None:
    fixture = FIXTURES[arch]  # type: ignore[index]
    exp = fixture.committed_record(place)
    result = replay_capture(fixture.committed_capture(place), allow_disk=False)
    n = len(exp["frames"])
    assert result.arch == arch
    assert [(f.ip, f.sp) for f in result.frames[:n]] == [(f["ip"], f["sp"]) for f in exp["frames"]]
    trust = fixture.expected_trust(place)
    assert [f.trust.value for f in result.frames[:n]] == exp.get("trust", trust) == trust
    assert [(m["index"], m["function_id"]) for m in exp["managed"]] == [
        (f.index, f.function_id) for f in result.frames if f.function_id
    ]
    if fixture.program_cfi_only:  # the walk stops at main's caller in the C library
        assert result.stop.kind is StopKind.MODULE_UNAVAILABLE and "libc" in result.stop.detail
        assert len(result.frames) == n + 1
    else:
        assert result.stop.kind is StopKind.END_OF_STACK
    known = fixture.known[place]
    assert result.recovered is True and result.known_managed == known == tuple(exp.get("known", known))


@pytest.mark.parametrize(("arch", "place"), COMMITTED)
def test_model_callbacks_leaf_first_one_per_unmanaged_run_DSS_16_DSS_15(arch: str, place: str) -> None:
    fixture = FIXTURES[arch]  # type: ignore[index]
    result = replay_capture(fixture.committed_capture(place), allow_disk=False)
    assert result.model.hresult.endswith("S_OK")
    # seeded at the first known managed frame: one callback per managed frame, then one for the whole run
    # of native frames below (c_outer .. _start)
    assert [c.func_id for c in result.model.callbacks] == [*fixture.known[place], 0]
    assert {c.context_size for c in result.model.callbacks} == {CONTEXTS[arch].size}


@pytest.mark.parametrize("place", PLACES)
def test_seed_is_the_first_managed_frame_DSS_19(place: str) -> None:
    """DSS-19: GetFunctionFromIP on each frame from the top; seed from the first managed one."""
    exp = expected(place)
    result = replay_capture(DATA / f"fixture-{place}.phcap", allow_disk=False)
    first = exp["managed"][0]
    frame = exp["frames"][first["index"]]
    assert result.seed is not None
    assert (result.seed.frame_index, result.seed.function_id) == (first["index"], FID_B)
    assert (result.seed.ip, result.seed.sp) == (frame["ip"], frame["sp"])
    assert result.seed.native_frames_skipped == first["index"]
    ctx = seed_context(result.seed)
    assert len(ctx) == result.seed.context_size == 1232  # no runtime: the declared AMD64 CONTEXT
    # the model's own seed procedure over the replayed thread agrees
    from clr_model.stacksnapshot import ManagedFrame, ThreadModel, UnmanagedFrame

    thread = ThreadModel(
        frames=tuple(
            ManagedFrame(function_id=f.function_id, ip=f.ip, sp=f.sp)
            if f.function_id
            else UnmanagedFrame(kind="native", ip=f.ip, sp=f.sp)
            for f in result.frames
        )
    )
    model_seed = seed_for(thread)
    assert model_seed is not None and (model_seed.ip, model_seed.sp) == (result.seed.ip, result.seed.sp)


def test_replaying_one_capture_1000_times_gives_byte_identical_json() -> None:
    path = DATA / "fixture-stub.phcap"
    outputs = {replay_capture(path, allow_disk=False).model_dump_json() for _ in range(1000)}
    assert len(outputs) == 1  # speed is bench/replay.py's business, not a timed test's
    # and a capture object replayed again (its caches warm) gives the same bytes
    cap = read_capture(path)
    assert {replay(cap, allow_disk=False).model_dump_json() for _ in range(50)} == outputs


def test_render_text_shows_frames_trust_and_seed() -> None:
    text = render_text(replay_capture(DATA / "fixture-stub.phcap", allow_disk=False))
    assert "emulated" in text and "frame_pointer" in text and "cfi" in text and "context" in text
    assert "seed: frame #2 FunctionID 0x7f002000" in text
    assert "Fixture.B" in text and "stop: end_of_stack" in text


def test_recovery_table_per_place_with_live_beside_it(tmp_path: Path) -> None:
    for p in DATA.glob("*.phcap"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    cap = read_capture(DATA / "fixture-native.phcap")
    # a live naive-seed walk that failed, and one that succeeded with the known frames
    failed = LiveWalk(hresult=int(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX))
    good = LiveWalk(
        hresult=0, frames=(LiveFrame(function_id=FID_B, ip=1), LiveFrame(function_id=FID_A, ip=2))
    )
    rewrite(cap, tmp_path / "live-failed.phcap", live=failed)
    rewrite(cap, tmp_path / "live-good.phcap", live=good)
    (tmp_path / "broken.phcap").write_bytes(b"\x89PHCAP\r\n" + b"\x00" * 3)
    rows = {r.place: r for r in recovery_table([tmp_path])}
    assert rows["helper:stub"].samples == 2 and rows["helper:stub"].recovered_share == 1.0
    assert rows["helper:stub"].live_share is None
    native = rows["native"]
    assert (native.samples, native.recovered, native.live_samples, native.live_recovered) == (3, 3, 2, 1)
    assert native.live_share == 0.5
    assert rows["unreadable"].failed == 1
    text = render_recovery_table(tuple(rows.values()))
    assert "50.0%" in text and "n/a" in text


def test_live_frames_are_compared_with_the_replay(tmp_path: Path) -> None:
    cap = read_capture(DATA / "fixture-managed.phcap")
    exp = expected("managed")
    ips = {m["function_id"]: exp["frames"][m["index"]]["ip"] for m in exp["managed"]}
    same = LiveWalk(hresult=0, frames=tuple(LiveFrame(function_id=f, ip=ips[f]) for f in (FID_B, FID_A)))
    other = LiveWalk(hresult=0, frames=(LiveFrame(function_id=FID_B, ip=ips[FID_B] + 1),))
    assert replay_capture(rewrite(cap, tmp_path / "a.phcap", live=same)).live_matches is True
    assert replay_capture(rewrite(cap, tmp_path / "b.phcap", live=other)).live_matches is False
    failed = LiveWalk(hresult=int(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX))
    assert replay_capture(rewrite(cap, tmp_path / "c.phcap", live=failed)).live_matches is None


def test_seed_context_has_the_runtime_size() -> None:
    result = replay_capture(DATA / "fixture-managed.phcap", allow_disk=False)
    assert result.seed is not None
    big = result.seed.model_copy(update={"context_size": 3104})
    from clr_model.context import AMD64_PAL_XSTATE

    data = seed_context(big)
    assert len(data) == 3104
    assert AMD64_PAL_XSTATE.unpack(data, ["Rip", "Rsp"]) == {"Rip": result.seed.ip, "Rsp": result.seed.sp}
