// objrefs_inspector.cpp -- heap-graph ("heap snapshot") profiler that labels every reference edge
// with the classes of both ends, the way a heap-snapshot feature builds a type graph.
//
// DELIBERATELY FAULTY.  Inside ICorProfilerCallback::ObjectReferences it calls
// ICorProfilerInfo::GetClassFromObject on the referencing object and on every referenced object,
// which the documentation forbids.  The ICorProfilerCallback::ObjectReferences page says:
//
//   "The object IDs returned by ObjectReferences are not valid during the callback itself,
//    because the garbage collection might be in the middle of moving objects. Therefore,
//    profilers must not attempt to inspect objects during an ObjectReferences call. When
//    ICorProfilerCallback2::GarbageCollectionFinished is called, the garbage collection is
//    complete and inspection can be safely done."
//
// This profiler breaks the sentence "profilers must not attempt to inspect objects during an
// ObjectReferences call" on purpose (the correct design would record the IDs and the classId
// argument, and label edges only after GarbageCollectionFinished -- or simply use the classId the
// callback already provides for the referencing object).
//
// Other pages followed:
//   * COR_PRF_MONITOR enumeration: COR_PRF_MONITOR_GC enables ObjectReferences / RootReferences /
//     GarbageCollectionStarted / GarbageCollectionFinished.
//   * ObjectReferences: "The ObjectReferences method is called for each object remaining in the
//     heap after a garbage collection has completed."  "A null ClassId indicates that objectId has
//     a type that is unloading."
//   * GarbageCollectionFinished: per-GC statistics are printed there; class names are resolved
//     there from ClassIDs (GetClassIDInfo2 + IMetaDataImport::GetTypeDefProps), which needs no
//     object access.
//   * Shutdown: no ICorProfilerInfo calls except the final Release.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace objrefs {

struct PairHash {
    size_t operator()(const std::pair<ClassID, ClassID>& p) const {
        return std::hash<ClassID>()(p.first) * 1000003u ^ std::hash<ClassID>()(p.second);
    }
};

class ObjRefsInspector : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[objrefs_inspector] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        edges_.clear();
        objects_ = refs_ = classAgree_ = classDisagree_ = lookupFailures_ = 0;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID objectId, ClassID classId, ULONG cRefs,
                                               ObjectID* refIds) override {
        if (shutdown_.load()) return S_OK;
        // FORBIDDEN by the ObjectReferences page: inspecting objects during this callback.
        ClassID srcClass = 0;
        HRESULT hr = info_->GetClassFromObject(objectId, &srcClass);
        std::lock_guard<std::mutex> g(mu_);
        ++objects_;
        if (failed(hr)) {
            ++lookupFailures_;
            srcClass = classId;
        } else if (srcClass == classId) {
            ++classAgree_;
        } else {
            ++classDisagree_;
        }
        for (ULONG i = 0; i < cRefs; ++i) {
            if (refIds[i] == 0) continue;
            ClassID dstClass = 0;
            if (failed(info_->GetClassFromObject(refIds[i], &dstClass))) {  // FORBIDDEN as well
                ++lookupFailures_;
                continue;
            }
            ++refs_;
            ++edges_[std::make_pair(srcClass, dstClass)];
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        std::vector<std::pair<std::pair<ClassID, ClassID>, unsigned long>> top;
        unsigned long objects, refs, agree, disagree, fails;
        size_t pairs;
        {
            std::lock_guard<std::mutex> g(mu_);
            top.assign(edges_.begin(), edges_.end());
            objects = objects_;
            refs = refs_;
            agree = classAgree_;
            disagree = classDisagree_;
            fails = lookupFailures_;
            pairs = edges_.size();
            ++gcs_;
            totalObjects_ += objects;
            totalRefs_ += refs;
        }
        if (objects == 0) return S_OK;
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best = "-";
        if (!top.empty())
            best = NameOf(top[0].first.first) + " -> " + NameOf(top[0].first.second) + " x" +
                   std::to_string(top[0].second);
        std::fprintf(stderr,
                     "[objrefs_inspector] gc#%lu: objects=%lu edges=%lu type_pairs=%zu src_class_agree=%lu "
                     "disagree=%lu lookup_failures=%lu top_edge=%s\n",
                     gcs_, objects, refs, pairs, agree, disagree, fails, best.c_str());
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::fprintf(stderr, "[objrefs_inspector] summary: gcs=%lu objects=%lu labelled_edges=%lu\n", gcs_,
                     totalObjects_, totalRefs_);
        if (info_ != nullptr) info_->Release();  // pointer kept: racing callbacks bail out on shutdown_
        return S_OK;
    }

private:
    std::string NameOf(ClassID cls) {
        if (cls == 0) return "<null>";
        CorElementType elem = 0;
        ClassID elemClass = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &elem, &elemClass, &rank) == S_OK)
            return (elemClass != 0 ? NameOf(elemClass) : "elem" + std::to_string(elem)) + "[]";
        ModuleID module = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 n = 0;
        if (failed(info_->GetClassIDInfo2(cls, &module, &td, &parent, 0, &n, nullptr)) || module == 0) return "?";
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return "?";
        auto* md = static_cast<IMetaDataImport*>(unk);
        WCHAR name[256];
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        HRESULT hr = md->GetTypeDefProps(td, name, 256, &len, &flags, &ext);
        md->Release();
        return failed(hr) ? "?" : to_utf8(name, 256);
    }

    ICorProfilerInfo10* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::unordered_map<std::pair<ClassID, ClassID>, unsigned long, PairHash> edges_;
    unsigned long objects_ = 0, refs_ = 0, classAgree_ = 0, classDisagree_ = 0, lookupFailures_ = 0;
    unsigned long gcs_ = 0, totalObjects_ = 0, totalRefs_ = 0;
};

}  // namespace objrefs

DOCFIX_DEFINE_PROFILER(objrefs::ObjRefsInspector)
