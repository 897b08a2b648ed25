// after_shutdown: one fault (seen in public profilers): a sampling thread keeps calling ICorProfilerInfo
// after Shutdown returned, through the interface Shutdown released. The thread is never stopped.
#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

class AfterShutdown final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS);
        ICorProfilerInfo10* sampled = info;
        std::thread([sampled] {
            for (;;) {
                DWORD mask = 0;
                sampled->GetEventMask(&mask);
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        }).detach();
        return hr;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        info->Release();  // released, but the sampler keeps its copy
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(AfterShutdown)
