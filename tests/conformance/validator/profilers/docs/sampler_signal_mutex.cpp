// sampler_signal_mutex.cpp -- CPU-time sampler (POSIX CPU-time timer / SIGPROF), mutex-protected buffer.
//
// What it does:
//   * Same product as sampler_signal_safe, but armed with timer_create(CLOCK_PROCESS_CPUTIME_ID,
//     SIGEV_SIGNAL = SIGPROF) + timer_settime(10 ms period) instead of setitimer, and with a simpler
//     buffer: a std::vector<uintptr_t> reserved up front to 64 Ki entries (so push_back never
//     reallocates; when full the sample is counted as dropped) guarded by a std::mutex.  The
//     SIGPROF handler takes the mutex (std::lock_guard), push_backs the interrupted RIP and
//     returns.  The drain std::thread takes the same mutex every 20 ms, swaps the vector with an
//     equally reserved spare, releases the mutex, and resolves the IPs with GetFunctionFromIP.
//   * Shutdown deletes the timer, joins the drain thread, switches SIGPROF to SIG_IGN, prints a
//     summary, releases ICorProfilerInfo.
//   believed: faulty (deliberately): the handler locks a std::mutex (pthread_mutex_lock), which is
//   not async-signal-safe.  A process-directed SIGPROF may be delivered to ANY thread that does
//   not block it -- including the drain thread while it holds the mutex for the swap (the author
//   did not block SIGPROF there), which then deadlocks on itself forever; a thread interrupted
//   inside the handler's own critical section cannot be re-entered (SIGPROF is blocked during its
//   handler) but the drain thread's critical section can.  The window is a few instructions every
//   20 ms, so the hang is rare.
//
// Documentation followed: as sampler_signal_safe.cpp (GetFunctionFromIP, InitializeCurrentThread,
// CORPROF_E_UNSUPPORTED_CALL_SEQUENCE: no runtime calls from the handler, Shutdown),
// timer_create(2) ("CLOCK_PROCESS_CPUTIME_ID: A clock that measures (user and system) CPU time
// consumed by (all of the threads in) the calling process"; SIGEV_SIGNAL: "Upon timer expiration,
// generate the signal sigev_signo for the process"), sigaction(2).  Not followed:
// signal-safety(7) -- pthread_mutex_lock is not on the async-signal-safe list.
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
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

namespace sigmutex {

// ------------------------------------------------------------------ sample buffer
constexpr size_t kBufferCapacity = 65536;
std::mutex g_bufMu;
std::vector<std::uintptr_t>* g_buf = nullptr;  // reserved to kBufferCapacity in Initialize
std::atomic<unsigned long> g_recorded{0}, g_dropped{0};
volatile sig_atomic_t g_enabled = 0;

void OnSigprof(int, siginfo_t*, void* ucv) {
    if (!g_enabled) return;
    int savedErrno = errno;
    auto* uc = static_cast<ucontext_t*>(ucv);
    std::uintptr_t ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    {
        std::lock_guard<std::mutex> g(g_bufMu);
        if (g_buf->size() < g_buf->capacity()) {  // never reallocates in the handler
            g_buf->push_back(ip);
            g_recorded.fetch_add(1, std::memory_order_relaxed);
        } else {
            g_dropped.fetch_add(1, std::memory_order_relaxed);
        }
    }
    errno = savedErrno;
}

class MutexSignalSampler : public CallbackBase {
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
        g_buf = new std::vector<std::uintptr_t>();
        g_buf->reserve(kBufferCapacity);
        spare_ = new std::vector<std::uintptr_t>();
        spare_->reserve(kBufferCapacity);
        g_enabled = 1;
        drain_ = std::thread([this] { DrainLoop(); });
        struct sigevent sev;
        std::memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_SIGNAL;
        sev.sigev_signo = SIGPROF;
        if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &timer_) == 0) {
            struct itimerspec its;
            its.it_interval.tv_sec = 0;
            its.it_interval.tv_nsec = 10 * 1000 * 1000;
            its.it_value = its.it_interval;
            timer_settime(timer_, 0, &its, nullptr);
            timerArmed_ = true;
        } else {
            std::fprintf(stderr, "[sampler_signal_mutex] timer_create failed: %s\n", std::strerror(errno));
        }
        std::fprintf(stderr, "[sampler_signal_mutex] initialized: CPU-time timer 10 ms, mutex-guarded buffer of %zu\n",
                     kBufferCapacity);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        // 1. no new samples
        if (timerArmed_) timer_delete(timer_);
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
        unsigned long leftover = g_buf->size();

        std::vector<std::pair<FunctionID, unsigned long>> top(perFunction_.begin(), perFunction_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best;
        for (size_t i = 0; i < top.size() && i < 4; ++i) {
            auto it = names_.find(top[i].first);
            best += (i ? ", " : "") + (it != names_.end() ? it->second : std::string("?")) + " x" +
                    std::to_string(top[i].second);
        }
        std::fprintf(stderr,
                     "[sampler_signal_mutex] summary: samples=%lu dropped=%lu resolved_managed=%lu native=%lu "
                     "leftover=%lu drains=%lu functions=%zu init_thread=0x%08x top=[%s]\n",
                     g_recorded.load(), g_dropped.load(), managed_, native_, leftover, drains_, perFunction_.size(),
                     (unsigned)initThreadHr_, best.c_str());
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    void DrainLoop() {
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
        {
            std::lock_guard<std::mutex> g(g_bufMu);
            std::swap(g_buf, spare_);
        }
        for (std::uintptr_t ip : *spare_) {
            FunctionID fid = 0;
            HRESULT hr = info_->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(ip), &fid);
            if (hr == S_OK && fid != 0) {
                ++managed_;
                if (++perFunction_[fid] == 1) names_[fid] = NameOf(fid);
            } else {
                ++native_;
            }
        }
        spare_->clear();  // keeps its capacity
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
    timer_t timer_{};
    bool timerArmed_ = false;
    std::vector<std::uintptr_t>* spare_ = nullptr;
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

}  // namespace sigmutex

DOCFIX_DEFINE_PROFILER(sigmutex::MutexSignalSampler)
