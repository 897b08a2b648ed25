// Experiments: cross-thread walks (with and without SuspendRuntime), walks from a profiler-created native
// thread, and walks from a signal handler on the target thread. Rows of this area's table; see
// experiments.h. The walk itself is walk.h's Walk (prepare / run / record).
//
// Threads are named: a target thread runs `async_register_thread` at one of its own marks, which stores its
// ThreadID, pthread_t and gettid() under args.name; the walking experiments take args.target = that name.
//
// Bounds: every wait has a timeout; SuspendRuntime is always followed by ResumeRuntime on the same thread;
// a signal-handler walk that does not finish in time is reported (probe_error + a `call` record with
// out.timedOut) and abandoned, never waited for again.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "experiments.h"
#include "named_registry.h"
#include "signal_seed.h"
#include "walk.h"

namespace profharness {

namespace {

// ---------------------------------------------------------------------------------------------------
// The thread registry

using RegisteredThread = NamedThread;

NamedRegistry<RegisteredThread, 16> g_registry;

void async_register_thread(ExperimentContext& ctx) {
    RegisteredThread r;
    if (!name_calling_thread(ctx, "async_register_thread", r)) return;
    ProbeState& s = state();
    if (!g_registry.put(r)) s.probe_error("async_register_thread: registry full", ctx.planned.id);
    Json args = Json::object();
    args.set("name", r.name);
    s.call("GetCurrentThreadID", ctx.planned.id.c_str(), args, thread_ids_json(r), r.threadIdHr);
}

// Looks the target up; a missing one is a probe_error.
bool target_of(ExperimentContext& ctx, RegisteredThread& target) {
    const std::string name = ctx.string_arg("target", "");
    if (g_registry.find(name, target)) return true;
    state().probe_error("no thread registered as \"" + name + "\" (run async_register_thread on it first)",
                        ctx.planned.id);
    return false;
}

Json target_json(const RegisteredThread& t) {
    Json j = Json::object();
    j.set("name", t.name).set("threadId", Json(static_cast<std::uint64_t>(t.threadId)));
    j.set("osTid", Json(static_cast<std::int64_t>(t.osTid)));
    return j;
}

void record_simple_call(const char* name, const char* experiment, const char* phase, HRESULT hr) {
    Json args = Json::object();
    args.set("phase", phase);
    state().call(name, experiment, args, Json::object(), hr);
}

thread_local bool t_native_walker = false;
using Body = void (*)(ExperimentContext&);
bool dispatch_to_native(ExperimentContext& ctx, Body body);

// ---------------------------------------------------------------------------------------------------
// Cross-thread walks: DoStackSnapshot(target ThreadID), optionally between SuspendRuntime/ResumeRuntime.

struct CrossWalkResult {
    HRESULT suspend = S_OK, resume = S_OK;
    bool suspended = false;
};

// Runs `walk` on the calling thread, optionally with the runtime suspended. Records nothing.
CrossWalkResult run_cross_walk(Walk& walk, bool suspendRuntime) {
    ProbeState& s = state();
    CrossWalkResult r;
    if (suspendRuntime) {
        auto* info10 = s.info_as<ICorProfilerInfo10>(10);
        if (!info10) {
            r.suspend = E_NOINTERFACE;
            return r;
        }
        r.suspend = info10->SuspendRuntime();
        r.suspended = !failed(r.suspend);
        if (r.suspended) {
            walk.run(s.info_as<ICorProfilerInfo2>(2));
            r.resume = info10->ResumeRuntime();  // always, right after the walk
        }
        return r;
    }
    walk.run(s.info_as<ICorProfilerInfo2>(2));
    return r;
}

// Writes SuspendRuntime, the walk, ResumeRuntime in that (logical) order.
void record_cross_walk(const char* exp, const std::string& at, Walk& walk, const CrossWalkResult& r,
                       bool suspendRuntime) {
    if (suspendRuntime) record_simple_call("SuspendRuntime", exp, "before-walk", r.suspend);
    if (!suspendRuntime || r.suspended) walk.record(exp, at);
    if (r.suspended) record_simple_call("ResumeRuntime", exp, "after-walk", r.resume);
}

WalkRequest cross_request(ExperimentContext& ctx, const RegisteredThread& target, const char* role, bool suspend) {
    WalkRequest req;
    req.thread = target.threadId;
    req.infoFlags = static_cast<ULONG32>(ctx.int_arg("infoFlags", 0));
    req.resolve = ctx.bool_arg("resolve", true);
    Json extra = Json::object();
    extra.set("target", target_json(target));
    extra.set("suspendRuntime", Json(suspend));
    extra.set("walkerManaged", Json(!t_native_walker));
    extra.set("role", role);
    extra.set("walkerOsTid", Json(static_cast<std::int64_t>(os_tid())));
    req.extraArgs = extra;
    return req;
}

// True when the calling thread is to walk the plan's target now; false when `body` (the experiment
// `experiment`) ran on a native walker thread instead (args.walker "native"), or, after a probe_error, when the
// target is not registered or ICorProfilerInfo2 is missing.
bool walk_here(ExperimentContext& ctx, Body body, const char* experiment, RegisteredThread& target) {
    if (dispatch_to_native(ctx, body) || !target_of(ctx, target)) return false;
    if (!state().info_as<ICorProfilerInfo2>(2)) {
        state().probe_error(std::string(experiment) + " needs ICorProfilerInfo2", ctx.planned.id);
        return false;
    }
    return true;
}

void async_cross_walk(ExperimentContext& ctx) {
    RegisteredThread target;
    if (!walk_here(ctx, &async_cross_walk, "async_cross_walk", target)) return;
    const bool suspend = ctx.bool_arg("suspendRuntime", false);
    Walk walk(cross_request(ctx, target, suspend ? "suspended" : "running", suspend));
    CrossWalkResult r = run_cross_walk(walk, suspend);
    record_cross_walk(ctx.planned.id.c_str(), ctx.point, walk, r, suspend);
}

// ---------------------------------------------------------------------------------------------------
// Profiler-created native threads (never ran managed code). An experiment with args.walker "native" runs its
// body on a new std::thread, which writes its own records (first a ProfilerThreadCreated `call` record:
// its gettid and what GetCurrentThreadID answers there); the experiment waits for it, bounded by
// args.walkerTimeoutMs (default 10000). Walks from a managed thread outside a callback cannot resolve
// FunctionIDs (the runtime answers CORPROF_E_UNSUPPORTED_CALL_SEQUENCE to synchronous-only calls there),
// a native thread can.

struct NativeRun {
    const PlannedExperiment* planned = nullptr;
    std::string point;
    Body body = nullptr;
    std::atomic<bool> done{false};
};

void native_thread_main(std::shared_ptr<NativeRun> job) {
    t_native_walker = true;
    record_profiler_thread_created(job->planned->id.c_str());
    ExperimentContext c{*job->planned, job->point};
    job->body(c);
    job->done.store(true, std::memory_order_release);
}

// True when the body already ran (on a native thread, or failed to start one); false: run it here.
bool dispatch_to_native(ExperimentContext& ctx, Body body) {
    if (t_native_walker || ctx.string_arg("walker", "self") != "native") return false;
    ProbeState& s = state();
    auto job = std::make_shared<NativeRun>();
    job->planned = &ctx.planned;
    job->point = ctx.point;
    job->body = body;
    const std::int64_t timeout_ms = ctx.int_arg("walkerTimeoutMs", 10000);
    std::thread worker;
    try {
        worker = std::thread(native_thread_main, job);
    } catch (const std::exception& e) {
        s.probe_error(std::string("cannot start a native walker thread: ") + e.what(), ctx.planned.id);
        return true;
    }
    if (!join_within(worker, job->done, timeout_ms))
        s.probe_error("the native walker thread did not finish within " + std::to_string(timeout_ms) + " ms",
                      ctx.planned.id);
    return true;
}

// Warm-up walk without suspending (DSS-25), then a walk under SuspendRuntime; meant for walker "native".
void async_warmup_then_suspend(ExperimentContext& ctx) {
    RegisteredThread target;
    if (!walk_here(ctx, &async_warmup_then_suspend, "async_warmup_then_suspend", target)) return;
    for (int phase = 0; phase < 2; ++phase) {
        const bool suspend = phase == 1;
        Walk walk(cross_request(ctx, target, suspend ? "suspended" : "warmup", suspend));
        CrossWalkResult r = run_cross_walk(walk, suspend);
        record_cross_walk(ctx.planned.id.c_str(), ctx.point, walk, r, suspend);
    }
}

// ---------------------------------------------------------------------------------------------------
// Signal-handler walks: the walking thread sends SIGUSR2 to the target's pthread; the handler (on the
// target) calls DoStackSnapshot(NULL thread) with or without a seed built from its ucontext_t. The handler
// neither allocates, locks nor writes the trace: the Walk was prepared by the walking thread, which records
// it once the handler says it is done.

constexpr int kWalkSignal = SIGUSR2;

struct SignalRequest {
    std::atomic<int> state{kIdle};
    std::atomic<Walk*> walk{nullptr};
    long targetOsTid = 0;
    bool seeded = false;
    // filled by the handler
    long handlerOsTid = 0;
    std::uint64_t rip = 0, rsp = 0, rbp = 0;
    HRESULT hr = S_OK;
};

SignalRequest g_signal;
alignas(64) BYTE g_seed[kContextBufferSize];

void walk_signal_handler(int sig, siginfo_t* info, void* ucv);
OnceHandler g_walk_handler(kWalkSignal, &walk_signal_handler);

void walk_signal_handler(int sig, siginfo_t* info, void* ucv) {
    if (!g_walk_handler.claim(g_signal.state, g_signal.targetOsTid, sig, info, ucv)) return;
    const int saved_errno = errno;
    const auto* uc = static_cast<const ucontext_t*>(ucv);
    g_signal.handlerOsTid = static_cast<long>(::syscall(SYS_gettid));
    g_signal.rip = static_cast<std::uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
    g_signal.rsp = static_cast<std::uint64_t>(uc->uc_mcontext.gregs[REG_RSP]);
    g_signal.rbp = static_cast<std::uint64_t>(uc->uc_mcontext.gregs[REG_RBP]);
    if (g_signal.seeded) naive_seed(uc, g_seed);
    Walk* w = g_signal.walk.load(std::memory_order_acquire);
    g_signal.hr = w ? w->run(state().info_as<ICorProfilerInfo2>(2)) : E_POINTER;
    g_signal.state.store(kDone, std::memory_order_release);
    errno = saved_errno;
}

void async_signal_walk(ExperimentContext& ctx) {
    RegisteredThread target;
    if (!walk_here(ctx, &async_signal_walk, "async_signal_walk", target)) return;
    ProbeState& s = state();
    const char* exp = ctx.planned.id.c_str();
    if (const int err = g_walk_handler.install()) {
        s.probe_error("async_signal_walk: sigaction(SIGUSR2) failed: " + std::string(std::strerror(err)),
                      ctx.planned.id);
        return;
    }
    if (g_signal.state.load(std::memory_order_acquire) != kIdle) {
        s.probe_error("async_signal_walk: an earlier signal walk never finished; not sending another",
                      ctx.planned.id);
        return;
    }
    const bool seeded = ctx.bool_arg("seed", false);
    const std::int64_t timeout_ms = ctx.int_arg("timeoutMs", 3000);

    WalkRequest req;
    req.thread = 0;
    req.infoFlags = static_cast<ULONG32>(ctx.int_arg("infoFlags", 0));
    req.resolve = ctx.bool_arg("resolve", true);
    Json extra = Json::object();
    extra.set("target", target_json(target)).set("signal", "SIGUSR2").set("seeded", Json(seeded));
    extra.set("role", seeded ? "signal-seeded" : "signal-unseeded");
    req.extraArgs = extra;
    std::memset(g_seed, 0, sizeof g_seed);
    if (seeded) {
        req.seed = g_seed;
        req.contextSize = static_cast<ULONG32>(kContextBufferSize);
    }
    // With requireManagedTop (default true) a walk whose signal interrupted code outside JIT-compiled code
    // (GetFunctionFromIP fails or answers 0: a runtime helper, a stub) is discarded and the signal sent again,
    // up to maxAttempts times; out.attempts and out.skippedIps of the pthread_kill record say so.
    const bool require_managed = ctx.bool_arg("requireManagedTop", true);
    const std::int64_t max_attempts = ctx.int_arg("maxAttempts", 20);
    Json skipped = Json::array();
    std::int64_t attempts = 0;
    Walk* walk = nullptr;
    bool finished = false;
    int kill_rc = 0, st = kIdle;
    std::int64_t waited = 0;
    FunctionID top = 0;
    HRESULT fh = E_FAIL;
    while (attempts < max_attempts) {
        ++attempts;
        std::memset(g_seed, 0, sizeof g_seed);
        walk = new Walk(req);  // freed after recording; leaked if the handler never finishes
        g_signal.walk.store(walk, std::memory_order_release);
        g_signal.targetOsTid = target.osTid;
        g_signal.seeded = seeded;
        g_signal.handlerOsTid = 0;
        g_signal.rip = g_signal.rsp = g_signal.rbp = 0;
        g_signal.hr = S_OK;
        g_signal.state.store(kRequested, std::memory_order_release);

        kill_rc = pthread_kill(target.pthread, kWalkSignal);
        waited = 0;
        if (kill_rc == 0) {
            while (g_signal.state.load(std::memory_order_acquire) != kDone && waited < timeout_ms) {
                sleep_us(1000);
                ++waited;
            }
        }
        st = g_signal.state.load(std::memory_order_acquire);
        finished = st == kDone;
        if (!finished) {
            int requested = kRequested;
            if (g_signal.state.compare_exchange_strong(requested, kAbandoned)) {
                // the handler never started: the walk can go, and later walks may be tried again
                delete walk;
                walk = nullptr;
                g_signal.walk.store(nullptr);
                g_signal.state.store(kIdle);
            }  // else: the handler is inside DoStackSnapshot; leave the walk and the busy state alone
            break;
        }
        // The seed procedure's first step (DSS-19), made from the walking thread: is the interrupted ip managed?
        top = 0;
        fh = s.info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(g_signal.rip), &top);
        const bool managed_top = !failed(fh) && top != 0;
        if (managed_top || !require_managed || attempts >= max_attempts) break;
        skipped.push(Json(g_signal.rip));
        delete walk;
        walk = nullptr;
        g_signal.walk.store(nullptr);
        g_signal.state.store(kIdle, std::memory_order_release);
        sleep_us(1000);
    }

    Json kargs = Json::object();
    kargs.set("target", target_json(target)).set("signal", "SIGUSR2").set("seeded", Json(seeded));
    kargs.set("requireManagedTop", Json(require_managed));
    Json kout = Json::object();
    kout.set("rc", Json(kill_rc)).set("finished", Json(finished)).set("timedOut", Json(!finished));
    kout.set("waitedMs", Json(waited)).set("handlerOsTid", Json(static_cast<std::int64_t>(g_signal.handlerOsTid)));
    kout.set("attempts", Json(attempts)).set("skippedIps", skipped);
    if (finished) {
        Json uc = Json::object();
        uc.set("rip", Json(g_signal.rip)).set("rsp", Json(g_signal.rsp)).set("rbp", Json(g_signal.rbp));
        kout.set("interrupted", uc);
    }
    s.call("pthread_kill", exp, kargs, kout, kill_rc == 0 ? S_OK : E_FAIL);
    if (!finished) {
        s.probe_error("async_signal_walk: the handler walk did not finish within " + std::to_string(timeout_ms) +
                          " ms (state " + std::to_string(st) + ")",
                      ctx.planned.id);
        return;
    }
    {
        Json a = Json::object();
        a.set("ip", Json(g_signal.rip)).set("role", "interrupted-ip");
        Json o = Json::object();
        o.set("functionId", Json(static_cast<std::uint64_t>(top)));
        if (!failed(fh) && top) {
            Resolved r = resolve_function(exp, top);
            o.set("type", r.type).set("method", r.method).set("token", r.token);
        }
        s.call("GetFunctionFromIP", exp, a, o, fh);
    }
    walk->record(exp, ctx.point);
    delete walk;
    g_signal.walk.store(nullptr);
    g_signal.state.store(kIdle, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------------
// The table

const ExperimentEntry kRows[] = {
    {"async_register_thread", &async_register_thread,
     "Registers the calling thread (GetCurrentThreadID, pthread_self, gettid) under args.name (string). "
     "Records a GetCurrentThreadID call with out {threadId, osTid, pthread}."},
    {"async_cross_walk", &async_cross_walk,
     "DoStackSnapshot of the registered thread args.target from the calling thread. args: target str, "
     "suspendRuntime bool (default false: between ICorProfilerInfo10::SuspendRuntime and ResumeRuntime), "
     "walker str (\"self\" default, or \"native\": run on a new native thread; walkerTimeoutMs int 10000), "
     "infoFlags int (0), resolve bool (true)."},
    {"async_warmup_then_suspend", &async_warmup_then_suspend,
     "Walks args.target twice: a warm-up walk without suspending (DSS-25), then one under SuspendRuntime. "
     "args: target str, walker str (\"self\" or \"native\": a new thread that never ran managed code), "
     "infoFlags int (0), resolve bool (true), walkerTimeoutMs int (10000)."},
    {"async_signal_walk", &async_signal_walk,
     "Sends SIGUSR2 to args.target's pthread; its handler calls DoStackSnapshot(NULL thread) unseeded or seeded "
     "with a CONTEXT built from the ucontext_t (all GPRs, rip, rsp, rbp; contextSize = 8192). args: target str, "
     "seed bool (false), infoFlags int (0), resolve bool (true), timeoutMs int (3000, the wait for the handler), "
     "walker str (\"self\" or \"native\", as async_cross_walk), requireManagedTop bool (true: resend until the "
     "signal interrupts JIT-compiled code), maxAttempts int (20)."},
};

}  // namespace

const ExperimentTable kAsyncExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness
