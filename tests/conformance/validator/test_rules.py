"""The validator's rules on synthetic proxy recordings (no runtime): the rules issue 10's fixtures rely on,
each shown both to find its fault and to stay quiet on the lawful sequence next to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.core.errors import HarnessError
from conformance.core.findings import Finding
from conformance.core.hangs import ThreadReport
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.symbols import symbol_at
from conformance.core.trace import read_trace
from conformance.validator.hooks import (
    HookCheck,
    HookChecks,
    RegisteredHook,
    fault_line,
    registered_hooks,
    run_checker,
)
from conformance.validator.recording import Recording, read_recording
from conformance.validator.rules import check_recording, hook_abi, judge_run
from emu.hookcheck import HookFinding
from tests.conformance.validator.fixtures import build_fixture

S_OK = 0
E_FAIL = 0x80004005
MAIN, SAMPLER = 100, 200


def _recording(tmp_path: Path, records: list[dict[str, Any]]) -> tuple[Recording, RunResult]:
    """The records (seq, os_tid and tid filled in) as a proxy trace, read back, with a run that ended well."""
    path = tmp_path / "trace.jsonl"
    lines = [
        {
            "seq": 0,
            "kind": "header",
            "os_tid": MAIN,
            "tid": None,
            "probe": "profharness-proxy 1",
            "pid": 1,
            "proxy": {"callbackLevel": 11},
        }
    ]
    for k, rec in enumerate(records, start=1):
        lines.append({"seq": k, "os_tid": MAIN, "tid": None, **rec})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = RunResult(
        scenario="synthetic",
        runtime="0.0.0",
        runtime_source="test",
        outcome=RunOutcome.OK,
        seconds=0.0,
        run_dir=tmp_path,
        trace_path=path,
    )
    return read_recording(read_trace(path, strict=True)), run


def _callback(name: str, phase: str, hr: int | None = None, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "callback", "name": name, "phase": phase, "args": {}, **extra}
    if hr is not None:
        rec["hr"] = hr
    return rec


def _call(name: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "call", "name": name, "args": {}, "out": {}, "hr": S_OK, **extra}


def test_VAL_LOAD_initialize_that_fails_is_a_finding(tmp_path: Path) -> None:
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", E_FAIL)]
    )
    found = check_recording(rec, run)
    (finding,) = [f for f in found if not f.note]
    assert finding.clause == "VAL-LOAD" and "0x80004005" in finding.message and finding.records == [2]
    # the profiler implements ICorProfilerCallback3 (callbackLevel 11): it may be attach-only (a note)
    assert [f.clause for f in found if f.note] == ["VAL-ATTACH-ONLY"]
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK)]
    )
    assert check_recording(rec, run) == []


def test_SHD_01_any_call_after_shutdown_inside_a_late_callback_or_not(tmp_path: Path) -> None:
    """The Shutdown page: "Any calls to ICorProfilerInfo methods result in undefined behavior after the
    Shutdown method returns", and of the immutable events that may still arrive: "the profiler should take
    care to return immediately". 3.1 calls ThreadCreated after Shutdown: a call inside it is a finding too."""
    inside = [
        _callback("ThreadCreated", "enter"),
        _call("GetCurrentThreadID", afterShutdown=True),
        _callback("ThreadCreated", "return", S_OK),
    ]
    rec, run = _recording(tmp_path, inside)
    (finding,) = check_recording(rec, run)
    assert finding.clause == "SHD-01" and finding.callback == "ThreadCreated" and finding.records == [2]
    assert "inside ThreadCreated" in finding.message
    rec, run = _recording(tmp_path, [{**_call("GetEventMask", afterShutdown=True), "os_tid": SAMPLER}])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "SHD-01" and finding.thread == SAMPLER
    assert "outside any callback" in finding.message
    rec, run = _recording(tmp_path, [_call("GetEventMask")])
    assert check_recording(rec, run) == []


def test_SHD_02_a_call_inside_shutdown(tmp_path: Path) -> None:
    """The Shutdown page: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
    after the Shutdown method is called." Inside Shutdown (its stack says so); Release is the cleanup; before
    Shutdown, nothing; another thread's call while it runs is not judged."""
    inside = [
        _callback("Shutdown", "enter"),
        _call("GetModuleInfo"),
        _call("QueryInterface"),
        _call("Release", out={"refs": 0}),
        _callback("Shutdown", "return", S_OK),
    ]
    rec, run = _recording(tmp_path, inside)
    (finding,) = check_recording(rec, run)
    assert finding.clause == "SHD-02" and finding.callback == "Shutdown" and finding.records == [2]
    assert "inside Shutdown" in finding.message
    rec, run = _recording(tmp_path, [
        _callback("Shutdown", "enter"),
        {**_call("SetEventMask2"), "os_tid": SAMPLER},
        _callback("Shutdown", "return", S_OK),
    ])
    assert check_recording(rec, run) == []
    release = _call("Release", out={"refs": 0})
    rec, run = _recording(tmp_path, [_call("GetModuleInfo"), _callback("Shutdown", "enter"), release,
                                     _callback("Shutdown", "return", S_OK)])
    assert check_recording(rec, run) == []


def test_VAL_RELEASED_INFO_the_initialize_argument_is_borrowed_until_it_returns(tmp_path: Path) -> None:
    """A profiler that probes every ICorProfilerInfo version through Initialize's IUnknown, releasing each
    (the runtime's count falls to 0), then asks again: the argument is the runtime's reference for the whole
    call, so nothing is wrong. Released to 0 in Initialize and used after it returned: the finding."""
    probe = [_callback("Initialize", "enter"), _call("QueryInterface"), _call("Release", out={"refs": 0}),
             _call("QueryInterface", hr=E_FAIL)]
    rec, run = _recording(tmp_path, [*probe, _callback("Initialize", "return", S_OK)])
    assert check_recording(rec, run) == []
    rec, run = _recording(tmp_path, [*probe, _callback("Initialize", "return", S_OK), _call("GetEventMask")])
    (finding,) = [f for f in check_recording(rec, run) if not f.note]
    assert finding.clause == "VAL-RELEASED-INFO" and finding.records == [6, 3]


def test_DYN_01_a_dynamic_methods_function_id_resolved_to_a_token(tmp_path: Path) -> None:
    """"functionId values cannot be used to resolve to their metadata tokens, because dynamic methods have no
    metadata": GetTokenAndMetaDataFromFunction given the FunctionID a dynamic-method JIT callback handed out,
    inside it or later; an ordinary method's FunctionID is fine."""
    stub = [_callback("DynamicMethodJITCompilationStarted", "enter", args={"functionId": 0x7700}),
            _callback("DynamicMethodJITCompilationStarted", "return", S_OK, args={"functionId": 0x7700})]
    lookups = [_call("GetTokenAndMetaDataFromFunction", args={"functionId": f}) for f in (0x7700, 0x8800)]
    rec, run = _recording(tmp_path, [*stub, *lookups])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "DYN-01" and finding.records == [3, 1]


def test_MAP_01_02_a_mapper_set_again_after_it_was_set(tmp_path: Path) -> None:
    """"The FunctionIDMapper can be set only once" (and "The FunctionIDMapper2 method can be set only once"):
    a second call after one that succeeded, at the second; a first that failed may be retried."""
    rec, run = _recording(tmp_path, [_call("SetFunctionIDMapper"), _call("SetFunctionIDMapper2"),
                                     _call("SetFunctionIDMapper")])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "MAP-01" and finding.records == [3, 1]
    rec, run = _recording(tmp_path, [_call("SetFunctionIDMapper2", hr=E_FAIL), _call("SetFunctionIDMapper2")])
    assert check_recording(rec, run) == []
    rec, run = _recording(tmp_path, [_call("SetFunctionIDMapper2"), _call("SetFunctionIDMapper2")])
    assert [f.clause for f in check_recording(rec, run)] == ["MAP-02"]


def test_ICT_01_initialize_current_thread_while_the_runtime_is_suspended(tmp_path: Path) -> None:
    """"Call InitializeCurrentThread only when there are no suspended threads": between a SuspendRuntime that
    succeeded and its ResumeRuntime; before the suspension or after the resume, nothing."""
    def sampler(*records: dict[str, Any]) -> list[dict[str, Any]]:
        return [{**r, "os_tid": SAMPLER} for r in records]

    suspend = [_call("SuspendRuntime", phase="enter"), _call("SuspendRuntime", phase="return")]
    resume = [_call("ResumeRuntime", phase="enter"), _call("ResumeRuntime", phase="return")]
    rec, run = _recording(tmp_path, sampler(*suspend, _call("InitializeCurrentThread"), *resume))
    (finding,) = check_recording(rec, run)
    assert finding.clause == "ICT-01" and finding.records == [3, 2]
    rec, run = _recording(tmp_path, sampler(_call("InitializeCurrentThread"), *suspend, *resume,
                                            _call("InitializeCurrentThread")))
    assert check_recording(rec, run) == []
    failed = [_call("SuspendRuntime", phase="enter"), _call("SuspendRuntime", phase="return", hr=E_FAIL)]
    rec, run = _recording(tmp_path, sampler(*failed, _call("InitializeCurrentThread")))
    assert check_recording(rec, run) == []


def test_DSS_22_suspend_runtime_from_a_managed_thread_not_from_a_native_one(tmp_path: Path) -> None:
    native = [
        {**_call("SuspendRuntime", phase="enter"), "os_tid": SAMPLER},
        {**_call("SuspendRuntime", phase="return"), "os_tid": SAMPLER},
        {**_call("ResumeRuntime", phase="enter"), "os_tid": SAMPLER},
        {**_call("ResumeRuntime", phase="return"), "os_tid": SAMPLER},
    ]
    rec, run = _recording(tmp_path, native)
    assert check_recording(rec, run) == []
    managed = [{**r, "os_tid": MAIN, "tid": 0x5000} for r in native]
    rec, run = _recording(tmp_path, managed)
    assert [f.clause for f in check_recording(rec, run)] == ["DSS-22"]


def test_DSS_23_walk_after_thread_destroyed_returned(tmp_path: Path) -> None:
    worker = {"os_tid": 300, "tid": 0x7000}
    destroyed = [
        {**_callback("ThreadDestroyed", "enter", args={"threadId": 0x7000}), **worker},
        {**_callback("ThreadDestroyed", "return", S_OK), **worker},
    ]
    walk = [
        {**_call("SuspendRuntime", phase="enter"), "os_tid": SAMPLER},
        {**_call("SuspendRuntime", phase="return"), "os_tid": SAMPLER},
        {**_call("DoStackSnapshot", phase="enter", args={"thread": 0x7000}), "os_tid": SAMPLER},
        {**_call("DoStackSnapshot", phase="return", args={"thread": 0x7000}), "os_tid": SAMPLER},
    ]
    rec, run = _recording(tmp_path, [*walk, *destroyed])  # the walk ends before ThreadDestroyed
    assert check_recording(rec, run) == []
    rec, run = _recording(tmp_path, [*destroyed, *walk])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "DSS-23" and finding.thread == SAMPLER


def test_FE2_hook_faults_come_from_the_checker_at_the_registration(tmp_path: Path) -> None:
    hook = {"address": 0x7F0000001000, "module": "/nowhere/libp.so", "offset": 0x1000, "symbol": "enter2"}
    registration = _call(
        "SetEnterLeaveFunctionHooks2",
        args={"pFuncEnter": hook, "pFuncLeave": {"address": 0}, "pFuncTailcall": {"address": 0}},
    )
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), registration, _callback("Initialize", "return", S_OK)]
    )
    (found,) = registered_hooks(rec)
    assert (found.parameter, found.symbol, found.offset) == ("pFuncEnter", "enter2", 0x1000)
    hooks = judge_run(run, lambda f: None).hooks
    assert [(h.parameter, h.index, callback) for h, callback in hooks] == [("pFuncEnter", 2, "Initialize")]

    class Answers(HookChecks):
        def __init__(self, answer: HookCheck) -> None:
            super().__init__()
            self.answer = answer

        def check(self, hook: RegisteredHook) -> HookCheck:
            return self.answer

    rbx = HookFinding(clause="FE2-08", rule="register-preserved", detail="RBX not preserved",
                      register_name="RBX", before=1, after=2)
    faulty = HookCheck("/nowhere/libp.so", "enter2", faults=(rbx,))
    findings, notes = hook_abi(hooks, run, Answers(faulty))
    assert [(f.clause, f.records, f.callback) for f in findings] == [
        ("FE2-08", [2], "Initialize")
    ] and not notes
    findings, notes = hook_abi(hooks, run, Answers(HookCheck("/nowhere/libp.so", "enter2")))
    assert findings == [] and notes == []
    findings, notes = hook_abi(hooks, run, Answers(HookCheck("/nowhere/libp.so", None, problem="stripped")))
    assert findings == [] and notes == [
        "SetEnterLeaveFunctionHooks2 pFuncEnter 0x7f0000001000 not checked: stripped"
    ]


def test_a_hook_without_a_dynamic_symbol_is_named_from_the_symbol_table() -> None:
    from elftools.elf.elffile import ELFFile

    so = build_fixture("correct")  # its hooks are in an anonymous namespace: .symtab only
    with so.open("rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        enter2 = next(s for s in symtab.iter_symbols() if "enter2" in s.name)  # type: ignore[union-attr]
    assert symbol_at(so, int(enter2["st_value"])) == enter2.name
    assert symbol_at(so, 1) is None


def test_a_hook_the_checker_cannot_read_is_a_note_not_a_finding(tmp_path: Path) -> None:
    so = build_fixture("bad_hook")
    refused = run_checker(so, "no_such_hook")
    assert refused.faults == () and refused.problem is not None and "no_such_hook" in refused.problem
    hook = RegisteredHook(
        "SetEnterLeaveFunctionHooks2", "pFuncEnter", 0, 0x1000, str(tmp_path / "gone.so"), 0, "f"
    )
    assert HookChecks().check(hook).problem == f"{tmp_path / 'gone.so'}: no such file to read"


def test_FE2_08_the_checker_finds_the_clobbered_register_in_the_fixture_hook() -> None:
    answer = run_checker(build_fixture("bad_hook"), "fixture_bad_enter2")
    assert answer.problem is None
    assert [f.clause for f in answer.faults] == ["FE2-08"] and "RBX" in fault_line(answer.faults[0])


def test_VAL_HANG_from_the_proxys_watchdog_cites_its_mark_and_limit_not_the_kill(tmp_path: Path) -> None:
    """The proxy's watchdog saw a callback open past its limit: it wrote ``proxy.hang`` and SIGKILLed the
    process. One VAL-HANG citing that mark (busy time, limit, the stuck thread and callback), never the
    harness's "hung and was killed by the watchdog" nor a VAL-CRASH for the SIGKILL it sent itself."""
    hang = {"kind": "mark", "name": "proxy.hang", "payload": None, "stuckOsTid": SAMPLER, "busyMs": 10042,
            "limitMs": 10000, "threads": [
                {"osTid": MAIN, "callbacks": [], "lastCallback": "Initialize", "stack": None},
                {"osTid": SAMPLER, "callbacks": ["GarbageCollectionFinished"], "stack": None}]}  # fmt: skip
    rec, run = _recording(
        tmp_path,
        [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK),
         _callback("GarbageCollectionFinished", "enter", os_tid=SAMPLER), hang],
    )  # fmt: skip
    killed = run.model_copy(update={"outcome": RunOutcome.KILLED, "signal": "SIGKILL"})
    (finding,) = check_recording(rec, killed)
    assert finding.clause == "VAL-HANG" and finding.records == [4]
    assert finding.thread == SAMPLER and finding.callback == "GarbageCollectionFinished"
    assert finding.message.startswith(f"a callback ran 10042 ms (limit 10000 ms) on thread {SAMPLER}; ")
    hang_in_call = {**hang, "open": "call", "openName": "SuspendRuntime"}
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK), hang_in_call]
    )
    (finding,) = check_recording(rec, killed.model_copy(update={"trace_path": run.trace_path}))
    expected = f"call SuspendRuntime ran 10042 ms (limit 10000 ms) on thread {SAMPLER}"
    assert finding.message.startswith(expected)
    rec, run = _recording(
        tmp_path,
        [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK),
         _callback("GarbageCollectionFinished", "enter", os_tid=SAMPLER), hang],
    )  # fmt: skip
    assert "watchdog" not in finding.message
    # the harness's watchdog on the same recording without the proxy's mark: no records, its own words
    rec, run = _recording(
        tmp_path,
        [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK),
         _callback("GarbageCollectionFinished", "enter", os_tid=SAMPLER)],
    )  # fmt: skip
    (finding,) = check_recording(rec, run.model_copy(update={"outcome": RunOutcome.HUNG}))
    assert finding.clause == "VAL-HANG" and finding.records == [] and "limit" not in finding.message
    assert "hung and was killed by the watchdog" in finding.message
    assert finding.thread == SAMPLER and finding.callback == "GarbageCollectionFinished"


def test_VAL_HANG_from_the_harness_watchdog_carries_every_thread_it_reported(tmp_path: Path) -> None:
    """The proxy's own watchdog saw nothing open (a profiler thread stuck in SuspendRuntime, outside any
    callback): the harness's watchdog report names each thread, its open call and its native stack."""
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK)]
    )
    threads = (
        ThreadReport(os_tid=MAIN, name="dotnet", state="S", wchan="futex", last_callback="Initialize",
                     frames=("0x1 in futex_wait () from libc.so.6", "0x2 in Main ()")),
        ThreadReport(os_tid=SAMPLER, name="sampler", state="S", wchan="futex", open_call="SuspendRuntime",
                     frames=("0x3 in futex_wait () from libc.so.6", "0x4 in SuspendRuntime ()")),
    )  # fmt: skip
    hung = run.model_copy(update={"outcome": RunOutcome.HUNG, "threads": threads})
    (finding,) = check_recording(rec, hung)
    assert finding.clause == "VAL-HANG" and finding.thread == SAMPLER
    assert (
        f"{MAIN} dotnet: Initialize (0x1 in futex_wait () from libc.so.6 < 0x2 in Main ())" in finding.message
    )
    assert f"{SAMPLER} sampler: - in SuspendRuntime (0x3 in futex_wait" in finding.message
    # the harness's watchdog (the run's time limit) with nothing open: a note, no callback blamed
    no_report = run.model_copy(update={"outcome": RunOutcome.HUNG, "threads_problem": "gdb is not installed"})
    assert check_recording(rec, no_report) == []
    judged = judge_run(no_report, lambda f: None)
    assert judged.note is not None and "time limit" in judged.note and "no rule blames one" in judged.note


CALL_ONLY_FROM_INIT = 0x80131356


@pytest.mark.parametrize(
    ("before", "hr", "found"),
    [
        ([], CALL_ONLY_FROM_INIT, True),  # refused, after Initialize returned
        ([_callback("InitializeForAttach", "enter")], CALL_ONLY_FROM_INIT, True),  # attach: refused too
        ([_callback("Initialize", "enter")], S_OK, False),  # inside Initialize
        ([], S_OK, False),  # accepted (a profiler thread in the window before the runtime marks it active)
        ([], 1 << 40, False),  # no 32-bit HRESULT: not judged, and no traceback
    ],
)
def test_SEL_01_hooks_registered_outside_initialize_that_the_runtime_refused(
    tmp_path: Path, before: list[dict[str, Any]], hr: int, found: bool
) -> None:
    init = [_callback("Initialize", "enter"), _callback("Initialize", "return", S_OK)]
    opened = before if before and before[0]["name"] == "Initialize" else [*init, *before]
    records = [*opened, _call("SetEnterLeaveFunctionHooks3", hr=hr)]
    if hr < 1 << 32:
        run = _recording(tmp_path, records)[1]
    else:  # the strict trace reader refuses it: judge the file as validate does, streaming
        run = _recording(tmp_path, records[:-1])[1]
        with run.trace_path.open("a") as fh:
            fh.write(json.dumps({"seq": len(records), "os_tid": MAIN, "tid": None, **records[-1]}) + "\n")
    seen: list[Finding] = []
    judge_run(run, seen.append)
    assert [f.clause for f in seen] == (["SEL-01"] if found else []), seen


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"kind": "call"}, "name"),
        ({"kind": "call", "name": ["GetObjectSize"]}, "name"),
        ({"kind": "call", "name": "GetObjectSize", "os_tid": None}, "os_tid"),
        ({"kind": "call", "name": "GetObjectSize", "tid": [1]}, "tid"),
        ({"kind": "call", "name": "DoStackSnapshot", "phase": None}, "phase"),
    ],
)
def test_a_record_with_fields_of_the_wrong_type_is_one_line_naming_file_line_and_field(
    tmp_path: Path, record: dict[str, Any], field: str
) -> None:
    run = _recording(tmp_path, [])[1]
    with run.trace_path.open("a") as fh:
        fh.write(json.dumps({"seq": 1, "os_tid": MAIN, "tid": None, **record}) + "\n")
    with pytest.raises(HarnessError) as err:
        judge_run(run, [].append)
    assert str(err.value).startswith(f"{run.trace_path}:2: a call record with a bad {field} (")


def _mask(low: int, hr: int = S_OK) -> dict[str, Any]:
    return _call("SetEventMask", args={"dwEvents": low}, hr=hr)


def test_INI_01_immutable_flags_change_only_inside_Initialize(tmp_path: Path) -> None:
    """Inside Initialize any mask; after it, mutable bits may change (COR_PRF_MONITOR_GC) but an immutable one
    set or cleared is a finding naming it, with the runtime's answer."""
    from clr_model.flags import CorPrfMonitor

    enable_alloc = int(CorPrfMonitor.COR_PRF_ENABLE_OBJECT_ALLOCATED)
    monitor_gc = int(CorPrfMonitor.COR_PRF_MONITOR_GC)
    disable_inlining = int(CorPrfMonitor.COR_PRF_DISABLE_INLINING)
    rec, run = _recording(tmp_path, [
        _callback("Initialize", "enter"), _mask(disable_inlining), _callback("Initialize", "return", S_OK),
        _mask(disable_inlining | monitor_gc),  # mutable only: fine
        _mask(disable_inlining | enable_alloc, hr=E_FAIL),  # sets one
        _mask(0, hr=E_FAIL),  # clears one
    ])  # fmt: skip
    found = [f for f in check_recording(rec, run) if f.clause == "INI-01"]
    assert [f.records for f in found] == [[5], [6]], found
    assert "sets COR_PRF_ENABLE_OBJECT_ALLOCATED" in found[0].message and "0x80004005" in found[0].message
    assert "clears COR_PRF_DISABLE_INLINING" in found[1].message, found[1]


def test_FGC_01_ForceGC_inside_a_callback_is_a_finding_and_on_a_thread_of_its_own_is_not(
    tmp_path: Path,
) -> None:
    rec, run = _recording(tmp_path, [
        _callback("ModuleLoadFinished", "enter"), _call("ForceGC"), _callback("ModuleLoadFinished", "return"),
        _call("ForceGC", os_tid=MAIN + 7),  # the profiler's own thread, nothing open on it
    ])  # fmt: skip
    (finding,) = [f for f in check_recording(rec, run) if f.clause == "FGC-01"]
    assert finding.records == [2] and finding.callback == "ModuleLoadFinished", finding
    assert "ForceGC called inside ModuleLoadFinished" in finding.message


def test_FE2_05_a_returned_enter_hooks_frame_info_is_a_finding_and_the_hooks_own_is_not(
    tmp_path: Path,
) -> None:
    """FE2-05: GetFunctionInfo2 inside FunctionLeave2 given the frame info of a FunctionEnter2 that returned
    (the proxy's staleFrameInfo) is a finding naming the hook's FunctionID; given its own hook's func, or
    0, it is not."""
    leave = {"funcId": 0x5000, "clientData": 0, "func": 0x7FF0, "retvalRange": 0x7FE0}
    stale = {"hook": "FunctionEnter2", "funcId": 0x5000, "returnedAgo": 2}

    def info2(frame_info: int, **extra: Any) -> dict[str, Any]:
        return _call("GetFunctionInfo2", args={"funcId": 0x5000, "frameInfo": frame_info}, **extra)

    rec, run = _recording(tmp_path, [
        _callback("FunctionLeave2", "enter", args=leave, hook=True),
        info2(0x7FF0), info2(0), info2(0x7A00, staleFrameInfo=stale),
        _callback("FunctionLeave2", "return", hook=True),
    ])  # fmt: skip
    (finding,) = [f for f in check_recording(rec, run) if f.clause == "FE2-05"]
    assert finding.records == [4] and finding.callback == "FunctionLeave2", finding
    assert "frame info 0x7a00, the func of the FunctionEnter2 hook of FunctionID 0x5000" in finding.message
    assert "2 FunctionEnter2 hooks ago" in finding.message


def test_SSC_01_a_returned_walk_callbacks_frame_info_is_a_finding_and_an_open_one_is_not(
    tmp_path: Path,
) -> None:
    """SSC-01: GetFunctionInfo2 after DoStackSnapshot returned, given the frame info a StackSnapshotCallback
    was given (the proxy's staleFrameInfo, holder StackSnapshotCallback) is a finding under SSC-01, not
    FE2-05; the same value inside the callback (open) is not. The message names no frame's function: a walk's
    callbacks are often given one address for every frame."""
    stale = {"hook": "StackSnapshotCallback", "funcId": 0x6000, "returnedAgo": 1}

    def info2(frame_info: int, **extra: Any) -> dict[str, Any]:
        return _call("GetFunctionInfo2", args={"funcId": 0x6000, "frameInfo": frame_info}, **extra)

    rec, run = _recording(tmp_path, [
        _callback("ExceptionThrown", "enter"),
        _callback("StackSnapshotCallback", "enter", args={"funcId": 0x6000, "ip": 0x1234}),
        info2(0x7F00), _callback("StackSnapshotCallback", "return"),
        info2(0x7F00, staleFrameInfo=stale),
        _callback("ExceptionThrown", "return"),
    ])  # fmt: skip
    findings = check_recording(rec, run)
    (finding,) = [f for f in findings if f.clause == "SSC-01"]
    assert not [f for f in findings if f.clause == "FE2-05"], findings
    assert finding.records == [5] and finding.callback == "ExceptionThrown", finding
    assert "the frameInfo a StackSnapshotCallback of a DoStackSnapshot walk on this thread was given" in (
        finding.message
    )
    assert "the last walk callback to return" in finding.message


def test_FE3_01_a_returned_withinfo_hooks_frame_info_is_a_finding_under_its_getter(
    tmp_path: Path,
) -> None:
    """FE3-01..03: GetFunctionInfo2 in a FunctionLeave3WithInfo hook given the frame info that
    GetFunctionEnter3Info handed out in a FunctionEnter3WithInfo hook that has returned (the proxy's
    staleFrameInfo, holder FunctionEnter3WithInfo) is a finding under the getter's clause, FE3-01, naming the
    FunctionID; the leave hook's own (open) is not."""
    stale = {"hook": "FunctionEnter3WithInfo", "funcId": 0x5100, "returnedAgo": 3}

    def info2(frame_info: int, **extra: Any) -> dict[str, Any]:
        return _call("GetFunctionInfo2", args={"funcId": 0x5100, "frameInfo": frame_info}, **extra)

    rec, run = _recording(tmp_path, [
        _callback("FunctionLeave3WithInfo", "enter", args={"functionIDOrClientID": 0x5100}, hook=True),
        info2(0x7E00), info2(0x7D00, staleFrameInfo=stale),
        _callback("FunctionLeave3WithInfo", "return", hook=True),
    ])  # fmt: skip
    findings = check_recording(rec, run)
    (finding,) = [f for f in findings if f.clause.startswith(("FE3-", "FE2-05", "SSC-"))]
    assert finding.clause == "FE3-01" and finding.records == [3], finding
    said = "which GetFunctionEnter3Info handed out for FunctionID 0x5100 inside a FunctionEnter3WithInfo hook"
    assert said in finding.message
    assert "3 FunctionEnter3WithInfo hooks ago" in finding.message


def test_FE3_04_to_06_getfunction3info_only_inside_its_own_hook_with_its_eltinfo(tmp_path: Path) -> None:
    """FE3-04..06: GetFunctionEnter3Info inside its FunctionEnter3WithInfo hook with that hook's eltInfo is
    not a finding; with another eltInfo, GetFunctionLeave3Info inside the enter hook, and
    GetFunctionTailcall3Info outside any hook are, each under its method's clause."""

    def get(name: str, elt: int) -> dict[str, Any]:
        return _call(name, args={"functionId": 0x5200, "eltInfo": elt})

    enter = {"functionIDOrClientID": 0x5200, "eltInfo": 0x7C00}
    rec, run = _recording(tmp_path, [
        _callback("FunctionEnter3WithInfo", "enter", args=enter, hook=True),
        get("GetFunctionEnter3Info", 0x7C00), get("GetFunctionEnter3Info", 0x7B00),
        get("GetFunctionLeave3Info", 0x7C00),
        _callback("FunctionEnter3WithInfo", "return", hook=True),
        get("GetFunctionTailcall3Info", 0x7C00),
    ])  # fmt: skip
    found = {f.clause: f for f in check_recording(rec, run) if f.clause.startswith("FE3-")}
    assert set(found) == {"FE3-04", "FE3-05", "FE3-06"}, found
    assert found["FE3-04"].records == [3], found["FE3-04"]
    assert "given eltInfo 0x7b00, not the 0x7c00" in found["FE3-04"].message
    assert "called inside a FunctionEnter3WithInfo hook" in found["FE3-05"].message
    assert found["FE3-06"].records == [6] and "outside any FunctionTailcall3WithInfo hook" in (
        found["FE3-06"].message
    )


def test_THD_01_an_information_request_about_the_destroyed_thread_inside_ThreadDestroyed(
    tmp_path: Path,
) -> None:
    """THD-01: inside ThreadDestroyed, GetThreadAppDomain given the ThreadID the callback hands out is a
    finding; the same request about another thread inside it, or about that thread before ThreadDestroyed
    and after it returned (not judged: the ID may be a new thread's), is not."""
    dying, other = 0x55E0, 0x55F0

    def domain(thread: int) -> dict[str, Any]:
        return _call("GetThreadAppDomain", args={"threadId": thread})

    rec, run = _recording(tmp_path, [
        domain(dying),
        _callback("ThreadDestroyed", "enter", args={"threadId": dying}),
        domain(other), domain(dying),
        _callback("ThreadDestroyed", "return"),
        domain(dying),
    ])  # fmt: skip
    (finding,) = [f for f in check_recording(rec, run) if f.clause == "THD-01"]
    assert finding.records == [4] and finding.callback == "ThreadDestroyed", finding
    assert f"GetThreadAppDomain is given threadId {dying:#x}, the ThreadID ThreadDestroyed hands out" in (
        finding.message
    )
    assert "the thread is destroyed and its ID no longer valid" in finding.message


def test_EXC_01_clause_info_only_between_a_clause_enter_and_its_leave(tmp_path: Path) -> None:
    """EXC-01: GetNotifiedExceptionClauseInfo in ExceptionSearchCatcherFound (no clause entered yet) is a
    finding; inside ExceptionCatcherEnter, between it and its Leave (in another callback), inside the Leave
    are not; after the Leave returned, and after a nested ExceptionThrown in the clause, it is again. A thread
    with no ExceptionThrown recorded is not judged."""
    clause = _call("GetNotifiedExceptionClauseInfo")
    rec, run = _recording(tmp_path, [
        clause,  # no exception recorded on the thread: not judged
        _callback("ExceptionThrown", "enter"), _callback("ExceptionThrown", "return"),
        _callback("ExceptionSearchCatcherFound", "enter"), clause,  # 5: finding
        _callback("ExceptionSearchCatcherFound", "return"),
        _callback("ExceptionCatcherEnter", "enter"), clause, _callback("ExceptionCatcherEnter", "return"),
        _callback("JITCompilationStarted", "enter"), clause, _callback("JITCompilationStarted", "return"),
        _callback("ExceptionThrown", "enter"), _callback("ExceptionThrown", "return"),
        clause,  # 15: a nested exception ended the clause's window
        _callback("ExceptionCatcherLeave", "enter"), clause, _callback("ExceptionCatcherLeave", "return"),
        clause,  # 19: after the Leave
    ])  # fmt: skip
    found = [f for f in check_recording(rec, run) if f.clause == "EXC-01"]
    assert sorted(r for f in found for r in f.records) == [5, 15, 19], found
    inside = [f for f in found if f.records == [5]]
    assert inside and "called inside ExceptionSearchCatcherFound" in inside[0].message


def test_TOK_01_02_lookups_by_token_inside_load_callbacks_are_notes(tmp_path: Path) -> None:
    """TOK-01/02: GetFunctionFromTokenAndTypeArgs inside ClassLoadFinished and GetClassFromTokenAndTypeArgs
    inside ModuleLoadFinished are notes (never failures); the same calls in JITCompilationStarted are
    nothing."""
    rec, run = _recording(tmp_path, [
        _callback("ClassLoadFinished", "enter"), _call("GetFunctionFromTokenAndTypeArgs"),
        _callback("ClassLoadFinished", "return"),
        _callback("ModuleLoadFinished", "enter"), _call("GetClassFromTokenAndTypeArgs"),
        _callback("ModuleLoadFinished", "return"),
        _callback("JITCompilationStarted", "enter"), _call("GetFunctionFromTokenAndTypeArgs"),
        _call("GetClassFromTokenAndTypeArgs"), _callback("JITCompilationStarted", "return"),
    ])  # fmt: skip
    found = {f.clause: f for f in check_recording(rec, run) if f.clause.startswith("TOK-")}
    assert set(found) == {"TOK-01", "TOK-02"} and all(f.note for f in found.values()), found
    assert found["TOK-01"].records == [2] and "inside ClassLoadFinished" in found["TOK-01"].message
    assert found["TOK-02"].records == [5] and "inside ModuleLoadFinished" in found["TOK-02"].message


def test_DSS_19_a_seeded_walk_of_the_callbacks_own_thread_is_told_it_is_synchronous(tmp_path: Path) -> None:
    """DSS-19 on a seed outside JIT-compiled code: inside a callback, a walk of the current thread (thread 0)
    is a synchronous walk and the message says to pass a null context; outside any callback it does not."""

    def walk(**extra: Any) -> dict[str, Any]:
        return _call("DoStackSnapshot", args={"thread": 0, "seed": {"rip": 0x7000, "functionId": 0}}, **extra)

    rec, run = _recording(tmp_path, [
        _callback("ObjectAllocated", "enter"), walk(), _callback("ObjectAllocated", "return"),
        walk(os_tid=MAIN + 3),  # a thread of the profiler's own, no callback open: an asynchronous walk
    ])  # fmt: skip
    inside, outside = [f for f in check_recording(rec, run) if f.clause == "DSS-19"]
    assert inside.records == [2], inside
    assert "a walk of this thread inside ObjectAllocated is synchronous" in inside.message
    assert "passing null in the context and thread parameters" in inside.message
    assert outside.records == [4] and "synchronous" not in outside.message, outside
