// elt_block: one fault, FE2-10: its FunctionEnter3WithInfo hook asks for a ReJIT of the function being
// entered (RequestReJIT blocks until the runtime has suspended its threads) the first time it runs.
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

ICorProfilerInfo10* g_info = nullptr;
std::atomic<bool> g_done{false};

void enter(FunctionIDOrClientID id, COR_PRF_ELT_INFO) {
    if (g_done.exchange(true)) return;
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken token = 0;
    if (g_info->GetFunctionInfo(id.functionID, &cls, &mod, &token) != S_OK) return;
    g_info->RequestReJIT(1, &mod, &token);  // the fault
}
void leave(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void tailcall(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}

class EltBlock final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FRAME_INFO);
        if (hr != S_OK) return hr;
        g_info = info;
        return info->SetEnterLeaveFunctionHooks3WithInfo(&enter, &leave, &tailcall);
    }
};

}  // namespace

FIXTURE_EXPORT(EltBlock)
