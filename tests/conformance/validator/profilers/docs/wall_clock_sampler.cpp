// wall_clock_sampler.cpp -- wall-clock stack sampler for every managed thread (Linux x64).
//
// What it does: a native sampler thread of the profiler's own wakes every 10 ms, suspends the
// runtime with ICorProfilerInfo10::SuspendRuntime, walks each known managed thread with
// ICorProfilerInfo2::DoStackSnapshot (unseeded), stores the FunctionIDs in a preallocated buffer,
// resumes the runtime, and only then aggregates.  Frames are named by FunctionID; names are
// resolved later on the sampler thread (outside the suspended window, no lock held) through
// GetTokenAndMetaDataFromFunction + IMetaDataImport.  The ThreadID -> OS thread map comes from
// ThreadCreated / GetThreadInfo / ThreadAssignedToOSThread; ThreadDestroyed drops the entry under
// the same mutex the sampler holds while walking, so it blocks until a walk in progress is done.
// Shutdown stops the sampler (it makes no ICorProfilerInfo call after that) and prints
// "wall_clock_sampler: samples=<n> ..." to stderr.
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//  * DoStackSnapshot: "Snapshots can be taken of other threads only if the target thread is
//    suspended at the time."  On Linux the profiler cannot suspend one thread; the suspension it
//    can ask for is ICorProfilerInfo10::SuspendRuntime, "Suspends the runtime without performing a
//    GC.", undone by ResumeRuntime.  Every cross-thread walk here happens between the two.
//  * DoStackSnapshot: "only a thread that has never run managed code can suspend another
//    thread."  SuspendRuntime is called only from the profiler's own std::thread.
//  * DoStackSnapshot (deadlock paragraph) and ICorProfilerInfo4::InitializeCurrentThread: "By
//    calling InitializeCurrentThread once when the profiler first creates the sampling thread,
//    profilers can ensure that lazy per-thread initialization ... can now occur safely when no
//    other threads are suspended." / "Call InitializeCurrentThread only when there are no
//    suspended threads."  The sampler calls it first thing, while Initialize waits for it (no
//    managed code has run yet, so nothing can be suspended); it never samples if that fails.
//  * DoStackSnapshot: "Always block in your ICorProfilerCallback::ThreadDestroyed callback until
//    that thread's stack walk is complete." and "Do not hold a lock while your profiler calls into
//    a CLR function that can trigger a garbage collection."  The map mutex is taken by the sampler
//    only after SuspendRuntime returned (try_lock: a holder may itself be stopped), held only
//    around DoStackSnapshot, released before ResumeRuntime; no CLR call is made under it elsewhere.
//    (The sampler's call gate, see Shutdown below, is taken by no runtime-called code but Shutdown.)
//  * ThreadDestroyed: "The threadId value is no longer valid at the time of this call." -- the
//    entry is erased there and the id never used again.  ThreadCreated: "The threadId value is
//    immediately valid."  ThreadAssignedToOSThread "exists so that the profiler can maintain an
//    accurate mapping ... of operating system threads to managed threads."
//  * StackSnapshotCallback: "You must limit the complexity of work done in StackSnapshotCallback."
//    and frameInfo "is valid for use only during this callback" -- the callback only copies the
//    FunctionID into a fixed array (no allocation, no lock, no CLR call).
//  * COR_PRF_MONITOR: COR_PRF_ENABLE_STACK_SNAPSHOT "Enables calls to the DoStackSnapshot method."
//  * Caller-allocated buffers: names are read with a fixed buffer; a pcBufferMax larger than the
//    buffer is reported as truncation ("..."), never read past.
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//    after the Shutdown method is called."  The sampler makes its calls holding a gate mutex and
//    checks a stop flag under it; Shutdown sets the flag under the gate, so no call starts after.
//
// Ambiguities met:
//  * DoStackSnapshot's parameter text says "If a ThreadID of a different thread is passed, the
//    CLR suspends that thread, performs the snapshot, and resumes", its Remarks say the target
//    must already be suspended; neither mentions SuspendRuntime, whose page has no remarks.
//  * "A seed must be supplied for an asynchronous walk." vs. "requires a seed if the top of the
//    stack is ... helper code in the CLR itself".  No seed is obtainable on Linux without stopping
//    the thread natively; walks are unseeded (top managed frames may be missing for threads that
//    were in CLR helper code).
//  * The deadlock advice says to warm up with an unsuspended DoStackSnapshot of another thread,
//    which the Remarks forbid; InitializeCurrentThread (documented for exactly this) is used.
//  * RuntimeSuspendStarted: threads "in unmanaged code are allowed to continue running"; the pages
//    do not say such a thread counts as "suspended" for DoStackSnapshot.  The runtime walks them
//    from their last transition into native code.
//  * ThreadDestroyed says the id is already invalid, DoStackSnapshot says to block there until
//    "that thread's stack walk" completes: a walk that began before the erase is let finish.
//  * Which ICorProfilerInfo calls "can trigger a garbage collection" is not listed anywhere.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr int kPeriodMs = 10;
constexpr size_t kMaxThreads = 256;  // threads walked per tick
constexpr size_t kMaxFrames = 64;    // managed frames kept per walk

struct WalkBuf {  // filled by the snapshot callback; fixed size, no allocation
    FunctionID frames[kMaxFrames];
    uint32_t count;
    uint32_t total;      // managed frames seen (may exceed kMaxFrames)
    uint32_t unmanaged;  // runs of unmanaged frames reported
};

struct Pending {
    DWORD os;
    HRESULT hr;
    WalkBuf walk;
};

HRESULT SnapshotCb(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE*, void* clientData) {
    auto* w = static_cast<WalkBuf*>(clientData);
    if (funcId == 0) {
        ++w->unmanaged;
    } else {
        if (w->count < kMaxFrames) w->frames[w->count++] = funcId;
        ++w->total;
    }
    return S_OK;
}

}  // namespace

class WallClockSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[wall_clock_sampler] ICorProfilerInfo10 unavailable 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        pending_ = new (std::nothrow) Pending[kMaxThreads];
        if (pending_ == nullptr) return E_OUTOFMEMORY;
        sampler_ = std::thread([this] { SamplerMain(); });
        std::unique_lock<std::mutex> lk(cv_mu_);
        cv_.wait_for(lk, std::chrono::seconds(5), [this] { return init_done_; });
        std::fprintf(stderr, "[wall_clock_sampler] initialized (sampler thread init 0x%08x)\n", (unsigned)init_hr_);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID id) override {
        DWORD os = 0;
        if (failed(info_->GetThreadInfo(id, &os))) os = 0;  // no lock held across the CLR call
        std::lock_guard<std::mutex> g(map_mu_);
        DWORD& slot = threads_[id];
        if (os != 0) slot = os;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID id, DWORD os) override {
        std::lock_guard<std::mutex> g(map_mu_);
        threads_[id] = os;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID id) override {
        // Blocks while the sampler holds map_mu_, i.e. until a walk in progress has completed.
        std::lock_guard<std::mutex> g(map_mu_);
        threads_.erase(id);
        ++destroyed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            // Once the gate is ours no call is in flight, and after stop_ none starts (bounded).
            bool gated = gate_.try_lock_for(std::chrono::seconds(3));
            std::lock_guard<std::mutex> lk(cv_mu_);
            stop_.store(true);
            if (gated) gate_.unlock();
        }
        cv_.notify_all();
        // Wait for the sampler thread to leave its loop (bounded, never hang the exit).
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        while (!exited_.load() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        bool clean = exited_.load();
        if (sampler_.joinable()) { if (clean) sampler_.join(); else sampler_.detach(); }
        PrintSummary(clean);
        if (info_ != nullptr && clean) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    void SamplerMain() {
        HRESULT hr = info_->InitializeCurrentThread();
        {
            std::lock_guard<std::mutex> lk(cv_mu_);
            init_hr_ = hr;
            init_done_ = true;
        }
        cv_.notify_all();
        auto next = std::chrono::steady_clock::now();
        while (succeeded(hr)) {
            next += std::chrono::milliseconds(kPeriodMs);
            {
                std::unique_lock<std::mutex> lk(cv_mu_);
                if (cv_.wait_until(lk, next, [this] { return stop_.load(); })) break;
            }
            auto now = std::chrono::steady_clock::now();
            if (now > next + std::chrono::milliseconds(kPeriodMs)) next = now;  // fell behind
            if (!SampleOnce()) break;
            ResolveNewNames();
        }
        exited_.store(true);
    }

    // Returns false when shutdown began; the caller then makes no further CLR call.
    bool SampleOnce() {
        size_t n = 0;
        {
            std::lock_guard<std::timed_mutex> gate(gate_);  // Shutdown takes it to stop us
            if (stop_.load()) return false;
            n = SuspendAndWalk();
        }
        Aggregate(n);  // heap work only after the runtime runs again
        return true;
    }

    size_t SuspendAndWalk() {
        ++ticks_;
        size_t n = 0;
        HRESULT hr = info_->SuspendRuntime();  // held: only the gate, which no runtime thread takes
        if (failed(hr)) {
            ++suspend_failures_;
            last_suspend_hr_ = hr;
            return 0;
        }
        {
            std::unique_lock<std::mutex> lk(map_mu_, std::try_to_lock);
            if (!lk.owns_lock()) {
                ++skipped_ticks_;  // a callback holds the map; do not wait while threads are stopped
            } else {
                for (const auto& kv : threads_) {
                    if (kv.second == 0) continue;  // not yet running on an OS thread
                    if (n == kMaxThreads) break;  // buffer full: the rest wait for the next tick
                    Pending& p = pending_[n++];
                    p.os = kv.second;
                    p.walk.count = p.walk.total = p.walk.unmanaged = 0;
                    p.hr = info_->DoStackSnapshot(kv.first, &SnapshotCb, COR_PRF_SNAPSHOT_DEFAULT, &p.walk,
                                                  nullptr, 0);
                }
            }
        }
        info_->ResumeRuntime();
        return n;
    }

    void Aggregate(size_t n) {
        std::lock_guard<std::mutex> g(stats_mu_);
        for (size_t i = 0; i < n; ++i) {
            const Pending& p = pending_[i];
            if (failed(p.hr)) {
                ++walk_failures_;
                if (p.hr == E_FAIL) ++walk_efail_;
                last_walk_hr_ = p.hr;
                continue;
            }
            ++samples_;
            ++per_thread_[p.os];
            frames_ += p.walk.total;
            if (p.walk.count == 0) { ++empty_; continue; }
            ++leaf_[p.walk.frames[0]];
            for (uint32_t f = 0; f < p.walk.count; ++f)
                if (names_.find(p.walk.frames[f]) == names_.end()) unresolved_.push_back(p.walk.frames[f]);
        }
    }

    void ResolveNewNames() {
        std::vector<FunctionID> todo;
        {
            std::lock_guard<std::mutex> g(stats_mu_);
            todo.swap(unresolved_);
        }
        for (FunctionID fid : todo) {
            if (names_.count(fid) != 0) continue;
            std::string name;
            {
                std::lock_guard<std::timed_mutex> gate(gate_);
                if (stop_.load()) return;
                name = NameOf(fid);
            }
            std::lock_guard<std::mutex> g(stats_mu_);
            names_[fid] = name;
        }
    }

    std::string NameOf(FunctionID fid) {
        char fallback[40];
        std::snprintf(fallback, sizeof fallback, "fid:0x%llx", (unsigned long long)fid);
        IUnknown* unk = nullptr;
        mdToken token = 0;
        if (failed(info_->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &token)) || unk == nullptr)
            return fallback;
        auto* md = static_cast<IMetaDataImport*>(unk);
        WCHAR method[256], type[256];
        ULONG mlen = 0, tlen = 0;
        mdTypeDef td = 0;
        std::string out = fallback;
        if (succeeded(md->GetMethodProps(token, &td, method, 256, &mlen, nullptr, nullptr, nullptr, nullptr, nullptr))) {
            out = to_utf8(method, 256);
            if (mlen > 256) out += "...";
            if (td != 0 && succeeded(md->GetTypeDefProps(td, type, 256, &tlen, nullptr, nullptr)))
                out = to_utf8(type, 256) + (tlen > 256 ? "..." : "") + "." + out;
        }
        md->Release();
        return out;
    }

    void PrintSummary(bool clean) {
        std::lock_guard<std::mutex> g(stats_mu_);
        std::fprintf(stderr,
                     "wall_clock_sampler: samples=%llu ticks=%llu threads_sampled=%zu empty=%llu frames=%llu "
                     "walk_failures=%llu (E_FAIL %llu) suspend_failures=%llu skipped_ticks=%llu threads_destroyed=%llu%s\n",
                     (unsigned long long)samples_, (unsigned long long)ticks_, per_thread_.size(),
                     (unsigned long long)empty_, (unsigned long long)frames_, (unsigned long long)walk_failures_, (unsigned long long)walk_efail_,
                     (unsigned long long)suspend_failures_, (unsigned long long)skipped_ticks_,
                     (unsigned long long)destroyed_.load(), clean ? "" : " (sampler did not stop in time)");
        if (failed(init_hr_)) std::fprintf(stderr, "  InitializeCurrentThread failed 0x%08x: no sampling\n", (unsigned)init_hr_);
        if (walk_failures_) std::fprintf(stderr, "  last walk failure 0x%08x\n", (unsigned)last_walk_hr_);
        if (suspend_failures_) std::fprintf(stderr, "  last SuspendRuntime failure 0x%08x\n", (unsigned)last_suspend_hr_);
        std::vector<std::pair<uint64_t, FunctionID>> top;
        for (const auto& kv : leaf_) top.emplace_back(kv.second, kv.first);
        std::sort(top.rbegin(), top.rend());
        for (size_t i = 0; i < top.size() && i < 5; ++i) {
            auto it = names_.find(top[i].second);
            std::fprintf(stderr, "  leaf %6llu  %s\n", (unsigned long long)top[i].first,
                         it != names_.end() ? it->second.c_str() : "(unresolved)");
        }
    }

    ICorProfilerInfo10* info_ = nullptr;
    std::thread sampler_;
    std::mutex cv_mu_;
    std::condition_variable cv_;
    std::timed_mutex gate_;  // held by the sampler around each group of ICorProfilerInfo calls
    bool init_done_ = false;
    HRESULT init_hr_ = E_FAIL;
    std::atomic<bool> stop_{false}, exited_{false};

    std::mutex map_mu_;                             // guards threads_
    std::unordered_map<ThreadID, DWORD> threads_;   // ThreadID -> OS thread id (0 = not yet known)
    std::atomic<uint64_t> destroyed_{0};

    Pending* pending_ = nullptr;  // sampler thread only
    uint64_t ticks_ = 0, suspend_failures_ = 0, skipped_ticks_ = 0;
    HRESULT last_suspend_hr_ = S_OK;

    std::mutex stats_mu_;  // guards everything below (sampler writes, Shutdown reads)
    uint64_t samples_ = 0, empty_ = 0, frames_ = 0, walk_failures_ = 0, walk_efail_ = 0;
    HRESULT last_walk_hr_ = S_OK;
    std::unordered_map<DWORD, uint64_t> per_thread_;
    std::unordered_map<FunctionID, uint64_t> leaf_;
    std::unordered_map<FunctionID, std::string> names_;
    std::vector<FunctionID> unresolved_;
};

DOCFIX_DEFINE_PROFILER(WallClockSampler)
