// detach_thread: one fault, DET-01: an attach-on-demand profiler that samples for a while and then detaches
// itself (ICorProfilerInfo3::RequestProfilerDetach, from its own sampling thread, as the documents allow for
// a thread the profiler created). The sampling thread polls the runtime (GetEventMask2) every 10 ms; after
// 20 polls it asks for the detach, but nothing tells the thread to stop: it keeps calling ICorProfilerInfo
// after ProfilerDetachSucceeded, when the runtime has let the profiler go and unloads its library.
#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

class DetachThread final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown*) override { return E_FAIL; }  // attach only
    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown* unk, void*, UINT) override {
        return take_info(unk, COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    HRESULT STDMETHODCALLTYPE ProfilerAttachComplete() override {
        std::thread([this] { sample(); }).detach();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ProfilerDetachSucceeded() override {
        detached_.store(true);  // recorded, but the sampler never looks at it
        return S_OK;
    }

 private:
    void sample() {
        for (int polls = 0;; ++polls) {
            DWORD low = 0, high = 0;
            info->GetEventMask2(&low, &high);  // the fault after the detach: the runtime let the profiler go
            if (polls == 20) info->RequestProfilerDetach(50);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    std::atomic<bool> detached_{false};
};

}  // namespace

FIXTURE_EXPORT(DetachThread)
