// sampler_signal.cpp -- continuous CPU sampler, written the way Linux sampling profilers are.
//
// What it does:
//   * Keeps its own lock-protected table of managed threads from ThreadCreated /
//     ThreadAssignedToOSThread / ThreadDestroyed (COR_PRF_MONITOR_THREADS).
//   * Installs its own SIGPROF handler (sigaction, SA_SIGINFO | SA_RESTART).  The handler is
//     async-signal-safe: it only reads the interrupted RIP from the ucontext and pushes it into a
//     preallocated lock-free ring buffer (bounded MPMC queue of atomics, lock-free on x86-64);
//     errno is preserved; no locks, no allocation, no runtime calls.
//   * A sampler std::thread started in Initialize wakes every 10 ms, sends SIGPROF with tgkill to
//     each known managed thread, drains the ring and resolves each IP with
//     ICorProfilerInfo::GetFunctionFromIP on the sampler thread (never in the signal handler).
//     The first time a FunctionID is seen its name is resolved (GetFunctionInfo,
//     GetModuleMetaData, IMetaDataImport::GetMethodProps/GetTypeDefProps), also on the sampler
//     thread.  The sampler thread makes no profiling-API call before the runtime has delivered a
//     callback after Initialize returned, and calls ICorProfilerInfo4::InitializeCurrentThread
//     once before anything else.
//   * Shutdown stops and joins the sampler thread FIRST, then switches SIGPROF to SIG_IGN (not
//     SIG_DFL: a late SIGPROF would terminate the process), prints a summary computed from its own
//     tables (no profiling-API calls) and releases ICorProfilerInfo.
//   Believed CORRECT as far as the documentation says.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerInfo::GetFunctionFromIP: "Maps a managed code instruction pointer to a
//     FunctionID."  The page has no threading restriction; nothing says it must be called on a
//     managed thread or from a callback.  (Answer to the brief's question: the docs do not forbid
//     calling it from a profiler-created, non-managed thread.)
//   * ICorProfilerInfo2::DoStackSnapshot: "There is also a risk of deadlock if you call
//     DoStackSnapshot from a thread that your profiler has created ... The first time the thread
//     you created enters certain ICorProfilerInfo* methods (including DoStackSnapshot), the CLR
//     will perform per-thread, CLR-specific initialization on that thread." -- i.e. the docs expect
//     profiler-created threads to call ICorProfilerInfo methods.
//   * ICorProfilerInfo4::InitializeCurrentThread: "We recommend that you call
//     InitializeCurrentThread on any thread that will call a profiler API while there are
//     suspended threads. This method is typically used by sampling profilers that create their own
//     thread ..."  "Call InitializeCurrentThread only when there are no suspended threads."  This
//     sampler never suspends threads; it calls it once at start anyway, as recommended for
//     sampler threads.
//   * CORPROF_E_UNSUPPORTED_CALL_SEQUENCE HRESULT: a "hijacking profiler forcibly resets a
//     thread's register context at an arbitrary time so that the thread can enter profiler code or
//     reenter the common language runtime (CLR) through an ICorProfilerInfo method" -- which is
//     why the signal handler never calls ICorProfilerInfo and only records the IP.
//   * ICorProfilerCallback::ThreadAssignedToOSThread: "Notifies the profiler that a managed thread
//     is being implemented using a particular operating system thread."  On Linux the OS thread id
//     is the kernel tid used with tgkill.
//   * ICorProfilerCallback::ThreadDestroyed: "The threadId value is no longer valid at the time of
//     this call." -- the entry is removed by key; no API call is made with that ID.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." -- hence the sampler thread
//     is joined before anything else in Shutdown, IPs still in the ring are counted but not
//     resolved, and "Certain immutable events may still occur after shutdown; the profiler should
//     take care to return immediately" -- thread callbacks after Shutdown return at once.
//   * COR_PRF_MONITOR enumeration: COR_PRF_MONITOR_THREADS "Controls the ThreadCreated,
//     ThreadDestroyed, ThreadAssignedToOSThread, and ThreadNameChanged callbacks in the
//     ICorProfilerCallback and ICorProfilerCallback2 interfaces."
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

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

namespace sampler {

// ------------------------------------------------------------------ lock-free ring (bounded MPMC)
// Producers: signal handlers on any thread.  Consumer: the sampler thread.
class IpRing {
public:
    static constexpr size_t kCapacity = 8192;  // power of two
    static_assert((kCapacity & (kCapacity - 1)) == 0, "capacity must be a power of two");
    static_assert(std::atomic<size_t>::is_always_lock_free, "ring needs lock-free atomics (signal safety)");
    static_assert(std::atomic<std::uintptr_t>::is_always_lock_free, "ring needs lock-free atomics (signal safety)");

    IpRing() {
        for (size_t i = 0; i < kCapacity; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
    }

    // Async-signal-safe: atomics only.
    bool Push(std::uintptr_t ip) {
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
                return false;  // full: drop the sample
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

IpRing g_ring;  // preallocated, static storage: never freed
std::atomic<unsigned long> g_handled{0}, g_dropped{0};

void OnSigprof(int, siginfo_t*, void* ucv) {
    int savedErrno = errno;
    auto* uc = static_cast<ucontext_t*>(ucv);
    std::uintptr_t ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    if (g_ring.Push(ip))
        g_handled.fetch_add(1, std::memory_order_relaxed);
    else
        g_dropped.fetch_add(1, std::memory_order_relaxed);
    errno = savedErrno;
}

// ------------------------------------------------------------------ profiler
class SignalSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
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
        if (sigaction(SIGPROF, &sa, &oldAction_) != 0) {
            std::fprintf(stderr, "[sampler_signal] sigaction(SIGPROF) failed: %s\n", std::strerror(errno));
            info_->Release();
            info_ = nullptr;
            return E_FAIL;
        }
        pid_ = getpid();
        sampler_ = std::thread([this] { SamplerLoop(); });
        std::fprintf(stderr, "[sampler_signal] initialized: SIGPROF handler installed, sampler every 10 ms\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID threadId) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        std::lock_guard<std::mutex> g(threadsMu_);
        threads_.emplace(threadId, 0);
        ++threadsSeen_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID threadId, DWORD osThreadId) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        std::lock_guard<std::mutex> g(threadsMu_);
        threads_[threadId] = static_cast<pid_t>(osThreadId);
        ++assigned_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID threadId) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(threadsMu_);  // the ID is no longer valid: only used as a key
        threads_.erase(threadId);
        ++destroyed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        // 1. stop and join the sampler thread before anything else (it calls the profiling API)
        {
            std::lock_guard<std::mutex> g(stopMu_);
            stop_ = true;
        }
        stopCv_.notify_all();
        if (sampler_.joinable()) sampler_.join();
        shutdown_.store(true);
        // 2. no more samples: ignore SIGPROF from now on (a pending one must not kill the process)
        struct sigaction ign;
        std::memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGPROF, &ign, nullptr);
        // 3. anything still in the ring is counted, not resolved (no API calls after Shutdown)
        std::uintptr_t ip;
        unsigned long leftover = 0;
        while (g_ring.Pop(&ip)) ++leftover;
        // 4. summary from our own tables
        std::vector<std::pair<FunctionID, unsigned long>> top(perFunction_.begin(), perFunction_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best;
        for (size_t i = 0; i < top.size() && i < 3; ++i) {
            auto it = names_.find(top[i].first);
            best += (i ? ", " : "") + (it != names_.end() ? it->second : std::string("?")) + " x" +
                    std::to_string(top[i].second);
        }
        std::fprintf(stderr,
                     "[sampler_signal] summary: ticks=%lu signals_sent=%lu send_failures=%lu samples=%lu dropped=%lu "
                     "managed=%lu native=%lu leftover=%lu functions=%zu threads_seen=%lu assigned=%lu destroyed=%lu "
                     "init_thread=0x%08x top=[%s]\n",
                     ticks_, sent_, sendFailures_, g_handled.load(), g_dropped.load(), managed_, native_, leftover,
                     perFunction_.size(), threadsSeen_, assigned_, destroyed_, (unsigned)initThreadHr_, best.c_str());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    void SamplerLoop() {
        bool initialized = false;
        std::vector<pid_t> targets;
        for (;;) {
            {
                std::unique_lock<std::mutex> g(stopMu_);
                if (stopCv_.wait_for(g, std::chrono::milliseconds(10), [this] { return stop_; })) break;
            }
            // No profiling-API call before the runtime has called us back after Initialize.
            if (!apiReady_.load(std::memory_order_acquire)) continue;
            if (!initialized) {
                initThreadHr_ = info_->InitializeCurrentThread();
                initialized = true;
            }
            ++ticks_;
            targets.clear();
            {
                std::lock_guard<std::mutex> g(threadsMu_);
                for (const auto& kv : threads_)
                    if (kv.second != 0) targets.push_back(kv.second);
            }
            for (pid_t tid : targets) {
                if (syscall(SYS_tgkill, pid_, tid, SIGPROF) == 0)
                    ++sent_;
                else
                    ++sendFailures_;
            }
            Drain();
        }
        Drain();  // last samples, still before Shutdown proceeds
    }

    void Drain() {
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

    ICorProfilerInfo10* info_ = nullptr;
    struct sigaction oldAction_;
    pid_t pid_ = 0;
    std::thread sampler_;
    std::mutex stopMu_;
    std::condition_variable stopCv_;
    bool stop_ = false;
    std::atomic<bool> apiReady_{false};
    std::atomic<bool> shutdown_{false};

    std::mutex threadsMu_;
    std::unordered_map<ThreadID, pid_t> threads_;
    unsigned long threadsSeen_ = 0, assigned_ = 0, destroyed_ = 0;

    // owned by the sampler thread until it is joined
    HRESULT initThreadHr_ = S_FALSE;
    unsigned long ticks_ = 0, sent_ = 0, sendFailures_ = 0, managed_ = 0, native_ = 0;
    std::unordered_map<FunctionID, unsigned long> perFunction_;
    std::unordered_map<FunctionID, std::string> names_;
};

}  // namespace sampler

DOCFIX_DEFINE_PROFILER(sampler::SignalSampler)
