// no_retry: a double-pass buffer client (BUF-07) that does not retry when the answer grew between the
// size query and the fill (BUF-08): it reads every module's name once with the size the first call gave.
#include <vector>

#include "fixture.h"

using namespace fixture;

namespace {

class NoRetry final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS); }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        ULONG need = 0;
        if (info->GetModuleInfo(mod, nullptr, 0, &need, nullptr, nullptr) != S_OK || need == 0) return S_OK;
        std::vector<WCHAR> name(need);
        info->GetModuleInfo(mod, nullptr, need, &need, name.data(), nullptr);
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(NoRetry)
