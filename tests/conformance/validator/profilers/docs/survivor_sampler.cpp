// survivor_sampler.cpp -- allocation sampler that follows sampled objects across collections and
// reports how many collections each survived and which generation it ended up in.
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo2 (GetObjectGeneration) and asks for
//     COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED.
//   * ObjectAllocated: every kSampleEvery-th allocation is sampled: its ObjectID, ClassID and current
//     generation (GetObjectGeneration, outside any collection) go into a table of at most kMaxSamples.
//     The first ObjectAllocated after a collection also refreshes the generation of every sample
//     (GetObjectGeneration again) -- the "lazy refresh": GetObjectGeneration may not be called between
//     GarbageCollectionStarted and GarbageCollectionFinished, so it is done on the next allocation.
//   * GarbageCollectionStarted: remembers which generations this collection covers.
//   * MovedReferences2 / SurvivingReferences2: for every sample that lies in a reported block, records
//     "survived, and its ObjectID after the collection is X" (batches are collected, not applied, because
//     every batch speaks of pre-collection addresses).  Nothing is asked of the runtime here.
//   * GarbageCollectionFinished: applies the collection: a sample in a reported block survived; a sample
//     in a generation this collection did not cover stays untouched; any other sample died and is dropped.
//   * Shutdown: one summary line to stderr; the info pointer is released, nothing else is called.
//
// THE BUG: MovedReferences2 shares its bookkeeping with SurvivingReferences2 and records the sample's
// PRE-collection ObjectID as its post-collection ObjectID (the line marked `// BUG:`).  For a surviving
// (non-compacting) block that is right; for a moved block the object now lives at
// newObjectIDRangeStart[i] + (oldID - oldObjectIDRangeStart[i]).  Every sampled object that a compacting
// collection moved keeps its stale address, and the lazy refresh then hands that stale ObjectID to
// ICorProfilerInfo2::GetObjectGeneration on the next allocation (and again after every later collection).
// The stale address is, by then, free space or the inside of some other object.  (Observed on 8.0.4 with
// heapchurn: 40 of those GetObjectGeneration calls fail outright, and the sampled survivors never leave
// "gen0"; with the one line fixed there are no failures and most survivors reach gen2.)
//
// Documentation sentences it breaks:
//   * ICorProfilerCallback4::MovedReferences2 (Remarks): "A compacting garbage collector reclaims the memory
//     occupied by dead objects and compacts that freed space. As a result, live objects might be moved
//     within the heap, and ObjectID values distributed by previous notifications might change." and "you can
//     calculate the new ObjectID as follows: newObjectID = newObjectIDRangeStart[i] + (oldObjectID -
//     oldObjectIDRangeStart[i])" -- the profiler keeps oldObjectID instead.
//
// Documentation otherwise followed:
//   * ICorProfilerCallback::Initialize -- the mask (COR_PRF_ENABLE_OBJECT_ALLOCATED is immutable) is set in
//     Initialize: "The Initialize call is the only opportunity to enable (or disable) callbacks that are
//     immutable."
//   * ICorProfilerInfo2::GetObjectGeneration -- "may be called from any profiler callback, provided that
//     garbage collection is not in progress" -> only from ObjectAllocated.
//   * MovedReferences2 -- "profilers should not attempt to inspect objects during a MovedReferences2 call";
//     nothing is inspected in MovedReferences2, SurvivingReferences2 or GarbageCollectionFinished.
//   * Profiling Overview, "Notification Threads": callbacks are not serialized -> one mutex for the table,
//     never held across a call into the runtime.
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call from Shutdown on.
//
// App that exercises it: heapchurn (forced compacting collections of every generation, including a
// compacted LOH, with allocation between them, so sampled survivors move and are then refreshed).
// A careful checker should report: an ObjectID passed to ICorProfilerInfo2::GetObjectGeneration that is
// stale -- the object it named was moved by an earlier compacting GC (reported in MovedReferences2) and the
// profiler never translated it.
#include <algorithm>
#include <cinttypes>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr std::uint64_t kSampleEvery = 97;
constexpr size_t kMaxSamples = 2048;
constexpr int kGenSlots = 8;  // generation values 0..7 (0,1,2, LOH=3, POH=4, spare)

struct Sample {
    ObjectID id = 0;
    ClassID cls = 0;
    int gen = -1;  // -1: unknown (treated as collected by every collection)
    std::uint64_t seq = 0;
    std::uint32_t survived = 0;
};

// Marks, for each sample inside one of the blocks [start[i], start[i] + len[i]), its post-GC ObjectID.
// `moved_to` null: the blocks did not move.
template <class Len>
void match_blocks(const std::vector<Sample>& samples, ULONG n, const ObjectID* start, const ObjectID* moved_to,
                  const Len* len, std::unordered_map<std::uint64_t, ObjectID>& after) {
    if (n == 0 || start == nullptr || len == nullptr || samples.empty()) return;
    std::vector<std::pair<ObjectID, size_t>> blocks;  // (start, index), sorted by start
    blocks.reserve(n);
    for (ULONG i = 0; i < n; ++i) blocks.emplace_back(start[i], i);
    std::sort(blocks.begin(), blocks.end());
    for (const Sample& s : samples) {
        auto it = std::upper_bound(blocks.begin(), blocks.end(), std::make_pair(s.id, static_cast<size_t>(-1)));
        if (it == blocks.begin()) continue;
        --it;
        size_t i = it->second;
        if (s.id < start[i] || s.id - start[i] >= static_cast<UINT_PTR>(len[i])) continue;
        if (moved_to == nullptr) {
            after[s.seq] = s.id;  // surviving block: the object stayed where it was
        } else {
            after[s.seq] = s.id;  // BUG: moved block -- should be moved_to[i] + (s.id - start[i])
        }
    }
}

}  // namespace

class SurvivorSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo2* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[survivor_sampler] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED);
        if (failed(hr)) {
            std::fprintf(stderr, "[survivor_sampler] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        ICorProfilerInfo2* info = live_info();
        if (info == nullptr) return S_OK;
        if (refresh_pending_.exchange(false)) refresh(info);

        std::uint64_t n = allocations_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (n % kSampleEvery != 0 || objectId == 0) return S_OK;

        Sample s;
        s.id = objectId;
        s.cls = classId;
        COR_PRF_GC_GENERATION_RANGE range{};
        if (info->GetObjectGeneration(objectId, &range) == S_OK) s.gen = range.generation;

        std::lock_guard<std::mutex> g(mu_);
        if (samples_.size() >= kMaxSamples) {
            ++not_sampled_full_;
            return S_OK;
        }
        s.seq = ++next_seq_;
        samples_.push_back(s);
        ++sampled_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        for (int i = 0; i < kGenSlots; ++i) {
            collected_[i] = generationCollected != nullptr && i < cGenerations && generationCollected[i] != 0;
        }
        after_.clear();
        in_gc_ = true;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cMovedObjectIDRanges, ObjectID* oldObjectIDRangeStart,
                                               ObjectID* newObjectIDRangeStart, SIZE_T* cObjectIDRangeLength) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        moved_blocks_ += cMovedObjectIDRanges;
        if (newObjectIDRangeStart == nullptr) return S_OK;
        match_blocks(samples_, cMovedObjectIDRanges, oldObjectIDRangeStart, newObjectIDRangeStart,
                     cObjectIDRangeLength, after_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cSurvivingObjectIDRanges, ObjectID* objectIDRangeStart,
                                                   SIZE_T* cObjectIDRangeLength) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        surviving_blocks_ += cSurvivingObjectIDRanges;
        match_blocks<SIZE_T>(samples_, cSurvivingObjectIDRanges, objectIDRangeStart, nullptr, cObjectIDRangeLength,
                             after_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        {
            std::lock_guard<std::mutex> g(mu_);
            if (!in_gc_) return S_OK;
            in_gc_ = false;
            ++gcs_;
            std::vector<Sample> kept;
            kept.reserve(samples_.size());
            for (Sample s : samples_) {
                auto it = after_.find(s.seq);
                if (it != after_.end()) {
                    s.id = it->second;
                    ++s.survived;
                    kept.push_back(s);
                } else if (s.gen >= 0 && s.gen < kGenSlots && !collected_[s.gen]) {
                    kept.push_back(s);  // its generation was not collected: untouched
                } else {
                    ++died_;
                }
            }
            samples_.swap(kept);
            after_.clear();
        }
        refresh_pending_.store(true);  // generations are re-read on the next allocation, outside the GC
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        ICorProfilerInfo2* info = info_.exchange(nullptr);
        std::lock_guard<std::mutex> g(mu_);
        std::uint64_t by_gen[kGenSlots] = {};
        std::uint64_t unknown = 0, max_survived = 0;
        for (const Sample& s : samples_) {
            if (s.gen >= 0 && s.gen < kGenSlots) ++by_gen[s.gen]; else ++unknown;
            max_survived = std::max<std::uint64_t>(max_survived, s.survived);
        }
        std::fprintf(stderr,
                     "[survivor_sampler] shutdown: allocations=%" PRIu64 " sampled=%" PRIu64 " live=%zu died=%" PRIu64
                     " gcs=%" PRIu64 " moved_blocks=%" PRIu64 " surviving_blocks=%" PRIu64 " refreshes=%" PRIu64
                     " refresh_failures=%" PRIu64 " gen0/1/2/loh/poh=%" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64
                     "/%" PRIu64 " unknown=%" PRIu64 " max_survived=%" PRIu64 "\n",
                     allocations_.load(), sampled_, samples_.size(), died_, gcs_, moved_blocks_, surviving_blocks_,
                     refreshes_.load(), refresh_failures_.load(), by_gen[0], by_gen[1], by_gen[2], by_gen[3], by_gen[4],
                     unknown, max_survived);
        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    ICorProfilerInfo2* live_info() const {
        if (shutdown_.load()) return nullptr;
        return info_.load();
    }

    // Re-reads every sample's generation. Called from ObjectAllocated (no collection in progress); the
    // mutex is not held while the runtime is called.
    void refresh(ICorProfilerInfo2* info) {
        std::vector<std::pair<std::uint64_t, ObjectID>> todo;
        {
            std::lock_guard<std::mutex> g(mu_);
            todo.reserve(samples_.size());
            for (const Sample& s : samples_) todo.emplace_back(s.seq, s.id);
        }
        std::unordered_map<std::uint64_t, int> gens;
        for (const auto& [seq, id] : todo) {
            COR_PRF_GC_GENERATION_RANGE range{};
            HRESULT hr = info->GetObjectGeneration(id, &range);
            if (hr == S_OK) {
                gens[seq] = range.generation;
            } else {
                refresh_failures_.fetch_add(1, std::memory_order_relaxed);
            }
        }
        refreshes_.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> g(mu_);
        for (Sample& s : samples_) {
            auto it = gens.find(s.seq);
            if (it != gens.end()) s.gen = it->second;
        }
    }

    std::atomic<ICorProfilerInfo2*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> refresh_pending_{false};
    std::atomic<std::uint64_t> allocations_{0};
    std::atomic<std::uint64_t> refreshes_{0};
    std::atomic<std::uint64_t> refresh_failures_{0};

    std::mutex mu_;  // guards everything below
    std::vector<Sample> samples_;
    std::unordered_map<std::uint64_t, ObjectID> after_;  // this GC: sample seq -> ObjectID after the GC
    bool collected_[kGenSlots] = {};
    bool in_gc_ = false;
    std::uint64_t next_seq_ = 0;
    std::uint64_t sampled_ = 0;
    std::uint64_t not_sampled_full_ = 0;
    std::uint64_t died_ = 0;
    std::uint64_t gcs_ = 0;
    std::uint64_t moved_blocks_ = 0;
    std::uint64_t surviving_blocks_ = 0;
};

DOCFIX_DEFINE_PROFILER(SurvivorSampler)
