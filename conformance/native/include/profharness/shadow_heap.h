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
// Memory: the live objects (an ordered map whose nodes come from a pool, about 48 bytes an object) and the
// addresses objects left at a GC (a sorted array, 24 bytes an address). The latter is capped (the reference model's left_gcs / left_max):
// an address is kept while it was left in one of the last `left_gcs` GCs (default 8); past `left_max`
// addresses (default 1,048,576) the oldest GC's go first, within one GC the highest addresses first. A
// forgotten address answers `unknown` (never a finding), not `stale`.
//
// Not thread-safe: the caller serialises (the proxy holds a mutex around it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory_resource>
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
    // start -> size; its nodes come from the heap's own pool (an allocation per object otherwise dominates)
    using ObjectMap = std::pmr::map<std::uint64_t, std::uint64_t>;

    static constexpr int kDefaultLeftGcs = 8;
    static constexpr std::size_t kDefaultLeftMax = std::size_t{1} << 20;

    explicit ShadowHeap(int left_gcs = kDefaultLeftGcs, std::size_t left_max = kDefaultLeftMax)
        : left_gcs_(left_gcs), left_max_(left_max), size_(&pool_) {}
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

    HeapClassification classify(std::uint64_t id) const;

    bool in_gc() const { return in_gc_; }
    std::size_t objects() const { return size_.size(); }
    std::size_t left_addresses() const { return left_live_; }
    std::uint64_t gcs() const { return gcs_; }
    // GCs that moved some object (a block whose new start differs from its old one): compacting GCs.
    std::uint64_t compacting_gcs() const { return compacting_gcs_; }
    // Compacting GCs that moved some object onto an address another known object occupied before that GC
    // (address reuse: an ObjectID a profiler kept from before the GC now names a different object).
    std::uint64_t reuse_gcs() const { return reuse_gcs_; }
    // Addresses forgotten by the cap so far (by age or by count).
    std::uint64_t left_dropped() const { return left_dropped_; }
    // start -> size of every known live object (tests).
    const ObjectMap& object_map() const { return size_; }

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

    bool collected_at(std::uint64_t address) const;
    void drop_overlapping(std::uint64_t lo, std::uint64_t hi);
    const Left* find_left(std::uint64_t addr) const;
    void cap_left();
    // Whether this GC's moves put some known object where another one was before the GC (moved_ sorted).
    bool moves_onto_others() const;

    int left_gcs_;
    std::size_t left_max_;
    std::pmr::unsynchronized_pool_resource pool_;
    ObjectMap size_;
    std::vector<Left> left_;  // sorted by addr; entries with gc == 0 are forgotten
    std::size_t left_live_ = 0;
    std::uint64_t collected_ = ~std::uint64_t{0};
    std::vector<GenerationRange> generations_;
    std::vector<Move> moved_;
    std::vector<Span> surviving_;
    bool in_gc_ = false;
    std::uint64_t gcs_ = 0;
    std::uint64_t compacting_gcs_ = 0;
    std::uint64_t reuse_gcs_ = 0;
    std::uint64_t left_dropped_ = 0;
    // the last object allocate() placed (valid until gc_finished: only it and allocate() erase objects)
    ObjectMap::iterator cursor_;
    bool cursor_valid_ = false;
};

}  // namespace profharness
