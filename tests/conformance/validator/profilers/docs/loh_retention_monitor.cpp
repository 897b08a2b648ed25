// loh_retention_monitor.cpp -- how long large objects live, and where survivors end up.
//
// What it does:
//  * Learns the LOH threshold (ICorProfilerInfo10::GetLOHObjectSizeThreshold) and, from
//    ObjectAllocated, counts every allocation larger than it.  Up to 256 of those objects get a weak
//    handle (ICorProfilerInfo13::CreateHandle, COR_PRF_HANDLE_TYPE_WEAK).
//  * In GarbageCollectionFinished it asks each weak handle for its object
//    (GetObjectIDFromHandle): a null ObjectID means the object died in that GC, otherwise it
//    survived one more GC.  Handles of dead objects are destroyed later, in RuntimeResumeFinished.
//  * Per GC it attributes the surviving bytes reported by MovedReferences2 / SurvivingReferences2
//    to generations (gen0/1/2/LOH/POH), counts LOH collections (GarbageCollectionStarted) and
//    application handle churn (HandleCreated / HandleDestroyed).
//  * After each GC, in RuntimeResumeFinished, it reads the generation bounds (GetGenerationBounds,
//    two passes) and keeps the largest LOH size seen.
//  * Shutdown prints "loh_retention_monitor: gcs=<n> ..." (no ICorProfilerInfo call but Release).
//  Newest interface used: ICorProfilerInfo13 (.NET 7+).  On older runtimes it says so on stderr and
//  runs without lifetime tracking (ICorProfilerInfo10), or also without the configured threshold
//  (ICorProfilerInfo4, assumes 85000).
//
// Documentation followed:
//  * CreateHandle: "To ensure that the object reference is valid, this method has to be called from
//    a ICorProfilerCallback method such as ICorProfilerCallback::ObjectAllocated."  "Do not forget to
//    call ICorProfilerInfo13::DestroyHandle once a created handle is no longer needed. It is
//    recommended to have less than 4096 handles allocated at the same time".
//  * COR_PRF_HANDLE_TYPE_WEAK: "The handle tracks an object as long as it is alive. It does not act
//    as a root for the garbage collector."  GetObjectIDFromHandle: "If *pObject is null, the object
//    wrapped by this handle is no longer alive and has been collected."
//  * GetLOHObjectSizeThreshold: "Objects larger than the large object heap threshold will be
//    allocated on the large object heap."
//  * COR_PRF_MONITOR: COR_PRF_ENABLE_OBJECT_ALLOCATED "must be set during initialization"; with it,
//    COR_PRF_MONITOR_OBJECT_ALLOCATED gives ObjectAllocated callbacks; COR_PRF_MONITOR_GC controls
//    the GC, MovedReferences2, SurvivingReferences2, HandleCreated and HandleDestroyed callbacks.
//  * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//    locations when the GarbageCollectionFinished method is called."
//  * GetGenerationBounds: "can be called from any profiler callback, provided that garbage
//    collection is not in progress" -- done in RuntimeResumeFinished ("the runtime has resumed all
//    runtime threads and has returned to normal operation"), with the two-pass buffer protocol.
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called."
//
// Left ambiguous by the documents:
//  * GetGenerationBounds also says "the most interesting places to call GetGenerationBounds are in
//    GarbageCollectionStarted and GarbageCollectionFinished", which contradicts "provided that
//    garbage collection is not in progress"; this file stays outside the GC.
//  * "larger than" the LOH threshold vs. "at least" -- the strict reading is used.
//  * Weak handles still alive at Shutdown cannot be destroyed (no ICorProfilerInfo call is allowed
//    there); the documents do not say whether that matters at process exit.
//  * Whether the profiler's own CreateHandle/DestroyHandle raise HandleCreated/HandleDestroyed is
//    not said; the counts include whatever the runtime reports.
#include "common.h"

#include <mutex>
#include <vector>

using namespace docfix;

namespace {
constexpr size_t kMaxTracked = 256;          // well under the recommended 4096 live handles
constexpr std::int32_t kHandleTypeWeak = 1;  // COR_PRF_HANDLE_TYPE_WEAK
constexpr int kGenSlots = 5;                 // gen0, gen1, gen2, LOH (3), POH (4)

struct Tracked {
    void* handle = nullptr;  // ObjectHandleID; null once destroyed
    SIZE_T size = 0;
    unsigned bornAtGc = 0;
    unsigned survived = 0;
    bool alive = true;
};
}  // namespace

class LohRetentionMonitor : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo13, reinterpret_cast<void**>(&info13_))) && info13_) {
            info10_ = info13_;
            info_ = info13_;
        } else if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info10_))) &&
                   info10_) {
            info13_ = nullptr;
            info_ = info10_;
            std::fprintf(stderr, "[loh_retention_monitor] ICorProfilerInfo13 unavailable (needs .NET 7+): "
                                 "large objects counted, lifetimes not tracked\n");
        } else if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_))) && info_) {
            info13_ = nullptr;
            info10_ = nullptr;
            std::fprintf(stderr, "[loh_retention_monitor] ICorProfilerInfo10 unavailable: assuming an 85000-byte "
                                 "LOH threshold, lifetimes not tracked\n");
        } else {
            std::fprintf(stderr, "[loh_retention_monitor] no usable ICorProfilerInfo\n");
            return E_FAIL;
        }
        HRESULT hr = info_->SetEventMask(COR_PRF_MONITOR_GC | COR_PRF_MONITOR_SUSPENDS |
                                         COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_OBJECT_ALLOCATED);
        if (failed(hr)) {
            std::fprintf(stderr, "[loh_retention_monitor] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            info10_ = nullptr;
            info13_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[loh_retention_monitor] initialized (%s)\n",
                     info13_ ? "ICorProfilerInfo13" : info10_ ? "ICorProfilerInfo10" : "ICorProfilerInfo4");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        if (!thresholdKnown_.load()) {
            DWORD t = 85000;
            if (info10_ != nullptr && failed(info10_->GetLOHObjectSizeThreshold(&t))) t = 85000;
            threshold_.store(t);
            thresholdKnown_.store(true);
        }
        SIZE_T size = 0;
        if (failed(info_->GetObjectSize2(objectId, &size)) || size <= threshold_.load()) return S_OK;
        ++largeAllocs_;
        largeBytes_ += size;
        if (info13_ == nullptr || trackedCount_.load() >= kMaxTracked) return S_OK;
        void* handle = nullptr;  // created in ObjectAllocated, where objectId is valid
        if (failed(info13_->CreateHandle(objectId, kHandleTypeWeak, &handle)) || handle == nullptr) {
            ++handleFailures_;
            return S_OK;
        }
        std::lock_guard<std::mutex> g(lock_);
        Tracked t;
        t.handle = handle;
        t.size = size;
        t.bornAtGc = gcs_;
        tracked_.push_back(t);
        trackedCount_.store(tracked_.size());
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID, ObjectID) override { ++appHandlesCreated_; return S_OK; }
    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID) override { ++appHandlesDestroyed_; return S_OK; }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* collected, COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        ++gcs_;
        if (collected != nullptr && cGenerations > 3 && collected[3]) ++lohCollections_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cRanges, ObjectID*, ObjectID* newStart, SIZE_T* cLength) override {
        if (shutdown_.load() || newStart == nullptr || cLength == nullptr) return S_OK;
        AttributeSurvivors(cRanges, newStart, cLength);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cRanges, ObjectID* start, SIZE_T* cLength) override {
        if (shutdown_.load() || start == nullptr || cLength == nullptr) return S_OK;
        AttributeSurvivors(cRanges, start, cLength);
        return S_OK;
    }

    // Weak handles are read here, where objects are in their final locations.
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load() || info13_ == nullptr) return S_OK;
        std::vector<std::pair<size_t, void*>> live;
        {
            std::lock_guard<std::mutex> g(lock_);
            for (size_t i = 0; i < tracked_.size(); ++i)
                if (tracked_[i].alive) live.emplace_back(i, tracked_[i].handle);
        }
        std::vector<std::pair<size_t, bool>> results;
        for (auto& e : live) {
            ObjectID obj = 0;
            if (succeeded(info13_->GetObjectIDFromHandle(e.second, &obj))) results.emplace_back(e.first, obj != 0);
        }
        std::lock_guard<std::mutex> g(lock_);
        for (auto& r : results) {
            Tracked& t = tracked_[r.first];
            if (r.second) {
                ++t.survived;
            } else {
                t.alive = false;
                ++died_;
                survivedByDead_ += t.survived;
            }
        }
        return S_OK;
    }

    // Outside the GC: destroy handles of dead objects, then read the generation bounds.
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        std::vector<void*> dead;
        {
            std::lock_guard<std::mutex> g(lock_);
            for (Tracked& t : tracked_)
                if (!t.alive && t.handle != nullptr) {
                    dead.push_back(t.handle);
                    t.handle = nullptr;
                }
        }
        for (void* h : dead)
            if (info13_ != nullptr && succeeded(info13_->DestroyHandle(h))) ++handlesDestroyed_;
        ReadGenerationBounds();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(lock_);
        size_t aliveAtExit = 0;
        for (const Tracked& t : tracked_) aliveAtExit += t.alive ? 1 : 0;
        std::fprintf(stderr,
                     "loh_retention_monitor: gcs=%u loh_collections=%u loh_threshold=%u large_allocs=%zu "
                     "large_bytes=%llu tracked=%zu died=%zu alive_at_exit=%zu gcs_survived_by_dead=%llu "
                     "handles_destroyed=%zu handle_failures=%zu app_handles=+%zu/-%zu bounds_reads=%zu "
                     "peak_loh_bytes=%llu api=%s\n",
                     gcs_, lohCollections_, threshold_.load(), largeAllocs_.load(), largeBytes_.load(),
                     tracked_.size(), died_, aliveAtExit, survivedByDead_, handlesDestroyed_, handleFailures_.load(),
                     appHandlesCreated_.load(), appHandlesDestroyed_.load(), boundsReads_, peakLohBytes_,
                     info13_ ? "ICorProfilerInfo13" : info10_ ? "ICorProfilerInfo10" : "ICorProfilerInfo4");
        std::fprintf(stderr,
                     "loh_retention_monitor:   survivor_bytes gen0=%llu gen1=%llu gen2=%llu loh=%llu poh=%llu "
                     "unattributed=%llu\n",
                     survivorBytes_[0], survivorBytes_[1], survivorBytes_[2], survivorBytes_[3], survivorBytes_[4],
                     unattributed_);
        std::fprintf(stderr, "loh_retention_monitor:   last generation sizes gen0=%llu gen1=%llu gen2=%llu "
                             "loh=%llu poh=%llu\n",
                     genSizes_[0], genSizes_[1], genSizes_[2], genSizes_[3], genSizes_[4]);
        if (info_ != nullptr) {
            info_->Release();  // the only use of the info pointer in Shutdown
            info_ = nullptr;
            info10_ = nullptr;
            info13_ = nullptr;
        }
        return S_OK;
    }

private:
    // Called from MovedReferences2 / SurvivingReferences2, i.e. while the GC is running.
    void AttributeSurvivors(ULONG cRanges, const ObjectID* start, const SIZE_T* cLength) {
        unsigned long long perGen[kGenSlots] = {0, 0, 0, 0, 0};
        unsigned long long lost = 0;
        for (ULONG i = 0; i < cRanges; ++i) {
            COR_PRF_GC_GENERATION_RANGE range{};
            // BUG: "The GetObjectGeneration method may be called from any profiler callback, provided
            // that garbage collection is not in progress. That is, it may be called from any callback
            // except those that occur between ICorProfilerCallback2::GarbageCollectionStarted and
            // ICorProfilerCallback2::GarbageCollectionFinished." (ICorProfilerInfo2::GetObjectGeneration)
            HRESULT hr = info_->GetObjectGeneration(start[i], &range);
            if (succeeded(hr) && range.generation >= 0 && range.generation < kGenSlots)
                perGen[range.generation] += cLength[i];
            else
                lost += cLength[i];
        }
        std::lock_guard<std::mutex> g(lock_);
        for (int gen = 0; gen < kGenSlots; ++gen) survivorBytes_[gen] += perGen[gen];
        unattributed_ += lost;
    }

    void ReadGenerationBounds() {
        ULONG count = 0;
        // Pass 1: zero-length buffer, to learn how many ranges there are.
        if (failed(info_->GetGenerationBounds(0, &count, nullptr))) return;
        std::vector<COR_PRF_GC_GENERATION_RANGE> ranges;
        for (int attempt = 0; attempt < 3; ++attempt) {
            ranges.assign(count, COR_PRF_GC_GENERATION_RANGE{});
            ULONG total = 0;
            if (count == 0 || failed(info_->GetGenerationBounds(count, &total, ranges.data()))) return;
            if (total <= count) {
                ranges.resize(total);
                break;
            }
            count = total;  // grew between the calls: retry with the larger size
            ranges.clear();
        }
        if (ranges.empty()) return;
        unsigned long long sizes[kGenSlots] = {0, 0, 0, 0, 0};
        for (const auto& r : ranges)
            if (r.generation >= 0 && r.generation < kGenSlots) sizes[r.generation] += r.rangeLength;
        std::lock_guard<std::mutex> g(lock_);
        ++boundsReads_;
        for (int gen = 0; gen < kGenSlots; ++gen) genSizes_[gen] = sizes[gen];
        if (sizes[3] > peakLohBytes_) peakLohBytes_ = sizes[3];
    }

    ICorProfilerInfo4* info_ = nullptr;
    ICorProfilerInfo10* info10_ = nullptr;  // null before .NET Core 3.0
    ICorProfilerInfo13* info13_ = nullptr;  // null before .NET 7
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> thresholdKnown_{false};
    std::atomic<DWORD> threshold_{85000};
    std::atomic<size_t> largeAllocs_{0}, handleFailures_{0}, trackedCount_{0};
    std::atomic<size_t> appHandlesCreated_{0}, appHandlesDestroyed_{0};
    std::atomic<unsigned long long> largeBytes_{0};
    std::mutex lock_;
    unsigned gcs_ = 0, lohCollections_ = 0;
    std::vector<Tracked> tracked_;
    size_t died_ = 0, handlesDestroyed_ = 0, boundsReads_ = 0;
    unsigned long long survivedByDead_ = 0, unattributed_ = 0, peakLohBytes_ = 0;
    unsigned long long survivorBytes_[kGenSlots] = {0, 0, 0, 0, 0};
    unsigned long long genSizes_[kGenSlots] = {0, 0, 0, 0, 0};
};

DOCFIX_DEFINE_PROFILER(LohRetentionMonitor)
