// pause_profiler.cpp -- runtime-pause analyser: times every runtime suspension by reason, counts the
// threads suspended, samples suspended managed threads' stacks during GC suspensions, and every 100 ms
// suspends the runtime from its own thread to sample every managed thread.
//
// What it does: mask MONITOR_SUSPENDS | MONITOR_THREADS | ENABLE_STACK_SNAPSHOT.  Suspensions are timed
// per COR_PRF_SUSPEND_REASON (pause = SuspendStarted->ResumeFinished, latency = ->SuspendFinished,
// resume = ResumeStarted->ResumeFinished); RuntimeThreadSuspended/Resumed keep the set of threads
// suspended now.  In RuntimeSuspendFinished of a GC suspension each thread of that set is walked (the
// calling thread synchronously, with a null thread); the walk callback keeps the top managed frame and
// calls GetFunctionInfo2 with its frameInfo; names (IMetaDataImport) are read later on the sampler
// thread, outside any suspension.  The sampler (ICorProfilerInfo10 where available) calls
// InitializeCurrentThread once, then every 100 ms SuspendRuntime, EnumThreads, walks each thread the
// runtime reported suspended (others count as not_suspended), ResumeRuntime, resolves names.
// Shutdown stops the sampler and prints "pause_profiler: suspensions=<n> ..." to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * DoStackSnapshot: "Snapshots can be taken of other threads only if the target thread is suspended
//    at the time."  "You just call DoStackSnapshot from within your ICorProfilerCallback method,
//    passing null in the context and thread parameters."  "Always block in your
//    ICorProfilerCallback::ThreadDestroyed callback until that thread's stack walk is complete."  "Do
//    not hold a lock while your profiler calls into a CLR function that can trigger a garbage
//    collection." (no lock of ours is held across an ICorProfilerInfo call)  "If you do not supply a
//    seed, DoStackSnapshot might skip managed frames at the top of the stack" (no seed is supplied).
//  * RuntimeThreadSuspended: "The RuntimeThreadSuspended notification can occur any time between the
//    ICorProfilerCallback::RuntimeSuspendStarted and the associated
//    ICorProfilerCallback::RuntimeResumeStarted callbacks."  RuntimeSuspendAborted: "Either the
//    ICorProfilerCallback::RuntimeSuspendFinished callback or the RuntimeSuspendAborted callback will
//    occur on a single thread following a ICorProfilerCallback::RuntimeSuspendStarted callback."
//  * StackSnapshotCallback: frameInfo "This value is valid for use only during this callback."  "You
//    must limit the complexity of work done in StackSnapshotCallback."
//  * Caller-allocated buffers: "First call with a zero-length InfoBuffer parameter to obtain the correct
//    buffer size." (GetFunctionInfo2 typeArgs -- count only --, GetMethodProps, GetTypeDefProps)
//  * InitializeCurrentThread: "By calling InitializeCurrentThread once when the profiler first creates
//    the sampling thread ..."; "Call InitializeCurrentThread only when there are no suspended threads."
//    SuspendRuntime: "Suspends the runtime without performing a GC."
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//    Shutdown method is called." (Shutdown waits for the sampler to leave its API section)
//
// Ambiguities: DoStackSnapshot's parameter text says the CLR "suspends that thread, performs the
// snapshot, and resumes", its remarks require the target to be suspended already, and its deadlock
// advice ("make an initial call ... but do not suspend the target thread first") contradicts both; the
// strict rule is followed and InitializeCurrentThread replaces the "initial call".  Threads in
// unmanaged code "are allowed to continue running" (RuntimeSuspendStarted), so Sleep/Join/finalizer
// threads are never walked: "every managed thread" means every one the runtime reports suspended.  A
// thread reporting itself does so "just before the thread is suspended"; it is walked only after
// RuntimeSuspendFinished.  SuspendRuntime/ResumeRuntime have no remarks (calling thread, reported
// reason -- 9, absent from the enum page); "no suspended threads" can only be checked racily; the
// StackSnapshotCallback return value is undocumented (S_OK continues).
#include "common.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace docfix;

namespace {
using Clock = std::chrono::steady_clock;
using Key = std::pair<ModuleID, mdToken>;

const char* ReasonName(int r) {
    static const char* names[] = {"OTHER", "GC", "APPDOMAIN_SHUTDOWN", "CODE_PITCHING", "SHUTDOWN", "5",
                                  "INPROC_DEBUGGER", "GC_PREP", "REJIT", "9(profiler,undocumented)"};
    return (r >= 0 && r < 10) ? names[r] : "UNKNOWN";
}

// One walk: managed frames reported, top frame's (module, token) and GetFunctionInfo2's result.
struct WalkResult { ICorProfilerInfo2* info = nullptr; unsigned frames = 0; Key top{0, 0}; HRESULT fi_hr = E_FAIL; };

// StackSnapshotCallback: kept minimal, no allocation, no lock.
HRESULT STDMETHODCALLTYPE OnFrame(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO frameInfo, ULONG32, BYTE*, void* data) {
    auto* r = static_cast<WalkResult*>(data);
    if (funcId == 0) return S_OK;  // a run of unmanaged frames
    if (r->frames++ == 0) {
        ClassID cls = 0;
        ULONG32 nTypeArgs = 0;  // first pass only: the count of type arguments
        r->fi_hr = r->info->GetFunctionInfo2(funcId, frameInfo, &cls, &r->top.first, &r->top.second, 0, &nTypeArgs, nullptr);
    }
    return S_OK;
}

struct ReasonStats { unsigned count = 0, aborted = 0, threads = 0, max_threads = 0; double total_ms = 0, max_ms = 0, max_latency_ms = 0, max_resume_ms = 0; };
struct WalkStats { unsigned walks = 0, ok = 0, failed = 0, not_suspended = 0, frames = 0; std::map<Key, unsigned> top; };
}  // namespace

class PauseProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info10_)))) info10_ = nullptr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_SUSPENDS | COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) return std::fprintf(stderr, "[pause_profiler] SetEventMask failed 0x%08x\n", (unsigned)hr), hr;
        if (info10_ != nullptr) sampler_thread_ = std::thread([this] { SamplerMain(); });
        else std::fprintf(stderr, "[pause_profiler] ICorProfilerInfo10 unavailable: no self-suspension sampling\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        std::lock_guard<std::mutex> g(mu_);
        return live_.insert(t), S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID t) override {
        { std::lock_guard<std::mutex> g(mu_); live_.erase(t); }
        // DoStackSnapshot: block here until a walk of this thread that already started is complete.
        while (walking_[0].load() == t || walking_[1].load() == t) std::this_thread::sleep_for(std::chrono::microseconds(50));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON reason) override {
        std::lock_guard<std::mutex> g(mu_);
        ++started_, in_suspension_ = true, reason_ = reason, susp_count_ = 0;
        t_start_ = t_finished_ = t_resume_ = Clock::now();
        suspended_.clear();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendFinished() override {
        std::vector<ThreadID> targets;
        bool gc = false;
        {
            std::lock_guard<std::mutex> g(mu_);
            ++finished_;
            t_finished_ = Clock::now();
            gc = (reason_ == 1 /*FOR_GC*/ || reason_ == 7 /*FOR_GC_PREP*/) && !shutdown_.load();
            if (gc) targets.assign(suspended_.begin(), suspended_.end());
        }
        if (gc) {
            ThreadID self = 0;
            if (failed(info_->GetCurrentThreadID(&self))) self = 0;
            WalkAll(targets, self, 0, gc_);
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override {
        std::lock_guard<std::mutex> g(mu_);
        ++aborted_, stats_[reason_].aborted++, in_suspension_ = false;
        suspended_.clear();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeResumeStarted() override {
        std::lock_guard<std::mutex> g(mu_);
        t_resume_ = Clock::now();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        std::lock_guard<std::mutex> g(mu_);
        ++resumed_;
        auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
        ReasonStats& s = stats_[reason_];
        double pause = ms(Clock::now() - t_start_), resume = ms(Clock::now() - t_resume_);
        s.count++;
        s.total_ms += pause;
        s.max_ms = std::max(s.max_ms, pause);
        s.max_latency_ms = std::max(s.max_latency_ms, ms(t_finished_ - t_start_));
        s.max_resume_ms = std::max(s.max_resume_ms, resume);
        s.threads += susp_count_;
        s.max_threads = std::max(s.max_threads, susp_count_);
        in_suspension_ = false;
        suspended_.clear();
        if (!pending_.empty()) Wake();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID t) override {
        std::lock_guard<std::mutex> g(mu_);
        ++thr_suspended_, ++susp_count_, suspended_.insert(t);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeThreadResumed(ThreadID t) override {
        std::lock_guard<std::mutex> g(mu_);
        ++thr_resumed_, suspended_.erase(t);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        Wake();
        // No ICorProfilerInfo call may start after this point: wait for the sampler to leave.
        for (int i = 0; i < 3000 && (in_api_.load() || sampler_running_.load()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (sampler_thread_.joinable()) {
            if (!sampler_running_.load()) sampler_thread_.join();
            else sampler_thread_.detach();
        }
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr, "pause_profiler: suspensions=%u finished=%u aborted=%u resumed=%u threads_suspended=%u threads_resumed=%u\n",
                     started_, finished_, aborted_, resumed_, thr_suspended_, thr_resumed_);
        for (auto& kv : stats_)
            std::fprintf(stderr, "pause_profiler:   reason=%s count=%u aborted=%u pause_total_ms=%.3f pause_max_ms=%.3f "
                         "suspend_latency_max_ms=%.3f resume_max_ms=%.3f threads_total=%u threads_max=%u\n",
                         ReasonName(kv.first), kv.second.count, kv.second.aborted, kv.second.total_ms, kv.second.max_ms,
                         kv.second.max_latency_ms, kv.second.max_resume_ms, kv.second.threads, kv.second.max_threads);
        Report("gc_walks", gc_);
        std::fprintf(stderr, "pause_profiler:   sampler ticks=%u suspend_failed=%u\n", ticks_.load(), suspend_failed_.load());
        Report("sampler_walks", sampler_);
        if (info10_ != nullptr) info10_->Release();
        if (info_ != nullptr) info_->Release();
        info10_ = nullptr, info_ = nullptr;
        return S_OK;
    }

private:
    // Walks the targets that are still alive; 'slot' picks the "being walked" word (0 = GC, 1 = sampler).
    void WalkAll(const std::vector<ThreadID>& targets, ThreadID self, int slot, WalkStats& out) {
        for (ThreadID t : targets) {
            if (t == 0) continue;
            bool sync = (t == self);  // the thread this callback runs on: a synchronous walk
            {
                std::lock_guard<std::mutex> g(mu_);
                if (live_.count(t) == 0 || suspended_.count(t) == 0) { out.not_suspended++; continue; }
                if (!sync) walking_[slot].store(t);
            }
            WalkResult r;
            r.info = info_;
            // Synchronous: null thread and null context; asynchronous: the suspended target, no seed.
            HRESULT hr = info_->DoStackSnapshot(sync ? 0 : t, &OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &r, nullptr, 0);
            if (!sync) walking_[slot].store(0);
            std::lock_guard<std::mutex> g(mu_);
            out.walks++;
            if (failed(hr)) { out.failed++; continue; }
            out.ok++;
            out.frames += r.frames;
            if (r.frames > 0 && succeeded(r.fi_hr)) {
                out.top[r.top]++;
                if (names_.count(r.top) == 0) pending_.insert(r.top);
            }
        }
    }

    // Every 100 ms a self-suspension sample; woken early after a GC to resolve the names it queued.
    void SamplerMain() {
        sampler_running_.store(true);
        bool initialized = false;
        auto next = Clock::now() + std::chrono::milliseconds(100);
        while (!shutdown_.load()) {
            {
                std::unique_lock<std::mutex> lk(cv_mu_);
                cv_.wait_until(lk, next, [this] { return shutdown_.load() || wake_; });
                wake_ = false;
            }
            if (!EnterApi()) break;
            bool busy;  // InitializeCurrentThread only while no suspension is in progress
            { std::lock_guard<std::mutex> g(mu_); busy = in_suspension_; }
            if (!initialized && !busy) initialized = succeeded(info10_->InitializeCurrentThread());
            if (initialized && Clock::now() >= next) {
                next = Clock::now() + std::chrono::milliseconds(100);
                Tick();
            }
            if (initialized && !busy) ResolvePending();  // metadata reads outside any suspension
            in_api_.store(false);
        }
        sampler_running_.store(false);
    }

    void Wake() {
        { std::lock_guard<std::mutex> lk(cv_mu_); wake_ = true; }
        cv_.notify_one();
    }

    bool EnterApi() {  // seq_cst pairing with Shutdown: no API call starts once Shutdown has begun
        in_api_.store(true);
        if (shutdown_.load()) in_api_.store(false);
        return in_api_.load();
    }

    void Tick() {
        ++ticks_;
        HRESULT hr;  // a GC suspension in progress makes SuspendRuntime fail: retry a few times
        for (int i = 0; (hr = info10_->SuspendRuntime()) == CORPROF_E_SUSPENSION_IN_PROGRESS && i < 5; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (failed(hr)) { ++suspend_failed_; return; }
        std::vector<ThreadID> all;
        ICorProfilerThreadEnum* e = nullptr;
        if (succeeded(info10_->EnumThreads(&e)) && e != nullptr) {
            ULONG n = 0;
            if (succeeded(e->GetCount(&n)) && n > 0) {
                all.resize(n);
                ULONG got = 0;
                if (failed(e->Next(n, all.data(), &got))) got = 0;
                all.resize(got);
            }
            e->Release();
        }
        WalkAll(all, 0, 1, sampler_);
        info10_->ResumeRuntime();
    }

    // Resolves "Type.Method" for the keys queued by the walks; runs outside every suspension.
    void ResolvePending() {
        std::set<Key> todo;
        { std::lock_guard<std::mutex> g(mu_); todo.swap(pending_); }
        for (const Key& k : todo) {
            std::string name = Describe(k);
            std::lock_guard<std::mutex> g(mu_);
            names_[k] = name;
        }
    }

    // Two-pass name reads: zero-length buffer for the size, then the sized buffer.
    std::string Describe(const Key& k) {
        char tok[32];
        std::snprintf(tok, sizeof tok, "token 0x%08x", (unsigned)k.second);
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(k.first, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return tok;
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        mdTypeDef td = 0;
        ULONG n = 0, tn = 0;
        std::vector<WCHAR> m, t;
        if (succeeded(md->GetMethodProps(k.second, &td, nullptr, 0, &n, nullptr, nullptr, nullptr, nullptr, nullptr)) && n > 0)
            m.resize(n);
        if (!m.empty() && failed(md->GetMethodProps(k.second, &td, m.data(), n, &n, nullptr, nullptr, nullptr, nullptr, nullptr))) m.clear();
        if (!m.empty() && succeeded(md->GetTypeDefProps(td, nullptr, 0, &tn, nullptr, nullptr)) && tn > 0) t.resize(tn);
        if (!t.empty() && failed(md->GetTypeDefProps(td, t.data(), tn, &tn, nullptr, nullptr))) t.clear();
        md->Release();
        if (m.empty()) return tok;
        return (t.empty() ? std::string("?") : to_utf8(t.data(), t.size())) + "." + to_utf8(m.data(), m.size());
    }

    void Report(const char* what, const WalkStats& w) {  // mu_ held
        std::fprintf(stderr, "pause_profiler:   %s=%u ok=%u failed=%u not_suspended=%u frames=%u top:", what, w.walks,
                     w.ok, w.failed, w.not_suspended, w.frames);
        std::vector<std::pair<unsigned, Key>> v;
        for (auto& kv : w.top) v.push_back({kv.second, kv.first});
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        for (size_t i = 0; i < v.size() && i < 5; ++i) {
            auto it = names_.find(v[i].second);
            std::fprintf(stderr, " %s[%08x] x%u;", it != names_.end() ? it->second.c_str() : "(unresolved)",
                         (unsigned)v[i].second.second, v[i].first);
        }
        std::fprintf(stderr, "\n");
    }

    ICorProfilerInfo2* info_ = nullptr;
    ICorProfilerInfo10* info10_ = nullptr;
    std::thread sampler_thread_;
    std::atomic<bool> shutdown_{false}, in_api_{false}, sampler_running_{false};
    std::atomic<ThreadID> walking_[2] = {{0}, {0}};
    std::atomic<unsigned> ticks_{0}, suspend_failed_{0};
    std::mutex cv_mu_;
    std::condition_variable cv_;
    bool wake_ = false;  // cv_mu_

    std::mutex mu_;  // guards everything below; never held across an ICorProfilerInfo call
    std::set<ThreadID> live_, suspended_;
    bool in_suspension_ = false;
    int reason_ = 0;
    Clock::time_point t_start_, t_finished_, t_resume_;
    unsigned started_ = 0, finished_ = 0, aborted_ = 0, resumed_ = 0, thr_suspended_ = 0, thr_resumed_ = 0, susp_count_ = 0;
    std::map<int, ReasonStats> stats_;
    WalkStats gc_, sampler_;
    std::set<Key> pending_;
    std::map<Key, std::string> names_;
};

DOCFIX_DEFINE_PROFILER(PauseProfiler)
