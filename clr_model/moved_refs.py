"""MovedReferences2 (MovedReferences2.md): range tables, remapping, heap snapshots across GCs, event rules.

* :class:`RangeTable` holds the three parallel arrays of one callback, validated (MR2-03, MR2-06,
  MR2-14, MR2-15; starts + lengths stay below 2**64 so ``old_i + len_i`` of MR2-07 does not wrap).
* :meth:`RangeTable.remap` / :meth:`RangeTable.remap_many` apply MR2-07/MR2-08. An ObjectID in no range
  gives None / ``found == False``: what it means is the MR2-16 ambiguity, decided by the caller.
* :class:`HeapSnapshot` carries tracked ObjectIDs across a sequence of GCs with an explicit MR2-16
  policy; :meth:`HeapSnapshot.fit` says which policy reproduces a known outcome of one GC;
  :func:`compose` folds two successive tables into one (policy "dead").
* :func:`check_gc_events` checks MR2-01/02/09/10/11/12/17 over a sequence of callbacks and inspections
  (the shared event vocabulary of :mod:`clr_model.events`).
* :func:`to_v1` shows what ICorProfilerCallback::MovedReferences' ULONG lengths lose (MR2-13).

Addresses are 64-bit (SIZE_T / ObjectID on a 64-bit runtime). Zero-length ranges are accepted (they
cover nothing) and ignored by the overlap checks and by remapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from clr_model import api
from clr_model.api import Fact
from clr_model.errors import InvalidInput
from clr_model.events import Event, ObjectInspection, ProfilerCallback, begins, int_arg
from clr_model.hresults import hresult_failed, to_unsigned
from clr_model.violations import Violation

__all__ = [
    "GC_CALLBACK_NAMES",
    "U64_MAX",
    "ULONG_MAX",
    "Event",
    "GcReport",
    "HeapEvent",
    "HeapSnapshot",
    "Policy",
    "PolicyFit",
    "RangeOverflow",
    "RangeOverlap",
    "RangeTable",
    "RangeTableError",
    "RangeValueError",
    "UnequalArrays",
    "V1Projection",
    "check_gc_events",
    "compose",
    "to_v1",
]

U64_MAX = 2**64 - 1
ULONG_MAX = 2**32 - 1
U64 = npt.NDArray[np.uint64]
Policy = Literal["dead", "unmoved"]
_ARRAYS = ("oldObjectIDRangeStart", "newObjectIDRangeStart", "cObjectIDRangeLength")


class RangeTableError(InvalidInput):
    """A range table the contract does not allow; ``clause`` and ``index`` say which rule and where."""

    def __init__(self, clause: str, index: int | None, message: str) -> None:
        where = f" at index {index}" if index is not None else ""
        super().__init__(f"{clause}{where}: {message}")
        self.clause = clause
        self.index = index


class UnequalArrays(RangeTableError):
    """MR2-03: the parallel arrays (and cMovedObjectIDRanges) disagree on the length."""


class RangeValueError(RangeTableError):
    """MR2-06: a start or a length that is not a 64-bit unsigned integer."""


class RangeOverflow(RangeTableError):
    """start + length does not fit below 2**64 (the membership bound of MR2-07 would wrap)."""


class RangeOverlap(RangeTableError):
    """MR2-14 / MR2-15: two ranges share addresses in old or in new space."""


def _as_u64(name: str, values: Sequence[int] | npt.NDArray[np.generic]) -> U64:
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise RangeValueError("MR2-06", None, f"{name} must be one-dimensional, not {values.shape}")
        if values.dtype == np.uint64:
            return values.astype(np.uint64, copy=True)
        if values.dtype.kind in "iu":
            if values.size and int(values.min()) < 0:
                bad = int(np.argmax(values.astype(np.int64) < 0))
                raise RangeValueError("MR2-06", bad, f"{name}[{bad}]={int(values[bad])} is negative")
            return values.astype(np.uint64)
        values = values.tolist()
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise RangeValueError("MR2-06", None, f"{name}: expected a sequence of ints")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise RangeValueError("MR2-06", i, f"{name}[{i}]={v!r} is not an integer")
        if not 0 <= int(v) <= U64_MAX:
            raise RangeValueError("MR2-06", i, f"{name}[{i}]={int(v)} is outside [0, 2**64)")
    return np.array([int(v) for v in values], dtype=np.uint64)


def _check_no_overflow(clause: str, name: str, starts: U64, lengths: U64) -> None:
    bad = lengths > (np.uint64(U64_MAX) - starts)
    if bad.any():
        i = int(np.argmax(bad))
        raise RangeOverflow(clause, i, f"{name}[{i}]={int(starts[i])} + length {int(lengths[i])} "
                            "reaches 2**64")


def _check_disjoint(clause: str, space: str, starts: U64, lengths: U64) -> None:
    live = np.flatnonzero(lengths > 0)
    if live.size < 2:
        return
    order = live[np.argsort(starts[live], kind="stable")]
    s, e = starts[order], starts[order] + lengths[order]
    clash = s[1:] < e[:-1]
    if clash.any():
        k = int(np.argmax(clash))
        a, b = sorted((int(order[k]), int(order[k + 1])))
        raise RangeOverlap(clause, b, f"ranges {a} and {b} overlap in {space} space "
                           f"([{int(starts[a]):#x}, +{int(lengths[a]):#x}) and "
                           f"[{int(starts[b]):#x}, +{int(lengths[b]):#x}))")


class _OldSpaceIndex:
    """What :meth:`RangeTable.remap_many` looks ids up in, built once per table (on its first use).

    The live ranges sorted by old start are numbered 1..n; 0 is a virtual empty range before them, n+1 one
    after them (both end at 0, so no id is inside them). A coarse index over old space: bucket j covers
    ``[base + j << shift, base + (j+1) << shift)`` (``base`` aligned to the bucket size, about 8 buckets
    per range, at most 2**21) and holds k0, the last range starting at or before the bucket's start; an
    id past the last bucket or below ``base`` (which wraps to a huge bucket number) lands in bucket
    ``count``, whose k0 is n+1. Where a range starts inside the bucket, k0 is stored as ``~k0`` (negative)
    and only those ids step forward (``nxt[k]``: the next range's start - 1, U64_MAX after the last, so
    an id of U64_MAX never steps off the table), a few times at most, then binary search. Then MR2-07:
    found = id < end[k] (old[k] <= id holds by construction), and MR2-08: new = id + (new[k] - old[k])
    modulo 2**64, exact where found. Ids go through in chunks that keep the temporaries in cache.
    """

    __slots__ = ("base", "count", "delta", "end", "first", "max_steps", "nxt", "old_s", "shift")
    PER_RANGE = 8
    MAX_BUCKETS = 1 << 21
    CHUNK = 1 << 16
    STEPS = 4  # stepping rounds before binary search takes over (crowded buckets)

    def __init__(self, old_s: U64, end_s: U64, delta_s: U64) -> None:
        n = int(old_s.size)  # > 0
        lo, hi = int(old_s[0]), int(end_s[-1])
        wanted = min(1 << max((self.PER_RANGE * n - 1).bit_length(), 1), self.MAX_BUCKETS)
        shift = max(0, (hi - lo - 1).bit_length() - (wanted.bit_length() - 1))
        base = (lo >> shift) << shift
        count = ((hi - 1 - base) >> shift) + 1
        starts = np.arange(count, dtype=np.uint64) << np.uint64(shift)
        starts += np.uint64(base)
        first = np.searchsorted(old_s, starts, side="right")  # number of ranges starting <= bucket start
        # bucket ends: base + count << shift <= 2**64 (base is aligned), so no wrap
        inside = np.searchsorted(old_s, starts + np.uint64((1 << shift) - 1), side="right") - first
        self.max_steps = int(inside.max())
        first = np.where(inside > 0, ~first, first)
        self.first = np.append(first, n + 1).astype(np.int32 if n + 1 < 2**31 else np.int64)
        self.base, self.shift, self.count = np.uint64(base), np.uint64(shift), np.uint64(count)
        self.nxt = np.full(n + 2, U64_MAX, dtype=np.uint64)
        self.nxt[0] = old_s[0] - np.uint64(1) if lo else 0  # lo == 0: no bucket holds range 0
        self.nxt[1:n] = old_s[1:] - np.uint64(1)
        self.end = np.zeros(n + 2, dtype=np.uint64)
        self.end[1:n + 1] = end_s
        self.delta = np.zeros(n + 2, dtype=np.uint64)
        self.delta[1:n + 1] = delta_s
        self.old_s = old_s

    def remap(self, ids: U64) -> tuple[U64, npt.NDArray[np.bool_]]:
        size = int(ids.size)
        out = np.empty(size, dtype=np.uint64)
        found = np.empty(size, dtype=bool)
        chunk = max(min(self.CHUNK, size), 1)
        bucket = np.empty(chunk, dtype=np.uint64)
        bucket_i = bucket.view(np.intp)  # bucket numbers are at most count < 2**63
        k0 = np.empty(chunk, dtype=self.first.dtype)
        k = np.empty(chunk, dtype=np.intp)
        end = np.empty(chunk, dtype=np.uint64)
        flagged = np.empty(chunk, dtype=bool)
        for a in range(0, size, chunk):
            c = min(chunk, size - a)
            x, b, kk = ids[a:a + c], bucket[:c], k[:c]
            np.subtract(x, self.base, out=b)
            np.right_shift(b, self.shift, out=b)
            np.minimum(b, self.count, out=b)
            np.take(self.first, bucket_i[:c], out=k0[:c], mode="clip")
            kk[...] = k0[:c]
            np.less(k0[:c], 0, out=flagged[:c])
            rows = np.flatnonzero(flagged[:c])
            if rows.size:
                kk[rows] = self._refine(~kk[rows], x[rows])
            np.take(self.end, kk, out=end[:c], mode="clip")
            f = found[a:a + c]
            np.less(x, end[:c], out=f)
            o = out[a:a + c]
            np.take(self.delta, kk, out=o, mode="clip")
            o += x
            np.multiply(o, f, out=o, casting="unsafe")  # 0 where not found
        return out, found

    def _refine(self, k: npt.NDArray[np.intp], x: U64) -> npt.NDArray[np.intp]:
        """Step k forward past every range start <= x (ids in buckets where ranges start)."""
        step = self.nxt[k] < x
        k += step
        if self.max_steps > 1:
            rows = np.flatnonzero(step)
            for _ in range(self.STEPS - 1):
                if rows.size == 0:
                    break
                rows = rows[self.nxt[k[rows]] < x[rows]]
                k[rows] += 1
            if rows.size:
                k[rows] = np.searchsorted(self.old_s, x[rows], side="right")
        return k


class RangeTable:
    """The three parallel arrays of one MovedReferences2 call (``oldObjectIDRangeStart``,
    ``newObjectIDRangeStart``, ``cObjectIDRangeLength``; ``count``: ``cMovedObjectIDRanges``), validated;
    immutable."""

    __slots__ = (
        "_delta_s", "_end_s", "_index", "_len_s", "_new_s", "_old_s", "_order", "lengths", "new", "old",
    )

    def __init__(
        self,
        old: Sequence[int] | npt.NDArray[np.generic],
        new: Sequence[int] | npt.NDArray[np.generic],
        lengths: Sequence[int] | npt.NDArray[np.generic],
        count: int | None = None,
    ) -> None:
        sizes = [len(old), len(new), len(lengths)]
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or not 0 <= count <= ULONG_MAX):
            raise UnequalArrays("MR2-03", None, f"cMovedObjectIDRanges={count!r} is not a ULONG")
        expected = count if count is not None else sizes[0]
        for name, size in zip(_ARRAYS, sizes, strict=True):
            if size != expected:
                what = "cMovedObjectIDRanges" if count is not None else f"{_ARRAYS[0]} ({sizes[0]})"
                raise UnequalArrays("MR2-03", min(size, expected),
                                    f"{name} has {size} entries, {what} says {expected}")
        self.old = _as_u64(_ARRAYS[0], old)
        self.new = _as_u64(_ARRAYS[1], new)
        self.lengths = _as_u64(_ARRAYS[2], lengths)
        _check_no_overflow("MR2-07", _ARRAYS[0], self.old, self.lengths)
        _check_no_overflow("MR2-08", _ARRAYS[1], self.new, self.lengths)
        _check_disjoint("MR2-14", "old", self.old, self.lengths)
        _check_disjoint("MR2-15", "new", self.new, self.lengths)
        live = np.flatnonzero(self.lengths > 0)
        self._order = live[np.argsort(self.old[live], kind="stable")]
        self._old_s = np.ascontiguousarray(self.old[self._order])
        self._new_s = np.ascontiguousarray(self.new[self._order])
        self._len_s = np.ascontiguousarray(self.lengths[self._order])
        self._end_s = self._old_s + self._len_s
        self._delta_s = self._new_s - self._old_s  # modulo 2**64; + old id gives MR2-08's new id
        self._index: _OldSpaceIndex | None = None  # built by the first remap_many
        for arr in (self.old, self.new, self.lengths, self._old_s, self._new_s, self._len_s, self._end_s,
                    self._delta_s):
            arr.flags.writeable = False

    def __len__(self) -> int:
        return int(self.old.size)

    def ranges(self) -> list[tuple[int, int, int]]:
        """(old, new, length) per index, as Python ints."""
        return list(zip(self.old.tolist(), self.new.tolist(), self.lengths.tolist(), strict=True))

    def index_of(self, old_id: int) -> int | None:
        """MR2-07: the index i with old_i <= old_id < old_i + len_i, or None."""
        if isinstance(old_id, bool) or not isinstance(old_id, int | np.integer) or not 0 <= old_id <= U64_MAX:
            raise InvalidInput(f"ObjectID {old_id!r} is not a 64-bit unsigned integer")
        k = int(np.searchsorted(self._old_s, np.uint64(old_id), side="right")) - 1
        if k < 0 or int(old_id) >= int(self._end_s[k]):
            return None
        return int(self._order[k])

    def remap(self, old_id: int) -> int | None:
        """MR2-08: new_i + (old_id - old_i) for the range holding old_id; None in no range (MR2-16)."""
        i = self.index_of(old_id)
        if i is None:
            return None
        return int(self.new[i]) + (int(old_id) - int(self.old[i]))

    def remap_many(
        self, old_ids: npt.NDArray[np.generic] | Sequence[int]
    ) -> tuple[U64, npt.NDArray[np.bool_]]:
        """Vectorised :meth:`remap`: (new ids, found mask). Where ``found`` is False the new id is 0."""
        if isinstance(old_ids, np.ndarray) and old_ids.dtype == np.uint64 and old_ids.ndim == 1:
            ids = cast(U64, old_ids)
        else:
            ids = _as_u64("ObjectIDs", old_ids)
        if self._old_s.size == 0:
            return np.zeros(ids.shape, dtype=np.uint64), np.zeros(ids.shape, dtype=bool)
        if self._index is None:
            self._index = _OldSpaceIndex(self._old_s, self._end_s, self._delta_s)
        return self._index.remap(ids)

    def covers_new(self, ids: U64) -> npt.NDArray[np.bool_]:
        """Which ids lie inside some range of new space."""
        if self._order.size == 0:
            return np.zeros(ids.shape, dtype=bool)
        order = np.argsort(self._new_s, kind="stable")
        starts, lens = self._new_s[order], self._len_s[order]
        k = np.searchsorted(starts, ids, side="right") - 1
        ok = k >= 0
        k = np.maximum(k, 0)
        return ok & ((ids - starts[k]) < lens[k])

    def __repr__(self) -> str:
        return f"RangeTable({len(self)} ranges)"


def compose(first: RangeTable, second: RangeTable) -> RangeTable:
    """One table equivalent to ``first`` then ``second`` under the MR2-16 policy "dead".

    An object survives both GCs when its address after the first lies in a range of the second; the
    result maps its original address straight to its final one. (Under "unmoved" the composition would
    also need identity pieces over the unbounded complement of the ranges; use HeapSnapshot instead.)
    """
    olds: list[int] = []
    news: list[int] = []
    lens: list[int] = []
    s_old, s_len, s_new = second._old_s, second._len_s, second._new_s
    for a, b, length in first.ranges():
        if length == 0 or s_old.size == 0:
            continue
        lo_k = max(int(np.searchsorted(s_old, np.uint64(b), side="right")) - 1, 0)
        hi_k = int(np.searchsorted(s_old, np.uint64(b + length - 1), side="right"))
        for k in range(lo_k, hi_k):
            c, m, d = int(s_old[k]), int(s_len[k]), int(s_new[k])
            lo, hi = max(b, c), min(b + length, c + m)
            if lo < hi:
                olds.append(a + (lo - b))
                news.append(d + (lo - c))
                lens.append(hi - lo)
    return RangeTable(olds, news, lens)


@dataclass(frozen=True)
class GcReport:
    """What one GC did to a HeapSnapshot."""

    moved: int  # ids found in a range
    in_no_range: int  # ids in no range: dropped ("dead") or kept ("unmoved")
    conflicts: U64  # "unmoved" only: original ids left at an address another block moved into


class HeapSnapshot:
    """ObjectIDs a profiler tracks, carried across successive compacting GCs (MR2-17).

    ``policy`` decides MR2-16: "dead" drops an id found in no range, "unmoved" keeps it where it was.
    Ids are tracked by their original value: :meth:`current` maps an original id to its present one.
    """

    def __init__(self, ids: Sequence[int] | npt.NDArray[np.generic], policy: Policy) -> None:
        if policy not in ("dead", "unmoved"):
            raise InvalidInput(f"policy {policy!r}: expected 'dead' or 'unmoved' (MR2-16)")
        self.policy: Policy = policy
        self.origin = np.unique(_as_u64("ObjectIDs", ids))
        self.ids = self.origin.copy()
        self.alive = np.ones(self.origin.shape, dtype=bool)
        self.gcs = 0

    def apply(self, table: RangeTable) -> GcReport:
        """Remap every live id through one GC's table."""
        live = np.flatnonzero(self.alive)
        new, found = table.remap_many(self.ids[live])
        moved_idx = live[found]
        self.ids[moved_idx] = new[found]
        lost = live[~found]
        conflicts = np.zeros(0, dtype=np.uint64)
        if self.policy == "dead":
            self.alive[lost] = False
        else:
            clash = table.covers_new(self.ids[lost])
            conflicts = self.origin[lost[clash]]
        self.gcs += 1
        return GcReport(moved=int(found.sum()), in_no_range=int(lost.size), conflicts=conflicts)

    def current(self, origin_id: int) -> int | None:
        """The present ObjectID of the object first seen as ``origin_id``; None if dead or unknown."""
        k = int(np.searchsorted(self.origin, np.uint64(origin_id)))
        if k >= self.origin.size or int(self.origin[k]) != origin_id or not self.alive[k]:
            return None
        return int(self.ids[k])

    def live_ids(self) -> U64:
        return self.ids[self.alive]

    @classmethod
    def fit(
        cls, table: RangeTable, live: Mapping[int, int], dead: Sequence[int] = ()
    ) -> tuple[PolicyFit, PolicyFit]:
        """MR2-16: which policy reproduces one GC whose outcome is known from elsewhere.

        ``live``: ObjectID before the GC -> ObjectID after it, of objects known to survive; ``dead``:
        ObjectIDs of objects known to have died. A policy fits when every live id ends where ``live``
        says and, for "dead", every dead id is dropped ("unmoved" keeps ids in no range by definition,
        so dead ones cannot contradict it). Returns the fits of "dead" and "unmoved", in that order."""
        origin = [*live, *dead]
        out: list[PolicyFit] = []
        for policy in ("dead", "unmoved"):
            snap = cls(origin, policy=policy)
            report = snap.apply(table)
            live_ok = all(snap.current(o) == n for o, n in live.items())
            dropped = policy == "dead" and all(snap.current(o) is None for o in dead)
            out.append(PolicyFit(policy, report, live_ok, dropped))
        return out[0], out[1]


@dataclass(frozen=True)
class PolicyFit:
    """How one MR2-16 policy fares against a known GC outcome (:meth:`HeapSnapshot.fit`)."""

    policy: Policy
    report: GcReport
    live_ok: bool  # every surviving id ends at its known new id
    dead_dropped: bool  # "dead" only: every known dead id was dropped

    @property
    def fits(self) -> bool:
        return self.live_ok and (self.policy == "unmoved" or self.dead_dropped)


# --- MR2-13: what MovedReferences (ULONG lengths) loses ----------------------------------------------

@dataclass(frozen=True)
class V1Projection:
    """The table as ICorProfilerCallback::MovedReferences would carry it (ULONG cObjectIDRangeLength)."""

    lengths: npt.NDArray[np.uint32]  # each length cut to 32 bits, as a C cast does
    lossy: list[int]  # indices whose length does not fit in a ULONG
    lost_bytes: list[int]  # bytes of each lossy range the v1 table no longer covers


def to_v1(table: RangeTable) -> V1Projection:
    """MR2-13: cut each length to a ULONG; list the ranges that lost coverage (length > 0xFFFFFFFF)."""
    cut = (table.lengths & np.uint64(ULONG_MAX)).astype(np.uint32)
    lossy = np.flatnonzero(table.lengths > np.uint64(ULONG_MAX))
    lost = [int(table.lengths[i]) - int(cut[i]) for i in lossy]
    return V1Projection(lengths=cut, lossy=[int(i) for i in lossy], lost_bytes=lost)


# --- event rules --------------------------------------------------------------------------------------

class HeapEvent(BaseModel):
    """One step of a recorded sequence: a callback the runtime made, or an inspection the profiler made.

    The MR2 rules' own shorthand from before the shared vocabulary (:mod:`clr_model.events`):
    :meth:`to_event` gives the event it stands for, and :func:`check_gc_events` accepts either.

    ``callback``: ``name`` is the callback (GarbageCollectionStarted, MovedReferences2, MovedReferences,
    GarbageCollectionFinished, ObjectAllocated, ...), ``hr`` what the profiler returned, ``ranges``
    the (old, new, length) triples of a MovedReferences2/MovedReferences, ``object_ids`` ids it handed
    out. ``inspect``: the profiler used ``object_id`` with ``name`` (GetClassFromObject, GetObjectSize...);
    ``object_key``, when known, names the object it means (the profiler's own handle, a tag: anything
    that stays the same across GCs), so MR2-17 can tell a stale id from an address another object now has.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["callback", "inspect"]
    name: str = Field(min_length=1)
    hr: int | None = None
    ranges: tuple[tuple[int, int, int], ...] | None = None
    object_ids: tuple[int, ...] = ()
    object_id: int | None = None
    object_key: int | None = None

    def to_event(self) -> ProfilerCallback | ObjectInspection:
        """The event of the shared vocabulary this step stands for."""
        try:
            if self.kind == "inspect":
                return ObjectInspection(name=self.name, object_id=self.object_id, object_key=self.object_key)
            args: dict[str, JsonValue] = {}
            if self.ranges is not None:
                args["cMovedObjectIDRanges"] = len(self.ranges)
                for j, key in enumerate(_ARRAYS):
                    args[key] = [r[j] for r in self.ranges]
            if self.object_ids:
                args[_HANDED_OUT_LIST] = list(self.object_ids)
            hr = to_unsigned(self.hr) if self.hr is not None else None
            return ProfilerCallback(name=self.name, args=args, hr=hr)
        except (ValueError, ValidationError) as err:
            raise InvalidInput(f"HeapEvent {self.name}: {err}".splitlines()[0]) from None


#: ObjectIDs a callback hands out, by parameter name: a single ObjectID or an array of them.
#: ``objectIds`` is the form a recorder uses when it lists the ids of a callback it does not keep whole.
_HANDED_OUT_ONE = ("objectId", "thrownObjectId")
_HANDED_OUT_LIST = "objectIds"
_HANDED_OUT_MANY = ("objectRefIds", "rootRefIds", _HANDED_OUT_LIST)
#: every parameter name under which a callback hands out ObjectIDs (what :func:`check_gc_events` learns
#: objects from)
HANDED_OUT_PARAMETERS = (*_HANDED_OUT_ONE, *_HANDED_OUT_MANY)
#: The callbacks the MR2 rules read: a GC's bounds and its moves (the API table's gc-bound and moves).
GC_CALLBACK_NAMES = tuple(m.name for m in api.callbacks() if m.has(Fact.GC_BOUND) or m.has(Fact.MOVES))


def _handed_out(ev: ProfilerCallback) -> list[int]:
    ids: list[int] = []
    for key in _HANDED_OUT_ONE:
        one = int_arg(ev.args, key)
        if one is not None:
            ids.append(one)
    for key in _HANDED_OUT_MANY:
        many = ev.args.get(key)
        if isinstance(many, list):
            ids += [v for v in many if isinstance(v, int) and not isinstance(v, bool)]
    return ids


def _table_of(event: ProfilerCallback, index: int, out: list[Violation]) -> RangeTable | None:
    """The range table of a MovedReferences(2) callback (None when the event carries no arrays)."""
    arrays = [event.args.get(key) for key in _ARRAYS]
    if all(a is None for a in arrays):
        return None
    try:
        for key, a in zip(_ARRAYS, arrays, strict=True):
            if not isinstance(a, list):
                raise UnequalArrays("MR2-03", None, f"{key} is missing or not an array")
        old, new, lengths = (cast("list[int]", a) for a in arrays)  # RangeTable checks every item (MR2-06)
        count = event.args.get("cMovedObjectIDRanges")
        return RangeTable(old, new, lengths, count if isinstance(count, int) else None)
    except RangeTableError as err:
        out.append(Violation(clause=err.clause, message=str(err), index=index))
        return None


class _Objects:
    """MR2-17's bookkeeping: objects by identity, each with its present ObjectID.

    An object is known from the first id it is handed out or inspected with (and from its key, if the
    inspection names one). Each GarbageCollectionFinished remaps every object through that GC's tables;
    an object in no range keeps its id and is "unresolved" (MR2-16: the model does not decide where it
    is). An id an object left is stale until some object has it again."""

    def __init__(self) -> None:
        self.ids: list[int] = []  # object -> present ObjectID
        self.resolved: list[bool] = []  # the last GC placed it (or no GC since it was first seen)
        self.before: list[int | None] = []  # its id before the last GC, if that GC moved it
        self.at: dict[int, int] = {}  # present ObjectID -> object
        self.keys: dict[int, int] = {}  # object_key -> object
        self.stale: dict[int, int] = {}  # ObjectID an object moved away from -> that object

    def seen_at(self, oid: int) -> int:
        """The object at ``oid`` now; a new one if none is known there."""
        obj = self.at.get(oid)
        if obj is None:
            obj = len(self.ids)
            self.ids.append(oid)
            self.resolved.append(True)
            self.before.append(None)
            self.at[oid] = obj
            self.stale.pop(oid, None)
        return obj

    def gc(self, tables: Sequence[RangeTable]) -> None:
        if not self.ids:
            return
        ids = np.array(self.ids, dtype=np.uint64)
        new = ids.copy()
        found = np.zeros(ids.shape, dtype=bool)
        for table in tables:
            todo = np.flatnonzero(~found)
            if todo.size == 0:
                break
            moved, hit = table.remap_many(ids[todo])
            new[todo[hit]] = moved[hit]
            found[todo[hit]] = True
        old_ids = self.ids
        self.ids = [int(v) for v in new]
        self.resolved = found.tolist()
        self.before = [o if n != o else None for o, n in zip(old_ids, self.ids, strict=True)]
        self.at = {}
        for obj, oid in enumerate(self.ids):
            self.at.setdefault(oid, obj)
        for obj, o in enumerate(self.before):
            if o is not None:
                self.stale[o] = obj
        for oid in self.at:
            self.stale.pop(oid, None)

    def inspect(self, ev: ObjectInspection, oid: int, index: int) -> Violation | None:
        if ev.object_key is None:
            if oid in self.at or oid not in self.stale:
                self.seen_at(oid)
                return None
            obj = self.stale[oid]
            return Violation(clause="MR2-17", index=index, message=f"{ev.name} uses ObjectID {oid:#x} from "
                             f"before the GC; that object moved to {self.ids[obj]:#x}")
        obj_or_none = self.keys.get(ev.object_key)
        if obj_or_none is None:
            self.keys[ev.object_key] = self.seen_at(oid)
            return None
        obj = obj_or_none
        want = self.ids[obj]
        if oid == want:
            return None
        if not self.resolved[obj]:  # MR2-16: the model does not say where it went; take the profiler's word
            self.at.pop(want, None)
            self.ids[obj] = oid
            self.at.setdefault(oid, obj)
            self.stale.pop(oid, None)
            return None
        if oid == self.before[obj]:
            what = "from before the GC; it moved to"
        else:
            what = f"for object {ev.object_key}, whose ObjectID after remapping is"
        return Violation(clause="MR2-17", index=index, message=f"{ev.name} uses ObjectID {oid:#x} {what} "
                         f"{want:#x}")


def check_gc_events(
    events: Sequence[Event | HeapEvent], implements_callback4: bool = True, implements_v1: bool = True
) -> list[Violation]:
    """Check the MovedReferences2 event rules over one thread-ordered sequence.

    MR2-01 MovedReferences2 inside a GC; MR2-02 only with ICorProfilerCallback4; MR2-11 each
    MovedReferences preceded by a MovedReferences2, and (profiler implementing both) each successful
    MovedReferences2 followed by its MovedReferences; MR2-12 no MovedReferences after a failed
    MovedReferences2; MR2-09 no inspection between MovedReferences2 and GarbageCollectionFinished
    (MR2-10: allowed again after it); MR2-17 an inspection with an ObjectID that an object left at a GC
    (its block moved elsewhere) while no object has it now, or, when the inspection names the object
    (``object_key``), with any id but the one remapping gives that object. Objects are tracked by
    identity, not address: an id another object was remapped to is that object's, not stale. Range
    tables are validated too.

    Reads (:mod:`clr_model.events`): the callbacks GarbageCollectionStarted, MovedReferences2 (its three
    arrays by their parameter names; its ``hr``, from the event or from its ``return``),
    MovedReferences and GarbageCollectionFinished, the ObjectIDs any callback hands out (objectId,
    objectRefIds, rootRefIds, ...), and object inspections; every other event is ignored.
    :class:`HeapEvent` steps are read as :meth:`HeapEvent.to_event`. Violations carry the index in
    ``events``.
    """
    out: list[Violation] = []
    in_gc = False
    moving = False
    pending: tuple[int, bool] | None = None  # (index of the MovedReferences2, it succeeded)
    objects = _Objects()
    gc_tables: list[RangeTable] = []

    def unmatched(where: int) -> None:
        nonlocal pending
        if pending is not None and pending[1] and implements_v1:
            out.append(Violation(clause="MR2-11", index=pending[0], message="MovedReferences2 succeeded "
                                 f"but no MovedReferences followed before #{where}"))
        pending = None

    for i, item in enumerate(events):
        ev = item.to_event() if isinstance(item, HeapEvent) else item
        if isinstance(ev, ObjectInspection):
            if moving:
                out.append(Violation(clause="MR2-09", index=i, message=f"{ev.name} inspects ObjectID "
                                     f"{ev.object_id} between MovedReferences2 and "
                                     "GarbageCollectionFinished"))
            elif ev.object_id is not None:
                found = objects.inspect(ev, ev.object_id, i)
                if found is not None:
                    out.append(found)
            continue
        if not isinstance(ev, ProfilerCallback):
            continue
        if not begins(ev):  # the return of a callback seen at its entry: only MovedReferences2's hr counts
            if ev.name == "MovedReferences2" and pending is not None and ev.hr is not None:
                pending = (pending[0], not hresult_failed(ev.hr))
            continue
        for oid in _handed_out(ev):
            objects.seen_at(oid)
        if ev.name == "GarbageCollectionStarted":
            unmatched(i)
            in_gc, moving, gc_tables = True, False, []
        elif ev.name == "MovedReferences2":
            if not implements_callback4:
                out.append(Violation(clause="MR2-02", index=i, message="MovedReferences2 delivered to "
                                     "a profiler without ICorProfilerCallback4"))
            if not in_gc:
                out.append(Violation(clause="MR2-01", index=i, message="MovedReferences2 outside a GC"))
            unmatched(i)
            ok = ev.hr is None or not hresult_failed(ev.hr)
            pending = (i, ok)
            moving = True
            parsed = _table_of(ev, i, out)
            if parsed is not None:
                gc_tables.append(parsed)
        elif ev.name == "MovedReferences":
            if implements_callback4:
                if pending is None:
                    out.append(Violation(clause="MR2-11", index=i,
                                         message="MovedReferences without a MovedReferences2 before it"))
                elif not pending[1]:
                    out.append(Violation(clause="MR2-12", index=i, message="MovedReferences after "
                                         f"MovedReferences2 #{pending[0]} returned a failure HRESULT"))
            pending = None
            moving = True
        elif ev.name == "GarbageCollectionFinished":
            unmatched(i)
            objects.gc(gc_tables)
            in_gc, moving, gc_tables = False, False, []
    return out
