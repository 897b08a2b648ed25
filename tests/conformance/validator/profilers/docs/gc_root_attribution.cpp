// gc_root_attribution.cpp -- attributes what keeps the heap alive to classes, one GC at a time.
//
// What it does: with COR_PRF_MONITOR_GC, for every GC it records
//   * the live heap and its edges from ObjectReferences, and from them each class's fan-in (how many
//     references point at its instances) -- "who is referenced most";
//   * roots by COR_PRF_GC_ROOT_KIND from RootReferences2, and for handle roots the class of the object
//     the handle holds ("which classes are held by GC handles");
//   * dependent pairs from ConditionalWeakTableElementReferences (pairs, distinct dependent handles, and
//     the classes of the values kept alive by their keys);
//   * objects queued for finalization (FinalizeableObjectQueued) and their classes;
//   * allocation volume per class from ObjectsAllocatedByClass;
//   * GC handle churn from HandleCreated / HandleDestroyed (created, destroyed, peak live).
// Classes are named (GetClassIDInfo2 + IMetaDataImport) at GarbageCollectionFinished.  Shutdown prints
// a summary beginning "gc_root_attribution: gcs=<n>" to stderr and only Releases the info pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * COR_PRF_MONITOR: COR_PRF_MONITOR_GC controls "... ObjectReferences, ObjectsAllocatedByClass,
//     RootReferences, RootReferences2, HandleCreated, HandleDestroyed, and FinalizeableObjectQueued".
//   * ObjectReferences: "called for each object remaining in the heap after a garbage collection has
//     completed"; "profilers must not attempt to inspect objects during an ObjectReferences call";
//     "A null ClassId indicates that objectId has a type that is unloading."
//   * ObjectsAllocatedByClass: "The numbers reported by ObjectsAllocatedByClass are only estimates.";
//     "The classIds array may contain one or more null entries if the corresponding cObjects array has
//     types that are unloading."; "will not report objects allocated in the large object heap."
//   * ConditionalWeakTableElementReferences: "(keyRefIds[i] keeps valueRefIds[i] alive.)"; "profilers
//     should not attempt to inspect objects during a ConditionalWeakTableElementReferences call. At
//     GarbageCollectionFinished, all objects have been moved to their new locations, and inspection may
//     be done."
//   * RootReferences2: "If the type of the root is a handle, the root ID is for the garbage collection
//     handle."; "It is possible for entries in rootRefIds to be zero".
//   * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//     locations when the GarbageCollectionFinished method is called."
//   * GetClassIDInfo2 / "Caller-Allocated Buffers": double pass ("first call ... with a zero-length
//     typeArgs buffer to obtain the correct buffer size"); IsArrayClass returns S_OK only for arrays;
//     GetModuleMetaData may return "S_FALSE, and a null in *ppOut".
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//     Shutdown method is called."
//
// Ambiguities: the documents give no order for the callbacks inside one GC and do not say whether the
// IDs of ObjectReferences, RootReferences2, ConditionalWeakTableElementReferences and
// FinalizeableObjectQueued share one address space; this file assumes they are all final IDs (those of
// "after a garbage collection has completed") and counts IDs it cannot find in the ObjectReferences set.
// Whether ObjectsAllocatedByClass is delivered for every GC, or at all, under COR_PRF_MONITOR_GC alone
// is not said; its callback count is printed.  rootIds for CWT are typed GCHandleID but described as
// values "that point to an integer"; they are only counted as distinct values.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using namespace docfix;

namespace {
using ClassCounts = std::unordered_map<ClassID, size_t>;
const char* kKind[4] = {"other", "stack", "finalizer", "handle"};
}  // namespace

class GcRootAttribution : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) { std::fprintf(stderr, "gc_root_attribution: no ICorProfilerInfo2 (0x%08x)\n", (unsigned)hr); return hr; }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) { info_->Release(); info_ = nullptr; return hr; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        std::lock_guard<std::mutex> g(mu_);
        live_.clear(); edges_.clear(); queued_.clear(); cwtValues_.clear();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ObjectsAllocatedByClass(ULONG n, ClassID* cls, ULONG* counts) override {
        std::lock_guard<std::mutex> g(mu_);
        ++allocCallbacks_;
        for (ULONG i = 0; i < n; ++i) {
            if (cls[i] == 0) { ++allocUnloading_; continue; }
            allocated_[cls[i]] += counts[i];
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID id, ClassID cls, ULONG n, ObjectID* refs) override {
        std::lock_guard<std::mutex> g(mu_);
        live_[id] = cls;
        for (ULONG i = 0; i < n; ++i) if (refs[i] != 0) edges_.push_back(refs[i]);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG n, ObjectID* refs, COR_PRF_GC_ROOT_KIND* kinds,
                                              COR_PRF_GC_ROOT_FLAGS* flags, UINT_PTR* ids) override {
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) {
            if (refs[i] == 0) { ++nullRoots_; continue; }
            int k = (kinds[i] >= 0 && kinds[i] <= 3) ? kinds[i] : 0;
            ++roots_[k];
            if (flags[i] & 0x2) ++weakRoots_;  // COR_PRF_GC_ROOT_WEAKREF
            if (k != 3) continue;
            ClassID held = 0;
            // BUG: "Therefore, profilers should not attempt to inspect objects during a RootReferences2 call."
            HRESULT hr = info_->GetClassFromObject(refs[i], &held);
            if (succeeded(hr) && held != 0) ++handleHeld_[held]; else ++handleHeldFailed_;
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ConditionalWeakTableElementReferences(ULONG n, ObjectID* keys, ObjectID* values,
                                                                    GCHandleID* ids) override {
        std::lock_guard<std::mutex> g(mu_);
        ++cwtCallbacks_;
        for (ULONG i = 0; i < n; ++i) {
            ++cwtPairs_;
            cwtHandles_.insert(ids[i]);
            if (keys[i] != 0 && values[i] != 0) cwtValues_.push_back(values[i]);  // kept for GarbageCollectionFinished
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD fl, ObjectID id) override {
        std::lock_guard<std::mutex> g(mu_);
        ++finalQueued_;
        if (fl & 0x1) ++finalCritical_;
        queued_.push_back(id);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID, ObjectID) override {
        std::lock_guard<std::mutex> g(mu_);
        ++handlesCreated_;
        peakHandles_ = std::max(peakHandles_, handlesCreated_ - handlesDestroyed_);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID) override {
        std::lock_guard<std::mutex> g(mu_);
        ++handlesDestroyed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        std::lock_guard<std::mutex> g(mu_);
        if (shutdown_ || info_ == nullptr) return S_OK;
        ++gcs_;
        liveObjects_ = live_.size();
        for (ObjectID r : edges_) {
            auto it = live_.find(r);
            if (it != live_.end() && it->second != 0) ++fanIn_[it->second]; else ++edgesUnresolved_;
        }
        attribute(queued_, finalClasses_, finalUnmatched_);
        attribute(cwtValues_, cwtValueClasses_, cwtUnmatched_);
        // Naming now: the documented point where the heap is consistent again.
        for (const ClassCounts* m : {&fanIn_, &handleHeld_, &finalClasses_, &cwtValueClasses_, &allocated_})
            for (ClassID c : top(*m, 5)) name(c, 0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr, "gc_root_attribution: gcs=%u last_live=%zu roots", gcs_, liveObjects_);
        for (int k = 0; k < 4; ++k) std::fprintf(stderr, " %s=%zu", kKind[k], roots_[k]);
        std::fprintf(stderr, " null=%zu weak=%zu\n", nullRoots_, weakRoots_);
        std::fprintf(stderr, "gc_root_attribution: handles created=%zu destroyed=%zu peak_live=%zu held_unresolved=%zu held:%s\n",
                     handlesCreated_, handlesDestroyed_, peakHandles_, handleHeldFailed_, list(handleHeld_).c_str());
        std::fprintf(stderr, "gc_root_attribution: finalization queued=%zu critical=%zu unmatched=%zu classes:%s\n",
                     finalQueued_, finalCritical_, finalUnmatched_, list(finalClasses_).c_str());
        std::fprintf(stderr, "gc_root_attribution: cwt callbacks=%zu pairs=%zu handles=%zu unmatched=%zu values:%s\n",
                     cwtCallbacks_, cwtPairs_, cwtHandles_.size(), cwtUnmatched_, list(cwtValueClasses_).c_str());
        std::fprintf(stderr, "gc_root_attribution: allocated callbacks=%zu unloading=%zu top:%s\n", allocCallbacks_,
                     allocUnloading_, list(allocated_).c_str());
        std::fprintf(stderr, "gc_root_attribution: fan_in unresolved=%zu top:%s\n", edgesUnresolved_, list(fanIn_).c_str());
        shutdown_ = true;
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    void attribute(const std::vector<ObjectID>& ids, ClassCounts& out, size_t& unmatched) {
        for (ObjectID id : ids) {
            auto it = live_.find(id);
            if (it != live_.end() && it->second != 0) ++out[it->second]; else ++unmatched;
        }
    }
    static std::vector<ClassID> top(const ClassCounts& m, size_t n) {
        std::vector<std::pair<size_t, ClassID>> v;
        for (auto& e : m) v.push_back({e.second, e.first});
        std::sort(v.rbegin(), v.rend());
        std::vector<ClassID> out;
        for (size_t i = 0; i < v.size() && i < n; ++i) out.push_back(v[i].second);
        return out;
    }
    std::string list(const ClassCounts& m) const {
        std::string s;
        for (ClassID c : top(m, 4)) s += " " + cachedName(c) + "=" + std::to_string(m.at(c));
        return s.empty() ? " -" : s;
    }
    std::string cachedName(ClassID c) const {
        auto it = names_.find(c);
        if (it != names_.end()) return it->second;
        char b[40];
        std::snprintf(b, sizeof b, "<class 0x%zx>", (size_t)c);
        return b;
    }

    // Called only from GarbageCollectionFinished.
    std::string name(ClassID cls, int depth) {
        auto it = names_.find(cls);
        if (it != names_.end()) return it->second;
        if (cls == 0 || depth > 3) return cachedName(cls);
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {
            std::string base = elem != 0 ? name(elem, depth + 1) : "elem" + std::to_string(et);
            return names_[cls] = base + "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 nArgs = 0;
        if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr))) return cachedName(cls);
        std::vector<ClassID> args(nArgs);
        if (nArgs > 0) {
            ULONG32 got = 0;
            if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data())) || got > nArgs) args.clear();
        }
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return cachedName(cls);
        auto* md = static_cast<IMetaDataImport*>(unk);
        std::string out = typeDefName(md, td);
        mdTypeDef encl = 0;
        for (int n = 0; n < 4 && succeeded(md->GetNestedClassProps(td, &encl)) && encl != 0; ++n) {
            out = typeDefName(md, encl) + "+" + out;
            td = encl;
        }
        md->Release();
        if (!args.empty()) {
            out = out.substr(0, out.find('`')) + "<";
            for (size_t i = 0; i < args.size(); ++i) out += (i ? "," : "") + name(args[i], depth + 1);
            out += ">";
        }
        return names_[cls] = out;
    }
    static std::string typeDefName(IMetaDataImport* md, mdTypeDef td) {
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        if (failed(md->GetTypeDefProps(td, nullptr, 0, &len, &flags, &ext)) || len == 0) return "?";
        std::vector<WCHAR> buf(len + 1, 0);
        if (failed(md->GetTypeDefProps(td, buf.data(), len, &len, &flags, &ext))) return "?";
        return to_utf8(buf.data(), buf.size());
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::mutex mu_;
    bool shutdown_ = false;
    unsigned gcs_ = 0;
    std::unordered_map<ObjectID, ClassID> live_;
    std::vector<ObjectID> edges_, queued_, cwtValues_;
    std::unordered_set<GCHandleID> cwtHandles_;
    ClassCounts allocated_, fanIn_, handleHeld_, finalClasses_, cwtValueClasses_;
    std::unordered_map<ClassID, std::string> names_;
    size_t liveObjects_ = 0, roots_[4] = {}, nullRoots_ = 0, weakRoots_ = 0, handleHeldFailed_ = 0;
    size_t allocCallbacks_ = 0, allocUnloading_ = 0, edgesUnresolved_ = 0;
    size_t cwtCallbacks_ = 0, cwtPairs_ = 0, cwtUnmatched_ = 0;
    size_t finalQueued_ = 0, finalCritical_ = 0, finalUnmatched_ = 0;
    size_t handlesCreated_ = 0, handlesDestroyed_ = 0, peakHandles_ = 0;
};

DOCFIX_DEFINE_PROFILER(GcRootAttribution)
