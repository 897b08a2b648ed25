// thread_census.cpp -- a thread monitor: managed thread lifecycle, OS-thread assignment, names, and
// runtime suspensions (how long they take, how many threads each one suspends).
//
// What it does
//   * Initialize: QueryInterface for ICorProfilerInfo, SetEventMask(COR_PRF_MONITOR_THREADS |
//     COR_PRF_MONITOR_SUSPENDS).  Nothing else is enabled.
//   * ThreadCreated: records the ThreadID in a table, asks GetCurrentThreadID whether the callback
//     runs on the new thread itself or on its creator, and asks GetThreadInfo for the OS thread id (it
//     may legitimately not be assigned yet).
//   * ThreadAssignedToOSThread: records the OS id and cross-checks it with GetThreadInfo.
//   * ThreadNameChanged: copies the (not null-terminated) name into the table.
//   * ThreadDestroyed: removes the entry.  The ThreadID is NOT passed back to the runtime there.
//   * RuntimeSuspendStarted/Finished/Aborted, RuntimeResumeStarted/Finished, RuntimeThreadSuspended/
//     Resumed: lock-free bookkeeping only (atomics + CLOCK_MONOTONIC): suspension latency
//     (SuspendStarted -> SuspendFinished), pause length (SuspendStarted -> ResumeStarted), full cycle
//     (SuspendStarted -> ResumeFinished), threads suspended per suspension, suspensions by reason, and
//     a check of the documented same-thread guarantees.
//   * Shutdown: prints one line starting with "thread_census:" and releases the info pointer.  No
//     ICorProfilerInfo method is called from Shutdown.
//
// Documentation relied on (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
//   * ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer." ; "The Initialize call is
//     the only opportunity to enable (or disable) callbacks that are immutable."  (the whole event mask
//     is set there, once)
//   * COR_PRF_MONITOR enumeration: COR_PRF_MONITOR_THREADS "Controls the ThreadCreated,
//     ThreadDestroyed, ThreadAssignedToOSThread, and ThreadNameChanged callbacks in the
//     ICorProfilerCallback and ICorProfilerCallback2 interfaces." ; COR_PRF_MONITOR_SUSPENDS "Controls
//     the RuntimeSuspend*, RuntimeResume*, RuntimeThreadSuspended, and RuntimeThreadResumed callbacks
//     in the ICorProfilerCallback interface."
//   * ThreadCreated: "The threadId value is immediately valid."  (so GetThreadInfo may be called on it)
//   * ThreadDestroyed: "The threadId value is no longer valid at the time of this call."  (so it is only
//     used as a key into our own table, never handed back to the runtime)
//   * ThreadAssignedToOSThread: "The ThreadAssignedToOSThread callback exists so that the profiler can
//     maintain an accurate mapping across fibers of operating system threads to managed threads."
//   * ThreadNameChanged: name -- "The new name of the thread. The name is not null-terminated."  (copied
//     with exactly cchName characters; a zero length / null name is accepted)
//   * GetThreadInfo: "Gets the current Win32 thread identity for the specified thread."
//   * GetCurrentThreadID: "If the current thread is an internal runtime thread or other unmanaged
//     thread, GetCurrentThreadID returns CORPROF_E_NOT_MANAGED_THREAD as the HRESULT, and the returned
//     value of the pThreadId parameter will be null."  (a failure is tallied, not treated as an error)
//   * CORPROF_E_UNSUPPORTED_CALL_SEQUENCE HRESULT: ThreadAssignedToOSThread, RuntimeSuspendStarted,
//     RuntimeSuspendFinished, RuntimeSuspendAborted, RuntimeThreadSuspended and RuntimeThreadResumed are
//     listed as "Callback methods that forbid garbage collections".  GetThreadInfo is not in the
//     "Informational methods that trigger garbage collections" column, so it is allowed in
//     ThreadAssignedToOSThread; the suspension callbacks call no ICorProfilerInfo method at all.
//   * RuntimeSuspendStarted: "All runtime threads that are in unmanaged code are allowed to continue
//     running until they try to re-enter the runtime. At that point they will also be suspended until
//     the runtime resumes."  -- therefore no lock is taken in any suspension callback: a thread that
//     holds one of our locks could be exactly the one being suspended.
//   * RuntimeSuspendFinished: "The RuntimeSuspendFinished callback is guaranteed to occur on the same
//     thread as the ICorProfilerCallback::RuntimeSuspendStarted callback."
//   * RuntimeSuspendAborted: "Either the ICorProfilerCallback::RuntimeSuspendFinished callback or the
//     RuntimeSuspendAborted callback will occur on a single thread following a
//     ICorProfilerCallback::RuntimeSuspendStarted callback." and "The run-time suspension might be
//     aborted if two threads simultaneously attempt to suspend the runtime."
//   * RuntimeResumeFinished: "The RuntimeResumeFinished callback is not guaranteed to occur on the same
//     thread as the ICorProfilerCallback::RuntimeSuspendStarted callback. However, it is guaranteed to
//     occur on the same thread as the ICorProfilerCallback::RuntimeResumeStarted callback."
//   * RuntimeThreadSuspended: "The RuntimeThreadSuspended notification can occur any time between the
//     ICorProfilerCallback::RuntimeSuspendStarted and the associated
//     ICorProfilerCallback::RuntimeResumeStarted callbacks. Notifications that occur between
//     ICorProfilerCallback::RuntimeSuspendFinished and RuntimeResumeStarted are for threads that had
//     been running in unmanaged code and were suspended upon entry to the runtime." and "if the
//     currently executing thread (the thread that called this callback) is the one that is being
//     suspended, this callback will occur just before the thread is suspended."  -- so it must return
//     quickly and never block; "late" suspensions are counted separately.
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//     the Shutdown method is called." and "Certain immutable events may still occur after shutdown; the
//     profiler should take care to return immediately when this occurs."
//
// Ambiguities and the reading chosen
//   * Shutdown says Info methods are unsafe "after the Shutdown method is called" but undefined "after
//     the Shutdown method returns".  Safe reading: no ICorProfilerInfo call inside Shutdown except the
//     final Release; all runtime queries happen in earlier callbacks.  Every callback returns at once
//     once Shutdown has begun, and Shutdown waits (bounded) for callbacks already in flight to leave
//     before releasing the interface.
//   * The documents do not say on which thread ThreadCreated is delivered (the new thread or its
//     creator), nor whether the OS thread is already assigned at that point.  The profiler only
//     tallies both cases and treats an OS id of 0 / a failing GetThreadInfo there as "not yet known".
//   * "threads suspended per suspension" is counted from RuntimeThreadSuspended notifications between
//     RuntimeSuspendStarted and RuntimeResumeStarted (the window the page names); notifications in an
//     aborted attempt are attributed to that aborted attempt and not to a completed suspension.
//   * The documents do not order ThreadNameChanged relative to ThreadCreated.  A name that arrives for a
//     ThreadID not reported yet (a thread named before it starts) is kept aside (bounded) and attached
//     when ThreadCreated arrives; it is dropped at ThreadDestroyed.
//   * Whether the "Win32 thread ID" of GetThreadInfo equals the Linux kernel tid is not documented;
//     the profiler compares GetThreadInfo only with the osThreadId the runtime itself reported.
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common.h"

using namespace docfix;

namespace {

std::uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

long os_tid() { return static_cast<long>(syscall(SYS_gettid)); }

template <class T>
void atomic_max(std::atomic<T>& slot, T value) {
    T cur = slot.load(std::memory_order_relaxed);
    while (value > cur && !slot.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
    }
}

// Documented COR_PRF_SUSPEND_REASON values (cor-prf-suspend-reason-enumeration).
const char* reason_name(int r) {
    switch (r) {
        case 0: return "other";
        case 1: return "gc";
        case 2: return "appdomain_shutdown";
        case 3: return "code_pitching";
        case 4: return "shutdown";
        case 6: return "inproc_debugger";
        case 7: return "gc_prep";
        case 8: return "rejit";
        case 9: return "profiler";
        default: return "unknown";
    }
}

constexpr int kReasonSlots = 16;

struct ThreadRec {
    DWORD osThread = 0;
    std::string name;
    std::uint64_t createdNs = 0;
};

}  // namespace

class ThreadCensusProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[thread_census] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_FAIL;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_SUSPENDS);
        if (failed(hr)) {
            std::fprintf(stderr, "[thread_census] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        startNs_ = now_ns();
        return S_OK;
    }

    // ---------------------------------------------------------------- thread lifecycle
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID threadId) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        ++created_;

        // Runtime queries first, outside our lock.
        ThreadID current = 0;
        HRESULT hr = info_->GetCurrentThreadID(&current);
        if (failed(hr)) {
            ++currentUnmanaged_;  // CORPROF_E_NOT_MANAGED_THREAD: delivered on a non-managed thread
        } else if (current == threadId) {
            ++createdOnSelf_;
        } else {
            ++createdByOther_;
        }
        DWORD osId = 0;
        hr = info_->GetThreadInfo(threadId, &osId);
        if (succeeded(hr) && osId != 0) ++osKnownAtCreate_;

        std::lock_guard<std::mutex> lock(mutex_);
        ThreadRec& rec = threads_[threadId];
        if (rec.createdNs != 0) ++duplicateCreate_;
        rec.createdNs = now_ns();
        if (succeeded(hr) && osId != 0) rec.osThread = osId;
        auto pending = pendingNames_.find(threadId);
        if (pending != pendingNames_.end()) {  // named before the runtime reported the thread
            rec.name = std::move(pending->second);
            pendingNames_.erase(pending);
            ++namedBeforeCreate_;
        }
        unsigned live = static_cast<unsigned>(threads_.size());
        if (live > maxLive_) maxLive_ = live;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID managedThreadId, DWORD osThreadId) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        ++assigned_;
        // GC-forbidding callback: GetThreadInfo does not trigger a GC (not listed), so it is allowed.
        DWORD reported = 0;
        HRESULT hr = info_->GetThreadInfo(managedThreadId, &reported);
        if (succeeded(hr)) {
            ++assignedChecked_;
            if (reported == osThreadId) ++assignedAgree_;
        }
        if (static_cast<long>(osThreadId) == os_tid()) ++assignedOnSelf_;

        std::lock_guard<std::mutex> lock(mutex_);
        auto it = threads_.find(managedThreadId);
        if (it == threads_.end()) {
            ++assignedUnknown_;  // created before we could see it; keep it anyway
            ThreadRec& rec = threads_[managedThreadId];
            rec.osThread = osThreadId;
            rec.createdNs = now_ns();
        } else {
            if (it->second.osThread != 0 && it->second.osThread != osThreadId) ++reassigned_;
            it->second.osThread = osThreadId;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID threadId, ULONG cchName, WCHAR* name) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        ++renamed_;
        // "The name is not null-terminated": copy exactly cchName characters (to_utf8 stops at n or NUL).
        std::string utf8 = (name != nullptr && cchName > 0) ? to_utf8(name, cchName) : std::string();
        ThreadID current = 0;
        if (succeeded(info_->GetCurrentThreadID(&current)) && current == threadId) ++renamedBySelf_;

        std::lock_guard<std::mutex> lock(mutex_);
        auto it = threads_.find(threadId);
        if (it == threads_.end()) {
            // A thread can be named before ThreadCreated reports it (e.g. named before it starts):
            // keep the name until the thread shows up (bounded).
            ++renamedUnknown_;
            if (pendingNames_.size() < 1024 || pendingNames_.count(threadId)) pendingNames_[threadId] = std::move(utf8);
        } else {
            it->second.name = std::move(utf8);
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID threadId) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        ++destroyed_;
        // "The threadId value is no longer valid at the time of this call": no runtime call with it.
        std::lock_guard<std::mutex> lock(mutex_);
        pendingNames_.erase(threadId);
        auto it = threads_.find(threadId);
        if (it == threads_.end()) {
            ++destroyedUnknown_;
            return S_OK;
        }
        std::uint64_t life = now_ns() - it->second.createdNs;
        lifetimeNsTotal_ += life;
        if (!it->second.name.empty()) ++destroyedNamed_;
        threads_.erase(it);
        return S_OK;
    }

    // ---------------------------------------------------------------- suspensions (lock-free)
    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        int slot = (reason >= 0 && reason < kReasonSlots) ? reason : kReasonSlots - 1;
        reasons_[slot].fetch_add(1, std::memory_order_relaxed);
        ++suspendStarted_;
        suspendTid_.store(os_tid());
        suspendFinishedFlag_.store(false);
        curThreads_.store(0);
        curLate_.store(0);
        suspendStartNs_.store(now_ns());
        inSuspension_.store(true);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendFinished() override {
        if (shutdown_.load()) return S_OK;
        std::uint64_t t = now_ns();
        std::uint64_t start = suspendStartNs_.load();
        if (start != 0 && t >= start) {
            std::uint64_t d = t - start;
            suspendLatencyTotal_.fetch_add(d, std::memory_order_relaxed);
            atomic_max(suspendLatencyMax_, d);
        }
        ++suspendFinished_;
        ++sameThreadChecks_;
        if (suspendTid_.load() == os_tid()) ++sameThreadOk_;
        suspendFinishedFlag_.store(true);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override {
        if (shutdown_.load()) return S_OK;
        ++suspendAborted_;
        ++sameThreadChecks_;
        if (suspendTid_.load() == os_tid()) ++sameThreadOk_;
        abortedThreads_.fetch_add(curThreads_.exchange(0), std::memory_order_relaxed);
        inSuspension_.store(false);
        suspendStartNs_.store(0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        ++threadSuspendedTotal_;
        if (!inSuspension_.load()) {
            ++suspendedOutsideWindow_;
            return S_OK;
        }
        curThreads_.fetch_add(1, std::memory_order_relaxed);
        if (suspendFinishedFlag_.load()) curLate_.fetch_add(1, std::memory_order_relaxed);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeResumeStarted() override {
        if (shutdown_.load()) return S_OK;
        std::uint64_t t = now_ns();
        resumeTid_.store(os_tid());
        resumeStartNs_.store(t);
        ++resumeStarted_;
        if (inSuspension_.exchange(false)) {
            unsigned n = curThreads_.exchange(0);
            unsigned late = curLate_.exchange(0);
            ++completedSuspensions_;
            perSuspensionTotal_.fetch_add(n, std::memory_order_relaxed);
            lateSuspended_.fetch_add(late, std::memory_order_relaxed);
            atomic_max(perSuspensionMax_, n);
            std::uint64_t start = suspendStartNs_.load();
            if (start != 0 && t >= start) {
                std::uint64_t d = t - start;
                pauseTotal_.fetch_add(d, std::memory_order_relaxed);
                atomic_max(pauseMax_, d);
            }
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeThreadResumed(ThreadID) override {
        if (shutdown_.load()) return S_OK;
        ++threadResumedTotal_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        if (shutdown_.load()) return S_OK;
        std::uint64_t t = now_ns();
        ++resumeFinished_;
        ++resumeSameThreadChecks_;
        if (resumeTid_.load() == os_tid()) ++resumeSameThreadOk_;
        std::uint64_t rs = resumeStartNs_.load();
        if (rs != 0 && t >= rs) {
            std::uint64_t d = t - rs;
            resumeLatencyTotal_.fetch_add(d, std::memory_order_relaxed);
            atomic_max(resumeLatencyMax_, d);
        }
        std::uint64_t start = suspendStartNs_.exchange(0);
        if (start != 0 && t >= start) {
            std::uint64_t d = t - start;
            cycleTotal_.fetch_add(d, std::memory_order_relaxed);
            atomic_max(cycleMax_, d);
        }
        return S_OK;
    }

    // ---------------------------------------------------------------- shutdown
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        // Let callbacks that passed their shutdown check before the flag was set leave (bounded wait).
        bool drained = wait_for_inflight();

        size_t live = 0, liveNamed = 0, liveWithOs = 0;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            live = threads_.size();
            for (const auto& kv : threads_) {
                if (!kv.second.name.empty()) ++liveNamed;
                if (kv.second.osThread != 0) ++liveWithOs;
            }
        }
        unsigned done = completedSuspensions_.load();
        unsigned fin = suspendFinished_.load();
        unsigned resFin = resumeFinished_.load();
        auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
        double suspAvg = fin ? us(suspendLatencyTotal_.load()) / fin : 0.0;
        double pauseAvg = done ? us(pauseTotal_.load()) / done : 0.0;
        double cycleAvg = resFin ? us(cycleTotal_.load()) / resFin : 0.0;
        double perAvg = done ? static_cast<double>(perSuspensionTotal_.load()) / done : 0.0;

        std::string reasons;
        for (int i = 0; i < kReasonSlots; ++i) {
            unsigned n = reasons_[i].load();
            if (n == 0) continue;
            if (!reasons.empty()) reasons += ',';
            reasons += reason_name(i);
            reasons += ':';
            reasons += std::to_string(n);
        }
        if (reasons.empty()) reasons = "none";

        std::fprintf(stderr,
                     "thread_census: created=%u destroyed=%u live_at_shutdown=%zu (named=%zu with_os_id=%zu) "
                     "max_live=%u created_on_self=%u created_by_other=%u created_on_unmanaged=%u "
                     "os_id_at_create=%u assigned=%u assigned_agree=%u/%u assigned_on_self=%u reassigned=%u "
                     "renamed=%u renamed_by_self=%u named_before_create=%u destroyed_named=%u unknown(destroyed=%u assigned=%u renamed=%u) "
                     "avg_lifetime_ms=%.2f | suspensions=%u completed=%u aborted=%u reasons=%s "
                     "threads_suspended=%u per_suspension_avg=%.2f per_suspension_max=%u late_suspended=%u "
                     "outside_window=%u threads_resumed=%u suspend_avg_us=%.1f suspend_max_us=%.1f "
                     "pause_avg_us=%.1f pause_max_us=%.1f cycle_avg_us=%.1f cycle_max_us=%.1f "
                     "resume_max_us=%.1f same_thread_suspend=%u/%u same_thread_resume=%u/%u\n",
                     created_.load(), destroyed_.load(), live, liveNamed, liveWithOs, maxLive_,
                     createdOnSelf_.load(), createdByOther_.load(), currentUnmanaged_.load(), osKnownAtCreate_.load(),
                     assigned_.load(), assignedAgree_.load(), assignedChecked_.load(), assignedOnSelf_.load(),
                     reassigned_.load(), renamed_.load(), renamedBySelf_.load(), namedBeforeCreate_.load(), destroyedNamed_.load(), destroyedUnknown_.load(),
                     assignedUnknown_.load(), renamedUnknown_.load(),
                     (destroyed_.load() - destroyedUnknown_.load())
                         ? static_cast<double>(lifetimeNsTotal_) / 1e6 /
                               (destroyed_.load() - destroyedUnknown_.load())
                         : 0.0,
                     suspendStarted_.load(), done, suspendAborted_.load(), reasons.c_str(),
                     threadSuspendedTotal_.load(), perAvg, perSuspensionMax_.load(), lateSuspended_.load(),
                     suspendedOutsideWindow_.load(), threadResumedTotal_.load(), suspAvg,
                     us(suspendLatencyMax_.load()), pauseAvg, us(pauseMax_.load()), cycleAvg, us(cycleMax_.load()),
                     us(resumeLatencyMax_.load()), sameThreadOk_.load(), sameThreadChecks_.load(),
                     resumeSameThreadOk_.load(), resumeSameThreadChecks_.load());

        if (info_ != nullptr && drained) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // Counts callbacks in flight so Shutdown can release the info pointer only when none uses it.
    struct Scope {
        explicit Scope(ThreadCensusProfiler& p) : owner(p) {
            owner.inflight_.fetch_add(1);
            active = !owner.shutdown_.load() && owner.info_ != nullptr;
        }
        ~Scope() { owner.inflight_.fetch_sub(1); }
        ThreadCensusProfiler& owner;
        bool active = false;
    };

    bool wait_for_inflight() {
        for (int i = 0; i < 2000; ++i) {
            if (inflight_.load() == 0) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return inflight_.load() == 0;
    }

    ICorProfilerInfo* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<int> inflight_{0};
    std::uint64_t startNs_ = 0;

    // thread table (only touched from thread-lifecycle callbacks and Shutdown)
    std::mutex mutex_;
    std::unordered_map<ThreadID, ThreadRec> threads_;
    std::unordered_map<ThreadID, std::string> pendingNames_;
    unsigned maxLive_ = 0;
    std::uint64_t lifetimeNsTotal_ = 0;

    std::atomic<unsigned> created_{0}, destroyed_{0}, destroyedUnknown_{0}, destroyedNamed_{0};
    std::atomic<unsigned> createdOnSelf_{0}, createdByOther_{0}, currentUnmanaged_{0}, osKnownAtCreate_{0};
    std::atomic<unsigned> duplicateCreate_{0};
    std::atomic<unsigned> assigned_{0}, assignedChecked_{0}, assignedAgree_{0}, assignedOnSelf_{0};
    std::atomic<unsigned> assignedUnknown_{0}, reassigned_{0};
    std::atomic<unsigned> renamed_{0}, renamedBySelf_{0}, renamedUnknown_{0}, namedBeforeCreate_{0};

    // suspension bookkeeping (atomics only)
    std::atomic<unsigned> reasons_[kReasonSlots] = {};
    std::atomic<unsigned> suspendStarted_{0}, suspendFinished_{0}, suspendAborted_{0};
    std::atomic<unsigned> resumeStarted_{0}, resumeFinished_{0}, completedSuspensions_{0};
    std::atomic<long> suspendTid_{0}, resumeTid_{0};
    std::atomic<bool> inSuspension_{false}, suspendFinishedFlag_{false};
    std::atomic<unsigned> curThreads_{0}, curLate_{0};
    std::atomic<unsigned> threadSuspendedTotal_{0}, threadResumedTotal_{0}, suspendedOutsideWindow_{0};
    std::atomic<unsigned> perSuspensionTotal_{0}, perSuspensionMax_{0}, lateSuspended_{0}, abortedThreads_{0};
    std::atomic<unsigned> sameThreadChecks_{0}, sameThreadOk_{0};
    std::atomic<unsigned> resumeSameThreadChecks_{0}, resumeSameThreadOk_{0};
    std::atomic<std::uint64_t> suspendStartNs_{0}, resumeStartNs_{0};
    std::atomic<std::uint64_t> suspendLatencyTotal_{0}, suspendLatencyMax_{0};
    std::atomic<std::uint64_t> pauseTotal_{0}, pauseMax_{0};
    std::atomic<std::uint64_t> cycleTotal_{0}, cycleMax_{0};
    std::atomic<std::uint64_t> resumeLatencyTotal_{0}, resumeLatencyMax_{0};
};

DOCFIX_DEFINE_PROFILER(ThreadCensusProfiler)
