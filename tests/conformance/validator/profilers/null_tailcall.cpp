// null_tailcall: one fault (seen in public profilers): SetEnterLeaveFunctionHooks3WithInfo with enter and
// leave hooks and a NULL tailcall hook.
#include "fixture.h"

using namespace fixture;

namespace {

void enter(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void leave(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}

class NullTailcall final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FRAME_INFO);
        if (hr != S_OK) return hr;
        return info->SetEnterLeaveFunctionHooks3WithInfo(&enter, &leave, nullptr);  // the fault
    }
};

}  // namespace

FIXTURE_EXPORT(NullTailcall)
