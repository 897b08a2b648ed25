"""clr_model.shadow_heap: every object start at every instant; an ObjectID judged OBJECT, STALE (MR2-17),
INTERIOR (MR2-08) or UNKNOWN. Property tests over generated GC layouts with address reuse in the same GC
(compaction into addresses other objects left, as .NET 8 regions do), several MovedReferences2 batches,
delta-0 blocks and generations that were not collected."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.shadow_heap import HeapVerdict, ShadowHeap

BASE = 0x7F00_0000_0000


@dataclass(frozen=True)
class Layout:
    """One GC: the objects before it (start, size), which survive, where each survivor goes, and the blocks
    (old, new, length) of contiguous survivors, split into batches."""

    before: tuple[tuple[int, int], ...]
    after: dict[int, int]  # old start -> new start of each survivor
    batches: tuple[tuple[tuple[int, int, int], ...], ...]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    n = draw(st.integers(1, 24))
    sizes = [8 * draw(st.integers(3, 12)) for _ in range(n)]
    gaps = [8 * draw(st.integers(0, 3)) for _ in range(n)]
    before = []
    at = BASE
    for size, gap in zip(sizes, gaps, strict=True):
        at += gap
        before.append((at, size))
        at += size
    alive = [draw(st.booleans()) for _ in range(n)]
    if not any(alive):
        alive[draw(st.integers(0, n - 1))] = True
    survivors = [o for o, a in zip(before, alive, strict=True) if a]
    # compaction: survivors in a drawn order, packed from a drawn base that may overlap the old heap (regions
    # compact into addresses other objects left in this same GC), with drawn gaps between runs
    order = draw(st.permutations(survivors)) if draw(st.booleans()) else survivors
    new_base = BASE + 8 * draw(st.integers(0, (at - BASE) // 8 + 4))
    after: dict[int, int] = {}
    pos = new_base
    for start, size in order:
        pos += 8 * draw(st.integers(0, 1))
        after[start] = pos
        pos += size
    # blocks: maximal runs contiguous in old and new space
    blocks: list[tuple[int, int, int]] = []
    for start, size in sorted(survivors, key=lambda o: after[o[0]]):
        if blocks:
            o, nw, ln = blocks[-1]
            if o + ln == start and nw + ln == after[start]:
                blocks[-1] = (o, nw, ln + size)
                continue
        blocks.append((start, after[start], size))
    shuffled = draw(st.permutations(blocks))
    cuts = sorted(draw(st.lists(st.integers(0, len(shuffled)), max_size=3)))
    batches, prev = [], 0
    for c in [*cuts, len(shuffled)]:
        batches.append(tuple(shuffled[prev:c]))
        prev = c
    return Layout(before=tuple(before), after=after, batches=tuple(b for b in batches if b) or ((),))


def heap_after(layout: Layout) -> ShadowHeap:
    heap = ShadowHeap()
    for start, size in layout.before:
        heap.allocate(start, size)
    heap.gc_started([0])
    for batch in layout.batches:
        heap.moved(batch)
    heap.gc_finished()
    return heap


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_MR2_08_every_survivor_starts_at_its_remapped_address(layout: Layout) -> None:
    """An ID inside a survivor is INTERIOR, naming the survivor's start and the offset; unless it is also an
    address an object left (no object starts there now): an ID that was never remapped is the likelier
    mistake, so STALE (MR2-17) wins."""
    heap = heap_after(layout)
    sizes = dict(layout.before)
    assert heap.objects() == {new: sizes[old] for old, new in layout.after.items()}
    now = set(layout.after.values())
    left = {old for old, new in layout.after.items() if old != new and old not in now}
    for old, new in layout.after.items():
        assert heap.classify(new).verdict is HeapVerdict.OBJECT
        for k in (1, 8, sizes[old] - 1):
            c = heap.classify(new + k)
            if new + k in left:
                assert c.verdict is HeapVerdict.STALE
            else:
                assert (c.verdict, c.object_start, c.offset) == (HeapVerdict.INTERIOR, new, k)


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_MR2_17_a_pre_gc_id_is_stale_only_where_no_object_starts_now(layout: Layout) -> None:
    """Issue 19: the question is "is this ID an object after the GC?", never "was it an object that moved?":
    an address another object moved into in the same GC is that object's start, not a stale ID."""
    heap = heap_after(layout)
    now = set(layout.after.values())
    for old, new in layout.after.items():
        c = heap.classify(old)
        if old in now:
            assert c.verdict is HeapVerdict.OBJECT
        elif old != new:
            assert (c.verdict, c.object_start) == (HeapVerdict.STALE, new)


@settings(max_examples=200, deadline=None)
@given(layouts(), st.integers(0, 3))
def test_batches_of_one_gc_are_applied_together_not_one_after_another(layout: Layout, rounds: int) -> None:
    """A block moved in the first batch is never moved again by a later batch whose old range covers its new
    address (the ranges speak of pre-GC addresses): the result does not depend on how the blocks are
    batched."""
    merged = Layout(layout.before, layout.after, (tuple(b for batch in layout.batches for b in batch),))
    assert heap_after(layout).objects() == heap_after(merged).objects()


def test_objects_of_generations_not_collected_stay_and_dead_ones_go() -> None:
    heap = ShadowHeap()
    heap.allocate(BASE, 32)  # gen 2, not collected
    heap.allocate(BASE + 0x1000, 32)  # gen 0, survives where it is (a delta-0 block)
    heap.allocate(BASE + 0x1020, 32)  # gen 0, dies
    gens = [(BASE, BASE + 0x1000, 2), (BASE + 0x1000, BASE + 0x2000, 0)]
    heap.gc_started([0], gens)
    heap.moved([(BASE + 0x1000, BASE + 0x1000, 32)])
    heap.gc_finished()
    assert heap.objects() == {BASE: 32, BASE + 0x1000: 32}
    assert heap.classify(BASE + 0x1020).verdict is HeapVerdict.UNKNOWN


def test_surviving_blocks_keep_their_objects_in_a_sweeping_gc() -> None:
    heap = ShadowHeap()
    heap.allocate(BASE, 32)
    heap.allocate(BASE + 32, 32)
    heap.gc_started([0, 1, 2])
    heap.surviving([(BASE + 32, 32)])
    heap.gc_finished()
    assert heap.objects() == {BASE + 32: 32}


def test_a_stale_id_follows_its_object_through_later_gcs_until_an_object_starts_there() -> None:
    heap = ShadowHeap()
    heap.allocate(BASE + 0x100, 24)
    heap.gc_started([0])
    heap.moved([(BASE + 0x100, BASE + 0x200, 24)])
    heap.gc_finished()
    heap.gc_started([0])
    heap.moved([(BASE + 0x200, BASE + 0x300, 24)])
    heap.gc_finished()
    c = heap.classify(BASE + 0x100)
    assert (c.verdict, c.object_start) == (HeapVerdict.STALE, BASE + 0x300)
    heap.allocate(BASE + 0x100, 16)
    assert heap.classify(BASE + 0x100).verdict is HeapVerdict.OBJECT


def test_an_allocation_over_dead_objects_drops_them() -> None:
    heap = ShadowHeap()
    heap.allocate(BASE, 64)
    heap.allocate(BASE + 64, 64)
    heap.allocate(BASE + 32, 48)  # their memory was free: both were dead
    assert heap.objects() == {BASE + 32: 48}
    assert heap.classify(BASE + 40).offset == 8
