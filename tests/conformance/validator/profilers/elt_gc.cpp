// elt_gc: one fault, FE2-11: its FunctionEnter3WithInfo hook calls ForceGC (a call that triggers a
// garbage collection) the first time it runs.
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

ICorProfilerInfo10* g_info = nullptr;
std::atomic<bool> g_done{false};

void enter(FunctionIDOrClientID, COR_PRF_ELT_INFO) {
    if (!g_done.exchange(true)) g_info->ForceGC();  // the fault
}
void leave(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void tailcall(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}

class EltGc final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FRAME_INFO);
        if (hr != S_OK) return hr;
        g_info = info;
        return info->SetEnterLeaveFunctionHooks3WithInfo(&enter, &leave, &tailcall);
    }
};

}  // namespace

FIXTURE_EXPORT(EltGc)
