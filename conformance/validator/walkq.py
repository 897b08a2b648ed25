"""A profiler's walks against ground truth (issue 24 part 4, ``validate --walk-quality``).

With ``PROFHARNESS_PROXY_WALK_QUALITY=1`` the recording proxy captures, at each DoStackSnapshot the profiler
makes of a thread parked in the profiler's own signal handler, that thread's interrupted registers and stack
and the frames the runtime delivered (``conformance/native/proxy/walkq.cpp``): one ``proxy.walkq.sample``
mark per walk, in the probe's ``capture_sample`` record shape, its bytes in a frames sidecar beside the trace,
and at the end one ``proxy.walkq.map`` mark (``/proc/self/maps`` and the code ranges of every managed method a
captured stack word fell in). :func:`measure` turns each sample into an emu capture
(:mod:`conformance.adapters.capture`, written beside the trace as ``walkq/sample-NNNN.phcap``), replays it
(:func:`emu.replay.replay`: the unwound frames, the seed of the first managed frame, and the callbacks the
model predicts for that walk) and compares the managed frames the profiler got with those: the truth is the
model's walk from the first managed frame, leaf first, by FunctionID.

Per place (the capture's place: ``managed``, ``helper:runtime``, ``helper:stub``, ``native:<module>``), over
the walks whose truth holds at least one managed frame: walks, failed walks (an HRESULT that is a failure),
complete walks (S_OK and exactly the truth's FunctionIDs in order), frames got and frames the truth has,
missing and extra frames (multiset differences), and the failure share (not complete). Walks whose truth has
no managed frame (a thread without managed code, a sample the replay could not unwind) are counted apart.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from clr_model.hresults import HResult, hresult_failed
from clr_model.words import FROZEN
from conformance.adapters.capture import CAPTURE_SUFFIX, captures_from_trace
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, HeaderRecord, MarkRecord, Record, Trace, read_trace
from conformance.validator.result import WalkQuality, WalkQualityRow
from emu.capture import LiveWalk, read_capture, write_capture
from emu.errors import EmuError
from emu.replay import ReplayResult, replay

__all__ = [
    "ENV",
    "ENVIRONMENT",
    "MAP_MARK",
    "NOTES",
    "SAMPLE_MARK",
    "ProfilerWalk",
    "compare",
    "measure",
    "quality_table",
    "walk_of",
]

#: the proxy's switch (walkq.cpp)
ENV = "PROFHARNESS_PROXY_WALK_QUALITY"
#: what a --walk-quality run sets: the switch, and the shadow heap off (PROFHARNESS_PROXY_HEAP=0): its
#: ObjectAllocated events send every allocation through the runtime's slow path and a callback into the
#: proxy, which would move where the sampled threads spend their time (and where the walks land) away from
#: the profiler's own run; the heap's verdicts on inspected ObjectIDs are not made in such a run
ENVIRONMENT = {ENV: "1", "PROFHARNESS_PROXY_HEAP": "0"}
#: said with every table (WalkQuality.notes): the run's shadow heap, and the walks the table leaves out
NOTES = (
    "the shadow heap was off in this run (PROFHARNESS_PROXY_HEAP=0): its allocation callbacks would move "
    "where the sampled threads spend their time; no verdict on ObjectIDs is made from it",
    "walks of threads not parked in a signal handler (suspended by the runtime, e.g. after SuspendRuntime, "
    "or running) are counted, not captured, and are left out of the table: the proxy has no instant of them "
    "(no interrupted registers the replay could start from), and the runtime walks a suspended thread from "
    "its own Frame chain whatever the seed",
)
SAMPLE_MARK = "proxy.walkq.sample"
#: the end's counts; the methods' code as it was noted; the maps when they changed
MAP_MARK = "proxy.walkq.map"
METHODS_MARK = "proxy.walkq.methods"
MAPS_MARK = "proxy.walkq.maps"
#: the folder beside the trace the captures are written to
CAPTURES_DIR = "walkq"



class ProfilerWalk(BaseModel):
    """One walk: what the profiler got against the truth."""

    model_config = FROZEN
    place: str
    hresult: int
    got: tuple[int, ...]
    truth: tuple[int, ...]
    missing: int
    extra: int

    @property
    def failed(self) -> bool:
        return hresult_failed(self.hresult)

    @property
    def complete(self) -> bool:
        return self.hresult == int(HResult.S_OK) and self.got == self.truth


def compare(place: str, hresult: int, got: Sequence[int], truth: Sequence[int]) -> ProfilerWalk:
    """One walk's comparison (FunctionIDs leaf first; zeros, the runs of unmanaged frames, left out)."""
    got_ids = tuple(f for f in got if f)
    truth_ids = tuple(f for f in truth if f)
    have, want = Counter(got_ids), Counter(truth_ids)
    return ProfilerWalk(place=place, hresult=hresult, got=got_ids, truth=truth_ids,
                          missing=sum((want - have).values()), extra=sum((have - want).values()))  # fmt: skip


def walk_of(result: ReplayResult, live: LiveWalk | None, place: str | None = None) -> ProfilerWalk:
    """The live walk of a capture against its replay's truth: the managed frames the model delivers from the
    replay's seed (the first managed frame), none when the replay found no managed frame. ``place``: the
    place to count it in (default: the capture's)."""
    truth = [c.func_id for c in result.model.callbacks if c.func_id] if result.seed is not None else []
    got = [f.function_id for f in live.frames] if live is not None else []
    return compare(place or result.place, live.hresult if live is not None else 0, got, truth)


def quality_table(walks: Sequence[ProfilerWalk]) -> tuple[WalkQualityRow, ...]:
    """Per place, sorted by place."""
    acc: dict[str, list[int]] = {}
    for w in walks:
        row = acc.setdefault(w.place, [0] * 8)
        if not w.truth:
            row[7] += 1
            continue
        row[0] += 1
        row[1] += w.failed
        row[2] += w.complete
        row[3] += len(w.got)
        row[4] += len(w.truth)
        row[5] += w.missing
        row[6] += w.extra
    return tuple(
        WalkQualityRow(place=p, walks=r[0], failed=r[1], complete=r[2], frames_got=r[3],
                       frames_truth=r[4], missing=r[5], extra=r[6], no_truth=r[7])
        for p, r in sorted(acc.items())
    )  # fmt: skip


def _as_call(mark: MarkRecord, name: str, args: object, out: object) -> CallRecord:
    return CallRecord(kind="call", seq=mark.seq, os_tid=mark.os_tid, name=name,
                      args=args if isinstance(args, dict) else {}, out=out if isinstance(out, dict) else {},
                      hr=0)  # fmt: skip


def _capture_trace(trace: Trace) -> Trace:
    """The proxy's walkq marks as the probe's capture records (capture_sample, capture_maps and
    capture_jit_map)."""
    records: list[Record] = [r for r in trace.records if isinstance(r, HeaderRecord)]
    for mark in trace.marks(SAMPLE_MARK):
        extra = mark.model_extra or {}
        args, out = extra.get("args"), extra.get("out")
        if isinstance(args, dict) and isinstance(out, dict) and args.get("seed") != "given":
            out = {**out, "seedContext": None}  # a walk without a seed: the capture carries no CONTEXT
        records.append(_as_call(mark, "capture_sample", args, out))
    maps = trace.marks(MAPS_MARK)
    if maps:
        text = (maps[-1].model_extra or {}).get("maps")
        records.append(_as_call(maps[-1], "capture_maps", {}, {"maps": text}))
    methods: list[object] = []
    for mark in trace.marks(METHODS_MARK):
        listed = (mark.model_extra or {}).get("methods")
        methods.extend(listed if isinstance(listed, list) else [])
    if methods:
        records.append(_as_call(trace.marks(METHODS_MARK)[-1], "capture_jit_map", {}, {"methods": methods}))
    return Trace(path=trace.path, records=records)


def measure(trace_path: Path, runtime: str) -> WalkQuality:
    """Replay every captured walk of the trace at ``trace_path`` (a run on ``runtime``) and tabulate."""
    trace = read_trace(trace_path)
    maps = trace.marks(MAP_MARK)
    extra = (maps[-1].model_extra or {}) if maps else {}

    def count(key: str) -> int:
        value = extra.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    counts = {"captured": count("captured"), "dropped": count("dropped"), "not_parked": count("notParked")}
    if not trace.marks(SAMPLE_MARK):
        return WalkQuality(**counts, notes=NOTES)
    skipped: list[str] = []
    if not maps:
        skipped.append(f"no {MAP_MARK} mark: the run ended before Shutdown (the counts are those of the "
                       "samples written)")  # fmt: skip
        counts["captured"] = len(trace.marks(SAMPLE_MARK))
    try:
        specs, left_out = captures_from_trace(_capture_trace(trace), runtime=runtime)
    except HarnessError as exc:
        return WalkQuality(**counts, skipped=(*skipped, exc.message), notes=NOTES)
    skipped.extend(left_out)
    out_dir = trace_path.parent / CAPTURES_DIR
    shutil.rmtree(out_dir, ignore_errors=True)
    walks: list[ProfilerWalk] = []
    failed = 0
    for spec in specs:
        path = out_dir / f"sample-{spec.sample:04d}{CAPTURE_SUFFIX}"
        live = spec.manifest.live
        try:
            write_capture(path, spec.manifest, spec.payloads)
            result = replay(read_capture(path))
        except EmuError as exc:
            failed += 1
            skipped.append(f"sample {spec.sample}: {exc}")
            continue
        walks.append(walk_of(result, live))
    return WalkQuality(rows=quality_table(walks), **counts, skipped=tuple(skipped), replay_failed=failed,
                       captures=str(out_dir) if specs else "", notes=NOTES)  # fmt: skip
