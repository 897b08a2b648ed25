"""Emu-layer judges: the live runtime's asynchronous walks against the replay of the same instants.

The experiment runs ``capture-sampling`` (the sampled thread cycles through managed code, P/Invoke and the
runtime's helpers, below a 70-frame recursion) with 40 samples. Each sample becomes a capture
(:mod:`conformance.adapters.capture`); :mod:`emu.replay` unwinds it from the registers and memory of the
instant, builds the documented seed (DSS-19) and asks the model what DoStackSnapshot delivers. The judges
compare the live walk the probe made at that instant (naive seed: the ucontext as it was) with inputs the
walk cannot influence: the scenario's own known frames and declared callees, and the replay.

The verdicts fill the matrix column "emu <version>". Each disagreement line names a place (managed,
helper kind, native module), never a count or an address, so an expectation could pin it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from clr_model.hresults import HResult
from conformance.adapters.capture import write_captures
from conformance.core.errors import HarnessError
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status
from emu.capture import read_capture
from emu.errors import EmuError
from emu.replay import ReplayResult, replay

#: samples per runtime: enough that every kind of place turns up, managed code on top included, even on a
#: loaded machine (40 gave 2 managed-on-top samples in some runs, and none once under load)
EMU_SAMPLES = 80

_PLAN = {
    "experiments": [
        {"id": "register-sampled", "at": "mark:capture.register", "run": "capture_register_thread",
         "args": {"name": "sampled"}, "times": 1},
        {"id": "sample", "at": "mark:capture.sample", "run": "capture_sample",
         "args": {"target": "sampled", "samples": EMU_SAMPLES, "intervalUs": 1000, "timeoutMs": 2000,
                  "infoFlags": ["COR_PRF_SNAPSHOT_REGISTER_CONTEXT"], "jitMap": True},
         "times": 1},
    ]
}  # fmt: skip

CAPTURES = experiment("emu-captures", scenario="capture-sampling", plan_overlay=_PLAN, timeout_s=90.0)

_CACHE: dict[str, tuple[ReplayResult, ...]] = {}


def replays(ev: Evidence) -> tuple[ReplayResult, ...]:
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
                    out.append(replay(read_capture(path)))
                except EmuError as exc:
                    raise HarnessError(f"{path.name}: {exc}") from None
        if not out:
            raise HarnessError(f"{ev.trace.path}: the run wrote no capture ({len(written.skipped)} left out)")
        _CACHE.clear()
        _CACHE[key] = tuple(out)
    return _CACHE[key]


def _ok(r: ReplayResult) -> bool:
    return r.live_hresult is not None and r.live_hresult.startswith(f"0x{int(HResult.S_OK):08X}")


def _verdict(
    samples: Sequence[ReplayResult],
    holds: Callable[[ReplayResult], bool],
    *,
    clause: str,
    expected: str,
    broken: str,
    none: str,
) -> Judgement:
    if not samples:
        return Judgement(status=Status.NOT_APPLICABLE, expected=expected, observed=none)
    bad = [r for r in samples if not holds(r)]
    places = sorted({r.place for r in samples})
    if not bad:
        return Judgement(
            status=Status.CONFORMS, expected=expected,
            observed=f"{len(samples)} sample(s) in {', '.join(places)}: every one as the model says",
        )  # fmt: skip
    lines = tuple(sorted({f"{r.place}: {broken}" for r in bad}))
    return Judgement(
        status=Status.DIVERGES, expected=expected, disagreements=lines,
        observed=f"{len(bad)} of {len(samples)} sample(s) ({clause}): {lines[0]}",
    )  # fmt: skip


@judge("DSS-16", CAPTURES, what="live walks give the scenario's own frames leaf first", layer="emu",
       uses=("sample",))  # fmt: skip
def judge_dss16_emu(ev: Evidence) -> Judgement:
    samples = [r for r in replays(ev) if _ok(r) and r.known_managed is not None]
    return _verdict(
        samples, lambda r: bool(r.live_recovered), clause="DSS-16",
        expected="a successful walk reports the frames the scenario knows (Work, Deep x70, Run) leaf first, "
        "below only the callees it declares for the phase",
        broken="the live walk does not give the scenario's frames leaf first",
        none="no live walk succeeded",
    )  # fmt: skip


@judge("DSS-03", CAPTURES, what="live walks: one callback per frame of the replayed stack", layer="emu",
       uses=("sample",))  # fmt: skip
def judge_dss03_emu(ev: Evidence) -> Judgement:
    samples = [r for r in replays(ev) if _ok(r)]
    return _verdict(
        samples, lambda r: bool(r.live_matches), clause="DSS-03",
        expected="the callbacks the model predicts for the replayed stack (one per managed frame, "
        "FunctionIDs and IPs, leaf first)",
        broken="the live walk's callbacks differ from the model's for the replayed stack",
        none="no live walk succeeded",
    )  # fmt: skip


@judge("DSS-07", CAPTURES, what="managed code on top: the walk starts at the interrupted frame", layer="emu",
       uses=("sample",))  # fmt: skip
def judge_dss07_emu(ev: Evidence) -> Judgement:
    samples = [r for r in replays(ev) if _ok(r) and r.frames and r.frames[0].kind == "managed"]
    return _verdict(
        samples, lambda r: bool(r.model.callbacks) and _starts_at(r, 0), clause="DSS-07",
        expected="with managed code on top the seed's registers are those of the top frame: the walk's first "
        "callback is the interrupted frame (the replay's frame 0)",
        broken="the live walk does not start at the interrupted managed frame",
        none="no sample with managed code on top had a successful live walk",
    )  # fmt: skip


@judge("DSS-08", CAPTURES, what="helper or native code on top: no managed frame below it is skipped",
       layer="emu", uses=("sample",))  # fmt: skip
def judge_dss08_emu(ev: Evidence) -> Judgement:
    samples = [r for r in replays(ev) if _ok(r) and r.seed is not None and r.seed.frame_index > 0]
    return _verdict(
        samples, lambda r: r.seed is not None and _starts_at(r, r.seed.frame_index), clause="DSS-08",
        expected="with helper or native code on top the walk starts at the first managed frame below it (the "
        "replay's seed frame), skipping none",
        broken="the live walk does not start at the first managed frame below the code on top",
        none="no sample with unmanaged code on top had a successful live walk",
    )  # fmt: skip


def _starts_at(r: ReplayResult, index: int) -> bool:
    """The live walk's first managed callback is the replay's frame ``index`` (FunctionID, and the IP the
    runtime reports for it): the live walk equals the model's for the replayed stack, whose first managed
    callback is that frame."""
    frame = r.frames[index]
    ip = frame.reported_ip if frame.reported_ip is not None else frame.ip
    first = next(((c.func_id, c.ip) for c in r.model.callbacks if c.func_id), None)
    return first == (frame.function_id, ip) and bool(r.live_matches)
