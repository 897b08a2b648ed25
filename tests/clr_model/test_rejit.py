"""The ReJIT model (clr_model/rejit.py, issue 25 part 2): examples from the pages' sentences and properties
over generated protocol runs (clr_model/strategies/rejit.py), each held to what the generator itself knows
of the run, never to what the model printed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model import api
from clr_model.api import Fact
from clr_model.clauses import CATALOG
from clr_model.il_metadata import RecordedMetadata
from clr_model.rejit import (
    AGAIN,
    IN_CALLBACK,
    ReJITModel,
    ReJITVerdict,
    State,
    check_handed_body,
    function_control_methods,
    where_legal,
)
from clr_model.strategies.rejit import ProtocolStep, protocol_runs, straight_bodies

KEY = (0x1000, 0x06000001)
REQUEST = "RequestReJIT"
SET_BODY = "ICorProfilerFunctionControl::SetILFunctionBody"


def play(steps: list[ProtocolStep]) -> tuple[ReJITModel, list[tuple[int, ReJITVerdict]]]:
    """Feed a run to a fresh model: (the model, (step index, verdict) of every verdict)."""
    model = ReJITModel()
    out: list[tuple[int, ReJITVerdict]] = []
    for n, s in enumerate(steps):
        assert s.key is not None
        got: list[ReJITVerdict] = []
        if s.kind == "request":
            got = model.request(s.name, [s.key], callback=s.callback)
        elif s.kind == "revert":
            got = model.revert(s.name, [s.key], callback=s.callback)
        elif s.kind == "parameters":
            got = model.parameters_started(s.key)
        elif s.kind == "parameters_end":
            model.parameters_finished(s.key)
        elif s.kind == "fc":
            got = model.function_control(s.name, callback=s.callback, key=s.key)
        elif s.kind == "started":
            got = model.rejit_started(s.function, s.rejit_id, s.key)
        elif s.kind == "finished":
            got = model.rejit_finished(s.function, s.rejit_id)
        elif s.kind == "error":
            model.rejit_error(s.key)
        out += [(n, v) for v in got]
    return model, out


# --- the API table's facts the model reads --------------------------------------------------------------


def test_the_requests_and_their_threads_come_from_the_api_table() -> None:
    # own-thread methods: the requests the ReJIT model judges (REJIT-09) and ForceGC (FGC-01, the validator)
    assert api.names_with(Fact.OWN_THREAD) - api.names_with(Fact.REJIT_REQUEST) == {"ForceGC"}
    assert not api.names_with(Fact.REJIT_REQUEST) & api.names_with(Fact.REVERTS)
    assert all(api.method(n).family == api.INFO for n in api.names_with(Fact.REJIT_REQUEST, Fact.REVERTS))
    # every function-control method has its page in the catalog, and the model knows each
    pages = {c.document.value for c in CATALOG.values()}
    prefix = "ICorProfilerFunctionControl::"
    assert set(function_control_methods()) == {p for p in pages if p.startswith(prefix)}
    assert SET_BODY in function_control_methods()


# --- REJIT-09: RequestReJIT from the profiler's own thread ----------------------------------------------


def test_REJIT_09_request_inside_a_callback_is_a_failure_example() -> None:
    model = ReJITModel()
    assert model.request(REQUEST, [KEY], callback=None) == []
    inside = model.request(REQUEST, [KEY], callback="ModuleLoadFinished")
    assert [(v.clause, v.note) for v in inside if v.clause == "REJIT-09"] == [("REJIT-09", False)]
    # the pages of the other requests are silent on threads: a note
    for name in sorted(api.names_with(Fact.REJIT_REQUEST, Fact.REVERTS) - api.names_with(Fact.OWN_THREAD)):
        v = where_legal(name, "JITCompilationStarted")
        assert v is not None and v.clause == IN_CALLBACK and v.note, name
        assert where_legal(name, None) is None


@settings(max_examples=200, deadline=None)
@given(protocol_runs())
def test_REJIT_09_failures_exactly_at_own_thread_requests_inside_callbacks_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]],
) -> None:
    steps, _ = run
    _, verdicts = play(steps)
    own_thread = api.names_with(Fact.OWN_THREAD)
    expected = {n for n, s in enumerate(steps) if s.kind == "request" and s.callback and s.name in own_thread}
    assert {n for n, v in verdicts if v.clause == "REJIT-09"} == expected
    assert all(not v.note for _, v in verdicts if v.clause == "REJIT-09")
    silent = {n for n, s in enumerate(steps) if s.kind in ("request", "revert") and s.callback
              and s.name not in own_thread}  # fmt: skip
    assert {n for n, v in verdicts if v.clause == IN_CALLBACK} == silent
    # only REJIT-09 fails: everything else the profiler did here is allowed or a note
    assert {v.clause for _, v in verdicts if not v.note and not v.runtime} <= {"REJIT-09"}


# --- REJIT-07: a second request is a revert and a recompilation (a note) -------------------------------


def test_REJIT_07_a_second_request_is_a_note_example() -> None:
    model = ReJITModel()
    assert model.request(REQUEST, [KEY], callback=None) == []
    again = model.request(REQUEST, [KEY], callback=None)
    assert [(v.clause, v.note) for v in again] == [(AGAIN, True)]
    model.revert("RequestRevert", [KEY], callback=None)
    assert model.request(REQUEST, [KEY], callback=None) == []  # after a revert: a fresh request


@settings(max_examples=200, deadline=None)
@given(protocol_runs())
def test_REJIT_07_notes_exactly_at_requests_of_active_functions_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]],
) -> None:
    steps, _ = run
    _, verdicts = play(steps)
    assert {n for n, v in verdicts if v.clause == AGAIN} == {n for n, s in enumerate(steps) if s.again}
    assert all(v.note for _, v in verdicts if v.clause == AGAIN)


# --- REJIT-16: a revert without an active request ------------------------------------------------------


def test_REJIT_16_revert_status_example() -> None:
    model = ReJITModel()
    assert model.revert_status(KEY) == "CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND"
    model.request(REQUEST, [KEY], callback=None)
    assert model.revert_status(KEY) == "S_OK"
    model.revert("RequestRevert", [KEY], callback=None)
    assert model.state(KEY) is State.REVERTED
    assert model.revert_status(KEY) == "CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND"


@settings(max_examples=200, deadline=None)
@given(protocol_runs())
def test_REJIT_16_revert_status_follows_the_active_requests_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]],
) -> None:
    steps, active = run
    model, _ = play(steps)
    for key, is_active in active.items():
        expected = "S_OK" if is_active else "CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND"
        assert model.revert_status(key) == expected
    assert set(model.active()) == {k for k, a in active.items() if a}


# --- REJIT-18: parameters asked for requested functions ------------------------------------------------


def test_REJIT_18_parameters_for_nothing_requested_is_a_runtime_divergence_example() -> None:
    model = ReJITModel()
    [v] = model.parameters_started(KEY)
    assert v.clause == "REJIT-18" and v.runtime
    model = ReJITModel()
    model.request(REQUEST, [KEY], callback=None)
    assert model.parameters_started(KEY) == []
    assert model.state(KEY) is State.PARAMETERS
    model.parameters_finished(KEY)
    assert model.state(KEY) is State.PREPARED


@settings(max_examples=200, deadline=None)
@given(protocol_runs(), st.integers(0x06000100, 0x060001FF))
def test_REJIT_18_a_protocol_runtime_is_never_blamed_and_a_stray_ask_is_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]], stray: int,
) -> None:
    steps, _ = run
    model, verdicts = play(steps)
    assert [v for _, v in verdicts if v.runtime] == []
    [v] = model.parameters_started((0x3000, stray))  # a key no generated run requests
    assert v.clause == "REJIT-18" and v.runtime


# --- REJIT-21: the function control outside its GetReJITParameters (a note) ----------------------------


def test_REJIT_21_function_control_after_its_callback_is_a_note_example() -> None:
    model = ReJITModel()
    model.request(REQUEST, [KEY], callback=None)
    model.parameters_started(KEY)
    assert model.function_control(SET_BODY, callback="GetReJITParameters", key=KEY) == []
    model.parameters_finished(KEY)
    [late] = model.function_control(SET_BODY, callback="ReJITCompilationStarted", key=KEY)
    assert late.clause == "REJIT-21" and late.note


@settings(max_examples=200, deadline=None)
@given(protocol_runs())
def test_REJIT_21_notes_exactly_at_calls_outside_the_parameters_callback_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]],
) -> None:
    steps, _ = run
    _, verdicts = play(steps)
    outside = {n for n, s in enumerate(steps) if s.kind == "fc" and not s.inside_parameters}
    assert {n for n, v in verdicts if v.clause == "REJIT-21"} == outside
    assert all(v.note for _, v in verdicts if v.clause == "REJIT-21")


# --- REJIT-23: the function control's body size ----------------------------------------------------------

_NO_METADATA = RecordedMetadata()


def test_REJIT_23_declared_size_shorter_than_the_body_example() -> None:
    body = bytes([0x03 << 2 | 0x2, 0x00, 0x00, 0x2A])  # tiny: nop nop ret
    assert check_handed_body(body, _NO_METADATA, declared_size=4) == []
    assert [v.clause for v in check_handed_body(body, _NO_METADATA, declared_size=3)].count("REJIT-23") == 1
    assert [v.clause for v in check_handed_body(body, _NO_METADATA, from_allocator=False)] == ["REJIT-37"]


@settings(max_examples=200, deadline=None)
@given(straight_bodies(), st.integers(-8, 8))
def test_REJIT_23_sizes_below_the_body_are_found_property(body: bytes, delta: int) -> None:
    declared = max(1, len(body) + delta)
    clauses = [v.clause for v in check_handed_body(body + b"\xcc" * 8, _NO_METADATA, declared_size=declared)]
    assert ("REJIT-23" in clauses) == (declared < len(body))
    if declared >= len(body):
        assert clauses == [], clauses  # a valid body with a large enough size: nothing to say


# --- REJIT-28: Finished names a recompilation that started ---------------------------------------------


def test_REJIT_28_finished_without_started_example() -> None:
    model = ReJITModel()
    [v] = model.rejit_finished(0x7F00, 1)
    assert v.clause == "REJIT-28" and v.runtime
    assert model.rejit_started(0x7F00, 2, KEY) == []
    assert model.rejit_finished(0x7F00, 2) == []


def test_REJIT_28_finished_on_another_thread_example() -> None:
    model = ReJITModel()
    assert model.rejit_started(0x7F00, 1, KEY, thread=5) == []
    assert model.unfinished() == [(0x7F00, 1)]
    [v] = model.rejit_finished(0x7F00, 1, thread=6)
    assert v.clause == "REJIT-28" and v.runtime and "thread 6" in v.message
    assert model.unfinished() == []
    assert model.rejit_started(0x7F00, 2, KEY, thread=5) == []
    assert model.rejit_finished(0x7F00, 2, thread=5) == []


@settings(max_examples=200, deadline=None)
@given(protocol_runs(), st.data())
def test_REJIT_28_a_dropped_started_is_found_property(
    run: tuple[list[ProtocolStep], dict[tuple[int, int], bool]], data: st.DataObject,
) -> None:
    steps, _ = run
    started = [n for n, s in enumerate(steps) if s.kind == "started"]
    _, verdicts = play(steps)
    assert not [v for _, v in verdicts if v.clause == "REJIT-28"]
    if started:
        drop = data.draw(st.sampled_from(started))
        _, verdicts = play(steps[:drop] + steps[drop + 1:])
        assert [n for n, v in verdicts if v.clause == "REJIT-28"] == [drop]  # the Finished moved up by one


# --- REJIT-01 and the state of an IL body --------------------------------------------------------------


def test_set_il_function_body_after_compilation_is_REJIT_01() -> None:
    model = ReJITModel()
    assert model.set_il_function_body(KEY) == []
    model.jit_finished(KEY)
    assert [v.clause for v in model.set_il_function_body(KEY)] == ["REJIT-01"]


# --- REJIT-37: ICorProfilerInfo::SetILFunctionBody's body from the module's allocator ------------------


def test_REJIT_37_a_body_not_from_the_allocator_example() -> None:
    body = bytes([0x01 << 2 | 0x2, 0x2A])  # tiny: ret
    assert check_handed_body(body, _NO_METADATA, from_allocator=True) == []
    [v] = check_handed_body(body, _NO_METADATA, from_allocator=False)
    assert v.clause == "REJIT-37" and not v.note


@settings(max_examples=100, deadline=None)
@given(straight_bodies(), st.sampled_from((True, False, None)))
def test_REJIT_37_exactly_when_the_allocator_did_not_give_it_property(
    body: bytes, allocated: bool | None
) -> None:
    clauses = [v.clause for v in check_handed_body(body, _NO_METADATA, from_allocator=allocated)]
    assert clauses == (["REJIT-37"] if allocated is False else [])  # None: not known, nothing said
