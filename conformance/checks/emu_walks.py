"""Emu-layer judges: the live runtime's asynchronous walks against the replay of the same instants.

The experiment runs ``capture-sampling`` (the sampled thread cycles through managed code, P/Invoke and the
runtime's helpers, below a 70-frame recursion) with :data:`EMU_SAMPLES` samples, and more (up to
:data:`EMU_MAX_SAMPLES`) until :data:`EMU_MIN_PER_PLACE` of them had managed code on top and as many other
code, each with a successful live walk: the places DSS-07 and DSS-08 judge. Each sample becomes a capture
(:mod:`conformance.adapters.capture`); :mod:`emu.replay` unwinds it from the registers and memory of the
instant, builds the documented seed (DSS-19) and asks the model what DoStackSnapshot delivers. The judges
compare the live walk the probe made at that instant (naive seed: the ucontext as it was) with inputs the
walk cannot influence: the scenario's own known frames and declared callees, and the replay (DSS-16: the
live walk's managed frames are the replay's, leaf first and main last; DSS-03/07/08: its callbacks are the
model's for the replayed stack).

The verdicts fill the matrix column "emu <version>". Each disagreement line names a place (managed,
helper kind, native module), never a count or an address, so an expectation could pin it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clr_model.hresults import HResult
from conformance.adapters.capture import write_captures
from conformance.core.errors import HarnessError
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status
from emu.capture import Capture, read_capture
from emu.errors import EmuError
from emu.replay import ReplayResult, replay
from emu.unwind import StopKind

#: samples per runtime, at least: enough that every kind of place usually turns up
EMU_SAMPLES = 80
#: successful live walks the sampling goes on for, per place the judges need (managed code on top for DSS-07,
#: other code on top for DSS-08): no fixed count is enough on a loaded machine, where the sampled thread can
#: spend a whole 80 ms window waiting for the contended Monitor or in a GC (80 samples then held no
#: managed-on-top sample at all, and DSS-07 was not applicable)
EMU_MIN_PER_PLACE = 4
#: the bound on samples per runtime (each is replayed): 400 ms of the thread's time at the 1 ms interval,
#: five times the window in which 80 samples found no managed code on top
EMU_MAX_SAMPLES = 400

_PLAN = {
    "experiments": [
        {"id": "register-sampled", "at": "mark:capture.register", "run": "capture_register_thread",
         "args": {"name": "sampled"}, "times": 1},
        {"id": "sample", "at": "mark:capture.sample", "run": "capture_sample",
         "args": {"target": "sampled", "samples": EMU_SAMPLES, "minManagedOk": EMU_MIN_PER_PLACE,
                  "minUnmanagedOk": EMU_MIN_PER_PLACE, "maxSamples": EMU_MAX_SAMPLES, "intervalUs": 1000,
                  "timeoutMs": 2000, "infoFlags": ["COR_PRF_SNAPSHOT_REGISTER_CONTEXT"], "jitMap": True},
         "times": 1},
    ]
}  # fmt: skip

#: the probe's record of how the sampling ended (samples taken, successful live walks per place)
DONE_CALL = "capture_done"

CAPTURES = experiment("emu-captures", scenario="capture-sampling", plan_overlay=_PLAN, timeout_s=90.0)

@dataclass(frozen=True)
class Sample:
    """One sample: the replay of its capture, and the live walk's managed FunctionIDs, leaf first (None
    unless the live walk succeeded)."""

    replay: ReplayResult
    live: tuple[int, ...] | None

    @classmethod
    def of(cls, capture: Capture) -> Sample:
        live = capture.manifest.live
        ok = live is not None and live.hresult == int(HResult.S_OK)
        ids = tuple(f.function_id for f in live.frames if f.function_id) if live is not None and ok else None
        return cls(replay(capture), ids)


_CACHE: dict[str, tuple[Sample, ...]] = {}


def samples(ev: Evidence) -> tuple[Sample, ...]:
    """Every sample of the run replayed (written once per trace as captures beside it, then cached)."""
    key = f"{ev.trace.path}:{ev.runtime.version}"
    if key not in _CACHE:
        with tempfile.TemporaryDirectory(prefix="emu-captures-") as tmp:
            written = write_captures(
                ev.trace, Path(tmp), runtime=ev.runtime.version, scenario="capture-sampling"
            )
            out = []
            for path in written.paths:
                try:
                    out.append(Sample.of(read_capture(path)))
                except EmuError as exc:
                    raise HarnessError(f"{path.name}: {exc}") from None
        if not out:
            raise HarnessError(f"{ev.trace.path}: the run wrote no capture ({len(written.skipped)} left out)")
        _CACHE.clear()
        _CACHE[key] = tuple(out)
    return _CACHE[key]


def replays(ev: Evidence) -> tuple[ReplayResult, ...]:
    """The replay of every sample of the run (see :func:`samples`)."""
    return tuple(s.replay for s in samples(ev))


def _ok(r: ReplayResult) -> bool:
    return r.live_hresult is not None and r.live_hresult.startswith(f"0x{int(HResult.S_OK):08X}")


def _sampled(ev: Evidence) -> str:
    """How the sampling ended, by the probe's own account (its ``capture_done`` record), for a verdict that
    found nothing to judge: " in N sample(s), ..." or "" without the record."""
    done = ev.trace.calls(DONE_CALL)
    if not done:
        return ""
    out, args = done[-1].out, done[-1].args
    taken, bound = out.get("taken"), args.get("maxSamples")
    if out.get("enough") is False and taken == bound:
        return f" in {taken} sample(s), the most the plan allows"
    return f" in {taken} sample(s)"


def _managed_on_top(r: ReplayResult) -> bool:
    return bool(r.frames) and r.frames[0].kind == "managed"


def _unmanaged_on_top(r: ReplayResult) -> bool:
    """Helper or native code on top of a managed frame (the seed's frame is not the first)."""
    return r.seed is not None and r.seed.frame_index > 0


def _verdict(
    samples: Sequence[Sample],
    fault: Callable[[Sample], str | None],
    *,
    clause: str,
    expected: str,
    none: str,
) -> Judgement:
    """The verdict over ``samples``; ``fault`` says how one breaks the clause (None: it keeps it)."""
    if not samples:
        return Judgement(status=Status.NOT_APPLICABLE, expected=expected, observed=none)
    faults = [(s.replay.place, fault(s)) for s in samples]
    places = sorted({s.replay.place for s in samples})
    lines = tuple(sorted({f"{place}: {why}" for place, why in faults if why is not None}))
    if not lines:
        return Judgement(
            status=Status.CONFORMS, expected=expected,
            observed=f"{len(samples)} sample(s) in {', '.join(places)}: every one as the model says",
        )  # fmt: skip
    bad = sum(1 for _, why in faults if why is not None)
    return Judgement(
        status=Status.DIVERGES, expected=expected, disagreements=lines,
        observed=f"{bad} of {len(samples)} sample(s) ({clause}): {lines[0]}",
    )  # fmt: skip


def _unless(holds: Callable[[ReplayResult], bool], broken: str) -> Callable[[Sample], str | None]:
    return lambda s: None if holds(s.replay) else broken


@judge("DSS-16", CAPTURES, what="live walks give the replayed stack's managed frames leaf first, main last",
       layer="emu", uses=("sample",))  # fmt: skip
def judge_dss16_emu(ev: Evidence) -> Judgement:
    return dss16_emu(samples(ev))


def dss16_emu(all_samples: Sequence[Sample]) -> Judgement:
    """DSS-16 over samples: a successful live walk gives the managed frames the emulator's replay of the
    same instant unwinds, leaf first and main (the outermost) last, the scenario's own among them."""
    return _verdict(
        [s for s in all_samples if s.live is not None and s.replay.known_managed is not None],
        _dss16_fault, clause="DSS-16",
        expected="a successful walk reports the managed frames the replay of the same instant unwinds, leaf "
        "first and main last, among them the frames the scenario knows (Work, Deep x70, Run), below only "
        "the callees it declares for the phase",
        none="no live walk succeeded",
    )  # fmt: skip


def _dss16_fault(s: Sample) -> str | None:
    r, live = s.replay, list(s.live or ())
    replayed = [f.function_id for f in r.frames if f.function_id]
    # to the outermost frame (main) when the replay unwound to the end of the stack, else as far as it got
    whole = r.stop.kind is StopKind.END_OF_STACK
    if (live if whole else live[: len(replayed)]) != replayed:
        return "the live walk's managed frames are not the replay's, leaf first and main last"
    if not r.live_recovered:
        return "the live walk does not give the scenario's frames leaf first"
    return None


@judge("DSS-03", CAPTURES, what="live walks: one callback per frame of the replayed stack", layer="emu",
       uses=("sample",))  # fmt: skip
def judge_dss03_emu(ev: Evidence) -> Judgement:
    return dss03_emu(samples(ev))


def dss03_emu(all_samples: Sequence[Sample]) -> Judgement:
    """DSS-03 over samples: a successful live walk gives the model's callbacks for the replayed stack."""
    return _verdict(
        [s for s in all_samples if _ok(s.replay)],
        _unless(lambda r: bool(r.live_matches),
                "the live walk's callbacks differ from the model's for the replayed stack"),
        clause="DSS-03",
        expected="the callbacks the model predicts for the replayed stack (one per managed frame, "
        "FunctionIDs and IPs, leaf first)",
        none="no live walk succeeded",
    )  # fmt: skip


@judge("DSS-07", CAPTURES, what="managed code on top: the walk starts at the interrupted frame", layer="emu",
       uses=("sample",))  # fmt: skip
def judge_dss07_emu(ev: Evidence) -> Judgement:
    return dss07_emu(samples(ev), sampled=_sampled(ev))


def dss07_emu(all_samples: Sequence[Sample], *, sampled: str = "") -> Judgement:
    """DSS-07 over samples whose live walk succeeded with managed code on top: the walk's first callback is
    the interrupted frame, at the IP the runtime reports for it (``sampled``: how the sampling ended, for
    the verdict that has none to judge)."""
    return _verdict(
        [s for s in all_samples if _ok(s.replay) and _managed_on_top(s.replay)],
        _unless(lambda r: bool(r.model.callbacks) and _starts_at(r, 0),
                "the live walk does not start at the interrupted managed frame"),
        clause="DSS-07",
        expected="with managed code on top the seed's registers are those of the top frame: the walk's first "
        "callback is the interrupted frame (the replay's frame 0; at the return address its InlinedCallFrame "
        "recorded while the thread is still in its P/Invoke's preemptive mode)",
        none=f"no sample with managed code on top had a successful live walk{sampled}",
    )  # fmt: skip


@judge("DSS-08", CAPTURES, what="helper or native code on top: no managed frame below it is skipped",
       layer="emu", uses=("sample",))  # fmt: skip
def judge_dss08_emu(ev: Evidence) -> Judgement:
    return dss08_emu(samples(ev), sampled=_sampled(ev))


def dss08_emu(all_samples: Sequence[Sample], *, sampled: str = "") -> Judgement:
    """DSS-08 over samples whose live walk succeeded with helper or native code on top: the walk starts at
    the first managed frame below it (``sampled`` as in :func:`dss07_emu`)."""
    return _verdict(
        [s for s in all_samples if _ok(s.replay) and _unmanaged_on_top(s.replay)],
        _unless(lambda r: r.seed is not None and _starts_at(r, r.seed.frame_index),
                "the live walk does not start at the first managed frame below the code on top"),
        clause="DSS-08",
        expected="with helper or native code on top the walk starts at the first managed frame below it (the "
        "replay's seed frame), skipping none",
        none=f"no sample with unmanaged code on top had a successful live walk{sampled}",
    )  # fmt: skip


def _starts_at(r: ReplayResult, index: int) -> bool:
    """The live walk's first managed callback is the replay's frame ``index`` (FunctionID, and the IP the
    runtime reports for it): the live walk equals the model's for the replayed stack, whose first managed
    callback is that frame."""
    frame = r.frames[index]
    ip = frame.reported_ip if frame.reported_ip is not None else frame.ip
    first = next(((c.func_id, c.ip) for c in r.model.callbacks if c.func_id), None)
    return first == (frame.function_id, ip) and bool(r.live_matches)
