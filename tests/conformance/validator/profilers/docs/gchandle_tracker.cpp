// gchandle_tracker.cpp -- a GC handle and weak-reference tracker (the CORRECT profiler of this area).
//
// What it does
// ------------
//  * Keeps a table of every GC handle the runtime reports through ICorProfilerCallback2::HandleCreated /
//    HandleDestroyed (enabled by COR_PRF_MONITOR_GC).  For each handle it records the object it was created
//    with, that object's class, and that object's generation AT CREATION TIME -- only when no garbage
//    collection is in progress (GetObjectGeneration's documented restriction).
//  * On every GC it collects RootReferences2 (root kinds and flags) and, when the runtime delivers it,
//    ICorProfilerCallback5::ConditionalWeakTableElementReferences (dependent-handle key/value pairs).  The
//    ObjectIDs given there are never inspected inside those callbacks; they are inspected in
//    GarbageCollectionFinished (class of each handle's target, per root flag: strong / weak / pinned /
//    refcounted), and their generations are read only after the GC has finished, from the first ordinary
//    callback that runs before the next GC starts (the "post-GC sweep").
//  * On runtimes that implement ICorProfilerInfo13 (CreateHandle / DestroyHandle / GetObjectIDFromHandle),
//    it samples a few freshly allocated objects from ObjectAllocated and wraps them in its own handles
//    (rotating weak / weak / strong / pinned, never more than kMaxOwnHandles alive at once, far below the
//    documented 4096 advice).  After each GC the sweep reads every own handle back with
//    GetObjectIDFromHandle: a weak handle whose object is gone reads back null and is destroyed; strong and
//    pinned handles are checked (object still there, class unchanged, pinned object did not move) and
//    released after kKeepGcs collections; generations show promotion over time.
//  * Prints a short summary to stderr at Shutdown (no ICorProfilerInfo call is made there).
//
// Interfaces declared here that the kit lacks: none (COR_PRF_GC_ROOT_*, COR_PRF_HANDLE_TYPE_* and
// COR_PRF_GC_GEN_* values are declared below from the documented enumerations).  ICorProfilerInfo13's
// ObjectHandleID is declared by the kit as void*, as in corprof.idl.
//
// Documentation followed (learn.microsoft.com, unmanaged profiling API), quoted:
//  * "Garbage Collection in the Profiling API": "When the user specifies the COR_PRF_MONITOR_GC flag, all
//    garbage collection events except for ICorProfilerCallback::ObjectAllocated events will be raised in
//    the profiler. ObjectAllocated events are explicitly controlled by the COR_PRF_MONITOR_OBJECT_ALLOCATED
//    flag for performance reasons."  -> mask = COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED |
//    COR_PRF_ENABLE_OBJECT_ALLOCATED, set in Initialize ("The Initialize call is the only opportunity to
//    enable (or disable) callbacks that are immutable.").
//  * HandleCreated: "Notifies the code profiler that a garbage collection handle has been created."
//    initialObjectId: "The ID of the object for which the garbage collection handle was created."
//    HandleDestroyed: "Notifies the code profiler that a garbage collection handle has been destroyed."
//  * GetObjectGeneration: "The GetObjectGeneration method may be called from any profiler callback, provided
//    that garbage collection is not in progress. That is, it may be called from any callback except those
//    that occur between ICorProfilerCallback2::GarbageCollectionStarted and
//    ICorProfilerCallback2::GarbageCollectionFinished."  -> never called from GarbageCollectionStarted ..
//    GarbageCollectionFinished (both inclusive, the conservative reading), nor while a GC is in progress.
//  * GarbageCollectionStarted: "After the profiler has returned from this callback, the profiler should
//    consider all object IDs to be invalid until it receives a ICorProfilerCallback2::GarbageCollectionFinished
//    callback."  -> every ObjectID kept across a GC is treated as stale; only IDs reported during the GC
//    (roots, CWT pairs) or read back from our own handles are inspected afterwards.
//  * RootReferences2: "The rootRefIds, rootKinds, rootFlags, and rootIds arrays are parallel arrays";
//    "If the type of the root is a handle, the root ID is for the garbage collection handle. For the other
//    root types, the ID is an opaque value and should be ignored."; "An entry in rootRefIds can be zero,
//    which implies that the corresponding root reference is null"; "the object IDs returned by
//    RootReferences2 are not valid during the callback itself ... profilers should not attempt to inspect
//    objects during a RootReferences2 call. When ICorProfilerCallback2::GarbageCollectionFinished is called,
//    all objects have been moved to their new locations and can be safely inspected."
//  * COR_PRF_GC_ROOT_FLAGS: PINNING "The root prevents a garbage collection from moving the object.",
//    WEAKREF "The root does not prevent garbage collection.", INTERIOR "The root refers to a field of the
//    object rather than the object itself." (INTERIOR roots are never handed to GetClassFromObject),
//    REFCOUNTED "The root prevents garbage collection if the reference count of the object is a certain
//    value."; "send 0 for the flags bitmask, indicating that all flags are turned off".
//  * ConditionalWeakTableElementReferences: "(keyRefIds[i] keeps valueRefIds[i] alive.)"; "None of the
//    ObjectID values returned by the ConditionalWeakTableElementReferences method are valid during the
//    callback itself ... At GarbageCollectionFinished, all objects have been moved to their new locations
//    and inspection may be done."  ICorProfilerCallback5 "must be implemented by a managed memory profiler
//    to subscribe to the notifications related to dependent handles" (CallbackBase answers QI for it).
//  * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final locations
//    when the GarbageCollectionFinished method is called."
//  * ICorProfilerInfo13::CreateHandle: "To ensure that the object reference is valid, this method has to be
//    called from a ICorProfilerCallback method such as ICorProfilerCallback::ObjectAllocated."; "Do not
//    forget to call ICorProfilerInfo13::DestroyHandle once a created handle is no longer needed. It is
//    recommended to have less than 4096 handles allocated at the same time".  COR_PRF_HANDLE_TYPE_WEAK "does
//    not act as a root"; STRONG "The object will stay alive"; PINNED "prevent the object from moving".
//  * GetObjectIDFromHandle: "If *pObject is null, the object wrapped by this handle is no longer alive and
//    has been collected."  DestroyHandle: "Once destroyed, a handle can no longer be used." (the handle is
//    dropped from the table before/as it is destroyed and never read again).
//  * ObjectAllocated: "The classId parameter can refer to a class in managed code that has not been loaded
//    yet." (class names are resolved lazily, outside GC, through GetClassIDInfo2 / IsArrayClass /
//    GetModuleMetaData).
//  * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an S_OK
//    HRESULT ... Otherwise, it returns S_FALSE."
//  * Caller-Allocated Buffers: "If InfoBuffer is null, cBufferSizeStart must be 0." (GetClassIDInfo2 is
//    called with 0/nullptr for the type arguments; GetTypeDefProps/GetRuntimeInformation are retried with a
//    larger buffer when pcBufferMax exceeds the size given).
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//    Shutdown method is called." -> the summary uses only data already gathered; own handles still alive
//    then are reported, not destroyed.
//
// Threading: callbacks arrive on many threads.  One mutex guards the tables, and it is NEVER held across
// CreateHandle/DestroyHandle (they raise HandleCreated/HandleDestroyed on the calling thread) nor across any
// other ICorProfilerInfo call outside the GC callbacks.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// COR_PRF_GC_ROOT_KIND
constexpr COR_PRF_GC_ROOT_KIND kRootOther = 0, kRootStack = 1, kRootFinalizer = 2, kRootHandle = 3;
// COR_PRF_GC_ROOT_FLAGS
constexpr COR_PRF_GC_ROOT_FLAGS kRootPinning = 0x1, kRootWeakRef = 0x2, kRootInterior = 0x4, kRootRefCounted = 0x8;
// COR_PRF_HANDLE_TYPE
constexpr std::int32_t kHandleWeak = 0x1, kHandleStrong = 0x2, kHandlePinned = 0x3;
// COR_PRF_GC_GENERATION: 0,1,2, LOH=3, POH=4
constexpr int kGenSlots = 6;  // 0..4 plus "unknown"
const char* const kGenNames[kGenSlots] = {"gen0", "gen1", "gen2", "loh", "poh", "?"};

constexpr unsigned kSampleEvery = 1500;   // wrap one allocation out of this many in an own handle
constexpr size_t kMaxOwnHandles = 48;     // far below the documented 4096 advice
constexpr unsigned kKeepGcs = 3;          // strong/pinned own handles are released after this many GCs
constexpr size_t kMaxSweepGens = 512;     // generation look-ups per post-GC sweep
constexpr size_t kMaxNamesPerCall = 8;    // class-name resolutions per ordinary callback

enum Strength { kStrong = 0, kWeak = 1, kPinned = 2, kRefCounted = 3, kStrengthCount = 4 };
const char* const kStrengthNames[kStrengthCount] = {"strong", "weak", "pinned", "refcounted"};

Strength strength_of(COR_PRF_GC_ROOT_FLAGS f) {
    if (f & kRootWeakRef) return kWeak;
    if (f & kRootPinning) return kPinned;
    if (f & kRootRefCounted) return kRefCounted;
    return kStrong;
}

int gen_slot(HRESULT hr, const COR_PRF_GC_GENERATION_RANGE& r) {
    if (failed(hr)) return kGenSlots - 1;
    if (r.generation >= 0 && r.generation <= 4) return r.generation;
    return kGenSlots - 1;
}

struct HandleRec {
    ObjectID initial = 0;       // as reported by HandleCreated (stale after the next GC; never inspected again)
    ClassID initial_class = 0;
    int gen_at_create = kGenSlots - 1;
    ObjectID last_target = 0;   // from the newest GC's RootReferences2 (valid until the next GC starts)
    ClassID last_class = 0;
    COR_PRF_GC_ROOT_FLAGS last_flags = 0;
    std::uint64_t last_gc = 0;  // GC number in which it was last reported as a root
    bool own = false;
};

struct OwnHandle {
    void* handle = nullptr;
    std::int32_t type = 0;
    ClassID cls = 0;
    ObjectID last_obj = 0;      // as of the last sweep (read from the handle, so fresh at that time)
    int gen_at_create = kGenSlots - 1;
    int max_gen = -1;
    unsigned gcs_survived = 0;
};

struct RootSeen {
    GCHandleID handle;
    ObjectID target;
    COR_PRF_GC_ROOT_FLAGS flags;
};

struct CwtSeen {
    GCHandleID handle;
    ObjectID key;
    ObjectID value;
};

thread_local int t_own_call = 0;  // >0 while this thread is inside our own CreateHandle/DestroyHandle

}  // namespace

class GcHandleTracker : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[gchandles] QueryInterface(ICorProfilerInfo3) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return E_FAIL;
        }
        // ICorProfilerInfo13 exists only on .NET 7+; without it the own-handle part is simply off.
        // GCHANDLES_NO_OWN=1 turns the own-handle sampling off (plain observation of the runtime's handles).
        if (std::getenv("GCHANDLES_NO_OWN") != nullptr ||
            failed(unk->QueryInterface(IID_ICorProfilerInfo13, reinterpret_cast<void**>(&info13_))))
            info13_ = nullptr;

        runtime_ = runtime_string();
        verbose_ = std::getenv("GCHANDLES_VERBOSE") != nullptr;
        DWORD mask = COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[gchandles] SetEventMask(0x%08x) failed 0x%08x\n", (unsigned)mask, (unsigned)hr);
            if (info13_) info13_->Release();
            info_->Release();
            info_ = nullptr;
            info13_ = nullptr;
            return E_FAIL;
        }
        std::fprintf(stderr, "[gchandles] initialized on %s, ICorProfilerInfo13 %s\n", runtime_.c_str(),
                     info13_ ? "present (own handles on)" : "absent (own handles off)");
        return S_OK;
    }

    // ---------------------------------------------------------------- handles reported by the runtime
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID handleId, ObjectID initialObjectId) override {
        if (shutdown_.load()) return S_OK;
        HandleRec rec;
        rec.initial = initialObjectId;
        rec.own = t_own_call > 0;
        const bool in_gc = gc_in_progress_.load();
        if (initialObjectId != 0 && !in_gc) {
            // The object the handle was just created for: inspected inside this callback only.
            ClassID cls = 0;
            if (succeeded(info_->GetClassFromObject(initialObjectId, &cls))) rec.initial_class = cls;
            COR_PRF_GC_GENERATION_RANGE range{};
            rec.gen_at_create = gen_slot(info_->GetObjectGeneration(initialObjectId, &range), range);
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++created_;
            if (rec.own) ++own_seen_in_created_;
            if (initialObjectId == 0) ++created_null_;
            else if (in_gc) ++created_during_gc_;
            else {
                ++gen_at_create_[rec.gen_at_create];
                if (rec.initial_class) {
                    ++initial_classes_[rec.initial_class];
                    note_class_locked(rec.initial_class);
                }
            }
            auto it = handles_.find(handleId);
            if (it != handles_.end()) ++created_reused_id_;  // an ID reported created twice without destroy
            handles_[handleId] = rec;
            peak_live_ = std::max<std::uint64_t>(peak_live_, handles_.size());
        }
        ordinary_callback();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID handleId) override {
        if (shutdown_.load()) return S_OK;
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++destroyed_;
            auto it = handles_.find(handleId);
            if (it == handles_.end()) {
                ++destroyed_unknown_;  // created before we were loaded, or never reported
            } else {
                if (it->second.last_gc != 0) ++destroyed_after_gc_;
                handles_.erase(it);
            }
        }
        ordinary_callback();
        return S_OK;
    }

    // ---------------------------------------------------------------- allocations: own handles, sweeps
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        if (shutdown_.load()) return S_OK;
        ordinary_callback();
        if (info13_ == nullptr || objectId == 0) return S_OK;
        unsigned n = ++alloc_count_;
        if (n % kSampleEvery != 0) return S_OK;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (own_.size() + own_pending_ >= kMaxOwnHandles) return S_OK;
            ++own_pending_;  // reserve a slot; the lock is NOT held across CreateHandle
        }
        static const std::int32_t rotation[4] = {kHandleWeak, kHandleWeak, kHandleStrong, kHandlePinned};
        OwnHandle oh;
        oh.type = rotation[(n / kSampleEvery) % 4];
        oh.cls = classId;
        oh.last_obj = objectId;
        COR_PRF_GC_GENERATION_RANGE range{};
        oh.gen_at_create = gen_slot(info_->GetObjectGeneration(objectId, &range), range);
        oh.max_gen = oh.gen_at_create < 5 ? oh.gen_at_create : -1;
        ++t_own_call;
        HRESULT hr = info13_->CreateHandle(objectId, oh.type, &oh.handle);  // raises HandleCreated on this thread
        --t_own_call;
        std::lock_guard<std::mutex> lock(mu_);
        --own_pending_;
        if (failed(hr) || oh.handle == nullptr) {
            ++own_create_failed_;
            last_own_error_ = hr;
            return S_OK;
        }
        ++own_created_[oh.type];
        ++own_gen_at_create_[oh.gen_at_create];
        note_class_locked(classId);
        auto it = handles_.find(reinterpret_cast<GCHandleID>(oh.handle));
        if (it != handles_.end() && it->second.own) ++own_id_matches_;
        own_.push_back(oh);
        return S_OK;
    }

    // ---------------------------------------------------------------- GC callbacks: record, never inspect
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        gc_in_progress_.store(true);
        std::lock_guard<std::mutex> lock(mu_);
        ++gc_number_;
        int maxgen = -1;  // highest of gen0..gen2 collected (LOH/POH entries are collected with gen2)
        for (int g = 0; g < cGenerations && g <= 2 && generationCollected != nullptr; ++g)
            if (generationCollected[g]) maxgen = g;
        if (maxgen >= 0) ++gcs_by_gen_[maxgen];
        if (reason == 1) ++gcs_induced_;  // COR_PRF_GC_INDUCED
        cur_roots_.clear();
        cur_cwt_.clear();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG cRootRefs, ObjectID* rootRefIds, COR_PRF_GC_ROOT_KIND* rootKinds,
                                              COR_PRF_GC_ROOT_FLAGS* rootFlags, UINT_PTR* rootIds) override {
        if (shutdown_.load() || cRootRefs == 0 || rootRefIds == nullptr || rootKinds == nullptr) return S_OK;
        std::lock_guard<std::mutex> lock(mu_);
        ++root_batches_;
        for (ULONG i = 0; i < cRootRefs; ++i) {
            COR_PRF_GC_ROOT_KIND kind = rootKinds[i];
            COR_PRF_GC_ROOT_FLAGS flags = rootFlags ? rootFlags[i] : 0;
            ++roots_total_;
            switch (kind) {
                case kRootStack: ++roots_stack_; break;
                case kRootFinalizer: ++roots_finalizer_; break;
                case kRootHandle: ++roots_handle_; break;
                default: ++roots_other_; break;
            }
            if (flags & kRootPinning) ++flag_pinning_;
            if (flags & kRootWeakRef) ++flag_weak_;
            if (flags & kRootInterior) ++flag_interior_;
            if (flags & kRootRefCounted) ++flag_refcounted_;
            if (flags & ~(kRootPinning | kRootWeakRef | kRootInterior | kRootRefCounted)) ++flag_undocumented_;
            if (kind != kRootHandle) continue;  // other kinds: rootIds is a function or an opaque value
            GCHandleID h = rootIds ? static_cast<GCHandleID>(rootIds[i]) : 0;
            cur_roots_.push_back(RootSeen{h, rootRefIds[i], flags});  // ObjectID kept, not inspected here
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ConditionalWeakTableElementReferences(ULONG cRootRefs, ObjectID* keyRefIds,
                                                                    ObjectID* valueRefIds, GCHandleID* rootIds) override {
        if (shutdown_.load() || cRootRefs == 0 || keyRefIds == nullptr || valueRefIds == nullptr) return S_OK;
        std::lock_guard<std::mutex> lock(mu_);
        ++cwt_batches_;
        for (ULONG i = 0; i < cRootRefs; ++i)
            cur_cwt_.push_back(CwtSeen{rootIds ? rootIds[i] : 0, keyRefIds[i], valueRefIds[i]});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        {
            std::lock_guard<std::mutex> lock(mu_);
            // "all objects have been moved to their new locations and can be safely inspected"
            for (const RootSeen& r : cur_roots_) {
                Strength s = strength_of(r.flags);
                ++handle_roots_by_strength_[s];
                auto it = handles_.find(r.handle);
                if (it == handles_.end()) ++handle_roots_unknown_;
                else ++handle_roots_known_;
                if (r.target == 0) {
                    ++handle_roots_null_[s];
                    if (it != handles_.end()) {
                        it->second.last_target = 0;
                        it->second.last_flags = r.flags;
                        it->second.last_gc = gc_number_;
                    }
                    continue;
                }
                ClassID cls = 0;
                if (!(r.flags & kRootInterior) && succeeded(info_->GetClassFromObject(r.target, &cls)) && cls != 0) {
                    ++target_classes_[s][cls];
                    note_class_locked(cls);
                } else {
                    ++target_class_failed_;
                }
                if (it != handles_.end()) {
                    if (it->second.initial_class != 0 && cls != 0 && cls != it->second.initial_class)
                        ++target_changed_class_;  // the handle now holds another object than it was created with
                    it->second.last_target = r.target;
                    it->second.last_class = cls;
                    it->second.last_flags = r.flags;
                    it->second.last_gc = gc_number_;
                }
            }
            if (!cur_cwt_.empty()) ++gcs_with_cwt_;
            for (const CwtSeen& c : cur_cwt_) {
                ++cwt_pairs_;
                if (c.key == 0 || c.value == 0) { ++cwt_null_; continue; }
                ClassID kc = 0, vc = 0;
                if (succeeded(info_->GetClassFromObject(c.key, &kc))) { ++cwt_key_classes_[kc]; note_class_locked(kc); }
                if (succeeded(info_->GetClassFromObject(c.value, &vc))) { ++cwt_value_classes_[vc]; note_class_locked(vc); }
                if (handles_.count(c.handle)) ++cwt_handle_known_;
            }
            // Targets for the post-GC sweep (generations are read outside the GC; IDs stay valid until the
            // next GarbageCollectionStarted).
            sweep_targets_.clear();
            for (const RootSeen& r : cur_roots_)
                if (r.target != 0 && !(r.flags & kRootInterior) && sweep_targets_.size() < kMaxSweepGens)
                    sweep_targets_.push_back(RootSeen{r.handle, r.target, r.flags});
            cur_roots_.clear();
            cur_cwt_.clear();
            finished_gc_ = gc_number_;
        }
        gc_in_progress_.store(false);
        return S_OK;
    }

    // ---------------------------------------------------------------- summary
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> lock(mu_);
        std::fprintf(stderr, "[gchandles] summary (%s): gcs=%llu (gen0=%llu gen1=%llu gen2=%llu induced=%llu)\n",
                     runtime_.c_str(), ull(gc_number_), ull(gcs_by_gen_[0]), ull(gcs_by_gen_[1]), ull(gcs_by_gen_[2]),
                     ull(gcs_induced_));
        std::fprintf(stderr,
                     "[gchandles] handles: created=%llu destroyed=%llu live=%zu peak=%llu null-initial=%llu "
                     "created-during-gc=%llu destroyed-unknown=%llu reused-id=%llu\n",
                     ull(created_), ull(destroyed_), handles_.size(), ull(peak_live_), ull(created_null_),
                     ull(created_during_gc_), ull(destroyed_unknown_), ull(created_reused_id_));
        std::fprintf(stderr, "[gchandles] generation at creation: %s\n", gen_hist(gen_at_create_).c_str());
        std::fprintf(stderr, "[gchandles] initial-object classes: %s\n", top_classes(initial_classes_).c_str());
        std::fprintf(stderr,
                     "[gchandles] roots: total=%llu stack=%llu finalizer=%llu handle=%llu other=%llu | flags "
                     "pinning=%llu weakref=%llu interior=%llu refcounted=%llu undocumented=%llu\n",
                     ull(roots_total_), ull(roots_stack_), ull(roots_finalizer_), ull(roots_handle_), ull(roots_other_),
                     ull(flag_pinning_), ull(flag_weak_), ull(flag_interior_), ull(flag_refcounted_),
                     ull(flag_undocumented_));
        std::string by;
        for (int s = 0; s < kStrengthCount; ++s) {
            char b[96];
            std::snprintf(b, sizeof b, "%s%s=%llu(null %llu)", s ? " " : "", kStrengthNames[s],
                          ull(handle_roots_by_strength_[s]), ull(handle_roots_null_[s]));
            by += b;
        }
        std::fprintf(stderr,
                     "[gchandles] handle targets after GC: %s | matched=%llu unmatched=%llu class-changed=%llu "
                     "uninspectable=%llu\n",
                     by.c_str(), ull(handle_roots_known_), ull(handle_roots_unknown_), ull(target_changed_class_),
                     ull(target_class_failed_));
        for (int s = 0; s < kStrengthCount; ++s)
            if (!target_classes_[s].empty())
                std::fprintf(stderr, "[gchandles]   %s targets: %s\n", kStrengthNames[s],
                             top_classes(target_classes_[s]).c_str());
        std::fprintf(stderr, "[gchandles] handle-target generation after GC (%llu sweeps): %s\n", ull(sweeps_),
                     gen_hist(sweep_gens_).c_str());
        std::fprintf(stderr, "[gchandles] cwt: gcs-with-pairs=%llu batches=%llu pairs=%llu null=%llu known-handle=%llu%s%s\n",
                     ull(gcs_with_cwt_), ull(cwt_batches_), ull(cwt_pairs_), ull(cwt_null_), ull(cwt_handle_known_),
                     cwt_key_classes_.empty() ? "" : " keys: ", cwt_key_classes_.empty() ? "" : top_classes(cwt_key_classes_).c_str());
        if (info13_ != nullptr) {
            std::fprintf(stderr,
                         "[gchandles] own handles: created weak=%llu strong=%llu pinned=%llu failed=%llu "
                         "seen-in-HandleCreated=%llu id-match=%llu | weak-collected=%llu released=%llu "
                         "live-at-shutdown=%zu | pinned-moved=%llu strong-lost=%llu class-mismatch=%llu promoted=%llu "
                         "read-errors=%llu\n",
                         ull(own_created_[kHandleWeak]), ull(own_created_[kHandleStrong]),
                         ull(own_created_[kHandlePinned]), ull(own_create_failed_), ull(own_seen_in_created_),
                         ull(own_id_matches_), ull(own_weak_collected_), ull(own_released_), own_.size(),
                         ull(own_pinned_moved_), ull(own_strong_lost_), ull(own_class_mismatch_), ull(own_promoted_),
                         ull(own_read_errors_));
            std::fprintf(stderr, "[gchandles] own-handle object generation at creation: %s\n",
                         gen_hist(own_gen_at_create_).c_str());
        } else {
            std::fprintf(stderr, "[gchandles] own handles: not available (no ICorProfilerInfo13)\n");
        }
        // The only thing done with the info pointers in Shutdown is the final IUnknown::Release.
        if (info13_ != nullptr) { info13_->Release(); info13_ = nullptr; }
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    static unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

    // Called from ordinary (non-GC) callbacks: post-GC sweep once per finished GC, and lazy name resolution.
    void ordinary_callback() {
        // Not from inside our own CreateHandle/DestroyHandle (nested HandleCreated/HandleDestroyed).
        if (gc_in_progress_.load() || t_own_call > 0) return;
        post_gc_sweep();
        resolve_some_names();
    }

    void post_gc_sweep() {
        std::uint64_t fin;
        std::vector<RootSeen> targets;
        std::vector<OwnHandle> own;
        {
            std::lock_guard<std::mutex> lock(mu_);
            fin = finished_gc_;
            if (fin == 0 || fin == swept_gc_ || gc_number_ != fin) return;  // nothing new, or a GC is under way
            swept_gc_ = fin;
            ++sweeps_;
            targets.swap(sweep_targets_);
            own = own_;  // copy; own handles are only removed by this sweep (serialised by swept_gc_)
        }
        // 1. generations of the handle targets reported by the GC that just finished
        int hist[kGenSlots] = {};
        for (const RootSeen& r : targets) {
            if (gc_in_progress_.load()) break;  // a new GC started: those IDs are no longer valid
            COR_PRF_GC_GENERATION_RANGE range{};
            ++hist[gen_slot(info_->GetObjectGeneration(r.target, &range), range)];
        }
        // 2. own handles: read them back
        std::vector<void*> to_destroy;
        std::vector<OwnHandle> keep;
        std::uint64_t collected = 0, released = 0, moved = 0, lost = 0, mismatch = 0, promoted = 0, errors = 0;
        for (OwnHandle oh : own) {
            ObjectID obj = 0;
            HRESULT hr = info13_ ? info13_->GetObjectIDFromHandle(oh.handle, &obj) : E_FAIL;
            if (failed(hr)) { ++errors; keep.push_back(oh); continue; }
            if (obj == 0) {
                // "the object wrapped by this handle is no longer alive and has been collected"
                if (oh.type == kHandleWeak) ++collected; else ++lost;
                to_destroy.push_back(oh.handle);
                continue;
            }
            if (oh.type == kHandlePinned && obj != oh.last_obj) ++moved;
            ClassID cls = 0;
            if (succeeded(info_->GetClassFromObject(obj, &cls)) && cls != oh.cls) ++mismatch;
            COR_PRF_GC_GENERATION_RANGE range{};
            int g = gen_slot(info_->GetObjectGeneration(obj, &range), range);
            if (g < 5 && g > oh.max_gen) { if (oh.max_gen >= 0) ++promoted; oh.max_gen = g; }
            oh.last_obj = obj;
            ++oh.gcs_survived;
            if (oh.type != kHandleWeak && oh.gcs_survived >= kKeepGcs) {
                ++released;
                to_destroy.push_back(oh.handle);
                continue;
            }
            keep.push_back(oh);
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (int i = 0; i < kGenSlots; ++i) sweep_gens_[i] += hist[i];
            if (verbose_) {
                std::uint64_t h[kGenSlots];
                for (int i = 0; i < kGenSlots; ++i) h[i] = (std::uint64_t)hist[i];
                std::fprintf(stderr, "[gchandles] after gc#%llu: %zu handle targets: %s\n", ull(fin), targets.size(),
                             gen_hist(h).c_str());
            }
            // own_ may have grown meanwhile (ObjectAllocated on other threads): keep the new ones too.
            std::vector<OwnHandle> merged = keep;
            for (const OwnHandle& cur : own_) {
                bool was_swept = false;
                for (const OwnHandle& o : own)
                    if (o.handle == cur.handle) { was_swept = true; break; }
                if (!was_swept) merged.push_back(cur);
            }
            own_.swap(merged);
            own_weak_collected_ += collected;
            own_released_ += released;
            own_pinned_moved_ += moved;
            own_strong_lost_ += lost;
            own_class_mismatch_ += mismatch;
            own_promoted_ += promoted;
            own_read_errors_ += errors;
        }
        // DestroyHandle raises HandleDestroyed on this thread: the lock is not held here.
        for (void* h : to_destroy) {
            ++t_own_call;
            info13_->DestroyHandle(h);
            --t_own_call;
        }
    }

    void note_class_locked(ClassID cls) {
        if (cls != 0 && names_.find(cls) == names_.end()) pending_names_.insert(cls);
    }

    void resolve_some_names() {
        std::vector<ClassID> todo;
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (auto it = pending_names_.begin(); it != pending_names_.end() && todo.size() < kMaxNamesPerCall;) {
                todo.push_back(*it);
                it = pending_names_.erase(it);
            }
        }
        if (todo.empty()) return;
        std::vector<std::pair<ClassID, std::string>> done;
        for (ClassID c : todo) done.emplace_back(c, class_name(c, 0));
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& d : done) names_[d.first] = d.second;
    }

    std::string class_name(ClassID cls, int depth) {
        if (cls == 0) return "?";
        CorElementType elem = 0;
        ClassID elem_cls = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &elem, &elem_cls, &rank) == S_OK) {
            std::string inner;
            if (elem_cls != 0 && depth < 4) inner = class_name(elem_cls, depth + 1);
            else inner = element_name(elem);
            return inner + (rank > 1 ? "[" + std::string(rank - 1, ',') + "]" : "[]");
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 ntype = 0;
        // Caller-allocated buffer: no type-argument buffer, so its size is 0.
        if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &ntype, nullptr)) || mod == 0) return hex(cls);
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return hex(cls);
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        std::vector<WCHAR> buf(256);
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        HRESULT hr = md->GetTypeDefProps(td, buf.data(), (ULONG)buf.size(), &len, &flags, &ext);
        if (succeeded(hr) && len > buf.size()) {
            buf.resize(len);
            hr = md->GetTypeDefProps(td, buf.data(), (ULONG)buf.size(), &len, &flags, &ext);
        }
        md->Release();
        if (failed(hr)) return hex(cls);
        std::string n = to_utf8(buf.data(), buf.size());
        if (ntype > 0) n += "<" + std::to_string(ntype) + ">";
        return n;
    }

    static const char* element_name(CorElementType e) {
        switch (e) {
            case 0x2: return "bool";
            case 0x3: return "char";
            case 0x4: return "sbyte";
            case 0x5: return "byte";
            case 0x6: return "short";
            case 0x7: return "ushort";
            case 0x8: return "int";
            case 0x9: return "uint";
            case 0xa: return "long";
            case 0xb: return "ulong";
            case 0xc: return "float";
            case 0xd: return "double";
            case 0xe: return "string";
            case 0x18: return "nint";
            case 0x1c: return "object";
            default: return "elem";
        }
    }

    static std::string hex(ClassID c) {
        char b[32];
        std::snprintf(b, sizeof b, "class@%llx", (unsigned long long)c);
        return b;
    }

    std::string name_of_locked(ClassID c) const {
        auto it = names_.find(c);
        return it == names_.end() ? hex(c) : it->second;
    }

    std::string top_classes(const std::unordered_map<ClassID, std::uint64_t>& m) const {
        std::vector<std::pair<std::uint64_t, ClassID>> v;
        for (auto& kv : m) v.emplace_back(kv.second, kv.first);
        std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
        std::string s;
        for (size_t i = 0; i < v.size() && i < 5; ++i) {
            if (i) s += ", ";
            s += name_of_locked(v[i].second) + "=" + std::to_string(v[i].first);
        }
        if (v.size() > 5) s += ", ... (" + std::to_string(v.size()) + " classes)";
        return s.empty() ? "-" : s;
    }

    static std::string gen_hist(const std::uint64_t (&h)[kGenSlots]) {
        std::string s;
        for (int i = 0; i < kGenSlots; ++i) {
            if (h[i] == 0) continue;
            if (!s.empty()) s += " ";
            s += std::string(kGenNames[i]) + "=" + std::to_string(h[i]);
        }
        return s.empty() ? "-" : s;
    }

    std::string runtime_string() {
        USHORT id = 0, major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE type = 0;
        // Double-pass (Caller-Allocated Buffers): size first with a null buffer of size 0, then the string.
        // Observed on 3.1: the size query answers ERROR_INSUFFICIENT_BUFFER but still sets the size, so the
        // size is taken whenever it was set.
        ULONG need = 0;
        HRESULT hr = info_->GetRuntimeInformation(&id, &type, &major, &minor, &build, &qfe, 0, &need, nullptr);
        if (failed(hr) && !(hr == HRESULT_ERROR_INSUFFICIENT_BUFFER && need > 0)) {
            char e[64];
            std::snprintf(e, sizeof e, "unknown runtime (0x%08x)", (unsigned)hr);
            return e;
        }
        std::string ver;
        if (need > 0 && need < 1024) {
            std::vector<WCHAR> buf(need);
            ULONG got = 0;
            if (succeeded(info_->GetRuntimeInformation(&id, &type, &major, &minor, &build, &qfe, need, &got, buf.data())))
                ver = to_utf8(buf.data(), buf.size());
        }
        char num[32];
        std::snprintf(num, sizeof num, "%u.%u.%u", major, minor, build);
        std::string out = std::string(type == COR_PRF_CORE_CLR ? "CoreCLR " : "CLR ") + num;
        if (!ver.empty() && ver != num) out += " (\"" + ver + "\")";
        return out;
    }

    ICorProfilerInfo3* info_ = nullptr;
    ICorProfilerInfo13* info13_ = nullptr;
    std::string runtime_;
    bool verbose_ = false;
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> gc_in_progress_{false};
    std::atomic<unsigned> alloc_count_{0};

    std::mutex mu_;
    std::unordered_map<GCHandleID, HandleRec> handles_;
    std::uint64_t created_ = 0, destroyed_ = 0, created_null_ = 0, created_during_gc_ = 0, destroyed_unknown_ = 0;
    std::uint64_t destroyed_after_gc_ = 0, created_reused_id_ = 0, peak_live_ = 0;
    std::uint64_t gen_at_create_[kGenSlots] = {};
    std::unordered_map<ClassID, std::uint64_t> initial_classes_;

    std::uint64_t gc_number_ = 0, finished_gc_ = 0, swept_gc_ = 0, sweeps_ = 0, gcs_induced_ = 0;
    std::uint64_t gcs_by_gen_[kGenSlots] = {};
    std::vector<RootSeen> cur_roots_, sweep_targets_;
    std::vector<CwtSeen> cur_cwt_;
    std::uint64_t root_batches_ = 0, roots_total_ = 0, roots_stack_ = 0, roots_finalizer_ = 0, roots_handle_ = 0,
                  roots_other_ = 0;
    std::uint64_t flag_pinning_ = 0, flag_weak_ = 0, flag_interior_ = 0, flag_refcounted_ = 0, flag_undocumented_ = 0;
    std::uint64_t handle_roots_by_strength_[kStrengthCount] = {}, handle_roots_null_[kStrengthCount] = {};
    std::uint64_t handle_roots_known_ = 0, handle_roots_unknown_ = 0, target_changed_class_ = 0, target_class_failed_ = 0;
    std::unordered_map<ClassID, std::uint64_t> target_classes_[kStrengthCount];
    std::uint64_t sweep_gens_[kGenSlots] = {};
    std::uint64_t cwt_batches_ = 0, cwt_pairs_ = 0, cwt_null_ = 0, cwt_handle_known_ = 0, gcs_with_cwt_ = 0;
    std::unordered_map<ClassID, std::uint64_t> cwt_key_classes_, cwt_value_classes_;

    std::vector<OwnHandle> own_;
    size_t own_pending_ = 0;
    std::uint64_t own_created_[4] = {}, own_create_failed_ = 0, own_seen_in_created_ = 0, own_id_matches_ = 0;
    std::uint64_t own_weak_collected_ = 0, own_released_ = 0, own_pinned_moved_ = 0, own_strong_lost_ = 0;
    std::uint64_t own_class_mismatch_ = 0, own_promoted_ = 0, own_read_errors_ = 0;
    std::uint64_t own_gen_at_create_[kGenSlots] = {};
    HRESULT last_own_error_ = S_OK;

    std::unordered_set<ClassID> pending_names_;
    std::unordered_map<ClassID, std::string> names_;
};

DOCFIX_DEFINE_PROFILER(GcHandleTracker)
