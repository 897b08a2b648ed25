"""Judges of conformance.checks.stack: synthetic stack-walks traces (conforming, doctored) and a live run.

The synthetic trace mimics what the probe records for the ``stack-walks`` scenario; every judge reads it
with the scenario's own effective plan (what the harness writes), as in a live run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conformance.checks import stack
from conformance.core.errors import HarnessError
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import RECORD_ADAPTER, Trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

JUDGES = {j.clause: j.judge for j in stack.STACK_WALKS.judges}
USES = {j.clause: j.uses for j in stack.STACK_WALKS.judges}
#: a per-run address (12 hex digits in these traces) must never appear in a disagreement line
ADDRESS = re.compile(r"0x[0-9A-Fa-f]{9,}")

E_FAIL = 0x80004005
E_INVALIDARG = 0x80070057
ABORTED = 0x80131361
UNMANAGED_CTX = 0x8013135F
UNSAFE = 0x80131360
CTX = 3104  # 8.0's sizeof(CONTEXT)
NATIVE_IP = 0x7F0000001000
CLIENT = 0x5EED5EED

# reflection ground truth: name -> (token, pinvoke)
METHODS: dict[str, tuple[int, bool]] = {
    "profharness_mark": (0x06000030, True),
    "Mark": (0x06000031, False),
    "Main": (0x06000003, False),
    "Outer": (0x06000004, False),
    "Middle": (0x06000005, False),
    "Leaf": (0x06000006, False),
    "Reverse": (0x06000007, False),
    "Callee": (0x06000008, False),
    "Throwing": (0x06000009, False),
    "Thrower": (0x0600000A, False),
    "profharness_call_back": (0x06000001, True),
}
MARK_WALK = ["Mark", "Leaf", "Middle", "Outer", "Main", None]
REVERSE_WALK = ["Mark", "Callee", None, "Reverse", "Main", None]
THROW_WALK = ["Thrower", "Throwing", "Main", None]


def fid(name: str | None) -> int:
    return 0 if name is None else 0x10000 + (METHODS[name][0] & 0xFFFF) * 0x40


def ip_of(name: str | None, walk: int) -> int:
    return 0x7F0000100000 + (fid(name) or 0x999) * 0x10 + walk


def frame_json(name: str) -> dict[str, Any]:
    token, pinvoke = METHODS[name]
    type_ = (
        "ProfHarness.Probe" if name in ("Mark", "profharness_mark") else "ProfHarness.Scenarios.StackWalks"
    )
    return {"token": token, "type": type_, "method": name, "module": "app.dll", "pinvoke": pinvoke}


def payload(stack_names: list[str], native_after: int) -> str:
    return json.dumps(
        {
            "stack": [frame_json(n) for n in stack_names],
            "above": [frame_json("profharness_mark"), frame_json("Mark")],
            "nativeAfter": native_after,
        }
    )


class Builder:
    """A stack-walks trace, record by record, as the probe writes it."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = [
            {"seq": 0, "kind": "header", "os_tid": 7, "probe": "t", "pid": 1}
        ]
        self.walks = 0
        self.order = 0

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        rec = {"seq": len(self.records), "kind": kind, "os_tid": 7, **fields}
        self.records.append(rec)
        return rec

    def mark(self, name: str, text: str | None) -> None:
        self.add("mark", name=name, payload=text)

    def walk(
        self,
        exp: str,
        names: list[str | None],
        *,
        flags: int = 0,
        client: int = CLIENT,
        hr: int = 0,
        replies: dict[int, int] | None = None,
        seed: dict[str, int] | None = None,
        size: int = 0,
        extra: dict[str, Any] | None = None,
        resolve: bool = True,
    ) -> int:
        walk = self.walks
        self.walks += 1
        for i, n in enumerate(names):
            ip = ip_of(n, walk)
            ctx = {"rip": ip, "rsp": 0x7FFF0000 + i * 64, "rbp": 0} if flags & 1 else None
            self.add(
                "frame",
                walk=walk,
                index=i,
                funcId=fid(n),
                ip=ip,
                frameInfo=1,
                clientData=client,
                contextSize=CTX if flags & 1 else 0,
                context=ctx,
                hr=(replies or {}).get(i, 0),
                cbOsTid=7,
                inCall=True,
                cbOrder=self.order,
            )
            self.order += 1
        out: dict[str, Any] = {"frameCount": len(names), "returnOrder": self.order}
        if resolve:
            out["frames"] = [
                {
                    "funcId": fid(n),
                    "ip": ip_of(n, walk),
                    "token": None if n is None else METHODS[n][0],
                    "module": None if n is None else "/run/app.dll",
                    "type": None,
                    "method": None,
                }
                for n in names
            ]
        args = {
            "thread": 0,
            "infoFlags": flags,
            "clientData": client,
            "context": seed,
            "contextSize": size,
            "walk": walk,
            "at": "x",
            **(extra or {}),
        }
        self.add("call", name="DoStackSnapshot", experiment=exp, args=args, out=out, hr=hr)
        return walk

    def seeded(
        self, exp: str, names: list[str | None], kind: str, size_arg: str, size: int, **kw: Any
    ) -> None:
        self.walk(exp, names, flags=1, extra={"purpose": "capture"}, resolve=False)
        rip = {"captured": ip_of("Mark", 0), "native": NATIVE_IP, "zero": 0}[kind]
        seed = {"rip": rip, "rsp": 0 if kind == "zero" else 0x7FFF0000, "rbp": 0}
        extra = {
            "seedKind": kind,
            "contextSizeArg": size_arg,
            "runtimeContextSize": CTX,
            "nativeIp": NATIVE_IP,
        }
        kw.setdefault("flags", 1)  # the plan's infoFlags of the seeded entries, unless given
        self.walk(exp, names if kw.pop("ok", True) else [], seed=seed, size=size, extra=extra, **kw)

    def trace(self) -> Trace:
        return Trace(
            path=Path("synthetic.jsonl"), records=[RECORD_ADAPTER.validate_python(r) for r in self.records]
        )


REVERSE_STACK = ["Callee", "profharness_call_back", "profharness_call_back", "Reverse", "Main"]


def build(
    doctor: dict[str, Callable[[Builder], object]] | None = None, *, reverse_stack: list[str] | None = None
) -> Trace:
    """A conforming stack-walks run; ``doctor`` replaces the named experiments' records, ``reverse_stack``
    the ground truth of the ``walk-reverse`` mark."""
    d = doctor or {}
    b = Builder()

    def run(exp: str, normal: Callable[[], object]) -> None:
        (d[exp] if exp in d else (lambda _b: normal()))(b)

    run("init-walk", lambda: b.walk("init-walk", [], resolve=False))
    b.mark("walk-now", payload(["Leaf", "Middle", "Outer", "Main"], -1))
    run("now-default", lambda: b.walk("now-default", list(MARK_WALK), client=0x1234ABCD))
    run("now-regctx", lambda: b.walk("now-regctx", list(MARK_WALK), flags=1, client=0x0BADC0DE))
    abort = {"abortAt": 2, "abortReply": E_FAIL}
    run(
        "now-abort-efail",
        lambda: b.walk("now-abort-efail", MARK_WALK[:3], hr=ABORTED, replies={2: E_FAIL}, extra=abort),
    )
    sfalse = {"abortAt": 2, "abortReply": 1}
    run(
        "now-abort-sfalse",
        lambda: b.walk("now-abort-sfalse", MARK_WALK[:3], hr=ABORTED, replies={2: 1}, extra=sfalse),
    )
    run("now-flags-x86", lambda: b.walk("now-flags-x86", [], flags=2, hr=E_INVALIDARG))
    run("now-flags-undefined", lambda: b.walk("now-flags-undefined", [], flags=0x10, hr=E_INVALIDARG))
    run("now-seed-managed", lambda: b.seeded("now-seed-managed", list(MARK_WALK), "captured", "runtime", CTX))

    def sized(name: str, size: int) -> Callable[[], object]:
        return lambda: b.seeded(f"now-size-{name}", list(MARK_WALK), "captured", name, size)

    for name, size in (("zero", 0), ("runtime-1", CTX - 1), ("small", 16), ("larger", CTX + 256)):
        run(f"now-size-{name}", sized(name, size))
    run("now-seed-zero", lambda: b.seeded("now-seed-zero", list(MARK_WALK), "zero", "runtime", CTX))

    def from_ip() -> None:
        w = b.walk("now-from-ip", list(MARK_WALK), flags=1, resolve=False)
        b.add(
            "call",
            name="GetFunctionFromIP",
            experiment="now-from-ip",
            args={"ip": NATIVE_IP, "what": "native"},
            out={"functionId": 0, "written": True},
            hr=0,
        )
        for n in MARK_WALK:
            b.add(
                "call",
                name="GetFunctionFromIP",
                experiment="now-from-ip",
                args={"ip": ip_of(n, w), "what": "frame"},
                out={"functionId": fid(n), "written": True},
                hr=0,
            )

    run("now-from-ip", from_ip)
    b.mark("walk-reverse", payload(reverse_stack or REVERSE_STACK, 0))
    run("reverse-regctx", lambda: b.walk("reverse-regctx", list(REVERSE_WALK), flags=1))
    b.mark("expect.throw", payload(["Thrower", "Throwing", "Main"], -1))
    run("throw-sync", lambda: b.walk("throw-sync", list(THROW_WALK)))
    run(
        "throw-seed-native",
        lambda: b.seeded(
            "throw-seed-native",
            list(THROW_WALK),
            "native",
            "runtime",
            CTX,
            flags=0,
            hr=UNMANAGED_CTX,
            ok=False,
        ),
    )
    run(
        "throw-seed-zero",
        lambda: b.seeded(
            "throw-seed-zero", list(THROW_WALK), "zero", "runtime", CTX, flags=0, hr=UNMANAGED_CTX, ok=False
        ),
    )
    return b.trace()


@cache
def scenario_plan() -> Mapping[str, Any]:
    """The plan the harness writes for the stack-walks experiment."""
    return effective_plan(stack.STACK_WALKS.build(), load_scenario("stack-walks"))


def evidence(trace: Trace, version: str = "8.0.4", plan: Mapping[str, Any] | None = None) -> Evidence:
    runtime = Runtime(version=version, host=Path("/x/dotnet"), framework_dir=Path("/x/fx"), source="test")
    return Evidence(trace=trace, runtime=runtime, plan=scenario_plan() if plan is None else plan)


def judge(
    clause: str, trace: Trace, version: str = "8.0.4", plan: Mapping[str, Any] | None = None
) -> Judgement:
    return JUDGES[clause](evidence(trace, version, plan))


# --------------------------------------------------------------------------------------------------
# Conforming run


@pytest.mark.clause(*sorted(JUDGES))
@pytest.mark.parametrize("clause", sorted(JUDGES))
def test_conforming_run_conforms_for_every_clause(clause: str) -> None:
    j = judge(clause, build())
    assert j.status is Status.CONFORMS, (clause, j.observed)
    assert j.evidence and j.observed and j.expected
    assert j.disagreements == ()


def test_pictures_are_leaf_first_labels() -> None:
    j = judge("DSS-16", build())
    labels = [p["label"] for p in j.picture]
    assert labels[:2] == ["ProfHarness.Probe::Mark", "ProfHarness.Scenarios.StackWalks::Leaf"]
    assert labels[-1] == "[unmanaged]" and all(p["ok"] for p in j.picture)


def test_3_1_uses_its_own_context_size() -> None:
    # 8.0 CONTEXT sizes on a 3.1 runtime diverge (DSS-05 takes the size from the version, not the trace)
    assert judge("DSS-05", build(), "3.1.23").status is Status.DIVERGES
    assert judge("DSS-05", build(), "9.9.9").status is Status.NOT_APPLICABLE


# --------------------------------------------------------------------------------------------------
# Doctored runs flip the verdict


def _swap(names: list[str | None], i: int, j: int) -> list[str | None]:
    out = list(names)
    out[i], out[j] = out[j], out[i]
    return out


DOCTORED: dict[str, dict[str, Callable[[Builder], object]]] = {
    "DSS-01": {
        "now-default": lambda b: b.walk(
            "now-default", [n for n in MARK_WALK if n != "Outer"], client=0x1234ABCD
        )
    },
    "DSS-16": {"now-default": lambda b: b.walk("now-default", _swap(MARK_WALK, 1, 2), client=0x1234ABCD)},
    "DSS-03": {
        "reverse-regctx": lambda b: b.walk(
            "reverse-regctx", ["Mark", "Callee", "Callee", None, "Reverse", "Main", None], flags=1
        )
    },
    "DSS-15": {
        "reverse-regctx": lambda b: b.walk(
            "reverse-regctx", ["Mark", "Callee", None, None, "Reverse", "Main", None], flags=1
        )
    },
    "DSS-05": {
        "now-default": lambda b: b.walk(
            "now-default", list(MARK_WALK), flags=1, client=0x1234ABCD, extra={"infoFlags": 0}
        )
    },
    "DSS-10": {"throw-sync": lambda b: b.walk("throw-sync", THROW_WALK[1:])},
    # a FunctionID 0 callback for the CLR helper code on top of the ExceptionThrown walk
    "DSS-30": {"throw-sync": lambda b: b.walk("throw-sync", [None, *THROW_WALK])},
    "DSS-17": {"init-walk": lambda b: b.walk("init-walk", [], hr=UNSAFE, resolve=False)},
    "DSS-26": {
        "now-abort-sfalse": lambda b: b.walk(
            "now-abort-sfalse",
            MARK_WALK[:4],
            hr=ABORTED,
            replies={2: 1},
            extra={"abortAt": 2, "abortReply": 1},
        )
    },
    "DSS-27": {"now-flags-undefined": lambda b: b.walk("now-flags-undefined", list(MARK_WALK), flags=0x10)},
    "DSS-12": {
        "now-size-small": lambda b: b.seeded(
            "now-size-small", list(MARK_WALK), "captured", "small", 16, hr=E_INVALIDARG, ok=False
        )
    },
    "DSS-07": {
        "now-seed-managed": lambda b: b.seeded("now-seed-managed", MARK_WALK[1:], "captured", "runtime", CTX)
    },
    "DSS-21": {
        "throw-seed-native": lambda b: b.seeded(
            "throw-seed-native", list(THROW_WALK), "native", "runtime", CTX, flags=0
        )
    },
    "DSS-11": {
        "throw-seed-native": lambda b: b.seeded(
            "throw-seed-native", list(THROW_WALK), "native", "runtime", CTX, flags=0
        )
    },
    "DSS-29": {
        "throw-seed-zero": lambda b: b.seeded(
            "throw-seed-zero", list(THROW_WALK), "zero", "runtime", CTX, flags=0
        )
    },
}


def _fromip_unwritten(b: Builder) -> None:
    b.walk("now-from-ip", list(MARK_WALK), flags=1, resolve=False)
    b.add(
        "call",
        name="GetFunctionFromIP",
        experiment="now-from-ip",
        args={"ip": NATIVE_IP, "what": "native"},
        out={"functionId": None, "written": False},
        hr=E_FAIL,
    )


DOCTORED["DSS-19"] = {"now-from-ip": _fromip_unwritten}


def _late(b: Builder) -> None:
    b.walk("now-default", list(MARK_WALK), client=0x1234ABCD)
    # the last callback arrived after the call returned, outside the call
    for r in b.records:
        if r["kind"] == "frame" and r["walk"] == b.walks - 1 and r["index"] == 5:
            r["inCall"] = False
            r["cbOrder"] = 10**6


DOCTORED["DSS-14"] = {"now-default": _late}


def _other_client(b: Builder) -> None:
    b.walk("now-regctx", list(MARK_WALK), flags=1, client=0x0BADC0DE)
    for r in b.records:  # one callback got another clientData than the call passed
        if r["kind"] == "frame" and r["walk"] == b.walks - 1 and r["index"] == 3:
            r["clientData"] = 0x0BADC0DF


DOCTORED["DSS-04"] = {"now-regctx": _other_client}


@pytest.mark.clause(*sorted(DOCTORED))
@pytest.mark.parametrize("clause", sorted(DOCTORED))
def test_doctored_run_diverges(clause: str) -> None:
    j = judge(clause, build(DOCTORED[clause]))
    assert j.status is Status.DIVERGES, (clause, j.observed)
    assert j.evidence
    # every disagreement is listed, one line each, with no per-run address; observed stays one line
    assert j.disagreements and j.observed.startswith(j.disagreements[0])
    assert all(not ADDRESS.search(line) and "\n" not in line for line in j.disagreements), j.disagreements
    assert "\n" not in j.observed


def test_every_judge_has_a_doctored_case() -> None:
    assert set(DOCTORED) == set(JUDGES)


@pytest.mark.clause("DSS-05")
def test_DSS_05_context_rip_must_be_the_frame_ip() -> None:
    def bad(b: Builder) -> None:
        b.walk("now-regctx", list(MARK_WALK), flags=1, client=0x0BADC0DE)
        for r in b.records:
            if r["kind"] == "frame" and r["walk"] == b.walks - 1 and r["index"] == 1:
                r["context"] = {"rip": r["ip"] + 8, "rsp": 0, "rbp": 0}

    j = judge("DSS-05", build({"now-regctx": bad}))
    assert j.status is Status.DIVERGES and "rip" in j.observed


@pytest.mark.clause("DSS-26")
def test_DSS_26_a_walk_that_ignores_E_FAIL_diverges() -> None:
    def go_on(b: Builder) -> None:
        b.walk(
            "now-abort-efail",
            list(MARK_WALK),
            hr=0,
            replies={2: E_FAIL},
            extra={"abortAt": 2, "abortReply": E_FAIL},
        )

    assert judge("DSS-26", build({"now-abort-efail": go_on})).status is Status.DIVERGES


# --------------------------------------------------------------------------------------------------
# Bad input


def test_missing_mark_is_a_one_line_harness_error() -> None:
    trace = build()
    records = [r for r in trace.records if not (r.kind == "mark" and getattr(r, "name", "") == "walk-now")]
    with pytest.raises(HarnessError, match="no mark 'walk-now'"):
        judge("DSS-01", Trace(path=trace.path, records=records))


def test_missing_experiment_is_a_one_line_harness_error() -> None:
    trace = build()
    records = [r for r in trace.records if getattr(r, "experiment", None) != "throw-sync"]
    with pytest.raises(HarnessError, match="no DoStackSnapshot call record of experiment throw-sync"):
        judge("DSS-10", Trace(path=trace.path, records=records))


def test_bad_payload_names_the_mark_and_seq() -> None:
    b = Builder()
    b.mark("walk-now", "{not json")
    b.walk("now-default", list(MARK_WALK))
    with pytest.raises(HarnessError, match=r"mark 'walk-now' \(seq 1\): bad payload"):
        judge("DSS-01", b.trace())


def test_missing_plan_entry_is_a_one_line_harness_error() -> None:
    plan = dict(scenario_plan())
    plan["experiments"] = [e for e in plan["experiments"] if e["id"] != "now-default"]
    with pytest.raises(HarnessError, match="the plan has no experiment entry 'now-default'"):
        judge("DSS-01", build(), plan=plan)


# --------------------------------------------------------------------------------------------------
# Live


@pytest.mark.live
@pytest.mark.clause(*sorted(JUDGES))
def test_live_DSS_01_03_04_05_07_10_11_12_14_15_16_17_19_21_26_27_29_30_as_documented_or_expected(
    runtimes: list[Runtime],
) -> None:
    assert_area_as_documented_or_expected(sorted(JUDGES), runtimes)


# --------------------------------------------------------------------------------------------------
# Issue 7 findings: expected values from the plan, every mismatch with its clause, stable lines


def _never_aborts(exp: str) -> Callable[[Builder], object]:
    """A probe that ignores the plan's abortAt/abortReply: all frames delivered, no claim."""
    return lambda b: b.walk(exp, list(MARK_WALK))


@pytest.mark.clause("DSS-26")
def test_DSS_26_a_probe_that_never_aborts_diverges_on_the_plans_replies() -> None:
    # finding 2: the abort index and reply come from the plan entries, not from the probe's call record
    assert set(USES["DSS-26"]) == {"now-abort-efail", "now-abort-sfalse"}
    j = judge("DSS-26", build({"now-abort-efail": _never_aborts("now-abort-efail")}))
    assert j.status is Status.DIVERGES
    assert j.disagreements == (
        "now-abort-efail: DSS-26: DoStackSnapshot returned 0x00000000 S_OK, the model says 0x80131361"
        " CORPROF_E_STACKSNAPSHOT_ABORTED",
        "now-abort-efail: DSS-26 at #2: the callback returned 0x00000000 S_OK, the model's callback returns"
        " 0x80004005 E_FAIL",
        "now-abort-efail: DSS-26 at #3: a callback for StackWalks::Outer after the walk was to stop",
        "now-abort-efail: DSS-26 at #4: a callback for StackWalks::Main after the walk was to stop",
        "now-abort-efail: DSS-26 at #5: a callback for an unmanaged run (FunctionID 0) after the walk was"
        " to stop",
    )
    both = build({e: _never_aborts(e) for e in ("now-abort-efail", "now-abort-sfalse")})
    assert judge("DSS-26", both).status is Status.DIVERGES
    assert judge("DSS-26", build()).status is Status.CONFORMS


@pytest.mark.clause("DSS-15")
def test_DSS_15_six_callbacks_where_nine_are_expected_diverges() -> None:
    # finding 4: the ground truth has a second reverse P/Invoke (9 callbacks), the walk shows 6. The first
    # mismatch is an order one (Main too early): the old comparison blamed only DSS-16 and DSS-15 conformed.
    truth = ["Callee", "profharness_call_back", "profharness_call_back", "Reverse", "Leaf"]
    truth += ["profharness_call_back", "Middle", "Main"]
    j = judge("DSS-15", build(reverse_stack=truth))
    assert j.status is Status.DIVERGES, j.observed
    assert "9 callback(s)" in j.expected and "6 callback(s)" in j.observed
    assert j.disagreements == (
        "reverse-regctx: DSS-03: no callback for StackWalks::Leaf, the model's #4",
        "reverse-regctx: DSS-15: no callback for an unmanaged run (FunctionID 0), the model's #5",
        "reverse-regctx: DSS-03: no callback for StackWalks::Middle, the model's #6",
    )


def _two_faults(b: Builder) -> None:
    """now-default with Leaf and Middle swapped (DSS-16) and another clientData at callback 4 (DSS-04)."""
    b.walk("now-default", _swap(MARK_WALK, 1, 2), client=0x1234ABCD)
    for r in b.records:
        if r["kind"] == "frame" and r["walk"] == b.walks - 1 and r["index"] == 4:
            r["clientData"] = 0x1234ABCE


@pytest.mark.clause("DSS-01", "DSS-04", "DSS-16")
def test_two_independent_faults_give_both_violations_with_their_clauses() -> None:
    # finding 4: the old comparison stopped at the first mismatch (the order) and never compared the
    # clientData after it, so DSS-04 conformed
    trace = build({"now-default": _two_faults})
    order = (
        "now-default: DSS-16 at #2: StackWalks::Leaf comes out of order: the model has it at #1 (leaf first)"
    )
    client = "now-default: DSS-04 at #4: clientData 0x1234abce, the model's callback gets 0x1234abcd"
    assert judge("DSS-01", trace).disagreements == (order, client)
    assert judge("DSS-16", trace).disagreements == (order,)
    assert judge("DSS-04", trace).disagreements == (client,)


@pytest.mark.clause("DSS-19")
def test_DSS_19_one_disagreement_line_per_walk_and_ip_kind() -> None:
    def unwritten(b: Builder) -> None:
        w = b.walk("now-from-ip", list(MARK_WALK), flags=1, resolve=False)
        b.add(
            "call",
            name="GetFunctionFromIP",
            experiment="now-from-ip",
            args={"ip": NATIVE_IP, "what": "native"},
            out={"functionId": None, "written": False},
            hr=E_FAIL,
        )
        for n in MARK_WALK:
            failed = n is None
            b.add(
                "call",
                name="GetFunctionFromIP",
                experiment="now-from-ip",
                args={"ip": ip_of(n, w), "what": "frame"},
                out={"functionId": None if failed else fid(n), "written": not failed},
                hr=E_FAIL if failed else 0,
            )

    j = judge("DSS-19", build({"now-from-ip": unwritten}))
    assert j.status is Status.DIVERGES
    assert j.disagreements == (
        "walk-now: GetFunctionFromIP(native ip of the probe) returned E_FAIL, expected S_OK with"
        " FunctionID 0",
        "walk-now: GetFunctionFromIP(ip of frame #5, [unmanaged]) returned E_FAIL, expected S_OK with"
        " FunctionID 0",
    )
    assert "native ip 0x" in j.observed  # the readable summary keeps the addresses


@pytest.mark.parametrize("clause", sorted(USES))
def test_every_plan_entry_a_judge_uses_is_read(clause: str) -> None:
    """``uses`` names exactly the plan entries the judge reads: without one of them the judge cannot run,
    and the plan's other entries do not change its verdict."""
    plan = scenario_plan()
    assert USES[clause], clause
    for entry in USES[clause]:
        without = {**plan, "experiments": [e for e in plan["experiments"] if e["id"] != entry]}
        with pytest.raises(HarnessError, match=f"the plan has no experiment entry '{entry}'"):
            judge(clause, build(), plan=without)
    only = {**plan, "experiments": [e for e in plan["experiments"] if e["id"] in USES[clause]]}
    assert judge(clause, build(), plan=only) == judge(clause, build())


# --------------------------------------------------------------------------------------------------
# Mutation audit: the planned contextSize (Y2), plan entries that stop exercising a clause (Z7),
# nativeAfter as redundant truth (X10)


def _plan_with(entry: str, **args: Any) -> Mapping[str, Any]:
    """The scenario's effective plan with ``entry``'s args changed (a plan that asks for something else)."""
    plan = scenario_plan()
    experiments = [
        {**e, "args": {**e["args"], **args}} if e["id"] == entry else e for e in plan["experiments"]
    ]
    assert experiments != plan["experiments"], entry
    return {**plan, "experiments": experiments}


@pytest.mark.clause("DSS-12")
def test_DSS_12_Y2_a_probe_passing_the_full_size_for_runtime_minus_1_diverges() -> None:
    # the probe's record says contextSize 3104 where the plan asked for "runtime-1" (3103 on 8.0.4): before,
    # the judge took the record's word and the model (a short size reads as a full one) agreed
    wrong = {
        "now-size-runtime-1": lambda b: b.seeded(
            "now-size-runtime-1", list(MARK_WALK), "captured", "runtime-1", CTX
        )
    }
    j = judge("DSS-12", build(wrong))
    assert j.status is Status.DIVERGES, j.observed
    assert j.disagreements == (
        f"now-size-runtime-1: DSS-12: the seed's contextSize is {CTX}, the plan asked for {CTX - 1}",
    )


@pytest.mark.clause("DSS-07", "DSS-12")
def test_DSS_12_Y2_the_planned_size_comes_from_the_runtime_version() -> None:
    # 8.0's sizes on a 3.1 runtime (sizeof(CONTEXT) 1232): every named size is off, one line per walk
    j = judge("DSS-12", build(), "3.1.23")
    assert j.status is Status.DIVERGES
    assert tuple(line for line in j.disagreements if ": DSS-12: " in line) == (
        f"now-size-runtime-1: DSS-12: the seed's contextSize is {CTX - 1}, the plan asked for 1231",
        f"now-size-larger: DSS-12: the seed's contextSize is {CTX + 256}, the plan asked for 1488",
    )
    j = judge("DSS-07", build(), "3.1.23")
    assert tuple(line for line in j.disagreements if ": DSS-12: " in line) == (
        f"now-seed-managed: DSS-12: the seed's contextSize is {CTX}, the plan asked for 1232",
    )
    with pytest.raises(HarnessError, match=r"'runtime' needs the runtime's sizeof\(CONTEXT\)"):
        judge("DSS-07", build(), "9.9.9")


@pytest.mark.clause("DSS-04", "DSS-05", "DSS-07", "DSS-11", "DSS-12", "DSS-21", "DSS-26", "DSS-27", "DSS-29")
@pytest.mark.parametrize(
    ("clause", "entry", "args", "lacks"),
    [
        ("DSS-05", "now-regctx", {"infoFlags": 0}, "infoFlags COR_PRF_SNAPSHOT_REGISTER_CONTEXT"),
        ("DSS-05", "now-default", {"infoFlags": 1}, "infoFlags COR_PRF_SNAPSHOT_DEFAULT"),
        ("DSS-04", "now-regctx", {"infoFlags": 0}, "infoFlags COR_PRF_SNAPSHOT_REGISTER_CONTEXT"),
        ("DSS-26", "now-abort-efail", {"abortReply": 0}, "args.abortReply a failure HRESULT"),
        ("DSS-26", "now-abort-sfalse", {"abortReply": E_FAIL}, "args.abortReply S_FALSE"),
        ("DSS-26", "now-abort-sfalse", {"abortAt": -1}, r"args.abortAt \(the frame whose callback aborts\)"),
        ("DSS-07", "now-seed-managed", {"seed": "native"}, "args.seed 'captured'"),
        ("DSS-11", "throw-seed-native", {"infoFlags": 1}, "infoFlags COR_PRF_SNAPSHOT_DEFAULT"),
        ("DSS-21", "throw-seed-native", {"seed": "zero"}, "args.seed 'native'"),
        ("DSS-29", "throw-seed-zero", {"seed": "captured"}, "args.seed 'zero'"),
        ("DSS-12", "now-size-small", {"contextSize": "runtime"}, "args.contextSize 'small'"),
        ("DSS-27", "now-flags-undefined", {"infoFlags": 1}, "an undefined infoFlags bit"),
        ("DSS-27", "now-flags-x86", {"infoFlags": 0}, "infoFlags COR_PRF_SNAPSHOT_X86_OPTIMIZED"),
    ],
)
def test_Z7_a_plan_entry_that_stops_exercising_the_clause_is_an_input_error(
    clause: str, entry: str, args: dict[str, Any], lacks: str
) -> None:
    # e.g. DSS-05: now-regctx asking for DEFAULT flags: the model agrees and REGISTER_CONTEXT goes unjudged
    with pytest.raises(HarnessError, match=rf"^plan entry '{entry}' lacks {lacks}$"):
        judge(clause, build(), plan=_plan_with(entry, **args))


@pytest.mark.clause("DSS-15", "DSS-03")
def test_X10_a_doctored_nativeAfter_is_an_input_error_naming_the_mark() -> None:
    trace = build()
    records = []
    for r in trace.records:
        if r.kind == "mark" and getattr(r, "name", "") == "walk-reverse":
            data = json.loads(getattr(r, "payload", None) or "")
            r = r.model_copy(update={"payload": json.dumps({**data, "nativeAfter": -1})})
        records.append(r)
    trace = Trace(path=trace.path, records=records)
    with pytest.raises(HarnessError, match=r"mark 'walk-reverse' \(seq \d+\): nativeAfter -1 disagrees with"):
        judge("DSS-15", trace)
