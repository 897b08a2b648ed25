// shutdown_name_resolution.cpp -- "finalizer pressure" profiler, variant with ONE API-contract bug.
//
// What it does
//   Counts allocations (ObjectAllocated) and finalization-queue insertions
//   (FinalizeableObjectQueued, split critical / normal) per ClassID, keeps a per-GC history of how
//   many objects each collection queued, and at the end prints a pressure report: the classes
//   finalized most, the top allocators, and for each listed class its name, kind and layout
//   (IsArrayClass, GetClassIDInfo2 double pass, IMetaDataImport::GetTypeDefProps,
//   GetClassLayout double pass, GetStringLayout2, GetBoxClassLayout).
//
//   To stay cheap on the hot paths it resolves NOTHING while the application runs: callbacks only
//   store ClassIDs and counters.  All naming/layout work is done once, when the report is built --
//   in ICorProfilerCallback::Shutdown.  That is the bug.
//
// THE BUG (one): class names and layouts are resolved from ICorProfilerCallback::Shutdown, i.e.
//   ICorProfilerInfo methods (IsArrayClass, GetClassIDInfo2, GetModuleMetaData, GetClassLayout,
//   GetStringLayout2, GetBoxClassLayout) are called after Shutdown was called.
//   ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//   ICorProfilerInfo interface after the Shutdown method is called."  The line is marked BUG below.
//
// Everything else follows the documentation:
//   * Initialize: "The Initialize call is the only opportunity to enable (or disable) callbacks that
//     are immutable." -- COR_PRF_ENABLE_OBJECT_ALLOCATED is set there (SetEventMask2, low word).
//   * "Garbage Collection in the Profiling API": "When the user specifies the COR_PRF_MONITOR_GC flag,
//     all garbage collection events except for ICorProfilerCallback::ObjectAllocated events will be
//     raised in the profiler. ObjectAllocated events are explicitly controlled by the
//     COR_PRF_MONITOR_OBJECT_ALLOCATED flag for performance reasons."
//   * FinalizeableObjectQueued: the objectID is turned into a ClassID inside the callback and never
//     kept ("After the profiler has returned from this callback [GarbageCollectionStarted], the
//     profiler should consider all object IDs to be invalid until it receives a
//     ICorProfilerCallback2::GarbageCollectionFinished callback."); COR_PRF_FINALIZER_CRITICAL = 0x1
//     "The finalizer is critical."
//   * ObjectAllocated: "The classId parameter can refer to a class in managed code that has not been
//     loaded yet." -- the classId is only counted there, never inspected.
//   * Caller-allocated buffers (GetClassIDInfo2 type arguments, GetClassLayout field offsets,
//     GetTypeDefProps names): "Double-pass method: ... First call with a zero-length InfoBuffer
//     parameter to obtain the correct buffer size." / "If InfoBuffer is null, cBufferSizeStart must
//     be 0."
//   * GetClassLayout: "If you use GetClassLayout with string classes, the method will fail with error
//     code E_INVALIDARG. ... GetClassLayout will also fail when called with an array class." -- not
//     called for either; IsArrayClass "returns an S_OK HRESULT ... Otherwise, it returns S_FALSE."
//   * GetModuleMetaData: "Some modules (such as resource modules) have no metadata. In those cases,
//     GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."
//
// Declared here: COR_PRF_FINALIZER_CRITICAL (0x1), CorTypeAttr nested-visibility bits (cor.h).
#include "common.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

using namespace docfix;

namespace {

struct Counters {
    std::uint64_t allocated = 0;
    std::uint64_t finalizable = 0;  // queued, all
    std::uint64_t critical = 0;     // queued with COR_PRF_FINALIZER_CRITICAL
};

struct Resolved {
    std::string name = "?";
    std::string shape;  // kind/layout text
    HRESULT firstFailure = S_OK;
};

class FinalizerPressure : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* pUnk) override {
        if (pUnk == nullptr) return E_INVALIDARG;
        if (failed(pUnk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&prof_))) || prof_ == nullptr) {
            std::fprintf(stderr, "[finpress] ICorProfilerInfo5 unavailable\n");
            prof_ = nullptr;
            return E_FAIL;
        }
        HRESULT hr = prof_->SetEventMask2(COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED |
                                              COR_PRF_ENABLE_OBJECT_ALLOCATED,
                                          COR_PRF_HIGH_MONITOR_NONE);
        if (failed(hr)) {
            std::fprintf(stderr, "[finpress] SetEventMask2 failed 0x%08x\n", (unsigned)hr);
            prof_->Release();
            prof_ = nullptr;
            return E_FAIL;
        }
        std::fprintf(stderr, "[finpress] attached\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID classId) override {
        if (done_) return S_OK;
        std::lock_guard<std::mutex> lock(lock_);
        ++table_[classId].allocated;
        ++allocations_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        if (done_) return S_OK;
        std::lock_guard<std::mutex> lock(lock_);
        history_.push_back(0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD finalizerFlags, ObjectID objectID) override {
        if (done_ || prof_ == nullptr) return S_OK;
        ClassID cls = 0;
        HRESULT hr = prof_->GetClassFromObject(objectID, &cls);  // objectID used only inside the callback
        std::lock_guard<std::mutex> lock(lock_);
        if (failed(hr)) {
            ++orphans_;
            return S_OK;
        }
        Counters& c = table_[cls];
        ++c.finalizable;
        if (finalizerFlags & 0x1 /* COR_PRF_FINALIZER_CRITICAL */) ++c.critical;
        if (!history_.empty()) ++history_.back();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        done_ = true;
        std::vector<std::pair<ClassID, Counters>> rows;
        std::vector<std::uint64_t> hist;
        std::uint64_t allocs, orphans;
        {
            std::lock_guard<std::mutex> lock(lock_);
            rows.assign(table_.begin(), table_.end());
            hist = history_;
            allocs = allocations_;
            orphans = orphans_;
        }
        std::uint64_t queued = 0, critical = 0, peak = 0, gcsQueuing = 0;
        for (auto& r : rows) {
            queued += r.second.finalizable;
            critical += r.second.critical;
        }
        for (auto h : hist) {
            peak = std::max(peak, h);
            if (h) ++gcsQueuing;
        }

        // Report selection: top finalized classes, then top allocators.
        std::vector<std::pair<ClassID, Counters>> fin, top;
        for (auto& r : rows)
            if (r.second.finalizable) fin.push_back(r);
        std::sort(fin.begin(), fin.end(), [](auto& a, auto& b) { return a.second.finalizable > b.second.finalizable; });
        if (fin.size() > 8) fin.resize(8);
        top = rows;
        std::sort(top.begin(), top.end(), [](auto& a, auto& b) { return a.second.allocated > b.second.allocated; });
        if (top.size() > 5) top.resize(5);

        // Resolve names/layouts for the classes that will be printed.
        std::map<ClassID, Resolved> names;
        for (auto& r : fin) names[r.first];
        for (auto& r : top) names[r.first];
        std::size_t ok = 0;
        for (auto& n : names) {
            // ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
            // ICorProfilerInfo interface after the Shutdown method is called."
            n.second = Resolve(n.first);  // BUG: ICorProfilerInfo methods called from Shutdown (quote above)
            if (n.second.firstFailure == S_OK) ++ok;
        }

        std::fprintf(stderr,
                     "[finpress] report: gcs=%zu allocations=%llu queued=%llu critical=%llu gcs-that-queued=%llu "
                     "peak-per-gc=%llu unresolved-objects=%llu names-resolved-at-shutdown=%zu/%zu\n",
                     hist.size(), (unsigned long long)allocs, (unsigned long long)queued,
                     (unsigned long long)critical, (unsigned long long)gcsQueuing, (unsigned long long)peak,
                     (unsigned long long)orphans, ok, names.size());
        for (auto& r : fin) {
            const Resolved& n = names[r.first];
            std::fprintf(stderr, "[finpress]   finalized %-46s x%llu (critical %llu, of %llu allocated) %s\n",
                         n.name.c_str(), (unsigned long long)r.second.finalizable,
                         (unsigned long long)r.second.critical, (unsigned long long)r.second.allocated,
                         n.shape.c_str());
        }
        for (auto& r : top) {
            const Resolved& n = names[r.first];
            std::fprintf(stderr, "[finpress]   allocated %-46s x%llu %s\n", n.name.c_str(),
                         (unsigned long long)r.second.allocated, n.shape.c_str());
        }
        for (auto& n : names)
            if (n.second.firstFailure != S_OK)
                std::fprintf(stderr, "[finpress]   ClassID 0x%llx: resolution failed 0x%08x\n",
                             (unsigned long long)n.first, (unsigned)n.second.firstFailure);

        if (prof_ != nullptr) {
            prof_->Release();
            prof_ = nullptr;
        }
        return S_OK;
    }

private:
    static void Note(Resolved& r, HRESULT hr) {
        if (failed(hr) && r.firstFailure == S_OK) r.firstFailure = hr;
    }

    std::string TypeName(ModuleID module, mdTypeDef td, Resolved& out, int depth = 0) {
        IUnknown* unk = nullptr;
        HRESULT hr = prof_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk);
        if (hr != S_OK || unk == nullptr) {
            Note(out, failed(hr) ? hr : E_FAIL);
            return "?";
        }
        auto* md = static_cast<IMetaDataImport*>(unk);
        ULONG need = 0;
        DWORD attrs = 0;
        mdToken base = 0;
        std::string name = "?";
        hr = md->GetTypeDefProps(td, nullptr, 0, &need, &attrs, &base);  // size query
        if (succeeded(hr) && need > 0) {
            std::vector<WCHAR> buf(need);
            hr = md->GetTypeDefProps(td, buf.data(), need, &need, &attrs, &base);
            if (succeeded(hr)) name = to_utf8(buf.data(), buf.size());
        }
        Note(out, hr);
        DWORD vis = attrs & 0x7;  // tdVisibilityMask; 2..7 are the nested visibilities
        if (succeeded(hr) && vis >= 0x2 && depth < 8) {
            mdTypeDef outer = 0;
            if (succeeded(md->GetNestedClassProps(td, &outer)) && outer != 0)
                name = TypeName(module, outer, out, depth + 1) + "+" + name;
        }
        md->Release();
        return name;
    }

    std::string ClassName(ClassID cls, Resolved& out, int depth = 0) {
        if (cls == 0 || depth > 6) return "?";
        CorElementType elemType = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        HRESULT hr = prof_->IsArrayClass(cls, &elemType, &elem, &rank);
        Note(out, hr);
        if (hr == S_OK) {
            std::string e = elem ? ClassName(elem, out, depth + 1) : "prim#" + std::to_string(elemType);
            return e + "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 count = 0;
        hr = prof_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &count, nullptr);
        Note(out, hr);
        if (failed(hr)) return "?";
        std::string name = TypeName(mod, td, out);
        if (count > 0) {
            std::vector<ClassID> targs(count);
            ULONG32 got = 0;
            hr = prof_->GetClassIDInfo2(cls, &mod, &td, &parent, count, &got, targs.data());
            Note(out, hr);
            if (succeeded(hr)) {
                name += "<";
                for (ULONG32 i = 0; i < got && i < count; ++i) name += (i ? "," : "") + ClassName(targs[i], out, depth + 1);
                name += ">";
            }
        }
        return name;
    }

    Resolved Resolve(ClassID cls) {
        Resolved r;
        if (prof_ == nullptr) return r;
        r.name = ClassName(cls, r);
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (prof_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {
            r.shape = "(array, rank " + std::to_string(rank) + ")";
            return r;
        }
        if (r.name == "System.String") {
            ULONG lenOff = 0, bufOff = 0;
            HRESULT hr = prof_->GetStringLayout2(&lenOff, &bufOff);
            Note(r, hr);
            r.shape = "(string, length@" + std::to_string(lenOff) + " chars@" + std::to_string(bufOff) + ")";
            return r;
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 n = 0;
        std::string parentName;
        if (succeeded(prof_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &n, nullptr)) && parent != 0)
            parentName = ClassName(parent, r, 1);
        ULONG fields = 0, size = 0;
        HRESULT hr = prof_->GetClassLayout(cls, nullptr, 0, &fields, &size);
        Note(r, hr);
        if (succeeded(hr) && fields > 0) {
            std::vector<COR_FIELD_OFFSET> offs(fields);
            hr = prof_->GetClassLayout(cls, offs.data(), fields, &fields, &size);
            Note(r, hr);
        }
        bool valueType = (parentName == "System.ValueType" || parentName == "System.Enum") && r.name != "System.Enum";
        r.shape = std::string("(") + (valueType ? "struct" : "class") + ", " + std::to_string(size) + " bytes, " +
                  std::to_string(fields) + " own fields, base " + (parentName.empty() ? "-" : parentName);
        if (valueType) {
            ULONG32 boxOff = 0;
            hr = prof_->GetBoxClassLayout(cls, &boxOff);
            Note(r, hr);
            r.shape += ", boxed value @" + std::to_string(boxOff);
        }
        r.shape += ")";
        return r;
    }

    ICorProfilerInfo5* prof_ = nullptr;
    std::atomic<bool> done_{false};
    std::mutex lock_;
    std::map<ClassID, Counters> table_;
    std::vector<std::uint64_t> history_;
    std::uint64_t allocations_ = 0;
    std::uint64_t orphans_ = 0;
};

}  // namespace

DOCFIX_DEFINE_PROFILER(FinalizerPressure)
