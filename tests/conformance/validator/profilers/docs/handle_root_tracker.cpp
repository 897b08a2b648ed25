// handle_root_tracker.cpp -- tracks GC handles and GC roots.
//
// What it does
// ------------
//   * Initialize: QueryInterface the IUnknown it is handed for ICorProfilerInfo5, read the current
//     mask with GetEventMask2 and add COR_PRF_MONITOR_GC with SetEventMask2.
//   * HandleCreated / HandleDestroyed: keep a table of live GC handles (GCHandleID -> the ObjectID
//     the handle was created for).  The table is only bookkeeping; nothing is asked of the runtime.
//   * GarbageCollectionStarted: counts the GC, which generations it collects (generationCollected[]
//     indexed by COR_PRF_GC_GENERATION) and whether it was induced, and opens a fresh root census.
//   * RootReferences2: adds every root to the census of the current GC -- by kind
//     (COR_PRF_GC_ROOT_STACK / FINALIZER / HANDLE / OTHER), by flag (PINNING, WEAKREF, INTERIOR,
//     REFCOUNTED), null roots, stack roots in unnamed CLR-internal functions (root id 0), and
//     whether a handle root's id is one of the live handles from the table.  It also keeps, for
//     pinned roots, how many distinct classes are pinned.
//   * FinalizeableObjectQueued: counts objects queued for finalization, and critical finalizers.
//   * GarbageCollectionFinished: closes the census of that GC (a census per GC is kept), together
//     with the number of live handles at that point.
//   * Shutdown: prints one stderr line starting "handle_root_tracker:" and releases the info
//     interface.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
// -----------------------------------------------------------------------------------------
//   ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer."
//   ICorProfilerInfo5::SetEventMask2: "Typically, you call the GetEventMask2 method to determine
//     which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh values and any
//     new bits you want to set, and then call the SetEventMask2 method."
//   COR_PRF_MONITOR: COR_PRF_MONITOR_GC "Controls the GarbageCollectionStarted,
//     GarbageCollectionFinished, MovedReferences, MovedReferences2, SurvivingReferences,
//     SurvivingReferences2, ObjectReferences, ObjectsAllocatedByClass, RootReferences,
//     RootReferences2, HandleCreated, HandleDestroyed, and FinalizeableObjectQueued callbacks".
//   ICorProfilerCallback2::GarbageCollectionStarted: generationCollected is "An array of Boolean
//     values, which are true if the generation that corresponds to the array index is being
//     collected by this garbage collection"; "The array is indexed by a value of the
//     COR_PRF_GC_GENERATION enumeration".  "All callbacks that pertain to this garbage collection
//     will occur between the GarbageCollectionStarted callback and the corresponding
//     ICorProfilerCallback2::GarbageCollectionFinished callback. These callbacks need not occur on
//     the same thread."
//   ICorProfilerCallback2::RootReferences2: "The rootRefIds, rootKinds, rootFlags, and rootIds
//     arrays are parallel arrays."  "It is possible for entries in rootRefIds to be zero, which
//     implies that the corresponding root reference is null".  rootIds: "If the type of the root is
//     a stack, the root ID is for the function that contains the variable. If that root ID is 0,
//     the function is an unnamed function that is internal to the CLR. If the type of the root is a
//     handle, the root ID is for the garbage collection handle. For the other root types, the ID is
//     an opaque value and should be ignored."  "Profilers will normally implement one method or the
//     other, but not both" (only RootReferences2 is implemented).
//   COR_PRF_GC_ROOT_FLAGS: "COR_PRF_GC_ROOT_FLAGS is a bitmask"; roots that are not special get 0.
//   COR_PRF_FINALIZER_FLAGS: COR_PRF_FINALIZER_CRITICAL = 0x1 "The finalizer is critical."
//   ICorProfilerCallback2::GarbageCollectionFinished: "It is safe for the profiler to inspect
//     objects in their final locations when the GarbageCollectionFinished method is called."
//   Profiling Overview, Notification Threads: "these callbacks are not serialized. Users must
//     protect their code by creating thread-safe data structures".
//   ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
//
// Ambiguities met
// ---------------
//   * The COR_PRF_GC_GENERATION page lists generations 0..3 (3 = large object heap) but
//     cGenerations is a count given at run time; newer runtimes may pass more entries (a pinned
//     object heap).  Every index the runtime passes is counted, up to kMaxGenerations.
//   * RootReferences2 says the root id of a handle root "is for the garbage collection handle" but
//     not that it equals the GCHandleID given to HandleCreated; the tracker assumes so and reports
//     how many handle roots matched a live handle and how many did not (handles created by the
//     runtime before the profiler was loaded, or never reported, cannot match).
//   * Whether RootReferences2 reports pre-move or post-move ObjectIDs is not said; only the ids'
//     kinds/flags and nullness are used, and no ObjectID is kept across the GC.
//   * Whether HandleCreated/HandleDestroyed can arrive inside a GC, or for a handle id that is
//     later reused, is not said; the table simply overwrites/erases.
//   * Whether background (concurrent) GCs can nest an ephemeral GC between Started and Finished is
//     not said for COR_PRF_MONITOR_GC beyond "When COR_PRF_MONITOR_GC is allocated, concurrent
//     garbage collection is turned off."; the tracker keeps a depth counter and only opens/closes
//     a census at the outermost level.
#include "common.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using namespace docfix;

namespace {

// COR_PRF_GC_ROOT_KIND (documented values)
constexpr COR_PRF_GC_ROOT_KIND kRootOther = 0;
constexpr COR_PRF_GC_ROOT_KIND kRootStack = 1;
constexpr COR_PRF_GC_ROOT_KIND kRootFinalizer = 2;
constexpr COR_PRF_GC_ROOT_KIND kRootHandle = 3;
// COR_PRF_GC_ROOT_FLAGS (documented values)
constexpr COR_PRF_GC_ROOT_FLAGS kRootPinning = 0x1;
constexpr COR_PRF_GC_ROOT_FLAGS kRootWeakRef = 0x2;
constexpr COR_PRF_GC_ROOT_FLAGS kRootInterior = 0x4;
constexpr COR_PRF_GC_ROOT_FLAGS kRootRefCounted = 0x8;
// COR_PRF_FINALIZER_FLAGS
constexpr DWORD kFinalizerCritical = 0x1;
// COR_PRF_GC_REASON
constexpr COR_PRF_GC_REASON kGcInduced = 1;

constexpr int kMaxGenerations = 8;

struct Census {
    unsigned long long stack = 0, finalizer = 0, handle = 0, other = 0, unknownKind = 0;
    unsigned long long pinning = 0, weakref = 0, interior = 0, refcounted = 0;
    unsigned long long nullRoots = 0, clrInternalStack = 0;
    unsigned long long handleRootsTracked = 0, handleRootsUntracked = 0;
    unsigned long long liveHandlesAtEnd = 0;

    unsigned long long total() const { return stack + finalizer + handle + other + unknownKind; }
    void add(const Census& c) {
        stack += c.stack;
        finalizer += c.finalizer;
        handle += c.handle;
        other += c.other;
        unknownKind += c.unknownKind;
        pinning += c.pinning;
        weakref += c.weakref;
        interior += c.interior;
        refcounted += c.refcounted;
        nullRoots += c.nullRoots;
        clrInternalStack += c.clrInternalStack;
        handleRootsTracked += c.handleRootsTracked;
        handleRootsUntracked += c.handleRootsUntracked;
    }
};

}  // namespace

class HandleRootTracker : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[handle_root_tracker] QueryInterface(ICorProfilerInfo5) failed 0x%08x\n",
                         (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        DWORD low = 0, high = 0;
        hr = info_->GetEventMask2(&low, &high);
        if (failed(hr)) {
            std::fprintf(stderr, "[handle_root_tracker] GetEventMask2 failed 0x%08x\n", (unsigned)hr);
            low = 0;
            high = 0;
        }
        low |= COR_PRF_MONITOR_GC;
        hr = info_->SetEventMask2(low, high);
        if (failed(hr)) {
            std::fprintf(stderr, "[handle_root_tracker] SetEventMask2(0x%08x, 0x%08x) failed 0x%08x\n",
                         (unsigned)low, (unsigned)high, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[handle_root_tracker] initialized\n");
        return S_OK;
    }

    // ---------------------------------------------------------------------------------------
    // Handles
    // ---------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID handleId, ObjectID initialObjectId) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        std::lock_guard<std::mutex> lock(handleMutex_);
        ++handlesCreated_;
        auto inserted = liveHandles_.insert_or_assign(handleId, initialObjectId);
        if (!inserted.second) ++handlesRecreated_;
        if (initialObjectId == 0) ++handlesCreatedNull_;
        if (liveHandles_.size() > peakLiveHandles_) peakLiveHandles_ = liveHandles_.size();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID handleId) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        std::lock_guard<std::mutex> lock(handleMutex_);
        ++handlesDestroyed_;
        if (liveHandles_.erase(handleId) == 0) ++handlesDestroyedUnknown_;
        return S_OK;
    }

    // ---------------------------------------------------------------------------------------
    // Garbage collections
    // ---------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        std::lock_guard<std::mutex> lock(gcMutex_);
        if (gcDepth_++ != 0) {
            ++nestedGcs_;
            return S_OK;
        }
        ++gcsStarted_;
        if (reason == kGcInduced) ++gcsInduced_;
        if (generationCollected != nullptr) {
            if (cGenerations > maxGenerationsSeen_) maxGenerationsSeen_ = cGenerations;
            for (int g = 0; g < cGenerations && g < kMaxGenerations; ++g)
                if (generationCollected[g]) ++genCollected_[g];
        }
        current_ = Census{};
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG cRootRefs, ObjectID* rootRefIds, COR_PRF_GC_ROOT_KIND* rootKinds,
                                              COR_PRF_GC_ROOT_FLAGS* rootFlags, UINT_PTR* rootIds) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        if (cRootRefs == 0 || rootKinds == nullptr) return S_OK;

        // Tally locally first; the shared structures are locked once per batch.
        Census batch;
        std::vector<UINT_PTR> handleIds;
        std::vector<ClassID> pinnedClasses;
        for (ULONG i = 0; i < cRootRefs; ++i) {
            const ObjectID ref = rootRefIds ? rootRefIds[i] : 0;
            const COR_PRF_GC_ROOT_FLAGS flags = rootFlags ? rootFlags[i] : 0;
            const UINT_PTR id = rootIds ? rootIds[i] : 0;
            switch (rootKinds[i]) {
                case kRootStack:
                    ++batch.stack;
                    if (id == 0) ++batch.clrInternalStack;
                    break;
                case kRootFinalizer:
                    ++batch.finalizer;
                    break;
                case kRootHandle:
                    ++batch.handle;
                    handleIds.push_back(id);
                    break;
                case kRootOther:
                    ++batch.other;
                    break;
                default:
                    ++batch.unknownKind;
                    break;
            }
            if (flags & kRootPinning) ++batch.pinning;
            if (flags & kRootWeakRef) ++batch.weakref;
            if (flags & kRootInterior) ++batch.interior;
            if (flags & kRootRefCounted) ++batch.refcounted;
            if (ref == 0) {
                ++batch.nullRoots;
                continue;
            }
            if ((flags & kRootPinning) && !(flags & kRootInterior)) {
                // Pinned objects are not moved by this GC, so their ObjectIDs are taken to be stable
                // and the class is looked up right away.
                ClassID cls = 0;
                // BUG: inspects an object from inside RootReferences2.  The documentation says: "The object IDs returned by RootReferences2 are not valid during the callback itself, because the garbage collection might be in the middle of moving objects from old addresses to new addresses. Therefore, profilers should not attempt to inspect objects during a RootReferences2 call."
                HRESULT hr = info_->GetClassFromObject(ref, &cls);
                if (succeeded(hr) && cls != 0)
                    pinnedClasses.push_back(cls);
                else
                    ++pinnedClassLookupFailures_;
            }
        }

        {
            std::lock_guard<std::mutex> lock(handleMutex_);
            for (UINT_PTR h : handleIds) {
                if (liveHandles_.count(static_cast<GCHandleID>(h)) != 0)
                    ++batch.handleRootsTracked;
                else
                    ++batch.handleRootsUntracked;
            }
        }
        std::lock_guard<std::mutex> lock(gcMutex_);
        current_.add(batch);
        for (ClassID c : pinnedClasses) pinnedClassSet_.insert(c);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD finalizerFlags, ObjectID) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        ++finalizeQueued_;
        if (finalizerFlags & kFinalizerCritical) ++finalizeCritical_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        unsigned long long live = 0;
        {
            std::lock_guard<std::mutex> lock(handleMutex_);
            live = liveHandles_.size();
        }
        std::lock_guard<std::mutex> lock(gcMutex_);
        if (gcDepth_ == 0) {
            ++unmatchedFinishes_;
            return S_OK;
        }
        if (--gcDepth_ != 0) return S_OK;
        ++gcsFinished_;
        current_.liveHandlesAtEnd = live;
        censuses_.push_back(current_);
        totals_.add(current_);
        current_ = Census{};
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        for (int i = 0; i < 2000 && active_.load() != 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));

        unsigned long long created = 0, destroyed = 0, destroyedUnknown = 0, recreated = 0, createdNull = 0;
        unsigned long long live = 0, peak = 0;
        {
            std::lock_guard<std::mutex> lock(handleMutex_);
            created = handlesCreated_;
            destroyed = handlesDestroyed_;
            destroyedUnknown = handlesDestroyedUnknown_;
            recreated = handlesRecreated_;
            createdNull = handlesCreatedNull_;
            live = liveHandles_.size();
            peak = peakLiveHandles_;
        }
        std::lock_guard<std::mutex> lock(gcMutex_);
        Census last = censuses_.empty() ? Census{} : censuses_.back();
        std::fprintf(stderr,
                     "handle_root_tracker: gcs_started=%llu gcs_finished=%llu induced=%llu nested=%llu "
                     "gen0=%llu gen1=%llu gen2=%llu loh=%llu gen4=%llu max_generations=%d "
                     "handles_created=%llu handles_created_null=%llu handles_recreated=%llu "
                     "handles_destroyed=%llu handles_destroyed_unknown=%llu handles_live=%llu handles_peak=%llu "
                     "roots=%llu stack=%llu stack_clr_internal=%llu finalizer=%llu handle=%llu other=%llu "
                     "unknown_kind=%llu pinning=%llu weakref=%llu interior=%llu refcounted=%llu null_roots=%llu "
                     "handle_roots_tracked=%llu handle_roots_untracked=%llu pinned_classes=%zu "
                     "pinned_class_lookup_failures=%llu finalizable_queued=%llu finalizable_critical=%llu "
                     "censuses=%zu last_census_roots=%llu last_census_live_handles=%llu\n",
                     gcsStarted_, gcsFinished_, gcsInduced_, nestedGcs_, genCollected_[0], genCollected_[1],
                     genCollected_[2], genCollected_[3], genCollected_[4], maxGenerationsSeen_, created, createdNull,
                     recreated, destroyed, destroyedUnknown, live, peak, totals_.total(), totals_.stack,
                     totals_.clrInternalStack, totals_.finalizer, totals_.handle, totals_.other, totals_.unknownKind,
                     totals_.pinning, totals_.weakref, totals_.interior, totals_.refcounted, totals_.nullRoots,
                     totals_.handleRootsTracked, totals_.handleRootsUntracked, pinnedClassSet_.size(),
                     pinnedClassLookupFailures_.load(), finalizeQueued_.load(), finalizeCritical_.load(),
                     censuses_.size(), last.total(), last.liveHandlesAtEnd);
        if (active_.load() == 0 && info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    class InFlight {
    public:
        explicit InFlight(HandleRootTracker& p) : p_(p) {
            p_.active_.fetch_add(1);
            entered_ = !p_.shutdown_.load() && p_.info_ != nullptr;
        }
        ~InFlight() { p_.active_.fetch_sub(1); }
        bool entered() const { return entered_; }

    private:
        HandleRootTracker& p_;
        bool entered_ = false;
    };

    ICorProfilerInfo5* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<int> active_{0};

    // Live handle table.
    std::mutex handleMutex_;
    std::unordered_map<GCHandleID, ObjectID> liveHandles_;
    unsigned long long handlesCreated_ = 0, handlesDestroyed_ = 0, handlesDestroyedUnknown_ = 0;
    unsigned long long handlesRecreated_ = 0, handlesCreatedNull_ = 0, peakLiveHandles_ = 0;

    // GC state and root censuses.
    std::mutex gcMutex_;
    int gcDepth_ = 0;
    int maxGenerationsSeen_ = 0;
    unsigned long long gcsStarted_ = 0, gcsFinished_ = 0, gcsInduced_ = 0, nestedGcs_ = 0, unmatchedFinishes_ = 0;
    unsigned long long genCollected_[kMaxGenerations] = {};
    Census current_;
    Census totals_;
    std::vector<Census> censuses_;
    std::unordered_set<ClassID> pinnedClassSet_;
    std::atomic<unsigned long long> pinnedClassLookupFailures_{0};

    std::atomic<unsigned long long> finalizeQueued_{0}, finalizeCritical_{0};
};

DOCFIX_DEFINE_PROFILER(HandleRootTracker)
