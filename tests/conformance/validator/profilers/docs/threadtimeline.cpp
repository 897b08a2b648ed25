// threadtimeline.cpp -- thread timeline profiler (CORRECT version).
//
// What it does
//   Builds a timeline of every managed thread in the process: when the runtime created it, which
//   OS thread(s) implement it, the names it was given, the application domain / context it ran in,
//   when it was destroyed (or that it was still alive at Shutdown), and how much time it spent
//   suspended by the runtime.  It also records every runtime-wide suspension with its
//   COR_PRF_SUSPEND_REASON: how long the suspend phase took (RuntimeSuspendStarted ->
//   RuntimeSuspendFinished), how many were aborted, and the total pause (RuntimeSuspendStarted ->
//   RuntimeResumeFinished).  In Shutdown it prints a short summary and one line per thread to
//   stderr.
//
//   Event mask: COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_SUSPENDS, set once in Initialize.
//   ICorProfilerInfo methods used: SetEventMask, GetCurrentThreadID, GetThreadInfo,
//   GetThreadAppDomain (Info2), GetThreadContext, GetAppDomainInfo, EnumThreads (Info4, optional).
//   No interface or constant was missing from the kit headers; COR_PRF_SUSPEND_REASON values are
//   declared below from the documented enumeration.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...), quoted:
//   * ICorProfilerCallback::Initialize / COR_PRF_MONITOR: the mask is set in Initialize;
//     COR_PRF_MONITOR_THREADS and COR_PRF_MONITOR_SUSPENDS are the documented flags for the thread
//     and suspension callbacks.
//   * ICorProfilerCallback::ThreadCreated: "The threadId value is immediately valid."  -> the only
//     place (together with ThreadAssignedToOSThread / ThreadNameChanged, which also hand us a live
//     ID) where GetThreadInfo / GetThreadAppDomain / GetThreadContext are called for a thread.
//   * ICorProfilerCallback::ThreadDestroyed: "The threadId value is no longer valid at the time of
//     this call."  -> ThreadDestroyed only uses the value as a key into our own table, it never
//     passes it back to the runtime, and removes it from the live table (the value may be reused
//     for a later thread).
//   * ICorProfilerCallback::ThreadAssignedToOSThread: "The ThreadAssignedToOSThread callback exists
//     so that the profiler can maintain an accurate mapping across fibers of operating system
//     threads to managed threads." -> every assignment is recorded, not only the first.
//   * ICorProfilerCallback2::ThreadNameChanged: cchName is "The length of the new name of the
//     thread." and name "The new name of the thread. The name is not null-terminated." -> exactly
//     cchName WCHARs are copied, never a terminator is searched for.
//   * ICorProfilerInfo::GetThreadInfo: "Gets the current Win32 thread identity for the specified
//     thread." (cross-checked against ThreadAssignedToOSThread).
//   * ICorProfilerInfo::GetCurrentThreadID: "If the current thread is an internal runtime thread or
//     other unmanaged thread, GetCurrentThreadID returns CORPROF_E_NOT_MANAGED_THREAD as the
//     HRESULT" -> handled as "suspension initiated by a non-managed thread", not as an error.
//   * ICorProfilerInfo::GetThreadContext: "If the thread has no context currently associated with
//     it, this function will return CORPROF_E_DATAINCOMPLETE." -> recorded as "no context".
//   * ICorProfilerInfo2::GetThreadAppDomain: "Gets the ID of the application domain in which the
//     specified thread is currently executing code."
//   * ICorProfilerInfo::GetAppDomainInfo + "Caller-Allocated Buffers": "If pcchName points to a
//     value that is larger than cchName, allocate a larger szName buffer, update cchName with the
//     new, larger size, and call GetAppDomainInfo again."
//   * RuntimeSuspendStarted: "Notifies the profiler that the runtime is about to suspend all
//     runtime threads."  RuntimeSuspendFinished: "The RuntimeSuspendFinished callback is
//     guaranteed to occur on the same thread as the ICorProfilerCallback::RuntimeSuspendStarted
//     callback."  RuntimeSuspendAborted: "Either the ICorProfilerCallback::RuntimeSuspendFinished
//     callback or the RuntimeSuspendAborted callback will occur on a single thread following a
//     ICorProfilerCallback::RuntimeSuspendStarted callback." -> the suspend start time and reason
//     are kept in thread-local storage of the suspending thread.
//   * RuntimeResumeFinished: "The RuntimeResumeFinished callback is not guaranteed to occur on the
//     same thread as the ICorProfilerCallback::RuntimeSuspendStarted callback. However, it is
//     guaranteed to occur on the same thread as the ICorProfilerCallback::RuntimeResumeStarted
//     callback." -> the pause start (suspend) is kept globally, the resume start thread-locally.
//   * RuntimeThreadSuspended: "The RuntimeThreadSuspended notification can occur any time between
//     the ICorProfilerCallback::RuntimeSuspendStarted and the associated
//     ICorProfilerCallback::RuntimeResumeStarted callbacks." and "if the currently executing
//     thread (the thread that called this callback) is the one that is being suspended, this
//     callback will occur just before the thread is suspended." -> the suspension callbacks do
//     pure bookkeeping: no ICorProfilerInfo call, no blocking beyond a short internal lock.
//   * Notification Threads in the Profiling API: "Note that these callbacks are not serialized.
//     Users must protect their code by creating thread-safe data structures" -> one mutex.
//   * DoStackSnapshot (shared spec): "Do not hold a lock while your profiler calls into a CLR
//     function that can trigger a garbage collection." -> every ICorProfilerInfo call is made
//     with our lock released.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." and "Certain immutable
//     events may still occur after shutdown; the profiler should take care to return immediately
//     when this occurs." and "the CLR will halt certain managed threads (background threads)
//     without delivering orderly destruction messages for them." -> Shutdown only prints and
//     Releases; later callbacks return at once; threads without ThreadDestroyed are reported as
//     "alive at shutdown", not as an error.
#include "common.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

// COR_PRF_SUSPEND_REASON (documented enumeration values).
enum : int {
    kSuspendOther = 0x00,
    kSuspendForGC = 0x01,
    kSuspendForAppDomainShutdown = 0x02,
    kSuspendForCodePitching = 0x03,
    kSuspendForShutdown = 0x04,
    kSuspendForInprocDebugger = 0x06,
    kSuspendForGCPrep = 0x07,
    kSuspendForReJIT = 0x08,
    kReasonSlots = 9,
};

const char* reason_name(int r) {
    switch (r) {
        case kSuspendOther: return "OTHER";
        case kSuspendForGC: return "GC";
        case kSuspendForAppDomainShutdown: return "APPDOMAIN_SHUTDOWN";
        case kSuspendForCodePitching: return "CODE_PITCHING";
        case kSuspendForShutdown: return "SHUTDOWN";
        case kSuspendForInprocDebugger: return "INPROC_DEBUGGER";
        case kSuspendForGCPrep: return "GC_PREP";
        case kSuspendForReJIT: return "REJIT";
        default: return "UNKNOWN";
    }
}

std::uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

DWORD os_tid() { return static_cast<DWORD>(syscall(SYS_gettid)); }

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// Per-OS-thread state for the suspend / resume pairs that the documentation guarantees to arrive
// on one thread.  Plain PODs (no destructors run at thread exit).
thread_local std::uint64_t t_suspend_started_ns = 0;
thread_local int t_suspend_reason = -1;
thread_local std::uint64_t t_resume_started_ns = 0;

struct ThreadRec {
    ThreadID id = 0;
    unsigned seq = 0;
    bool saw_created = false;          // false: first seen through another callback / EnumThreads
    bool pre_existing = false;         // reported by EnumThreads in Initialize
    std::uint64_t created_ns = 0;
    bool destroyed = false;
    std::uint64_t destroyed_ns = 0;
    DWORD created_cb_os_tid = 0;       // OS thread that delivered ThreadCreated
    bool created_cb_on_self = false;   // GetCurrentThreadID() == threadId inside ThreadCreated
    DWORD os_tid = 0;                  // last ThreadAssignedToOSThread
    unsigned os_assignments = 0;
    DWORD info_tid = 0;                // last successful GetThreadInfo
    unsigned info_mismatch = 0;        // GetThreadInfo disagreed with ThreadAssignedToOSThread
    std::string name;
    unsigned renames = 0;
    AppDomainID appdomain = 0;
    bool have_context = false;
    ContextID context = 0;
    HRESULT context_hr = S_OK;
    // suspension
    bool suspended = false;
    std::uint64_t susp_start_ns = 0;
    std::uint64_t susp_total_ns = 0;
    std::uint64_t susp_max_ns = 0;
    unsigned susp_count = 0;
    unsigned susp_unmatched = 0;       // closed without RuntimeThreadResumed
};

struct ReasonStats {
    unsigned started = 0;
    unsigned finished = 0;
    unsigned aborted = 0;
    unsigned resumed = 0;
    std::uint64_t suspend_phase_ns = 0;   // SuspendStarted -> SuspendFinished
    std::uint64_t pause_ns = 0;           // SuspendStarted -> ResumeFinished
    std::uint64_t pause_max_ns = 0;
};

class ThreadTimelineProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        t0_ = now_ns();
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[threadtimeline] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return E_FAIL;
        }
        // Optional newer interfaces (GetThreadAppDomain lives on Info2, EnumThreads on Info4).
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info2_)))) info2_ = nullptr;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info4_)))) info4_ = nullptr;

        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_SUSPENDS);
        if (failed(hr)) {
            std::fprintf(stderr, "[threadtimeline] SetEventMask failed 0x%08x\n", (unsigned)hr);
            ReleaseAll();
            return hr;
        }

        // Threads that already exist (normally none for a startup-loaded profiler).
        if (info4_ != nullptr) {
            ICorProfilerThreadEnum* en = nullptr;
            HRESULT ehr = info4_->EnumThreads(&en);
            if (succeeded(ehr) && en != nullptr) {
                ThreadID ids[32];
                for (;;) {
                    ULONG got = 0;
                    HRESULT nhr = en->Next(32, ids, &got);
                    if (failed(nhr)) break;
                    for (ULONG i = 0; i < got && i < 32; ++i) {
                        Snapshot s = Query(ids[i]);
                        std::lock_guard<std::mutex> g(mu_);
                        ThreadRec& r = Get(ids[i]);
                        r.pre_existing = true;
                        Apply(r, s);
                        ++enum_found_;
                    }
                    if (nhr != S_OK || got == 0) break;
                }
                en->Release();
            } else {
                enum_hr_ = ehr;
            }
        }
        std::fprintf(stderr, "[threadtimeline] initialized (info2=%s info4=%s)\n", info2_ ? "yes" : "no",
                     info4_ ? "yes" : "no");
        return S_OK;
    }

    // ------------------------------------------------------------------ thread lifetime
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID threadId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        // "The threadId value is immediately valid."
        Snapshot s = Query(threadId);
        ThreadID cur = 0;
        bool on_self = succeeded(info_->GetCurrentThreadID(&cur)) && cur == threadId;
        std::lock_guard<std::mutex> g(mu_);
        ThreadRec& r = Get(threadId);
        r.saw_created = true;
        r.created_ns = t;
        r.created_cb_os_tid = os_tid();
        r.created_cb_on_self = on_self;
        Apply(r, s);
        ++created_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID managedThreadId, DWORD osThreadId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        Snapshot s = Query(managedThreadId);
        std::lock_guard<std::mutex> g(mu_);
        ThreadRec& r = Get(managedThreadId);
        if (r.os_assignments > 0 && r.os_tid != osThreadId) ++os_reassignments_;
        r.os_tid = osThreadId;
        ++r.os_assignments;
        ++os_assigned_;
        Apply(r, s);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID threadId, ULONG cchName, WCHAR* name) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        // "The name is not null-terminated." -> exactly cchName characters.
        std::string n = (name != nullptr && cchName > 0) ? to_utf8(name, cchName) : std::string();
        Snapshot s = Query(threadId);
        std::lock_guard<std::mutex> g(mu_);
        ThreadRec& r = Get(threadId);
        r.name = n;
        ++r.renames;
        ++renames_;
        Apply(r, s);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID threadId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        // "The threadId value is no longer valid at the time of this call." -> key only, no
        // ICorProfilerInfo call with it.
        std::lock_guard<std::mutex> g(mu_);
        auto it = live_.find(threadId);
        if (it == live_.end()) {
            ++destroyed_unknown_;
            return S_OK;
        }
        ThreadRec& r = all_[it->second];
        CloseOpenSuspension(r, t);
        r.destroyed = true;
        r.destroyed_ns = t;
        live_.erase(it);   // the ThreadID value may be handed out again for a new thread
        ++destroyed_;
        return S_OK;
    }

    // ------------------------------------------------------------------ runtime suspension
    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON suspendReason) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        t_suspend_started_ns = now_ns();
        t_suspend_reason = suspendReason;
        ThreadID cur = 0;
        HRESULT hr = info_->GetCurrentThreadID(&cur);
        std::lock_guard<std::mutex> g(mu_);
        ++Reason(suspendReason).started;
        if (hr == CORPROF_E_NOT_MANAGED_THREAD) ++suspend_by_native_;
        else if (succeeded(hr)) ++suspend_by_managed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendFinished() override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        std::lock_guard<std::mutex> g(mu_);
        // Guaranteed to be on the RuntimeSuspendStarted thread.
        if (t_suspend_reason < 0) {
            ++protocol_anomalies_;
            return S_OK;
        }
        ReasonStats& rs = Reason(t_suspend_reason);
        ++rs.finished;
        rs.suspend_phase_ns += t - t_suspend_started_ns;
        pause_active_ = true;
        pause_started_ns_ = t_suspend_started_ns;
        pause_reason_ = t_suspend_reason;
        t_suspend_reason = -1;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        if (t_suspend_reason < 0) {
            ++protocol_anomalies_;
            return S_OK;
        }
        ++Reason(t_suspend_reason).aborted;
        t_suspend_reason = -1;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeResumeStarted() override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        t_resume_started_ns = now_ns();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        std::lock_guard<std::mutex> g(mu_);
        last_resume_finished_ns_ = t;
        if (t_resume_started_ns != 0) resume_phase_ns_ += t - t_resume_started_ns;
        t_resume_started_ns = 0;
        if (!pause_active_) {
            ++resume_without_suspend_;
            return S_OK;
        }
        ReasonStats& rs = Reason(pause_reason_);
        ++rs.resumed;
        std::uint64_t p = t - pause_started_ns_;
        rs.pause_ns += p;
        rs.pause_max_ns = std::max(rs.pause_max_ns, p);
        pause_active_ = false;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID threadId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        std::lock_guard<std::mutex> g(mu_);
        ThreadRec& r = Get(threadId);
        if (r.suspended) {
            // Previous interval never got its RuntimeThreadResumed: close it at the last resume.
            CloseOpenSuspension(r, t);
        }
        r.suspended = true;
        r.susp_start_ns = t;
        ++thread_suspends_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeThreadResumed(ThreadID threadId) override {
        if (shutdown_.load(std::memory_order_acquire)) return S_OK;
        std::uint64_t t = now_ns();
        std::lock_guard<std::mutex> g(mu_);
        auto it = live_.find(threadId);
        if (it == live_.end() || !all_[it->second].suspended) {
            ++resume_unmatched_;
            return S_OK;
        }
        ThreadRec& r = all_[it->second];
        std::uint64_t d = t - r.susp_start_ns;
        r.suspended = false;
        r.susp_total_ns += d;
        r.susp_max_ns = std::max(r.susp_max_ns, d);
        ++r.susp_count;
        ++thread_resumes_;
        return S_OK;
    }

    // ------------------------------------------------------------------ shutdown
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true, std::memory_order_release);
        std::uint64_t t = now_ns();
        {
            std::lock_guard<std::mutex> g(mu_);
            Report(t);
        }
        // No ICorProfilerInfo call here other than the final Release.
        ReleaseAll();
        return S_OK;
    }

private:
    struct Snapshot {
        HRESULT info_hr = E_FAIL;
        DWORD win32 = 0;
        HRESULT ad_hr = E_FAIL;
        AppDomainID ad = 0;
        HRESULT ctx_hr = E_FAIL;
        ContextID ctx = 0;
    };

    // Called WITHOUT mu_ held, only with a ThreadID the runtime just handed us as valid.
    Snapshot Query(ThreadID id) {
        Snapshot s;
        s.info_hr = info_->GetThreadInfo(id, &s.win32);
        if (info2_ != nullptr) s.ad_hr = info2_->GetThreadAppDomain(id, &s.ad);
        s.ctx_hr = info_->GetThreadContext(id, &s.ctx);
        if (succeeded(s.ad_hr) && s.ad != 0) EnsureAppDomainName(s.ad);
        return s;
    }

    // Caller-allocated buffer protocol, done without mu_ held; cached afterwards.
    void EnsureAppDomainName(AppDomainID ad) {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (ad_names_.count(ad) != 0) return;
        }
        std::vector<WCHAR> buf(64);
        ULONG need = 0;
        ProcessID pid = 0;
        HRESULT hr = info_->GetAppDomainInfo(ad, static_cast<ULONG>(buf.size()), &need, buf.data(), &pid);
        if (succeeded(hr) && need > buf.size()) {
            buf.assign(need, 0);
            hr = info_->GetAppDomainInfo(ad, static_cast<ULONG>(buf.size()), &need, buf.data(), &pid);
        }
        std::string name;
        if (succeeded(hr)) {
            size_t n = std::min<size_t>(need, buf.size());
            name = to_utf8(buf.data(), n);   // stops at the terminator if one is included in need
        } else {
            char tmp[32];
            std::snprintf(tmp, sizeof tmp, "<hr 0x%08x>", (unsigned)hr);
            name = tmp;
        }
        std::lock_guard<std::mutex> g(mu_);
        ad_names_.emplace(ad, name);
    }

    // mu_ held.
    void Apply(ThreadRec& r, const Snapshot& s) {
        if (succeeded(s.info_hr)) {
            if (s.win32 != 0) {
                if (r.os_assignments > 0 && s.win32 != r.os_tid) ++r.info_mismatch;
                r.info_tid = s.win32;
            }
            ++info_ok_;
        } else {
            ++info_fail_;
        }
        if (succeeded(s.ad_hr) && s.ad != 0) r.appdomain = s.ad;
        r.context_hr = s.ctx_hr;
        if (succeeded(s.ctx_hr)) {
            r.have_context = true;
            r.context = s.ctx;
        } else if (s.ctx_hr == CORPROF_E_DATAINCOMPLETE) {
            ++ctx_incomplete_;
        }
    }

    // mu_ held. Lookup or create the live record for a ThreadID.
    ThreadRec& Get(ThreadID id) {
        auto it = live_.find(id);
        if (it != live_.end()) return all_[it->second];
        all_.emplace_back();
        ThreadRec& r = all_.back();
        r.id = id;
        r.seq = static_cast<unsigned>(all_.size());
        r.created_ns = now_ns();
        live_.emplace(id, all_.size() - 1);
        return r;
    }

    // mu_ held.  Close a suspension interval that never received RuntimeThreadResumed.
    void CloseOpenSuspension(ThreadRec& r, std::uint64_t now) {
        if (!r.suspended) return;
        std::uint64_t end = (last_resume_finished_ns_ > r.susp_start_ns) ? last_resume_finished_ns_ : now;
        std::uint64_t d = end - r.susp_start_ns;
        r.susp_total_ns += d;
        r.susp_max_ns = std::max(r.susp_max_ns, d);
        ++r.susp_count;
        ++r.susp_unmatched;
        r.suspended = false;
    }

    ReasonStats& Reason(int r) { return reasons_[(r >= 0 && r < kReasonSlots) ? r : kSuspendOther]; }

    // mu_ held.
    void Report(std::uint64_t t) {
        unsigned alive = 0, named = 0;
        std::uint64_t susp_all = 0;
        for (ThreadRec& r : all_) {
            if (!r.destroyed) {
                CloseOpenSuspension(r, t);
                ++alive;
            }
            if (!r.name.empty()) ++named;
            susp_all += r.susp_total_ns;
        }
        unsigned mismatches = 0, with_ctx = 0;
        std::vector<ContextID> ctxs;
        for (const ThreadRec& r : all_) {
            mismatches += r.info_mismatch;
            if (r.have_context) {
                ++with_ctx;
                if (std::find(ctxs.begin(), ctxs.end(), r.context) == ctxs.end()) ctxs.push_back(r.context);
            }
        }

        std::fprintf(stderr,
                     "[threadtimeline] summary: threads=%zu created=%u destroyed=%u alive_at_shutdown=%u "
                     "named=%u renames=%u os_assignments=%u os_reassignments=%u pre_existing=%u\n",
                     all_.size(), created_, destroyed_, alive, named, renames_, os_assigned_, os_reassignments_,
                     enum_found_);
        std::fprintf(stderr,
                     "[threadtimeline] ids: GetThreadInfo ok=%u failed=%u mismatches_vs_assigned=%u "
                     "threads_with_context=%u distinct_contexts=%zu context_incomplete=%u destroyed_unknown=%u "
                     "enum_hr=0x%08x\n",
                     info_ok_, info_fail_, mismatches, with_ctx, ctxs.size(), ctx_incomplete_, destroyed_unknown_,
                     (unsigned)enum_hr_);
        std::fprintf(stderr,
                     "[threadtimeline] suspensions: thread_suspends=%u thread_resumes=%u resume_unmatched=%u "
                     "by_managed=%u by_native=%u resume_phase=%.3fms total_thread_suspended=%.3fms anomalies=%u\n",
                     thread_suspends_, thread_resumes_, resume_unmatched_, suspend_by_managed_, suspend_by_native_,
                     ms(resume_phase_ns_), ms(susp_all), protocol_anomalies_ + resume_without_suspend_);
        for (int i = 0; i < kReasonSlots; ++i) {
            const ReasonStats& rs = reasons_[i];
            if (rs.started == 0) continue;
            std::fprintf(stderr,
                         "[threadtimeline]   reason %-18s started=%u finished=%u aborted=%u resumed=%u "
                         "suspend_phase=%.3fms pause=%.3fms max_pause=%.3fms\n",
                         reason_name(i), rs.started, rs.finished, rs.aborted, rs.resumed, ms(rs.suspend_phase_ns),
                         ms(rs.pause_ns), ms(rs.pause_max_ns));
        }
        const size_t kMaxLines = 40;
        for (size_t i = 0; i < all_.size() && i < kMaxLines; ++i) {
            const ThreadRec& r = all_[i];
            std::uint64_t end = r.destroyed ? r.destroyed_ns : t;
            auto ad = ad_names_.find(r.appdomain);
            std::fprintf(stderr,
                         "[threadtimeline]   #%u tid=0x%llx os=%u%s name=\"%s\" ad=%s start=%.1fms %s=%.1fms "
                         "life=%.1fms susp=%u/%.3fms max=%.3fms%s%s%s\n",
                         r.seq, (unsigned long long)r.id, (unsigned)(r.os_tid ? r.os_tid : r.info_tid),
                         r.os_assignments > 1 ? "*" : "", r.name.c_str(),
                         ad != ad_names_.end() ? ad->second.c_str() : "-", ms(r.created_ns - t0_),
                         r.destroyed ? "end" : "alive@shutdown", ms(end - t0_), ms(end - r.created_ns), r.susp_count,
                         ms(r.susp_total_ns), ms(r.susp_max_ns), r.saw_created ? "" : " (no ThreadCreated)",
                         r.created_cb_on_self ? " (created-cb on self)" : "",
                         r.susp_unmatched ? " (unmatched suspends)" : "");
        }
        if (all_.size() > kMaxLines)
            std::fprintf(stderr, "[threadtimeline]   ... %zu more threads\n", all_.size() - kMaxLines);
    }

    void ReleaseAll() {
        if (info4_ != nullptr) { info4_->Release(); info4_ = nullptr; }
        if (info2_ != nullptr) { info2_->Release(); info2_ = nullptr; }
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
    }

    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo2* info2_ = nullptr;
    ICorProfilerInfo4* info4_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::uint64_t t0_ = 0;

    std::mutex mu_;
    std::vector<ThreadRec> all_;                       // every thread ever seen, in order
    std::unordered_map<ThreadID, size_t> live_;        // ThreadID -> index, live threads only
    std::unordered_map<AppDomainID, std::string> ad_names_;
    ReasonStats reasons_[kReasonSlots];
    bool pause_active_ = false;
    std::uint64_t pause_started_ns_ = 0;
    int pause_reason_ = 0;
    std::uint64_t last_resume_finished_ns_ = 0;
    std::uint64_t resume_phase_ns_ = 0;
    unsigned created_ = 0, destroyed_ = 0, destroyed_unknown_ = 0, renames_ = 0, os_assigned_ = 0,
             os_reassignments_ = 0, enum_found_ = 0;
    unsigned info_ok_ = 0, info_fail_ = 0, ctx_incomplete_ = 0;
    unsigned thread_suspends_ = 0, thread_resumes_ = 0, resume_unmatched_ = 0;
    unsigned suspend_by_managed_ = 0, suspend_by_native_ = 0, protocol_anomalies_ = 0, resume_without_suspend_ = 0;
    HRESULT enum_hr_ = S_OK;
};

}  // namespace

DOCFIX_DEFINE_PROFILER(ThreadTimelineProfiler)
