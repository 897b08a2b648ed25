// truncated: one fault, BUF-08: asks for each module's name with a 4-character buffer and uses what it got
// (the truncated answer) without calling again with the size the runtime said it needs.
#include "fixture.h"

using namespace fixture;

namespace {

class Truncated final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        WCHAR name[4] = {};
        ULONG need = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        info->GetModuleInfo(mod, &base, 4, &need, name, &assembly);  // the fault: need > 4, no retry
        last_ = name[0];
        return S_OK;
    }

 private:
    WCHAR last_ = 0;
};

}  // namespace

FIXTURE_EXPORT(Truncated)
