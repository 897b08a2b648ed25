// The shadow heap (issue 19): every object start at every instant, kept from what the runtime reports, and
// the verdict on an ObjectID a profiler hands to an ICorProfilerInfo method. The C++ twin of the reference
// model clr_model/shadow_heap.py (tests/conformance/native/test_shadow_heap_diff.py holds the two equal on
// generated GC sequences); read that module's docstring for the policy. In short:
//
//   allocate(id, size)        ObjectAllocated (size from GetObjectSize2): drops every known object its bytes
//                             overlap (that memory was free), forgets a stale address at id
//   gc_started(collected, generations)   GarbageCollectionStarted's generations and GetGenerationBounds
//   moved(...) / surviving(...)          every MovedReferences2 / SurvivingReferences2 batch of the GC
//   gc_finished()             applies all batches at once (they speak of pre-GC addresses): an object in a
//                             moved block goes to new + (id - old), in a surviving block or in a generation
//                             the GC did not collect stays, otherwise it died; an object whose bytes a moved
//                             block's new range covers is dropped (another object lives there now)
//   classify(id)              object / stale (where the object is now) / interior (its start and the
//                             offset) / unknown
//
// Memory (issue 23: a node per object and a walk of a red-black tree at every GC were most of the proxy's cost):
// the live objects are a sorted array of (start, size), 16 bytes an object; an allocation is appended to a
// second, unsorted array and merged in (a sort of the new ones, a linear merge) when the heap is next read or
// a GC is applied; a GC is a linear pass over the sorted objects beside the sorted blocks, the survivors
// compacted in place and the moved objects merged back in. A verdict asked for with allocations pending is
// answered beside them (a search of each array) when they came in rising order (each at or above the previous
// one's end: one thread's bump allocations) or when at most kPendingScan did, else after merging them. The
// addresses objects left at a GC are a sorted array too (24 bytes an address), capped (the reference model's
// left_gcs / left_max): an address is kept while it was left in one of the last `left_gcs` GCs (default 8); past
// `left_max` addresses (default 1,048,576) the oldest GC's go first, within one GC the highest addresses first.
// A forgotten address answers `unknown` (never a finding), not `stale`.
//
// Not thread-safe: the caller serialises (the proxy holds a mutex around it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace profharness {

enum class HeapVerdict : std::uint8_t { Object, Stale, Interior, Unknown };

// "object", "stale", "interior", "unknown" (clr_model.shadow_heap.HeapVerdict's values).
const char* heap_verdict_name(HeapVerdict v);

struct HeapClassification {
    HeapVerdict verdict = HeapVerdict::Unknown;
    std::uint64_t object_start = 0;  // object: the ID; stale: where its object is now; interior: the start
    std::uint64_t offset = 0;        // interior only
};

struct GenerationRange {
    std::uint64_t start;
    std::uint64_t end;  // exclusive
    int generation;
};

class ShadowHeap {
 public:
    struct Object {
        std::uint64_t start;
        std::uint64_t size;
    };

    static constexpr int kDefaultLeftGcs = 8;
    static constexpr std::size_t kDefaultLeftMax = std::size_t{1} << 20;
    // classify() answers beside at most this many pending allocations that came unsorted (sorting a copy);
    // past it they are merged first
    static constexpr std::size_t kPendingScan = 64;

    explicit ShadowHeap(int left_gcs = kDefaultLeftGcs, std::size_t left_max = kDefaultLeftMax)
        : left_gcs_(left_gcs), left_max_(left_max) {}
    ShadowHeap(const ShadowHeap&) = delete;
    ShadowHeap& operator=(const ShadowHeap&) = delete;

    // ObjectAllocated: a new object at `id` of `size` bytes (0 counts as 1).
    void allocate(std::uint64_t id, std::uint64_t size);
    // GarbageCollectionStarted: a bit per generation collected (bit g: generation g) and every generation
    // range at that instant (empty: every generation counts as collected).
    void gc_started(std::uint64_t collected_mask, std::vector<GenerationRange> generations);
    // One MovedReferences(2) batch: (old start, new start, length) blocks; length 0 is ignored.
    void moved(std::size_t n, const std::uint64_t* olds, const std::uint64_t* news, const std::uint64_t* lens);
    // One SurvivingReferences(2) batch: (start, length) blocks.
    void surviving(std::size_t n, const std::uint64_t* starts, const std::uint64_t* lens);
    // GarbageCollectionFinished: apply every batch of this GC at once.
    void gc_finished();

    // The reads below merge the pending allocations first (or, for a verdict, look beside them).
    HeapClassification classify(std::uint64_t id);

    bool in_gc() const { return in_gc_; }
    std::size_t objects() { return object_map().size(); }
    std::size_t left_addresses() {
        settle();
        return left_live_;
    }
    std::uint64_t gcs() const { return gcs_; }
    // GCs that moved some object (a block whose new start differs from its old one): compacting GCs.
    std::uint64_t compacting_gcs() const { return compacting_gcs_; }
    // Compacting GCs that moved some object onto an address another known object occupied before that GC
    // (address reuse: an ObjectID a profiler kept from before the GC now names a different object).
    std::uint64_t reuse_gcs() const { return reuse_gcs_; }
    // Addresses forgotten by the cap so far (by age or by count).
    std::uint64_t left_dropped() const { return left_dropped_; }
    // Every known live object in address order (tests).
    const std::vector<Object>& object_map() {
        settle();
        return objects_;
    }

 private:
    struct Move {
        std::uint64_t old_start, new_start, length;
        bool operator<(const Move& o) const {
            if (old_start != o.old_start) return old_start < o.old_start;
            if (new_start != o.new_start) return new_start < o.new_start;
            return length < o.length;
        }
    };
    struct Span {
        std::uint64_t start, length;
        bool operator<(const Span& o) const { return start != o.start ? start < o.start : length < o.length; }
    };
    struct Left {
        std::uint64_t addr;  // sorted by addr
        std::uint64_t now;   // where the object that left it is now
        std::uint64_t gc;    // the GC (1-based) it was left at; 0: forgotten (an object was allocated there)
    };

    // Merges the pending allocations into objects_ and forgets the left addresses they start at: the heap as
    // if each had been applied when it came.
    void settle();
    // The pending allocations applied one at a time, as they came (when they overlap one another or the
    // objects overlap: the merge's shortcut would not give the same heap).
    void settle_one_by_one();
    // classify() beside the pending allocations, when the merge's shortcut holds and they are sorted or few;
    // false when not (then the caller settles).
    bool classify_pending(std::uint64_t id, HeapClassification& c) const;
    HeapClassification classify_settled(std::uint64_t id) const;
    bool collected_at(std::uint64_t address) const;
    const Left* find_left(std::uint64_t addr) const;
    void cap_left();
    // Whether this GC's moves put some known object where another one was before the GC (moved_ sorted).
    bool moves_onto_others() const;
    // objects_ without each object whose bytes a moved block's new range covers (another object lives there
    // now).
    void drop_covered();
    // An allocation at each of these starts forgets a left address there.
    void forget_left(const std::vector<Object>& allocated);

    int left_gcs_;
    std::size_t left_max_;
    // the known live objects, sorted by start (starts unique); disjoint_: no two overlap (what the merge's
    // shortcut needs; overlapping objects come only from overlapping moves, which a runtime never reports)
    std::vector<Object> objects_;
    bool disjoint_ = true;
    std::vector<Object> pending_;  // allocations not merged yet, in the order they came
    bool pending_rising_ = true;   // each starts at or above the previous one's end (sorted, disjoint)
    std::vector<Object> sorted_;   // the pending allocations sorted, when they came unsorted
    std::vector<Object> scratch_;  // a merge's output, swapped with objects_
    // sort_runs's buffers (shadow_heap.cpp), kept like the working arrays below
    std::vector<Object> run_buffer_;
    // gc_finished's working arrays, kept from GC to GC (fresh ones each time cost page faults)
    std::vector<Object> placed_;                                      // moved objects at their new starts
    std::vector<std::pair<std::uint64_t, std::uint64_t>> moved_away_;  // (old start, new start)
    std::vector<Span> ranges_;                                        // drop_covered's
    std::vector<std::uint64_t> reach_;
    std::vector<Move> move_buffer_;
    std::vector<Span> span_buffer_;
    std::vector<Left> left_;  // sorted by addr; entries with gc == 0 are forgotten
    std::vector<Left> left_next_;  // the next GC's, swapped with left_
    std::size_t left_live_ = 0;
    std::uint64_t collected_ = ~std::uint64_t{0};
    std::vector<GenerationRange> generations_;
    bool all_collected_ = true;  // the GC collects the generation of every range in generations_
    std::vector<Move> moved_;
    std::vector<Span> surviving_;
    bool in_gc_ = false;
    std::uint64_t gcs_ = 0;
    std::uint64_t compacting_gcs_ = 0;
    std::uint64_t reuse_gcs_ = 0;
    std::uint64_t left_dropped_ = 0;
};

}  // namespace profharness
