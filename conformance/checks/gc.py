"""MovedReferences2 against reality: the gc-moves scenario's object addresses before and after one GC.

Ground truth comes from the scenario (``conformance/scenarios/gc-moves``): it reads the address of every
tracked object itself (``__makeref``) before and after one forced compacting GC and hands them to the probe
(marks ``ids.before`` / ``ids.after``, written by ``profharness_mark_ids``, which also records the class
and the two 8-byte fields the probe reads at each address). Live object ``i`` carries Tag ``i + 1``, dead
object ``k`` Tag ``-(k + 1)``, and ``Twin = ~Tag`` (mark ``expect.objects``).

The prediction comes from the model (:mod:`clr_model.moved_refs`): a :class:`RangeTable` built from the
ranges the runtime reported for that GC remaps each old address; the judges compare the model's answer
with the scenario's after-address, never the ranges with themselves. The event-rule checker
:func:`check_gc_events` runs over the recorded callback sequence; for MR2-17 it also gets the two captures
as inspections naming each object by its Tag, so the model itself says where each object must be after
the GC. :meth:`HeapSnapshot.fit` says which MR2-16 policy reproduces the scenario's outcome.

Two runs per runtime: ``gc-moves`` (the probe returns S_OK from every callback) and ``gc-moves-fail-mr2``
(the plan's ``replies`` make the probe return E_FAIL from MovedReferences2, for MR2-12). What the profiler
returned from each callback is taken from the plan the harness wrote (``Evidence.plan``), never from the
HRESULT the probe recorded: a probe that ignores ``replies`` is judged by what it was asked to do.

Every judge lists each disagreement in ``Judgement.disagreements``, one stable line each (object numbers
of the scenario, clause names, HRESULT names; no addresses or trace positions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from clr_model.hresults import HResult, format_hresult, hresult_failed, to_unsigned
from clr_model.moved_refs import (
    GC_CALLBACK_NAMES,
    HeapEvent,
    HeapSnapshot,
    RangeTable,
    RangeTableError,
    check_gc_events,
    to_v1,
)
from clr_model.violations import Violation
from conformance.core.errors import HarnessError
from conformance.core.trace import CallbackRecord, MarkRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

SCENARIO = "gc-moves"
#: bytes of a Tagged object from its ObjectID: method table pointer + Tag + Twin
OBJECT_BYTES = 24

NA = Status.NOT_APPLICABLE


# --- reading the run ----------------------------------------------------------------------------------


def _extra(record: MarkRecord, field: str) -> Any:
    value = (record.model_extra or {}).get(field)
    if value is None:
        raise HarnessError(
            f"{record.seq}: mark {record.name!r} has no {field!r} (probe without profharness_mark_ids?)"
        )
    return value


@dataclass(frozen=True)
class Readings:
    """What profharness_mark_ids recorded for one mark."""

    seq: int
    ids: list[int]
    class_ids: list[int]
    words: list[list[int] | None]

    @classmethod
    def of(cls, record: MarkRecord) -> Readings:
        ids = [int(v) for v in _extra(record, "ids")]
        class_ids = [int(v) for v in _extra(record, "class_ids")]
        words = list(_extra(record, "words"))
        if not len(ids) == len(class_ids) == len(words):
            raise HarnessError(f"{record.seq}: mark {record.name!r}: ids/class_ids/words differ in length")
        return cls(record.seq, ids, class_ids, words)


@dataclass(frozen=True)
class Batch:
    """One MovedReferences2 call and the MovedReferences that followed it (if any)."""

    mr2: CallbackRecord
    mr1: CallbackRecord | None


@dataclass(frozen=True)
class GcRun:
    """The ground truth and the GC between the two captures."""

    live: int
    dead: int
    before: Readings
    after: Readings
    started: list[CallbackRecord]  # GarbageCollectionStarted between the captures
    finished: list[CallbackRecord]
    batches: list[Batch]

    @property
    def tags(self) -> list[int]:
        """The scenario's tag rule, per entry of ids.before."""
        return [i + 1 for i in range(self.live)] + [-(k + 1) for k in range(self.dead)]

    def evidence(self) -> tuple[int, ...]:
        seqs = [
            self.before.seq,
            self.after.seq,
            *(r.seq for r in self.started),
            *(r.seq for r in self.finished),
        ]
        for b in self.batches:
            seqs.append(b.mr2.seq)
            if b.mr1 is not None:
                seqs.append(b.mr1.seq)
        return tuple(sorted(seqs))


def _ranges(record: CallbackRecord) -> tuple[list[int], list[int], list[int], int]:
    args = record.args
    if args.get("truncated"):
        raise HarnessError(f"{record.seq}: {record.name} ranges were truncated (plan max_ranges must be 0)")
    try:
        return list(args["old"]), list(args["new"]), list(args["len"]), int(args["cMovedObjectIDRanges"])
    except (KeyError, TypeError, ValueError) as exc:
        raise HarnessError(f"{record.seq}: {record.name} has no ranges ({exc})") from exc


def read_run(trace: Trace) -> GcRun:
    expect = trace.mark("expect.objects")
    try:
        rule = json.loads(expect.payload or "")
        live, dead = int(rule["live"]), int(rule["dead"])
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"{expect.seq}: mark 'expect.objects' payload: {exc}") from exc
    before = Readings.of(trace.mark("ids.before"))
    after = Readings.of(trace.mark("ids.after"))
    if len(before.ids) != live + dead or len(after.ids) != live:
        raise HarnessError(
            f"{trace.path}: {len(before.ids)} ids before / {len(after.ids)} after, "
            f"the scenario says {live} live + {dead} dead"
        )
    window = [r for r in trace.callbacks() if before.seq < r.seq < after.seq]
    batches: list[Batch] = []
    for r in window:
        if r.name == "MovedReferences2":
            batches.append(Batch(r, None))
        elif r.name == "MovedReferences" and batches and batches[-1].mr1 is None:
            batches[-1] = Batch(batches[-1].mr2, r)
    return GcRun(
        live=live,
        dead=dead,
        before=before,
        after=after,
        started=[r for r in window if r.name == "GarbageCollectionStarted"],
        finished=[r for r in window if r.name == "GarbageCollectionFinished"],
        batches=batches,
    )


def gc_table(run: GcRun) -> RangeTable:
    """The model's table of the GC between the captures (every MovedReferences2 batch of it)."""
    olds: list[int] = []
    news: list[int] = []
    lens: list[int] = []
    for b in run.batches:
        old, new, length, _ = _ranges(b.mr2)
        olds += old
        news += new
        lens += length
    return RangeTable(olds, news, lens)


def _sane(run: GcRun) -> None:
    """The ground truth itself: one GC between the captures, and the captures read the right objects."""
    if len(run.started) != 1 or len(run.finished) != 1:
        raise HarnessError(
            f"{len(run.started)} GarbageCollectionStarted / {len(run.finished)} Finished between "
            "the captures; the scenario needs exactly one GC there"
        )
    tags = run.tags
    bad = [i for i, w in enumerate(run.before.words) if not w or w[0] != tags[i] or w[1] != ~tags[i]]
    if bad:
        raise HarnessError(
            f"ids.before[{bad[0]}] does not hold Tag {tags[bad[0]]} (capture disturbed): "
            f"{len(bad)} bad captures"
        )


def _run(ev: Evidence) -> tuple[GcRun, RangeTable | RangeTableError]:
    run = read_run(ev.trace)
    _sane(run)
    try:
        return run, gc_table(run)
    except RangeTableError as err:
        return run, err


def _run_with_table(ev: Evidence) -> tuple[GcRun, RangeTable]:
    """The run and the model's table of its GC, for the judges that need one (no table: a harness error;
    MR2-01/03/14/15 judge why)."""
    run, table = _run(ev)
    if isinstance(table, RangeTableError):
        raise HarnessError(f"the ranges of the GC are not a valid table ({table}); see MR2-03/14/15")
    if not run.batches:
        raise HarnessError("no MovedReferences2 during the compacting GC (see MR2-01)")
    return run, table


# --- what the harness asked the probe to return ------------------------------------------------------------


def planned_replies(plan: Mapping[str, Any]) -> dict[str, int]:
    """The plan's ``replies`` (callback name -> HRESULT the probe is to return); the probe returns S_OK from
    every other callback. Read from the plan the harness wrote, never from the probe's records."""
    raw = plan.get("replies", {})
    if not isinstance(raw, Mapping):
        raise HarnessError(f"plan 'replies' must be a table of callback name -> HRESULT, got {raw!r}")
    out: dict[str, int] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise HarnessError(f"plan replies.{name}: expected an HRESULT number, got {value!r}")
        out[str(name)] = to_unsigned(value)
    return out


def heap_events(trace: Trace, replies: Mapping[str, int] | None = None) -> list[HeapEvent]:
    """The recorded GC callbacks as the model's event sequence (ranges of MovedReferences2 included).

    ``replies``: what the profiler returned from each callback, from the plan (:func:`planned_replies`;
    S_OK for a callback it does not name). Without it (None) the recorded HRESULTs are used, which only
    reports and tests of the probe itself should do."""
    events: list[HeapEvent] = []
    for r in trace.callbacks():
        if r.name not in GC_CALLBACK_NAMES:
            continue
        ranges = None
        if r.name == "MovedReferences2" and "old" in r.args and not r.args.get("truncated"):
            old, new, length, _ = _ranges(r)
            ranges = tuple(zip(old, new, length, strict=False))
        hr = r.hr if replies is None else replies.get(r.name, int(HResult.S_OK))
        events.append(HeapEvent(kind="callback", name=r.name, hr=hr, ranges=ranges))
    return events


def inspected_events(
    trace: Trace, run: GcRun, replies: Mapping[str, int] | None = None
) -> tuple[list[HeapEvent], list[int]]:
    """The GC callbacks and the scenario's two captures as inspections, in trace order, with their seqs.

    Each captured object is named by its Tag (``object_key``): the model tracks it by identity through
    the GC and says whether the after-capture used the id remapping gives it (MR2-17)."""
    tags = run.tags
    timeline: list[tuple[int, HeapEvent]] = list(
        zip((r.seq for r in _gc_records(trace)), heap_events(trace, replies), strict=True)
    )
    for capture in (run.before, run.after):
        for i, oid in enumerate(capture.ids):
            timeline.append(
                (capture.seq, HeapEvent(kind="inspect", name="GetClassFromObject", object_id=oid,
                                        object_key=tags[i]))
            )
    timeline.sort(key=lambda item: item[0])  # stable: a capture's objects stay in order
    return [e for _, e in timeline], [s for s, _ in timeline]


def _gc_records(trace: Trace) -> list[CallbackRecord]:
    return [r for r in trace.callbacks() if r.name in GC_CALLBACK_NAMES]


def _violations(ev: Evidence, clause: str) -> tuple[list[Violation], list[CallbackRecord]]:
    records = _gc_records(ev.trace)
    events = heap_events(ev.trace, planned_replies(ev.plan))
    found = [v for v in check_gc_events(events) if v.clause == clause]
    return found, records


def _object_lines(what: str, indexes: Any) -> list[str]:
    return [f"live object #{int(i)}: {what}" for i in indexes]


def _by_object(
    run: GcRun, bad: Any, what: str, expected: str, *, ok: str, first: Callable[[int], str]
) -> Judgement:
    """One disagreement per live object of ``bad`` (their indexes): ``live object #i: what``. Observed:
    ``first`` of the first bad object's index (how many, and that one), else ``ok``."""
    observed = first(int(bad[0])) if len(bad) else ok
    lines = _object_lines(what, bad)
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())


def _by_problems(
    run: GcRun, problems: list[tuple[str, str]], noun: str, *, ok: str, expected: str
) -> Judgement:
    """One disagreement per problem (its second part). Observed: the first three problems' first parts (and
    how many ``noun`` when more), else ``ok``."""
    if problems:
        observed = "; ".join(o for o, _ in problems[:3])
        observed += f" ({len(problems)} {noun})" if len(problems) > 3 else ""
    else:
        observed = ok
    lines = [line for _, line in problems]
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())


# --- experiments --------------------------------------------------------------------------------------

GC_MOVES = experiment("gc-moves", scenario=SCENARIO)
#: MR2-12: only the reply differs from the scenario's plan.json (the probe returns E_FAIL from
#: MovedReferences2). Numbers until conformance.core.plans resolves symbolic names ("E_FAIL").
GC_MOVES_FAIL_MR2 = experiment(
    "gc-moves-fail-mr2",
    scenario=SCENARIO,
    plan_overlay={"replies": {"MovedReferences2": "E_FAIL"}},
)


def fail_mr2_plan() -> dict[str, Any]:
    """The overlay of the MR2-12 experiment (what differs from the scenario's plan.json)."""
    return dict(GC_MOVES_FAIL_MR2.plan_overlay or {})


# --- judges -------------------------------------------------------------------------------------------


@judge("MR2-01", GC_MOVES, what="MovedReferences2 arrives inside the forced compacting GC")
def judge_mr2_01(ev: Evidence) -> Judgement:
    run = read_run(ev.trace)
    violations, records = _violations(ev, "MR2-01")
    expected = (
        "every MovedReferences2 between GarbageCollectionStarted and GarbageCollectionFinished; "
        ">= 1 in the forced compacting GC"
    )
    lines = [v.message for v in violations]
    if len(run.started) != 1:
        lines.append(f"{len(run.started)} GarbageCollectionStarted between the captures, expected 1")
    if not run.batches:
        lines.append("no MovedReferences2 in the forced compacting GC")
    evidence = run.evidence()
    if violations:
        v = violations[0]
        observed = f"{len(violations)} outside a GC, first: {v.message} (seq {records[v.index or 0].seq})"
        evidence = tuple(r.seq for r in records)[:40]
    elif lines:
        observed = f"{len(run.batches)} MovedReferences2 in {len(run.started)} GC(s) between the captures"
    else:
        total = sum(1 for r in records if r.name == "MovedReferences2")
        observed = (
            f"{total} MovedReferences2, all inside a GC; {len(run.batches)} in the forced compacting GC"
        )
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=evidence)


@judge(
    "MR2-02",
    GC_MOVES,
    what="MovedReferences2 is delivered to a profiler implementing ICorProfilerCallback4",
)
def judge_mr2_02(ev: Evidence) -> Judgement:
    violations, records = _violations(ev, "MR2-02")
    mr2 = [r for r in records if r.name == "MovedReferences2"]
    lines = [v.message for v in violations] or ([] if mr2 else ["no MovedReferences2 delivered"])
    note = "" if lines else " (the profiler without ICorProfilerCallback4 is not tried)"
    return Judgement.from_disagreements(
        lines,
        observed=f"{len(mr2)} MovedReferences2 delivered{note}",
        expected="MovedReferences2 delivered to the probe, which implements ICorProfilerCallback4",
        evidence=tuple(r.seq for r in mr2)[:40],
    )


@judge("MR2-03", GC_MOVES, what="three parallel arrays of cMovedObjectIDRanges entries")
def judge_mr2_03(ev: Evidence) -> Judgement:
    run = read_run(ev.trace)
    expected = (
        "per call: oldObjectIDRangeStart, newObjectIDRangeStart, cObjectIDRangeLength each of "
        "cMovedObjectIDRanges entries"
    )
    records = [r for r in ev.trace.callbacks("MovedReferences2")]
    if not records:
        return Judgement(status=NA, observed="no MovedReferences2 recorded", expected=expected)
    bad: list[tuple[CallbackRecord, RangeTableError]] = []
    for r in records:
        old, new, length, count = _ranges(r)
        try:
            RangeTable(old, new, length, count=count)
        except RangeTableError as err:
            if err.clause == "MR2-03":
                bad.append((r, err))
    if bad:
        first, first_err = bad[0]
        doc = (type(first_err).__doc__ or "").strip().splitlines()[0]
        lines = [f"MovedReferences2 ranges: {doc}"]
        observed = f"{len(bad)} of {len(records)} calls; first seq {first.seq}: {first_err}"
        evidence = tuple(b.seq for b, _ in bad)[:40]
    else:
        sizes = sorted({int(r.args["cMovedObjectIDRanges"]) for r in records})
        lines = []
        observed = (
            f"{len(records)} calls, three arrays of cMovedObjectIDRanges each "
            f"(counts {sizes[0]}..{sizes[-1]})"
        )
        evidence = run.evidence()
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=evidence)


def _overlap_judge(clause: str, space: str) -> Callable[[Evidence], Judgement]:
    def judge_overlap(ev: Evidence) -> Judgement:
        run, table = _run(ev)
        expected = f"the GC's ranges are disjoint in {space} space (RangeTable validation)"
        if isinstance(table, RangeTableError) and table.clause != clause:
            return Judgement(
                status=NA,
                observed=f"the ranges are not a valid table for another rule ({table}): {clause} cannot "
                "be judged",
                expected=expected,
            )
        if isinstance(table, RangeTableError):
            lines, observed = [f"ranges of the forced compacting GC overlap in {space} space"], str(table)
        else:
            lines = []
            observed = f"{len(table)} ranges in {len(run.batches)} batches, disjoint in {space} space"
        evidence = run.evidence()
        return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=evidence)

    judge_overlap.__name__ = judge_overlap.__qualname__ = f"judge_{clause.lower().replace('-', '_')}"
    return judge_overlap


_OVERLAP = "MovedReferences2 ranges of one GC do not overlap in {} space"
judge_mr2_14 = judge("MR2-14", GC_MOVES, what=_OVERLAP.format("old"))(_overlap_judge("MR2-14", "old"))
judge_mr2_15 = judge("MR2-15", GC_MOVES, what=_OVERLAP.format("new"))(_overlap_judge("MR2-15", "new"))


def _split(
    run: GcRun, table: RangeTable
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Live before-ids, the model's new ids for them, and which were found in a range."""
    live_before = np.array(run.before.ids[: run.live], dtype=np.uint64)
    new, found = table.remap_many(live_before)
    return live_before, new, found


@judge("MR2-07", GC_MOVES, what="every live tracked object lies in a range (half-open membership)")
def judge_mr2_07(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    live_before, _, found = _split(run, table)
    after = np.array(run.after.ids, dtype=np.uint64)
    lost = np.flatnonzero(~found & (live_before != after))
    unmoved = int((~found & (live_before == after)).sum())
    expected = (
        "each live tracked object lies in a range, old_i <= id < old_i + len_i (or, in none, it did not move)"
    )
    return _by_object(
        run,
        lost,
        "in no range, yet it moved",
        expected,
        ok=f"{int(found.sum())} of {run.live} live objects in a range, {unmoved} in none and unmoved",
        first=lambda i: f"{lost.size} of {run.live} live objects in no range yet moved, "
        f"first #{i} {int(live_before[i]):#x} -> {int(after[i]):#x}",
    )


@judge("MR2-08", GC_MOVES, what="model remap of the old address == the scenario's new address")
def judge_mr2_08(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    _, new, found = _split(run, table)
    after = np.array(run.after.ids, dtype=np.uint64)
    wrong = np.flatnonzero(found & (new != after))
    expected = (
        "model remap new_i + (old - old_i) == the scenario's address after the GC, per object in a range"
    )
    if not found.any():
        return Judgement(status=NA, observed="no tracked object in any range", expected=expected)
    return _by_object(
        run,
        wrong,
        "the model's remapped id is not its address after the GC",
        expected,
        ok=f"{int(found.sum())} of {run.live} objects: model remap == scenario address",
        first=lambda i: f"{wrong.size} of {int(found.sum())} remapped wrong, first #{i}: model "
        f"{int(new[i]):#x}, scenario {int(after[i]):#x}",
    )


@judge("MR2-04", GC_MOVES, what="ranges hold live objects only: dead tracked objects in no range")
def judge_mr2_04(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    dead_ids = np.array(run.before.ids[run.live :], dtype=np.uint64)
    _, found = table.remap_many(dead_ids)
    live_before, _, live_found = _split(run, table)
    spilled = [
        i
        for i in range(run.live)
        if live_found[i]
        and table.index_of(int(live_before[i]) + OBJECT_BYTES - 1) != table.index_of(int(live_before[i]))
    ]
    expected = (
        "ranges start blocks of live objects: no dead tracked object inside a range, live ones wholly inside"
    )
    lines = [f"dead object #{int(k)}: inside a range" for k in np.flatnonzero(found)]
    lines += _object_lines("crosses the end of its range", spilled)
    if lines:
        k = int(np.argmax(found)) if found.any() else -1
        observed = (
            f"{int(found.sum())} of {run.dead} dead objects inside a range (first dead #{k} "
            f"{int(dead_ids[k]):#x})"
            if k >= 0
            else ""
        )
        if spilled:
            observed += f"{'; ' if observed else ''}{len(spilled)} live objects cross a range end"
    else:
        observed = (
            f"0 of {run.dead} dead objects in a range; {int(live_found.sum())} live "
            f"objects wholly inside theirs"
        )
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())


@judge("MR2-05", GC_MOVES, what="a range's new start is its first object's new address")
def judge_mr2_05(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    where = {oid: i for i, oid in enumerate(run.before.ids[: run.live])}
    starts = [(k, where[o]) for k, o in enumerate(table.old.tolist()) if o in where]
    expected = "a range starting at a tracked object's old address starts at that object's new address"
    if not starts:
        return Judgement(status=NA, observed="no range starts at a tracked object", expected=expected)
    bad = [(k, i) for k, i in starts if int(table.new[k]) != run.after.ids[i]]
    if bad:
        k, i = bad[0]
        observed = (
            f"{len(bad)} of {len(starts)} ranges: first range {k} new start "
            f"{int(table.new[k]):#x}, object #{i} is at {run.after.ids[i]:#x}"
        )
    else:
        observed = f"{len(starts)} ranges start at a tracked object; each new start is its new address"
    lines = _object_lines("its range's new start is not its address after the GC", (i for _, i in bad))
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())


@judge("MR2-06", GC_MOVES, what="every block has a SIZE_T length; MovedReferences = the ULONG cut")
def judge_mr2_06(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    expected = "a SIZE_T length for every block; MovedReferences carries the same blocks with to_v1(lengths)"
    zero = int((table.lengths == 0).sum())
    problems: list[tuple[str, str]] = []
    if zero:
        problems.append((f"{zero} zero lengths", "a range of length 0"))
    for b in run.batches:
        if b.mr1 is None:
            continue
        old, new, length, count = _ranges(b.mr2)
        old1, new1, length1, count1 = _ranges(b.mr1)
        v1 = to_v1(RangeTable(old, new, length)).lengths.tolist()
        if (old1, new1, count1) != (old, new, count) or length1 != v1:
            problems.append((
                f"MovedReferences seq {b.mr1.seq} differs from MovedReferences2 seq {b.mr2.seq} cut to ULONG",
                "a MovedReferences differs from its MovedReferences2 cut to ULONG lengths",
            ))
    biggest = int(table.lengths.max()) if len(table) else 0
    cut = sum(b.mr1 is not None for b in run.batches)
    ok = f"{len(table)} lengths, all > 0 (largest {biggest:#x}); {cut} MovedReferences = to_v1"
    return _by_problems(run, problems, "problems", ok=ok, expected=expected)


@judge("MR2-10", GC_MOVES, what="after GarbageCollectionFinished the objects are at the model's addresses")
def judge_mr2_10(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    _, new, found = _split(run, table)
    expected = (
        "after GarbageCollectionFinished the object at the model's new ObjectID has its class and Tag/Twin"
    )
    fin = run.finished[0].seq
    if not fin < run.after.seq:
        return Judgement(
            status=NA, observed="the after-capture is not after GarbageCollectionFinished", expected=expected
        )
    tags = run.tags
    bad: list[tuple[str, str]] = []
    for i in range(run.live):
        w = run.after.words[i]
        if not found[i] and run.before.ids[i] != run.after.ids[i]:
            bad.append((f"#{i} in no range and moved", f"live object #{i}: in no range, yet it moved"))
        elif found[i] and int(new[i]) != run.after.ids[i]:
            bad.append((f"#{i} model {int(new[i]):#x} != object at {run.after.ids[i]:#x}",
                        f"live object #{i}: not at the model's new ObjectID"))
        elif not w or w[0] != tags[i] or w[1] != ~tags[i]:
            bad.append((f"#{i} reads {w} at its new address, expected Tag {tags[i]}",
                        f"live object #{i}: its new address does not hold Tag {tags[i]}"))
        elif run.after.class_ids[i] != run.before.class_ids[i] or not run.after.class_ids[i]:
            bad.append((f"#{i} ClassID {run.after.class_ids[i]:#x} after, "
                        f"{run.before.class_ids[i]:#x} before",
                        f"live object #{i}: ClassID after the GC differs from before"))
    ok = (
        f"{run.live} objects read after GarbageCollectionFinished (seq {fin}) at "
        f"the model's ids: Tag/Twin intact, {len(set(run.after.class_ids))} ClassID as before"
    )
    return _by_problems(run, bad, "objects", ok=ok, expected=expected)


@judge("MR2-11", GC_MOVES, what="MovedReferences2 before MovedReferences in every batch")
def judge_mr2_11(ev: Evidence) -> Judgement:
    violations, records = _violations(ev, "MR2-11")
    expected = "each MovedReferences after its MovedReferences2; each successful MovedReferences2 followed"
    mr1 = sum(r.name == "MovedReferences" for r in records)
    mr2 = sum(r.name == "MovedReferences2" for r in records)
    if not mr1:
        return Judgement(status=NA, observed=f"{mr2} MovedReferences2, no MovedReferences", expected=expected)
    if violations:
        v = violations[0]
        seq = records[v.index].seq if v.index is not None else -1
        observed = f"{len(violations)} violations, first at seq {seq}: {v.message}"
    else:
        observed = f"{mr2} MovedReferences2, each followed by MovedReferences ({mr1})"
    lines = [_without_positions(v.message) for v in violations]
    evidence = tuple(r.seq for r in records)[:40]
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=evidence)


def _without_positions(message: str) -> str:
    """A model message without its event positions (``#12``), which vary between runs."""
    return " ".join(w for w in message.split() if not (w.startswith("#") and w[1:].isdigit()))


@judge(
    "MR2-12",
    GC_MOVES_FAIL_MR2,
    what="MovedReferences2 returning a failure (the plan's reply) suppresses MovedReferences",
    uses=("replies.MovedReferences2",),
)
def judge_mr2_12(ev: Evidence) -> Judgement:
    """MR2-12: no MovedReferences after a MovedReferences2 that returned a failure HRESULT.

    What MovedReferences2 returned is the plan's ``replies.MovedReferences2`` (what the harness asked the
    probe to return), not the HRESULT the probe recorded: the model is fed the planned replies, so a probe
    that ignores them (returns S_OK, and the runtime then sends MovedReferences) diverges."""
    replies = planned_replies(ev.plan)
    expected = "no MovedReferences after a MovedReferences2 that returned a failure HRESULT"
    planned = replies.get("MovedReferences2")
    if planned is None or not hresult_failed(planned):
        asked = "no reply" if planned is None else format_hresult(planned)
        return Judgement(
            status=NA,
            observed=f"the plan asks for {asked} from MovedReferences2, not a failure: MR2-12 is not "
            "exercised",
            expected=expected,
        )
    hr = format_hresult(planned)
    violations, records = _violations(ev, "MR2-12")
    mr2 = [r for r in records if r.name == "MovedReferences2"]
    mr1 = [r for r in records if r.name == "MovedReferences"]
    evidence = tuple(r.seq for r in records)[:40]
    if not mr2:
        return Judgement(
            status=NA,
            observed=f"the plan asks for {hr} from MovedReferences2, but no MovedReferences2 was delivered",
            expected=expected,
            evidence=evidence,
        )
    unfaithful = [r for r in mr2 if to_unsigned(r.hr) != planned]
    note = (
        f"; the probe recorded another HRESULT than the plan's for {len(unfaithful)} of them (first "
        f"{format_hresult(unfaithful[0].hr)})"
        if unfaithful
        else ""
    )
    if violations:
        lines = [f"MovedReferences delivered after a MovedReferences2 answered {hr}"]
        observed = (
            f"{len(mr1)} MovedReferences after {len(mr2)} MovedReferences2 answered {hr} (the plan's reply)"
        )
    else:
        lines = []
        observed = f"{len(mr2)} MovedReferences2 answered {hr} (the plan's reply); {len(mr1)} MovedReferences"
    return Judgement.from_disagreements(lines, observed=observed + note, expected=expected, evidence=evidence)


@judge("MR2-16", GC_MOVES, what="tracked ids in no range: which MR2-16 policy matches the runtime")
def judge_mr2_16(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    origin = run.before.ids
    live_truth = dict(zip(origin[: run.live], run.after.ids, strict=True))
    dead = set(origin[run.live :])
    # the model's two policies; which one does the runtime's table need?
    fits = HeapSnapshot.fit(table, live_truth, dead=sorted(dead))
    report = [
        f"{f.policy}: {f.report.in_no_range} in no range, live {'ok' if f.live_ok else 'lost'}"
        + (f", dead {'dropped' if f.dead_dropped else 'kept'}" if f.policy == "dead"
           else f", {f.report.conflicts.size} conflicts")
        for f in fits
    ]
    zero = int((table.old == table.new).sum())
    in_none_live = sum(table.index_of(o) is None for o in origin[: run.live])
    expected = (
        "model choice: remap() gives None, the caller picks 'dead' or 'unmoved'; one of the two "
        "policies must reproduce the scenario's addresses"
    )
    observed = (
        f"{in_none_live} of {run.live} live and {sum(table.index_of(o) is None for o in dead)} of "
        f"{run.dead} dead ids in no range; {zero} ranges with old == new; " + "; ".join(report)
    )
    fitting = [f.policy for f in fits if f.fits]
    observed += f"; policies that reproduce the scenario: {', '.join(fitting) or 'none'}"
    lines = [] if fitting else [
        f"policy '{f.policy}' does not reproduce the scenario: "
        + ("live objects lost" if not f.live_ok else "dead objects kept")
        for f in fits
    ]
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())


@judge("MR2-17", GC_MOVES, what="tracked ObjectIDs change and remapping finds them")
def judge_mr2_17(ev: Evidence) -> Judgement:
    run, table = _run_with_table(ev)
    before = run.before.ids[: run.live]
    changed = sum(b != a for b, a in zip(before, run.after.ids, strict=True))
    # An id in no range is the MR2-16 ambiguity (dead, or alive and not moved: an object of an older
    # generation than the one collected); that is MR2-16's verdict, so here the live objects are tracked
    # with whichever of the model's two policies loses fewer of them.
    lost_by: dict[str, list[int]] = {}
    for policy in ("dead", "unmoved"):
        snap = HeapSnapshot(before, policy=policy)
        snap.apply(table)
        pairs = enumerate(zip(before, run.after.ids, strict=True))
        lost_by[policy] = [i for i, (b, a) in pairs if snap.current(b) != a]
    policy = min(lost_by, key=lambda p: len(lost_by[p]))
    lost = lost_by[policy]
    tracked = run.live - len(lost)
    expected = (
        "ObjectIDs may change at a compacting GC; the after-capture uses, for each object, the id the "
        "model's remapping gives it (check_gc_events, objects by Tag) and HeapSnapshot finds every one"
    )
    if not changed:
        return Judgement(status=NA, observed="no tracked ObjectID changed", expected=expected)
    events, seqs = inspected_events(ev.trace, run, planned_replies(ev.plan))
    stale = [v for v in check_gc_events(events) if v.clause == "MR2-17"]
    observed = f"{changed} of {run.live} ObjectIDs changed; HeapSnapshot tracked {tracked} ('{policy}')"
    if stale:
        first = stale[0]
        observed += (
            f"; {len(stale)} after-capture ids not the remapped ones, first (seq "
            f"{seqs[first.index or 0]}): {first.message}"
        )
    tags = run.tags
    key_of = {tags[i]: i for i in range(run.live)}
    lines = _object_lines("HeapSnapshot does not find it at its address after the GC", lost)
    for v in stale:
        ev_index = v.index if v.index is not None else -1
        key = events[ev_index].object_key if 0 <= ev_index < len(events) else None
        who = f"live object #{key_of[key]}" if key in key_of else "a tracked object"
        lines.append(f"{who}: the after-capture id is not the one the model's remapping gives it")
    return Judgement.from_disagreements(lines, observed=observed, expected=expected, evidence=run.evidence())
