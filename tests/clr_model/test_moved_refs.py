"""clr_model.moved_refs: range tables, remapping, heap snapshots, MovedReferences2 event rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.errors import ModelError
from clr_model.moved_refs import (
    U64_MAX,
    ULONG_MAX,
    HeapEvent,
    HeapSnapshot,
    RangeOverflow,
    RangeOverlap,
    RangeTable,
    RangeTableError,
    RangeValueError,
    UnequalArrays,
    check_gc_events,
    compose,
    to_v1,
)
from clr_model.strategies.moved_refs import (
    Arrays,
    gc_event_sequences,
    invalid_tables,
    object_ids_for,
    valid_tables,
)

FAST = settings(max_examples=60, deadline=None)
E_FAIL = 0x80004005


def brute(arrays: Arrays, oid: int) -> int | None:
    for o, n, ln in zip(*arrays, strict=True):
        if o <= oid < o + ln:
            return n + (oid - o)
    return None


def cb(name: str, hr: int = 0, ranges: tuple[tuple[int, int, int], ...] | None = None,
       ids: tuple[int, ...] = ()) -> HeapEvent:
    return HeapEvent(kind="callback", name=name, hr=hr, ranges=ranges, object_ids=ids)


def inspect(oid: int, key: int | None = None) -> HeapEvent:
    return HeapEvent(kind="inspect", name="GetClassFromObject", object_id=oid, object_key=key)


def good_gc(hrs: list[int], ranges: tuple[tuple[int, int, int], ...] = ()) -> list[HeapEvent]:
    """One GC as a conforming runtime delivers it to a profiler implementing both callbacks."""
    events = [cb("GarbageCollectionStarted")]
    for hr in hrs:
        events.append(cb("MovedReferences2", hr=hr, ranges=ranges))
        if hr == 0:
            events.append(cb("MovedReferences", ranges=ranges))
    events.append(cb("GarbageCollectionFinished"))
    return events


def clauses(events: list[HeapEvent], **kw: bool) -> list[str]:
    return [v.clause for v in check_gc_events(events, **kw)]


# MR2-01 / MR2-02 ------------------------------------------------------------------------------------

def test_MR2_01_inside_a_gc_example() -> None:
    assert clauses(good_gc([0])) == []
    assert clauses([cb("MovedReferences2"), cb("MovedReferences")]) == ["MR2-01"]


@FAST
@given(st.lists(st.lists(st.sampled_from([0, E_FAIL]), max_size=3), max_size=4))
def test_MR2_01_inside_a_gc_property(gcs: list[list[int]]) -> None:
    events = [e for hrs in gcs for e in good_gc(hrs)]
    assert clauses(events) == []
    stray = [*events, cb("MovedReferences2", hr=E_FAIL)]
    assert clauses(stray) == ["MR2-01"]


def test_MR2_02_callback4_only_example() -> None:
    assert clauses(good_gc([0]), implements_callback4=False) == ["MR2-02"]
    v1_only = [cb("GarbageCollectionStarted"), cb("MovedReferences"), cb("GarbageCollectionFinished")]
    assert clauses(v1_only, implements_callback4=False) == []


@FAST
@given(gc_event_sequences())
def test_MR2_02_callback4_only_property(events: list[HeapEvent]) -> None:
    found = clauses(events, implements_callback4=False).count("MR2-02")
    assert found == sum(e.kind == "callback" and e.name == "MovedReferences2" for e in events)


# MR2-03 .. MR2-06: the arrays -----------------------------------------------------------------------

def test_MR2_03_parallel_arrays_example() -> None:
    with pytest.raises(UnequalArrays, match="newObjectIDRangeStart has 1 entries"):
        RangeTable([1, 100], [5], [4, 4])
    with pytest.raises(UnequalArrays, match="cMovedObjectIDRanges"):
        RangeTable([1], [5], [4], count=2)
    assert len(RangeTable([1], [5], [4], count=1)) == 1


@FAST
@given(invalid_tables())
def test_MR2_03_and_invalid_tables_name_the_clause_property(case: tuple[Arrays, str]) -> None:
    arrays, clause_id = case
    with pytest.raises(RangeTableError) as err:
        RangeTable(*arrays)
    assert err.value.clause == clause_id and clause_id in str(err.value)


@pytest.mark.clause("MR2-05")
def test_MR2_04_05_starts_per_index_example() -> None:
    table = RangeTable([0x2000, 0x1000], [0x9000, 0x8000], [0x10, 0x20])
    assert table.ranges() == [(0x2000, 0x9000, 0x10), (0x1000, 0x8000, 0x20)]
    assert table.remap(0x2000) == 0x9000 and table.remap(0x1000) == 0x8000


@pytest.mark.clause("MR2-05")
@FAST
@given(valid_tables())
def test_MR2_04_05_start_maps_to_start_property(arrays: Arrays) -> None:
    table = RangeTable(*arrays)
    for o, n, ln in zip(*arrays, strict=True):
        if ln:
            assert table.remap(o) == n


def test_MR2_06_size_t_lengths_example() -> None:
    table = RangeTable([0], [2**40], [5 * 2**32])
    assert table.remap(5 * 2**32 - 1) == 2**40 + 5 * 2**32 - 1
    with pytest.raises(RangeValueError, match=r"cObjectIDRangeLength\[0\]=-1"):
        RangeTable([0], [0], [-1])
    with pytest.raises(RangeValueError, match="not an integer"):
        RangeTable([0], ["x"], [1])  # type: ignore[list-item]


@FAST
@given(valid_tables())
def test_MR2_06_size_t_lengths_property(arrays: Arrays) -> None:
    table = RangeTable(*arrays)
    assert table.lengths.tolist() == arrays[2]
    old, new, lengths = (np.array(a, dtype=np.uint64) for a in arrays)
    numpy_built = RangeTable(old, new, lengths)
    assert numpy_built.ranges() == table.ranges()


# MR2-07 / MR2-08: membership and mapping ------------------------------------------------------------

def test_MR2_07_membership_example() -> None:
    table = RangeTable([100], [1000], [10])
    assert [table.index_of(x) for x in (99, 100, 109, 110)] == [None, 0, 0, None]
    with pytest.raises(RangeOverflow, match="MR2-07"):
        RangeTable([U64_MAX], [0], [1])


@FAST
@given(valid_tables().flatmap(lambda a: st.tuples(st.just(a), st.lists(object_ids_for(a), max_size=20))))
def test_MR2_07_membership_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    table = RangeTable(*arrays)
    for oid in ids:
        i = table.index_of(oid)
        if i is None:
            assert brute(arrays, oid) is None
        else:
            assert arrays[0][i] <= oid < arrays[0][i] + arrays[2][i]


def test_MR2_08_mapping_example() -> None:
    table = RangeTable([0x1000, 0x5000], [0x3000, 0x1000], [0x100, 0x2000])
    assert table.remap(0x1010) == 0x3010
    assert table.remap(0x6FFF) == 0x2FFF
    new, found = table.remap_many(np.array([0x1010, 0x6FFF, 0x7000, 0], dtype=np.uint64))
    assert new.tolist() == [0x3010, 0x2FFF, 0, 0] and found.tolist() == [True, True, False, False]


@FAST
@given(valid_tables().flatmap(lambda a: st.tuples(st.just(a), st.lists(object_ids_for(a), max_size=30))))
def test_MR2_08_mapping_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    table = RangeTable(*arrays)
    expect = [brute(arrays, oid) for oid in ids]
    assert [table.remap(oid) for oid in ids] == expect
    new, found = table.remap_many(np.array(ids, dtype=np.uint64))
    assert [int(v) if f else None for v, f in zip(new, found, strict=True)] == expect


def test_remap_many_crowded_buckets_fall_back() -> None:
    # 300 one-byte ranges packed at the bottom and one huge range: all small ones share a bucket
    n = 300
    old = [*range(0, 2 * n, 2), 2**62]
    new = [*range(2**40, 2**40 + 2 * n, 2), 2**63]
    lengths = [1] * n + [2**61]
    table = RangeTable(old, new, lengths)
    ids = np.array([*range(0, 2 * n), 2**62 + 7, 2**62 - 1, U64_MAX], dtype=np.uint64)
    got, found = table.remap_many(ids)
    arrays = (old, new, lengths)
    assert [int(v) if f else None for v, f in zip(got, found, strict=True)] == [
        brute(arrays, int(x)) for x in ids]


# MR2-09 / MR2-10: no inspection while objects move ---------------------------------------------------

def test_MR2_09_no_inspection_during_example() -> None:
    events = good_gc([0])
    during = [*events[:2], inspect(0x1000), *events[2:]]
    assert clauses(during) == ["MR2-09"]


@FAST
@given(st.lists(st.sampled_from([0, E_FAIL]), min_size=1, max_size=3), st.data())
def test_MR2_09_no_inspection_during_property(hrs: list[int], data: st.DataObject) -> None:
    events = good_gc(hrs)
    at = data.draw(st.integers(0, len(events)))
    probe = [*events[:at], inspect(0x1000), *events[at:]]
    moving = 2 <= at <= len(events) - 1  # after the first MovedReferences2, before Finished
    assert clauses(probe) == (["MR2-09"] if moving else [])


def test_MR2_10_inspection_after_finished_example() -> None:
    assert clauses([*good_gc([0]), inspect(0x1000)]) == []


@FAST
@given(st.lists(st.lists(st.sampled_from([0, E_FAIL]), max_size=3), min_size=1, max_size=3))
def test_MR2_10_inspection_after_finished_property(gcs: list[list[int]]) -> None:
    events: list[HeapEvent] = []
    for hrs in gcs:
        events += [*good_gc(hrs), inspect(0x42)]
    assert clauses(events) == []


# MR2-11 / MR2-12: ordering of the two callbacks ------------------------------------------------------

def test_MR2_11_v2_before_v1_example() -> None:
    bad = [cb("GarbageCollectionStarted"), cb("MovedReferences"), cb("MovedReferences2"),
           cb("GarbageCollectionFinished")]
    assert clauses(bad) == ["MR2-11", "MR2-11"]  # v1 first; then v2 never followed
    assert clauses(bad, implements_v1=False) == ["MR2-11"]


@FAST
@given(st.lists(st.sampled_from([0, E_FAIL]), min_size=1, max_size=4), st.data())
def test_MR2_11_v2_before_v1_property(hrs: list[int], data: st.DataObject) -> None:
    events = good_gc(hrs)
    v1 = [i for i, e in enumerate(events) if e.name == "MovedReferences"]
    if v1:
        i = data.draw(st.sampled_from(v1))
        assert clauses(events[:i] + events[i + 1:]) == ["MR2-11"]  # a successful v2 left unmatched


def test_MR2_12_failure_suppresses_v1_example() -> None:
    events = [cb("GarbageCollectionStarted"), cb("MovedReferences2", hr=E_FAIL), cb("MovedReferences"),
              cb("GarbageCollectionFinished")]
    assert clauses(events) == ["MR2-12"]


@FAST
@given(st.lists(st.sampled_from([0, E_FAIL]), min_size=1, max_size=4), st.data())
def test_MR2_12_failure_suppresses_v1_property(hrs: list[int], data: st.DataObject) -> None:
    events = good_gc(hrs)
    failed = [i for i, e in enumerate(events) if e.name == "MovedReferences2" and e.hr == E_FAIL]
    if failed:
        i = data.draw(st.sampled_from(failed))
        assert clauses([*events[: i + 1], cb("MovedReferences"), *events[i + 1:]]) == ["MR2-12"]


# MR2-13: what ULONG lengths lose ---------------------------------------------------------------------

def test_MR2_13_ulong_lengths_example() -> None:
    table = RangeTable([0, 2**40], [2**50, 2**51], [16, 2**32 + 5])
    v1 = to_v1(table)
    assert v1.lengths.tolist() == [16, 5] and v1.lossy == [1] and v1.lost_bytes == [2**32]
    assert to_v1(RangeTable([0], [2**33], [ULONG_MAX])).lossy == []


@FAST
@given(valid_tables())
def test_MR2_13_ulong_lengths_property(arrays: Arrays) -> None:
    table = RangeTable(*arrays)
    v1 = to_v1(table)
    assert v1.lossy == [i for i, ln in enumerate(arrays[2]) if ln > ULONG_MAX]
    cut = RangeTable(arrays[0], arrays[1], v1.lengths.tolist())
    for i in v1.lossy:  # the last byte of a lossy block is lost to a MovedReferences-only profiler
        last = arrays[0][i] + arrays[2][i] - 1
        assert table.remap(last) is not None and cut.remap(last) is None


# MR2-14 / MR2-15: disjointness -----------------------------------------------------------------------

def test_MR2_14_disjoint_old_example() -> None:
    RangeTable([0, 16], [100, 200], [16, 16])  # adjacent: fine
    with pytest.raises(RangeOverlap, match=r"MR2-14 at index 1: ranges 0 and 1 overlap in old space"):
        RangeTable([0, 15], [100, 200], [16, 16])


@FAST
@given(valid_tables(), st.data())
def test_MR2_14_disjoint_old_property(arrays: Arrays, data: st.DataObject) -> None:
    RangeTable(*arrays)
    live = [i for i, ln in enumerate(arrays[2]) if ln]
    if live:
        i = data.draw(st.sampled_from(live))
        old, new, lengths = (list(a) for a in arrays)
        old.append(old[i] + data.draw(st.integers(0, lengths[i] - 1)))
        new.append(new[i])
        lengths.append(1)
        with pytest.raises(RangeOverlap) as err:
            RangeTable(old, new, lengths)
        assert err.value.clause == "MR2-14"


def test_MR2_15_disjoint_new_example() -> None:
    with pytest.raises(RangeOverlap, match=r"MR2-15.*new space"):
        RangeTable([0, 100], [500, 508], [16, 16])


@FAST
@given(valid_tables(), invalid_tables().filter(lambda case: case[1] == "MR2-15"))
def test_MR2_15_disjoint_new_property(arrays: Arrays, case: tuple[Arrays, str]) -> None:
    RangeTable(arrays[1], arrays[0], arrays[2])  # a valid table read backwards is valid too
    with pytest.raises(RangeOverlap) as err:
        RangeTable(*case[0])
    assert err.value.clause == "MR2-15" and "new space" in str(err.value)


# MR2-16: in no range -----------------------------------------------------------------------------------

def test_MR2_16_policy_example() -> None:
    table = RangeTable([0x1000], [0x800], [0x100])
    assert table.remap(0x5000) is None
    dead, unmoved = HeapSnapshot([0x1010, 0x5000], "dead"), HeapSnapshot([0x1010, 0x5000, 0x810], "unmoved")
    assert dead.apply(table).in_no_range == 1 and dead.current(0x5000) is None
    report = unmoved.apply(table)
    assert unmoved.current(0x5000) == 0x5000 and unmoved.current(0x1010) == 0x810
    assert report.conflicts.tolist() == [0x810]  # "unmoved" would put it where a block moved to
    with pytest.raises(ModelError, match="policy"):
        HeapSnapshot([1], "maybe")  # type: ignore[arg-type]


@FAST
@given(valid_tables().flatmap(lambda a: st.tuples(st.just(a), st.lists(object_ids_for(a), max_size=20))))
def test_MR2_16_policy_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    table = RangeTable(*arrays)
    dead, unmoved = HeapSnapshot(ids, "dead"), HeapSnapshot(ids, "unmoved")
    dead.apply(table)
    unmoved.apply(table)
    for oid in set(ids):
        moved = brute(arrays, oid)
        assert dead.current(oid) == moved
        assert unmoved.current(oid) == (oid if moved is None else moved)


def test_MR2_16_fit_example() -> None:
    table = RangeTable([0x1000], [0x800], [0x100])
    dead, unmoved = HeapSnapshot.fit(table, {0x1010: 0x810, 0x5000: 0x5000}, dead=[0x3000])
    assert (dead.policy, dead.live_ok, dead.dead_dropped, dead.fits) == ("dead", False, True, False)
    assert (unmoved.policy, unmoved.fits, unmoved.report.in_no_range) == ("unmoved", True, 2)
    dead, unmoved = HeapSnapshot.fit(table, {0x1010: 0x810}, dead=[0x3000])
    assert dead.fits and unmoved.fits
    dead, unmoved = HeapSnapshot.fit(table, {0x1010: 0x820})  # the table says 0x810: no policy fits
    assert not dead.fits and not unmoved.fits


@FAST
@given(valid_tables().flatmap(lambda a: st.tuples(st.just(a), st.lists(object_ids_for(a), max_size=20))))
def test_MR2_16_fit_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    table = RangeTable(*arrays)
    moved = {oid: brute(arrays, oid) for oid in set(ids)}
    inside = {o: n for o, n in moved.items() if n is not None}
    outside = [o for o, n in moved.items() if n is None]
    dead, unmoved = HeapSnapshot.fit(table, inside, dead=outside)
    assert dead.fits and unmoved.fits  # ranges list the survivors: both readings agree
    if outside:  # the outside ids survive where they were: only "unmoved" reproduces that
        dead, unmoved = HeapSnapshot.fit(table, inside | {o: o for o in outside})
        assert not dead.fits and unmoved.fits


# MR2-17: remap what you keep ----------------------------------------------------------------------------

def test_MR2_17_stale_ids_example() -> None:
    ranges = ((0x1000, 0x800, 0x100),)
    before = [cb("ObjectAllocated", ids=(0x1010,))]
    assert clauses([*before, *good_gc([0], ranges), inspect(0x1010)]) == ["MR2-17"]
    assert clauses([*before, *good_gc([0], ranges), inspect(0x810)]) == []


def test_MR2_17_address_reuse_example() -> None:
    # A at 0x1010 moves to 0x810; B at 0x2000 moves into A's old address 0x1010
    ranges = ((0x1000, 0x800, 0x100), (0x2000, 0x1010, 0x10))
    before = [cb("ObjectAllocated", ids=(0x1010, 0x2000))]
    assert clauses([*before, *good_gc([0], ranges), inspect(0x1010)]) == []  # B's id now: not stale
    assert clauses([*before, *good_gc([0], ranges), inspect(0x2000)]) == ["MR2-17"]
    keyed = [inspect(0x1010, key=1), inspect(0x2000, key=2)]
    assert clauses([*keyed, *good_gc([0], ranges), inspect(0x810, 1), inspect(0x1010, 2)]) == []
    bad = clauses([*keyed, *good_gc([0], ranges), inspect(0x1010, 1), inspect(0x1010, 2)])
    assert bad == ["MR2-17"]  # A inspected at its old address, which B has now
    assert clauses([*keyed, *good_gc([0], ranges), inspect(0x900, 1)]) == ["MR2-17"]  # not where A went
    # in no range (MR2-16): the model does not say where it went, so any id is taken
    assert clauses([inspect(0x9000, key=3), *good_gc([0], ranges), inspect(0x7000, 3)]) == []


@FAST
@given(valid_tables(max_ranges=6).flatmap(
    lambda a: st.tuples(st.just(a), st.lists(object_ids_for(a), max_size=20, unique=True))))
def test_MR2_17_identity_not_address_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    ranges = tuple(zip(*arrays, strict=True))
    where = {oid: brute(arrays, oid) for oid in ids}
    gc = good_gc([0], ranges)
    handed = [cb("ObjectAllocated", ids=tuple(ids))]
    now = [n if n is not None else o for o, n in where.items()]
    # every object inspected at its remapped id: never stale, whatever address it now shares
    assert clauses([*handed, *gc, *(inspect(n) for n in now)]) == []
    keyed = [inspect(o, key=k) for k, o in enumerate(ids)]
    assert clauses([*keyed, *gc, *(inspect(n, key=k) for k, n in enumerate(now))]) == []
    moved = [k for k, o in enumerate(ids) if where[o] not in (None, o)]
    # by key, every moved object inspected at its old id is a violation, whoever is there now
    got = check_gc_events([*keyed, *gc, *(inspect(ids[k], key=k) for k in moved)])
    first = len(keyed) + len(gc)
    assert [(v.clause, v.index) for v in got] == [("MR2-17", first + j) for j in range(len(moved))]


@FAST
@given(valid_tables(max_ranges=4), valid_tables(max_ranges=4), st.data())
def test_MR2_17_composition_property(first: Arrays, second: Arrays, data: st.DataObject) -> None:
    t1, t2 = RangeTable(*first), RangeTable(*second)
    ids = data.draw(st.lists(st.one_of(object_ids_for(first), object_ids_for(second)), max_size=20))
    snap = HeapSnapshot(ids, "dead")
    snap.apply(t1)
    snap.apply(t2)
    both = compose(t1, t2)
    for oid in set(ids):
        assert snap.current(oid) == both.remap(oid)


# totality ------------------------------------------------------------------------------------------------

_junk = st.one_of(st.integers(-3, 2**64 + 3), st.none(), st.text(max_size=2), st.floats(allow_nan=False))


@FAST
@given(st.lists(_junk, max_size=4), st.lists(_junk, max_size=4), st.lists(_junk, max_size=4),
       st.one_of(st.none(), st.integers(-1, 5)))
def test_range_table_is_total(old: list[object], new: list[object], lengths: list[object],
                              count: int | None) -> None:
    try:
        RangeTable(old, new, lengths, count)  # type: ignore[arg-type]
    except ModelError:
        pass


@FAST
@given(gc_event_sequences())
def test_check_gc_events_is_total(events: list[HeapEvent]) -> None:
    for violation in check_gc_events(events):
        assert violation.clause.startswith("MR2-") and violation.index is not None
