// sampler_signal_safe.cpp -- CPU-time sampler driven by the kernel's profiling timer (ITIMER_PROF).
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo4, sets COR_PRF_MONITOR_THREADS (only so that
//     the drain thread knows the runtime has called back after Initialize), installs a SIGPROF
//     handler (sigaction, SA_SIGINFO | SA_RESTART), starts the drain std::thread, and arms
//     setitimer(ITIMER_PROF, 10 ms): the kernel sends SIGPROF to the process every 10 ms of
//     consumed CPU time, delivered to a thread that is running.
//   * The handler is async-signal-safe: it reads RIP from the ucontext and pushes it into a static,
//     preallocated lock-free bounded ring (fixed array of cells with atomic sequence numbers,
//     atomic enqueue/dequeue positions; a full ring drops the sample); errno is preserved.  No locks, no allocation, no stdio, no runtime calls in the handler.
//   * The drain thread blocks SIGPROF for itself, and every 20 ms consumes published slots and
//     resolves each IP with ICorProfilerInfo::GetFunctionFromIP (names on first sight with
//     GetFunctionInfo + GetModuleMetaData + IMetaDataImport), on the drain thread only.
//   * Shutdown disarms the timer, stops and joins the drain thread (which drains a last time),
//     switches SIGPROF to SIG_IGN (a SIGPROF still in flight must not hit SIG_DFL, which
//     terminates), counts but does not resolve what is left, prints a summary and releases.
//   believed: correct.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...) and
// Linux man pages:
//   * ICorProfilerInfo::GetFunctionFromIP: "Maps a managed code instruction pointer to a
//     FunctionID."  Called from the profiler's own thread, never from the signal handler.
//   * CORPROF_E_UNSUPPORTED_CALL_SEQUENCE: a "hijacking profiler forcibly resets a thread's
//     register context at an arbitrary time so that the thread can ... reenter the common language
//     runtime (CLR) through an ICorProfilerInfo method" -- the handler never calls the runtime.
//   * ICorProfilerInfo4::InitializeCurrentThread: "This method is typically used by sampling
//     profilers that create their own thread" -- called once by the drain thread before its first
//     GetFunctionFromIP.
//   * ICorProfilerCallback::Shutdown: no ICorProfilerInfo call after Shutdown -- the drain thread is
//     joined first.
//   * signal-safety(7): only async-signal-safe functions may be called from a handler that can
//     interrupt arbitrary code; lock-free std::atomic operations on always-lock-free types are
//     plain instructions.  setitimer(2): ITIMER_PROF "counts down against the total (i.e., both user
//     and system) CPU time consumed by the process ... At each expiration, a SIGPROF signal is
//     generated."  sigaction(2): SA_RESTART keeps interrupted syscalls of the app going.
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace sigsafe {

// ------------------------------------------------------------------ lock-free sample ring
// Bounded MPMC queue of atomics (sequence number per cell).  Producers: signal handlers on any
// thread (SIGPROF is blocked while its own handler runs, so a handler never interrupts a Push on
// its own thread); single consumer: the drain thread, which blocks SIGPROF.  A full ring drops
// the sample instead of waiting.
class SampleRing {
public:
    static constexpr size_t kCapacity = 16384;  // power of two
    static_assert((kCapacity & (kCapacity - 1)) == 0, "capacity must be a power of two");
    static_assert(std::atomic<size_t>::is_always_lock_free, "signal handler needs lock-free atomics");
    static_assert(std::atomic<std::uintptr_t>::is_always_lock_free, "signal handler needs lock-free atomics");

    SampleRing() {
        for (size_t i = 0; i < kCapacity; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
    }

    bool Push(std::uintptr_t ip) {  // async-signal-safe: atomics only
        size_t pos = enqueue_.load(std::memory_order_relaxed);
        for (;;) {
            Cell& c = cells_[pos & (kCapacity - 1)];
            size_t seq = c.seq.load(std::memory_order_acquire);
            intptr_t diff = (intptr_t)seq - (intptr_t)pos;
            if (diff == 0) {
                if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    c.ip.store(ip, std::memory_order_relaxed);
                    c.seq.store(pos + 1, std::memory_order_release);
                    return true;
                }
            } else if (diff < 0) {
                return false;  // full
            } else {
                pos = enqueue_.load(std::memory_order_relaxed);
            }
        }
    }

    bool Pop(std::uintptr_t* ip) {
        size_t pos = dequeue_.load(std::memory_order_relaxed);
        for (;;) {
            Cell& c = cells_[pos & (kCapacity - 1)];
            size_t seq = c.seq.load(std::memory_order_acquire);
            intptr_t diff = (intptr_t)seq - (intptr_t)(pos + 1);
            if (diff == 0) {
                if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    *ip = c.ip.load(std::memory_order_relaxed);
                    c.seq.store(pos + kCapacity, std::memory_order_release);
                    return true;
                }
            } else if (diff < 0) {
                return false;  // empty
            } else {
                pos = dequeue_.load(std::memory_order_relaxed);
            }
        }
    }

private:
    struct Cell {
        std::atomic<size_t> seq;
        std::atomic<std::uintptr_t> ip;
    };
    Cell cells_[kCapacity];
    alignas(64) std::atomic<size_t> enqueue_{0};
    alignas(64) std::atomic<size_t> dequeue_{0};
};

SampleRing g_ring;  // static storage, constructed before Initialize can run, never destroyed
std::atomic<unsigned long> g_recorded{0}, g_dropped{0};
volatile sig_atomic_t g_enabled = 0;  // handler ignores signals when 0

void OnSigprof(int, siginfo_t*, void* ucv) {
    if (!g_enabled) return;
    int savedErrno = errno;
    auto* uc = static_cast<ucontext_t*>(ucv);
    std::uintptr_t ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    if (g_ring.Push(ip))
        g_recorded.fetch_add(1, std::memory_order_relaxed);
    else
        g_dropped.fetch_add(1, std::memory_order_relaxed);
    errno = savedErrno;
}

class SafeSignalSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = &OnSigprof;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGPROF, &sa, nullptr) != 0) {
            info_->Release();
            info_ = nullptr;
            return E_FAIL;
        }
        g_enabled = 1;
        drain_ = std::thread([this] { DrainLoop(); });
        struct itimerval it;
        it.it_interval.tv_sec = 0;
        it.it_interval.tv_usec = 10000;
        it.it_value = it.it_interval;
        if (setitimer(ITIMER_PROF, &it, nullptr) != 0)
            std::fprintf(stderr, "[sampler_signal_safe] setitimer failed: %s\n", std::strerror(errno));
        std::fprintf(stderr, "[sampler_signal_safe] initialized: ITIMER_PROF 10 ms, lock-free ring of %zu cells\n",
                     SampleRing::kCapacity);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        // 1. no new samples
        struct itimerval off;
        std::memset(&off, 0, sizeof off);
        setitimer(ITIMER_PROF, &off, nullptr);
        // 2. stop + join the only thread that calls the profiling API
        {
            std::lock_guard<std::mutex> g(stopMu_);
            stop_ = true;
        }
        stopCv_.notify_all();
        if (drain_.joinable()) drain_.join();
        shutdown_.store(true);
        // 3. ignore late signals, count leftovers without resolving them
        g_enabled = 0;
        struct sigaction ign;
        std::memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPROF, &ign, nullptr);
        unsigned long leftover = 0;
        std::uintptr_t ip;
        while (g_ring.Pop(&ip)) ++leftover;

        std::vector<std::pair<FunctionID, unsigned long>> top(perFunction_.begin(), perFunction_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best;
        for (size_t i = 0; i < top.size() && i < 4; ++i) {
            auto it = names_.find(top[i].first);
            best += (i ? ", " : "") + (it != names_.end() ? it->second : std::string("?")) + " x" +
                    std::to_string(top[i].second);
        }
        std::fprintf(stderr,
                     "[sampler_signal_safe] summary: samples=%lu dropped=%lu resolved_managed=%lu native=%lu "
                     "leftover=%lu drains=%lu functions=%zu init_thread=0x%08x top=[%s]\n",
                     g_recorded.load(), g_dropped.load(), managed_, native_, leftover, drains_, perFunction_.size(),
                     (unsigned)initThreadHr_, best.c_str());
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    void DrainLoop() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPROF);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);  // this thread never takes samples
        bool initialized = false;
        for (;;) {
            bool stopping;
            {
                std::unique_lock<std::mutex> g(stopMu_);
                stopping = stopCv_.wait_for(g, std::chrono::milliseconds(20), [this] { return stop_; });
            }
            if (apiReady_.load(std::memory_order_acquire)) {
                if (!initialized) {
                    initThreadHr_ = info_->InitializeCurrentThread();
                    initialized = true;
                }
                Drain();
            }
            if (stopping) break;
        }
    }

    void Drain() {
        ++drains_;
        std::uintptr_t ip;
        while (g_ring.Pop(&ip)) {
            FunctionID fid = 0;
            HRESULT hr = info_->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(ip), &fid);
            if (hr == S_OK && fid != 0) {
                ++managed_;
                if (++perFunction_[fid] == 1) names_[fid] = NameOf(fid);
            } else {
                ++native_;
            }
        }
    }

    std::string NameOf(FunctionID fid) {
        ClassID cls = 0;
        ModuleID module = 0;
        mdToken token = 0;
        if (failed(info_->GetFunctionInfo(fid, &cls, &module, &token))) return "?";
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return "?";
        auto* md = static_cast<IMetaDataImport*>(unk);
        WCHAR method[256], type[256];
        ULONG n = 0;
        mdTypeDef td = 0;
        DWORD attr = 0, impl = 0;
        PCCOR_SIGNATURE sig = nullptr;
        ULONG sigLen = 0, rva = 0;
        std::string out = "?";
        if (succeeded(md->GetMethodProps(token, &td, method, 256, &n, &attr, &sig, &sigLen, &rva, &impl))) {
            out = to_utf8(method, 256);
            ULONG tn = 0;
            DWORD tflags = 0;
            mdToken ext = 0;
            if (td != 0 && succeeded(md->GetTypeDefProps(td, type, 256, &tn, &tflags, &ext)))
                out = to_utf8(type, 256) + "." + out;
        }
        md->Release();
        return out;
    }

    ICorProfilerInfo4* info_ = nullptr;
    std::thread drain_;
    std::mutex stopMu_;
    std::condition_variable stopCv_;
    bool stop_ = false;
    std::atomic<bool> apiReady_{false};
    std::atomic<bool> shutdown_{false};

    // owned by the drain thread until it is joined
    HRESULT initThreadHr_ = S_FALSE;
    unsigned long managed_ = 0, native_ = 0, drains_ = 0;
    std::unordered_map<FunctionID, unsigned long> perFunction_;
    std::unordered_map<FunctionID, std::string> names_;
};

}  // namespace sigsafe

DOCFIX_DEFINE_PROFILER(sigsafe::SafeSignalSampler)
