// sampler: a correct 100 ms sampler (issue 21's workload tests): its own native thread, started in Initialize
// after the ICorProfilerInfo it uses is stored, every 100 ms suspends the runtime (SuspendRuntime from a
// thread that never ran managed code, DSS-13/22), walks every managed thread EnumThreads lists with
// DoStackSnapshot (a thread whose ThreadDestroyed came is skipped; ThreadDestroyed waits for a walk in
// progress, DSS-23), releases the enumerator and resumes the runtime. Shutdown stops the thread and waits
// for it. Prints its tally to stderr at Shutdown ("sampler: ticks=N walks=N ok=N").
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

HRESULT frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
    ++*static_cast<long*>(data);
    return S_OK;
}

class Sampler final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (hr == S_OK) sampler_ = std::thread([this] { run(); });
        return hr;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        std::lock_guard<std::mutex> lock(walk_mu_);
        destroyed_.erase(t);  // a ThreadID may be used again
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID t) override {
        std::lock_guard<std::mutex> lock(walk_mu_);  // waits for a walk in progress
        destroyed_.insert(t);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> lock(stop_mu_);
            stop_ = true;
        }
        stop_cv_.notify_all();
        if (sampler_.joinable()) sampler_.join();
        std::fprintf(stderr, "sampler: ticks=%ld walks=%ld ok=%ld\n", ticks_, walks_, ok_);
        return S_OK;
    }

 private:
    void run() {
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(stop_mu_);
                if (stop_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) return;
            }
            tick();
        }
    }
    void tick() {
        if (info->SuspendRuntime() != S_OK) return;
        ++ticks_;
        {
            std::lock_guard<std::mutex> lock(walk_mu_);
            ICorProfilerThreadEnum* threads = nullptr;
            if (info->EnumThreads(&threads) == S_OK && threads) {
                ThreadID t = 0;
                ULONG got = 0;
                while (threads->Next(1, &t, &got) == S_OK && got == 1) {
                    if (destroyed_.count(t)) continue;
                    long frames = 0;
                    ++walks_;
                    if (info->DoStackSnapshot(t, &frame, COR_PRF_SNAPSHOT_DEFAULT, &frames, nullptr, 0) == S_OK) ++ok_;
                }
                threads->Release();
            }
        }
        info->ResumeRuntime();
    }

    std::thread sampler_;
    std::mutex stop_mu_, walk_mu_;
    std::condition_variable stop_cv_;
    bool stop_ = false;
    std::set<ThreadID> destroyed_;
    long ticks_ = 0, walks_ = 0, ok_ = 0;
};

}  // namespace

FIXTURE_EXPORT(Sampler)
