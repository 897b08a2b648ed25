"""The async_walks area's judges on synthetic traces (conforming and doctored), one live run on both runtimes.

The synthetic trace mimics what the probe records for the ``async-walks`` scenario (experiments_async.cpp);
each doctored variant changes one fact the runtime reports and must flip the clause's verdict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from clr_model.hresults import HResult
from conformance.adapters.stack import reflection_frames
from conformance.checks import async_walks as aw
from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import read_trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

ASYNC_CLAUSES = [
    "DSS-02",
    "DSS-06",
    "DSS-08",
    "DSS-09",
    "DSS-13",
    "DSS-18",
    "DSS-20",
    "DSS-22",
    "DSS-25",
    "DSS-28",
]

S_OK = HResult.S_OK.value
E_FAIL = HResult.E_FAIL.value
E_NOTIMPL = HResult.E_NOTIMPL.value
UNSUPPORTED = HResult.CORPROF_E_UNSUPPORTED_CALL_SEQUENCE.value
NOT_MANAGED = HResult.CORPROF_E_NOT_MANAGED_THREAD.value
TARGET_ID = 0x5555_0000_1000
CLIENT = 0x5EED5EED

# the target's stack, leaf first: (token, type, method)
TYPE = "ProfHarness.Scenarios.AsyncWalks"
STACK = [
    (0x06000006, TYPE, "Park"),
    (0x06000005, TYPE, "Level3"),
    (0x06000004, TYPE, "Level2"),
    (0x06000003, TYPE, "Level1"),
    (0x06000002, TYPE, "Spin"),
]
FULL: list[int | None] = [*range(len(STACK)), None]  # indices into STACK, None = the unmanaged run below


@dataclass
class Walks:
    """What the runtime answered, per walk: (HRESULT, frames as STACK indices / None for unmanaged)."""

    running: tuple[int, list[int | None]] = (E_NOTIMPL, [])
    managed_suspend_hr: int = UNSUPPORTED
    warmup: tuple[int, list[int | None]] = (E_NOTIMPL, [])
    native_suspend_hr: int = S_OK
    suspended: tuple[int, list[int | None]] = (S_OK, FULL)
    unseeded: tuple[int, list[int | None]] = (E_FAIL, [])
    seeded: tuple[int, list[int | None]] = (S_OK, FULL)
    interrupted_token: int = STACK[0][0]
    ground_truth: bool = True
    #: GetFunctionFromIP(interrupted ip): recorded at all, its HRESULT (failed: FunctionID 0)
    from_ip_recorded: bool = True
    from_ip_hr: int = S_OK
    #: the pthread_kill record's attempts (the number of skipped ips is one less)
    attempts: int = 1


def base() -> Walks:
    return Walks()


@cache
def scenario_plan() -> Mapping[str, Any]:
    """The plan the harness writes for the async-walks experiment."""
    return effective_plan(aw.ASYNC_WALKS.build(), load_scenario(aw.SCENARIO))


def build(w: Walks, path: Path, plan: Mapping[str, Any] | None = None) -> Evidence:
    seq = 0
    out: list[dict[str, Any]] = []
    walk_no = 0

    def rec(kind: str, os_tid: int = 100, **fields: Any) -> None:
        nonlocal seq
        out.append({"seq": seq, "kind": kind, "os_tid": os_tid, "tid": None, **fields})
        seq += 1

    def call(
        name: str, experiment: str, hr: int, os_tid: int = 100, args: Any = None, out_: Any = None
    ) -> None:
        rec("call", os_tid=os_tid, name=name, experiment=experiment, args=args or {}, out=out_ or {}, hr=hr)

    def walk(experiment: str, result: tuple[int, list[int | None]], os_tid: int, **args: Any) -> None:
        nonlocal walk_no
        hr, frames = result
        resolved: list[dict[str, Any]] = []
        for index, f in enumerate(frames):
            if f is None:
                rec("frame", os_tid=os_tid, walk=walk_no, index=index, funcId=0, ip=0x7000, clientData=CLIENT)
                resolved.append(
                    {"funcId": 0, "ip": 0x7000, "token": None, "module": None, "type": None, "method": None}
                )
            else:
                token, type_, method = STACK[f]
                fid = 0xF000 + f
                rec(
                    "frame",
                    os_tid=os_tid,
                    walk=walk_no,
                    index=index,
                    funcId=fid,
                    ip=0x9000 + f,
                    clientData=CLIENT,
                )
                resolved.append(
                    {
                        "funcId": fid,
                        "ip": 0x9000 + f,
                        "token": token,
                        "module": "/run/app.dll",
                        "type": type_,
                        "method": method,
                    }
                )
        a = {"infoFlags": 0, "clientData": CLIENT, "walk": walk_no, "contextSize": 0, "context": None, **args}
        call("DoStackSnapshot", experiment, hr, os_tid, a, {"frameCount": len(frames), "frames": resolved})
        walk_no += 1

    rec("header", probe="0.1.0", pid=1, plan={})
    if w.ground_truth:
        truth = [{"token": t, "type": ty, "method": m, "module": "app.dll"} for t, ty, m in STACK]
        rec("mark", os_tid=101, name="target.stack", payload=json.dumps({"name": "spinner", "stack": truth}))
    call(
        "GetCurrentThreadID",
        aw.REGISTER,
        S_OK,
        101,
        {"name": "spinner"},
        {"threadId": TARGET_ID, "osTid": 101},
    )
    rec("mark", name="walk.target", payload=None)
    walk(aw.CROSS_RUNNING, w.running, 100, thread=TARGET_ID, role="running")
    call("SuspendRuntime", aw.CROSS_SUSPENDED_MANAGED, w.managed_suspend_hr, 100)
    call("ProfilerThreadCreated", aw.NATIVE_THREAD, NOT_MANAGED, 102, {"osTid": 102}, {"threadId": 0})
    walk(aw.NATIVE_THREAD, w.warmup, 102, thread=TARGET_ID, role="warmup")
    call("SuspendRuntime", aw.NATIVE_THREAD, w.native_suspend_hr, 102)
    if w.native_suspend_hr == S_OK:
        walk(aw.NATIVE_THREAD, w.suspended, 102, thread=TARGET_ID, role="suspended")
        call("ResumeRuntime", aw.NATIVE_THREAD, S_OK, 102)
    # the FunctionID of the interrupted function (as the walks report it) and its token agree
    interrupted = next(i for i, f in enumerate(STACK) if f[0] == w.interrupted_token)
    for experiment, seeded, result in (
        (aw.SIGNAL_UNSEEDED, False, w.unseeded),
        (aw.SIGNAL_SEEDED, True, w.seeded),
    ):
        call("ProfilerThreadCreated", experiment, NOT_MANAGED, 103)
        skipped = [0x7000 + n for n in range(w.attempts - 1)]
        kill_out = {"finished": True, "attempts": w.attempts, "skippedIps": skipped}
        call("pthread_kill", experiment, S_OK, 103, {"signal": "SIGUSR2"}, kill_out)
        managed = w.from_ip_hr == S_OK
        if w.from_ip_recorded:
            call(
                "GetFunctionFromIP",
                experiment,
                w.from_ip_hr,
                103,
                {"ip": 0x9000},
                {"functionId": 0xF000 + interrupted, "token": w.interrupted_token}
                if managed
                else {"functionId": 0},
            )
        walk(experiment, result, 103, thread=0, role=experiment, contextSize=8192 if seeded else 0)
    rec("end")
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    runtime = Runtime(
        version="8.0.4", host=Path("/nonexistent/dotnet"), framework_dir=Path("/nonexistent"), source="test"
    )
    return Evidence(
        trace=read_trace(path, strict=True), runtime=runtime, plan=scenario_plan() if plan is None else plan
    )


def judge(clause: str, w: Walks, tmp_path: Path, plan: Mapping[str, Any] | None = None) -> Judgement:
    experiment = aw.ASYNC_WALKS
    (j,) = [j for j in experiment.judges if j.clause == clause]
    return j.judge(build(w, tmp_path / "trace.jsonl", plan))


# --- the Linux-like trace: what each judge says --------------------------------------------------------


@pytest.mark.clause(*ASYNC_CLAUSES)
@pytest.mark.parametrize(
    ("clause", "status"),
    [
        ("DSS-02", Status.DIVERGES),
        ("DSS-08", Status.CONFORMS),
        ("DSS-09", Status.CONFORMS),
        ("DSS-13", Status.CONFORMS),
        ("DSS-18", Status.CONFORMS),
        ("DSS-20", Status.CONFORMS),
        ("DSS-22", Status.CONFORMS),
        ("DSS-25", Status.DIVERGES),
        ("DSS-28", Status.DIVERGES),
    ],
)
def test_linux_like_trace_verdicts(clause: str, status: Status, tmp_path: Path) -> None:
    j = judge(clause, base(), tmp_path)
    assert j.status is status, j
    assert j.observed and j.expected and j.evidence
    assert "\n" not in j.observed and "\n" not in j.expected


def test_DSS_02_running_target_walked_by_the_clr_conforms(tmp_path: Path) -> None:
    j = judge("DSS-02", replace(base(), running=(S_OK, list(FULL))), tmp_path)
    assert j.status is Status.CONFORMS, j
    assert [p["ok"] for p in j.picture] == [True] * len(FULL)
    assert j.picture[0]["label"] == f"{TYPE}::Park"


def test_DSS_02_diverges_names_the_hresult(tmp_path: Path) -> None:
    j = judge("DSS-02", base(), tmp_path)
    assert "E_NOTIMPL" in j.observed and "S_OK" in j.expected


def test_DSS_13_running_walk_that_succeeds_diverges_from_the_unix_model(tmp_path: Path) -> None:
    assert judge("DSS-13", replace(base(), running=(S_OK, list(FULL))), tmp_path).status is Status.DIVERGES


@pytest.mark.clause("DSS-13", "DSS-18", "DSS-20")
@pytest.mark.parametrize(
    "frames",
    [
        [0, 1, 3, 4, None],  # a middle frame missing
        [1, 0, 2, 3, 4, None],  # out of order
        [0, 1, 2, 3, 4, 4, None],  # a frame twice
        [0, 1, 2, 3, 4],  # the unmanaged run below missing
    ],
)
def test_doctored_suspended_walk_diverges(frames: list[int | None], tmp_path: Path) -> None:
    w = replace(base(), suspended=(S_OK, frames))
    for clause in ("DSS-13", "DSS-18", "DSS-20"):
        assert judge(clause, w, tmp_path).status is Status.DIVERGES, clause


def test_DSS_20_top_frames_skipped_is_allowed(tmp_path: Path) -> None:
    w = replace(base(), suspended=(S_OK, [2, 3, 4, None]), unseeded=(S_OK, [1, 2, 3, 4, None]))
    assert judge("DSS-20", w, tmp_path).status is Status.CONFORMS


def test_DSS_20_unseeded_signal_walk_missing_a_middle_frame_diverges(tmp_path: Path) -> None:
    w = replace(base(), unseeded=(E_FAIL, [0, 2, 3, 4, None]))
    j = judge("DSS-20", w, tmp_path)
    assert j.status is Status.DIVERGES and "DSS-20" in j.observed


def test_DSS_28_unseeded_signal_walk_that_walks_conforms(tmp_path: Path) -> None:
    assert judge("DSS-28", replace(base(), unseeded=(S_OK, list(FULL))), tmp_path).status is Status.CONFORMS
    # incomplete at the top is the model's allowed outcome too
    assert judge("DSS-28", replace(base(), unseeded=(S_OK, [3, 4, None])), tmp_path).status is Status.CONFORMS


@pytest.mark.clause("DSS-08", "DSS-18", "DSS-09")
def test_seeded_walk_not_starting_at_the_seed_diverges(tmp_path: Path) -> None:
    w = replace(base(), seeded=(S_OK, [1, 2, 3, 4, None]))
    for clause in ("DSS-08", "DSS-18", "DSS-09"):
        assert judge(clause, w, tmp_path).status is Status.DIVERGES, clause


def test_DSS_08_failed_seeded_walk_diverges(tmp_path: Path) -> None:
    j = judge(
        "DSS-08", replace(base(), seeded=(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX.value, [])), tmp_path
    )
    assert j.status is Status.DIVERGES


def test_DSS_06_failed_seeded_walk_diverges(tmp_path: Path) -> None:
    j = judge(
        "DSS-06", replace(base(), seeded=(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX.value, [])), tmp_path
    )
    assert j.status is Status.DIVERGES and j.observed.startswith("PAL AMD64 CONTEXT seed")


def test_DSS_08_signal_outside_the_leaf_is_not_applicable(tmp_path: Path) -> None:
    j = judge("DSS-08", replace(base(), interrupted_token=STACK[2][0]), tmp_path)
    assert j.status is Status.NOT_APPLICABLE and "not the leaf" in j.observed


def test_DSS_28_signal_outside_the_leaf_is_not_applicable(tmp_path: Path) -> None:
    j = judge("DSS-28", replace(base(), interrupted_token=STACK[1][0]), tmp_path)
    assert j.status is Status.NOT_APPLICABLE and "not the leaf" in j.observed


def test_DSS_25_warm_up_success_conforms(tmp_path: Path) -> None:
    assert judge("DSS-25", replace(base(), warmup=(S_OK, list(FULL))), tmp_path).status is Status.CONFORMS


def test_DSS_25_warm_up_success_without_frames_diverges(tmp_path: Path) -> None:
    assert judge("DSS-25", replace(base(), warmup=(S_OK, [])), tmp_path).status is Status.DIVERGES


def test_DSS_25_divergence_names_the_async_safety_violation(tmp_path: Path) -> None:
    j = judge("DSS-25", base(), tmp_path)
    assert "DSS-25" in j.observed and "E_NOTIMPL" in j.observed


@pytest.mark.parametrize(
    ("managed", "native"),
    [(S_OK, S_OK), (UNSUPPORTED, UNSUPPORTED), (S_OK, UNSUPPORTED)],
)
def test_DSS_22_runtime_against_the_rule_diverges(managed: int, native: int, tmp_path: Path) -> None:
    w = replace(base(), managed_suspend_hr=managed, native_suspend_hr=native)
    assert judge("DSS-22", w, tmp_path).status is Status.DIVERGES


def test_missing_ground_truth_is_a_one_line_harness_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"no target\.stack mark"):
        judge("DSS-13", replace(base(), ground_truth=False), tmp_path)


def test_missing_walk_is_a_harness_error(tmp_path: Path) -> None:
    w = replace(base(), native_suspend_hr=UNSUPPORTED)
    with pytest.raises(HarnessError, match="native-thread \\(suspended\\)"):
        judge("DSS-18", w, tmp_path)


def test_thread_model_ends_in_native_code_and_starts_with_helper() -> None:
    raw = [{"token": t, "type": ty, "method": m, "module": "app.dll"} for t, ty, m in STACK]
    truth = aw.GroundTruth(name="spinner", frames=reflection_frames(raw, "test"), seq=0)
    model = aw.thread_model(truth)
    assert model.top_kind == "helper"
    assert model.frames[-1].kind == "native"
    assert len(model.frames) == len(STACK) + 2


# --- live --------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.clause(*ASYNC_CLAUSES)
def test_DSS_async_live_suite_on_every_runtime(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(
        ASYNC_CLAUSES, runtimes, may_be_not_applicable=["DSS-06", "DSS-08", "DSS-28"]
    )


# --- issue 7: every disagreement, one stable line each; plan entries as the judges' inputs --------------


@pytest.mark.clause("DSS-02", "DSS-25", "DSS-28")
def test_linux_like_trace_disagreement_lines(tmp_path: Path) -> None:
    """The lines the live runs give (both runtimes alike: a failed walk is one disagreement, its HRESULT)."""
    assert judge("DSS-02", base(), tmp_path).disagreements == (
        "cross-running: DSS-02: DoStackSnapshot returned 0x80004001 E_NOTIMPL, the model says"
        " 0x00000000 S_OK",
    )
    assert judge("DSS-28", base(), tmp_path).disagreements == (
        "signal-unseeded: DSS-01: DoStackSnapshot returned 0x80004005 E_FAIL, the model says 0x00000000 S_OK",
    )
    assert judge("DSS-25", base(), tmp_path).disagreements == (
        "native-thread (warmup): DSS-25: the warm-up walk of the running spinner returned"
        " 0x80004001 E_NOTIMPL with 0 callback(s), the procedure needs success with at least one",
        "native-thread: DSS-25 at #3: profiler thread 1 suspends thread 2 before a warm-up DoStackSnapshot of"
        " an unsuspended thread succeeded with at least one frame (thread 1: the native walker,"
        " thread 2: spinner)",
    )
    for clause in ("DSS-08", "DSS-09", "DSS-13", "DSS-18", "DSS-20", "DSS-22"):
        assert judge(clause, base(), tmp_path).disagreements == (), clause


@pytest.mark.clause("DSS-13", "DSS-18")
def test_a_walk_with_two_faults_gives_both_lines(tmp_path: Path) -> None:
    # Level3 before Park (order) and Spin twice (an extra callback): both named, each with its clause
    w = replace(base(), suspended=(S_OK, [1, 0, 2, 3, 4, 4, None]))
    expected = (
        "native-thread (suspended): DSS-16 at #1: AsyncWalks::Park comes out of order: the model has it at #0"
        " (leaf first)",
        "native-thread (suspended): DSS-03 at #5: AsyncWalks::Spin reported again",
    )
    assert judge("DSS-18", w, tmp_path).disagreements == expected
    assert judge("DSS-13", w, tmp_path).disagreements == expected


@pytest.mark.clause("DSS-09")
def test_DSS_09_the_seeded_walk_is_the_one_the_plan_seeds(tmp_path: Path) -> None:
    plan = dict(scenario_plan())
    plan["experiments"] = [
        {**e, "args": {**e["args"], "seed": False}} if e["id"] == aw.SIGNAL_SEEDED else e
        for e in plan["experiments"]
    ]
    with pytest.raises(HarnessError, match="author rule does not separate"):
        judge("DSS-09", base(), tmp_path, plan)


@pytest.mark.parametrize("clause", ASYNC_CLAUSES)
def test_every_plan_entry_a_judge_uses_is_read(clause: str, tmp_path: Path) -> None:
    """``uses`` names exactly the plan entries the judge reads."""
    (registered,) = [j for j in aw.ASYNC_WALKS.judges if j.clause == clause]
    plan = scenario_plan()
    assert registered.uses, clause
    for entry in registered.uses:
        without = {**plan, "experiments": [e for e in plan["experiments"] if e["id"] != entry]}
        with pytest.raises(HarnessError, match=f"the plan has no experiment entry '{entry}'"):
            judge(clause, base(), tmp_path, without)
    only = {**plan, "experiments": [e for e in plan["experiments"] if e["id"] in registered.uses]}
    assert judge(clause, base(), tmp_path, only) == judge(clause, base(), tmp_path)


# --- mutation audit: the signal walks' leaf check (Y3), the runtime's CONTEXT size (async), plan seeds ----

SIGNAL_CLAUSES = ("DSS-06", "DSS-08", "DSS-28")


@pytest.mark.clause(*SIGNAL_CLAUSES)
@pytest.mark.parametrize("clause", SIGNAL_CLAUSES)
def test_Y3_a_missing_GetFunctionFromIP_record_is_an_input_error_not_na(clause: str, tmp_path: Path) -> None:
    # before: "not in the leaf" -> n/a, and the expectation files allow n/a for these three clauses
    with pytest.raises(HarnessError, match=r"experiment signal-\w+: no GetFunctionFromIP record"):
        judge(clause, replace(base(), from_ip_recorded=False), tmp_path)


@pytest.mark.clause(*SIGNAL_CLAUSES)
@pytest.mark.parametrize("clause", SIGNAL_CLAUSES)
def test_Y3_a_failed_GetFunctionFromIP_without_exhausted_retries_is_an_input_error(
    clause: str, tmp_path: Path
) -> None:
    # the plan asks the probe to resend until the signal lands in managed code (requireManagedTop, 20
    # attempts); one attempt, nothing skipped, and an ip outside managed code contradict it
    w = replace(base(), from_ip_hr=E_FAIL)
    with pytest.raises(
        HarnessError, match=r"yet the probe was to resend .* shows 1 of 20 attempts with 0 skipped"
    ):
        judge(clause, w, tmp_path)


@pytest.mark.clause(*SIGNAL_CLAUSES)
@pytest.mark.parametrize("clause", SIGNAL_CLAUSES)
def test_Y3_a_failed_GetFunctionFromIP_is_na_only_when_the_probe_could_stop_there(
    clause: str, tmp_path: Path
) -> None:
    # out of retries: 20 attempts, 19 ips skipped -> the signal truly never landed in the leaf
    j = judge(clause, replace(base(), from_ip_hr=E_FAIL, attempts=20), tmp_path)
    assert j.status is Status.NOT_APPLICABLE and "after 20 attempts" in j.observed, j.observed
    # the plan did not require a managed top: one attempt is all the probe makes
    entry = aw.SIGNAL_SEEDED if clause != "DSS-28" else aw.SIGNAL_UNSEEDED
    plan = dict(scenario_plan())
    plan["experiments"] = [
        {**e, "args": {**e["args"], "requireManagedTop": False}} if e["id"] == entry else e
        for e in plan["experiments"]
    ]
    j = judge(clause, replace(base(), from_ip_hr=E_FAIL), tmp_path, plan)
    assert j.status is Status.NOT_APPLICABLE and "requireManagedTop false" in j.observed, j.observed


@pytest.mark.clause("DSS-08", "DSS-18")
def test_async_judges_use_the_runtimes_context_size_on_8_0_4(tmp_path: Path) -> None:
    """REGISTER_CONTEXT on the seeded signal walk: 8.0.4's CONTEXT is 3104 bytes (the model used 1232)."""
    plan = dict(scenario_plan())
    plan["experiments"] = [
        {**e, "args": {**e["args"], "infoFlags": 1}} if e["id"] == aw.SIGNAL_SEEDED else e
        for e in plan["experiments"]
    ]

    def with_contexts(size: int) -> Evidence:
        ev = build(base(), tmp_path / f"trace-{size}.jsonl", plan)
        seeded_walk = next(c.args["walk"] for c in ev.trace.calls("DoStackSnapshot", aw.SIGNAL_SEEDED))
        path = tmp_path / f"doctored-{size}.jsonl"
        lines = []
        for line in (tmp_path / f"trace-{size}.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["kind"] == "frame" and r["walk"] == seeded_walk:
                r["contextSize"] = size
                r["context"] = {"rip": r["ip"], "rsp": 0x7FFF0000, "rbp": 0}
            lines.append(json.dumps(r))
        path.write_text("\n".join(lines) + "\n")
        return Evidence(trace=read_trace(path, strict=True), runtime=ev.runtime, plan=plan)

    (registered,) = [j for j in aw.ASYNC_WALKS.judges if j.clause == "DSS-08"]
    right = registered.judge(with_contexts(3104))
    assert right.status is Status.CONFORMS, right.observed
    wrong = registered.judge(with_contexts(1232))
    assert wrong.status is Status.DIVERGES
    assert all("(size 1232)" in line and "(size 3104)" in line for line in wrong.disagreements), wrong


@pytest.mark.clause("DSS-08", "DSS-06", "DSS-28")
@pytest.mark.parametrize(
    ("clause", "entry", "seed"),
    [
        ("DSS-08", aw.SIGNAL_SEEDED, False),
        ("DSS-06", aw.SIGNAL_SEEDED, False),
        ("DSS-28", aw.SIGNAL_UNSEEDED, True),
    ],
)
def test_Z7_a_signal_entry_with_the_other_seed_is_an_input_error(
    clause: str, entry: str, seed: bool, tmp_path: Path
) -> None:
    plan = dict(scenario_plan())
    plan["experiments"] = [
        {**e, "args": {**e["args"], "seed": seed}} if e["id"] == entry else e for e in plan["experiments"]
    ]
    with pytest.raises(
        HarnessError, match=rf"^plan entry '{entry}' lacks args.seed {str(not seed).lower()}$"
    ):
        judge(clause, base(), tmp_path, plan)
