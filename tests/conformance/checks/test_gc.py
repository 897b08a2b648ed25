"""The gc area's judges on synthetic traces (conforming and doctored) and one live run on both runtimes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clr_model.hresults import HResult
from conformance.checks import gc
from conformance.core.errors import HarnessError
from conformance.core.plans import resolve_plan
from conformance.core.runtimes import Runtime
from conformance.core.scenarios import load_scenario
from conformance.core.trace import read_trace
from conformance.suite.orchestrate import effective_plan
from conformance.suite.verdicts import Evidence, Judge, Judgement, Status
from tests.conformance.live import assert_area_as_documented_or_expected

LIVE, DEAD = 12, 4
BASE_OLD, BASE_NEW = 0x7F0000100000, 0x7F0000200000
SIZE = 24  # Tagged: method table + Tag + Twin
MT = 0x7F00DEAD0000

GC_CLAUSES = [
    "MR2-01",
    "MR2-02",
    "MR2-03",
    "MR2-04",
    "MR2-05",
    "MR2-06",
    "MR2-07",
    "MR2-08",
    "MR2-10",
    "MR2-11",
    "MR2-12",
    "MR2-14",
    "MR2-15",
    "MR2-16",
    "MR2-17",
]


@dataclass
class Heap:
    """A synthetic GC: live objects packed with dead ones between them, then compacted to BASE_NEW."""

    before: list[int] = field(default_factory=list)  # live, then dead
    after: list[int] = field(default_factory=list)
    ranges: list[list[int]] = field(default_factory=list)  # [old, new, len]

    @classmethod
    def make(cls) -> Heap:
        heap = cls()
        live_old: list[int] = []
        dead_old: list[int] = []
        addr = BASE_OLD
        for i in range(LIVE):
            live_old.append(addr)
            addr += SIZE
            if i % 3 == 2 and len(dead_old) < DEAD:
                dead_old.append(addr)
                addr += SIZE
        heap.before = live_old + dead_old
        # blocks of contiguous live objects: split wherever a dead object sat
        new = BASE_NEW
        start = live_old[0]
        length = 0
        for old in live_old:
            if old != start + length:
                heap.ranges.append([start, new - length, length])
                start, length = old, 0
            heap.after.append(new)
            new += SIZE
            length += SIZE
        heap.ranges.append([start, new - length, length])
        return heap


def _records(
    heap: Heap,
    *,
    mr2_hr: int = 0,
    v1: bool = True,
    mr2_outside: bool = False,
    words_after: list[list[int]] | None = None,
) -> list[dict[str, Any]]:
    tags = [i + 1 for i in range(LIVE)] + [-(k + 1) for k in range(DEAD)]
    seq = iter(range(10_000))

    def rec(kind: str, **fields: Any) -> dict[str, Any]:
        return {"seq": next(seq), "kind": kind, "os_tid": 1, "tid": 7, **fields}

    def ids_mark(name: str, ids: list[int], words: list[list[int]]) -> dict[str, Any]:
        return rec(
            "mark",
            name=name,
            payload=None,
            ids=ids,
            class_ids=[MT] * len(ids),
            words=words,
            class_names={},
            class_hr=0,
            class_source="GetClassFromObject",
        )

    def moved(name: str, ranges: list[list[int]], hr: int = 0) -> dict[str, Any]:
        lens = [r[2] for r in ranges] if name == "MovedReferences2" else [r[2] & 0xFFFFFFFF for r in ranges]
        return rec(
            "callback",
            name=name,
            hr=hr,
            args={
                "cMovedObjectIDRanges": len(ranges),
                "old": [r[0] for r in ranges],
                "new": [r[1] for r in ranges],
                "len": lens,
                "truncated": False,
            },
        )

    out = [rec("header", probe="0.1.0", pid=1, plan={})]
    out.append(rec("mark", name="expect.objects", payload=json.dumps({"live": LIVE, "dead": DEAD})))
    out.append(ids_mark("ids.before", heap.before, [[t, ~t] for t in tags]))
    half = len(heap.ranges) // 2
    batches = [heap.ranges[:half], heap.ranges[half:]]
    if mr2_outside:
        out.append(moved("MovedReferences2", batches[0], mr2_hr))
    out.append(rec("callback", name="GarbageCollectionStarted", hr=0, args={}))
    for batch in batches[1:] if mr2_outside else batches:
        out.append(moved("MovedReferences2", batch, mr2_hr))
        if v1 and mr2_hr == 0:
            out.append(moved("MovedReferences", batch))
    out.append(rec("callback", name="GarbageCollectionFinished", hr=0, args={}))
    out.append(ids_mark("ids.after", heap.after, words_after or [[t, ~t] for t in tags[:LIVE]]))
    out.append(rec("end"))
    return out


#: the plan of the MR2-12 experiment, as the harness writes it: the probe answers MovedReferences2 with E_FAIL
FAIL_PLAN: dict[str, Any] = {"replies": {"MovedReferences2": int(HResult.E_FAIL)}}
FAILED_THEN_V1 = "MovedReferences delivered after a MovedReferences2 answered 0x80004005 E_FAIL"
#: every judge of the gc-moves experiment, as registered
JUDGES: tuple[Judge, ...] = gc.GC_MOVES.build().judges


def _evidence(tmp_path: Path, records: list[dict[str, Any]], plan: dict[str, Any] | None = None) -> Evidence:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    runtime = Runtime(version="9.9.9", host=tmp_path / "dotnet", framework_dir=tmp_path, source="synthetic")
    return Evidence(trace=read_trace(path, strict=True), runtime=runtime, plan=plan or {})


def judge(
    tmp_path: Path,
    fn: Callable[[Evidence], Judgement],
    records: list[dict[str, Any]],
    plan: dict[str, Any] | None = None,
) -> Judgement:
    return fn(_evidence(tmp_path, records, plan))


def _set_field(records: list[dict[str, Any]], name: str, fn: Callable[[dict[str, Any]], None]) -> None:
    for r in records:
        if r.get("name") == name:
            fn(r)


# --- conforming --------------------------------------------------------------------------------------


@pytest.mark.parametrize("j", JUDGES, ids=[j.clause for j in JUDGES])
def test_every_judge_conforms_on_a_consistent_gc(tmp_path: Path, j: Judge) -> None:
    result = judge(tmp_path, j.judge, _records(Heap.make()))
    assert result.status is Status.CONFORMS, result.observed
    assert result.evidence
    assert result.disagreements == ()


def test_the_registry_holds_every_gc_clause_once() -> None:
    assert sorted(j.clause for j in JUDGES) == [c for c in GC_CLAUSES if c != "MR2-12"]
    assert [j.clause for j in gc.GC_MOVES_FAIL_MR2.build().judges] == ["MR2-12"]
    assert gc.GC_MOVES_FAIL_MR2.build().judges[0].uses == ("replies.MovedReferences2",)


# --- doctored ----------------------------------------------------------------------------------------


def test_MR2_08_a_wrong_new_start_diverges(tmp_path: Path) -> None:
    heap = Heap.make()
    heap.after[0] += 8  # the scenario found the first object elsewhere than the ranges say
    heap.after[5] += 8
    result = judge(tmp_path, gc.judge_mr2_08, _records(heap, words_after=None))
    assert result.status is Status.DIVERGES
    assert "#0" in result.observed
    assert result.disagreements == (  # every object, one stable line each (no address)
        "live object #0: the model's remapped id is not its address after the GC",
        "live object #5: the model's remapped id is not its address after the GC",
    )


def test_MR2_05_new_start_not_the_first_objects_address_diverges(tmp_path: Path) -> None:
    heap = Heap.make()
    heap.ranges[-1][1] += 24
    assert judge(tmp_path, gc.judge_mr2_05, _records(heap)).status is Status.DIVERGES


def test_MR2_07_a_moved_object_in_no_range_diverges(tmp_path: Path) -> None:
    heap = Heap.make()
    del heap.ranges[1]
    result = judge(tmp_path, gc.judge_mr2_07, _records(heap))
    assert result.status is Status.DIVERGES
    assert "in no range yet moved" in result.observed


def test_MR2_16_live_object_in_no_range_that_moved_fits_no_policy(tmp_path: Path) -> None:
    heap = Heap.make()
    del heap.ranges[0]
    assert judge(tmp_path, gc.judge_mr2_16, _records(heap)).status is Status.DIVERGES


def test_MR2_16_unmoved_object_in_no_range_fits_the_unmoved_policy(tmp_path: Path) -> None:
    heap = Heap.make()
    first = heap.ranges.pop(0)
    for i in range(first[2] // SIZE):  # the first block stayed where it was and is not reported
        heap.after[i] = heap.before[i]
    result = judge(tmp_path, gc.judge_mr2_16, _records(heap))
    assert result.status is Status.CONFORMS
    assert "unmoved" in result.observed


def test_MR2_04_a_range_covering_a_dead_object_diverges(tmp_path: Path) -> None:
    heap = Heap.make()
    heap.ranges[-1][2] += SIZE  # now also covers the dead object after the last block
    result = judge(tmp_path, gc.judge_mr2_04, _records(heap))
    assert result.status is Status.DIVERGES
    assert "dead objects inside a range" in result.observed


def test_MR2_03_arrays_of_different_lengths_diverge(tmp_path: Path) -> None:
    records = _records(Heap.make())
    _set_field(records, "MovedReferences2", lambda r: r["args"]["new"].pop())
    result = judge(tmp_path, gc.judge_mr2_03, records)
    assert result.status is Status.DIVERGES
    assert "MR2-03" in result.observed


def test_MR2_06_movedreferences_lengths_not_the_ulong_cut_diverge(tmp_path: Path) -> None:
    records = _records(Heap.make())
    _set_field(records, "MovedReferences", lambda r: r["args"]["len"].__setitem__(0, 8))
    assert judge(tmp_path, gc.judge_mr2_06, records).status is Status.DIVERGES


@pytest.mark.parametrize(("clause", "index", "space"), [("MR2-14", 0, "old"), ("MR2-15", 1, "new")])
def test_MR2_14_MR2_15_overlapping_ranges_diverge(
    tmp_path: Path, clause: str, index: int, space: str
) -> None:
    heap = Heap.make()
    heap.ranges[1][index] = heap.ranges[0][index] + 8
    fn = next(j.judge for j in JUDGES if j.clause == clause)
    result = judge(tmp_path, fn, _records(heap))
    assert result.status is Status.DIVERGES
    assert f"{space} space" in result.observed
    assert result.disagreements == (f"ranges of the forced compacting GC overlap in {space} space",)


def test_MR2_01_movedreferences2_outside_a_gc_diverges(tmp_path: Path) -> None:
    result = judge(tmp_path, gc.judge_mr2_01, _records(Heap.make(), mr2_outside=True))
    assert result.status is Status.DIVERGES


def test_MR2_02_no_movedreferences2_diverges(tmp_path: Path) -> None:
    records = [r for r in _records(Heap.make()) if r.get("name") != "MovedReferences2"]
    assert judge(tmp_path, gc.judge_mr2_02, records).status is Status.DIVERGES


def test_MR2_10_wrong_tag_at_the_new_address_diverges(tmp_path: Path) -> None:
    words = [[i + 1, ~(i + 1)] for i in range(LIVE)]
    words[3] = [99, ~99]
    result = judge(tmp_path, gc.judge_mr2_10, _records(Heap.make(), words_after=words))
    assert result.status is Status.DIVERGES
    assert "#3" in result.observed


def test_MR2_11_movedreferences_first_diverges(tmp_path: Path) -> None:
    records = _records(Heap.make())
    i = next(k for k, r in enumerate(records) if r.get("name") == "MovedReferences2")
    records[i]["name"], records[i + 1]["name"] = "MovedReferences", "MovedReferences2"
    assert judge(tmp_path, gc.judge_mr2_11, records).status is Status.DIVERGES


def test_MR2_12_no_movedreferences_after_failure_conforms(tmp_path: Path) -> None:
    result = judge(tmp_path, gc.judge_mr2_12, _records(Heap.make(), mr2_hr=int(HResult.E_FAIL)), FAIL_PLAN)
    assert result.status is Status.CONFORMS
    assert "E_FAIL" in result.observed and "the plan's reply" in result.observed


def test_MR2_12_movedreferences_after_failure_diverges(tmp_path: Path) -> None:
    records = _records(Heap.make())  # v1 follows each MovedReferences2 ...
    _set_field(
        records, "MovedReferences2", lambda r: r.__setitem__("hr", int(HResult.E_FAIL))
    )  # ... that failed
    result = judge(tmp_path, gc.judge_mr2_12, records, FAIL_PLAN)
    assert result.status is Status.DIVERGES
    assert result.disagreements == (FAILED_THEN_V1,)


def test_MR2_12_a_probe_that_ignores_the_plans_replies_diverges(tmp_path: Path) -> None:
    """Finding 2 of issue 7: the judge took the failed replies from the HRESULT the probe recorded, so a
    probe that ignored the plan's ``replies`` (returned and recorded S_OK; the runtime then sent
    MovedReferences) made MR2-12 n/a. The replies come from the plan now: the model, told MovedReferences2
    answered E_FAIL, sees each MovedReferences that followed."""
    records = _records(Heap.make())  # S_OK recorded, MovedReferences after each MovedReferences2
    result = judge(tmp_path, gc.judge_mr2_12, records, FAIL_PLAN)
    assert result.status is Status.DIVERGES
    assert "the probe recorded another HRESULT than the plan's for 2 of them (first 0x00000000 S_OK)" in (
        result.observed
    )
    assert result.disagreements == (FAILED_THEN_V1,)


def test_MR2_12_a_recorded_failure_the_plan_did_not_ask_for_is_no_conformance(tmp_path: Path) -> None:
    """The probe's record alone (E_FAIL recorded, no reply in the plan) is not the profiler's answer."""
    result = judge(tmp_path, gc.judge_mr2_12, _records(Heap.make(), mr2_hr=int(HResult.E_FAIL)))
    assert result.status is Status.NOT_APPLICABLE
    assert "the plan asks for no reply from MovedReferences2" in result.observed


def test_MR2_12_not_applicable_when_the_plan_asks_for_success(tmp_path: Path) -> None:
    plan = {"replies": {"MovedReferences2": 0}}
    result = judge(tmp_path, gc.judge_mr2_12, _records(Heap.make()), plan)
    assert result.status is Status.NOT_APPLICABLE


def test_MR2_12_a_malformed_reply_in_the_plan_is_a_one_line_harness_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"plan replies\.MovedReferences2: expected an HRESULT number"):
        judge(tmp_path, gc.judge_mr2_12, _records(Heap.make()), {"replies": {"MovedReferences2": "E_FAIL?"}})


def test_MR2_11_judges_the_plans_replies_not_the_probes_record(tmp_path: Path) -> None:
    """A probe recording E_FAIL it was not asked to return: MR2-11 still expects each MovedReferences2
    (answered S_OK per the plan) to be followed by MovedReferences."""
    records = _records(Heap.make())
    _set_field(records, "MovedReferences2", lambda r: r.__setitem__("hr", int(HResult.E_FAIL)))
    assert judge(tmp_path, gc.judge_mr2_11, records).status is Status.CONFORMS


def test_MR2_17_ids_that_did_not_change_are_not_applicable(tmp_path: Path) -> None:
    heap = Heap.make()
    heap.after = heap.before[:LIVE]
    heap.ranges = [[r[0], r[0], r[2]] for r in heap.ranges]
    assert judge(tmp_path, gc.judge_mr2_17, _records(heap)).status is Status.NOT_APPLICABLE


def test_MR2_17_remapping_that_misses_diverges(tmp_path: Path) -> None:
    heap = Heap.make()
    heap.after[-1] += 8
    assert judge(tmp_path, gc.judge_mr2_17, _records(heap)).status is Status.DIVERGES


def _compacted_in_place() -> Heap:
    """The synthetic GC, but compacting down onto the first live object: objects reuse old addresses."""
    heap = Heap.make()
    shift = heap.before[0] - heap.ranges[0][1]
    heap.after = [a + shift for a in heap.after]
    heap.ranges = [[o, n + shift, n_len] for o, n, n_len in heap.ranges]
    return heap


def test_MR2_17_an_address_another_object_moved_into_is_not_stale(tmp_path: Path) -> None:
    heap = _compacted_in_place()
    reused = {a for a in heap.after} & set(heap.before)
    assert any(heap.after[i] != heap.before[i] and heap.after[i] in reused for i in range(LIVE))
    result = judge(tmp_path, gc.judge_mr2_17, _records(heap))
    assert result.status is Status.CONFORMS, result.observed


def test_MR2_17_an_after_capture_at_the_old_address_diverges(tmp_path: Path) -> None:
    heap = _compacted_in_place()
    moved = next(i for i in range(LIVE) if heap.after[i] != heap.before[i])
    heap.after[moved] = heap.before[moved]
    result = judge(tmp_path, gc.judge_mr2_17, _records(heap))
    assert result.status is Status.DIVERGES
    assert f"uses ObjectID {heap.before[moved]:#x} from before the GC" in result.observed


def test_MR2_16_policy_fit_comes_from_the_model(tmp_path: Path) -> None:
    result = judge(tmp_path, gc.judge_mr2_16, _records(_compacted_in_place()))
    assert result.status is Status.CONFORMS
    assert "policies that reproduce the scenario: dead, unmoved" in result.observed


def test_missing_ground_truth_is_a_one_line_harness_error(tmp_path: Path) -> None:
    records = [r for r in _records(Heap.make()) if r.get("name") != "ids.after"]
    with pytest.raises(HarnessError, match=r"ids\.after"):
        judge(tmp_path, gc.judge_mr2_08, records)


def test_a_disturbed_capture_is_a_harness_error(tmp_path: Path) -> None:
    records = _records(Heap.make())
    _set_field(records, "ids.before", lambda r: r["words"].__setitem__(0, [5, 5]))
    with pytest.raises(HarnessError, match="capture disturbed"):
        judge(tmp_path, gc.judge_mr2_08, records)


def test_fail_plan_overlay_carries_only_the_reply() -> None:
    assert gc.fail_mr2_plan() == {"replies": {"MovedReferences2": "E_FAIL"}}
    assert resolve_plan(gc.fail_mr2_plan()) == {"replies": {"MovedReferences2": 0x80004005}}
    plan = effective_plan(gc.GC_MOVES_FAIL_MR2.build(), load_scenario(gc.SCENARIO))
    assert plan["replies"] == {"MovedReferences2": 0x80004005}
    assert plan["max_ranges"] == 0  # the rest is the scenario's plan.json


# --- live --------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.clause(*GC_CLAUSES)
def test_MR2_live_suite_on_every_runtime(runtimes: list[Runtime]) -> None:
    assert_area_as_documented_or_expected(GC_CLAUSES, runtimes)


def test_MR2_17_a_live_object_in_no_range_that_stayed_put_is_tracked(tmp_path: Path) -> None:
    """An object of an older generation than the one collected is in no range and keeps its id (the MR2-16
    ambiguity, judged there): MR2-17 tracks it with the policy that loses fewer live objects. Found by
    fuzz-runtime (a gen0 GC after a warm-up GC promoted the objects)."""
    heap = Heap.make()
    first = next(r for r in heap.ranges if r[0] <= heap.before[0] < r[0] + r[2])
    heap.ranges = [r for r in heap.ranges if r is not first]
    for i in range(LIVE):
        if first[0] <= heap.before[i] < first[0] + first[2]:
            heap.after[i] = heap.before[i]
    assert heap.ranges and any(heap.after[i] != heap.before[i] for i in range(LIVE))
    result = judge(tmp_path, gc.judge_mr2_17, _records(heap))
    assert result.status is Status.CONFORMS, result.observed
    assert "('unmoved')" in result.observed
