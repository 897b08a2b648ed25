// sampler_walk_all.cpp -- 100 ms "wall-clock" stack sampler that walks every managed thread.
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo10, sets COR_PRF_MONITOR_THREADS |
//     COR_PRF_ENABLE_STACK_SNAPSHOT, stores everything the sampler thread needs, and only THEN
//     starts the sampler std::thread (last statement before returning S_OK).
//   * The sampler thread waits for the first callback after Initialize (ThreadCreated /
//     ThreadAssignedToOSThread), calls ICorProfilerInfo4::InitializeCurrentThread once, and then
//     every 100 ms:
//        SuspendRuntime -> EnumThreads -> DoStackSnapshot(thread, cb, COR_PRF_SNAPSHOT_DEFAULT,
//        &state, NULL, 0) for every managed thread -> ResumeRuntime,
//     the snapshot callback only copying FunctionIDs into a fixed per-walk array (no allocation,
//     no locks, no API calls while the runtime is suspended).  After ResumeRuntime the FunctionIDs
//     are aggregated and new ones named (GetFunctionInfo + GetModuleMetaData + IMetaDataImport).
//   * ThreadDestroyed blocks until a walk in progress is finished (walk mutex), as the
//     DoStackSnapshot page asks.
//   * Shutdown stops and joins the sampler thread FIRST, then prints a summary from its own
//     tables and releases ICorProfilerInfo.
//   believed: correct.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/... and
// dotnet/core/unmanaged-api/profiling/...):
//   * ICorProfilerInfo2::DoStackSnapshot (spec/DoStackSnapshot.md): "If a ThreadID of a different
//     thread is passed, the common language runtime (CLR) suspends that thread, performs the
//     snapshot, and resumes."  "Snapshots can be taken of other threads only if the target thread
//     is suspended at the time."  -- on Linux the profiler cannot suspend a thread itself, so the
//     whole runtime is suspended with ICorProfilerInfo10::SuspendRuntime ("Suspends the runtime
//     without performing a GC.") around the walks and resumed with ResumeRuntime.  No seed is
//     passed: every target is stopped by the runtime at a point the runtime itself can walk from.
//     "Always block in your ICorProfilerCallback::ThreadDestroyed callback until that thread's
//     stack walk is complete." -- done with walkMu_.  "Do not hold a lock while your profiler
//     calls into a CLR function that can trigger a garbage collection." -- walkMu_ is taken only
//     after SuspendRuntime returned and released before ResumeRuntime; DoStackSnapshot and
//     EnumThreads do not trigger a GC.  "There is also a risk of deadlock if you call
//     DoStackSnapshot from a thread that your profiler has created ... The first time the thread
//     you created enters certain ICorProfilerInfo* methods ... per-thread, CLR-specific
//     initialization" -- the thread calls InitializeCurrentThread before it ever suspends.
//   * ICorProfilerInfo4::InitializeCurrentThread: "We recommend that you call
//     InitializeCurrentThread on any thread that will call a profiler API while there are
//     suspended threads. This method is typically used by sampling profilers that create their own
//     thread to call the ICorProfilerInfo2::DoStackSnapshot method to perform stack walks on
//     target threads." / "Call InitializeCurrentThread only when there are no suspended threads."
//   * ICorProfilerInfo4::EnumThreads: "Gets an enumerator that provides methods to sequentially
//     iterate through the collection of all managed threads in the profiled process."  The
//     ThreadIDs are used only while the runtime is suspended (no thread can die meanwhile).
//   * StackSnapshotCallback: called "for each managed frame (or run of unmanaged frames)";
//     funcId is zero for a run of unmanaged frames.  The callback returns S_OK to continue.
//   * COR_PRF_MONITOR enumeration: COR_PRF_ENABLE_STACK_SNAPSHOT "Enables calls to the
//     DoStackSnapshot method."
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." -- the sampler thread is
//     joined before Shutdown does anything else.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace walkall {

constexpr size_t kMaxThreads = 512;
constexpr size_t kMaxFrames = 1024;

struct WalkState {
    FunctionID frames[kMaxFrames];
    size_t count = 0;
    unsigned long nativeRuns = 0;
    unsigned long truncated = 0;
};

// StackSnapshotCallback: runs while the runtime is suspended -- copy only.
HRESULT OnFrame(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* clientData) {
    auto* st = static_cast<WalkState*>(clientData);
    if (funcId == 0) {
        ++st->nativeRuns;
    } else if (st->count < kMaxFrames) {
        st->frames[st->count++] = funcId;
    } else {
        ++st->truncated;
    }
    return S_OK;
}

class WalkAllSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[sampler_walk_all] QueryInterface(ICorProfilerInfo10) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            std::fprintf(stderr, "[sampler_walk_all] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        const char* p = std::getenv("DOCFIX_SAMPLE_MS");
        periodMs_ = (p != nullptr && std::atoi(p) > 0) ? std::atoi(p) : 100;
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        walk_ = new WalkState();  // big (8 KiB), allocated once, never freed
        // Everything the thread uses is stored: start it last.
        sampler_ = std::thread([this] { SamplerLoop(); });
        std::fprintf(stderr, "[sampler_walk_all] initialized: walking all managed threads every %d ms\n", periodMs_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        ++threadsCreated_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID, DWORD) override {
        if (shutdown_.load()) return S_OK;
        apiReady_.store(true, std::memory_order_release);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        // "Always block in your ThreadDestroyed callback until that thread's stack walk is complete."
        std::lock_guard<std::mutex> g(walkMu_);
        ++threadsDestroyed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> g(stopMu_);
            stop_ = true;
        }
        stopCv_.notify_all();
        if (sampler_.joinable()) sampler_.join();
        shutdown_.store(true);

        std::vector<std::pair<FunctionID, unsigned long>> top(perFunction_.begin(), perFunction_.end());
        std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string best;
        for (size_t i = 0; i < top.size() && i < 4; ++i) {
            auto it = names_.find(top[i].first);
            best += (i ? ", " : "") + (it != names_.end() ? it->second : std::string("?")) + " x" +
                    std::to_string(top[i].second);
        }
        std::fprintf(stderr,
                     "[sampler_walk_all] summary: ticks=%lu suspend_failures=%lu resume_failures=%lu walks=%lu "
                     "walk_ok=%lu walk_failed=%lu last_walk_hr=0x%08x managed_frames=%lu native_runs=%lu "
                     "truncated=%lu max_threads_per_tick=%lu functions=%zu threads_created=%lu threads_destroyed=%lu "
                     "init_thread=0x%08x top=[%s]\n",
                     ticks_, suspendFailures_, resumeFailures_, walks_, walkOk_, walkFailed_, (unsigned)lastWalkHr_,
                     managedFrames_, nativeRuns_, truncated_, maxThreads_, perFunction_.size(),
                     threadsCreated_.load(), threadsDestroyed_.load(), (unsigned)initThreadHr_, best.c_str());
        if (info_ != nullptr) info_->Release();  // pointer kept: nothing may dereference null later
        return S_OK;
    }

private:
    void SamplerLoop() {
        bool initialized = false;
        for (;;) {
            {
                std::unique_lock<std::mutex> g(stopMu_);
                if (stopCv_.wait_for(g, std::chrono::milliseconds(periodMs_), [this] { return stop_; })) break;
            }
            if (!apiReady_.load(std::memory_order_acquire)) continue;  // Initialize has not returned yet
            if (!initialized) {
                initThreadHr_ = info_->InitializeCurrentThread();  // no thread is suspended now
                initialized = true;
            }
            Tick();
        }
    }

    void Tick() {
        ++ticks_;
        HRESULT hr = info_->SuspendRuntime();
        if (failed(hr)) {
            ++suspendFailures_;
            lastWalkHr_ = hr;
            return;
        }
        size_t nThreads = 0;
        {
            std::lock_guard<std::mutex> g(walkMu_);
            ICorProfilerThreadEnum* e = nullptr;
            if (succeeded(info_->EnumThreads(&e)) && e != nullptr) {
                ULONG fetched = 0;
                e->Next(static_cast<ULONG>(kMaxThreads), threads_, &fetched);
                nThreads = fetched;
                e->Release();
            }
            for (size_t i = 0; i < nThreads; ++i) {
                WalkState& st = *walk_;
                st.count = 0;
                st.nativeRuns = 0;
                st.truncated = 0;
                ++walks_;
                HRESULT whr = info_->DoStackSnapshot(threads_[i], &OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &st, nullptr, 0);
                if (succeeded(whr)) {
                    ++walkOk_;
                } else {
                    ++walkFailed_;
                    lastWalkHr_ = whr;
                }
                // copy out of the shared state into this tick's buffer (fixed storage, no allocation)
                for (size_t f = 0; f < st.count && tickFrames_ < kTickFrames; ++f) tickBuf_[tickFrames_++] = st.frames[f];
                nativeRuns_ += st.nativeRuns;
                truncated_ += st.truncated;
            }
        }
        if (failed(info_->ResumeRuntime())) ++resumeFailures_;
        maxThreads_ = std::max<unsigned long>(maxThreads_, nThreads);
        // Runtime running again: aggregate and name new functions.
        for (size_t f = 0; f < tickFrames_; ++f) {
            ++managedFrames_;
            if (++perFunction_[tickBuf_[f]] == 1) names_[tickBuf_[f]] = NameOf(tickBuf_[f]);
        }
        if (verbose_)
            std::fprintf(stderr, "[sampler_walk_all] tick %lu: threads=%zu frames=%zu\n", ticks_, nThreads, tickFrames_);
        tickFrames_ = 0;
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
    int periodMs_ = 100;
    bool verbose_ = false;
    std::thread sampler_;
    std::mutex stopMu_;
    std::condition_variable stopCv_;
    bool stop_ = false;
    std::atomic<bool> apiReady_{false};
    std::atomic<bool> shutdown_{false};
    std::mutex walkMu_;
    std::atomic<unsigned long> threadsCreated_{0}, threadsDestroyed_{0};

    // owned by the sampler thread until it is joined
    static constexpr size_t kTickFrames = 16384;
    WalkState* walk_ = nullptr;
    ThreadID threads_[kMaxThreads];
    FunctionID tickBuf_[kTickFrames];
    size_t tickFrames_ = 0;
    HRESULT initThreadHr_ = S_FALSE, lastWalkHr_ = S_OK;
    unsigned long ticks_ = 0, suspendFailures_ = 0, resumeFailures_ = 0, walks_ = 0, walkOk_ = 0, walkFailed_ = 0;
    unsigned long managedFrames_ = 0, nativeRuns_ = 0, truncated_ = 0, maxThreads_ = 0;
    std::unordered_map<FunctionID, unsigned long> perFunction_;
    std::unordered_map<FunctionID, std::string> names_;
};

}  // namespace walkall

DOCFIX_DEFINE_PROFILER(walkall::WalkAllSampler)
