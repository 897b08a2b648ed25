// The proxy's side of the signal-safety preload (proxy.h, profharness/preload.h): asks whether a call comes
// from inside the profiler's signal handler, and writes what the preload noted into the trace from the
// watchdog thread (never from a handler: the trace writer locks and allocates).
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "generated.h"
#include "profharness/native_stack.h"
#include "profharness/preload.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

using SharedFn = preload::Shared* (*)();
using InHandlerFn = int (*)();
using NoteInfoFn = void (*)(int, const void*);
using SetQuietFn = int (*)(int);

preload::Shared* g_shared = nullptr;
InHandlerFn g_in_handler = nullptr;
NoteInfoFn g_note_info = nullptr;
SetQuietFn g_set_quiet = nullptr;
std::mutex g_drain_mu;

// How long a handler waits for the allocator lock its own thread holds before the watchdog calls it a
// deadlock (it can never be released: the holder is the waiter).
constexpr std::int64_t kDeadlockAfterNs = 1000000000LL;

const char* function_name(int fn) {
    if (fn >= preload::kInfoBase) {
        const int id = fn - preload::kInfoBase;
        return id < static_cast<int>(InfoM::Count_) ? kInfoNames[id] : "?";
    }
    return g_shared && fn < static_cast<int>(g_shared->function_count) ? g_shared->function_names[fn] : "?";
}

int info_id(const char* name) {
    for (int k = 0; k < static_cast<int>(InfoM::Count_); ++k)
        if (std::strcmp(kInfoNames[k], name) == 0) return k;
    return -1;
}

// Handlers new since the last drain; sites new since the last drain and, when `final`, every site whose
// count grew since it was written (a later record of a site supersedes the earlier: its count is the total).
void drain_locked(bool final) {
    for (int k = 0; k < preload::kHandlers; ++k) {
        preload::Handler& h = g_shared->handlers[k];
        const std::uintptr_t fn = h.fn.load(std::memory_order_acquire);
        if (!fn || h.written.exchange(1)) continue;
        const void* installer = reinterpret_cast<const void*>(h.installer.load());
        note_caller(installer);
        Json rec = Json::object();
        rec.set("name", "proxy.signal_handler").set("payload", Json());
        rec.set("signo", k).set("handler", Json(static_cast<std::uint64_t>(fn)));
        rec.set("caller", Json(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(installer))));
        rec.set("siginfo", h.siginfo.load() != 0);
        trace().write("mark", rec);
    }
    for (preload::Site& s : g_shared->sites) {
        if (!s.published.load(std::memory_order_acquire)) continue;
        const std::uint64_t count = s.count.load();
        const std::uint64_t written = s.written.load();
        if (written && (!final || written == count)) continue;
        s.written.store(count);
        const std::uint64_t key = s.key.load();
        const int fn = static_cast<int>(key & 0xffff);
        const std::uint64_t caller = key >> 16;
        note_caller(reinterpret_cast<const void*>(caller));
        Json rec = Json::object();
        rec.set("name", "proxy.async").set("payload", Json());
        rec.set("function", function_name(fn)).set("info", fn >= preload::kInfoBase);
        rec.set("caller", Json(caller)).set("via", Json(s.via.load()));
        rec.set("thread", Json(static_cast<std::int64_t>(s.os_tid.load()))).set("signo", s.signo.load());
        rec.set("count", Json(count));
        trace().write("mark", rec);
    }
}

// (a deadlocked thread may hold the dynamic loader's lock: never dladdr here)
Json stack_json(void* const* ips, int n) {
    return native_stack_json_unlocked(ips, n < 0 ? 0 : (n > preload::kStackDepth ? preload::kStackDepth : n));
}

}  // namespace

void async_init() {
    if (g_shared) return;
    auto shared = reinterpret_cast<SharedFn>(dlsym(RTLD_DEFAULT, "profharness_preload_shared"));
    g_in_handler = reinterpret_cast<InHandlerFn>(dlsym(RTLD_DEFAULT, "profharness_preload_in_handler"));
    g_note_info = reinterpret_cast<NoteInfoFn>(dlsym(RTLD_DEFAULT, "profharness_preload_note_info"));
    g_set_quiet = reinterpret_cast<SetQuietFn>(dlsym(RTLD_DEFAULT, "profharness_preload_set_quiet"));
    if (shared && g_in_handler && g_note_info && g_set_quiet) g_shared = shared();
}

bool async_loaded() { return g_shared != nullptr; }

HandlerCheck::HandlerCheck(const char* name, const void* caller) {
    if (!g_shared || !g_in_handler()) return;
    in_handler_ = true;
    const int id = info_id(name);
    if (id >= 0) g_note_info(id, caller);
    quiet_before_ = g_set_quiet(1);  // the proxy's and the runtime's work from here is not the profiler's
}

HandlerCheck::~HandlerCheck() {
    if (in_handler_) g_set_quiet(quiet_before_);
}

int async_set_quiet(int quiet) { return g_shared ? g_set_quiet(quiet) : 0; }

void async_drain(bool final) {
    if (!g_shared || !recording_enabled()) return;
    std::lock_guard<std::mutex> lock(g_drain_mu);
    drain_locked(final);
}

namespace {

// One deadlocked handler, injected or not: what the preload noted (drained first), the mark
// proxy.async_deadlock, the end of the trace; then the process ends (the thread can never go on).
struct Deadlock {
    bool injected;
    bool lock;  // a pthread lock the thread itself holds, not the allocator's
    int signo;
    int function;
    std::uint64_t caller;  // the profiler's frame that called
    long holder, waiter;   // thread ids
    std::int64_t since_ns;
    Json holder_stack, waiter_stack;
};

[[noreturn]] void report_deadlock(const Deadlock& d) {
    async_drain(true);
    note_caller(reinterpret_cast<const void*>(d.caller));
    Json rec = Json::object();
    rec.set("name", "proxy.async_deadlock").set("payload", Json()).set("injected", d.injected).set("lock", d.lock);
    rec.set("signo", d.signo).set("function", function_name(d.function));
    rec.set("caller", Json(d.caller));
    rec.set("holderOsTid", Json(static_cast<std::int64_t>(d.holder)));
    rec.set("waiterOsTid", Json(static_cast<std::int64_t>(d.waiter)));
    rec.set("waitedMs", Json((now_ns() - d.since_ns) / 1000000));
    rec.set("holderStack", d.holder_stack).set("waiterStack", d.waiter_stack);
    trace().write("mark", rec);
    trace().write("end", Json::object());
    trace().flush();
    ::kill(getpid(), SIGKILL);
    std::abort();
}

// Whether `lock`, the lock a handler's call of `function` waits for, is held by that thread itself: glibc's
// pthread_mutex_t records its owner's thread id, a pthread_rwlock_t its writer's. A mutex's owner is written
// just after its lock word is taken and cleared just before it is released, so a thread the signal stopped
// between the two holds the mutex with no owner recorded: a mutex that stays locked with no owner (three
// reads a millisecond apart) is held by the waiting thread's interrupted code too.
bool held_by_itself(int function, std::uint64_t lock, long tid) {
    switch (function) {
        case preload::kMutexLock:
        case preload::kMutexTimedlock: {
            const auto* m = reinterpret_cast<const volatile pthread_mutex_t*>(lock);
            for (int k = 0; k < 3; ++k) {
                const long owner = m->__data.__owner;
                if (owner == tid) return true;
                if (owner != 0 || m->__data.__lock == 0) return false;
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, nullptr);
            }
            return true;
        }
        case preload::kRwlockRdlock:
        case preload::kRwlockWrlock:
            return reinterpret_cast<const volatile pthread_rwlock_t*>(lock)->__data.__cur_writer == tid;
        default:
            return false;
    }
}

// The thread a handler's call has not returned on for a second (Injection::stuck_*), else 0: a call into the
// real allocator, or a lock call that waits for a lock its own thread holds. Checked before anything here
// allocates: an allocator call waits for an allocator lock its own interrupted code holds, and the watchdog
// could meet the same lock. A lock another thread holds is not judged here (that thread may release it).
long stuck_in_handler(std::int64_t& since) {
    preload::Injection& inj = g_shared->injection;
    const long tid = inj.stuck_tid.load(std::memory_order_acquire);
    since = inj.stuck_since_ns.load(std::memory_order_acquire);
    if (tid <= 0 || !since || now_ns() - since < kDeadlockAfterNs) return 0;
    const std::uint64_t lock = inj.stuck_lock.load(std::memory_order_relaxed);
    if (lock && !held_by_itself(inj.stuck_function.load(std::memory_order_relaxed), lock, tid)) return 0;
    if (inj.stuck_tid.load(std::memory_order_acquire) != tid || inj.wait_since_ns.load() != 0) return 0;
    return tid;
}

// A real deadlock (no injection): the stuck thread's stack (signalled for it, as the hang report does) split
// at the signal trampolines (the restorer of the handler's signal): above the first, the stack request's
// own frames; up to the second, the handler waiting inside the allocator or the lock; below it, the code the
// signal interrupted. Without an answer, the profiler's frame that called alone.
[[noreturn]] void report_stuck(long tid, std::int64_t since) {
    preload::Injection& inj = g_shared->injection;
    const int signo = inj.stuck_signo.load();
    const std::uint64_t caller = inj.stuck_caller.load();
    void* ips[48];
    const int n = stack_ips_of(tid, ips, 48);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    void* restorer = sigaction(signo, nullptr, &sa) == 0 ? reinterpret_cast<void*>(sa.sa_restorer) : nullptr;
    int cut[2] = {-1, -1};
    for (int k = 0, found = 0; k < n && found < 2 && restorer; ++k)
        if (ips[k] == restorer) cut[found++] = k;
    void* fallback[1] = {reinterpret_cast<void*>(caller)};
    void* const* waiter = fallback;
    int waiter_n = caller ? 1 : 0, holder_n = 0;
    void* const* holder = ips;
    if (cut[1] > cut[0] + 1) {
        waiter = ips + cut[0] + 1;
        waiter_n = cut[1] - cut[0] - 1;
        holder = ips + cut[1] + 1;
        holder_n = n - cut[1] - 1;
    }
    report_deadlock({false, inj.stuck_lock.load() != 0, signo, inj.stuck_function.load(), caller, tid, tid, since,
                     stack_json(holder, holder_n), stack_json(waiter, waiter_n)});
}

}  // namespace

void async_poll() {
    if (!g_shared || !recording_enabled()) return;
    preload::Injection& inj = g_shared->injection;
    std::int64_t stuck_since = 0;
    if (const long stuck = stuck_in_handler(stuck_since); stuck && !inj.reported.exchange(1))
        report_stuck(stuck, stuck_since);
    async_drain(false);
    const std::int64_t since = inj.wait_since_ns.load(std::memory_order_acquire);
    if (!since || now_ns() - since < kDeadlockAfterNs || inj.reported.exchange(1)) return;
    report_deadlock({true, false, inj.signo.load(), inj.waiter_function.load(), inj.waiter_caller.load(),
                     inj.holder_tid.load(), inj.waiter_tid.load(), since, stack_json(inj.holder_stack, inj.holder_n),
                     stack_json(inj.waiter_stack, inj.waiter_n.load(std::memory_order_acquire))});
}

Json async_summary_json() {
    Json out = Json::object();
    out.set("loaded", g_shared != nullptr);
    if (!g_shared) return out;
    Json handlers = Json::array();
    for (int k = 0; k < preload::kHandlers; ++k) {
        const preload::Handler& h = g_shared->handlers[k];
        if (!h.fn.load() && !h.runs.load()) continue;
        handlers.push(Json::object().set("signo", k).set("handler", Json(static_cast<std::uint64_t>(h.fn.load())))
                          .set("runs", Json(h.runs.load())));
    }
    out.set("handlers", handlers).set("dropped", Json(g_shared->dropped.load()));
    out.set("injection", g_shared->injection.state.load());
    return out;
}

}  // namespace profharness::proxy
