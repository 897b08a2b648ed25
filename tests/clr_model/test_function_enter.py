"""clr_model.function_enter: FunctionEnter2 event rules and the ABI predicates (x86 and the System V
reading on x64), over states of :mod:`clr_model.abi`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from clr_model.abi import ABI, ARCHES, Arch, MachineState
from clr_model.errors import InvalidInput, ModelError
from clr_model.flags import CorPrfMonitor
from clr_model.function_enter import (
    HOOK_RULES,
    Argument,
    HookEvent,
    ObservedArgumentInfo,
    ObservedRange,
    abi_clauses,
    check_argument_info,
    check_call_alignment,
    check_hook_abi,
    check_hook_entry,
    check_hook_events,
    hook_register_changes,
    predict_argument_ranges,
)
from clr_model.strategies.function_enter import (
    arguments,
    conforming_returns,
    entry_states,
    hook_event_sequences,
    machine_states,
)

FAST = settings(max_examples=75, deadline=None)
MASK = 0x1000  # COR_PRF_MONITOR_ENTERLEAVE
ARGS_MASK = MASK | int(CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS)


def enter(fid: int = 7, cd: int = 7, func: int = 0x900, args: int = 0, target: int | None = None,
          thread: int = 0) -> HookEvent:
    return HookEvent(kind="enter", func_id=fid, client_data=cd, func=func, argument_info=args, target=target,
                     thread=thread)


LEAVE = HookEvent(kind="leave")


def ids(events: list[HookEvent], **kw: int | bool) -> list[str]:
    return [v.clause for v in check_hook_events(events, **kw)]  # type: ignore[arg-type]


Pair = tuple[MachineState, MachineState]


def x86(**values: object) -> MachineState:
    return MachineState(arch="x86", **values)  # type: ignore[arg-type]


# event rules ---------------------------------------------------------------------------------------

def test_FE2_01_funcid_is_callee_example() -> None:
    assert ids([enter(target=7), LEAVE]) == []
    assert ids([enter(fid=7, cd=7, target=8), LEAVE]) == ["FE2-01"]


@FAST
@given(hook_event_sequences())
def test_FE2_01_funcid_is_callee_property(case: tuple[list[HookEvent], int]) -> None:
    events, mask = case
    assert check_hook_events(events, event_mask=mask) == []
    wrong = [e.model_copy(update={"target": (e.func_id or 0) + 1}) if e.kind == "enter" else e
             for e in events]
    assert ids(wrong, event_mask=mask).count("FE2-01") == sum(e.kind == "enter" for e in events)


def test_FE2_02_client_data_example() -> None:
    mapper = HookEvent(kind="mapper", func_id=7, client_data=0xABC)
    assert ids([mapper, enter(cd=0xABC), LEAVE]) == []
    assert ids([mapper, enter(cd=7), LEAVE]) == ["FE2-02"]
    assert ids([enter(cd=7), LEAVE]) == []  # default mapper: clientData = funcId
    assert ids([enter(cd=8), LEAVE]) == ["FE2-02"]


@FAST
@given(hook_event_sequences(), st.integers(1, 2**16))
def test_FE2_02_client_data_property(case: tuple[list[HookEvent], int], delta: int) -> None:
    events, mask = case
    bent = [e.model_copy(update={"client_data": ((e.client_data or 0) + delta) % 2**32})
            if e.kind == "enter" else e for e in events]
    assert ids(bent, event_mask=mask).count("FE2-02") == sum(e.kind == "enter" for e in events)


def test_FE2_03_frame_handle_accepted_example() -> None:
    use_ok = HookEvent(kind="use_frame_info", func=0x900, api="GetFunctionInfo2", hr=0)
    use_bad = use_ok.model_copy(update={"hr": 0x80070057})
    assert ids([enter(), use_ok, LEAVE]) == []
    assert ids([enter(), use_bad, LEAVE]) == ["FE2-03"]


@FAST
@given(hook_event_sequences())
def test_FE2_03_frame_handle_accepted_property(case: tuple[list[HookEvent], int]) -> None:
    events, mask = case
    refused = [e.model_copy(update={"hr": 0x80004005}) if e.kind == "use_frame_info" else e for e in events]
    assert ids(refused, event_mask=mask).count("FE2-03") == sum(e.kind == "use_frame_info" for e in events)


def test_FE2_04_argument_info_needs_flag_example() -> None:
    assert CorPrfMonitor.COR_PRF_ENABLE_FUNCTION_ARGS == 0x02000000
    assert ids([enter(args=0x1000), LEAVE], event_mask=MASK) == ["FE2-04"]
    assert ids([enter(args=0x1000), LEAVE], event_mask=ARGS_MASK) == []
    switch = HookEvent(kind="set_event_mask", mask=ARGS_MASK)
    assert ids([switch, enter(args=0x1000), LEAVE], event_mask=MASK) == []


def test_FE2_03_frame_names_the_entered_function_example() -> None:
    entered = enter().model_copy(update={"token": 0x06000001})
    use = HookEvent(kind="use_frame_info", func=0x900, api="GetFunctionInfo2", hr=0, token=0x06000001)
    assert ids([entered, use, LEAVE]) == []
    assert ids([entered, use.model_copy(update={"token": 0x06000002}), LEAVE]) == ["FE2-03"]
    assert ids([enter(), use.model_copy(update={"token": 0x06000002}), LEAVE]) == []  # no ground truth
    assert ids([enter(func=0), use.model_copy(update={"func": 0}), LEAVE]) == []  # opaque: NULL is a value


@FAST
@given(hook_event_sequences(), st.integers(1, 2**16))
def test_FE2_03_frame_names_the_entered_function_property(case: tuple[list[HookEvent], int],
                                                          delta: int) -> None:
    events, mask = case
    other = [e.model_copy(update={"token": (e.token or 0) + delta}) if e.kind == "use_frame_info" else e
             for e in events]
    assert ids(other, event_mask=mask).count("FE2-03") == sum(e.kind == "use_frame_info" for e in events)


def test_FE2_04_argument_info_present_with_flag_example() -> None:
    assert ids([enter(args=0), LEAVE], event_mask=ARGS_MASK) == ["FE2-04"]
    assert ids([enter(args=0), LEAVE], event_mask=MASK) == []
    unknown = enter().model_copy(update={"argument_info": None})
    assert ids([unknown, LEAVE], event_mask=ARGS_MASK) == []  # not recorded: nothing to judge


@FAST
@given(hook_event_sequences())
def test_FE2_04_argument_info_present_with_flag_property(case: tuple[list[HookEvent], int]) -> None:
    events, _mask = case
    none = [e.model_copy(update={"argument_info": 0}) if e.kind == "enter" else e for e in events]
    n = sum(e.kind == "enter" for e in events)
    assert ids(none, event_mask=ARGS_MASK).count("FE2-04") == n
    assert ids(none, event_mask=MASK).count("FE2-04") == 0


@FAST
@given(hook_event_sequences())
def test_FE2_04_argument_info_needs_flag_property(case: tuple[list[HookEvent], int]) -> None:
    events, _mask = case
    with_args = [e.model_copy(update={"argument_info": 0x5000}) if e.kind == "enter" else e for e in events]
    n = sum(e.kind == "enter" for e in events)
    assert ids(with_args, event_mask=MASK).count("FE2-04") == n
    assert ids(with_args, event_mask=ARGS_MASK).count("FE2-04") == 0


def test_FE2_05_dead_after_return_example() -> None:
    late_frame = HookEvent(kind="use_frame_info", func=0x900, hr=0)
    late_args = HookEvent(kind="use_argument_info", argument_info=0x1000)
    assert ids([enter(args=0x1000), LEAVE, late_frame, late_args], event_mask=ARGS_MASK) == ["FE2-05"] * 2
    assert ids([enter(args=0x1000), late_frame, late_args, LEAVE], event_mask=ARGS_MASK) == []


@FAST
@given(hook_event_sequences())
def test_FE2_05_dead_after_return_property(case: tuple[list[HookEvent], int]) -> None:
    events, mask = case
    frames = {e.func for e in events if e.kind == "enter"}
    late = [HookEvent(kind="use_frame_info", func=f, hr=0, thread=7) for f in sorted(f for f in frames if f)]
    assert ids(events + late, event_mask=mask).count("FE2-05") == len(late)


@pytest.mark.clause("FE2-11")
@pytest.mark.clause("FE2-12")
@pytest.mark.parametrize(("kind", "clause"), [("block", "FE2-10"), ("gc", "FE2-11"),
                                              ("managed_call", "FE2-12"), ("managed_alloc", "FE2-12")])
def test_FE2_10_11_12_forbidden_inside_example(kind: str, clause: str) -> None:
    ev = HookEvent(kind=kind)
    assert ids([enter(), ev, LEAVE]) == [clause]
    assert ids([enter(), LEAVE, ev]) == []
    assert ids([enter(thread=1), ev, HookEvent(kind="leave", thread=1)]) == []  # another thread


@pytest.mark.clause("FE2-11")
@pytest.mark.clause("FE2-12")
@FAST
@given(hook_event_sequences(), st.sampled_from(["block", "gc", "managed_call", "managed_alloc"]), st.data())
def test_FE2_10_11_12_forbidden_inside_property(case: tuple[list[HookEvent], int], kind: str,
                                                data: st.DataObject) -> None:
    events, mask = case
    clause = {"block": "FE2-10", "gc": "FE2-11"}.get(kind, "FE2-12")
    at = data.draw(st.integers(0, len(events)))
    probe = HookEvent(kind=kind, thread=0)
    inside = False
    for e in events[:at]:
        if e.thread == 0 and e.kind in ("enter", "leave"):
            inside = e.kind == "enter"
    assert ids([*events[:at], probe, *events[at:]], event_mask=mask).count(clause) == int(inside)


# the x86 ABI -------------------------------------------------------------------------------------------

def test_FE2_06_naked_entry_layout_example() -> None:
    state = x86(eip=0x401000, esp=0x1000, ebp=0, eax=0, ebx=0, ecx=0, edx=0, esi=0, edi=0, eflags=2,
                stack={0x1000: 0x77, 0x1004: 7, 0x1008: 0xC, 0x100C: 0xF, 0x1010: 0})
    assert check_hook_entry(state, 7, 0xC, 0xF, 0) == []
    # a compiler prologue (push ebp) would have moved ESP: the parameters are no longer at ESP+4
    pushed = state.replace(esp=0xFFC, stack={**state.stack, 0xFFC: 0})
    assert [v.clause for v in check_hook_entry(pushed, 7, 0xC, 0xF, 0)] == ["FE2-06"] * 4


@FAST
@given(entry_states())
def test_FE2_06_naked_entry_layout_property(case: tuple[MachineState, tuple[int, int, int, int]]) -> None:
    state, params = case
    assert check_hook_entry(state, *params) == []
    swapped = (params[1], params[0], params[2], params[3])
    assert len(check_hook_entry(state, *swapped)) == (2 if params[0] != params[1] else 0)


def test_FE2_07_scratch_registers_kept_example() -> None:
    before = x86(eip=1, esp=0x1000, ebp=2, eax=3, ebx=4, ecx=5, edx=6, esi=7, edi=8, eflags=0x246,
                 stack={0x1000: 0x500})
    after = before.replace(esp=0x1014, eip=0x500, eax=0, stack={})
    assert [v.clause for v in check_hook_abi(before, after)] == ["FE2-07"]
    flags = after.replace(eax=3, eflags=0x247)  # CF set by the hook: a note (the JIT does not rely on it)
    assert check_hook_abi(before, flags) == []
    (note,) = hook_register_changes(before, flags)
    assert (note.clause, note.name, note.note) == ("FE2-07", "EFLAGS status flags", True)
    df = after.replace(eax=3, eflags=0x646)  # DF left set: clear at every call and return
    assert [v.message for v in check_hook_abi(before, df)] == ["DF changed: 0x0 -> 0x1"]
    tf = after.replace(eax=3, eflags=0x346)  # TF is not the hook's business
    assert check_hook_abi(before, tf) == []


@FAST
@given(conforming_returns(), st.sampled_from(["eax", "ecx", "edx"]), st.integers(1, 2**32 - 1))
def test_FE2_07_scratch_registers_kept_property(pair: Pair, reg: str, xor: int) -> None:
    before, after = pair
    assert check_hook_abi(before, after) == []
    bad = after.replace(**{reg: after[reg] ^ xor})
    assert [v.clause for v in check_hook_abi(before, bad)] == ["FE2-07"]


def test_FE2_08_saved_registers_and_fpu_example() -> None:
    before = x86(eip=1, esp=0x1000, ebp=2, eax=3, ebx=4, ecx=5, edx=6, esi=7, edi=8, eflags=2)
    after = before.replace(esp=0x1014)
    assert check_hook_abi(before, after) == []
    st0 = after.replace(st=(1, 0, 0, 0, 0, 0, 0, 0), xmm=(0, 0, 0, 0, 0, 0, 0, 9))
    assert [v.message.split(" ")[0] for v in check_hook_abi(before, st0)] == ["x87", "XMM7"]
    assert {v.clause for v in check_hook_abi(before, st0)} == {"FE2-08"}


_SAVED_FIELDS = ["ebx", "esi", "edi", "ebp", "fpu_control", "fpu_status", "fpu_tag", "mxcsr"]


@FAST
@given(conforming_returns(), st.sampled_from(_SAVED_FIELDS), st.integers(1, 0xFFFF),
       st.integers(0, 7), st.booleans())
def test_FE2_08_saved_registers_and_fpu_property(
    pair: Pair, reg: str, xor: int, slot: int, vector: bool
) -> None:
    before, after = pair
    bad = after.replace(**{reg: after[reg] ^ xor})
    assert [v.clause for v in check_hook_abi(before, bad)] == ["FE2-08"]
    name = "xmm" if vector else "st"
    regs = list(getattr(after, name))
    regs[slot] ^= xor
    bad_fp = after.replace(**{name: tuple(regs)})
    assert [v.clause for v in check_hook_abi(before, bad_fp)] == ["FE2-08"]


def test_FE2_09_callee_pops_example() -> None:
    before = x86(eip=1, esp=0x1000, ebp=2, eax=3, ebx=4, ecx=5, edx=6, esi=7, edi=8, eflags=2,
                 stack={0x1000: 0x401234})
    good = before.replace(esp=0x1014, eip=0x401234, stack={})
    assert check_hook_abi(before, good) == []
    cdecl = good.replace(esp=0x1004)  # plain `ret`: the caller's 16 bytes left behind
    assert [v.clause for v in check_hook_abi(before, cdecl)] == ["FE2-09"]
    elsewhere = good.replace(eip=0x401235)
    assert [v.clause for v in check_hook_abi(before, elsewhere)] == ["FE2-09"]
    with pytest.raises(InvalidInput, match="multiple of 4"):
        check_hook_abi(before, good, pushed_param_bytes=3)


@FAST
@given(conforming_returns(), st.integers(-64, 64).filter(lambda d: d != 0))
def test_FE2_09_callee_pops_property(pair: Pair, delta: int) -> None:
    before, after = pair
    off = after.replace(esp=(after.sp + delta) % 2**32)
    assert [v.clause for v in check_hook_abi(before, off)] == ["FE2-09"]


def test_FE2_13_x86_only_example() -> None:
    assert abi_clauses("x86") == ("FE2-06", "FE2-07", "FE2-08", "FE2-09")
    assert abi_clauses("x64") == () and abi_clauses("arm64") == ()
    with pytest.raises(InvalidInput, match="mips"):
        abi_clauses("mips")


@FAST
@given(st.text(max_size=6))
def test_FE2_13_x86_only_property(arch: str) -> None:
    try:
        got = abi_clauses(arch)
    except ModelError:
        assert arch not in ("x86", "i386", "x64", "amd64", "arm64", "arm")
    else:
        assert bool(got) == (arch in ("x86", "i386"))


# FE2-14: argument ranges -------------------------------------------------------------------------------

def _seen(pred_lengths: tuple[int, ...], contents: list[bytes]) -> ObservedArgumentInfo:
    ranges = tuple(ObservedRange(start=0x7000 + 16 * j, length=n, data=d)
                   for j, (n, d) in enumerate(zip(pred_lengths, contents, strict=True)))
    return ObservedArgumentInfo(argument_info=0x6000, num_ranges=len(ranges), total_size=sum(pred_lengths),
                                ranges=ranges)


def test_FE2_14_argument_ranges_example() -> None:
    pred = predict_argument_ranges([Argument(type="int", value=-2), Argument(type="long", value=6)])
    assert pred.lengths == (4, 8) and pred.total == 12
    assert pred.contents == ((-2).to_bytes(4, "little", signed=True), (6).to_bytes(8, "little"))
    good = _seen(pred.lengths, [b"\xfe\xff\xff\xff", b"\x06" + bytes(7)])
    assert check_argument_info(good, pred) == []
    wrong = _seen(pred.lengths, [b"\xfe\xff\xff\xff", b"\x07" + bytes(7)])
    assert [(v.clause, v.index) for v in check_argument_info(wrong, pred)] == [("FE2-14", 1)]
    assert [v.clause for v in check_argument_info(ObservedArgumentInfo(argument_info=0), pred)] == ["FE2-14"]
    inst = predict_argument_ranges([Argument(type="int", value=1)], this=Argument(type="object"),
                                   pointer_size=8)
    assert inst.lengths == (8, 4) and inst.contents[0] is None and inst.total == 12
    with pytest.raises(InvalidInput, match="arg 0: unknown argument type 'decimal'"):
        predict_argument_ranges([Argument(type="decimal", value=1)])
    with pytest.raises(InvalidInput, match="does not fit"):
        predict_argument_ranges([Argument(type="int", value=2**31)])


@FAST
@given(st.lists(arguments(), max_size=9), st.one_of(st.none(), arguments()), st.sampled_from([4, 8]),
       st.data())
def test_FE2_14_argument_ranges_property(args: list[Argument], this: Argument | None, ptr: int,
                                         data: st.DataObject) -> None:
    pred = predict_argument_ranges(args, this=this, pointer_size=ptr)
    assert len(pred.lengths) == len(args) + (this is not None) and pred.total == sum(pred.lengths)
    contents = [c if c is not None else bytes(n) for c, n in zip(pred.contents, pred.lengths, strict=True)]
    assert check_argument_info(_seen(pred.lengths, contents), pred) == []
    known = [j for j, c in enumerate(pred.contents) if c is not None]
    if known:  # a flipped byte of a known value is found, at its range
        j = data.draw(st.sampled_from(known))
        k = data.draw(st.integers(0, pred.lengths[j] - 1))
        bent = list(contents)
        bent[j] = bent[j][:k] + bytes([bent[j][k] ^ 0xFF]) + bent[j][k + 1:]
        assert [(v.clause, v.index) for v in check_argument_info(_seen(pred.lengths, bent), pred)] == [
            ("FE2-14", j)]
    if pred.lengths:  # a missing range is found
        shorter = _seen(pred.lengths[:-1], contents[:-1])
        assert check_argument_info(shorter, pred)


# totality ---------------------------------------------------------------------------------------------

@FAST
@given(st.lists(arguments(), max_size=4), st.integers(0, 2**16), st.one_of(st.none(), st.integers(0, 40)),
       st.one_of(st.none(), st.integers(0, 40)),
       st.lists(st.tuples(st.integers(0, 64), st.binary(max_size=12)), max_size=6))
def test_check_argument_info_is_total(args: list[Argument], info: int, n: int | None, total: int | None,
                                      ranges: list[tuple[int, bytes]]) -> None:
    seen = ObservedArgumentInfo(argument_info=info, num_ranges=n, total_size=total,
                                ranges=tuple(ObservedRange(start=0, length=ln, data=d) for ln, d in ranges))
    for v in check_argument_info(seen, predict_argument_ranges(args)):
        assert v.clause == "FE2-14"


@FAST
@given(hook_event_sequences(conforming=False))
def test_check_hook_events_is_total(case: tuple[list[HookEvent], int]) -> None:
    events, mask = case
    for v in check_hook_events(events, event_mask=mask):
        assert v.clause.startswith("FE2-") and v.index is not None


@FAST
@given(machine_states(), machine_states())
def test_check_hook_abi_is_total(before: MachineState, after: MachineState) -> None:
    assert all(v.clause in ("FE2-07", "FE2-08", "FE2-09") for v in check_hook_abi(before, after))


def test_machine_state_rejects_bad_widths() -> None:
    with pytest.raises(ValidationError, match="80-bit"):
        x86(eip=0, esp=0, ebp=0, eax=0, ebx=0, ecx=0, edx=0, esi=0, edi=0, eflags=0,
            st=(2**80, 0, 0, 0, 0, 0, 0, 0))


# the System V x64 reading of the ABI clauses (FE2-13 model choice for the hook checker) ----------------

def _x64(**kw: int) -> MachineState:
    names = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
             "r15")
    regs = {r: i + 1 for i, r in enumerate(names)}
    base: dict[str, int] = {"rip": 0x401000, "rsp": 0x7FF8, "rflags": 0x202, **regs}
    base.update(kw)
    return MachineState(arch="x64", registers=base, stack={0x7FF8: 0x401234})


SYSV_CALLEE_SAVED = ("rbx", "rbp", "r12", "r13", "r14", "r15")


def test_FE2_08_sysv_callee_saved_example() -> None:
    before = _x64()
    after = before.replace(rsp=0x8000, rip=0x401234, stack={})
    assert check_hook_abi(before, after) == []
    scratch = after.replace(rax=9, rcx=9, r11=9, xmm=(5,) * 16, st=(1,) * 8, mxcsr=before.mxcsr | 0x3F,
                            fpu_status=0x3800)
    assert check_hook_abi(before, scratch) == []  # System V lets a callee clobber these
    for update, name in (({"rbx": 0}, "RBX"), ({"r15": 0}, "R15"),
                         ({"fpu_control": 0x027F}, "x87 control word"),
                         ({"mxcsr": 0x7F80}, "MXCSR control"), ({"rflags": 0x602}, "DF"),
                         ({"fpu_tag": 0x3FFF}, "x87 tag word")):
        changes = hook_register_changes(before, after.replace(**update))
        assert [(c.clause, c.name) for c in changes] == [("FE2-08", name)]


@FAST
@given(st.sampled_from(SYSV_CALLEE_SAVED), st.integers(1, 2**64 - 1))
def test_FE2_08_sysv_callee_saved_property(reg: str, xor: int) -> None:
    before = _x64()
    after = before.replace(rsp=0x8000, rip=0x401234, **{reg: before[reg] ^ xor})
    assert [v.clause for v in check_hook_abi(before, after)] == ["FE2-08"]


def test_FE2_09_sysv_stack_and_return_example() -> None:
    before = _x64()
    good = before.replace(rsp=0x8000, rip=0x401234)
    assert check_hook_abi(before, good) == []
    off = good.replace(rsp=0x8008)
    assert [v.message for v in check_hook_abi(before, off)] == [
        "RSP after return 0x8008, expected 0x8000 (entry RSP + 8)"]
    assert [v.clause for v in check_hook_abi(before, good.replace(rip=1))] == ["FE2-09"]


@FAST
@given(st.integers(0, 2**64 - 1))
def test_FE2_09_sysv_call_alignment_property(rsp: int) -> None:
    violation = check_call_alignment("x64", rsp)
    assert (violation is None) == ((rsp + 8) % 16 == 0)
    assert violation is None or violation.clause == "FE2-09"
    assert check_call_alignment("x86", rsp % 2**32) is None  # the page states no alignment


def test_FE2_06_sysv_entry_example() -> None:
    state = _x64(rdi=7, rsi=0xC, rdx=0xF, rcx=0x1000)
    assert check_hook_entry(state, 7, 0xC, 0xF, 0x1000) == []
    assert [v.index for v in check_hook_entry(state, 0xC, 7, 0xF, 0x1000)] == [0, 1]
    bad = state.replace(rsp=0x8000, rflags=0x602, fpu_tag=0)
    assert [v.message for v in check_hook_entry(bad, 7, 0xC, 0xF, 0x1000)] == [
        "RSP 0x8000 at entry: RSP + 8 is not a multiple of 16", "DF set at entry",
        "x87 stack not empty at entry (tag 0x0)"]
    assert ABI["x64"].clauses == ("FE2-06", "FE2-08", "FE2-09")


# either architecture: the same predicates over the table of the state's architecture -------------------

@FAST
@given(st.sampled_from(ARCHES), st.data())
def test_FE2_06_entry_states_of_every_table_are_accepted(arch: Arch, data: st.DataObject) -> None:
    state, params = data.draw(entry_states(arch))
    assert check_hook_entry(state, *params) == []
    if params[0] != params[1]:
        swapped = (params[1], params[0], params[2], params[3])
        assert [v.index for v in check_hook_entry(state, *swapped)] == [0, 1]


@FAST
@given(st.sampled_from(ARCHES), st.data())
def test_FE2_07_08_09_conforming_returns_keep_every_rule(arch: Arch, data: st.DataObject) -> None:
    """A conforming return of each table keeps every rule; one bit flipped in what a ``kept`` rule reads
    is reported by that rule alone, with its clause and name."""
    before, after = data.draw(conforming_returns(arch))
    assert check_hook_abi(before, after) == []
    kept = data.draw(st.sampled_from(ABI[arch].kept))
    bits = kept.mask if kept.mask is not None else 0xFFFF  # every register has at least 16 bits
    bit = data.draw(st.sampled_from([b for b in range(16) if bits >> b & 1]))
    bad = _with(after, kept.register, after[kept.register] ^ (1 << bit))
    changes = hook_register_changes(before, bad)
    assert [(c.clause, c.name, c.after) for c in changes] == [(kept.clause, kept.name, kept.read(bad))]


def _with(state: MachineState, name: str, value: int) -> MachineState:
    for prefix in ("st", "xmm"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            values = list(getattr(state, prefix))
            values[int(name[len(prefix):])] = value
            return state.replace(**{prefix: tuple(values)})
    return state.replace(**{name: value})


@FAST
@given(st.sampled_from(ARCHES), st.data())
def test_check_hook_abi_is_total_on_every_table(arch: Arch, data: st.DataObject) -> None:
    before, after = data.draw(machine_states(arch)), data.draw(machine_states(arch))
    assert {v.clause for v in check_hook_abi(before, after)} <= set(ABI[arch].clauses) - {"FE2-06"}


def test_states_of_two_architectures_are_not_compared() -> None:
    with pytest.raises(InvalidInput, match="x86, the state after it x64"):
        check_hook_abi(x86(eip=1, esp=2, ebp=2, eax=3, ebx=4, ecx=5, edx=6, esi=7, edi=8, eflags=2), _x64())


@FAST
@given(conforming_returns(), st.sampled_from(["eax", "ebx", "esi", "fpu_tag", "mxcsr"]),
       st.integers(1, 0xFFFF))
def test_FE2_07_08_register_changes_are_what_check_hook_abi_reports(pair: Pair, reg: str, xor: int) -> None:
    before, after = pair
    bad = after.replace(**{reg: after[reg] ^ xor})
    changes = hook_register_changes(before, bad)
    reported = [(v.clause, v.message) for v in check_hook_abi(before, bad)]
    assert [(c.clause, c.message) for c in changes] == reported
    assert changes[0].before == before[reg] and changes[0].after == bad[reg]


def test_hook_rules_name_catalog_clauses() -> None:
    from clr_model.catalog import load

    ids = {c.id for c in load("fe2")}
    assert {clause for clause, _ in HOOK_RULES.values()} <= ids
