// sampler_ring: a wall-clock sampler of the startup thread (SIGPROF every 5 ms from a POSIX timer,
// SIGEV_THREAD_ID), written the way signal-safety(7) asks: the handler saves errno, reads the interrupted
// instruction pointer and stores it into a preallocated single-producer ring of atomics, nothing else; a
// thread of its own drains the ring and maps each address with ICorProfilerInfo::GetFunctionFromIP (after
// InitializeCurrentThread), never in the handler. Shutdown stops the timer and joins the thread. Correct.
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

std::array<std::atomic<std::uintptr_t>, 4096> g_ring;
std::atomic<std::size_t> g_head{0}, g_tail{0};
ICorProfilerInfo10* g_info = nullptr;  // for the drain thread

void on_sigprof(int, siginfo_t*, void* context) {
    const int saved = errno;
    auto* uc = static_cast<ucontext_t*>(context);
    const std::uintptr_t ip = uc->uc_mcontext.gregs[REG_RIP];
    const std::size_t head = g_head.load(std::memory_order_relaxed);
    if (head - g_tail.load(std::memory_order_acquire) < g_ring.size()) {
        g_ring[head % g_ring.size()].store(ip, std::memory_order_relaxed);
        g_head.store(head + 1, std::memory_order_release);
    }
    // (a correct handler does nothing more)
    errno = saved;
}

class SamplerRing final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS);
        if (hr != S_OK) return hr;
        g_info = info;
        drain_ = std::thread([this] {
            g_info->InitializeCurrentThread();
            while (!stop_.load()) {
                const std::size_t head = g_head.load(std::memory_order_acquire);
                for (std::size_t k = g_tail.load(); k < head; ++k) {
                    FunctionID function = 0;
                    if (g_info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(g_ring[k % g_ring.size()].load()),
                                                &function) == S_OK && function)
                        ++managed_;
                }
                g_tail.store(head, std::memory_order_release);
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
        });
        timer_ = sample_this_thread(&on_sigprof, 5'000'000L);
        return S_OK;
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
    std::size_t managed_ = 0;
};

}  // namespace

FIXTURE_EXPORT(SamplerRing)
