"""The emu layer's judges on the live captures kept in tests/data (no runtime): the live walk of each
instant against the emulator's replay of the same capture."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conformance.adapters.capture import write_captures
from conformance.adapters.capture_records import sample_records
from conformance.checks.emu_walks import (
    CAPTURES,
    DONE_CALL,
    EMU_MAX_SAMPLES,
    Sample,
    _sampled,
    dss03_emu,
    dss07_emu,
    dss08_emu,
    dss16_emu,
)
from conformance.core import probe
from conformance.core.runner import RunOutcome, execute, reference_runtime
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import compile_scenario, load_scenario
from conformance.core.trace import Trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Status
from emu.capture import Capture, read_capture
from emu.errors import MemoryFault
from emu.memory import CaptureMemory
from emu.unwind import StopKind, looks_like_return_address
from tests.emu.synth import rewrite, with_code

LIVE = Path(__file__).resolve().parents[2] / "data" / "captures" / "live"
#: samples that made DSS-07[emu <version>] (and DSS-03) diverge on a loaded machine, the thread interrupted in
#: managed code inside a P/Invoke's preemptive-mode window
TRANSITION = LIVE.parent / "transition"
SELF = "ProfHarness.Scenarios.CaptureSampling::"
#: the CoreLib code the scenario's Enter calls (capture-sampling/app.cs, EnterCallees)
ENTER_CALLEES = "System.Threading.Volatile::"
RUNTIMES = ("3.1.23", "8.0.4")


@pytest.mark.parametrize("version", RUNTIMES)
def test_DSS_16_emu_live_walks_are_the_replays_frames_leaf_first_main_last(version: str) -> None:
    samples = [Sample.of(read_capture(p)) for p in sorted((LIVE / version).glob("*.phcap"))]
    judged = [s for s in samples if s.live is not None]
    assert judged and all(s.live == tuple(f.function_id for f in s.replay.frames if f.function_id)
                          for s in judged)  # fmt: skip
    verdict = dss16_emu(samples)
    assert verdict.status is Status.CONFORMS, verdict.disagreements
    assert verdict.observed.startswith(f"{len(judged)} sample(s) in ")


@pytest.mark.parametrize(
    ("version", "lost"), [("3.1.23", "leaf"), ("3.1.23", "main"), ("8.0.4", "leaf")]
)  # fmt: skip
def test_DSS_16_emu_a_live_walk_that_loses_the_leaf_or_main_differs_from_the_replay(
    tmp_path: Path, version: str, lost: str
) -> None:
    """The live walk loses its first managed frame (Dispatch, a callee the scenario declares above its own
    frames) or its outermost (ThreadStart on 3.1; on 8.0 the outermost is Run, one of the scenario's): it
    still gives the scenario's own frames (Work, Deep x70, Run) leaf first, so only the comparison with the
    replay, which unwinds from the leaf to the thread's first frame, sees it."""
    cap = read_capture(LIVE / version / "managed.phcap")
    live = cap.manifest.live
    assert live is not None and live.hresult == 0
    managed = [i for i, f in enumerate(live.frames) if f.function_id]
    drop = managed[0] if lost == "leaf" else managed[-1]
    cut = live.model_copy(update={"frames": live.frames[:drop] + live.frames[drop + 1 :]})
    sample = Sample.of(read_capture(rewrite(cap, tmp_path / "cut.phcap", live=cut)))
    assert sample.replay.live_recovered is True  # the known frames alone do not tell
    verdict = dss16_emu([sample, Sample.of(cap)])
    assert verdict.status is Status.DIVERGES
    assert verdict.disagreements == (
        "managed: the live walk's managed frames are not the replay's, leaf first and main last",
    )
    assert verdict.observed.startswith("1 of 2 sample(s) (DSS-16): managed: ")


@pytest.mark.parametrize(
    ("name", "phase", "function", "back", "later"),
    [
        # 8.0.4: back in CaptureSampling::Work from its inlined P/Invoke, before the store that switches the
        # thread to cooperative mode (its next instruction is 4 bytes on)
        ("8.0.4-pinvoke-return", "native", "ProfHarness.Scenarios.CaptureSampling::Work", 4, 4),
        # 3.1.23: in ReadyToRun System.GC::Collect at its call to JIT_PInvokeEnd, back from the QCall (the
        # call is 6 bytes long)
        ("3.1.23-pinvoke-helpers", "helper:gc", "System.GC::Collect", 0x16, 6),
    ],
)  # fmt: skip
def test_DSS_07_emu_a_sample_in_a_pinvokes_preemptive_window_starts_at_the_frames_recorded_return_address(
    tmp_path: Path, name: str, phase: str, function: str, back: int, later: int
) -> None:
    """Its IP is managed code, so DSS-07 judges it; but the thread is still in preemptive mode, so the
    runtime threw the naive seed out and walked from the Frame chain, whose first Frame is the top frame's
    InlinedCallFrame: its first callback is that frame at the return address the Frame recorded, before the
    interrupted IP. The replay reports the frame there, and the live walk is the model's."""
    cap = read_capture(TRANSITION / f"{name}.phcap")
    sample = Sample.of(cap)
    r = sample.replay
    top = r.frames[0]
    assert (r.place, r.phase, top.function) == ("managed", phase, function)
    live = cap.manifest.live
    assert live is not None and live.hresult == 0
    first = next(f for f in live.frames if f.function_id)
    assert (first.function_id, first.ip) == (top.function_id, top.ip - back) and top.reported_ip == first.ip
    for verdict in (dss07_emu([sample]), dss03_emu([sample]), dss16_emu([sample])):
        assert verdict.status is Status.CONFORMS, verdict.disagreements
    # one instruction later the thread is in cooperative mode: the runtime uses the seed, and a live walk
    # that still gave the recorded return address would not start at the interrupted frame
    regs = cap.manifest.registers.model_copy(update={"rip": top.ip + later})
    moved = Sample.of(read_capture(rewrite(cap, tmp_path / "later.phcap", registers=regs)))
    assert moved.replay.frames[0].reported_ip is None
    verdict = dss07_emu([moved, sample])
    assert verdict.status is Status.DIVERGES
    assert verdict.disagreements == (
        "managed: the live walk does not start at the interrupted managed frame",
    )


def test_DSS_03_emu_a_sample_in_the_vdso_is_replayed_to_the_end_of_the_stack() -> None:
    """Sampled under load on 8.0.4 (the JIT phase): the thread in the vDSO's clock_gettime, which set up a
    frame (push rbp; mov rbp, rsp) and reads a data page no capture holds. The replay passes it by scan;
    taking the caller's RBP from the frame (not the vDSO's own RBP) lets the CFI walk below go on to the
    end of the stack, so the model's callbacks are the live walk's (the replay stopped after three frames
    and DSS-03[emu 8.0.4] diverged)."""
    sample = Sample.of(read_capture(LIVE.parent / "rare" / "8.0.4-vdso-clock-gettime.phcap"))
    r = sample.replay
    assert (r.place, r.frames[0].kind, r.stop.kind) == ("helper:jit", "stub", StopKind.END_OF_STACK)
    assert r.seed is not None and r.live_matches is True
    for verdict in (dss03_emu([sample]), dss08_emu([sample]), dss16_emu([sample])):
        assert verdict.status is Status.CONFORMS, verdict.disagreements


def _calls_missing(cap: Capture) -> list[int]:
    """The live walk's return addresses into JIT code (every frame but the first) whose capture holds the
    bytes before them but no call ending there: code the capture holds as it was before the JIT put the
    method there (a stale page)."""
    live = cap.manifest.live
    if live is None or live.hresult != 0:
        return []
    ranges = [(r.start, r.end) for m in cap.manifest.jit.methods for r in m.ranges]
    memory = CaptureMemory(cap.memory_ranges())
    out = []
    for f in live.frames[1:]:
        if not f.function_id or not any(s < f.ip < e for s, e in ranges):
            continue
        try:
            memory.read(f.ip - 7, 7)
        except MemoryFault:
            continue  # no window there (the probe caps them): nothing to say
        if not looks_like_return_address(memory, f.ip):
            out.append(f.ip)
    return out


def test_DSS_07_emu_a_top_frame_at_a_funclets_first_instruction_is_reported_at_its_call_site(
    tmp_path: Path,
) -> None:
    """Sampled in CI on 8.0.4 (emu-captures; DSS-03 and DSS-07 [emu 8.0.4] diverged in 1 of 80 samples): the
    thread at the first instruction (push rbp) of Places::Contend's finally funclet, its call site's return
    address on top of the stack. The runtime's walk reported Contend once, at that call site in the parent's
    body; the replay reports the funclet's frame there too (emu/replay.py _funclet_call_sites, at any point of
    the funclet's prolog). With the prolog's frame set-up changed the frame is reported where it was
    interrupted, and both judges diverge again."""
    cap = read_capture(LIVE.parent / "rare" / "8.0.4-funclet-entry.phcap")
    sample = Sample.of(cap)
    top, live = sample.replay.frames[0], cap.manifest.live
    assert live is not None and live.frames and top.function == "ProfHarness.Places::Contend"
    site = int.from_bytes(cap.segments["stack"][:8], "little")  # the call site's return address, on top
    assert (live.frames[0].function_id, live.frames[0].ip) == (top.function_id, site) and site != top.ip
    assert top.reported_ip == site
    for judge_of in (dss03_emu, dss07_emu):
        assert judge_of([sample]).status is Status.CONFORMS
    mov_rbp_rsp = b"\x48\x89\xe5"  # instead of mov rbp, [rdi]: a frame of its own, not the parent's
    broken = Sample.of(read_capture(with_code(cap, tmp_path / "own-frame.phcap", top.ip + 5, mov_rbp_rsp)))
    assert broken.replay.frames[0].reported_ip is None
    for judge_of in (dss03_emu, dss07_emu):
        assert judge_of([broken]).status is Status.DIVERGES


def test_DSS_16_emu_a_code_page_read_before_the_jit_filled_it_hid_a_frameless_leafs_caller(
    tmp_path: Path,
) -> None:
    """Sampled under load on 8.0.4 (the dispatch phase; DSS-03, DSS-07 and DSS-16 [emu 8.0.4] diverged in 1
    of 59 samples): the thread in Rect::Area's Tier1 code, a frameless leaf (lea; imul; ret), called from
    Places::Dispatch's OSR code. The probe had read that code's page for an earlier sample, before the JIT
    put the OSR method into its free part, and never again: the capture held zeros before the return address
    on top of the stack. The replay did not take it for a return address, followed the frame-pointer chain
    (RBP the Tier0 frame's, under the OSR frame) and lost Dispatch's OSR frame and Work; the live walk was
    right. With a call ending at that return address, as the code the thread returns to must hold, the
    replay is the live walk's. (The probe now reads such a page again and the reader takes the newest copy
    written before each sample: experiments_capture.cpp recheck_code_pages, capture_records.py.)"""
    cap = read_capture(LIVE.parent / "rare" / "8.0.4-stale-osr-page.phcap")
    sample = Sample.of(cap)
    r, live = sample.replay, cap.manifest.live
    assert live is not None and live.hresult == 0
    assert (r.place, r.frames[0].function) == ("managed", "ProfHarness.Rect::Area")
    sp = cap.manifest.registers.rsp
    ret = int.from_bytes(cap.segments["stack"][:8], "little")  # the stack segment starts at SP
    assert cap.manifest.stack.sp == sp and live.frames[1].ip == ret
    dispatch = next(m for m in cap.manifest.jit.methods if m.name == "ProfHarness.Places::Dispatch")
    assert any(c.tier == "osr" and c.start <= ret < c.end for c in dispatch.ranges)
    memory = dict(cap.memory_ranges())
    stale = next(d[ret - 16 - a : ret - a] for a, d in memory.items() if a <= ret - 16 and ret <= a + len(d))
    assert stale == bytes(16)  # the page as it was before the OSR method was put there
    assert _calls_missing(cap) == [ret]
    lines = {
        dss16_emu: "managed: the live walk's managed frames are not the replay's, leaf first and main last",
        dss03_emu: "managed: the live walk's callbacks differ from the model's for the replayed stack",
        dss07_emu: "managed: the live walk does not start at the interrupted managed frame",
    }
    for judge_of, line in lines.items():
        verdict = judge_of([sample])
        assert (verdict.status, verdict.disagreements) == (Status.DIVERGES, (line,))
    # call qword ptr [rip+0], ending at the return address
    call = b"\xff\x15" + bytes(4)
    fixed = Sample.of(read_capture(with_code(cap, tmp_path / "fixed.phcap", ret - len(call), call)))
    names = [f.function for f in fixed.replay.frames[:4]]
    assert names == ["ProfHarness.Rect::Area", "ProfHarness.Places::Dispatch", SELF + "Work",
                     "ProfHarness.Recursion::Deep"]  # fmt: skip
    assert fixed.live == tuple(f.function_id for f in fixed.replay.frames if f.function_id)
    for judge_of in lines:
        verdict = judge_of([fixed])
        assert verdict.status is Status.CONFORMS, verdict.disagreements


@pytest.mark.live
def test_DSS_16_emu_every_live_return_address_into_jit_code_has_its_call_in_the_capture(
    runtimes: list[Runtime], tmp_path: Path
) -> None:
    """The probe writes a code page again when the JIT put code into it after an earlier sample read it: in
    every capture the bytes before each of the live walk's return addresses into JIT code end with a call
    (the stale-page sample above has none), and capture_done says how many pages were written again."""
    for rt in runtimes:
        trace = _sampling_run(rt)
        (done,) = trace.calls(DONE_CALL)
        changed = done.out["codePagesChanged"]
        assert isinstance(changed, int) and 0 <= changed <= done.out["codePagesRead"], rt.version
        written = write_captures(trace, tmp_path / rt.version, runtime=rt.version, scenario=CAPTURES.scenario)
        caps = [read_capture(p) for p in written.paths]
        assert caps and written.skipped == (), rt.version
        assert [(c.manifest.place, _calls_missing(c)) for c in caps if _calls_missing(c)] == [], rt.version


def test_DSS_16_emu_enters_volatile_write_is_one_of_the_declared_callees_in_every_phase(
    tmp_path: Path,
) -> None:
    """Sampled on 3.1.23 while Enter was still Tier-0 code: the thread in System.Threading.Volatile::Write,
    called by Enter, phase write-barrier. The live walk and the replay agree, but the scenario declared
    Enter and not what Enter calls, so the known frames were "not recovered" below an undeclared frame and
    DSS-16[emu 3.1.23] diverged. The scenario now declares Enter's callee in every phase."""
    cap = read_capture(LIVE.parent / "rare" / "3.1.23-enter-volatile-write.phcap")
    declared = cap.manifest.known_callees
    assert declared is not None and declared.phase == "helper:write-barrier"
    as_recorded = Sample.of(cap)
    assert [f.function for f in as_recorded.replay.frames[:3]] == [
        "System.Threading.Volatile::Write", f"{SELF}Enter", f"{SELF}Work"
    ]
    assert dss16_emu([as_recorded]).disagreements == (
        "managed: the live walk does not give the scenario's frames leaf first",
    )
    now = declared.model_copy(update={"prefixes": (*declared.prefixes, ENTER_CALLEES)})
    sample = Sample.of(read_capture(rewrite(cap, tmp_path / "declared.phcap", known_callees=now)))
    for verdict in (dss16_emu([sample]), dss03_emu([sample]), dss07_emu([sample])):
        assert verdict.status is Status.CONFORMS, verdict.disagreements


@pytest.mark.live
def test_the_scenario_declares_enters_callee_in_every_phase(runtimes: list[Runtime]) -> None:
    trace = _sampling_run(runtimes[0], samples=1, maxSamples=1)
    (mark,) = [m for m in trace.marks("capture.stack") if m.payload]
    phases = json.loads(mark.payload or "")["phases"]
    assert phases and all(
        f"{SELF}Enter" in p["callees"] and ENTER_CALLEES in p["calleePrefixes"] for p in phases
    )


# -- the sampling: until each judged place has its successful live walks, bounded ---------------------------


def _sampling_run(runtime: Runtime, **args: int) -> Trace:
    """The emu experiment's run on ``runtime`` with its sampling arguments changed to ``args``."""
    scenario = load_scenario(CAPTURES.scenario)
    plan = copy.deepcopy(effective_plan(CAPTURES.build(), scenario))
    entry = next(e for e in plan["experiments"] if e["run"] == "capture_sample")
    entry["args"].update(args)
    app = compile_scenario(scenario, reference_runtime())
    result = execute(scenario, app, runtime, probe.build_probe(), plan=plan, timeout_s=CAPTURES.timeout_s)
    assert result.outcome is RunOutcome.OK and result.trace is not None, result.describe_failure()
    return result.trace


def _counts_as_sampled(trace: Trace) -> list[tuple[int, int]]:
    """(managed, other) samples with a successful live walk after each sample, in the order taken."""
    managed = other = 0
    out = []
    records, lost = sample_records(trace)
    assert lost == []
    for rec in records:
        if rec.out["walk"]["hr"] == 0:
            if rec.out["where"]["kind"] == "managed":
                managed += 1
            else:
                other += 1
        out.append((managed, other))
    return out


@pytest.mark.live
def test_sampling_goes_on_past_its_count_until_each_place_has_its_live_walks_and_stops_there(
    runtimes: list[Runtime],
) -> None:
    """Whatever the machine's load does to where the thread spends its time, the probe stops at the first
    sample (from args.samples on) after which both places have their successful live walks, or at
    args.maxSamples; its capture_done record says which."""
    samples, least, bound = 2, 3, EMU_MAX_SAMPLES
    for rt in runtimes:
        trace = _sampling_run(rt, samples=samples, minManagedOk=least, minUnmanagedOk=least, maxSamples=bound)
        counts = _counts_as_sampled(trace)
        (done,) = trace.calls(DONE_CALL)
        enough = [i for i, (m, o) in enumerate(counts) if i + 1 >= samples and m >= least and o >= least]
        stop = enough[0] + 1 if enough else bound
        assert len(counts) == done.out["taken"] == stop, rt.version
        assert done.out["enough"] is bool(enough), rt.version
        assert (done.out["managedOk"], done.out["unmanagedOk"]) == counts[-1], rt.version
        assert (done.args["minManagedOk"], done.args["maxSamples"]) == (least, bound), rt.version


@pytest.mark.live
def test_sampling_stops_at_its_bound_and_a_verdict_with_nothing_to_judge_says_so(
    runtimes: list[Runtime],
) -> None:
    rt = runtimes[0]
    trace = _sampling_run(rt, samples=2, minManagedOk=10**6, minUnmanagedOk=0, maxSamples=5)
    (done,) = trace.calls(DONE_CALL)
    assert (done.out["taken"], done.out["enough"], len(sample_records(trace)[0])) == (5, False, 5)
    ev = Evidence(trace=trace, runtime=rt, plan={})
    assert _sampled(ev) == " in 5 sample(s), the most the plan allows"
    assert dss07_emu([], sampled=_sampled(ev)).observed == (
        "no sample with managed code on top had a successful live walk in 5 sample(s), the most the plan "
        "allows"
    )
