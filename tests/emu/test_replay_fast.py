"""The replay's fast paths (issue 23, part 5) give what the slow ones give.

- Models built without validation (:func:`emu.replay._unvalidated`) equal the validated ones: fields,
  field order, the fields set, JSON; values that are not u64 ints still go through validation and fail.
- A CFI row's compiled step (:meth:`emu.cfi.CfiTable.step`) gives :func:`emu.cfi.cfi_step`'s registers,
  or its error, for every row a replay of the committed captures uses and for registers it cannot use.
- A warm replay (machine, tables and code map reused) equals a cold one, for every committed capture.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from elftools.dwarf.callframe import CFARule, RegisterRule
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from clr_model.stacksnapshot import ManagedFrame, UnmanagedFrame
from emu import cfi
from emu.capture import read_capture
from emu.cfi import X64, CfiError, CfiRow, CfiTable, cfi_step
from emu.errors import EmuError
from emu.memory import CaptureMemory
from emu.replay import ReplayFrame, _replay_frame, _unvalidated, replay
from emu.unwind import Trust, unwind

CAPTURES = sorted((Path(__file__).resolve().parents[1] / "data" / "captures").rglob("*.phcap"))
U64 = st.integers(0, 2**64 - 1)


def same(a: object, b: object) -> None:
    from pydantic import BaseModel

    assert isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b)
    assert a == b
    assert list(a.__dict__) == list(b.__dict__) == list(type(a).model_fields)
    assert a.model_fields_set == b.model_fields_set
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump() == b.model_dump()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2000), U64, U64, st.sampled_from(list(Trust)),
       st.sampled_from(["managed", "ready_to_run", "native", "stub"]), st.one_of(st.none(), U64),
       st.one_of(st.none(), st.text(max_size=8)), st.one_of(st.none(), st.text(max_size=8)),
       st.one_of(st.none(), U64))  # fmt: skip
def test_replay_frame_unvalidated_equals_validated(
    index: int, ip: int, sp: int, trust: Trust, kind: str, fid: int | None, fn: str | None, mod: str | None,
    off: int | None,
) -> None:
    fast = _replay_frame(index, ip, sp, trust, kind, fid, fn, mod, off)  # type: ignore[arg-type]
    slow = ReplayFrame(index=index, ip=ip, sp=sp, trust=trust, kind=kind, function_id=fid, function=fn,
                       module=mod, module_offset=off)  # fmt: skip
    same(fast, slow)
    same(fast.model_copy(update={"reported_ip": ip}), slow.model_copy(update={"reported_ip": ip}))


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_replay_frame_out_of_range_is_still_validated(bad: int) -> None:
    with pytest.raises(ValidationError):
        _replay_frame(0, bad, 0x1000, Trust.CFI, "native", None, None, None, None)
    with pytest.raises(ValidationError):
        _replay_frame(0, 0x1000, 0x1000, Trust.CFI, "native", None, None, "m", bad)


def test_replay_frame_of_other_types_is_validated() -> None:
    # a bool is not an int to the fast path: validation coerces it as it always did
    same(_replay_frame(0, True, 0x1000, Trust.CFI, "native", None, None, None, None),
         ReplayFrame(index=0, ip=True, sp=0x1000, trust=Trust.CFI, kind="native", function_id=None,
                     function=None, module=None, module_offset=None))  # fmt: skip


def test_model_frames_unvalidated_equal_validated() -> None:
    values = {"kind": "managed", "function_id": 7, "ip": 1, "sp": 2, "in_jit_code": True}
    fast = _unvalidated(ManagedFrame, values, ("function_id", "ip", "sp"))
    same(fast, ManagedFrame(function_id=7, ip=1, sp=2))
    for kind in ("native", "helper"):
        same(_unvalidated(UnmanagedFrame, {"kind": kind, "ip": 3, "sp": 4}, ("kind", "ip", "sp")),
             UnmanagedFrame(kind=kind, ip=3, sp=4))  # fmt: skip


def _rows_used(path: Path) -> list[tuple[CfiTable, CfiRow]]:
    cfi.clear_caches()
    result = unwind(read_capture(path), allow_disk=False)
    out = []
    for table, _bias in result.code.loaded_tables().values():
        for _start, _off in table.decoded_entries():
            rows, _starts = table._rows[table._locs.index(_start)]
            out.extend((table, row) for row in rows)
    return out


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_compiled_cfi_steps_equal_cfi_step(path: Path) -> None:
    cap = read_capture(path)
    memory = CaptureMemory(cap.memory_ranges())
    sp = cap.manifest.registers.general().get("rsp" if cap.manifest.arch.value == "x64" else "esp", 0)
    rows = _rows_used(path)
    for table, row in rows:
        names = table.arch.registers.values()
        for regs in ({n: sp + 8 * i for i, n in enumerate(names)}, {table.arch.sp: sp}, {}):
            try:
                want: dict[str, int] | str = cfi_step(row, regs, memory, table.arch)
            except CfiError as exc:
                want = str(exc)
            try:
                got: dict[str, int] | str = table.step(row, regs, memory)
            except CfiError as exc:
                got = str(exc)
            assert got == want
            if isinstance(got, dict) and isinstance(want, dict):
                assert list(got) == list(want)


def test_compiled_cfi_step_handles_every_rule_kind() -> None:
    memory = CaptureMemory([(0x1000, bytes(range(256)) * 2)])
    rules = {
        3: RegisterRule(RegisterRule.OFFSET, -16), 6: RegisterRule(RegisterRule.VAL_OFFSET, 8),
        12: RegisterRule(RegisterRule.SAME_VALUE), 13: RegisterRule(RegisterRule.UNDEFINED),
        14: RegisterRule(RegisterRule.REGISTER, 3), 15: RegisterRule(RegisterRule.REGISTER, 99),
        16: RegisterRule(RegisterRule.OFFSET, -8),
    }  # fmt: skip
    row = CfiRow(start=0, end=16, cfa=CFARule(reg=7, offset=0x40), rules=rules, ra_register=16)
    table = CfiTable(b"", 0)
    for regs in ({"rsp": 0x1000, "rbx": 5, "r12": 6, "r13": 7, "r14": 8, "r15": 9},
                 {"rsp": 0x1000}, {"rsp": 0x10000}, {"rbx": 1}):  # fmt: skip
        try:
            want: dict[str, int] | str = cfi_step(row, regs, memory, X64)
        except CfiError as exc:
            want = str(exc)
        try:
            got: dict[str, int] | str = table.step(row, regs, memory)
        except CfiError as exc:
            got = str(exc)
        assert got == want


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_warm_replay_equals_cold(path: Path) -> None:
    cfi.clear_caches()
    try:
        cold = replay(read_capture(path), allow_disk=False, max_frames=64).model_dump_json()
    except EmuError as exc:
        cold = f"error: {exc}"
    cap = read_capture(path)
    for max_frames in (1024, 64, 64):
        try:
            warm = replay(cap, allow_disk=False, max_frames=max_frames).model_dump_json()
        except EmuError as exc:
            warm = f"error: {exc}"
        if max_frames == 64:
            assert warm == cold


def test_unwound_frame_built_in_one_step_equals_the_dataclass() -> None:
    from dataclasses import fields

    from emu.unwind import UnwoundFrame, _unwound_frame

    args = (0x401000, 0x7FFC0000, Trust.CFI, {"rip": 0x401000, "rsp": 0x7FFC0000}, 7, None, True)
    fast = _unwound_frame(*args)
    slow = UnwoundFrame(*args)
    assert fast == slow and repr(fast) == repr(slow) and hash(fast.ip) == hash(slow.ip)
    assert [f.name for f in fields(fast)] == list(vars(fast))
    with pytest.raises(AttributeError):
        fast.ip = 0  # type: ignore[misc]  # still frozen


@settings(max_examples=200, deadline=None)
@given(st.permutations([3, 6, 12, 13, 16]), st.lists(st.sampled_from([-8, -16, -24, -32, -48, -64, -72]),
       min_size=5, max_size=5, unique=True), st.integers(0, 5), st.integers(0x1000, 0x1200),
       st.booleans())  # fmt: skip
def test_one_unpack_cfi_step_equals_cfi_step(
    order: list[int], offsets: list[int], saved: int, rsp: int, written: bool
) -> None:
    """A row of "saved at CFA + offset" rules read by one unpack (emu.cfi._Plan.words) gives cfi_step's
    registers in cfi_step's order, whichever order the rules come in and wherever the words lie (in the
    segment read last, across its end, missing, or under an emulation's write)."""
    nums = order[: saved + 1]
    if 16 not in nums:
        nums.append(16)  # the return address's rule, last
    rules = {num: RegisterRule(RegisterRule.OFFSET, off) for num, off in zip(nums, offsets, strict=False)}
    row = CfiRow(start=0, end=16, cfa=CFARule(reg=7, offset=0x40), rules=rules, ra_register=16)
    memory = CaptureMemory([(0x1000, bytes(range(256)) * 2), (0x1200, bytes(range(64)))],
                           [(0x1000, 0x1300)])  # fmt: skip
    memory.read_u64(0x1000)  # the first segment is the one read last
    if written:
        memory.write(0x1100, b"\x01")
    table = CfiTable(b"", 0)
    regs = {"rsp": rsp, "rbx": 5, "rbp": 6, "r12": 7}
    try:
        want: dict[str, int] | str = cfi_step(row, regs, memory, X64)
    except CfiError as exc:
        want = str(exc)
    try:
        got: dict[str, int] | str = table.step(row, regs, memory)
    except CfiError as exc:
        got = str(exc)
    assert got == want
    if isinstance(got, dict) and isinstance(want, dict):
        assert list(got) == list(want)
    plan = cfi._compile(row, X64)
    assert plan is not None and plan.words is not None  # every offset distinct, the return address among them


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_code_map_places_equal_the_lookups(path: Path) -> None:
    """One bisection over CodeMap.places() gives what function_from_ip, module_at, in_ready_to_run,
    method_range and the CFI path a walk uses give, at every edge of every range (and a byte either
    side) and at random addresses."""
    import bisect
    import random

    from emu.unwind import CodeMap

    code = CodeMap(read_capture(path), allow_disk=False)
    starts, places = code.places()
    edges = [a for s, e, _ in code._jit for a in (s, e)] + [a for m in code.modules for a in (m.start, m.end)]
    edges += code._r2r_merged_starts + code._r2r_merged_ends
    rng = random.Random(23)  # seeded: the same addresses every run
    addresses = {a + d for a in edges for d in (-1, 0, 1) if a + d >= 0}
    addresses |= {rng.randrange(0, 2**64) for _ in range(500)} | {0, 2**64 - 1}
    for at in sorted(addresses):
        fid, module, r2r, start, cfi_path = places[bisect.bisect_right(starts, at) - 1]
        rng_ = code.method_range(at)
        assert fid == code.function_from_ip(at), hex(at)
        assert module is code.module_at(at), hex(at)
        assert r2r == code.in_ready_to_run(at), hex(at)
        assert start == (rng_[0] if rng_ is not None else None), hex(at)
        assert cfi_path == ((module.path or "") if module is not None and code.is_file(module) else None)


@given(st.integers(0xFF0, 0x1110), st.booleans())
def test_read_u64_pair_equals_two_reads(address: int, written: bool) -> None:
    memory = CaptureMemory([(0x1000, bytes(range(256))), (0x1100, bytes(range(8)))], [(0x1000, 0x1200)])
    memory.read_u64(0x1000)  # the first segment is the one read last
    if written:
        memory.write(0x1010, b"\xff")
    try:
        want: tuple[int, int] | str = (memory.read_u64(address), memory.read_u64(address + 8))
    except EmuError as exc:
        want = str(exc)
    memory.read_u64(0x1000)
    try:
        got: tuple[int, int] | str = memory.read_u64_pair(address)
    except EmuError as exc:
        got = str(exc)
    assert got == want
