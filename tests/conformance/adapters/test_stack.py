"""conformance.adapters.stack: recorded DoStackSnapshot walks -> the DoStackSnapshot model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clr_model.hresults import HResult
from clr_model.stacksnapshot import (
    CallbackBehaviour,
    ManagedFrame,
    SnapshotInput,
    ThreadState,
    UnmanagedFrame,
    seed_for,
)
from conformance.adapters.identity import FunctionIdentities, ObservedNames
from conformance.adapters.stack import (
    WalkInputError,
    WalkRequest,
    compare_walk,
    find_walk,
    need_walk,
    plan_value,
    reflection_frames,
    summary,
    thread_from_reflection,
)
from conformance.core.trace import RECORD_ADAPTER, Trace

E_FAIL = int(HResult.E_FAIL)


def frame(method: str, token: int, pinvoke: bool = False) -> dict[str, Any]:
    return {"token": token, "type": "N.T", "method": method, "module": "app.dll", "pinvoke": pinvoke}


TRUTH = reflection_frames([frame("Leaf", 0x06000006), frame("Main", 0x06000003)], "test")


def test_thread_from_reflection_puts_every_kind_of_code_in_its_place() -> None:
    ids = FunctionIdentities()
    above = reflection_frames([frame("mark", 0x06000030, pinvoke=True), frame("Mark", 0x06000031)], "t")
    # Leaf called back from native code (a reverse P/Invoke) below the P/Invoke method call_back
    reverse = reflection_frames(
        [frame("Leaf", 0x06000006), frame("call_back", 0x06000001, pinvoke=True), frame("Main", 0x06000003)],
        "t",
    )
    thread = thread_from_reflection(reverse, ids, above=above, native_after=0)
    kinds = [f.kind for f in thread.frames]
    assert kinds == ["pinvoke", "managed", "managed", "native", "pinvoke", "managed", "native"]
    assert [ids.label(f.function_id) for f in thread.frames if isinstance(f, ManagedFrame)] == [
        "N.T::Mark",
        "N.T::Leaf",
        "N.T::Main",
    ]
    assert len({f.ip for f in thread.frames}) == len(thread.frames)  # distinct synthetic addresses
    helper = thread_from_reflection(TRUTH, FunctionIdentities(), helper_on_top=True)
    assert [f.kind for f in helper.frames] == ["helper", "managed", "managed", "native"]
    seed = seed_for(helper)  # the documented seed procedure finds the first managed frame
    assert seed is not None and seed.ip == helper.frames[1].ip


@pytest.mark.parametrize(
    ("stack", "native_after", "starts"),
    [
        # a reverse P/Invoke (Leaf called back from below call_back) that nativeAfter does not name
        ([("Leaf", False), ("call_back", True), ("Main", False)], -1, "0"),
        # nativeAfter doctored to another frame
        ([("Leaf", False), ("call_back", True), ("Main", False)], 1, "0"),
        # nativeAfter where no managed frame is followed by P/Invoke code
        ([("Leaf", False), ("Main", False)], 0, "none"),
    ],
)
def test_X10_native_after_must_agree_with_the_pinvoke_frames(
    stack: list[tuple[str, bool]], native_after: int, starts: str
) -> None:
    """One truth per fact: nativeAfter is the first managed frame followed by a P/Invoke frame (else -1)."""
    truth = reflection_frames([frame(m, 0x06000010 + n, p) for n, (m, p) in enumerate(stack)], "t")
    with pytest.raises(
        WalkInputError,
        match=rf"^mark 'm': nativeAfter {native_after} disagrees with the P/Invoke frames"
        rf" \(.*index: {starts}\)$",
    ):
        thread_from_reflection(truth, FunctionIdentities(), native_after=native_after, where="mark 'm'")
    # the scenario's own account (not given: no check) and the agreeing one are accepted
    thread_from_reflection(truth, FunctionIdentities())


def test_DSS15_a_dispatched_frame_has_the_runtimes_native_code_below_it() -> None:
    """A filter funclet (frame 0, Leaf) is called by the first pass of exception dispatch: native code lies
    between it and the frame that threw (frame 1, Leaf again), where StackTrace shows nothing."""
    truth = reflection_frames([frame("Leaf", 0x06000006), frame("Leaf", 0x06000006), frame("Main", 3)], "t")
    thread = thread_from_reflection(truth, FunctionIdentities(), dispatched=(0,))
    assert [f.kind for f in thread.frames] == ["managed", "native", "managed", "managed", "native"]
    assert [f.kind for f in thread_from_reflection(truth, FunctionIdentities()).frames] == [
        "managed",
        "managed",
        "managed",
        "native",
    ]


@pytest.mark.parametrize("index", [-1, 2, 5])
def test_DSS15_a_dispatched_index_must_name_a_managed_frame_with_a_caller(index: int) -> None:
    truth = reflection_frames(
        [frame("Leaf", 0x06000006), frame("call_back", 1, pinvoke=True), frame("M", 3)], "t"
    )
    with pytest.raises(
        WalkInputError, match=rf"^mark 'm': dispatched frame index {index} is not a managed frame"
    ):
        thread_from_reflection(truth, FunctionIdentities(), dispatched=(index,), where="mark 'm'")
    with pytest.raises(WalkInputError, match="dispatched frame index 1 is not a managed frame"):
        thread_from_reflection(truth, FunctionIdentities(), dispatched=(1,))  # the P/Invoke frame


def test_reflection_frames_reject_bad_entries_in_one_line() -> None:
    with pytest.raises(WalkInputError, match="where: a list of frames is needed"):
        reflection_frames({"x": 1}, "where")
    with pytest.raises(WalkInputError, match="where: frame 1 is not an object"):
        reflection_frames([frame("a", 1), 3], "where")


PLAN = {
    "experiments": [
        {
            "id": "abort",
            "at": "mark:walk-now",
            "args": {"abortAt": 2, "abortReply": E_FAIL, "infoFlags": 1},
        },
        {"id": "plain", "at": "ExceptionThrown", "args": {}},
    ]
}


def test_a_walk_request_reads_the_plan_not_the_probe() -> None:
    request = WalkRequest.from_plan(PLAN, "abort")
    assert request.at == "mark:walk-now"
    assert request.callback() == CallbackBehaviour(returns=(0, 0, E_FAIL))
    assert WalkRequest.from_plan(PLAN, "plain").callback() == CallbackBehaviour()
    with pytest.raises(WalkInputError, match="the plan has no experiment entry 'gone'"):
        WalkRequest.from_plan(PLAN, "gone")


def test_plan_values_are_numbers_of_the_resolved_plan() -> None:
    assert plan_value(5, "x") == 5
    with pytest.raises(WalkInputError, match=r"plan entry 'a' args\.b: 'E_FAIL' is not a number"):
        plan_value("E_FAIL", "plan entry 'a' args.b")
    with pytest.raises(WalkInputError, match="is not a number"):
        plan_value(True, "x")


class Records:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = [{"seq": 0, "kind": "header", "os_tid": 1, "probe": "t", "pid": 1}]

    def add(self, kind: str, **fields: Any) -> None:
        self.rows.append({"seq": len(self.rows), "kind": kind, "os_tid": 1, **fields})

    def walk(self, experiment: str, walk: int, funcs: list[int], hr: int = 0, **args: Any) -> None:
        for i, f in enumerate(funcs):
            self.add("frame", walk=walk, index=i, funcId=f, ip=0x1000 + i, clientData=7, hr=0)
        known = {0x50: (0x06000006, "Leaf"), 0x60: (0x06000003, "Main")}
        resolved = [
            {"funcId": f, "module": "/r/app.dll", "token": known[f][0], "type": "N.T", "method": known[f][1]}
            for f in funcs
            if f in known
        ]
        self.add(
            "call",
            name="DoStackSnapshot",
            experiment=experiment,
            args={"walk": walk, "infoFlags": 0, "clientData": 7, **args},
            out={"frames": resolved},
            hr=hr,
        )

    def trace(self) -> Trace:
        return Trace(path=Path("t.jsonl"), records=[RECORD_ADAPTER.validate_python(r) for r in self.rows])


def test_find_walk_skips_capture_walks_and_filters_by_role() -> None:
    r = Records()
    r.walk("x", 0, [0x50], purpose="capture")
    r.walk("x", 1, [0x50, 0x60, 0], role="a")
    r.walk("x", 2, [0x60], role="b")
    r.add("probe_error", where="y", what="the target never registered")
    trace = r.trace()
    assert [f.index for f in need_walk(trace, "x").frames] == [0, 1, 2]
    found = find_walk(trace, "x", "b")
    assert found is not None and found.call.args["walk"] == 2
    assert find_walk(trace, "x", "c") is None
    with pytest.raises(WalkInputError, match=r"experiment x \(c\)$"):
        need_walk(trace, "x", "c")
    with pytest.raises(WalkInputError, match="experiment y: the probe says the target never registered"):
        need_walk(trace, "y")


def test_compare_walk_gives_every_violation_as_a_stable_line_and_a_picture() -> None:
    r = Records()
    r.walk("x", 0, [0x60, 0x50, 0])  # Main before Leaf
    trace = r.trace()
    ids = FunctionIdentities()
    thread = thread_from_reflection(TRUTH, ids)
    inp = SnapshotInput(thread=thread, state=ThreadState.CURRENT_OUTSIDE_CALLBACK, client_data=7)
    check = compare_walk("x", need_walk(trace, "x"), inp, ids, ObservedNames.from_trace(trace))
    assert check.lines() == [
        "x: DSS-16 at #1: T::Leaf comes out of order: the model has it at #0 (leaf first)"
    ]
    assert check.lines(["DSS-04"]) == []
    assert check.observed_text == "0x00000000 S_OK, 3 callback(s): T::Main > T::Leaf > [unmanaged]"
    assert check.expected_text == "0x00000000 S_OK, 3 callback(s): T::Leaf > T::Main > [unmanaged]"
    assert [p["ok"] for p in check.picture()] == [True, False, True]


def test_compare_walk_uses_the_plans_callback_replies() -> None:
    r = Records()
    r.walk("x", 0, [0x50, 0x60, 0])  # the whole walk, although the plan's callback stops at #1
    trace = r.trace()
    ids = FunctionIdentities()
    inp = SnapshotInput(
        thread=thread_from_reflection(TRUTH, ids),
        state=ThreadState.CURRENT_OUTSIDE_CALLBACK,
        client_data=7,
        callback=CallbackBehaviour(returns=(0, E_FAIL)),
    )
    check = compare_walk("x", need_walk(trace, "x"), inp, ids, ObservedNames.from_trace(trace))
    assert [v.clause for v in check.violations] == ["DSS-26", "DSS-26", "DSS-26"]


def test_summary_names_functions_shortly() -> None:
    assert summary(0, []) == "0x00000000 S_OK, 0 callback(s): no callback"
    assert (
        summary(E_FAIL, ["A.B::C", "[unmanaged]"]) == "0x80004005 E_FAIL, 2 callback(s): B::C > [unmanaged]"
    )


def test_thread_models_carry_only_synthetic_frames() -> None:
    thread = thread_from_reflection(TRUTH, FunctionIdentities())
    assert all(isinstance(f, ManagedFrame | UnmanagedFrame) for f in thread.frames)


def test_the_adapters_import_neither_the_suite_nor_the_cli() -> None:
    """The emulator and the validator import the adapters: they must not pull in the suite or the CLI."""
    code = (
        "import sys, conformance.adapters.stack, conformance.adapters.identity\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('conformance.suite', 'conformance.cli',"
        " 'conformance.checks')))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
