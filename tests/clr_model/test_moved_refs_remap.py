"""RangeTable.remap_many (MR2-07 / MR2-08) against the implementation it replaced (issue 23, part 6).

``reference_remap_many`` is the bucket index and lookup RangeTable.remap_many used before the
cache-sized, chunked index (commit af823a0), kept here word for word but reading the table's public
arrays. Every (new id, found) pair must be the same for every table and id: random valid tables (adjacent
ranges, zero-length ranges, layouts ending right below 2**64, shuffled arrays), dense tables that crowd
many range starts into one bucket, identity tables (delta 0), and the ids that sit on the edges: a
range's start, its last byte, one past its end, one before its start, 0 and 2**64 - 1.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model import moved_refs
from clr_model.moved_refs import U64_MAX, RangeTable
from clr_model.strategies.moved_refs import Arrays, object_ids_for, valid_tables

U64 = npt.NDArray[np.uint64]
PROPERTY = settings(max_examples=200, deadline=None)


def reference_remap_many(table: RangeTable, ids: U64) -> tuple[U64, npt.NDArray[np.bool_]]:
    """remap_many as of commit af823a0 (16 buckets per range from the lowest start, clip, step, search)."""
    live = np.flatnonzero(table.lengths > 0)
    order = live[np.argsort(table.old[live], kind="stable")]
    old_s, new_s, len_s = table.old[order], table.new[order], table.lengths[order]
    end_s = old_s + len_s
    next_s = np.append(old_s[1:], np.uint64(U64_MAX))
    delta_s = new_s - old_s
    n = int(old_s.size)
    if n == 0:
        return np.zeros(ids.shape, dtype=np.uint64), np.zeros(ids.shape, dtype=bool)
    lo_i, hi_i = int(old_s[0]), int(end_s[-1])
    wanted = min(1 << max((16 * n - 1).bit_length(), 1), 1 << 21)
    shift = max(0, (hi_i - lo_i - 1).bit_length() - (wanted.bit_length() - 1))
    count = ((hi_i - lo_i - 1) >> shift) + 1
    starts = np.uint64(lo_i) + (np.arange(count, dtype=np.uint64) << np.uint64(shift))
    buckets = (np.searchsorted(old_s, starts, side="right") - 1).astype(np.int32)

    lo, hi = old_s[0], end_s[-1]
    inside = None
    if ids.size and (ids.min() < lo or ids.max() >= hi):
        inside = (ids >= lo) & (ids < hi)
        ids = np.clip(ids, lo, hi - np.uint64(1))
    k = buckets[(ids - lo) >> np.uint64(shift)].astype(np.intp)
    rem = np.flatnonzero(next_s[k] <= ids)
    for _ in range(4):
        if rem.size == 0:
            break
        k[rem] += 1
        rem = rem[next_s[k[rem]] <= ids[rem]]
    if rem.size:
        k[rem] = np.searchsorted(old_s, ids[rem], side="right") - 1
    found = ids < end_s[k]
    if inside is not None:
        found &= inside
    out = delta_s[k]
    out += ids
    out[~found] = 0
    return out, found


def edge_ids(arrays: Arrays) -> list[int]:
    """Every range's start, last byte, end, the byte before its start; 0 and 2**64 - 1."""
    out = {0, U64_MAX}
    for s, ln in zip(arrays[0], arrays[2], strict=True):
        out.update(v for v in (s - 1, s, s + ln - 1, s + ln) if 0 <= v <= U64_MAX)
    return sorted(out)


def assert_same(arrays: Arrays, ids: list[int]) -> None:
    table = RangeTable(*arrays)
    query = np.array(ids, dtype=np.uint64)
    want_new, want_found = reference_remap_many(table, query)
    got_new, got_found = table.remap_many(query)
    assert got_new.dtype == np.uint64 and got_found.dtype == np.bool_
    assert got_found.tolist() == want_found.tolist()
    assert got_new.tolist() == want_new.tolist()
    assert [table.remap(i) for i in ids] == [int(v) if f else None
                                             for v, f in zip(got_new, got_found, strict=True)]


@st.composite
def dense_tables(draw: st.DrawFn) -> Arrays:
    """Up to 400 small ranges packed close (gaps 0..3), optionally beside one huge range far away: many
    range starts share a bucket, so lookups step several times or fall back to binary search."""
    n = draw(st.integers(1, 400))
    lengths = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    base = draw(st.sampled_from([0, 1, 2**40 + 3, U64_MAX - 2**20]))
    old, at = [], base
    for ln, gap in zip(lengths, gaps, strict=True):
        at += gap
        old.append(at)
        at += ln
    if draw(st.booleans()) and at < 2**62:
        old.append(2**62)
        lengths.append(draw(st.integers(1, 2**61)))
    shift = draw(st.sampled_from([0, 1, 2**32]))  # 0: an identity table (delta 0 everywhere)
    new = [o - base + shift if base else o + shift for o in old]
    if max(n_ + ln for n_, ln in zip(new, lengths, strict=True)) > U64_MAX:
        new = list(old)
    return old, new, lengths


def with_edges(tables: st.SearchStrategy[Arrays]) -> st.SearchStrategy[tuple[Arrays, list[int]]]:
    return tables.flatmap(lambda a: st.tuples(
        st.just(a), st.lists(object_ids_for(a), max_size=40).map(lambda ids: ids + edge_ids(a))))


@PROPERTY
@given(with_edges(valid_tables(max_ranges=16)))
def test_MR2_08_remap_many_same_as_reference_property(case: tuple[Arrays, list[int]]) -> None:
    assert_same(*case)


@PROPERTY
@given(with_edges(dense_tables()))
def test_MR2_08_remap_many_dense_tables_same_as_reference_property(case: tuple[Arrays, list[int]]) -> None:
    assert_same(*case)


@settings(max_examples=100, deadline=None)
@given(with_edges(valid_tables().map(lambda a: (a[0], list(a[0]), a[2]))))
def test_MR2_08_remap_many_identity_table_same_as_reference_property(case: tuple[Arrays, list[int]]) -> None:
    arrays, ids = case
    assert_same(arrays, ids)
    table = RangeTable(*arrays)
    new, found = table.remap_many(np.array(ids, dtype=np.uint64))
    assert np.array_equal(new[found], np.array(ids, dtype=np.uint64)[found])


@settings(max_examples=100, deadline=None)
@given(with_edges(valid_tables(max_ranges=16)), st.integers(1, 9))
def test_MR2_08_remap_many_chunk_boundaries_property(case: tuple[Arrays, list[int]], chunk: int) -> None:
    with mock.patch.object(moved_refs._OldSpaceIndex, "CHUNK", chunk):
        assert_same(*case)


def test_MR2_08_remap_many_empty_table_and_no_ids() -> None:
    assert_same(([], [], []), [0, 1, U64_MAX])
    assert_same(([0], [5], [0]), [0, 5, U64_MAX])  # zero-length only: covers nothing
    assert_same(([0x1000], [0x2000], [0x10]), [])


def test_MR2_08_remap_many_table_ending_at_the_top_of_the_space() -> None:
    # one range ending at 2**64 - 1 (the highest end a valid table has) and one starting at 0
    arrays = ([U64_MAX - 0x100, 0], [0, U64_MAX - 0x100], [0x100, 0x100])
    assert_same(arrays, [*edge_ids(arrays), U64_MAX - 0x101, 0x7FFF_FFFF_FFFF_FFFF])
    table = RangeTable(*arrays)
    new, found = table.remap_many(np.array([U64_MAX - 1, U64_MAX, 0, 0xFF, 0x100], dtype=np.uint64))
    assert found.tolist() == [True, False, True, True, False]
    assert new.tolist() == [0xFF, 0, U64_MAX - 0x100, U64_MAX - 1, 0]


def test_MR2_08_remap_many_large_random_table_same_as_reference() -> None:
    # the bench's shape, smaller: 5,000 ranges with gaps, ids over the span and 2% outside it
    rng = np.random.default_rng(23)
    n = 5000
    lengths = rng.integers(16, 65536, n, dtype=np.uint64)
    gaps = rng.integers(0, 65536, n, dtype=np.uint64)
    old = np.cumsum(lengths + gaps, dtype=np.uint64) - lengths + np.uint64(0x7F00_0000_0000)
    perm = rng.permutation(n)
    new = np.empty(n, dtype=np.uint64)
    new[perm] = np.cumsum(lengths[perm], dtype=np.uint64) - lengths[perm] + np.uint64(0x7E00_0000_0000)
    table = RangeTable(old, new, lengths)
    lo, hi = int(old[0]), int(old[-1] + lengths[-1])
    ids = rng.integers(lo - (hi - lo) // 50, hi + (hi - lo) // 50, 300_000, dtype=np.uint64)
    ids = np.concatenate([ids, old, old + lengths - np.uint64(1), old + lengths, old - np.uint64(1)])
    got_new, got_found = table.remap_many(ids)
    want_new, want_found = reference_remap_many(table, ids)
    assert np.array_equal(got_found, want_found) and np.array_equal(got_new, want_new)
    assert 0.2 < float(got_found.mean()) < 0.8
