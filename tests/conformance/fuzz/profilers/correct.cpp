// correct: keeps every rule the fuzzer checks. It tracks objects and remaps them at MovedReferences2 with
// MR2-07's test (old < start + length), inspects them only after GarbageCollectionFinished, reads module,
// type and method names with the double-pass protocol and retries while the answer grew (BUF-08), walks its
// own stack at every exception (synchronous, no seed).
#include <vector>

#include "heap.h"

using namespace fixture;

namespace {

HRESULT count_frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
    ++*static_cast<int*>(data);
    return S_OK;
}

class Correct final : public Tracker<false> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, tracking_mask() | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_CLASS_LOADS |
                                  COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_EXCEPTIONS |
                                  COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        ULONG need = 0;
        if (info->GetModuleInfo(mod, nullptr, 0, &need, nullptr, nullptr) != S_OK) return S_OK;
        std::vector<WCHAR> name;
        for (int tries = 0; tries < 8; ++tries) {  // BUF-08: the answer may grow between two calls
            name.resize(need ? need : 1);
            ULONG cch = static_cast<ULONG>(name.size());
            if (info->GetModuleInfo(mod, nullptr, cch, &need, name.data(), nullptr) != S_OK || need <= cch) break;
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT) override {
        ModuleID mod = 0;
        mdTypeDef td = 0;
        if (info->GetClassIDInfo(cls, &mod, &td) != S_OK) return S_OK;
        IUnknown* unk = nullptr;
        if (info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || !unk) return S_OK;
        auto* md = static_cast<IMetaDataImport*>(unk);
        ULONG need = 0;
        if (md->GetTypeDefProps(td, nullptr, 0, &need, nullptr, nullptr) == S_OK) {
            std::vector<WCHAR> name;
            for (int tries = 0; tries < 8; ++tries) {
                name.resize(need ? need : 1);
                ULONG cch = static_cast<ULONG>(name.size());
                if (md->GetTypeDefProps(td, name.data(), cch, &need, nullptr, nullptr) != S_OK || need <= cch) break;
            }
        }
        md->Release();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fn, HRESULT, BOOL) override {
        IUnknown* unk = nullptr;
        mdToken tok = 0;
        if (info->GetTokenAndMetaDataFromFunction(fn, IID_IMetaDataImport, &unk, &tok) != S_OK || !unk) return S_OK;
        auto* md = static_cast<IMetaDataImport*>(unk);
        WCHAR name[256];
        ULONG got = 0;
        mdTypeDef owner = 0;
        md->GetMethodProps(tok, &owner, name, 256, &got, nullptr, nullptr, nullptr, nullptr, nullptr);
        md->Release();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        int frames = 0;
        info->DoStackSnapshot(0, &count_frame, COR_PRF_SNAPSHOT_DEFAULT, &frames, nullptr, 0);
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(Correct)
