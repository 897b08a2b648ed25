// attach_only.cpp -- on-demand diagnostics agent that is ATTACHED to a running process.
//
// What it does:
//   * Startup load is refused: ICorProfilerCallback::Initialize prints a note and returns E_FAIL,
//     so a process started with CORECLR_ENABLE_PROFILING=1 and this library runs unprofiled.
//   * ICorProfilerCallback3::InitializeForAttach: QueryInterfaces the given IUnknown for
//     ICorProfilerInfo4, copies and parses the client data (ASCII "key=value;key=value":
//     detach_after_ms=<N> (0 = never), poll_ms=<N>, default 3000/200), and sets an event mask made
//     only of flags allowed after attach: COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_THREADS |
//     COR_PRF_MONITOR_GC.  Counts ModuleLoadFinished, ThreadCreated/Destroyed,
//     GarbageCollectionStarted/Finished.
//   * ICorProfilerCallback3::ProfilerAttachComplete: catch-up with ICorProfilerInfo3::EnumModules
//     (counted) and ICorProfilerInfo4::EnumThreads (counted), then starts one worker std::thread.
//   * The worker polls every poll_ms: EnumThreads + GetThreadInfo per thread (thread census).  When
//     detach_after_ms has elapsed it stops polling and, as its LAST profiling-API call, calls
//     ICorProfilerInfo3::RequestProfilerDetach(500) and returns (the thread ends).
//   * ICorProfilerCallback3::ProfilerDetachSucceeded joins the worker (already finished), prints
//     the summary, and makes no CLR call; nothing of this library runs after it returns.
//   * If the process exits before the detach, Shutdown stops and joins the worker first.
//   believed: correct (when attached).
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback3::InitializeForAttach: "Called by the common language runtime (CLR) to
//     give the profiler an opportunity to initialize its state after an attach operation."
//     pvClientData: "A pointer to the data passed to the ... AttachProfiler method ... The CLR
//     frees this memory when InitializeForAttach returns." -- copied before parsing;
//     cbClientData may be 0 with a null pointer.
//   * COR_PRF_ALLOWABLE_AFTER_ATTACH: "Identifies the COR_PRF_MONITOR enumeration values that a
//     profiler can use after attaching to a running application" (MODULE_LOADS, THREADS, GC are in
//     it; corprof.idl).
//   * ICorProfilerCallback3::ProfilerAttachComplete: "the profiler can now call the
//     ICorProfilerInfo3::EnumJITedFunctions and ICorProfilerInfo3::EnumModules catch-up methods";
//     "The profiler can now perform catch-up on the associated IDs without being concerned about
//     missing notifications."
//   * ICorProfilerInfo3::RequestProfilerDetach: S_OK: "The detach request is valid, and the detach
//     procedure is now continuing on another thread. When the detach is fully complete, a
//     ProfilerDetachSucceeded event is issued."  CORPROF_E_UNSUPPORTED_CALL_SEQUENCE if called "on a
//     managed thread but not within an ICorProfilerCallback method" -- the worker is a native
//     thread of the profiler.  dwExpectedCompletionMilliseconds: time the CLR waits before checking
//     that profiler code has left all stacks.
//   * ICorProfilerCallback3::ProfilerDetachSucceeded: "the profiler must not call functions on
//     interfaces that are provided by the CLR during this callback"; "After the profiler returns
//     from this callback, the CLR releases the profiler object and unloads the profiler DLL.
//     Therefore, the profiler must not perform any actions that would cause execution to occur
//     inside the profiler DLL after it returns from this callback." -- hence the worker makes its
//     detach request as its very last action and is joined before the callback returns.
//   * ICorProfilerCallback::Initialize: returning a failure HRESULT refuses the startup load.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common.h"

using namespace docfix;

namespace attachonly {

struct ICorProfilerModuleEnumLite : public IUnknown {  // ICorProfilerModuleEnum (corprof.idl)
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerModuleEnumLite** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, ModuleID ids[], ULONG* pceltFetched) = 0;
};

class AttachOnlyAgent : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown*) override {
        std::fprintf(stderr, "[attach_only] startup load refused: this agent only supports attach\n");
        return E_FAIL;
    }

    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown* unk, void* clientData, UINT cbClientData) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        std::string cfg;
        if (clientData != nullptr && cbClientData > 0) cfg.assign(static_cast<const char*>(clientData), cbClientData);
        ParseConfig(cfg);
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[attach_only] SetEventMask after attach failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[attach_only] attached: client data \"%s\" (%u bytes), detach_after_ms=%d poll_ms=%d\n",
                     cfg.c_str(), cbClientData, detachAfterMs_, pollMs_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ProfilerAttachComplete() override {
        ICorProfilerModuleEnum* me = nullptr;
        if (succeeded(info_->EnumModules(&me)) && me != nullptr) {
            auto* e = reinterpret_cast<ICorProfilerModuleEnumLite*>(me);
            ULONG n = 0;
            e->GetCount(&n);
            catchupModules_ = n;
            e->Release();
        }
        ICorProfilerThreadEnum* te = nullptr;
        if (succeeded(info_->EnumThreads(&te)) && te != nullptr) {
            ULONG n = 0;
            te->GetCount(&n);
            catchupThreads_ = n;
            te->Release();
        }
        started_ = std::chrono::steady_clock::now();
        worker_ = std::thread([this] { WorkerLoop(); });
        std::fprintf(stderr, "[attach_only] attach complete: catch-up modules=%lu threads=%lu\n", catchupModules_,
                     catchupThreads_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT hrStatus) override {
        if (succeeded(hrStatus)) ++modules_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        ++threadsCreated_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID) override {
        ++threadsDestroyed_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        ++gcs_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ProfilerDetachSucceeded() override {
        if (worker_.joinable()) worker_.join();  // it ended right after RequestProfilerDetach
        std::fprintf(stderr, "[attach_only] detached: ");
        PrintSummary();
        // no CLR calls here (the info pointer is not even Released: "must not call functions on
        // interfaces that are provided by the CLR during this callback")
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        StopWorker();
        std::fprintf(stderr, "[attach_only] shutdown before detach: ");
        PrintSummary();
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    void ParseConfig(const std::string& cfg) {
        size_t pos = 0;
        while (pos < cfg.size()) {
            size_t end = cfg.find(';', pos);
            if (end == std::string::npos) end = cfg.size();
            std::string kv = cfg.substr(pos, end - pos);
            size_t eq = kv.find('=');
            if (eq != std::string::npos) {
                std::string k = kv.substr(0, eq);
                int v = std::atoi(kv.c_str() + eq + 1);
                if (k == "detach_after_ms" && v >= 0) detachAfterMs_ = v;
                if (k == "poll_ms" && v > 0) pollMs_ = v;
            }
            pos = end + 1;
        }
    }

    void StopWorker() {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    void WorkerLoop() {
        for (;;) {
            {
                std::unique_lock<std::mutex> g(mu_);
                if (cv_.wait_for(g, std::chrono::milliseconds(pollMs_), [this] { return stop_; })) return;
            }
            Census();
            auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
            if (detachAfterMs_ > 0 && elapsed.count() >= detachAfterMs_) break;
        }
        // Polling has stopped; this is the last profiling-API call this library makes.
        detachHr_ = info_->RequestProfilerDetach(500);
        std::fprintf(stderr, "[attach_only] RequestProfilerDetach -> 0x%08x after %lu polls\n", (unsigned)detachHr_, polls_);
    }

    void Census() {
        ICorProfilerThreadEnum* e = nullptr;
        if (failed(info_->EnumThreads(&e)) || e == nullptr) {
            ++pollFailures_;
            return;
        }
        ThreadID ids[256];
        ULONG n = 0;
        e->Next(256, ids, &n);
        e->Release();
        for (ULONG i = 0; i < n; ++i) {
            DWORD tid = 0;
            if (failed(info_->GetThreadInfo(ids[i], &tid))) ++pollFailures_;
        }
        ++polls_;
        if (n > maxThreads_) maxThreads_ = n;
    }

    void PrintSummary() {
        std::fprintf(stderr,
                     "modules=%lu threads_created=%lu threads_destroyed=%lu gcs=%lu catchup_modules=%lu "
                     "catchup_threads=%lu polls=%lu poll_failures=%lu max_threads=%lu detach_hr=0x%08x\n",
                     modules_.load(), threadsCreated_.load(), threadsDestroyed_.load(), gcs_.load(), catchupModules_,
                     catchupThreads_, polls_, pollFailures_, maxThreads_, (unsigned)detachHr_);
    }

    ICorProfilerInfo4* info_ = nullptr;
    int detachAfterMs_ = 3000, pollMs_ = 200;
    std::chrono::steady_clock::time_point started_;
    std::thread worker_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::atomic<unsigned long> modules_{0}, threadsCreated_{0}, threadsDestroyed_{0}, gcs_{0};
    unsigned long catchupModules_ = 0, catchupThreads_ = 0;
    // owned by the worker until joined
    unsigned long polls_ = 0, pollFailures_ = 0, maxThreads_ = 0;
    HRESULT detachHr_ = S_FALSE;
};

}  // namespace attachonly

DOCFIX_DEFINE_PROFILER(attachonly::AttachOnlyAgent)
