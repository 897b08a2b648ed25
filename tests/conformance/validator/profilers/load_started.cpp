// load_started: two faults, LDS-03 and LDS-04: asks GetModuleMetaData about the module ModuleLoadStarted hands
// out and GetClassIDInfo about the class ClassLoadStarted hands out, inside those callbacks. No fault: the same
// questions in ModuleLoadFinished and ClassLoadFinished, where the IDs are valid; one in ClassLoadStarted about
// an earlier class (finished loading); GetModuleInfo inside ModuleLoadStarted (its page: it "may be called as
// soon as the module's ID exists").
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

std::atomic<ClassID> g_loaded{0};  // the last class whose ClassLoadFinished came

class LoadStarted final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_CLASS_LOADS);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadStarted(ModuleID mod) override {
        ULONG need = 0;
        info->GetModuleInfo(mod, nullptr, 0, &need, nullptr, nullptr);
        IUnknown* unk = nullptr;
        if (info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) == S_OK && unk)  // the fault (LDS-03)
            unk->Release();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        IUnknown* unk = nullptr;
        if (info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) == S_OK && unk) unk->Release();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ClassLoadStarted(ClassID cls) override {
        ModuleID mod = 0;
        mdTypeDef token = 0;
        if (ClassID earlier = g_loaded.load()) info->GetClassIDInfo(earlier, &mod, &token);
        info->GetClassIDInfo(cls, &mod, &token);  // the fault (LDS-04)
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT) override {
        ModuleID mod = 0;
        mdTypeDef token = 0;
        info->GetClassIDInfo(cls, &mod, &token);
        g_loaded.store(cls);
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(LoadStarted)
