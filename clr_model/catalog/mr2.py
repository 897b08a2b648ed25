"""Clauses of MovedReferences2.md (``shared/spec``): every normative sentence, plus its ambiguities.

The page's remapping formula lost its minus sign; the spec file's header restores it and so do we.
"""

from __future__ import annotations

from clr_model.catalog.base import Clause, Document, Kind, Layer

_D = Document.MOVED_REFERENCES2
M, LV, V, FZ = Layer.MODEL, Layer.LIVE, Layer.VALIDATOR, Layer.FUZZ

CLAUSES: tuple[Clause, ...] = (
    Clause(
        id="MR2-01", title="reported for a compacting GC", document=_D, section="Summary",
        kind=Kind.ORDERING, layers=frozenset({M, LV}),
        paraphrase="MovedReferences2 reports the new layout of objects after a compacting garbage "
        "collection, "
        "so it is delivered inside a GC (between GarbageCollectionStarted and GarbageCollectionFinished).",
        quote="Called to report the new layout of objects in the heap as a result of a compacting garbage "
        "collection.",
    ),
    Clause(
        id="MR2-02", title="only for ICorProfilerCallback4", document=_D, section="Summary",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="The runtime calls MovedReferences2 only on a profiler that implements "
        "ICorProfilerCallback4.",
        quote="This method is called if the profiler has implemented the ICorProfilerCallback4 interface.",
    ),
    Clause(
        id="MR2-03", title="parallel arrays of one length", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="cMovedObjectIDRanges is the length of each of the three parallel arrays; entry i of the "
        "three arrays describes one block.",
        quote="the value of cMovedObjectIDRanges is the total size of the oldObjectIDRangeStart, "
        "newObjectIDRangeStart, and cObjectIDRangeLength arrays.",
    ),
    Clause(
        id="MR2-04", title="old start of a live block", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="oldObjectIDRangeStart[i] is the pre-GC start address of a block of contiguous live "
        "objects.",
        quote="each of which is the old (pre-garbage collection) starting address of a block of contiguous, "
        "live objects in memory.",
    ),
    Clause(
        id="MR2-05", title="new start of the same block", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="newObjectIDRangeStart[i] is the post-GC start address of the same block.",
        quote="each of which is the new (post-garbage collection) starting address of a block of contiguous, "
        "live objects in memory.",
    ),
    Clause(
        id="MR2-06", title="SIZE_T block lengths", document=_D, section="Parameters",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="cObjectIDRangeLength[i] is the size in bytes of block i, a SIZE_T (0 <= len < 2**64 on "
        "64-bit) that may exceed ULONG; a size is given for every block.",
        quote="A size is specified for each block that is referenced in the oldObjectIDRangeStart and "
        "newObjectIDRangeStart arrays.",
    ),
    Clause(
        id="MR2-07", title="membership test", document=_D, section="Remarks",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="An ObjectID belongs to block i when old_i <= oldObjectID < old_i + len_i (half-open).",
        quote="oldObjectIDRangeStart[i] <= oldObjectID < oldObjectIDRangeStart[i] + cObjectIDRangeLength[i]",
    ),
    Clause(
        id="MR2-08", title="remapping formula", document=_D, section="Remarks",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="For an ObjectID in block i: newObjectID = new_i + (oldObjectID - old_i); the offset "
        "inside the block is kept.",
        quote="newObjectID = newObjectIDRangeStart[i] + (oldObjectID - oldObjectIDRangeStart[i])",
    ),
    Clause(
        id="MR2-09", title="no inspection during the callback", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, V}),
        paraphrase="ObjectIDs are not valid during MovedReferences2 (objects may be mid-move): the profiler "
        "must not inspect objects from the callback until GarbageCollectionFinished.",
        quote="Therefore, profilers should not attempt to inspect objects during a MovedReferences2 call.",
    ),
    Clause(
        id="MR2-10", title="inspection after GarbageCollectionFinished", document=_D, section="Remarks",
        kind=Kind.ORDERING, layers=frozenset({M, LV}),
        paraphrase="GarbageCollectionFinished means every object is at its new place; inspection is allowed "
        "again from then on.",
        quote="A ICorProfilerCallback2::GarbageCollectionFinished callback indicates that all objects "
        "have been "
        "moved to their new locations and inspection can be performed.",
    ),
    Clause(
        id="MR2-11", title="MovedReferences2 before MovedReferences", document=_D, section="Remarks",
        kind=Kind.ORDERING, layers=frozenset({M, LV}),
        paraphrase="When the profiler implements both callbacks, each MovedReferences is preceded by the "
        "MovedReferences2 reporting the same moves.",
        quote="the MovedReferences2 method is called before the ICorProfilerCallback::MovedReferences method",
    ),
    Clause(
        id="MR2-12", title="failure suppresses MovedReferences", document=_D, section="Remarks",
        kind=Kind.ORDERING, layers=frozenset({M, LV}),
        paraphrase="MovedReferences follows only a MovedReferences2 that returned success; a failure HRESULT "
        "from MovedReferences2 suppresses it.",
        quote="but only if the MovedReferences2 method returns successfully. Profilers can return an HRESULT "
        "that indicates failure from the MovedReferences2 method, to avoid calling the second method.",
    ),
    Clause(
        id="MR2-13", title="ULONG lengths lose big blocks", document=_D, section="Summary",
        kind=Kind.INVARIANT, layers=frozenset({M, V}),
        paraphrase="MovedReferences carries ULONG (32-bit) lengths and cannot express blocks of 4 GiB or "
        "more; MovedReferences2 replaces it for that reason.",
        quote="it can report larger ranges of objects whose lengths exceed what can be expressed in a ULONG.",
    ),
    Clause(
        id="MR2-14", title="disjoint in old space (derived)", document=_D, section="Remarks",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="Derived: blocks do not overlap in old space, otherwise one old ObjectID would have "
        "two new "
        "values and the formula would be ambiguous.",
    ),
    Clause(
        id="MR2-15", title="disjoint in new space (derived)", document=_D, section="Remarks",
        kind=Kind.INVARIANT, layers=frozenset({M, LV}),
        paraphrase="Derived: blocks do not overlap in new space, otherwise two live objects would occupy one "
        "address after the GC.",
    ),
    Clause(
        id="MR2-16", title="ObjectID in no range", document=_D, section="Remarks",
        kind=Kind.AMBIGUITY, layers=frozenset({M, LV}),
        paraphrase="The page says how to remap an ObjectID inside a range, not what an ObjectID outside "
        "every "
        "range means.",
        question="After a compacting GC, is an ObjectID in no range an object that did not move (ranges list "
        "only moved blocks) or a dead object (ranges list every survivor)? The page says the arrays describe "
        "blocks 'that moved' and also blocks 'of contiguous, live objects'.",
        model_choice="remap() returns None (no range) and leaves the decision to the caller; HeapSnapshot "
        "takes an explicit policy, 'dead' (drop the id) or 'unmoved' (keep it), and reports ids the "
        "'unmoved' policy would place inside another block's new range as conflicts.",
    ),
    Clause(
        id="MR2-17", title="earlier ObjectIDs must be remapped", document=_D, section="Remarks",
        kind=Kind.AUTHOR_RULE, layers=frozenset({M, LV, V, FZ}),
        paraphrase="ObjectIDs handed out by earlier notifications may change at a compacting GC; a profiler "
        "that keeps them must remap them through the ranges before using them again.",
        quote="live objects might be moved within the heap, and ObjectID values distributed by previous "
        "notifications might change.",
    ),
)
