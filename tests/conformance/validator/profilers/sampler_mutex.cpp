// sampler_mutex: a wall-clock sampler of the startup thread (SIGPROF every 5 ms from a POSIX timer,
// SIGEV_THREAD_ID) whose samples go into a fixed ring that a drain thread empties. One fault, seen in
// shipped samplers: the ring is guarded by a std::mutex the handler locks too (pthread_mutex_lock inside a
// signal handler, signal-safety(7): ASYNC-03). It allocates nothing in the handler.
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

std::mutex g_ring_mu;
std::array<std::uintptr_t, 1024> g_ring;
std::size_t g_head = 0, g_tail = 0;

void on_sigprof(int, siginfo_t*, void* context) {
    auto* uc = static_cast<ucontext_t*>(context);
    std::lock_guard<std::mutex> lock(g_ring_mu);  // the fault
    if (g_head - g_tail < g_ring.size()) g_ring[g_head++ % g_ring.size()] = uc->uc_mcontext.gregs[REG_RIP];
}

class SamplerMutex final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        drain_ = std::thread([this] {
            while (!stop_.load()) {
                {
                    std::lock_guard<std::mutex> lock(g_ring_mu);
                    drained_ += g_head - g_tail;
                    g_tail = g_head;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
        });
        timer_ = sample_this_thread(&on_sigprof, 5'000'000L);
        return take_info(unk, COR_PRF_MONITOR_THREADS);
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_sampling(timer_);
        stop_.store(true);
        drain_.join();
        return S_OK;
    }

 private:
    timer_t timer_ = nullptr;
    std::thread drain_;
    std::atomic<bool> stop_{false};
    std::size_t drained_ = 0;
};

}  // namespace

FIXTURE_EXPORT(SamplerMutex)
