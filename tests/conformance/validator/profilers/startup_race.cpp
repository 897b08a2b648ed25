// startup_race: one fault (shipped, then fixed, by sampling profilers): Initialize starts the sampler thread
// first, then asks for ICorProfilerInfo10, stores it and sets its event mask. The sampler uses the stored
// pointer from its first tick on, so if it runs before Initialize has stored it, it calls through null.
// Usually Initialize wins (the thread takes a while to start); when it does not, the process crashes in
// the sampler's tick (VAL-CRASH at the line of the call through `info`). `validate --perturb SEED` delays
// Initialize's calls and shows it on demand.
#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

class StartupRace final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        running_.store(true);
        sampler_ = std::thread([this] { sample_loop(); });  // the fault: before `info` is stored
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info));
        if (hr != S_OK) return hr;
        return info->SetEventMask2(COR_PRF_MONITOR_THREADS, 0);
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        running_.store(false);
        if (sampler_.joinable()) sampler_.join();
        return S_OK;
    }

 private:
    void sample_loop() {
        while (running_.load()) {
            tick();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    // One sample: how many managed threads there are now.
    void tick() {
        ICorProfilerThreadEnum* threads = nullptr;
        if (info->EnumThreads(&threads) != S_OK || !threads) return;
        ULONG n = 0;
        if (threads->GetCount(&n) == S_OK) seen_.fetch_add(n);
        threads->Release();
    }

    std::atomic<bool> running_{false};
    std::atomic<unsigned long> seen_{0};
    std::thread sampler_;
};

}  // namespace

FIXTURE_EXPORT(StartupRace)
