"""The shadow heap: every object start at every instant, kept from what the runtime reports, and the verdict
on an ObjectID a profiler hands to an ICorProfilerInfo method (issue 19).

The reference model of what the recording proxy keeps natively (``conformance/native/common/shadow_heap.cpp``
is held equal to it by a differential test). Its inputs are the runtime's own reports:

* ``allocate(id, size)``: ObjectAllocated (the proxy asks for it itself and hides it from a profiler that did
  not), the size from GetObjectSize2 inside that callback. An allocation covers whatever known object its
  bytes overlap: that memory was free, so those objects were dead.
* a garbage collection: ``gc_started(collected, generation_ranges)`` (GarbageCollectionStarted's
  generations, and GetGenerationBounds at that instant: where each generation lies), then any number of
  ``moved`` (MovedReferences2 batches: (old, new, length) blocks) and ``surviving`` (SurvivingReferences2
  batches: (start, length) blocks) calls, then ``gc_finished()``, which applies them all at once: the
  ranges of every batch of one GC speak of pre-GC addresses (MR2-04/05/07), so a block moved in the first
  batch is never moved again by a later one.

At ``gc_finished``: an object inside a moved block is at ``new + (old_id - old)`` (MR2-08); an object inside
a surviving block stays; an object in no block stays if its generation was not collected, and is dropped
otherwise (it died). An object whose bytes a moved block's new range now covers is dropped too (that memory
is another object's now, .NET 8 regions compact into addresses other objects left in the same GC). Dropping
is the safe side: an ObjectID the heap does not know is never a finding (:attr:`HeapVerdict.UNKNOWN`).

:meth:`ShadowHeap.classify` answers for one ObjectID (issue 19: "is this ID an object after the GC?"):

* :attr:`HeapVerdict.OBJECT`: the start of a known live object;
* :attr:`HeapVerdict.STALE`: the pre-GC start of an object a GC moved away, where no object starts now: an ID
  the profiler did not remap (MR2-17);
* :attr:`HeapVerdict.INTERIOR`: strictly inside a known live object (its start and the offset are named): a
  wrong remapping (MR2-08);
* :attr:`HeapVerdict.UNKNOWN`: none of these (an object the runtime never reported, e.g. a frozen string
  literal): not judged.

Bounded memory (the proxy's cap, ``include/profharness/shadow_heap.h``): with ``left_gcs`` an address objects
left is kept only while it was left in one of the last ``left_gcs`` GCs; with ``left_max`` at most that many
are kept, the oldest GC's dropped first and within one GC the highest addresses first. A forgotten address is
UNKNOWN (never a finding). Without them (the default) nothing is forgotten.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Classification", "HeapVerdict", "ShadowHeap"]


class HeapVerdict(StrEnum):
    OBJECT = "object"
    STALE = "stale"
    INTERIOR = "interior"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Classification:
    """The verdict on one ObjectID, with the object it concerns: for STALE the object's address now
    (``object_start``) and for INTERIOR the start of the object the ID lies in and the offset into it."""

    verdict: HeapVerdict
    object_start: int | None = None
    offset: int | None = None


class ShadowHeap:
    """Known live objects (start -> size), the addresses objects left, and the GC being reported."""

    def __init__(self, *, left_gcs: int | None = None, left_max: int | None = None) -> None:
        self._left_gcs = left_gcs
        self._left_max = left_max
        self._gcs = 0
        #: GCs that moved some object; of those, GCs that moved one onto another's pre-GC address
        self.compacting_gcs = 0
        self.reuse_gcs = 0
        #: the GC (1-based) at which each address in ``_left`` was left
        self._left_at: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._starts: list[int] = []  # sorted keys of _size
        #: an address an object left at a GC (no object starts there now) -> where that object is now
        self._left: dict[int, int] = {}
        self._collected: frozenset[int] = frozenset()
        self._generations: list[tuple[int, int, int]] = []  # (start, end, generation) at GC start
        self._moved: list[tuple[int, int, int]] = []
        self._surviving: list[tuple[int, int]] = []
        self._in_gc = False

    # -- queries -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._size)

    @property
    def gc_count(self) -> int:
        """GCs applied so far."""
        return self._gcs

    def objects(self) -> dict[int, int]:
        """start -> size of every known live object."""
        return dict(self._size)

    def classify(self, oid: int) -> Classification:
        if oid in self._size:
            return Classification(HeapVerdict.OBJECT, oid)
        if oid in self._left:
            return Classification(HeapVerdict.STALE, self._left[oid])
        k = bisect.bisect_right(self._starts, oid) - 1
        if k >= 0:
            start = self._starts[k]
            if oid < start + self._size[start]:
                return Classification(HeapVerdict.INTERIOR, start, oid - start)
        return Classification(HeapVerdict.UNKNOWN)

    # -- the runtime's reports -----------------------------------------------------------------------------
    def allocate(self, oid: int, size: int) -> None:
        """ObjectAllocated: a new object at ``oid`` of ``size`` bytes (at least 1)."""
        size = max(size, 1)
        self._drop_overlapping(oid, oid + size)
        self._add(oid, size)
        self._left.pop(oid, None)
        self._left_at.pop(oid, None)

    def gc_started(self, collected: Iterable[int], generations: Sequence[tuple[int, int, int]] = ()) -> None:
        """GarbageCollectionStarted: the generations it collects, and (start, end, generation) of every
        generation range (GetGenerationBounds) at that instant. Without ranges, every generation counts as
        collected (objects in no block are dropped: the safe side)."""
        self._collected = frozenset(collected)
        self._generations = sorted(generations)
        self._moved = []
        self._surviving = []
        self._in_gc = True

    def moved(self, blocks: Iterable[tuple[int, int, int]]) -> None:
        """One MovedReferences2 batch: (old start, new start, length) blocks."""
        self._moved.extend((o, n, ln) for o, n, ln in blocks if ln > 0)

    def surviving(self, blocks: Iterable[tuple[int, int]]) -> None:
        """One SurvivingReferences2 batch: (start, length) blocks."""
        self._surviving.extend((s, ln) for s, ln in blocks if ln > 0)

    def gc_finished(self) -> None:
        """GarbageCollectionFinished: apply every batch of this GC at once (see the module's docstring)."""
        moved = sorted(self._moved)
        old_starts = [o for o, _, _ in moved]
        surviving = sorted(self._surviving)
        surv_starts = [s for s, _ in surviving]
        if any(o != n for o, n, _ in moved):
            self.compacting_gcs += 1
            if self._moves_onto_others(moved):
                self.reuse_gcs += 1
        placed: dict[int, int] = {}  # new start -> size
        left: dict[int, int] = {}  # old start -> new start, for objects that moved
        kept: dict[int, int] = {}  # objects that stay where they are
        for start, size in self._size.items():
            i = bisect.bisect_right(old_starts, start) - 1
            if i >= 0 and start < moved[i][0] + moved[i][2]:
                old, new, _ = moved[i]
                target = new + (start - old)
                placed[target] = size
                if target != start:
                    left[start] = target
                continue
            j = bisect.bisect_right(surv_starts, start) - 1
            if j >= 0 and start < surviving[j][0] + surviving[j][1]:
                kept[start] = size
            elif not self._collected_at(start):
                kept[start] = size
        new_ranges = sorted((n, n + ln) for _, n, ln in moved)
        new_starts = [a for a, _ in new_ranges]
        for start, size in kept.items():
            if start in placed or self._covered(new_ranges, new_starts, start, start + size):
                continue  # another object lives there now
            placed[start] = size
        # addresses objects left earlier stay stale while no object starts there; their objects move on
        carried = {addr: placed_at for addr, placed_at in self._left.items()}
        for addr, now in list(carried.items()):
            i = bisect.bisect_right(old_starts, now) - 1
            if i >= 0 and now < moved[i][0] + moved[i][2]:
                carried[addr] = moved[i][1] + (now - moved[i][0])
        carried.update(left)
        self._gcs += 1
        self._left_at.update(dict.fromkeys(left, self._gcs))
        self._size = placed
        self._starts = sorted(placed)
        self._left = {addr: now for addr, now in carried.items() if addr not in placed}
        self._cap_left()
        self._in_gc = False
        self._moved, self._surviving = [], []

    # -- helpers -------------------------------------------------------------------------------------------
    def _moves_onto_others(self, moved: list[tuple[int, int, int]]) -> bool:
        """Whether a block of this GC moves a known object onto bytes another known object held before it."""
        for old, new, length in moved:
            if old == new:
                continue
            for k in range(bisect.bisect_left(self._starts, old), len(self._starts)):
                start = self._starts[k]
                if start >= old + length:
                    break
                target = new + (start - old)
                at = bisect.bisect_right(self._starts, target) - 1
                if at < 0 or self._starts[at] == start:
                    continue
                if target < self._starts[at] + self._size[self._starts[at]]:
                    return True
        return False

    def _cap_left(self) -> None:
        if self._left_gcs is not None:
            keep = self._left_gcs
            self._left = {a: n for a, n in self._left.items() if self._gcs - self._left_at[a] < keep}
        if self._left_max is not None and len(self._left) > self._left_max:
            order = sorted(self._left, key=lambda a: (self._left_at[a], -a))
            for a in order[: len(self._left) - self._left_max]:
                del self._left[a]
        self._left_at = {a: self._left_at[a] for a in self._left}

    def _collected_at(self, address: int) -> bool:
        if not self._generations:
            return True
        k = bisect.bisect_right(self._generations, (address, 2**64, 2**64)) - 1
        if k >= 0:
            start, end, generation = self._generations[k]
            if start <= address < end:
                return generation in self._collected
        return True  # in no generation the runtime named: the safe side

    @staticmethod
    def _covered(ranges: list[tuple[int, int]], starts: list[int], lo: int, hi: int) -> bool:
        """Whether [lo, hi) overlaps any of the sorted, disjoint ``ranges``."""
        k = bisect.bisect_right(starts, lo) - 1
        if k >= 0 and ranges[k][1] > lo:
            return True
        return k + 1 < len(ranges) and ranges[k + 1][0] < hi

    def _add(self, start: int, size: int) -> None:
        if start not in self._size:
            bisect.insort(self._starts, start)
        self._size[start] = size

    def _drop_overlapping(self, lo: int, hi: int) -> None:
        k = max(bisect.bisect_right(self._starts, lo) - 1, 0)
        while k < len(self._starts) and self._starts[k] < hi:
            start = self._starts[k]
            if start + self._size[start] > lo:
                del self._size[start]
                del self._starts[k]
                continue
            k += 1
