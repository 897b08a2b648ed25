// late_alloc_sampling.cpp -- GC monitor whose allocation tracking is switched on after a warm-up delay
// (the "enable allocation profiling later, to keep startup cheap / when remote config says so" feature
// APM agents ship).
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo, asks for COR_PRF_MONITOR_GC only, and starts one
//     native "config" thread.
//   * GarbageCollectionStarted / GarbageCollectionFinished: count collections and induced collections.
//   * The config thread waits kWarmupMs (or until Shutdown), then turns allocation tracking on by adding
//     COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED to the current mask
//     (GetEventMask, then SetEventMask).  A failing HRESULT is logged and tracking stays off.
//   * ObjectAllocated (once tracking is on): counts allocations per ClassID; nothing is asked of the runtime.
//   * Shutdown: stops and joins the config thread, prints one summary line, releases the info pointer.
//
// THE BUG: COR_PRF_ENABLE_OBJECT_ALLOCATED is one of the immutable flags (part of
// COR_PRF_MONITOR_IMMUTABLE), yet it is set with ICorProfilerInfo::SetEventMask from the config thread long
// after Initialize returned (the line marked `// BUG:`).  The correct design asks for
// COR_PRF_ENABLE_OBJECT_ALLOCATED in Initialize and toggles only the mutable
// COR_PRF_MONITOR_OBJECT_ALLOCATED later.  (The runtime rejects the whole call -- observed: E_FAIL
// 0x80004005 from both 3.1.23 and 8.0.4 -- so the feature silently never turns on; the profiler only logs it.)
//
// Documentation sentence it breaks:
//   * ICorProfilerCallback::Initialize -- "The Initialize call is the only opportunity to enable (or disable)
//     callbacks that are immutable. Once a callback is enabled by the Initialize call, it cannot be disabled
//     later using ICorProfilerInfo::SetEventMask. The COR_PRF_MONITOR_IMMUTABLE value of the COR_PRF_MONITOR
//     enumeration indicates which events are immutable."  (COR_PRF_MONITOR enumeration:
//     COR_PRF_MONITOR_IMMUTABLE includes COR_PRF_ENABLE_OBJECT_ALLOCATED.)
//
// Documentation otherwise followed:
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown interface that the
//     profiler must query for an ICorProfilerInfo interface pointer."
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_GC controls GarbageCollectionStarted/Finished;
//     COR_PRF_MONITOR_OBJECT_ALLOCATED controls ObjectAllocated.
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." -> the config thread checks the
//     shutdown flag under its mutex before calling, and Shutdown joins it before returning.
//
// App that exercises it: long (runs for PROFHARNESS_APP_SECONDS seconds, well past the warm-up delay; the
// faulty SetEventMask is made once, about kWarmupMs after startup).  Any app running longer than kWarmupMs
// would do.
// A careful checker should report: ICorProfilerInfo::SetEventMask called after Initialize returned with a
// mask that turns on COR_PRF_ENABLE_OBJECT_ALLOCATED (0x00800000), an immutable flag that was off at the end
// of Initialize (the runtime answers with a failure HRESULT: E_FAIL on 3.1.23 and 8.0.4).
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common.h"

using namespace docfix;

namespace {
constexpr int kWarmupMs = 1000;
constexpr COR_PRF_GC_REASON kGcInduced = 1;
}  // namespace

class LateAllocSampling : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[late_alloc_sampling] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[late_alloc_sampling] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        worker_ = std::thread([this] { config_loop(); });
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        gcs_.fetch_add(1, std::memory_order_relaxed);
        if (reason == kGcInduced) induced_.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        gcs_finished_.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID classId) override {
        if (shutdown_.load() || !tracking_.load()) return S_OK;
        std::lock_guard<std::mutex> g(alloc_mu_);
        ++by_class_[classId];
        ++allocations_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        {
            std::lock_guard<std::mutex> g(thread_mu_);
            stop_ = true;
        }
        thread_cv_.notify_all();
        if (worker_.joinable()) worker_.join();
        ICorProfilerInfo* info = info_.exchange(nullptr);

        std::lock_guard<std::mutex> g(alloc_mu_);
        std::fprintf(stderr,
                     "[late_alloc_sampling] shutdown: gcs=%" PRIu64 " finished=%" PRIu64 " induced=%" PRIu64
                     " tracking=%s enable_hr=0x%08x mask_before=0x%08x allocations=%" PRIu64 " classes=%zu\n",
                     gcs_.load(), gcs_finished_.load(), induced_.load(), tracking_.load() ? "on" : "off",
                     (unsigned)enable_hr_, (unsigned)mask_before_, allocations_, by_class_.size());
        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    // Native config thread: after the warm-up, turn allocation tracking on (once).
    void config_loop() {
        std::unique_lock<std::mutex> lk(thread_mu_);
        thread_cv_.wait_for(lk, std::chrono::milliseconds(kWarmupMs), [this] { return stop_; });
        if (stop_ || shutdown_.load()) return;  // Shutdown waits for this thread: no call after it begins
        ICorProfilerInfo* info = info_.load();
        if (info == nullptr) return;

        DWORD mask = 0;
        HRESULT hr = info->GetEventMask(&mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[late_alloc_sampling] GetEventMask failed 0x%08x\n", (unsigned)hr);
            return;
        }
        hr = info->SetEventMask(mask | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED);  // BUG: immutable flag set after Initialize
        {
            std::lock_guard<std::mutex> g(alloc_mu_);
            mask_before_ = mask;
            enable_hr_ = hr;
        }
        if (failed(hr)) {
            std::fprintf(stderr, "[late_alloc_sampling] enabling allocation tracking failed 0x%08x\n", (unsigned)hr);
            return;
        }
        tracking_.store(true);
    }

    std::atomic<ICorProfilerInfo*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> tracking_{false};
    std::atomic<std::uint64_t> gcs_{0};
    std::atomic<std::uint64_t> gcs_finished_{0};
    std::atomic<std::uint64_t> induced_{0};

    std::thread worker_;
    std::mutex thread_mu_;  // guards stop_; held by the config thread while it decides and calls
    std::condition_variable thread_cv_;
    bool stop_ = false;

    std::mutex alloc_mu_;  // guards everything below
    std::unordered_map<ClassID, std::uint64_t> by_class_;
    std::uint64_t allocations_ = 0;
    HRESULT enable_hr_ = S_OK;
    DWORD mask_before_ = 0;
};

DOCFIX_DEFINE_PROFILER(LateAllocSampling)
