// null_buffer: one fault, BUF-04: asks for a module's name with a NULL buffer but a non-zero size.
#include "fixture.h"

using namespace fixture;

namespace {

class NullBuffer final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        ULONG need = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        info->GetModuleInfo(mod, &base, 256, &need, nullptr, &assembly);  // the fault: NULL with 256
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(NullBuffer)
