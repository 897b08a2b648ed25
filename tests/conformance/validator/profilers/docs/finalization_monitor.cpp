// finalization_monitor.cpp -- finalization census: which classes get finalized most, how many of
// their instances were allocated, and what those classes look like.
//
// What it does
//   * Counts every object the runtime queues to the finalizer thread (FinalizeableObjectQueued),
//     per class, separating critical finalizers (COR_PRF_FINALIZER_CRITICAL), and tracks how many
//     objects each GC queued.
//   * Counts every managed-heap allocation per class (ObjectAllocated) with its size
//     (GetObjectSize2), the element count of arrays (GetArrayObjectInfo) and the character count of
//     strings (GetStringLayout2 offsets), so the report can say which fraction of a class's
//     instances ended up on the finalization queue.
//   * Describes every class it sees: name (GetClassIDInfo2 + the module's IMetaDataImport,
//     including nesting and generic type arguments), parent, kind (array / string / value type /
//     reference type), instance size and field count (GetClassLayout, double-pass buffer), the box
//     payload offset of value types (GetBoxClassLayout), the string layout (GetStringLayout2) and
//     array element type/rank (IsArrayClass).
//   * Shutdown prints a short summary to stderr. Nothing in Shutdown calls ICorProfilerInfo.
//
// Where each call is made, and why (the documentation sentences followed, learn.microsoft.com
// .../unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize: "The Initialize call is the only opportunity to enable (or
//     disable) callbacks that are immutable." -- COR_PRF_ENABLE_OBJECT_ALLOCATED (immutable) is set
//     there together with COR_PRF_MONITOR_OBJECT_ALLOCATED.
//   * "Garbage Collection in the Profiling API": "When the user specifies the COR_PRF_MONITOR_GC
//     flag, all garbage collection events except for ICorProfilerCallback::ObjectAllocated events
//     will be raised in the profiler. ObjectAllocated events are explicitly controlled by the
//     COR_PRF_MONITOR_OBJECT_ALLOCATED flag for performance reasons." -- FinalizeableObjectQueued is
//     an ICorProfilerCallback2 GC event, so COR_PRF_MONITOR_GC is requested for it.
//   * ICorProfilerCallback2::FinalizeableObjectQueued: "Notifies the code profiler that an object
//     with a finalizer has been queued to the finalizer thread for execution of its Finalize
//     method." / finalizerFlags: "A value of the COR_PRF_FINALIZER_FLAGS enumeration" --
//     COR_PRF_FINALIZER_CRITICAL (0x1) "The finalizer is critical."  The objectID is used only
//     inside that callback (GetClassFromObject, GetObjectSize2); it is never stored, because
//     GarbageCollectionStarted says "After the profiler has returned from this callback, the
//     profiler should consider all object IDs to be invalid until it receives a
//     ICorProfilerCallback2::GarbageCollectionFinished callback."
//   * ICorProfilerCallback::ObjectAllocated: "The classId parameter can refer to a class in managed
//     code that has not been loaded yet. The profiler will receive a class load callback for that
//     class immediately after the ObjectAllocated callback." and ClassLoadStarted: "The value of
//     classId is not valid for an information request until the
//     ICorProfilerCallback::ClassLoadFinished method is called." -- ObjectAllocated therefore never
//     asks anything about the classId it is handed; it only counts.  Classes are described in
//     ClassLoadFinished (after which the ClassID is valid); a class first seen in ObjectAllocated
//     without a description yet (array types got no class-load callback on either runtime here)
//     is described by the same thread at its NEXT ObjectAllocated callback -- by then the
//     class-load callback that comes "immediately after" the first one has been delivered -- or,
//     failing that, at the next
//     GarbageCollectionFinished ("It is safe for the profiler to inspect objects in their final
//     locations when the GarbageCollectionFinished method is called"), using only metadata
//     interfaces cached earlier.  Array-element and string-length extras in ObjectAllocated
//     (GetArrayObjectInfo on the object, the string length DWORD) are read only for classes
//     already described, so the first instance of a class is counted without them.
//   * ICorProfilerCallback::ClassUnloadStarted: "The value of classId is not valid for an
//     information request after the ClassUnloadStarted method returns -- this is the profiler's
//     last chance to obtain information about this class." -- the class is described there if it
//     was not yet, and its ClassID is retired from the tables so a reused ID is not merged.
//   * ICorProfilerCallback::ModuleLoadFinished / ModuleLoadStarted: "The value of moduleId is not
//     valid for an information request until the ModuleLoadFinished method is called." -- the
//     module's IMetaDataImport is obtained there with GetModuleMetaData(ofRead) and cached
//     ("Some modules (such as resource modules) have no metadata. In those cases,
//     GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."), so that
//     describing a class during a GC never has to open metadata.
//   * ICorProfilerInfo2::GetClassIDInfo2 and GetClassLayout, and "Caller-Allocated Buffers in the
//     Profiling API": "Double-pass method: ... First call with a zero-length InfoBuffer parameter to
//     obtain the correct buffer size. Then set the buffer size to the value returned in pcBufferMax
//     and call the function again." and "If InfoBuffer is null, cBufferSizeStart must be 0."
//   * GetClassLayout: "If you use GetClassLayout with string classes, the method will fail with
//     error code E_INVALIDARG. Use ICorProfilerInfo2::GetStringLayout to get information about the
//     layout of a string. GetClassLayout will also fail when called with an array class." -- it is
//     called only for classes that are neither arrays (IsArrayClass returned S_OK) nor
//     System.String; strings use GetStringLayout2 ("This method supersedes the
//     ICorProfilerInfo2::GetStringLayout method."), whose length "is stored as a DWORD".
//   * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an
//     S_OK HRESULT and values for any non-null output parameters. Otherwise, it returns S_FALSE."
//   * GetArrayObjectInfo: cDimensions is "The rank (number of dimensions) of the array." -- the
//     rank passed is the one IsArrayClass returned for the object's class, and the two out arrays
//     have exactly that many elements.
//   * GetBoxClassLayout: "The pBufferOffset value is the location of the value type within a box."
//     -- called only for value types (parent is System.ValueType or System.Enum).
//   * GetTypeDefProps (IMetaDataImport) buffer: if the returned length exceeds the buffer the call
//     is repeated with a larger buffer (same caller-allocated-buffer rule).
//   * ICorProfilerInfo3::GetRuntimeInformation: called once in Initialize for the summary line.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." and "Certain immutable
//     events may still occur after shutdown; the profiler should take care to return immediately
//     when this occurs." -- the report is built from data already collected; every callback checks
//     the shutdown flag first.
//
// Locking: the profiler never holds its own mutex while it calls into the runtime (a GC can start
// while another thread is inside a profiler call, and the GC thread would then wait on the mutex).
//
// Declared here (not in the kit headers): COR_PRF_FINALIZER_CRITICAL = 0x1 (corprof.idl
// COR_PRF_FINALIZER_FLAGS), the CorElementType values used for primitive array element names and
// the CorTypeAttr visibility bits (cor.h: tdVisibilityMask = 0x7, tdNestedPublic = 0x2, the nested
// visibilities are 2..7).
#include "common.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr DWORD kFinalizerCritical = 0x1;  // COR_PRF_FINALIZER_CRITICAL
constexpr DWORD kTdVisibilityMask = 0x7;   // cor.h CorTypeAttr
constexpr DWORD kTdNestedPublic = 0x2;     // first nested visibility value

const char* PrimitiveName(CorElementType et) {
    switch (et) {
        case 0x02: return "System.Boolean";
        case 0x03: return "System.Char";
        case 0x04: return "System.SByte";
        case 0x05: return "System.Byte";
        case 0x06: return "System.Int16";
        case 0x07: return "System.UInt16";
        case 0x08: return "System.Int32";
        case 0x09: return "System.UInt32";
        case 0x0a: return "System.Int64";
        case 0x0b: return "System.UInt64";
        case 0x0c: return "System.Single";
        case 0x0d: return "System.Double";
        case 0x0e: return "System.String";
        case 0x18: return "System.IntPtr";
        case 0x19: return "System.UIntPtr";
        case 0x1c: return "System.Object";
        default: return nullptr;
    }
}

enum class Kind { Unknown, Reference, ValueType, String, Array };

struct Description {
    std::string name;
    std::string parent;
    Kind kind = Kind::Unknown;
    ULONG32 rank = 0;          // arrays
    ULONG fieldCount = 0;      // GetClassLayout (fields declared by the class itself)
    ULONG classSize = 0;       // GetClassLayout pulClassSize
    ULONG32 boxOffset = 0;     // value types
    bool complete = false;     // name came from metadata (not a placeholder)
};

struct ClassStats {
    ClassID id = 0;
    std::atomic<std::uint64_t> allocs{0};
    std::atomic<std::uint64_t> allocBytes{0};
    std::atomic<std::uint64_t> arrayElements{0};
    std::atomic<std::uint64_t> stringChars{0};
    std::atomic<std::uint64_t> queued{0};
    std::atomic<std::uint64_t> queuedCritical{0};
    std::atomic<std::uint64_t> queuedBytes{0};
    bool retired = false;  // ClassUnloadStarted seen (guarded by mu_)
};

class FinalizationMonitor : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[finmon] ICorProfilerInfo3 not available (0x%08x); profiler disabled\n", (unsigned)hr);
            info_ = nullptr;
            return E_FAIL;
        }
        // GetObjectSize2 (ICorProfilerInfo4) is optional: sizes are simply not reported without it.
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info4_)))) info4_ = nullptr;

        const DWORD mask = COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED |
                           COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_MODULE_LOADS;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[finmon] SetEventMask(0x%08x) failed 0x%08x; profiler disabled\n", mask, (unsigned)hr);
            if (info4_) info4_->Release();
            info4_ = nullptr;
            info_->Release();
            info_ = nullptr;
            return E_FAIL;
        }

        USHORT major = 0, minor = 0, build = 0, qfe = 0, clrId = 0;
        COR_PRF_RUNTIME_TYPE rtType = 0;
        WCHAR ver[64] = {};
        ULONG verLen = 0;
        if (succeeded(info_->GetRuntimeInformation(&clrId, &rtType, &major, &minor, &build, &qfe, 64, &verLen, ver)))
            std::snprintf(runtime_, sizeof runtime_, "%s/%u.%u.%u", to_utf8(ver, verLen < 64 ? verLen : 64).c_str(),
                          major, minor, build);
        std::fprintf(stderr, "[finmon] initialized (runtime %s, mask 0x%08x)\n", runtime_, mask);
        return S_OK;
    }

    // ---- modules: cache IMetaDataImport so no metadata has to be opened during a GC ----------
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (shutdown_.load() || info_ == nullptr || failed(hrStatus)) return S_OK;
        IUnknown* unk = nullptr;
        HRESULT hr = info_->GetModuleMetaData(moduleId, ofRead, IID_IMetaDataImport, &unk);
        if (hr != S_OK || unk == nullptr) return S_OK;  // S_FALSE: module without metadata
        IUnknown* old = nullptr;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto& slot = importers_[moduleId];
            old = slot;
            slot = static_cast<IMetaDataImport*>(unk);
        }
        if (old) old->Release();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleUnloadStarted(ModuleID moduleId) override {
        if (shutdown_.load()) return S_OK;
        IMetaDataImport* imp = nullptr;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = importers_.find(moduleId);
            if (it != importers_.end()) {
                imp = it->second;
                importers_.erase(it);
            }
        }
        if (imp) imp->Release();
        return S_OK;
    }

    // ---- classes ------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID classId, HRESULT hrStatus) override {
        if (shutdown_.load() || info_ == nullptr || failed(hrStatus)) return S_OK;
        // The ClassID is valid for information requests from now on (ClassLoadStarted remarks).
        EnsureDescribed(classId, /*inGc=*/false);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassUnloadStarted(ClassID classId) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        EnsureDescribed(classId, /*inGc=*/false);  // last chance to ask about this class
        std::lock_guard<std::mutex> g(mu_);
        auto it = stats_.find(classId);
        if (it != stats_.end()) {
            it->second->retired = true;
            retired_.push_back(std::move(it->second));
            retiredDesc_.push_back(descs_[classId]);
            stats_.erase(it);
        }
        descs_.erase(classId);
        ++classesUnloaded_;
        return S_OK;
    }

    // ---- allocations: count only; never inspect classId here -----------------------------------
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        totalAllocs_.fetch_add(1, std::memory_order_relaxed);

        // Classes this thread introduced in an EARLIER ObjectAllocated callback: their class-load
        // callback (if any) was delivered "immediately after" that callback, so their ClassIDs are
        // valid for information requests now.
        if (tlDeferredCount_ > 0) {
            ClassID deferred[kDeferred];
            int n = tlDeferredCount_;
            std::memcpy(deferred, tlDeferred_, sizeof(ClassID) * n);
            tlDeferredCount_ = 0;
            for (int i = 0; i < n; ++i) EnsureDescribed(deferred[i], /*inGc=*/false);
        }

        Kind kind = Kind::Unknown;
        ULONG32 rank = 0;
        ClassStats* st = nullptr;
        bool isNew = false;
        {
            std::lock_guard<std::mutex> g(mu_);
            st = StatsLocked(classId, &isNew);
            auto d = descs_.find(classId);
            if (d != descs_.end()) {
                kind = d->second.kind;
                rank = d->second.rank;
            }
        }
        // classId itself is not asked about in this callback; describe it on this thread's next
        // allocation (or, failing that, at the next GarbageCollectionFinished via pending_).
        if (isNew && kind == Kind::Unknown && tlDeferredCount_ < kDeferred) tlDeferred_[tlDeferredCount_++] = classId;

        SIZE_T size = 0;
        if (info4_ != nullptr && succeeded(info4_->GetObjectSize2(objectId, &size))) {
            st->allocBytes.fetch_add(size, std::memory_order_relaxed);
        }
        // Extras only for classes that were already described earlier (so known to be loaded).
        if (kind == Kind::Array && rank >= 1 && rank <= 32) {
            ULONG32 dims[32];
            int lbs[32];
            BYTE* data = nullptr;
            if (succeeded(info_->GetArrayObjectInfo(objectId, rank, dims, lbs, &data))) {
                std::uint64_t n = 1;
                for (ULONG32 i = 0; i < rank; ++i) n *= dims[i];
                st->arrayElements.fetch_add(n, std::memory_order_relaxed);
            }
        } else if (kind == Kind::String && stringLayoutKnown_.load()) {
            DWORD len = 0;
            std::memcpy(&len, reinterpret_cast<const BYTE*>(objectId) + strLenOffset_, sizeof len);
            st->stringChars.fetch_add(len, std::memory_order_relaxed);
        }
        st->allocs.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    // ---- GC -----------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        gcs_.fetch_add(1);
        if (reason == 1 /* COR_PRF_GC_INDUCED */) inducedGcs_.fetch_add(1);
        queuedThisGc_.store(0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD finalizerFlags, ObjectID objectID) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        totalQueued_.fetch_add(1);
        queuedThisGc_.fetch_add(1);
        if (finalizerFlags & kFinalizerCritical) totalCritical_.fetch_add(1);

        // The object ID is used only during this callback and never kept.
        ClassID classId = 0;
        if (failed(info_->GetClassFromObject(objectID, &classId)) || classId == 0) {
            unresolvedQueued_.fetch_add(1);
            return S_OK;
        }
        SIZE_T size = 0;
        if (info4_ != nullptr && failed(info4_->GetObjectSize2(objectID, &size))) size = 0;

        ClassStats* st = nullptr;
        {
            std::lock_guard<std::mutex> g(mu_);
            st = StatsLocked(classId);
        }
        st->queued.fetch_add(1);
        if (finalizerFlags & kFinalizerCritical) st->queuedCritical.fetch_add(1);
        st->queuedBytes.fetch_add(size);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        std::uint64_t q = queuedThisGc_.load();
        std::uint64_t prev = maxQueuedPerGc_.load();
        while (q > prev && !maxQueuedPerGc_.compare_exchange_weak(prev, q)) {
        }
        if (q > 0) gcsWithFinalization_.fetch_add(1);

        // Describe classes seen in allocations/finalizations that never had a class-load callback
        // (arrays, for example).  Only cached metadata is used here.
        std::vector<ClassID> todo;
        {
            std::lock_guard<std::mutex> g(mu_);
            todo.swap(pending_);
        }
        for (ClassID c : todo) EnsureDescribed(c, /*inGc=*/true);
        return S_OK;
    }

    // ---- report -------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        // No ICorProfilerInfo call from here on: the report uses only collected data.
        struct Row {
            std::string name;
            Description d;
            std::uint64_t allocs, bytes, elems, chars, queued, critical, qbytes;
        };
        std::vector<Row> rows;
        std::size_t undescribed = 0;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto add = [&](const ClassStats& s, const Description* d) {
                Row r{};
                if (d != nullptr && !d->name.empty()) {
                    r.d = *d;
                    r.name = d->name;
                } else {
                    char buf[48];
                    std::snprintf(buf, sizeof buf, "<ClassID 0x%llx>", (unsigned long long)s.id);
                    r.name = buf;
                    ++undescribed;
                    if (std::getenv("FINMON_DEBUG"))
                        std::fprintf(stderr, "[finmon] undescribed %s allocs=%llu queued=%llu\n", buf,
                                     (unsigned long long)s.allocs.load(), (unsigned long long)s.queued.load());
                }
                r.allocs = s.allocs.load();
                r.bytes = s.allocBytes.load();
                r.elems = s.arrayElements.load();
                r.chars = s.stringChars.load();
                r.queued = s.queued.load();
                r.critical = s.queuedCritical.load();
                r.qbytes = s.queuedBytes.load();
                rows.push_back(std::move(r));
            };
            for (auto& kv : stats_) {
                auto d = descs_.find(kv.first);
                add(*kv.second, d == descs_.end() ? nullptr : &d->second);
            }
            for (std::size_t i = 0; i < retired_.size(); ++i) add(*retired_[i], &retiredDesc_[i]);
        }

        std::size_t finalizedClasses = 0;
        for (auto& r : rows)
            if (r.queued) ++finalizedClasses;

        std::fprintf(stderr,
                     "[finmon] summary: runtime=%s gcs=%llu (induced %llu, with finalization %llu) allocations=%llu "
                     "alloc-classes=%zu queued-for-finalization=%llu (critical %llu, class unknown %llu) "
                     "finalized-classes=%zu max-queued-in-one-gc=%llu described-classes=%zu unloaded-classes=%llu\n",
                     runtime_, (unsigned long long)gcs_.load(), (unsigned long long)inducedGcs_.load(),
                     (unsigned long long)gcsWithFinalization_.load(), (unsigned long long)totalAllocs_.load(),
                     rows.size(), (unsigned long long)totalQueued_.load(), (unsigned long long)totalCritical_.load(),
                     (unsigned long long)unresolvedQueued_.load(), finalizedClasses,
                     (unsigned long long)maxQueuedPerGc_.load(), describedCount_.load(),
                     (unsigned long long)classesUnloaded_);

        auto describe = [](const Row& r) {
            char buf[200];
            switch (r.d.kind) {
                case Kind::Array:
                    std::snprintf(buf, sizeof buf, "array rank=%u elements=%llu", r.d.rank, (unsigned long long)r.elems);
                    break;
                case Kind::String:
                    std::snprintf(buf, sizeof buf, "string chars=%llu", (unsigned long long)r.chars);
                    break;
                case Kind::ValueType:
                    std::snprintf(buf, sizeof buf, "struct size=%u fields=%u box-offset=%u", r.d.classSize,
                                  r.d.fieldCount, r.d.boxOffset);
                    break;
                case Kind::Reference:
                    std::snprintf(buf, sizeof buf, "class size=%u own-fields=%u parent=%s", r.d.classSize,
                                  r.d.fieldCount, r.d.parent.empty() ? "-" : r.d.parent.c_str());
                    break;
                default:
                    std::snprintf(buf, sizeof buf, "undescribed");
            }
            return std::string(buf);
        };

        std::vector<const Row*> fin;
        for (auto& r : rows)
            if (r.queued) fin.push_back(&r);
        std::sort(fin.begin(), fin.end(), [](const Row* a, const Row* b) {
            return a->queued != b->queued ? a->queued > b->queued : a->name < b->name;
        });
        if (fin.empty()) {
            std::fprintf(stderr, "[finmon] no object was queued for finalization\n");
        } else {
            std::fprintf(stderr, "[finmon] most finalized classes:\n");
            for (std::size_t i = 0; i < fin.size() && i < 10; ++i) {
                const Row& r = *fin[i];
                double pct = r.allocs ? 100.0 * double(r.queued) / double(r.allocs) : 0.0;
                std::fprintf(stderr,
                             "[finmon]   %2zu. %-48s queued=%llu critical=%llu bytes=%llu allocated=%llu (%.1f%% finalized) [%s]\n",
                             i + 1, r.name.c_str(), (unsigned long long)r.queued, (unsigned long long)r.critical,
                             (unsigned long long)r.qbytes, (unsigned long long)r.allocs, pct, describe(r).c_str());
            }
        }

        std::vector<const Row*> alloc;
        for (auto& r : rows)
            if (r.allocs) alloc.push_back(&r);
        std::sort(alloc.begin(), alloc.end(), [](const Row* a, const Row* b) {
            return a->allocs != b->allocs ? a->allocs > b->allocs : a->name < b->name;
        });
        std::fprintf(stderr, "[finmon] most allocated classes:\n");
        for (std::size_t i = 0; i < alloc.size() && i < 5; ++i) {
            const Row& r = *alloc[i];
            std::fprintf(stderr, "[finmon]   %2zu. %-48s allocated=%llu bytes=%llu [%s]\n", i + 1, r.name.c_str(),
                         (unsigned long long)r.allocs, (unsigned long long)r.bytes, describe(r).c_str());
        }
        if (undescribed) std::fprintf(stderr, "[finmon] %zu class(es) could not be described\n", undescribed);

        // IMetaDataImport pointers are deliberately not released during shutdown (process exit);
        // the ICorProfilerInfo pointers are released, as minimal.cpp does.
        if (info4_ != nullptr) {
            info4_->Release();
            info4_ = nullptr;
        }
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // Caller holds mu_.  Returns the stats node for classId, creating it (and queueing the class
    // for description) on first sight.  Nodes are heap-allocated and never freed, so the pointer
    // stays valid after the lock is dropped.
    ClassStats* StatsLocked(ClassID classId, bool* isNew = nullptr) {
        auto it = stats_.find(classId);
        if (it != stats_.end()) return it->second.get();
        if (isNew) *isNew = true;
        auto node = std::make_unique<ClassStats>();
        node->id = classId;
        ClassStats* p = node.get();
        stats_.emplace(classId, std::move(node));
        auto d = descs_.find(classId);
        if (d == descs_.end() || !d->second.complete) pending_.push_back(classId);
        return p;
    }

    IMetaDataImport* Importer(ModuleID m, bool inGc) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = importers_.find(m);
            if (it != importers_.end()) return it->second;
        }
        if (inGc) return nullptr;  // never open metadata while a GC is in progress
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(m, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return nullptr;
        std::lock_guard<std::mutex> g(mu_);
        auto& slot = importers_[m];
        if (slot == nullptr) {
            slot = static_cast<IMetaDataImport*>(unk);
        } else {
            unk->Release();  // lost a race; keep the cached one (only this profiler holds both)
        }
        return slot;
    }

    // Type name of a TypeDef, including enclosing types for nested types.
    static std::string TypeDefName(IMetaDataImport* imp, mdTypeDef td, DWORD* flagsOut, int depth = 0) {
        WCHAR small[256];
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        if (failed(imp->GetTypeDefProps(td, small, 256, &len, &flags, &ext))) return std::string();
        std::string name;
        if (len > 256) {  // caller-allocated buffer too small: retry with the size reported
            std::vector<WCHAR> big(len);
            if (failed(imp->GetTypeDefProps(td, big.data(), len, &len, &flags, &ext))) return std::string();
            name = to_utf8(big.data(), len);
        } else {
            name = to_utf8(small, len);
        }
        if (flagsOut) *flagsOut = flags;
        DWORD vis = flags & kTdVisibilityMask;
        if (vis >= kTdNestedPublic && depth < 8) {
            mdTypeDef enclosing = 0;
            if (succeeded(imp->GetNestedClassProps(td, &enclosing)) && enclosing != 0)
                name = TypeDefName(imp, enclosing, nullptr, depth + 1) + "+" + name;
        }
        return name;
    }

    // Name of a class (arrays, generic instantiations), using cached descriptions when possible.
    std::string ClassName(ClassID c, bool inGc, int depth, bool* complete) {
        if (c == 0) return "?";
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = descs_.find(c);
            if (it != descs_.end() && it->second.complete) return it->second.name;
        }
        if (depth > 6) {
            *complete = false;
            return "...";
        }
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(c, &et, &elem, &rank) == S_OK) {
            std::string en;
            if (elem != 0) {
                en = ClassName(elem, inGc, depth + 1, complete);
            } else if (const char* p = PrimitiveName(et)) {
                en = p;
            } else {
                en = "?";
                *complete = false;
            }
            return en + "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 nArgs = 0;
        if (failed(info_->GetClassIDInfo2(c, &mod, &td, &parent, 0, &nArgs, nullptr))) {
            *complete = false;
            return "?";
        }
        std::vector<ClassID> args(nArgs);
        if (nArgs > 0) {
            ULONG32 got = 0;
            if (failed(info_->GetClassIDInfo2(c, &mod, &td, &parent, nArgs, &got, args.data()))) {
                *complete = false;
                args.clear();
            } else if (got < args.size()) {
                args.resize(got);
            }
        }
        std::string name;
        IMetaDataImport* imp = Importer(mod, inGc);
        if (imp != nullptr) name = TypeDefName(imp, td, nullptr);
        if (name.empty()) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "<module 0x%llx type 0x%08x>", (unsigned long long)mod, td);
            name = buf;
            *complete = false;
        }
        if (!args.empty()) {
            name += "<";
            for (std::size_t i = 0; i < args.size(); ++i) {
                if (i) name += ",";
                name += ClassName(args[i], inGc, depth + 1, complete);
            }
            name += ">";
        }
        return name;
    }

    void EnsureDescribed(ClassID c, bool inGc) {
        if (c == 0) return;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = descs_.find(c);
            if (it != descs_.end() && it->second.complete) return;
        }
        Description d;
        bool complete = true;
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(c, &et, &elem, &rank) == S_OK) {
            d.kind = Kind::Array;
            d.rank = rank;
            d.name = ClassName(c, inGc, 0, &complete);
        } else {
            ModuleID mod = 0;
            mdTypeDef td = 0;
            ClassID parent = 0;
            ULONG32 nArgs = 0;
            if (failed(info_->GetClassIDInfo2(c, &mod, &td, &parent, 0, &nArgs, nullptr))) return;
            d.name = ClassName(c, inGc, 0, &complete);
            if (parent != 0) d.parent = ClassName(parent, inGc, 1, &complete);
            if (d.name == "System.String") {
                d.kind = Kind::String;
                ULONG lenOff = 0, bufOff = 0;
                if (!stringLayoutKnown_.load() && succeeded(info_->GetStringLayout2(&lenOff, &bufOff))) {
                    strLenOffset_ = lenOff;
                    strBufOffset_ = bufOff;
                    stringLayoutKnown_.store(true);
                }
            } else {
                bool isValueType = (d.parent == "System.ValueType" || d.parent == "System.Enum") &&
                                   d.name != "System.Enum";
                d.kind = isValueType ? Kind::ValueType : Kind::Reference;
                // GetClassLayout: double pass (size query with a null buffer and count 0, then fill).
                ULONG nFields = 0, size = 0;
                if (succeeded(info_->GetClassLayout(c, nullptr, 0, &nFields, &size))) {
                    d.classSize = size;
                    d.fieldCount = nFields;
                    if (nFields > 0) {
                        std::vector<COR_FIELD_OFFSET> fo(nFields);
                        ULONG got = 0;
                        if (succeeded(info_->GetClassLayout(c, fo.data(), nFields, &got, &size))) {
                            d.fieldCount = got;
                            d.classSize = size;
                        }
                    }
                }
                if (isValueType) {
                    ULONG32 off = 0;
                    if (succeeded(info_->GetBoxClassLayout(c, &off))) d.boxOffset = off;
                }
            }
        }
        d.complete = complete;
        std::lock_guard<std::mutex> g(mu_);
        auto& slot = descs_[c];
        if (!slot.complete) {
            if (complete) describedCount_.fetch_add(1);
            slot = std::move(d);
        }
        if (!complete) pending_.push_back(c);  // retry at a later GarbageCollectionFinished
    }

    static constexpr int kDeferred = 8;
    static thread_local ClassID tlDeferred_[kDeferred];
    static thread_local int tlDeferredCount_;

    ICorProfilerInfo3* info_ = nullptr;
    ICorProfilerInfo4* info4_ = nullptr;
    char runtime_[96] = "?";
    std::atomic<bool> shutdown_{false};

    std::mutex mu_;
    std::unordered_map<ModuleID, IMetaDataImport*> importers_;
    std::unordered_map<ClassID, Description> descs_;
    std::unordered_map<ClassID, std::unique_ptr<ClassStats>> stats_;
    std::vector<std::unique_ptr<ClassStats>> retired_;
    std::vector<Description> retiredDesc_;
    std::vector<ClassID> pending_;
    std::uint64_t classesUnloaded_ = 0;

    std::atomic<bool> stringLayoutKnown_{false};
    ULONG strLenOffset_ = 0, strBufOffset_ = 0;

    std::atomic<std::uint64_t> totalAllocs_{0}, totalQueued_{0}, totalCritical_{0}, unresolvedQueued_{0};
    std::atomic<std::uint64_t> gcs_{0}, inducedGcs_{0}, gcsWithFinalization_{0}, queuedThisGc_{0}, maxQueuedPerGc_{0};
    std::atomic<std::size_t> describedCount_{0};
};

thread_local ClassID FinalizationMonitor::tlDeferred_[FinalizationMonitor::kDeferred];
thread_local int FinalizationMonitor::tlDeferredCount_ = 0;

}  // namespace

DOCFIX_DEFINE_PROFILER(FinalizationMonitor)
