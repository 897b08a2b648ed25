// startup_race_sampler.cpp -- 50 ms stack sampler that writes a collapsed-stack profile file.
//
// What it does:
//   * Same sampling core as sampler_walk_all (SuspendRuntime -> EnumThreads -> DoStackSnapshot per
//     managed thread -> ResumeRuntime, FunctionIDs copied in the snapshot callback, named after
//     ResumeRuntime), but organised the way a "start the engine first, then wire it up" product
//     would do it: Initialize FIRST starts the sampler std::thread, and only afterwards
//     QueryInterfaces the IUnknown for ICorProfilerInfo10, stores the pointer in info_ and sets the
//     event mask.  The sampler thread reads its configuration (DOCFIX_SAMPLE_MS, DOCFIX_PROFILE_OUT),
//     opens the output file and then immediately calls info_->InitializeCurrentThread() -- the
//     DoStackSnapshot page recommends the per-thread initialization happen before any suspension,
//     so the author does it "as early as possible".
//   * Every tick after the first callback: suspend, enumerate, walk, resume; on Shutdown the thread
//     is stopped and joined, the folded stacks ("A;B;C count") are written to the output file
//     (default /tmp/docfix_startup_race_sampler.<pid>.folded), a summary is printed, info released.
//   believed: faulty (deliberately): the sampler thread is started in Initialize BEFORE info_ is
//   stored (and before SetEventMask); its first statement after opening the output file
//   dereferences info_.  Usually Initialize wins (thread start-up + fopen take longer than one
//   QueryInterface), but when the new thread is scheduled first it calls through a null
//   ICorProfilerInfo10 pointer (SIGSEGV) -- or, on a weakly ordered machine, through a pointer
//   it sees before the object behind it.  info_ is a plain (non-atomic) member: a data race.
//
// Documentation followed: the same pages as sampler_walk_all.cpp (DoStackSnapshot,
// InitializeCurrentThread, EnumThreads, SuspendRuntime/ResumeRuntime, Shutdown), plus
// ICorProfilerCallback::Initialize -- "Pointer to an IUnknown interface that the profiler must
// query for an ICorProfilerInfo interface pointer."  Nothing on that page says in which order a
// profiler may start its own threads; the author simply did not think about the ordering.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace startrace {

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

class StartupRaceSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        walk_ = new WalkState();  // big (8 KiB), allocated once, never freed
        // Start the sampling engine right away so no early activity is missed.
        sampler_ = std::thread([this] { SamplerLoop(); });

        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[startup_race_sampler] QueryInterface(ICorProfilerInfo10) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            std::fprintf(stderr, "[startup_race_sampler] SetEventMask failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        std::fprintf(stderr, "[startup_race_sampler] initialized\n");
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
                     "[startup_race_sampler] summary: ticks=%lu suspend_failures=%lu resume_failures=%lu walks=%lu "
                     "walk_ok=%lu walk_failed=%lu last_walk_hr=0x%08x managed_frames=%lu native_runs=%lu "
                     "truncated=%lu max_threads_per_tick=%lu functions=%zu threads_created=%lu threads_destroyed=%lu "
                     "init_thread=0x%08x top=[%s]\n",
                     ticks_, suspendFailures_, resumeFailures_, walks_, walkOk_, walkFailed_, (unsigned)lastWalkHr_,
                     managedFrames_, nativeRuns_, truncated_, maxThreads_, perFunction_.size(),
                     threadsCreated_.load(), threadsDestroyed_.load(), (unsigned)initThreadHr_, best.c_str());
        if (out_ != nullptr) {
            for (const auto& kv : folded_) std::fprintf(out_, "%s %lu\n", kv.first.c_str(), kv.second);
            std::fclose(out_);
            out_ = nullptr;
        }
        std::fprintf(stderr, "[startup_race_sampler] wrote %zu folded stacks to %s\n", folded_.size(), outPath_.c_str());
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    void SamplerLoop() {
        const char* p = std::getenv("DOCFIX_SAMPLE_MS");
        periodMs_ = (p != nullptr && std::atoi(p) > 0) ? std::atoi(p) : 50;
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        const char* out = std::getenv("DOCFIX_PROFILE_OUT");
        outPath_ = out != nullptr ? out : "/tmp/docfix_startup_race_sampler." + std::to_string(getpid()) + ".folded";
        out_ = std::fopen(outPath_.c_str(), "w");
        // Per-thread CLR initialization first, before this thread ever suspends the runtime.
        initThreadHr_ = info_->InitializeCurrentThread();
        for (;;) {
            {
                std::unique_lock<std::mutex> g(stopMu_);
                if (stopCv_.wait_for(g, std::chrono::milliseconds(periodMs_), [this] { return stop_; })) break;
            }
            if (!apiReady_.load(std::memory_order_acquire)) continue;  // runtime not up yet
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
                if (st.count > 0 && tickFrames_ + st.count + 1 <= kTickFrames) {
                    for (size_t f = 0; f < st.count; ++f) tickBuf_[tickFrames_++] = st.frames[f];
                    tickBuf_[tickFrames_++] = 0;  // end of one stack
                }
                nativeRuns_ += st.nativeRuns;
                truncated_ += st.truncated;
            }
        }
        if (failed(info_->ResumeRuntime())) ++resumeFailures_;
        maxThreads_ = std::max<unsigned long>(maxThreads_, nThreads);
        // Runtime running again: aggregate and name new functions.
        std::string stack;
        for (size_t f = 0; f < tickFrames_; ++f) {
            FunctionID fid = tickBuf_[f];
            if (fid == 0) {  // leaf-first walk ended: store root-first folded line
                ++folded_[stack];
                stack.clear();
                continue;
            }
            ++managedFrames_;
            if (++perFunction_[fid] == 1) names_[fid] = NameOf(fid);
            stack = names_[fid] + (stack.empty() ? "" : ";" + stack);
        }
        if (verbose_)
            std::fprintf(stderr, "[startup_race_sampler] tick %lu: threads=%zu frames=%zu\n", ticks_, nThreads, tickFrames_);
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
    std::unordered_map<std::string, unsigned long> folded_;
    std::string outPath_;
    FILE* out_ = nullptr;
};

}  // namespace startrace

DOCFIX_DEFINE_PROFILER(startrace::StartupRaceSampler)
