// sampler_signal_malloc.cpp -- CPU-time sampler (ITIMER_PROF / SIGPROF) with a linked sample list.
//
// What it does:
//   * Same product as sampler_signal_safe: ICorProfilerInfo4, COR_PRF_MONITOR_THREADS, a SIGPROF
//     handler (sigaction, SA_SIGINFO | SA_RESTART), setitimer(ITIMER_PROF, 10 ms), a drain
//     std::thread that resolves IPs with GetFunctionFromIP every 20 ms, and a Shutdown that
//     disarms the timer, joins the drain thread, switches SIGPROF to SIG_IGN and prints a summary.
//   * The sample buffer is an unbounded lock-free stack of heap nodes: the handler does
//     `new Sample{ip, tid, next}` and publishes it with a compare-exchange on an atomic head; the
//     drain thread exchanges the head with nullptr, walks the list, resolves and deletes the nodes.
//     The author's reasoning: "lock-free, so it is fine in a signal handler; unbounded, so no
//     sample is ever dropped".
//   believed: faulty (deliberately): the SIGPROF handler calls operator new (malloc), which is not
//   async-signal-safe (signal-safety(7)).  SIGPROF interrupts whatever the thread is doing,
//   including malloc/free themselves (the runtime's native code, libc, other profilers);
//   a handler that re-enters the allocator on that thread can deadlock on the arena lock or
//   corrupt the heap.  Usually the interrupted thread is in managed code (no allocator lock held)
//   and glibc's per-thread tcache serves the 32-byte node without locking, so it mostly works.
//
// Documentation followed: as sampler_signal_safe.cpp (GetFunctionFromIP, InitializeCurrentThread,
// CORPROF_E_UNSUPPORTED_CALL_SEQUENCE: no runtime calls from the handler, Shutdown), setitimer(2),
// sigaction(2).  The one rule not followed is signal-safety(7): the handler allocates.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
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

namespace sigmalloc {

// ------------------------------------------------------------------ sample list
struct Sample {
    std::uintptr_t ip;
    long tid;
    Sample* next;
};
std::atomic<Sample*> g_head{nullptr};  // lock-free LIFO of heap nodes
std::atomic<unsigned long> g_recorded{0};
volatile sig_atomic_t g_enabled = 0;

void OnSigprof(int, siginfo_t*, void* ucv) {
    if (!g_enabled) return;
    int savedErrno = errno;
    auto* uc = static_cast<ucontext_t*>(ucv);
    auto* s = new Sample{static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]), syscall(SYS_gettid), nullptr};
    s->next = g_head.load(std::memory_order_relaxed);
    while (!g_head.compare_exchange_weak(s->next, s, std::memory_order_release, std::memory_order_relaxed)) {
    }
    g_recorded.fetch_add(1, std::memory_order_relaxed);
    errno = savedErrno;
}

class MallocSignalSampler : public CallbackBase {
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
            std::fprintf(stderr, "[sampler_signal_malloc] setitimer failed: %s\n", std::strerror(errno));
        std::fprintf(stderr, "[sampler_signal_malloc] initialized: ITIMER_PROF 10 ms, unbounded lock-free sample list\n");
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
        for (Sample* p = g_head.exchange(nullptr); p != nullptr;) {
            Sample* next = p->next;
            delete p;
            ++leftover;
            p = next;
        }

        std::vector<std::pair<FunctionID, unsigned long>> top(perFunction_.begin(), perFunction_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best;
        for (size_t i = 0; i < top.size() && i < 4; ++i) {
            auto it = names_.find(top[i].first);
            best += (i ? ", " : "") + (it != names_.end() ? it->second : std::string("?")) + " x" +
                    std::to_string(top[i].second);
        }
        std::fprintf(stderr,
                     "[sampler_signal_malloc] summary: samples=%lu resolved_managed=%lu native=%lu "
                     "leftover=%lu drains=%lu functions=%zu init_thread=0x%08x top=[%s]\n",
                     g_recorded.load(), managed_, native_, leftover, drains_, perFunction_.size(),
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
        Sample* list = g_head.exchange(nullptr, std::memory_order_acquire);
        while (list != nullptr) {
            std::uintptr_t ip = list->ip;
            Sample* next = list->next;
            delete list;
            list = next;
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

}  // namespace sigmalloc

DOCFIX_DEFINE_PROFILER(sigmalloc::MallocSignalSampler)
