// walkq_sampler.h: a SIGPROF sampler that walks the interrupted thread's managed stack from its own signal
// handler with DoStackSnapshot (issue 24 part 4's fixtures: walkq_naive.cpp, walkq_recovered.cpp). Written
// from the documents, as a sampling profiler author would on Linux:
//   * ICorProfilerInfo2::DoStackSnapshot: "Passing null in thread yields a snapshot of the current thread";
//     "context: a Win32 CONTEXT structure, used to seed the stack walk"; the seed "must be in JIT-compiled
//     code" (the Remarks: "the target thread's ... register context ... must be in managed code"). On Linux
//     another thread cannot be suspended by the runtime for a snapshot (dotnet/runtime#8615: cross-thread
//     walks are E_NOTIMPL there unless the runtime is suspended), so a signal sampler walks the interrupted
//     thread from the handler, on that thread (thread = 0).
//   * setitimer(ITIMER_PROF, 10 ms): SIGPROF every 10 ms of the process's CPU time, delivered to a running
//     thread. The handler builds the seed (the Seeder policy), walks (frames counted), and counts the result
//     per outcome in atomics; Shutdown disarms the timer, ignores SIGPROF and prints the tally.
// With WALKQ_CLOCK=wall the fixture samples by wall-clock time instead of CPU time, as a wall-time profiler
// does: its own sampler thread sends SIGPROF (tgkill) to one managed thread every WALKQ_INTERVAL_US
// microseconds (default 1000), taking the threads in turn, whatever each is doing (running, or blocked in a
// wait); the threads are the ones the runtime assigned to OS threads (ThreadAssignedToOSThread, with
// COR_PRF_MONITOR_THREADS; ThreadDestroyed drops them). ITIMER_PROF only ever interrupts a thread that is on a
// CPU, so a CPU-time sampler never sees a thread blocked in a wait: where the thread waits inside a runtime
// call (GC.Collect waiting for the collection, in libc) the naive seed succeeds (the thread is in preemptive
// mode), and a CPU-time sampler's failure rate there is higher than a wall-clock one's (`bench/walk_quality.py`).
// WALKQ_THREADS=NAME[,NAME...] limits the wall-clock sampler to the managed threads of those names
// (ThreadNameChanged), as a profiler's thread filter does; WALKQ_MAX_SAMPLES=N stops it after N signals (a
// bounded profiling session).
// With WALKQ_CROSS=1 the walk is made by the fixture's own sampler thread instead, of the interrupted thread
// held in the handler meanwhile (the documented "snapshot of another thread"): the handler publishes its
// ThreadID (GetCurrentThreadID) and seed, posts a semaphore and waits (at most 200 ms) until the sampler
// thread's DoStackSnapshot(thatThread, ...) returned.
// The seed policy is the only difference between the two fixtures: Seeder::seed(uc, ctx) fills the CONTEXT and
// returns false when it found no managed frame to seed from (then the fixture walks with no seed, as a
// profiler that gives up on the seed would).
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <semaphore.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fixture.h"

namespace walkq {

using namespace fixture;

inline constexpr DWORD kContextAmd64 = 0x00100000;
inline constexpr DWORD kContextControlInteger = kContextAmd64 | 0x1 | 0x2;
inline constexpr ULONG32 kRegisterContext = 1;  // COR_PRF_SNAPSHOT_REGISTER_CONTEXT

inline ICorProfilerInfo10* g_info = nullptr;
inline std::atomic<unsigned long> g_samples{0}, g_ok{0}, g_failed{0}, g_unseeded{0};
inline volatile sig_atomic_t g_on = 0;
inline bool g_cross = false;
// the cross-thread hand-over (one walk in flight: SIGPROF is blocked in its own handler, and the sampler
// thread takes one request at a time; a second handler finds g_busy set and skips)
inline sem_t g_request;
inline std::atomic<int> g_busy{0}, g_walked{0};
inline ThreadID g_target = 0;
inline BYTE* g_seed = nullptr;
inline ULONG32 g_seed_size = 0;
inline std::atomic<bool> g_stop{false};
// WALKQ_CLOCK=wall: the managed threads' OS ids (0: a free entry), by ThreadID
inline constexpr int kThreads = 256;
inline std::atomic<ThreadID> g_thread_ids[kThreads];
inline std::atomic<long> g_os_tids[kThreads];
inline std::atomic<bool> g_wanted[kThreads];
inline bool g_wall = false;
inline long g_interval_us = 1000;
inline long g_max_samples = 0;
inline const char* g_filter = nullptr;

// The table entry of `thread` (a free one taken when it has none); -1 when the table is full.
inline int entry_of(ThreadID thread) {
    for (int k = 0; k < kThreads; ++k)
        if (g_thread_ids[k].load() == thread) return k;
    for (int k = 0; k < kThreads; ++k) {
        ThreadID none = 0;
        if (g_thread_ids[k].compare_exchange_strong(none, thread)) {
            g_wanted[k].store(g_filter == nullptr);
            return k;
        }
    }
    return -1;
}

// Whether `name` (UTF-16, cch characters, NUL included or not) is one of the comma-separated ASCII names of
// WALKQ_THREADS.
inline bool filtered_in(const WCHAR* name, ULONG cch) {
    if (!g_filter || !name) return false;
    while (cch > 0 && name[cch - 1] == 0) --cch;
    for (const char* at = g_filter; *at;) {
        const char* end = std::strchr(at, ',');
        const std::size_t n = end ? static_cast<std::size_t>(end - at) : std::strlen(at);
        bool same = n == cch;
        for (std::size_t i = 0; same && i < n; ++i) same = name[i] == static_cast<WCHAR>(at[i]);
        if (same) return true;
        if (!end) break;
        at = end + 1;
    }
    return false;
}

// Reads one word of this process without faulting (process_vm_readv: a system call, async-signal-safe).
inline bool read_word(std::uint64_t addr, std::uint64_t& out) {
    if (addr < 4096 || (addr & 7) != 0) return false;
    struct iovec local{&out, 8}, remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr)), 8};
    return ::syscall(SYS_process_vm_readv, ::getpid(), &local, 1UL, &remote, 1UL, 0UL) == 8;
}

inline bool managed(std::uint64_t ip) {
    FunctionID f = 0;
    return ip > 4096 && g_info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &f) == S_OK && f != 0;
}

inline void put(BYTE* ctx, std::size_t offset, std::uint64_t v) { std::memcpy(ctx + offset, &v, sizeof v); }

// The CONTEXT of the interrupted registers as they are (the naive seed).
inline void context_of(const ucontext_t* uc, BYTE* ctx) {
    const greg_t* g = uc->uc_mcontext.gregs;
    std::memset(ctx, 0, sizeof(AMD64Context));
    const DWORD flags = kContextControlInteger;
    std::memcpy(ctx + offsetof(AMD64Context, ContextFlags), &flags, sizeof flags);
    const struct {
        std::size_t offset;
        int reg;
    } regs[] = {{offsetof(AMD64Context, Rax), REG_RAX}, {offsetof(AMD64Context, Rcx), REG_RCX},
                {offsetof(AMD64Context, Rdx), REG_RDX}, {offsetof(AMD64Context, Rbx), REG_RBX},
                {offsetof(AMD64Context, Rsp), REG_RSP}, {offsetof(AMD64Context, Rbp), REG_RBP},
                {offsetof(AMD64Context, Rsi), REG_RSI}, {offsetof(AMD64Context, Rdi), REG_RDI},
                {offsetof(AMD64Context, R8), REG_R8},   {offsetof(AMD64Context, R9), REG_R9},
                {offsetof(AMD64Context, R10), REG_R10}, {offsetof(AMD64Context, R11), REG_R11},
                {offsetof(AMD64Context, R12), REG_R12}, {offsetof(AMD64Context, R13), REG_R13},
                {offsetof(AMD64Context, R14), REG_R14}, {offsetof(AMD64Context, R15), REG_R15},
                {offsetof(AMD64Context, Rip), REG_RIP}};
    for (const auto& r : regs) put(ctx, r.offset, static_cast<std::uint64_t>(g[r.reg]));
}

inline HRESULT count_frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
    ++*static_cast<unsigned long*>(data);
    return S_OK;
}

template <typename Seeder>
void on_sigprof(int, siginfo_t*, void* ucv) {
    if (!g_on || !g_info) return;
    const int saved = errno;
    alignas(16) BYTE ctx[sizeof(AMD64Context)];  // on the handler's stack: nothing allocated
    g_samples.fetch_add(1, std::memory_order_relaxed);
    const bool seeded = Seeder::seed(static_cast<const ucontext_t*>(ucv), ctx);
    if (!seeded) g_unseeded.fetch_add(1, std::memory_order_relaxed);
    if (g_cross) {
        ThreadID self = 0;
        int idle = 0;
        if (g_info->GetCurrentThreadID(&self) == S_OK && self && g_busy.compare_exchange_strong(idle, 1)) {
            g_target = self;
            g_seed = seeded ? ctx : nullptr;
            g_seed_size = seeded ? static_cast<ULONG32>(sizeof(AMD64Context)) : 0;
            g_walked.store(0, std::memory_order_release);
            sem_post(&g_request);
            timespec start, now;
            clock_gettime(CLOCK_MONOTONIC, &start);
            do {  // held here until the sampler thread's walk returned
                clock_gettime(CLOCK_MONOTONIC, &now);
            } while (!g_walked.load(std::memory_order_acquire) &&
                     (now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 200000000L);
            int none = 0;  // abandoned (the walk may still run: the sampler thread frees the hand-over), or done
            if (!g_walked.compare_exchange_strong(none, 2)) g_busy.store(0, std::memory_order_release);
        }
        errno = saved;
        return;
    }
    unsigned long frames = 0;
    const HRESULT hr = g_info->DoStackSnapshot(0, &count_frame, kRegisterContext, &frames, seeded ? ctx : nullptr,
                                               seeded ? static_cast<ULONG32>(sizeof(AMD64Context)) : 0);
    (hr == S_OK ? g_ok : g_failed).fetch_add(1, std::memory_order_relaxed);
    errno = saved;
}

template <typename Seeder>
class SignalWalker : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        const char* clock = std::getenv("WALKQ_CLOCK");
        g_wall = clock && std::strcmp(clock, "wall") == 0;
        if (const char* every = std::getenv("WALKQ_INTERVAL_US")) g_interval_us = std::max(100L, std::atol(every));
        if (const char* most = std::getenv("WALKQ_MAX_SAMPLES")) g_max_samples = std::max(0L, std::atol(most));
        if (const char* names = std::getenv("WALKQ_THREADS"); names && *names) g_filter = names;
        HRESULT hr = take_info(unk, COR_PRF_ENABLE_STACK_SNAPSHOT | (g_wall ? COR_PRF_MONITOR_THREADS : 0));
        if (hr != S_OK) return hr;
        g_info = info;
        const char* cross = std::getenv("WALKQ_CROSS");
        g_cross = cross && cross[0] == '1';
        if (g_cross) {
            sem_init(&g_request, 0, 0);
            sampler_ = std::thread([] {
                sigset_t block;
                sigemptyset(&block);
                sigaddset(&block, SIGPROF);
                pthread_sigmask(SIG_BLOCK, &block, nullptr);
                while (!g_stop.load()) {
                    timespec until;
                    clock_gettime(CLOCK_REALTIME, &until);
                    until.tv_nsec += 50000000L;
                    if (until.tv_nsec >= 1000000000L) until.tv_sec += 1, until.tv_nsec -= 1000000000L;
                    if (sem_timedwait(&g_request, &until) != 0) continue;
                    unsigned long frames = 0;
                    const HRESULT hr = g_info->DoStackSnapshot(g_target, &count_frame, kRegisterContext, &frames,
                                                               g_seed, g_seed_size);
                    (hr == S_OK ? g_ok : g_failed).fetch_add(1, std::memory_order_relaxed);
                    if (g_walked.exchange(1) == 2) g_busy.store(0);  // the handler gave up waiting
                    if (hr != S_OK && g_failed.load() <= 3) std::fprintf(stderr, "walk of another thread: 0x%08x\n", static_cast<unsigned>(hr));
                }
            });
        }
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = &on_sigprof<Seeder>;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGPROF, &sa, nullptr) != 0) return E_FAIL;
        g_on = 1;
        if (g_wall) {
            ticker_ = std::thread([] {
                sigset_t block;
                sigemptyset(&block);
                sigaddset(&block, SIGPROF);
                pthread_sigmask(SIG_BLOCK, &block, nullptr);
                const pid_t pid = ::getpid();
                int next = 0;
                long sent = 0;
                while (!g_stop.load() && (g_max_samples == 0 || sent < g_max_samples)) {
                    ::usleep(static_cast<useconds_t>(g_interval_us));
                    for (int k = 0; k < kThreads; ++k) {  // the next live thread after the last one signalled
                        const int at = (next + k) % kThreads;
                        const long tid = g_os_tids[at].load(std::memory_order_acquire);
                        if (tid <= 0 || !g_wanted[at].load()) continue;
                        ::syscall(SYS_tgkill, pid, tid, SIGPROF);
                        ++sent;
                        next = at + 1;
                        break;
                    }
                }
            });
            return S_OK;
        }
        struct itimerval it;
        it.it_interval.tv_sec = 0;
        it.it_interval.tv_usec = 10000;
        it.it_value = it.it_interval;
        setitimer(ITIMER_PROF, &it, nullptr);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID thread, DWORD os_tid) override {
        const int k = entry_of(thread);
        if (k >= 0) g_os_tids[k].store(static_cast<long>(os_tid), std::memory_order_release);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID thread, ULONG cch, WCHAR name[]) override {
        const int k = g_filter ? entry_of(thread) : -1;
        if (k >= 0) g_wanted[k].store(filtered_in(name, cch));
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID thread) override {
        for (int k = 0; k < kThreads; ++k) {
            if (g_thread_ids[k].load() != thread) continue;
            g_os_tids[k].store(0, std::memory_order_release);
            g_wanted[k].store(false);
            g_thread_ids[k].store(0);
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        struct itimerval off;
        std::memset(&off, 0, sizeof off);
        setitimer(ITIMER_PROF, &off, nullptr);
        g_on = 0;
        g_stop.store(true);
        if (sampler_.joinable()) sampler_.join();
        if (ticker_.joinable()) ticker_.join();
        struct sigaction ign;
        std::memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPROF, &ign, nullptr);
        std::fprintf(stderr, "%s (%s clock): samples=%lu ok=%lu failed=%lu unseeded=%lu\n", Seeder::kName, g_wall ? "wall" : "cpu", g_samples.load(),
                     g_ok.load(), g_failed.load(), g_unseeded.load());
        return S_OK;
    }

 private:
    std::thread sampler_, ticker_;
};

}  // namespace walkq
