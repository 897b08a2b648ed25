// hang_in_call: one fault: a profiler thread (started in Initialize, outside any callback) holds its lock while
// it calls SuspendRuntime, and the profiler's RuntimeSuspendStarted, which the runtime makes on that same
// thread during the suspension, takes the same lock: the thread never comes back from SuspendRuntime. The
// thread starts trying when the first module has loaded, and tries again every millisecond while the runtime
// answers that it is not running yet.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

std::mutex lock;
std::mutex go_mu;
std::condition_variable go_cv;
bool go = false;

class HangInCall final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_SUSPENDS | COR_PRF_MONITOR_MODULE_LOADS);
        ICorProfilerInfo10* runtime = info;
        std::thread([runtime] {
            {
                std::unique_lock<std::mutex> wait(go_mu);
                go_cv.wait(wait, [] { return go; });
            }
            for (;;) {
                {
                    std::lock_guard<std::mutex> hold(lock);
                    if (runtime->SuspendRuntime() == S_OK) {  // the fault: RuntimeSuspendStarted waits for `lock`
                        runtime->ResumeRuntime();
                        return;
                    }
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }).detach();
        return hr;
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT) override {
        std::lock_guard<std::mutex> hold(go_mu);
        go = true;
        go_cv.notify_all();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON) override {
        std::lock_guard<std::mutex> wait(lock);
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(HangInCall)
