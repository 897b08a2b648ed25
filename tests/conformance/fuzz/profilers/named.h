// What the named-class fixtures share (issue 22, "Reach"): a profiler that tracks only the objects of one class
// it knows by name, as memory profilers filter on type names: at ClassLoadFinished it asks GetClassIDInfo,
// GetModuleMetaData(ofRead, IID_IMetaDataImport) and IMetaDataImport::GetTypeDefProps for the class's full
// name and compares it with kTrackedClass (a string constant of its own read-only data); it remaps the
// tracked ObjectIDs at MovedReferences2 and inspects each after GarbageCollectionFinished (MR2-10: allowed
// again there). ``error`` is added to every remapped ObjectID: 8 is the planted bug (MR2-08: new start plus
// the offset within the range, nothing more), found as MR2-17 when the moved object is inspected.
#pragma once

#include <cstring>
#include <vector>

#include "fixture.h"

namespace fixture {

inline constexpr char kTrackedClass[] = "Contoso.Orders.OrderLine";

template <ObjectID error>
class NamedTracker : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED |
                                  COR_PRF_ENABLE_OBJECT_ALLOCATED);
    }
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT status) override {
        if (status == S_OK && is_tracked(cls)) tracked_.push_back(cls);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID id, ClassID cls) override {
        for (ClassID c : tracked_)
            if (c == cls) ids_.push_back(id);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL[], COR_PRF_GC_REASON) override {
        moved_.assign(ids_.size(), false);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID olds[], ObjectID news[], SIZE_T lens[]) override {
        if (moved_.size() != ids_.size()) moved_.assign(ids_.size(), false);
        for (std::size_t k = 0; k < ids_.size(); ++k) {
            if (moved_[k]) continue;  // remapped by an earlier batch of this GC
            const ObjectID id = ids_[k];
            for (ULONG i = 0; i < n; ++i) {
                if (id >= olds[i] && id - olds[i] < lens[i]) {
                    ids_[k] = news[i] + (id - olds[i]) + error;
                    moved_[k] = true;
                    break;
                }
            }
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        moved_.clear();
        for (ObjectID id : ids_) {
            ClassID cls = 0;
            info->GetClassFromObject(id, &cls);
        }
        return S_OK;
    }

 private:
    bool is_tracked(ClassID cls) {
        ModuleID module = 0;
        mdTypeDef td = 0;
        if (info->GetClassIDInfo(cls, &module, &td) != S_OK) return false;
        IUnknown* unk = nullptr;
        if (info->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk) != S_OK || !unk) return false;
        auto* import = static_cast<IMetaDataImport*>(unk);
        WCHAR name[256] = {};
        ULONG len = 0;
        const HRESULT hr = import->GetTypeDefProps(td, name, 256, &len, nullptr, nullptr);
        import->Release();
        if (hr != S_OK) return false;
        const std::size_t want = sizeof kTrackedClass - 1;
        if (len != want + 1) return false;  // the count holds the NUL
        for (std::size_t i = 0; i < want; ++i)
            if (name[i] != static_cast<WCHAR>(kTrackedClass[i])) return false;
        return true;
    }
    std::vector<ClassID> tracked_;
    std::vector<ObjectID> ids_;
    std::vector<bool> moved_;
};

}  // namespace fixture
