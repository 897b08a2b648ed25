// destroyed_walk: one fault, DSS-23: its sampling thread (a native thread: it suspends the runtime with
// SuspendRuntime as DSS-13/22 ask) is told of a worker thread's ThreadDestroyed and walks that thread, but
// ThreadDestroyed does not wait for the walk to end: it returns as soon as the sampler has suspended the
// runtime, and the sampler walks the thread after ThreadDestroyed returned. Shutdown stops the sampler.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

HRESULT frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void*) { return S_OK; }

class DestroyedWalk final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        sampler_ = std::thread([this] { sample(); });
        return hr;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        ThreadID none = 0;
        main_.compare_exchange_strong(none, t);  // the main thread comes first
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID t) override {
        if (t == main_.load() || claimed_.exchange(true)) return S_OK;
        std::unique_lock<std::mutex> lock(mu_);
        target_ = t;
        cv_.notify_all();
        cv_.wait_for(lock, std::chrono::seconds(5), [this] { return suspended_ || gave_up_; });
        return S_OK;  // the fault: the walk of t has not ended (it has not even begun)
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
            cv_.notify_all();
        }
        if (sampler_.joinable()) sampler_.join();
        return S_OK;
    }

 private:
    void sample() {
        ThreadID target = 0;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [this] { return target_ != 0 || stop_; });
            if (stop_) return;
            target = target_;
        }
        HRESULT hr = E_FAIL;
        for (int k = 0; k < 100 && hr != S_OK; ++k) {
            hr = info->SuspendRuntime();
            if (hr != S_OK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            (hr == S_OK ? suspended_ : gave_up_) = true;
            cv_.notify_all();
        }
        if (hr != S_OK) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ThreadDestroyed returns meanwhile
        info->DoStackSnapshot(target, &frame, COR_PRF_SNAPSHOT_DEFAULT, nullptr, nullptr, 0);
        info->ResumeRuntime();
    }

    std::thread sampler_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<ThreadID> main_{0};
    std::atomic<bool> claimed_{false};
    ThreadID target_ = 0;
    bool suspended_ = false, gave_up_ = false, stop_ = false;
};

}  // namespace

FIXTURE_EXPORT(DestroyedWalk)
