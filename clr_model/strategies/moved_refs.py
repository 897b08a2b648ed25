"""Hypothesis strategies for MovedReferences2 range tables (clr_model.moved_refs).

Valid tables include the adversarial shapes: adjacent ranges (gap 0), zero-length ranges, lengths over
4 GiB (> ULONG), huge lengths, layouts ending right below 2**64, arrays in shuffled order. Invalid
tables carry the clause the model must name.
"""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model.moved_refs import GC_CALLBACK_NAMES, U64_MAX, HeapEvent

__all__ = ["Arrays", "gc_event_sequences", "invalid_tables", "object_ids_for", "valid_tables"]

Arrays = tuple[list[int], list[int], list[int]]

_lengths = st.one_of(
    st.integers(1, 4096),
    st.integers(0, 2),
    st.sampled_from([2**32 - 1, 2**32, 2**32 + 1, 5 * 2**30]),
    st.integers(2**32, 2**40),
    st.integers(2**40, 2**60),
)
_gaps = st.one_of(st.just(0), st.integers(1, 4096), st.integers(2**32, 2**44))


@st.composite
def _layout(draw: st.DrawFn, lengths: list[int]) -> list[int]:
    """Starts for blocks of these lengths, in the given order, disjoint, ending below 2**64."""
    gaps = draw(st.lists(_gaps, min_size=len(lengths), max_size=len(lengths)))
    total = sum(lengths) + sum(gaps)
    room = U64_MAX - total
    if room < 0:
        gaps = [0] * len(lengths)
        room = U64_MAX - sum(lengths)
    near_top = draw(st.booleans())
    base = room if near_top else draw(st.integers(0, min(room, 2**48)))
    starts: list[int] = []
    at = base
    for length, gap in zip(lengths, gaps, strict=True):
        at += gap
        starts.append(at)
        at += length
    return starts


@st.composite
def valid_tables(draw: st.DrawFn, max_ranges: int = 12) -> Arrays:
    """(old, new, lengths): disjoint in old and in new space, no start + length reaching 2**64."""
    lengths = draw(st.lists(_lengths, max_size=max_ranges))
    while sum(lengths) > U64_MAX:
        lengths.pop()
    n = len(lengths)
    old = draw(_layout(lengths))
    order = draw(st.permutations(range(n)))  # blocks keep or change their relative order
    new_sorted = draw(_layout([lengths[i] for i in order]))
    new = [0] * n
    for pos, i in enumerate(order):
        new[i] = new_sorted[pos]
    shuffle = draw(st.permutations(range(n)))  # array order need not follow address order
    return [old[i] for i in shuffle], [new[i] for i in shuffle], [lengths[i] for i in shuffle]


def _free_address(starts: list[int], lengths: list[int]) -> int | None:
    """An address no range of this space covers, or None when the ranges cover all of it."""
    live = sorted((s, s + ln) for s, ln in zip(starts, lengths, strict=True) if ln)
    at = 0
    for lo, hi in live:
        if at < lo:
            return at
        at = max(at, hi)
    return at if at < U64_MAX else None


@st.composite
def invalid_tables(draw: st.DrawFn) -> tuple[Arrays, str]:
    """A broken table and the clause the model must report first for it."""
    old, new, lengths = draw(valid_tables())
    how = draw(st.sampled_from(["unequal", "overlap-old", "overlap-new", "overflow", "value"]))
    live = [i for i, ln in enumerate(lengths) if ln]
    if how == "unequal" or not live:
        victim = draw(st.sampled_from([old, new, lengths]))
        victim.append(draw(st.integers(0, 100)))
        return (old, new, lengths), "MR2-03"
    i = draw(st.sampled_from(live))
    if how == "overlap-old":  # a second range starting inside range i in old space
        off = draw(st.integers(0, lengths[i] - 1))
        size = draw(st.integers(1, lengths[i] - off))
        old.append(old[i] + off)
        new.append(new[i])
        lengths.append(size)
        return (old, new, lengths), "MR2-14"
    if how == "overlap-new":  # a one-byte range from free old space into range i's new space
        free = _free_address(old, lengths)
        if free is not None:
            old.append(free)
            new.append(new[i] + draw(st.integers(0, lengths[i] - 1)))
            lengths.append(1)
            return (old, new, lengths), "MR2-15"
    if how in ("overflow", "overlap-new"):
        old[i] = U64_MAX - draw(st.integers(0, 3))
        lengths[i] = draw(st.integers(U64_MAX - old[i] + 1, U64_MAX))
        return (old, new, lengths), "MR2-07"
    arr = draw(st.sampled_from([old, new, lengths]))
    arr[i] = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64)))
    return (old, new, lengths), "MR2-06"


def object_ids_for(arrays: Arrays) -> st.SearchStrategy[int]:
    """ObjectIDs inside some range (at any offset, first and last byte included) or anywhere at all."""
    old, _new, lengths = arrays
    inside = [st.integers(s, s + ln - 1) for s, ln in zip(old, lengths, strict=True) if ln]
    edges = [s + ln for s, ln in zip(old, lengths, strict=True)] + [s - 1 for s in old if s]
    pool: list[st.SearchStrategy[int]] = [*inside, st.integers(0, U64_MAX)]
    if edges:
        pool.append(st.sampled_from([e for e in edges if 0 <= e <= U64_MAX] or [0]))
    return st.one_of(pool)


#: the callbacks the MR2 rules read, and one that hands out ObjectIDs
_CALLBACKS = [*GC_CALLBACK_NAMES, "ObjectAllocated"]


@st.composite
def gc_event_sequences(draw: st.DrawFn, max_events: int = 16) -> list[HeapEvent]:
    """Arbitrary interleavings of GC callbacks, MovedReferences(2) with tables, and inspections."""
    events: list[HeapEvent] = []
    for _ in range(draw(st.integers(0, max_events))):
        if draw(st.integers(0, 4)) == 0:
            events.append(HeapEvent(kind="inspect", name="GetClassFromObject",
                                    object_id=draw(st.integers(0, 2**20)),
                                    object_key=draw(st.one_of(st.none(), st.integers(0, 3)))))
            continue
        name = draw(st.sampled_from(_CALLBACKS))
        ranges = None
        if name.startswith("MovedReferences"):
            old, new, lengths = draw(valid_tables(max_ranges=2))
            ranges = tuple(zip(old, new, lengths, strict=True))
        hr = draw(st.sampled_from([0, 0x80004005]))
        ids = tuple(draw(st.lists(st.integers(0, 2**20), max_size=2))) if name == "ObjectAllocated" else ()
        events.append(HeapEvent(kind="callback", name=name, hr=hr, ranges=ranges, object_ids=ids))
    return events
