// sampler_outlives_shutdown.cpp -- "hot thread" monitor: per-managed-thread CPU time every 100 ms.
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo4, sets COR_PRF_MONITOR_THREADS (thread names
//     from ThreadNameChanged), stores everything, then starts a background std::thread and
//     detaches it ("fire and forget" monitor thread, as many agents do).
//   * The monitor thread wakes every 100 ms (once a callback has arrived after Initialize) and
//     calls ICorProfilerInfo4::EnumThreads; for each managed ThreadID it calls
//     ICorProfilerInfo::GetThreadInfo to get the OS thread id and reads
//     /proc/self/task/<tid>/stat (utime+stime) to attribute CPU time to the managed thread.  The
//     hottest thread (most CPU since the last tick) is counted per tick.  With DOCFIX_VERBOSE=1 it
//     prints one line per tick.
//   * Shutdown marks the profiler as shut down (callbacks return at once), prints the summary
//     (ticks, threads seen, hottest thread) and Releases ICorProfilerInfo.
//   believed: faulty (deliberately): Shutdown neither stops nor joins the monitor thread (it was
//   detached in Initialize and nothing tells it to stop), so it keeps calling EnumThreads and
//   GetThreadInfo every 100 ms after Shutdown has returned, until the process finally exits --
//   against "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//   the Shutdown method is called."  The author set the shutdown flag for the callbacks and
//   forgot the thread; it only matters if a tick falls between Shutdown and process exit (or
//   during a slow exit), so it usually looks fine.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerInfo4::EnumThreads: "Gets an enumerator that provides methods to sequentially
//     iterate through the collection of all managed threads in the profiled process."
//   * ICorProfilerInfo::GetThreadInfo: "Gets the current operating system thread identity of the
//     specified thread."  (pdwWin32ThreadId; on Linux the kernel tid.)
//   * ICorProfilerThreadEnum::Next / Release: ordinary COM enumerator use.
//   * ICorProfilerCallback2::ThreadNameChanged: name is "not null-terminated"; cchName is its length.
//   * ICorProfilerCallback::Shutdown: "Notifies the profiler that the application is shutting
//     down." "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//     the Shutdown method is called. Any calls to ICorProfilerInfo methods result in undefined
//     behavior after the Shutdown method returns."  (Violated by the monitor thread, see above.)
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common.h"

using namespace docfix;

namespace hotthreads {

class HotThreadMonitor : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[sampler_outlives_shutdown] QueryInterface(ICorProfilerInfo4) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        clkTck_ = sysconf(_SC_CLK_TCK);
        std::thread([this] { MonitorLoop(); }).detach();
        std::fprintf(stderr, "[sampler_outlives_shutdown] initialized: thread CPU monitor every 100 ms\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID threadId, ULONG cchName, WCHAR* name) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        names_[threadId] = to_utf8(name, cchName);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID threadId) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        lastCpu_.erase(threadId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::string hottest;
        unsigned long best = 0;
        {
            std::lock_guard<std::mutex> g(mu_);
            for (const auto& kv : hotCount_)
                if (kv.second > best) {
                    best = kv.second;
                    auto it = names_.find(kv.first);
                    hottest = it != names_.end() ? it->second : "tid " + std::to_string(osTid_[kv.first]);
                }
        }
        std::fprintf(stderr,
                     "[sampler_outlives_shutdown] summary: ticks=%lu enum_failures=%lu threads_seen=%zu "
                     "hottest=[%s x%lu] total_cpu_ms=%lu\n",
                     ticks_.load(), enumFailures_.load(), osTid_.size(), hottest.c_str(), best,
                     totalCpuMs_.load());
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    void MonitorLoop() {
        for (;;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (!apiReady_.load(std::memory_order_acquire)) continue;
            Tick();
        }
    }

    unsigned long ReadCpuTicks(DWORD tid) {
        char path[64];
        std::snprintf(path, sizeof path, "/proc/self/task/%u/stat", (unsigned)tid);
        FILE* f = std::fopen(path, "r");
        if (f == nullptr) return 0;
        char buf[1024];
        size_t n = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        buf[n] = 0;
        const char* p = std::strrchr(buf, ')');  // comm may contain spaces
        if (p == nullptr) return 0;
        unsigned long utime = 0, stime = 0;
        // fields after ")": state(3) ... utime(14) stime(15)
        if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return 0;
        return utime + stime;
    }

    void Tick() {
        ICorProfilerThreadEnum* e = nullptr;
        HRESULT hr = info_->EnumThreads(&e);
        if (failed(hr) || e == nullptr) {
            ++enumFailures_;
            return;
        }
        ThreadID ids[256];
        ULONG fetched = 0;
        e->Next(256, ids, &fetched);
        e->Release();
        ThreadID hot = 0;
        unsigned long hotDelta = 0;
        for (ULONG i = 0; i < fetched; ++i) {
            DWORD tid = 0;
            if (failed(info_->GetThreadInfo(ids[i], &tid)) || tid == 0) continue;
            unsigned long cpu = ReadCpuTicks(tid);
            std::lock_guard<std::mutex> g(mu_);
            osTid_[ids[i]] = tid;
            unsigned long& last = lastCpu_[ids[i]];
            unsigned long delta = cpu >= last ? cpu - last : 0;
            last = cpu;
            totalCpuMs_ += delta * 1000 / (clkTck_ > 0 ? clkTck_ : 100);
            if (delta > hotDelta) {
                hotDelta = delta;
                hot = ids[i];
            }
        }
        if (hot != 0) {
            std::lock_guard<std::mutex> g(mu_);
            ++hotCount_[hot];
        }
        unsigned long t = ++ticks_;
        if (verbose_)
            std::fprintf(stderr, "[sampler_outlives_shutdown] tick %lu: managed_threads=%u hottest_delta_ticks=%lu\n", t,
                         (unsigned)fetched, hotDelta);
    }

    ICorProfilerInfo4* info_ = nullptr;
    bool verbose_ = false;
    long clkTck_ = 100;
    std::atomic<bool> apiReady_{false};
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned long> ticks_{0}, enumFailures_{0}, totalCpuMs_{0};
    std::mutex mu_;
    std::unordered_map<ThreadID, std::string> names_;
    std::unordered_map<ThreadID, DWORD> osTid_;
    std::unordered_map<ThreadID, unsigned long> lastCpu_;
    std::unordered_map<ThreadID, unsigned long> hotCount_;
};

}  // namespace hotthreads

DOCFIX_DEFINE_PROFILER(hotthreads::HotThreadMonitor)
