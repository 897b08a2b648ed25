"""Attach (issue 21, part 4): ``validate --attach`` starts the app without the profiler and attaches the
recording proxy through the runtime's diagnostics IPC; the proxy forwards InitializeForAttach (with the
trigger's client data) and ProfilerAttachComplete to the profiler behind it. Judged: ATT-01 (an attached
profiler's event mask), DET-01/02/03 (the detach contract of ProfilerDetachSucceeded), VAL-ATTACH-ONLY (an
attach-only profiler loaded at startup).

The rules on synthetic recordings first (each finding its fault and quiet on the lawful sequence), then live
on both bundled runtimes with the fixtures of ``profilers/`` (attach_only, attach_immutable, detach_thread)
and copies of them broken or fixed by one line, each rule going red or green with its copy. Expected values
come from the fixtures' sources (the line of the faulty call, found by text) and the trigger's own data.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli_main
from conformance.core import runner, scenarios
from conformance.core.binary_trace import raw_records
from conformance.core.runtimes import Runtime
from conformance.validator import api
from conformance.validator.launch import AttachPlan, _attacher, read_attach
from conformance.validator.result import Group, ValidationResult
from conformance.validator.rules import check_recording
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_profiler, same_source
from tests.conformance.validator.test_rules import E_FAIL, S_OK, SAMPLER, _call, _callback, _recording

APPS = Path(__file__).resolve().parent / "apps"
COR_PRF_MONITOR_MODULE_LOADS = 0x4
COR_PRF_MONITOR_EXCEPTIONS = 0x40
COR_PRF_ENABLE_OBJECT_ALLOCATED = 0x800000
E_NOINTERFACE = 0x80004002


# --- the rules on synthetic recordings ------------------------------------------------------------------


def _attach(*inside: dict[str, Any], hr: int = S_OK) -> list[dict[str, Any]]:
    return [
        _callback("InitializeForAttach", "enter"),
        *inside,
        _callback("InitializeForAttach", "return", hr),
    ]


def test_ATT_01_a_mask_outside_the_allowable_after_attach_flags(tmp_path: Path) -> None:
    """Refused by the runtime: a finding with its HRESULT, the immutable flag named; accepted bits only
    corprof.idl allows (COR_PRF_MONITOR_EXCEPTIONS): a note; an allowed mask, or the same mask from a
    profiler loaded at startup (Initialize): nothing."""
    bad = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_ENABLE_OBJECT_ALLOCATED
    refused = _call("SetEventMask2", args={"dwEventsLow": bad, "dwEventsHigh": 0}, hr=E_FAIL)
    rec, run = _recording(tmp_path, _attach(refused, hr=E_FAIL))
    found = [f for f in check_recording(rec, run) if f.clause == "ATT-01"]
    (finding,) = found
    assert not finding.note and finding.records == [2] and finding.callback == "InitializeForAttach"
    assert "COR_PRF_ENABLE_OBJECT_ALLOCATED" in finding.message and "immutable" in finding.message
    assert "0x80004005 E_FAIL" in finding.message
    rec, run = _recording(
        tmp_path, _attach(_call("SetEventMask", args={"dwEvents": COR_PRF_MONITOR_EXCEPTIONS}))
    )
    (note,) = check_recording(rec, run)
    assert note.clause == "ATT-01" and note.note and "COR_PRF_MONITOR_EXCEPTIONS" in note.message
    rec, run = _recording(
        tmp_path, _attach(_call("SetEventMask", args={"dwEvents": COR_PRF_MONITOR_MODULE_LOADS}))
    )
    assert check_recording(rec, run) == []
    startup = [_callback("Initialize", "enter"), _call("SetEventMask", args={"dwEvents": bad}),
               _callback("Initialize", "return", S_OK)]  # fmt: skip
    rec, run = _recording(tmp_path, startup)
    assert check_recording(rec, run) == []


def test_DET_01_02_03_after_and_inside_ProfilerDetachSucceeded(tmp_path: Path) -> None:
    """DET-01 at each call the proxy marked afterDetach (any thread), DET-02 for a thread the proxy.detached
    mark names alive, DET-03 for a call inside the callback; a call before the detach is none of them."""
    records = [
        *_attach(),
        {**_call("GetEventMask2"), "os_tid": SAMPLER},
        _callback("ProfilerDetachSucceeded", "enter"),
        _call("GetEventMask2"),
        _callback("ProfilerDetachSucceeded", "return", S_OK),
        {"kind": "mark", "name": "proxy.detached", "payload": None, "profilerThreadsAlive": [SAMPLER],
         "threads": [{"osTid": SAMPLER, "stack": [], "callsAfterDetach": 0}]},
        {**_call("GetEventMask2", afterDetach=True, hr=E_NOINTERFACE), "os_tid": SAMPLER},
        {**_call("GetEventMask2", afterDetach=True, hr=E_NOINTERFACE), "os_tid": SAMPLER},
    ]  # fmt: skip
    rec, run = _recording(tmp_path, records)
    found = sorted((f.clause, f.records[0], f.thread) for f in check_recording(rec, run))
    assert found == [
        ("DET-01", 8, SAMPLER),
        ("DET-01", 9, SAMPLER),
        ("DET-02", 7, SAMPLER),
        ("DET-03", 5, 100),
    ]


def test_VAL_ATTACH_ONLY_a_failed_startup_initialize_of_a_callback3_profiler(tmp_path: Path) -> None:
    rec, run = _recording(
        tmp_path, [_callback("Initialize", "enter"), _callback("Initialize", "return", E_FAIL)]
    )
    notes = [f for f in check_recording(rec, run) if f.clause == "VAL-ATTACH-ONLY"]
    assert len(notes) == 1 and notes[0].note and "validate it with --attach" in notes[0].message
    rec, run = _recording(tmp_path, _attach(hr=E_FAIL))  # attached: its InitializeForAttach failed (VAL-LOAD)
    assert [f.clause for f in check_recording(rec, run)] == ["VAL-LOAD"]


def test_cli_attach_options_are_checked_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["validate", "/nonexistent/lib.so", "--clsid", FIXTURE_CLSID]
    for extra, says in ((["--attach-after", "2"], "need --attach"),
                        (["--attach", "--attach-after", "-1"], "--attach-after -1: expected 0 to 3600"),
                        (["--attach", "--attach-after", "nan"], "finite")):  # fmt: skip
        assert cli_main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_an_app_that_ends_before_the_attach_is_one_line(tmp_path: Path) -> None:
    """The attach thread waits for the app; an app gone by then is said in attach.json, no IPC tried."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: no /proc entry left
    _attacher(AttachPlan(after_s=0.2), tmp_path)(gone.pid, tmp_path / "app.dll")
    record = read_attach(tmp_path)
    assert record is not None and record["problem"].startswith("the app ended before the attach (0.2 s after")


# --- live, both runtimes --------------------------------------------------------------------------------

#: how long the long app runs and when the proxy is attached: the detach fixture detaches about 0.5 s after
#: its attach, and keeps calling for the rest of the run
APP_SECONDS = "3"
AFTER_S = 1.0


def source_line(source: Path, text: str) -> int:
    (found,) = [n for n, line in enumerate(source.read_text().splitlines(), 1) if text in line]
    return found


@pytest.fixture(scope="module")
def long_app() -> Path:
    folder = APPS / "long"
    scenario = scenarios.Scenario(
        name="long", folder=folder, sources=[folder / "app.cs"], plan={"version": 1}, description="long app"
    )
    return scenarios.compile_scenario(scenario, runner.reference_runtime())


Validate = Callable[..., ValidationResult]


@pytest.fixture(scope="module")
def copy_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """copy_of(name, (old, new), ...): a copy of ``profilers/<name>.cpp`` with each edit applied once."""
    folder = tmp_path_factory.mktemp("attach-copies")
    made: list[Path] = []

    def copy(name: str, *edits: tuple[str, str]) -> Path:
        text = (PROFILERS / f"{name}.cpp").read_text()
        for old, new in edits:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        made.append(folder / f"{name}_copy{len(made)}.cpp")
        made[-1].write_text(text)
        return made[-1]

    return copy


@pytest.fixture(scope="module")
def validate(long_app: Path) -> Validate:
    """validate(source, attach=True, data=b""): the profiler built from ``source`` on the long app, attached
    AFTER_S seconds after the start (loaded at startup when ``attach`` is False)."""

    def run(source: Path, *, attach: bool = True, data: bytes = b"") -> ValidationResult:
        so = build_profiler(source, "validator-fixtures")
        plan = AttachPlan(after_s=AFTER_S, client_data=data) if attach else None
        return api.validate(so, FIXTURE_CLSID, app=long_app, env={"PROFHARNESS_APP_SECONDS": APP_SECONDS},
                            attach=plan, timeout_s=60)  # fmt: skip

    return run


def _clauses(result: ValidationResult, version: str, *, note: bool = False) -> set[str]:
    return {g.clause for g in result.groups if g.note == note and version in g.runtimes}


def _trace(result: ValidationResult, version: str) -> list[dict[str, Any]]:
    (run,) = [r for r in result.runs if r.runtime == version]
    return [r for _n, r, _what in raw_records(Path(run.trace)) if r is not None]


def _group(result: ValidationResult, clause: str) -> Group:
    (group,) = [g for g in result.groups if g.clause == clause]
    return group


@pytest.fixture(scope="module")
def attached(validate: Validate) -> ValidationResult:
    return validate(PROFILERS / "attach_only.cpp", data=b"modules,threads")


@pytest.mark.live
def test_attach_only_attached_runs_its_real_path_clean(
    attached: ValidationResult, runtimes: list[Runtime]
) -> None:
    """Attached on both runtimes: AttachProfiler answers S_OK, InitializeForAttach gets the trigger's client
    data (its size recorded), ProfilerAttachComplete follows, the profiler's events come, nothing is found,
    and ATT-01 was judged (passed)."""
    text = api.table(attached)
    assert [r.outcome for r in attached.runs] == ["ok"] * len(runtimes), text
    assert attached.findings == [], text
    for rt in runtimes:
        (line,) = [n for n in attached.notes if n.startswith(f"attach on {rt.version} ")]
        assert "AttachProfiler answered OK with 0x00000000 S_OK" in line and "ProfilerAttachComplete" in line
        records = _trace(attached, rt.version)
        (ifa,) = [r for r in records if r.get("name") == "InitializeForAttach" and r.get("phase") == "enter"]
        assert ifa["args"]["cbClientData"] == len(b"modules,threads")
        names = [r.get("name") for r in records if r["kind"] == "callback"]
        assert names.index("ProfilerAttachComplete") > names.index("InitializeForAttach")
        assert "Initialize" not in names
        (counts,) = [r["counts"] for r in records if r["kind"] == "counts"]  # lazy callbacks are counted
        assert counts.get("ModuleLoadFinished", 0) > 0, counts  # the long app loads assemblies as it runs
        # the catch-up on threads started before the attach (the long app starts none after it)
        (catch_up,) = [r for r in records if r.get("name") == "EnumThreads"]
        assert catch_up["hr"] == 0 and catch_up["out"]["enumerator"]
        (run,) = [r for r in attached.runs if r.runtime == rt.version]
        done = read_attach(Path(run.trace).parent)
        assert done is not None and done["hresult"] == 0 and done["clientDataBytes"] == 15
        status = {(s.clause, s.runtime): s.status.value for s in attached.rules}
        assert status[("ATT-01", rt.version)] == "passed", text


@pytest.mark.live
def test_VAL_ATTACH_ONLY_the_same_profiler_at_startup_is_reported_as_attach_only(
    validate: Validate, runtimes: list[Runtime]
) -> None:
    result = validate(PROFILERS / "attach_only.cpp", attach=False)
    text = api.table(result)
    for rt in runtimes:
        assert _clauses(result, rt.version) == {"VAL-LOAD"}, text
        assert _clauses(result, rt.version, note=True) == {"VAL-ATTACH-ONLY"}, text
    assert "validate it with --attach" in _group(result, "VAL-ATTACH-ONLY").first.message


@pytest.mark.live
def test_ATT_01_an_immutable_flag_at_attach_is_found_at_its_line(
    validate: Validate, runtimes: list[Runtime]
) -> None:
    """attach_immutable asks InitializeForAttach for COR_PRF_ENABLE_OBJECT_ALLOCATED: the runtime answers
    E_FAIL (observed on both), the profiler passes it on, the attach fails with it (VAL-LOAD); ATT-01 names
    the flag and the runtime's HRESULT at the SetEventMask2 line of the fixture."""
    result = validate(PROFILERS / "attach_immutable.cpp")
    text = api.table(result)
    source = PROFILERS / "attach_immutable.cpp"
    for rt in runtimes:
        assert _clauses(result, rt.version) == {"ATT-01", "VAL-LOAD"}, text
        (line,) = [n for n in result.notes if n.startswith(f"attach on {rt.version} ")]
        assert "an error message with 0x80004005 E_FAIL" in line, line
    group = _group(result, "ATT-01")
    assert (
        "COR_PRF_ENABLE_OBJECT_ALLOCATED" in group.first.message
        and "0x80004005 E_FAIL" in group.first.message
    )
    assert group.site is not None and same_source(group.site.file, source)
    assert group.site.line == source_line(source, "return info->SetEventMask2(kEvents, 0);")


@pytest.mark.live
def test_ATT_01_a_copy_of_attach_only_broken_by_one_flag_goes_red(
    validate: Validate, copy_of: Callable[..., Path], runtimes: list[Runtime]
) -> None:
    """attach_only with COR_PRF_MONITOR_OBJECT_ALLOCATED (mutable, but not allowed after attach) added to its
    attach mask: ATT-01 at its line, with the runtime's other refusal, CORPROF_E_UNSUPPORTED_FOR_ATTACHING_
    PROFILER (the immutable flags of attach_immutable are refused with E_FAIL before that check); the
    profiler passes the refusal on, so the attach fails (VAL-LOAD) with it."""
    source = copy_of(
        "attach_only",
        (
            "DWORD mask = COR_PRF_ENABLE_STACK_SNAPSHOT;",
            "DWORD mask = COR_PRF_ENABLE_STACK_SNAPSHOT | COR_PRF_MONITOR_OBJECT_ALLOCATED;",
        ),
    )
    result = validate(source)
    text = api.table(result)
    for rt in runtimes:
        assert _clauses(result, rt.version) == {"ATT-01", "VAL-LOAD"}, text
        (line,) = [n for n in result.notes if n.startswith(f"attach on {rt.version} ")]
        assert "0x8013136F CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER" in line, line
    group = _group(result, "ATT-01")
    message = group.first.message
    assert "COR_PRF_MONITOR_OBJECT_ALLOCATED" in message and "immutable" not in message
    assert "0x8013136F CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER" in message
    assert group.site is not None and group.site.line == source_line(
        source, "return info->SetEventMask2(mask, 0);"
    )


@pytest.fixture(scope="module")
def detached(validate: Validate) -> ValidationResult:
    return validate(PROFILERS / "detach_thread.cpp")


@pytest.mark.live
def test_DET_01_02_a_thread_calling_after_detach_is_found_at_its_line(
    detached: ValidationResult, runtimes: list[Runtime]
) -> None:
    """detach_thread asks for its detach from its sampler thread and keeps that thread polling: every poll
    after ProfilerDetachSucceeded returned is DET-01 at the GetEventMask2 line; the thread alive then is
    DET-02, named by its start routine."""
    text = api.table(detached)
    source = PROFILERS / "detach_thread.cpp"
    for rt in runtimes:
        assert _clauses(detached, rt.version) == {"DET-01", "DET-02"}, text
        records = _trace(detached, rt.version)
        (request,) = [
            r for r in records if r.get("name") == "RequestProfilerDetach" and r.get("phase") == "return"
        ]
        assert request["hr"] == 0
        after = [r for r in records if r.get("afterDetach") is True]
        assert after and all(r["name"] == "GetEventMask2" and r["hr"] == E_NOINTERFACE for r in after)
    calls = _group(detached, "DET-01")
    assert calls.site is not None and same_source(calls.site.file, source)
    assert calls.site.line == source_line(source, "info->GetEventMask2(&low, &high);  // the fault")
    thread = _group(detached, "DET-02")
    assert thread.site is not None and same_source(thread.site.file, source), text


@pytest.mark.live
def test_DET_a_copy_whose_thread_stops_after_its_request_is_clean_and_one_calling_inside_goes_red(
    validate: Validate, copy_of: Callable[..., Path], runtimes: list[Runtime]
) -> None:
    """Fixed by one line (the sampler returns once it asked for the detach): no finding, and the detach still
    happened (DET-01/02/03 passed). That copy broken by one call inside ProfilerDetachSucceeded: DET-03 alone,
    at its line."""
    stop = ("if (polls == 20) info->RequestProfilerDetach(50);",
            "if (polls == 20) { info->RequestProfilerDetach(50); return; }")  # fmt: skip
    fixed = validate(copy_of("detach_thread", stop))
    text = api.table(fixed)
    assert fixed.findings == [], text
    for rt in runtimes:
        status = {s.clause: s.status.value for s in fixed.rules if s.runtime == rt.version}
        assert status["DET-01"] == status["DET-02"] == status["DET-03"] == "passed", text
    call_inside = (
        "detached_.store(true);  // recorded, but the sampler never looks at it",
        "DWORD low = 0, high = 0;\n        info->GetEventMask2(&low, &high);  // inside",
    )
    source = copy_of("detach_thread", stop, call_inside)
    inside = validate(source)
    text = api.table(inside)
    for rt in runtimes:
        assert _clauses(inside, rt.version) == {"DET-03"}, text
    group = _group(inside, "DET-03")
    assert group.site is not None and group.site.line == source_line(source, "// inside")
