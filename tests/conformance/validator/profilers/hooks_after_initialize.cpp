// hooks_after_initialize: one fault, SEL-01: it registers its enter/leave/tailcall hooks lazily, on the first
// module load, instead of inside Initialize (a profiler that waits for its configuration before it turns
// call tracing on). The runtime refuses the registration and the hooks never run.
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

void enter(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void leave(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void tailcall(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}

class HooksAfterInitialize final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_ENTERLEAVE);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT) override {
        if (!registered_.exchange(true)) {
            info->SetEnterLeaveFunctionHooks3WithInfo(&enter, &leave, &tailcall);  // the fault
        }
        return S_OK;
    }

 private:
    std::atomic<bool> registered_{false};
};

}  // namespace

FIXTURE_EXPORT(HooksAfterInitialize)
