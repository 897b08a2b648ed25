// destroyed_threadinfo.cpp -- "thread journal": a thread timeline profiler that records raw
// thread / suspension events into a lock-free, fixed-size journal and only replays the journal
// into per-thread lifetimes, names, OS ids and suspended time at Shutdown.
//
// CONTAINS EXACTLY ONE DELIBERATE API-CONTRACT BUG (search for "BUG:"): in ThreadDestroyed it asks
// the runtime for the OS thread id of the thread being destroyed, with
// ICorProfilerInfo::GetThreadInfo(threadId, ...), although the documentation of
// ICorProfilerCallback::ThreadDestroyed says "The threadId value is no longer valid at the time of
// this call."  The engineer's intent: "stamp the exit record with the OS tid, in case
// ThreadAssignedToOSThread was missed".  Everything else follows the documentation:
//   * Initialize: QueryInterface for ICorProfilerInfo, SetEventMask(COR_PRF_MONITOR_THREADS |
//     COR_PRF_MONITOR_SUSPENDS) (the mask is set in Initialize).
//   * ThreadCreated: "The threadId value is immediately valid." (only recorded).
//   * ThreadAssignedToOSThread: the osThreadId argument is recorded for each assignment.
//   * ThreadNameChanged: "The name is not null-terminated." -> exactly cchName characters copied
//     (truncated to the journal slot).
//   * RuntimeSuspendStarted/Finished/Aborted and RuntimeResumeStarted/Finished: recorded with the
//     COR_PRF_SUSPEND_REASON and the calling OS thread; the pairing at replay time relies on
//     "The RuntimeSuspendFinished callback is guaranteed to occur on the same thread as the
//     ICorProfilerCallback::RuntimeSuspendStarted callback."
//   * RuntimeThreadSuspended / RuntimeThreadResumed: recorded; per-thread suspended time is the sum
//     of suspended->resumed intervals.
//   * GetCurrentThreadID in RuntimeSuspendStarted: "If the current thread is an internal runtime
//     thread or other unmanaged thread, GetCurrentThreadID returns CORPROF_E_NOT_MANAGED_THREAD".
//   * Notification threads: "these callbacks are not serialized" -> the journal is an atomic
//     append-only array, no locks in callbacks.
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//     after the Shutdown method is called." -> replay uses journal data only, then Release.
#include "common.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <vector>

using namespace docfix;

namespace {

enum Kind : std::uint8_t {
    EV_CREATED = 1,
    EV_OSTHREAD,
    EV_NAME,
    EV_DESTROYED,
    EV_SUSP_START,
    EV_SUSP_DONE,
    EV_SUSP_ABORT,
    EV_RESUME_START,
    EV_RESUME_DONE,
    EV_T_SUSP,
    EV_T_RESUME,
};

struct Event {
    std::uint64_t ts;
    ThreadID tid;
    std::uint32_t arg;       // os tid / suspend reason
    std::uint32_t cb_os;     // OS thread that delivered the callback
    std::uint8_t kind;
    std::uint8_t name_len;
    char name[22];
    std::atomic<bool> ready;
};

constexpr std::size_t kJournal = 1u << 16;
Event g_journal[kJournal];
std::atomic<std::size_t> g_next{0};
std::atomic<std::size_t> g_dropped{0};

inline std::uint64_t clock_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

Event* journal_slot(Kind k, ThreadID tid, std::uint32_t arg) {
    std::size_t i = g_next.fetch_add(1, std::memory_order_relaxed);
    if (i >= kJournal) {
        g_dropped.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    Event* e = &g_journal[i];
    e->ts = clock_ns();
    e->tid = tid;
    e->arg = arg;
    e->cb_os = static_cast<std::uint32_t>(syscall(SYS_gettid));
    e->kind = k;
    e->name_len = 0;
    return e;
}

inline void journal(Kind k, ThreadID tid, std::uint32_t arg) {
    if (Event* e = journal_slot(k, tid, arg)) e->ready.store(true, std::memory_order_release);
}

const char* const kReasons[] = {"other", "gc", "ad-shutdown", "pitching", "shutdown", "?5", "debugger", "gc-prep",
                                "rejit"};

class ThreadJournalProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* pUnk) override {
        start_ = clock_ns();
        if (!pUnk) return E_INVALIDARG;
        if (failed(pUnk->QueryInterface(IID_ICorProfilerInfo, (void**)&prof_)) || !prof_) return E_FAIL;
        HRESULT hr = prof_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_SUSPENDS);
        if (failed(hr)) {
            prof_->Release();
            prof_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[threadjournal] up\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_CREATED, t, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID t, DWORD os) override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_OSTHREAD, t, os);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID t, ULONG cch, WCHAR* name) override {
        if (down_.load(std::memory_order_acquire)) return S_OK;
        Event* e = journal_slot(EV_NAME, t, cch);
        if (!e) return S_OK;
        std::string u = (name && cch) ? to_utf8(name, cch) : std::string();   // not null-terminated
        std::size_t n = std::min(u.size(), sizeof e->name);
        std::memcpy(e->name, u.data(), n);
        e->name_len = static_cast<std::uint8_t>(n);
        e->ready.store(true, std::memory_order_release);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID t) override {
        if (down_.load(std::memory_order_acquire)) return S_OK;
        DWORD os = 0;
        // BUG: GetThreadInfo is called with the ThreadID of the thread being destroyed.
        // ICorProfilerCallback::ThreadDestroyed: "The threadId value is no longer valid at the time
        // of this call."  Passing it back to the runtime is a use of an invalid ID.
        HRESULT hr = prof_->GetThreadInfo(t, &os);
        if (failed(hr)) {
            destroyed_query_failed_.fetch_add(1, std::memory_order_relaxed);
            last_destroyed_hr_.store(hr, std::memory_order_relaxed);
            os = 0;
        } else {
            destroyed_query_ok_.fetch_add(1, std::memory_order_relaxed);
            if (os == 0) destroyed_query_zero_.fetch_add(1, std::memory_order_relaxed);
        }
        journal(EV_DESTROYED, t, os);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON r) override {
        if (down_.load(std::memory_order_acquire)) return S_OK;
        ThreadID me = 0;
        HRESULT hr = prof_->GetCurrentThreadID(&me);
        if (hr == CORPROF_E_NOT_MANAGED_THREAD) me = 0;   // documented: runtime-internal thread
        journal(EV_SUSP_START, me, static_cast<std::uint32_t>(r));
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendFinished() override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_SUSP_DONE, 0, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_SUSP_ABORT, 0, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeResumeStarted() override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_RESUME_START, 0, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_RESUME_DONE, 0, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID t) override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_T_SUSP, t, 0);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeThreadResumed(ThreadID t) override {
        if (!down_.load(std::memory_order_acquire)) journal(EV_T_RESUME, t, 0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        down_.store(true, std::memory_order_release);
        Replay(clock_ns());
        if (prof_) {
            prof_->Release();
            prof_ = nullptr;
        }
        return S_OK;
    }

private:
    struct Life {
        ThreadID tid = 0;
        std::uint64_t born = 0, died = 0;
        bool dead = false;
        std::uint32_t os = 0, exit_os = 0;
        std::string name;
        std::uint64_t susp_since = 0, susp_ns = 0;
        unsigned susp_n = 0;
    };

    void Replay(std::uint64_t end) {
        std::size_t n = std::min(g_next.load(), kJournal);
        std::vector<Life> lives;
        std::map<ThreadID, std::size_t> open;   // live ThreadID -> index (IDs may be reused)
        auto life_of = [&](ThreadID t, std::uint64_t ts) -> Life& {
            auto it = open.find(t);
            if (it != open.end()) return lives[it->second];
            lives.emplace_back();
            lives.back().tid = t;
            lives.back().born = ts;
            open[t] = lives.size() - 1;
            return lives.back();
        };
        std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> susp_by_os;  // cb os -> start, reason
        std::map<std::uint32_t, std::uint64_t> resume_by_os;
        unsigned cnt[9] = {}, aborted[9] = {};
        std::uint64_t pause_ns[9] = {};
        std::uint64_t pause_since = 0;
        std::uint32_t pause_reason = 0;
        bool pausing = false;
        unsigned skipped = 0, exit_os_mismatch = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const Event& e = g_journal[i];
            if (!e.ready.load(std::memory_order_acquire)) {
                ++skipped;
                continue;
            }
            switch (e.kind) {
                case EV_CREATED: life_of(e.tid, e.ts).born = e.ts; break;
                case EV_OSTHREAD: life_of(e.tid, e.ts).os = e.arg; break;
                case EV_NAME: life_of(e.tid, e.ts).name.assign(e.name, e.name_len); break;
                case EV_DESTROYED: {
                    Life& l = life_of(e.tid, e.ts);
                    l.dead = true;
                    l.died = e.ts;
                    l.exit_os = e.arg;
                    if (l.os != 0 && e.arg != 0 && l.os != e.arg) ++exit_os_mismatch;
                    if (l.susp_since) {
                        l.susp_ns += e.ts - l.susp_since;
                        ++l.susp_n;
                        l.susp_since = 0;
                    }
                    open.erase(e.tid);
                    break;
                }
                case EV_SUSP_START:
                    susp_by_os[e.cb_os] = {e.ts, e.arg < 9 ? e.arg : 0};
                    ++cnt[e.arg < 9 ? e.arg : 0];
                    break;
                case EV_SUSP_DONE: {
                    auto it = susp_by_os.find(e.cb_os);
                    if (it != susp_by_os.end()) {
                        pausing = true;
                        pause_since = it->second.first;
                        pause_reason = it->second.second;
                        susp_by_os.erase(it);
                    }
                    break;
                }
                case EV_SUSP_ABORT: {
                    auto it = susp_by_os.find(e.cb_os);
                    if (it != susp_by_os.end()) {
                        ++aborted[it->second.second];
                        susp_by_os.erase(it);
                    }
                    break;
                }
                case EV_RESUME_START: resume_by_os[e.cb_os] = e.ts; break;
                case EV_RESUME_DONE:
                    resume_by_os.erase(e.cb_os);
                    if (pausing) {
                        pause_ns[pause_reason] += e.ts - pause_since;
                        pausing = false;
                    }
                    break;
                case EV_T_SUSP: {
                    Life& l = life_of(e.tid, e.ts);
                    if (!l.susp_since) l.susp_since = e.ts;
                    break;
                }
                case EV_T_RESUME: {
                    auto it = open.find(e.tid);
                    if (it != open.end() && lives[it->second].susp_since) {
                        Life& l = lives[it->second];
                        l.susp_ns += e.ts - l.susp_since;
                        ++l.susp_n;
                        l.susp_since = 0;
                    }
                    break;
                }
                default: break;
            }
        }
        unsigned dead = 0, named = 0;
        std::uint64_t susp_total = 0;
        for (Life& l : lives) {
            if (l.dead) ++dead;
            if (!l.name.empty()) ++named;
            if (l.susp_since) {
                l.susp_ns += end - l.susp_since;
                ++l.susp_n;
                l.susp_since = 0;
            }
            susp_total += l.susp_ns;
        }
        std::fprintf(stderr,
                     "[threadjournal] summary: events=%zu dropped=%zu skipped=%u threads=%zu exited=%zu running=%zu "
                     "named=%u suspended_total=%.3fms\n",
                     n, g_dropped.load(), skipped, lives.size(), (size_t)dead, lives.size() - dead, named,
                     susp_total / 1e6);
        std::fprintf(stderr,
                     "[threadjournal] exit-time GetThreadInfo: ok=%u (zero os id=%u) failed=%u last_hr=0x%08x "
                     "os_mismatch=%u\n",
                     destroyed_query_ok_.load(), destroyed_query_zero_.load(), destroyed_query_failed_.load(),
                     (unsigned)last_destroyed_hr_.load(), exit_os_mismatch);
        for (int r = 0; r < 9; ++r)
            if (cnt[r])
                std::fprintf(stderr, "[threadjournal]   suspend reason=%s n=%u aborted=%u pause=%.3fms\n", kReasons[r],
                             cnt[r], aborted[r], pause_ns[r] / 1e6);
        for (std::size_t i = 0; i < lives.size() && i < 32; ++i) {
            const Life& l = lives[i];
            std::fprintf(stderr, "[threadjournal]   %2zu %-10s os=%u exit_os=%u %8.1fms..%s susp=%u/%.3fms\n", i + 1,
                         l.name.empty() ? "(unnamed)" : l.name.c_str(), l.os, l.exit_os, (l.born - start_) / 1e6,
                         l.dead ? std::to_string((l.died - start_) / 1000000).append("ms").c_str() : "running",
                         l.susp_n, l.susp_ns / 1e6);
        }
    }

    ICorProfilerInfo* prof_ = nullptr;
    std::atomic<bool> down_{false};
    std::uint64_t start_ = 0;
    std::atomic<unsigned> destroyed_query_ok_{0}, destroyed_query_zero_{0}, destroyed_query_failed_{0};
    std::atomic<HRESULT> last_destroyed_hr_{S_OK};
};

}  // namespace

DOCFIX_DEFINE_PROFILER(ThreadJournalProfiler)
