// thread_at_shutdown: one fault (seen in public profilers): Initialize starts the profiler's worker thread
// (a std::thread member; it never calls the runtime) and nothing stops or joins it, so it still runs when
// Shutdown returns. The profiler deletes itself on its last Release, as COM objects do: 3.1 releases the
// profiler after Shutdown, and destroying the still-joinable std::thread aborts the process (std::terminate);
// 8.0 never releases it.
#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

class ThreadAtShutdown final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        worker_ = std::thread([this] {
            for (;;) {  // the fault: no way to stop it
                ticks_.fetch_add(1);
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        });
        return take_info(unk, COR_PRF_MONITOR_THREADS);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        ULONG n = --refs_;
        if (n == 0) delete this;  // ~std::thread of a joinable thread: std::terminate
        return n;
    }

 private:
    std::atomic<ULONG> refs_{0};
    std::atomic<unsigned long> ticks_{0};
    std::thread worker_;
};

}  // namespace

FIXTURE_EXPORT(ThreadAtShutdown)
