"""The validator's ReJIT protocol rule (rules.ReJITProtocol, judged with clr_model.rejit) on synthetic proxy
recordings: each clause found where its sequence breaks the model and quiet on the lawful sequence next to
it. The function-control calls are recorded as ``ICorProfilerFunctionControl::<method>`` calls, the shape
the proxy's wrapping of GetReJITParameters' pFunctionControl writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.core.findings import Finding
from conformance.validator.rules import check_recording
from tests.conformance.validator.test_rules import _call, _callback, _recording

MODULE, METHOD = 0x7000, 0x06000002
FC_SET_BODY = "ICorProfilerFunctionControl::SetILFunctionBody"


def _findings(tmp_path: Path, records: list[dict[str, Any]]) -> list[Finding]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rec, run = _recording(tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", 0),
                                     *records])  # fmt: skip
    return check_recording(rec, run)


def _params(*inside: dict[str, Any]) -> list[dict[str, Any]]:
    args = {"moduleId": MODULE, "methodId": METHOD, "pFunctionControl": 0x5000}
    return [_callback("GetReJITParameters", "enter", args=args), *inside,
            _callback("GetReJITParameters", "return", 0, args=args)]  # fmt: skip


def _request(name: str = "RequestReJIT") -> list[dict[str, Any]]:
    return [_call(name, phase="enter", caller=0), _call(name, phase="return", caller=0)]


def of(found: list[Finding], clause: str) -> list[Finding]:
    return [f for f in found if f.clause == clause]


def test_REJIT_09_request_inside_module_load_finished_and_not_from_its_own_thread(tmp_path: Path) -> None:
    inside = [_callback("ModuleLoadFinished", "enter", args={"moduleId": MODULE}), *_request(),
              _callback("ModuleLoadFinished", "return", 0)]  # fmt: skip
    found = _findings(tmp_path / "in", inside)
    [f] = of(found, "REJIT-09")
    assert not f.note and f.callback == "ModuleLoadFinished" and "RequestReJIT" in f.message
    assert of(_findings(tmp_path / "own", _request()), "REJIT-09") == []  # the profiler's own thread


def test_VAL_REJIT_IN_CALLBACK_revert_inside_a_callback_is_a_note(tmp_path: Path) -> None:
    records = [_callback("JITCompilationFinished", "enter"), *_request("RequestRevert"),
               _callback("JITCompilationFinished", "return", 0)]  # fmt: skip
    [f] = of(_findings(tmp_path, records), "VAL-REJIT-IN-CALLBACK")
    assert f.note and "RequestRevert" in f.message


def test_REJIT_21_function_control_outside_get_rejit_parameters_is_a_note(tmp_path: Path) -> None:
    inside = [*_request(), *_params(_call(FC_SET_BODY, args={"cbNewILMethodHeader": 4}))]
    assert of(_findings(tmp_path / "in", inside), "REJIT-21") == []
    late = [*_request(), *_params(), _callback("ReJITCompilationStarted", "enter"),
            _call(FC_SET_BODY, args={"cbNewILMethodHeader": 4}),
            _callback("ReJITCompilationStarted", "return", 0)]  # fmt: skip
    [f] = of(_findings(tmp_path / "late", late), "REJIT-21")
    assert f.note and f.callback == "ReJITCompilationStarted"


def test_VAL_REJIT_AGAIN_parameters_asked_again_after_a_second_request(tmp_path: Path) -> None:
    once = [*_request(), *_params()]
    assert of(_findings(tmp_path / "once", once), "VAL-REJIT-AGAIN") == []
    twice = [*once, *_request(), *_params()]
    [f] = of(_findings(tmp_path / "twice", twice), "VAL-REJIT-AGAIN")
    assert f.note and "second time" in f.message
    # the note stands at the last request before the second GetReJITParameters (seq of its enter record)
    assert f.records[0] == 2 + len(once) + 1


def _compilation(function: int, *inside: dict[str, Any], before: int = 0,
                 ok: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """A JITCompilationStarted of ``function`` as the proxy records it (``compiledBefore``: starts before it,
    ``compiledOk``: those that finished with success) with ``inside`` in it."""
    started = {"functionId": function, **({"compiledBefore": before, "compiledOk": ok} if before else {})}
    return [_callback("JITCompilationStarted", "enter", args=started), *inside,
            _callback("JITCompilationStarted", "return", 0)]  # fmt: skip


def test_REJIT_01_only_after_a_compilation_that_succeeded(tmp_path: Path) -> None:
    """REJIT-01 fails SetILFunctionBody in the JITCompilationStarted of a function compiled already; a start
    again after a halted or failed first compilation (the JITCompilationStarted page: a class constructor
    halts it, and the profiler "must do so for both JITCompilationStarted events") is not one."""
    function = 0x7F10
    tokens = _call("GetFunctionInfo", args={"functionId": function},
                   out={"pModuleId": MODULE, "pToken": METHOD})  # fmt: skip
    set_il = _call("SetILFunctionBody", args={"moduleId": MODULE, "methodid": METHOD}, caller=0)
    halted = [*_compilation(function, tokens, set_il), *_compilation(function, set_il, before=1, ok=0)]
    assert of(_findings(tmp_path / "halted", halted), "REJIT-01") == []
    again = [*_compilation(function, tokens, set_il), *_compilation(function, set_il, before=1, ok=1)]
    [f] = of(_findings(tmp_path / "again", again), "REJIT-01")
    assert not f.note and "0x06000002" in f.message


def test_REJIT_01_another_instantiations_compiled_il(tmp_path: Path) -> None:
    """REJIT-01 fails SetILFunctionBody for a (module, methodDef) the proxy saw compiled for another
    FunctionID (``compiledMethod``: another instantiation of a generic method, which shares the methodDef's
    IL), in a first compilation or outside any; without the mark, the same first compilation is not a
    finding."""
    first = 0x7F20
    set_il = {"moduleId": MODULE, "methodid": METHOD}
    fresh = _compilation(first, _call("SetILFunctionBody", args=set_il, caller=0))
    assert of(_findings(tmp_path / "fresh", fresh), "REJIT-01") == []
    shared = {"compiledMethod": {"functionId": 0x7F18}}
    inside = _compilation(first, _call("SetILFunctionBody", args=set_il, caller=0, **shared))
    [f] = of(_findings(tmp_path / "inside", inside), "REJIT-01")
    assert "whose IL the JIT has compiled already for FunctionID 0x7f18" in f.message
    assert "0x06000002" in f.message
    outside = [_call("SetILFunctionBody", args=set_il, caller=0, **shared)]
    assert len(of(_findings(tmp_path / "outside", outside), "REJIT-01")) == 1


def test_REJIT_17_a_revert_without_a_status_array(tmp_path: Path) -> None:
    """RequestRevert's S_OK says only that every revert was tried: a NULL status array is a finding; an array
    (any address) is not."""
    def revert(status: int) -> list[dict[str, Any]]:
        args = {"cFunctions": 1, "moduleIds": 0x100, "methodIds": 0x200, "status": status}
        return [_call("RequestRevert", phase="enter", caller=0, args=args),
                _call("RequestRevert", phase="return", caller=0, args=args)]  # fmt: skip

    [f] = of(_findings(tmp_path / "null", revert(0)), "REJIT-17")
    assert not f.note and "NULL status array" in f.message
    assert of(_findings(tmp_path / "array", revert(0x300)), "REJIT-17") == []


def test_REJIT_29_rejit_error_s_null_function_id_passed_on(tmp_path: Path) -> None:
    """A per-method ReJITError (functionId NULL) whose handler asks GetFunctionInfo about that NULL: a
    finding in the callback; the same call in a ReJITError that names its function, or one that tests for
    NULL and makes no such call, is not."""
    def error(function: int, *inside: dict[str, Any]) -> list[dict[str, Any]]:
        args = {"moduleId": MODULE, "methodId": 0x02000003, "functionId": function, "hrStatus": 0x80070057}
        return [_callback("ReJITError", "enter", args=args), *inside,
                _callback("ReJITError", "return", 0, args=args)]  # fmt: skip

    def info(function: int) -> dict[str, Any]:
        return _call("GetFunctionInfo", args={"functionId": function}, hr=0x80070057)

    [f] = of(_findings(tmp_path / "null", error(0, info(0))), "REJIT-29")
    assert not f.note and f.callback == "ReJITError" and "NULL" in f.message
    assert of(_findings(tmp_path / "named", error(0x4000, info(0x4000))), "REJIT-29") == []
    assert of(_findings(tmp_path / "checked", error(0)), "REJIT-29") == []
    assert of(_findings(tmp_path / "outside", [*error(0), info(0)]), "REJIT-29") == []
