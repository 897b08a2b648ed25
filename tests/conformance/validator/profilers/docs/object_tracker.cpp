// object_tracker.cpp -- core of a memory profiler: tracks every object of an "interesting" class
// (APM-style name filter: the type name, without namespace, starts with "Tracked"; arrays whose
// element class matches are tracked too, e.g. TrackedNode[]), keeps each tracked ObjectID valid
// across garbage collections, and after every GC checks that each tracked object still has the
// class recorded at allocation time (GetClassFromObject) and its allocation size (GetObjectSize2).
// At Shutdown it prints a one-line summary to stderr.
//
// Built twice: as itself (REMAP_SKEW 0, believed correct) and, through object_tracker_skew8.cpp,
// with REMAP_SKEW 8 -- a deliberately wrong remapping that adds 8 bytes to every moved ID.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//
// * ICorProfilerCallback::ObjectAllocated -- "Notifies the profiler that memory within the heap
//   has been allocated for an object."  "The classId parameter can refer to a class in managed
//   code that has not been loaded yet."  => class resolution may fail; such objects are kept as
//   "unresolved" and re-classified after the next GC (never inspected before they are resolved).
// * ICorProfilerInfo2::GetClassIDInfo2, ICorProfilerInfo::IsArrayClass,
//   ICorProfilerInfo::GetModuleMetaData + IMetaDataImport::GetTypeDefProps -- name resolution.
// * COR_PRF_MONITOR enumeration -- COR_PRF_ENABLE_OBJECT_ALLOCATED "Informs the runtime that the
//   profiler may want object allocation notifications. This flag must be set during
//   initialization."  It is set in Initialize together with COR_PRF_MONITOR_OBJECT_ALLOCATED and
//   COR_PRF_MONITOR_GC ("When COR_PRF_MONITOR_GC is allocated, concurrent garbage collection is
//   turned off." -- so no ObjectAllocated is expected while a GC is in progress; if one arrives
//   anyway, that object is kept out of the running GC's remapping).
// * ICorProfilerCallback2::GarbageCollectionStarted -- "It is safe for the profiler to inspect
//   objects in their original locations during the GarbageCollectionStarted callback. The garbage
//   collector will begin moving objects after the return from GarbageCollectionStarted. After the
//   profiler has returned from this callback, the profiler should consider all object IDs to be
//   invalid until it receives a ICorProfilerCallback2::GarbageCollectionFinished callback."
//   The generationCollected[] array says which generations this GC collects.
// * ICorProfilerInfo2::GetGenerationBounds -- "can be called from any profiler callback, provided
//   that garbage collection is not in progress" ... "the most interesting places to call
//   GetGenerationBounds are in ICorProfilerCallback2::GarbageCollectionStarted and
//   ICorProfilerCallback2::GarbageCollectionFinished."  It is called in GarbageCollectionStarted
//   (caller-allocated-buffers double pass) to learn, from addresses alone, in which generation each
//   tracked object lives before the GC.  No object is inspected for that.
// * ICorProfilerCallback4::MovedReferences2 (spec/MovedReferences2.md) -- oldObjectIDRangeStart[i]
//   is "the old (pre-garbage collection) starting address of a block of contiguous, live objects";
//   newObjectID = newObjectIDRangeStart[i] + (oldObjectID - oldObjectIDRangeStart[i]);
//   "None of the ObjectID values passed by MovedReferences2 are valid during the callback itself
//   ... profilers should not attempt to inspect objects during a MovedReferences2 call. A
//   ICorProfilerCallback2::GarbageCollectionFinished callback indicates that all objects have been
//   moved to their new locations and inspection can be performed."
//   Consequences implemented here:
//     - the arrays are copied (they only live for the callback) and nothing is inspected;
//     - a GC may deliver MovedReferences2 several times; every "old" address in every call is a
//       PRE-GC address, so a tracked ID is mapped exactly once, from its pre-GC value, against the
//       union of all ranges of that GC -- at GarbageCollectionFinished.  (Remapping in place call
//       by call would be wrong: an object already moved by call 1 can land at an address that is
//       an "old" address in call 2 and would be moved twice.)
//     - "If the profiler implements both the ICorProfilerCallback and the ICorProfilerCallback4
//       interfaces, the MovedReferences2 method is called before the
//       ICorProfilerCallback::MovedReferences method, but only if the MovedReferences2 method
//       returns successfully."  => MovedReferences2 returns S_OK and the duplicate v1
//       MovedReferences / SurvivingReferences reports are ignored.
// * ICorProfilerCallback4::SurvivingReferences2 -- for a non-compacting collection "memory is
//   returned to the heap, but no "live" objects are moved"; "For a garbage collection on any
//   particular generation, the profiler will receive either a SurvivingReferences2 callback or a
//   MovedReferences2 callback, but not both."  "In the case of multiple callbacks during a garbage
//   collection, the information is cumulative; all references that are reported in any
//   SurvivingReferences2 callback survive the garbage collection."  The v1 SurvivingReferences
//   likewise follows "only if SurvivingReferences2 returns successfully".
//   => after a GC, a tracked object (by its pre-GC ID) is
//        in a moved range      -> alive, new ID computed;
//        in a surviving range  -> alive, same ID;
//        in a generation that this GC did not collect -> alive, same ID;
//        otherwise             -> dead: dropped, never inspected again.
// * ICorProfilerCallback2::GarbageCollectionFinished -- "It is safe for the profiler to inspect
//   objects in their final locations when the GarbageCollectionFinished method is called."
//   => the only place where tracked objects are inspected (GetClassFromObject, GetObjectSize2).
// * ICorProfilerCallback::ObjectReferences / RootReferences2 (enabled by COR_PRF_MONITOR_GC) --
//   only counted; "profilers must not attempt to inspect objects during an ObjectReferences call".
// * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo calls after it starts except the final
//   Release; callbacks arriving afterwards return immediately.
//
// Locking: one mutex guards the tracking tables.  It is never held across a call into the runtime
// from ObjectAllocated (class resolution happens before taking it), following DoStackSnapshot's
// "Do not hold a lock while your profiler calls into a CLR function that can trigger a garbage
// collection."
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

#ifndef REMAP_SKEW
#define REMAP_SKEW 0
#endif

using namespace docfix;

namespace objtrack {

struct Tracked {
    ObjectID id;       // current ObjectID (valid outside of GCs)
    ClassID cls;       // ClassID reported by ObjectAllocated
    SIZE_T size;       // GetObjectSize2 at allocation (0 if unknown)
    int preGcGen;      // generation at GarbageCollectionStarted, -1 if unknown
    bool resolved;     // class name known to match the filter
};

struct MovedRange {
    ObjectID oldStart;
    ObjectID newStart;
    SIZE_T len;
    unsigned call;  // which MovedReferences2 call of this GC reported it (diagnostics only)
};

struct SurvivingRange {
    ObjectID start;
    SIZE_T len;
};

enum class Verdict { Track, Ignore, Unknown };

}  // namespace objtrack

using namespace objtrack;

class ObjectTracker : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[object_tracker] ICorProfilerInfo10 not available (0x%08x)\n", (unsigned)hr);
            return hr;
        }
        DWORD mask = COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[object_tracker] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        std::fprintf(stderr, "[object_tracker] initialized (remap skew %d)\n", (int)REMAP_SKEW);
        return S_OK;
    }

    // ---------------------------------------------------------------- allocation
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        Verdict v = Classify(classId);
        if (v == Verdict::Ignore) return S_OK;

        // The object was just allocated and is live: its size may be read here.
        SIZE_T size = 0;
        if (failed(info_->GetObjectSize2(objectId, &size))) size = 0;

        Tracked t{objectId, classId, size, -1, v == Verdict::Track};
        std::lock_guard<std::mutex> g(mu_);
        ++everTracked_;
        if (!t.resolved) ++everUnresolved_;
        if (gcInProgress_) {
            // Not expected (mutators do not allocate during a blocking GC), but if it happens the
            // ID is already a post-GC ID and must not go through this GC's remapping.
            allocatedDuringGc_.push_back(t);
        } else {
            tracked_.push_back(t);
        }
        return S_OK;
    }

    // ---------------------------------------------------------------- GC
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;

        // Generation layout before anything moves (allowed here, see header).
        std::vector<COR_PRF_GC_GENERATION_RANGE> bounds;
        ULONG total = 0;
        HRESULT hr = info_->GetGenerationBounds(0, &total, nullptr);
        if (succeeded(hr) && total > 0) {
            bounds.resize(total);
            ULONG got = 0;
            hr = info_->GetGenerationBounds(total, &got, bounds.data());
            if (succeeded(hr)) {
                bounds.resize(std::min(got, total));
            } else {
                bounds.clear();
            }
        }
        std::sort(bounds.begin(), bounds.end(),
                  [](const COR_PRF_GC_GENERATION_RANGE& a, const COR_PRF_GC_GENERATION_RANGE& b) {
                      return a.rangeStart < b.rangeStart;
                  });

        std::lock_guard<std::mutex> g(mu_);
        if (gcInProgress_) ++nestedGcStarts_;
        gcInProgress_ = true;
        ++gcsStarted_;
        gensCollected_.assign(generationCollected, generationCollected + (cGenerations > 0 ? cGenerations : 0));
        moved_.clear();
        surviving_.clear();
        movedCallsThisGc_ = 0;
        survivingCallsThisGc_ = 0;
        for (Tracked& t : tracked_) t.preGcGen = GenerationOf(bounds, t.id);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cRanges, ObjectID* oldStart, ObjectID* newStart,
                                               SIZE_T* len) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        // IDs are not valid here: copy the ranges, inspect nothing.
        std::lock_guard<std::mutex> g(mu_);
        ++movedCallsThisGc_;
        ++movedCallsTotal_;
        for (ULONG i = 0; i < cRanges; ++i)
            moved_.push_back(MovedRange{oldStart[i], newStart[i], len[i], movedCallsThisGc_});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cRanges, ObjectID* start, SIZE_T* len) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++survivingCallsThisGc_;
        ++survivingCallsTotal_;
        for (ULONG i = 0; i < cRanges; ++i) surviving_.push_back(SurvivingRange{start[i], len[i]});
        return S_OK;
    }

    // The ICorProfilerCallback/2 versions repeat what MovedReferences2/SurvivingReferences2 already
    // reported (called only after the "2" versions succeed): ignored.
    HRESULT STDMETHODCALLTYPE MovedReferences(ULONG, ObjectID*, ObjectID*, ULONG*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE SurvivingReferences(ULONG, ObjectID*, ULONG*) override { return S_OK; }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID, ClassID, ULONG, ObjectID*) override {
        ++objectRefCallbacks_;  // counted only: IDs must not be inspected here
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;

        std::vector<Tracked> snapshot;
        unsigned long died = 0, movedHere = 0;
        {
            std::lock_guard<std::mutex> g(mu_);
            std::sort(moved_.begin(), moved_.end(),
                      [](const MovedRange& a, const MovedRange& b) { return a.oldStart < b.oldStart; });
            std::sort(surviving_.begin(), surviving_.end(),
                      [](const SurvivingRange& a, const SurvivingRange& b) { return a.start < b.start; });

            std::vector<Tracked> next;
            next.reserve(tracked_.size() + allocatedDuringGc_.size());
            for (const Tracked& t : tracked_) {
                Tracked u = t;
                if (const MovedRange* m = FindMoved(t.id)) {
                    // Mapped once, from the pre-GC ID, against all ranges of this GC.
                    ObjectID exact = m->newStart + (t.id - m->oldStart);
                    u.id = exact + REMAP_SKEW;
                    if (u.id != t.id) ++movedHere;
                    // Diagnostics: did the object land on an address that is an "old" address
                    // of this same GC -- reported by a later MovedReferences2 call?  A profiler
                    // that remapped its table in place, call by call, would move it twice.
                    if (exact != t.id) {
                        if (const MovedRange* m2 = FindMoved(exact)) {
                            ++landedOnOldAddress_;
                            if (m2->call > m->call) ++naiveDoubleRemaps_;
                        }
                    }
                } else if (InSurviving(t.id)) {
                    // survived in place
                } else if (t.preGcGen >= 0 && t.preGcGen < (int)gensCollected_.size() &&
                           !gensCollected_[t.preGcGen]) {
                    // its generation was not collected by this GC: untouched
                } else {
                    ++died;  // collected (or not reported as live): never inspect it again
                    continue;
                }
                u.preGcGen = -1;
                next.push_back(u);
            }
            for (const Tracked& t : allocatedDuringGc_) next.push_back(t);
            allocatedDuringGc_.clear();
            tracked_.swap(next);
            gcInProgress_ = false;
            ++gcsFinished_;
            died_ += died;
            if (movedCallsThisGc_ > maxMovedCallsInOneGc_) maxMovedCallsInOneGc_ = movedCallsThisGc_;
            if (movedCallsThisGc_ > 1) ++gcsWithSeveralMovedCalls_;
            snapshot = tracked_;
        }

        // All objects are in their final locations now: inspect every tracked object.
        unsigned long match = 0, mismatch = 0, sizeMismatch = 0;
        std::unordered_map<ClassID, Verdict> lateVerdicts;  // classes unresolved at allocation time
        for (const Tracked& t : snapshot) {
            if (!t.resolved) {
                // Class could not be named at allocation time; try again now (ClassID only, no
                // object access).  Objects are inspected only once their class is known to match.
                auto it = lateVerdicts.find(t.cls);
                Verdict v = it != lateVerdicts.end() ? it->second : (lateVerdicts[t.cls] = Classify(t.cls));
                if (v != Verdict::Track) continue;
            }
            ClassID cls = 0;
            HRESULT hr = info_->GetClassFromObject(t.id, &cls);
            if (succeeded(hr) && cls == t.cls)
                ++match;
            else
                ++mismatch;
            SIZE_T size = 0;
            hr = info_->GetObjectSize2(t.id, &size);
            if (t.size != 0 && (failed(hr) || size != t.size)) ++sizeMismatch;
        }

        {
            std::lock_guard<std::mutex> g(mu_);
            if (!lateVerdicts.empty()) {
                // Apply late class resolution: matching classes become resolved, others are
                // forgotten.  (No runtime calls under this lock.)
                tracked_.erase(std::remove_if(tracked_.begin(), tracked_.end(),
                                              [&](const Tracked& t) {
                                                  if (t.resolved) return false;
                                                  auto it = lateVerdicts.find(t.cls);
                                                  return it != lateVerdicts.end() && it->second == Verdict::Ignore;
                                              }),
                               tracked_.end());
                for (Tracked& t : tracked_) {
                    if (t.resolved) continue;
                    auto it = lateVerdicts.find(t.cls);
                    if (it != lateVerdicts.end() && it->second == Verdict::Track) t.resolved = true;
                }
            }
            matches_ += match;
            mismatches_ += mismatch;
            sizeMismatches_ += sizeMismatch;
            if (verbose_) {
                std::fprintf(stderr,
                             "[object_tracker] gc#%lu: live=%zu moved=%lu died=%lu movedCalls=%u survivingCalls=%u "
                             "match=%lu mismatch=%lu sizeMismatch=%lu\n",
                             gcsFinished_, tracked_.size(), movedHere, died, movedCallsThisGc_,
                             survivingCallsThisGc_, match, mismatch, sizeMismatch);
            }
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true, std::memory_order_release);
        {
            std::lock_guard<std::mutex> g(mu_);
            std::fprintf(stderr,
                         "[object_tracker] summary: tracked=%lu live=%zu gcs=%lu class_matches=%lu "
                         "class_mismatches=%lu size_mismatches=%lu died=%lu moved_calls=%lu "
                         "max_moved_calls_per_gc=%u gcs_with_several_moved_calls=%lu surviving_calls=%lu "
                         "objref_callbacks=%lu landed_on_old_addresses=%lu naive_double_remaps_avoided=%lu skew=%d\n",
                         everTracked_, tracked_.size(), gcsFinished_, matches_, mismatches_, sizeMismatches_,
                         died_, movedCallsTotal_, maxMovedCallsInOneGc_, gcsWithSeveralMovedCalls_,
                         survivingCallsTotal_, objectRefCallbacks_.load(), landedOnOldAddress_, naiveDoubleRemaps_,
                         (int)REMAP_SKEW);
        }
        // Final Release only.  The pointer is deliberately not cleared: a callback racing with
        // Shutdown on another thread returns early on shutdown_ but must never see a null pointer.
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    // Generation of an address according to the pre-GC bounds, -1 if outside every range.
    static int GenerationOf(const std::vector<COR_PRF_GC_GENERATION_RANGE>& b, ObjectID id) {
        auto it = std::upper_bound(b.begin(), b.end(), id,
                                   [](ObjectID v, const COR_PRF_GC_GENERATION_RANGE& r) { return v < r.rangeStart; });
        if (it == b.begin()) return -1;
        --it;
        if (id < it->rangeStart + it->rangeLength) return it->generation;
        return -1;
    }

    const MovedRange* FindMoved(ObjectID id) const {
        auto it = std::upper_bound(moved_.begin(), moved_.end(), id,
                                   [](ObjectID v, const MovedRange& r) { return v < r.oldStart; });
        if (it == moved_.begin()) return nullptr;
        --it;
        if (id >= it->oldStart && id < it->oldStart + it->len) return &*it;
        return nullptr;
    }

    bool InSurviving(ObjectID id) const {
        auto it = std::upper_bound(surviving_.begin(), surviving_.end(), id,
                                   [](ObjectID v, const SurvivingRange& r) { return v < r.start; });
        if (it == surviving_.begin()) return false;
        --it;
        return id >= it->start && id < it->start + it->len;
    }

    // Decide from the ClassID alone (no object access) whether objects of this class are tracked.
    Verdict Classify(ClassID classId) {
        {
            std::lock_guard<std::mutex> g(cacheMu_);
            auto it = cache_.find(classId);
            if (it != cache_.end() && it->second != Verdict::Unknown) return it->second;
        }
        Verdict v = Resolve(classId, 0);
        std::lock_guard<std::mutex> g(cacheMu_);
        cache_[classId] = v;
        return v;
    }

    Verdict Resolve(ClassID classId, int depth) {
        if (classId == 0 || depth > 4) return Verdict::Unknown;
        CorElementType elem = 0;
        ClassID elemClass = 0;
        ULONG rank = 0;
        HRESULT hr = info_->IsArrayClass(classId, &elem, &elemClass, &rank);
        if (hr == S_OK) {
            // Array: tracked when its element class is (e.g. TrackedNode[]); primitive arrays have
            // no element ClassID worth resolving.
            if (elemClass == 0) return Verdict::Ignore;
            Verdict v = Resolve(elemClass, depth + 1);
            return v;
        }
        if (failed(hr)) return Verdict::Unknown;

        ModuleID module = 0;
        mdTypeDef typeDef = 0;
        ClassID parent = 0;
        ULONG32 nTypeArgs = 0;
        hr = info_->GetClassIDInfo2(classId, &module, &typeDef, &parent, 0, &nTypeArgs, nullptr);
        if (failed(hr) || module == 0 || typeDef == 0) return Verdict::Unknown;

        IUnknown* unk = nullptr;
        hr = info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk);
        if (failed(hr) || unk == nullptr) return Verdict::Unknown;
        auto* import = static_cast<IMetaDataImport*>(unk);
        WCHAR name[512];
        ULONG len = 0;
        DWORD flags = 0;
        mdToken extends = 0;
        hr = import->GetTypeDefProps(typeDef, name, 512, &len, &flags, &extends);
        import->Release();
        if (failed(hr)) return Verdict::Unknown;
        std::string full = to_utf8(name, 512);
        std::string simple = full.substr(full.find_last_of('.') == std::string::npos ? 0 : full.find_last_of('.') + 1);
        return simple.compare(0, 7, "Tracked") == 0 ? Verdict::Track : Verdict::Ignore;
    }

    ICorProfilerInfo10* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    bool verbose_ = false;

    std::mutex cacheMu_;
    std::unordered_map<ClassID, Verdict> cache_;

    std::mutex mu_;
    std::vector<Tracked> tracked_;
    std::vector<Tracked> allocatedDuringGc_;
    bool gcInProgress_ = false;
    std::vector<BOOL> gensCollected_;
    std::vector<MovedRange> moved_;
    std::vector<SurvivingRange> surviving_;
    unsigned movedCallsThisGc_ = 0, survivingCallsThisGc_ = 0, maxMovedCallsInOneGc_ = 0;
    unsigned long everTracked_ = 0, everUnresolved_ = 0, gcsStarted_ = 0, gcsFinished_ = 0, nestedGcStarts_ = 0;
    unsigned long matches_ = 0, mismatches_ = 0, sizeMismatches_ = 0, died_ = 0;
    unsigned long movedCallsTotal_ = 0, survivingCallsTotal_ = 0, gcsWithSeveralMovedCalls_ = 0;
    unsigned long landedOnOldAddress_ = 0, naiveDoubleRemaps_ = 0;
    std::atomic<unsigned long> objectRefCallbacks_{0};
};

DOCFIX_DEFINE_PROFILER(ObjectTracker)
