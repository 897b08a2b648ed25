// sampler_fromip: a wall-clock sampler of the startup thread (SIGPROF every 5 ms from a POSIX timer,
// SIGEV_THREAD_ID) whose handler maps the interrupted instruction pointer with
// ICorProfilerInfo::GetFunctionFromIP right there, one of the two calls the profiling API allows inside a
// signal handler, and stores the FunctionID into a preallocated ring of atomics. Nothing else. Correct: the
// recording proxy's own wrapper must not allocate or lock on that path (ASYNC).
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "fixture.h"

using namespace fixture;

namespace {

std::array<std::atomic<FunctionID>, 4096> g_ring;
std::atomic<std::size_t> g_head{0};
ICorProfilerInfo10* g_info = nullptr;

void on_sigprof(int, siginfo_t*, void* context) {
    const int saved = errno;
    auto* uc = static_cast<ucontext_t*>(context);
    const auto ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    FunctionID function = 0;
    if (g_info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(ip), &function) == S_OK && function) {
        const std::size_t head = g_head.load(std::memory_order_relaxed);
        g_ring[head % g_ring.size()].store(function, std::memory_order_relaxed);
        g_head.store(head + 1, std::memory_order_release);
    }
    errno = saved;
}

class SamplerFromIp final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS);
        if (hr != S_OK) return hr;
        g_info = info;
        timer_ = sample_this_thread(&on_sigprof, 5'000'000L);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_sampling(timer_);
        return S_OK;
    }

 private:
    timer_t timer_ = nullptr;
};

}  // namespace

FIXTURE_EXPORT(SamplerFromIp)
