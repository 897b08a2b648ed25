// sampler_malloc: a wall-clock sampler of the startup thread (the one that runs Main). Initialize installs a
// SIGPROF handler (sigaction, SA_SIGINFO) and a POSIX timer that sends SIGPROF to that thread every 5 ms
// (timer_create, SIGEV_THREAD_ID). One fault, seen in shipped samplers: the handler keeps each sample as a
// heap node (operator new) on a lock-free list, so it allocates inside a signal handler (signal-safety(7):
// ASYNC-01); with the allocator's lock held by the interrupted code it deadlocks (ASYNC-07).
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "fixture.h"

using namespace fixture;

namespace {

struct Sample {
    std::uintptr_t ip;
    Sample* next;
};

std::atomic<Sample*> g_samples{nullptr};
std::atomic<long> g_taken{0};

void on_sigprof(int, siginfo_t*, void* context) {
    auto* uc = static_cast<ucontext_t*>(context);
    auto* sample = new Sample{static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]), nullptr};  // the fault
    sample->next = g_samples.load(std::memory_order_relaxed);
    while (!g_samples.compare_exchange_weak(sample->next, sample, std::memory_order_release)) {
    }
    g_taken.fetch_add(1, std::memory_order_relaxed);
}

class SamplerMalloc final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        timer_ = sample_this_thread(&on_sigprof, 5'000'000L);
        return take_info(unk, COR_PRF_MONITOR_THREADS);
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_sampling(timer_);  // a late SIGPROF must not end the process
        return S_OK;
    }

 private:
    timer_t timer_ = nullptr;
};

}  // namespace

FIXTURE_EXPORT(SamplerMalloc)
