// gc_census.cpp -- garbage-collection statistics: per collection the generations collected, the reason,
// the generation sizes at start and finish, objects allocated per class, root kinds, and GC handles.
//
// What it does:
//   * Initialize QueryInterfaces the IUnknown it is given for ICorProfilerInfo2 (GetGenerationBounds and
//     GetClassIDInfo2 are ICorProfilerInfo2 methods), asks for COR_PRF_MONITOR_GC only, and fails
//     Initialize with the failing HRESULT (releasing what it had obtained).
//   * GarbageCollectionStarted: records which generations are collected and the reason, and the size of
//     each generation (sum of rangeLength per generation from GetGenerationBounds).
//   * ObjectsAllocatedByClass: adds the per-ClassID counts to a table for the current collection.  Only
//     the ClassIDs are stored; nothing is asked of the runtime in this callback.
//   * RootReferences2: counts roots by COR_PRF_GC_ROOT_KIND and by COR_PRF_GC_ROOT_FLAGS bit, and null
//     roots.  The ObjectIDs are never inspected.
//   * HandleCreated / HandleDestroyed: counters.
//   * GarbageCollectionFinished: generation sizes again (GetGenerationBounds), then the class names of the
//     ClassIDs reported by ObjectsAllocatedByClass during this collection (IsArrayClass,
//     GetClassIDInfo2 -> GetModuleMetaData -> IMetaDataImport::GetTypeDefProps), folded into a by-name
//     table.  Names are resolved per collection so a ClassID that is later reused cannot be misnamed.
//   * Shutdown: prints totals, the last few collections, and the ten most allocated classes to stderr,
//     then releases the ICorProfilerInfo2 pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown interface that
//     the profiler must query for an ICorProfilerInfo interface pointer."
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_GC "Controls the GarbageCollectionStarted,
//     GarbageCollectionFinished, MovedReferences, ..., ObjectsAllocatedByClass, RootReferences,
//     RootReferences2, HandleCreated, HandleDestroyed, and FinalizeableObjectQueued callbacks" -- every
//     callback used here; no other flag is set.  ("When COR_PRF_MONITOR_GC is allocated, concurrent
//     garbage collection is turned off.")
//   * ICorProfilerCallback2::GarbageCollectionStarted -- generationCollected is "indexed by a value of the
//     COR_PRF_GC_GENERATION enumeration"; cGenerations is "The total number of entries", so the array is
//     read only up to cGenerations (a runtime may report more generations than the four documented ones).
//     "All callbacks that pertain to this garbage collection will occur between the
//     GarbageCollectionStarted callback and the corresponding ICorProfilerCallback2::GarbageCollectionFinished
//     callback. These callbacks need not occur on the same thread." -> shared state behind a mutex.
//   * ICorProfilerInfo2::GetGenerationBounds -- "can be called from any profiler callback, provided that
//     garbage collection is not in progress" and "the most interesting places to call GetGenerationBounds
//     are in ICorProfilerCallback2::GarbageCollectionStarted and ICorProfilerCallback2::GarbageCollectionFinished."
//     It is called there and nowhere else.  "This function uses caller-allocated buffers": the buffer is
//     grown to *pcObjectRanges and the call repeated when the total did not fit ("Caller-Allocated
//     Buffers": "If pcBufferMax points to a value that is larger than cBufferSizeStart, allocate a larger
//     InfoBuffer buffer ... and call the method again").
//   * ICorProfilerCallback::ObjectsAllocatedByClass -- "The classIds array may contain one or more null
//     entries if the corresponding cObjects array has types that are unloading." (counted as
//     "<unloading type>"); "The numbers reported by ObjectsAllocatedByClass are only estimates." and it
//     "will not report objects allocated in the large object heap" (said in the summary).
//   * ICorProfilerCallback2::RootReferences2 -- "The object IDs returned by RootReferences2 are not valid
//     during the callback itself ... profilers should not attempt to inspect objects during a
//     RootReferences2 call." and "It is possible for entries in rootRefIds to be zero, which implies that
//     the corresponding root reference is null".  Only kinds and flags are counted.
//   * ICorProfilerCallback2::GarbageCollectionFinished -- "Notifies the profiler that garbage collection has
//     completed and all garbage collection callbacks have been issued for it." -> the lazily resolved class
//     names and the after-sizes are taken there, not inside ObjectsAllocatedByClass.
//   * ICorProfilerInfo::GetModuleMetaData -- S_FALSE with a null *ppOut for modules without metadata; every
//     interface obtained is Released.  ICorProfilerInfo2::GetClassIDInfo2 -- two-pass for typeArgs.
//     IMetaDataImport::GetTypeDefProps -- buffer in wide characters, grown and retried when *pchTypeDef
//     does not fit.
//   * The metadata pages do not say which [out] parameters of GetTypeDefProps / GetMethodProps may be null,
//     so every [out] parameter is given a real location (only the name is used).
//   * Profiling Overview, "Notification Threads" -- "these callbacks are not serialized" -> one mutex for
//     the tables, atomics for counters; the runtime is never called with the mutex held.
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call from Shutdown on; callbacks after
//     Shutdown return at once.
#include <algorithm>
#include <cinttypes>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// COR_PRF_GC_REASON
constexpr COR_PRF_GC_REASON kGcInduced = 1;
// COR_PRF_GC_ROOT_KIND
constexpr COR_PRF_GC_ROOT_KIND kRootOther = 0, kRootStack = 1, kRootFinalizer = 2, kRootHandle = 3;
// COR_PRF_GC_ROOT_FLAGS
constexpr COR_PRF_GC_ROOT_FLAGS kRootPinning = 0x1, kRootWeakRef = 0x2, kRootInterior = 0x4, kRootRefCounted = 0x8;

// Generation slots: COR_PRF_GC_GEN_0..2, COR_PRF_GC_LARGE_OBJECT_HEAP (3), and one more slot for a
// generation value the documents do not list (newer runtimes report a fifth heap); anything above is
// lumped into the last slot.
constexpr int kGenSlots = 6;
const char* const kGenNames[kGenSlots] = {"gen0", "gen1", "gen2", "loh", "gen4", "other"};

int gen_slot(long g) { return (g >= 0 && g < kGenSlots - 1) ? static_cast<int>(g) : kGenSlots - 1; }

template <class Call>
bool read_md_name(Call call, std::string& name) {
    std::vector<WCHAR> buf(128, 0);
    for (int attempt = 0; attempt < 4; ++attempt) {
        ULONG pch = 0;
        HRESULT hr = call(buf.data(), static_cast<ULONG>(buf.size()), &pch);
        if (failed(hr)) return false;
        if (pch < buf.size()) {
            name = to_utf8(buf.data(), buf.size());
            return true;
        }
        buf.assign(static_cast<size_t>(pch) + 1, 0);
    }
    return false;
}

template <class T>
struct Released {
    T* p = nullptr;
    Released() = default;
    Released(const Released&) = delete;
    Released& operator=(const Released&) = delete;
    ~Released() {
        if (p != nullptr) p->Release();
    }
};

std::string hex_id(const char* what, UINT_PTR id) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "<%s 0x%" PRIxPTR ">", what, static_cast<std::uintptr_t>(id));
    return buf;
}

const char* element_type_name(CorElementType t) {
    switch (t) {
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

bool typedef_name(ICorProfilerInfo* info, ModuleID mod, mdTypeDef td, std::string& name) {
    Released<IUnknown> unk;
    HRESULT hr = info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk.p);
    if (hr != S_OK || unk.p == nullptr) return false;
    auto* md = static_cast<IMetaDataImport*>(unk.p);
    return read_md_name(
        [&](WCHAR* b, ULONG cch, ULONG* pch) {
            DWORD flags = 0;
            mdToken extends = 0;
            return md->GetTypeDefProps(td, b, cch, pch, &flags, &extends);
        },
        name);
}

std::string class_name(ICorProfilerInfo2* info, ClassID cls, int depth = 0) {
    if (cls == 0) return "<unloading type>";
    if (depth > 4) return "...";

    CorElementType elem = 0;
    ClassID elemClass = 0;
    ULONG rank = 0;
    if (info->IsArrayClass(cls, &elem, &elemClass, &rank) == S_OK) {
        std::string base;
        if (elemClass != 0) {
            base = class_name(info, elemClass, depth + 1);
        } else if (const char* n = element_type_name(elem)) {
            base = n;
        } else {
            base = hex_id("element type", elem);
        }
        std::string dims = "[";
        for (ULONG i = 1; i < rank; ++i) dims += ',';
        return base + dims + "]";
    }

    ModuleID mod = 0;
    mdTypeDef td = 0;
    ClassID parent = 0;
    ULONG32 nArgs = 0;
    std::vector<ClassID> args;
    HRESULT hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr);
    if (succeeded(hr) && nArgs > 0) {
        args.resize(nArgs);
        ULONG32 got = 0;
        hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data());
        if (succeeded(hr)) args.resize(std::min<ULONG32>(got, nArgs));
    }
    if (failed(hr)) {
        args.clear();
        hr = info->GetClassIDInfo(cls, &mod, &td);
        if (failed(hr)) return hex_id("class", cls);
    }

    std::string name;
    if (td == 0 || !typedef_name(info, mod, td, name)) return hex_id("class", cls);
    if (!args.empty()) {
        name += '<';
        for (size_t i = 0; i < args.size(); ++i) {
            if (i) name += ',';
            name += class_name(info, args[i], depth + 1);
        }
        name += '>';
    }
    return name;
}

struct GenSizes {
    bool ok = false;
    HRESULT hr = S_OK;
    std::uint64_t bytes[kGenSlots] = {};
};

struct GcRecord {
    std::uint64_t index = 0;
    unsigned collected_mask = 0;  // bit g: generation g collected
    int generations = 0;          // cGenerations
    COR_PRF_GC_REASON reason = 0;
    GenSizes before;
    GenSizes after;
    std::uint64_t objects_reported = 0;  // sum of ObjectsAllocatedByClass counts in this GC
    std::uint64_t roots = 0;
    bool finished = false;
};

}  // namespace

class GcCensus : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo2* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[gc_census] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[gc_census] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        ICorProfilerInfo2* info = live_info();
        if (info == nullptr) return S_OK;

        GcRecord rec;
        rec.generations = cGenerations;
        rec.reason = reason;
        for (int g = 0; generationCollected != nullptr && g < cGenerations; ++g) {
            if (generationCollected[g]) rec.collected_mask |= 1u << gen_slot(g);
        }
        rec.before = generation_sizes(info);  // documented as a good place to call it

        std::lock_guard<std::mutex> g(mu_);
        rec.index = ++gc_count_;
        if (reason == kGcInduced) ++induced_;
        for (int s = 0; s < kGenSlots; ++s) {
            if (rec.collected_mask & (1u << s)) ++collected_[s];
        }
        current_ = rec;
        in_gc_ = true;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectsAllocatedByClass(ULONG cClassCount, ClassID* classIds, ULONG* cObjects) override {
        if (shutdown_.load() || classIds == nullptr || cObjects == nullptr) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < cClassCount; ++i) {
            pending_[classIds[i]] += cObjects[i];  // 0 = unloading type, resolved as such
            current_.objects_reported += cObjects[i];
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG cRootRefs, ObjectID* rootRefIds, COR_PRF_GC_ROOT_KIND* rootKinds,
                                              COR_PRF_GC_ROOT_FLAGS* rootFlags, UINT_PTR*) override {
        if (shutdown_.load()) return S_OK;
        std::uint64_t kinds[5] = {};
        std::uint64_t pinning = 0, weak = 0, interior = 0, refcounted = 0, nulls = 0;
        for (ULONG i = 0; i < cRootRefs; ++i) {
            if (rootKinds != nullptr) {
                switch (rootKinds[i]) {
                    case kRootStack: ++kinds[1]; break;
                    case kRootFinalizer: ++kinds[2]; break;
                    case kRootHandle: ++kinds[3]; break;
                    case kRootOther: ++kinds[0]; break;
                    default: ++kinds[4]; break;
                }
            }
            if (rootFlags != nullptr) {
                COR_PRF_GC_ROOT_FLAGS f = rootFlags[i];
                if (f & kRootPinning) ++pinning;
                if (f & kRootWeakRef) ++weak;
                if (f & kRootInterior) ++interior;
                if (f & kRootRefCounted) ++refcounted;
            }
            if (rootRefIds != nullptr && rootRefIds[i] == 0) ++nulls;  // never dereferenced
        }
        std::lock_guard<std::mutex> g(mu_);
        for (int k = 0; k < 5; ++k) root_kinds_[k] += kinds[k];
        root_pinning_ += pinning;
        root_weak_ += weak;
        root_interior_ += interior;
        root_refcounted_ += refcounted;
        root_null_ += nulls;
        current_.roots += cRootRefs;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID, ObjectID) override {
        if (!shutdown_.load()) handles_created_.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID) override {
        if (!shutdown_.load()) handles_destroyed_.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        ICorProfilerInfo2* info = live_info();
        if (info == nullptr) return S_OK;

        GenSizes after = generation_sizes(info);  // documented as a good place to call it

        std::unordered_map<ClassID, std::uint64_t> pending;
        {
            std::lock_guard<std::mutex> g(mu_);
            pending.swap(pending_);
        }
        // The collection is over and all of its callbacks have been issued: name the classes now.
        std::vector<std::pair<std::string, std::uint64_t>> named;
        named.reserve(pending.size());
        for (const auto& [cls, n] : pending) named.emplace_back(class_name(info, cls), n);

        std::lock_guard<std::mutex> g(mu_);
        for (auto& [name, n] : named) allocated_by_name_[name] += n;
        if (in_gc_) {
            current_.after = after;
            current_.finished = true;
            history_.push_back(current_);
            if (history_.size() > kHistory) history_.pop_front();
            in_gc_ = false;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        ICorProfilerInfo2* info = info_.exchange(nullptr);

        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr, "[gc_census] shutdown: gcs=%" PRIu64 " induced=%" PRIu64 " collected:", gc_count_, induced_);
        for (int s = 0; s < kGenSlots; ++s) {
            if (collected_[s]) std::fprintf(stderr, " %s=%" PRIu64, kGenNames[s], collected_[s]);
        }
        std::fprintf(stderr, "\n");
        std::fprintf(stderr,
                     "[gc_census]   roots: stack=%" PRIu64 " finalizer=%" PRIu64 " handle=%" PRIu64 " other=%" PRIu64
                     " unlisted-kind=%" PRIu64 " null=%" PRIu64 " | pinning=%" PRIu64 " weak=%" PRIu64
                     " interior=%" PRIu64 " refcounted=%" PRIu64 "\n",
                     root_kinds_[1], root_kinds_[2], root_kinds_[3], root_kinds_[0], root_kinds_[4], root_null_,
                     root_pinning_, root_weak_, root_interior_, root_refcounted_);
        std::uint64_t created = handles_created_.load(), destroyed = handles_destroyed_.load();
        std::fprintf(stderr, "[gc_census]   handles: created=%" PRIu64 " destroyed=%" PRIu64 " net=%" PRId64 "\n", created,
                     destroyed, static_cast<std::int64_t>(created - destroyed));

        for (const GcRecord& r : history_) {
            std::fprintf(stderr, "[gc_census]   gc#%" PRIu64 " %s gens=", r.index, r.reason == kGcInduced ? "induced" : "other  ");
            for (int s = 0; s < kGenSlots; ++s) {
                if (r.collected_mask & (1u << s)) std::fprintf(stderr, "%s,", kGenNames[s]);
            }
            std::fprintf(stderr, " objects(est.)=%" PRIu64 " roots=%" PRIu64 " KB before->after:", r.objects_reported, r.roots);
            for (int s = 0; s < kGenSlots; ++s) {
                std::uint64_t b = r.before.bytes[s], a = r.after.bytes[s];
                if (b == 0 && a == 0) continue;
                std::fprintf(stderr, " %s %" PRIu64 "->%" PRIu64, kGenNames[s], b / 1024, a / 1024);
            }
            if (!r.before.ok) std::fprintf(stderr, " (bounds at start failed 0x%08x)", (unsigned)r.before.hr);
            if (!r.after.ok) std::fprintf(stderr, " (bounds at finish failed 0x%08x)", (unsigned)r.after.hr);
            std::fprintf(stderr, "\n");
        }

        std::vector<std::pair<std::string, std::uint64_t>> top(allocated_by_name_.begin(), allocated_by_name_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
        std::fprintf(stderr, "[gc_census]   objects allocated by class (estimates, large object heap not reported):\n");
        size_t shown = 0;
        for (const auto& [name, n] : top) {
            if (++shown > 10) break;
            std::fprintf(stderr, "[gc_census]     %10" PRIu64 "  %s\n", n, name.c_str());
        }

        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    static constexpr size_t kHistory = 8;

    ICorProfilerInfo2* live_info() const {
        if (shutdown_.load()) return nullptr;
        return info_.load();
    }

    // GetGenerationBounds with a caller-allocated buffer, grown and retried when too small.
    GenSizes generation_sizes(ICorProfilerInfo2* info) {
        GenSizes out;
        std::vector<COR_PRF_GC_GENERATION_RANGE> ranges(std::max<ULONG>(range_hint_.load(), 16));
        for (int attempt = 0; attempt < 4; ++attempt) {
            ULONG total = 0;
            out.hr = info->GetGenerationBounds(static_cast<ULONG>(ranges.size()), &total, ranges.data());
            if (failed(out.hr)) return out;
            if (total <= ranges.size()) {
                for (ULONG i = 0; i < total; ++i) out.bytes[gen_slot(ranges[i].generation)] += ranges[i].rangeLength;
                out.ok = true;
                return out;
            }
            range_hint_.store(total);
            ranges.resize(total);
        }
        return out;
    }

    std::atomic<ICorProfilerInfo2*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<ULONG> range_hint_{16};
    std::atomic<std::uint64_t> handles_created_{0};
    std::atomic<std::uint64_t> handles_destroyed_{0};

    std::mutex mu_;  // guards everything below
    std::uint64_t gc_count_ = 0;
    std::uint64_t induced_ = 0;
    std::uint64_t collected_[kGenSlots] = {};
    std::uint64_t root_kinds_[5] = {};  // other, stack, finalizer, handle, unlisted
    std::uint64_t root_pinning_ = 0, root_weak_ = 0, root_interior_ = 0, root_refcounted_ = 0, root_null_ = 0;
    bool in_gc_ = false;
    GcRecord current_;
    std::deque<GcRecord> history_;
    std::unordered_map<ClassID, std::uint64_t> pending_;  // this GC's ObjectsAllocatedByClass, unnamed
    std::unordered_map<std::string, std::uint64_t> allocated_by_name_;
};

DOCFIX_DEFINE_PROFILER(GcCensus)
