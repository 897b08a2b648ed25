// Experiments: planted hangs (issue 13, "Hangs"; tests/robustness/test_hangs.py). Each one makes the probe
// itself deadlock for real on a live runtime, so the harness's watchdog (conformance/core/runner.py) and its
// hang report (conformance/core/hangs.py) can be checked against a hang whose cause is known:
//
//   1. the DoStackSnapshot page's deadlock: a sampler thread suspends the runtime, walks a managed thread and,
//      inside the StackSnapshotCallback, waits for a lock that the walked thread took (in its enter hook)
//      before it was suspended, and cannot release while the runtime stays suspended;
//   2. a hook that blocks: FunctionLeave2 waits for a gate that nobody opens;
//   3. a profiler thread that never returns from SuspendRuntime: a managed thread, inside FunctionEnter2
//      (cooperative mode: the runtime cannot suspend it there), waits for the sampler's walk of itself, and
//      the sampler's ICorProfilerInfo10::SuspendRuntime waits for that thread to reach a safe point.
//
// Each has a control that differs by one argument (the scenario then ends normally), which shows that the
// hang comes from what was planted. Nothing here is meant for a conformance run: these are faults.
//
// Records. What a thread is inside while it may block is written in two phases, as the recording proxy does
// (phase "enter" before, "return" after), so a hang report can name what is still open on each thread:
// `callback` FunctionEnter2 / FunctionLeave2 (hook: true) and StackSnapshotCallback, `call` SuspendRuntime and
// DoStackSnapshot. Everything else is an ordinary one-phase record.
#include <spawn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "experiments.h"
#include "profharness/hresults.h"
#include "profharness/metadata.h"

extern char** environ;

namespace profharness {

namespace {

// What a hook does on entry or on leave, per hooked method (args.hooks of fault_hooks).
enum class Action {
    None,
    Lock,         // take the fault lock (kept after the hook returns)
    Unlock,       // release it
    LockSample,   // take the fault lock, then ask the sampler for a walk of this thread (no wait)
    Sample,       // ask the sampler for a walk of this thread (no wait)
    SampleWait,   // ask the sampler for a walk of this thread and wait until it is done
    WaitGate,     // wait until the gate is opened (fault_open_gate)
};

struct ActionName {
    const char* name;
    Action action;
};
const ActionName kActions[] = {
    {"none", Action::None},          {"lock", Action::Lock},     {"unlock", Action::Unlock},
    {"lock_sample", Action::LockSample}, {"sample", Action::Sample}, {"sample_wait", Action::SampleWait},
    {"wait_gate", Action::WaitGate},
};

const char* action_name(Action a) {
    for (const ActionName& n : kActions)
        if (n.action == a) return n.name;
    return "?";
}

bool parse_action(const Json* j, Action& out) {
    if (!j || j->is_null()) {
        out = Action::None;
        return true;
    }
    if (!j->is_string()) return false;
    for (const ActionName& n : kActions)
        if (j->as_string() == n.name) {
            out = n.action;
            return true;
        }
    return false;
}

constexpr std::size_t kMaxHooked = 8;

struct HookedMethod {
    std::string name;
    Action enter = Action::None, leave = Action::None;
};

// Process-wide state of the planted faults (created once, never destroyed: threads wait on it at exit).
struct Faults {
    HookedModule module;
    HookedMethod hooked[kMaxHooked];
    std::size_t hooked_count = 0;

    std::mutex lock;  // "the profiler's own lock" of fault 1

    std::mutex mu;  // guards everything below; cv signals every change
    std::condition_variable cv;
    bool gate_open = false;
    bool sampler_started = false;
    bool sampler_warm = false;
    bool lock_in_callback = false;
    std::string sampler_id;
    ThreadID target = 0;
    std::int64_t requested = 0, taken = 0, completed = 0;
};

Faults& faults() {
    static Faults* f = new Faults();
    return *f;
}

void callback_phase(const char* name, const char* phase, Json args, bool hook) {
    Json f = Json::object();
    f.set("name", name).set("phase", phase).set("args", std::move(args)).set("hr", Json(0u));
    if (hook) f.set("hook", Json(true));
    state().trace.write("callback", f);
}

void call_phase(const char* name, const std::string& experiment, const char* phase, Json args, Json out,
                HRESULT hr) {
    Json f = Json::object();
    f.set("name", name).set("phase", phase).set("experiment", experiment);
    f.set("args", std::move(args)).set("out", std::move(out)).set("hr", Json(static_cast<std::uint32_t>(hr)));
    state().trace.write("call", f);
}

// ---------------------------------------------------------------------------------------------------
// The sampler: a profiler-created native thread that walks the thread a hook names, with the runtime
// suspended (the only safe cross-thread walk on Linux).

struct SnapshotData {
    bool take_lock = false;
    bool record = false;
    ThreadID target = 0;
    std::int64_t frames = 0;
};

HRESULT snapshot_callback(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* clientData) {
    auto* d = static_cast<SnapshotData*>(clientData);
    if (d->frames++ == 0 && d->record) {
        Json a = Json::object();
        a.set("funcId", Json(static_cast<std::uint64_t>(funcId))).set("ip", Json(static_cast<std::uint64_t>(ip)));
        a.set("thread", Json(static_cast<std::uint64_t>(d->target))).set("takesLock", Json(d->take_lock));
        callback_phase("StackSnapshotCallback", "enter", a, false);
        if (d->take_lock) {
            // Fault 1: the walked thread holds this lock and is suspended by the runtime until we return.
            std::lock_guard<std::mutex> held(faults().lock);
        }
        callback_phase("StackSnapshotCallback", "return", Json::object(), false);
    }
    return S_OK;
}

void sample(const std::string& id, ThreadID target, bool take_lock) {
    ProbeState& s = state();
    auto* info10 = s.info_as<ICorProfilerInfo10>(10);
    if (!info10) {
        s.probe_error("fault_sampler: SuspendRuntime needs ICorProfilerInfo10", id);
        return;
    }
    Json a = Json::object();
    a.set("target", Json(static_cast<std::uint64_t>(target)));
    call_phase("SuspendRuntime", id, "enter", a, Json::object(), S_OK);
    HRESULT hr = info10->SuspendRuntime();
    call_phase("SuspendRuntime", id, "return", a, Json::object(), hr);
    if (failed(hr)) return;
    SnapshotData d;
    d.take_lock = take_lock;
    d.record = true;
    d.target = target;
    Json da = Json::object();
    da.set("thread", Json(static_cast<std::uint64_t>(target))).set("infoFlags", Json(0u));
    call_phase("DoStackSnapshot", id, "enter", da, Json::object(), S_OK);
    hr = info10->DoStackSnapshot(target, &snapshot_callback, 0, &d, nullptr, 0);
    Json out = Json::object();
    out.set("frameCount", Json(d.frames));
    call_phase("DoStackSnapshot", id, "return", da, out, hr);
    hr = info10->ResumeRuntime();
    s.call("ResumeRuntime", id.c_str(), Json::object(), Json::object(), hr);
}

void sampler_main(ThreadID warm_target) {
    Faults& f = faults();
    ProbeState& s = state();
    const std::string id = f.sampler_id;
    {
        // First entry into DoStackSnapshot from this thread, on a thread that is not suspended (DSS-25),
        // so the runtime's per-thread set-up never happens while the runtime is suspended.
        record_profiler_thread_created(id.c_str());
        SnapshotData d;
        d.target = warm_target;
        HRESULT hr = s.info_as<ICorProfilerInfo2>(2)->DoStackSnapshot(warm_target, &snapshot_callback, 0, &d, nullptr, 0);
        Json wa = Json::object();
        wa.set("thread", Json(static_cast<std::uint64_t>(warm_target))).set("role", "warmup");
        Json wo = Json::object();
        wo.set("frameCount", Json(d.frames));
        s.call("DoStackSnapshot", id.c_str(), wa, wo, hr);
    }
    {
        std::lock_guard<std::mutex> lk(f.mu);
        f.sampler_warm = true;
    }
    f.cv.notify_all();
    for (;;) {
        ThreadID target = 0;
        bool take_lock = false;
        {
            std::unique_lock<std::mutex> lk(f.mu);
            f.cv.wait(lk, [&] { return f.requested > f.taken; });
            target = f.target;
            take_lock = f.lock_in_callback;
            ++f.taken;
        }
        sample(id, target, take_lock);
        {
            std::lock_guard<std::mutex> lk(f.mu);
            ++f.completed;
        }
        f.cv.notify_all();
    }
}

// Asks the sampler for a walk of the calling thread; returns the request's number (0: no sampler).
std::int64_t request_sample() {
    Faults& f = faults();
    ThreadID me = 0;
    if (!state().info || failed(state().info->GetCurrentThreadID(&me))) return 0;
    std::int64_t n = 0;
    {
        std::lock_guard<std::mutex> lk(f.mu);
        if (!f.sampler_started) return 0;
        f.target = me;
        n = ++f.requested;
    }
    f.cv.notify_all();
    return n;
}

// ---------------------------------------------------------------------------------------------------
// The hooks

void run_action(Action a, const char* hook, FunctionID funcId, const HookedMethod& m) {
    if (a == Action::None) return;
    Faults& f = faults();
    Json args = Json::object();
    args.set("funcId", Json(static_cast<std::uint64_t>(funcId))).set("method", m.name);
    args.set("action", action_name(a));
    callback_phase(hook, "enter", args, true);
    switch (a) {
        case Action::Lock:
            f.lock.lock();
            break;
        case Action::Unlock:
            f.lock.unlock();
            break;
        case Action::LockSample:
            f.lock.lock();
            if (request_sample() == 0) state().probe_error("lock_sample: no sampler (plan fault_sampler)", hook);
            break;
        case Action::Sample:
            if (request_sample() == 0) state().probe_error("sample: no sampler (plan fault_sampler)", hook);
            break;
        case Action::SampleWait: {
            std::int64_t n = request_sample();
            if (n == 0) {
                state().probe_error("sample_wait: no sampler (plan fault_sampler)", hook);
                break;
            }
            // Fault 3: wait (unbounded) for the sampler's walk of this thread, which needs this thread at a safe
            // point first: SuspendRuntime never returns.
            std::unique_lock<std::mutex> lk(f.mu);
            f.cv.wait(lk, [&] { return f.completed >= n; });
            break;
        }
        case Action::WaitGate: {
            // Fault 2: wait (unbounded) for a gate only fault_open_gate opens.
            std::unique_lock<std::mutex> lk(f.mu);
            f.cv.wait(lk, [&] { return f.gate_open; });
            break;
        }
        case Action::None:
            break;
    }
    Json done = Json::object();
    done.set("method", m.name);
    callback_phase(hook, "return", done, true);
}

const HookedMethod* method_of(UINT_PTR clientData) {
    Faults& f = faults();
    return clientData >= 1 && clientData <= f.hooked_count ? &f.hooked[clientData - 1] : nullptr;
}

void fault_enter2(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*) {
    if (const HookedMethod* m = method_of(clientData)) run_action(m->enter, "FunctionEnter2", funcId, *m);
}

void fault_leave2(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*) {
    if (const HookedMethod* m = method_of(clientData)) run_action(m->leave, "FunctionLeave2", funcId, *m);
}

void fault_tailcall2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO) {}

// Hooks the methods of the scenario module named in args.hooks; clientData = 1 + their index.
UINT_PTR fault_mapper(FunctionID funcId, void*, BOOL* pbHookFunction) {
    Faults& f = faults();
    ProbeState& s = state();
    if (pbHookFunction) *pbHookFunction = 0;
    FunctionInfo fi;
    if (failed(function_info(s.info, funcId, fi)) || !f.module.holds(fi.moduleId)) return funcId;
    ComHolder<IMetaDataImport> md;
    mdToken mb = 0;
    if (failed(function_metadata(s.info, funcId, md, mb))) return funcId;
    MethodProps props = method_props(md.get(), mb);
    if (failed(props.hr)) return funcId;
    for (std::size_t i = 0; i < f.hooked_count; ++i) {
        if (f.hooked[i].name != props.name) continue;
        if (pbHookFunction) *pbHookFunction = 1;
        Json a = Json::object();
        a.set("funcId", Json(static_cast<std::uint64_t>(funcId))).set("method", props.name);
        a.set("token", Json(static_cast<std::uint64_t>(fi.token))).set("pbHookFunction", Json(true));
        Json r = Json::object();
        r.set("name", "FunctionIDMapper2").set("args", a).set("hr", Json(0u));
        s.trace.write("callback", r);
        return static_cast<UINT_PTR>(i + 1);
    }
    return funcId;
}

// ---------------------------------------------------------------------------------------------------
// The experiments

// fault_hooks's hooks (install_hooks_once): the mapper hooks the methods args.hooks names.
HRESULT install_fault_hooks(ExperimentContext& ctx, ICorProfilerInfo3* info3) {
    ProbeState& s = state();
    Faults& f = faults();
    const char* id = ctx.planned.id.c_str();
    const Json* hooks = ctx.args().get("hooks");
    if (!hooks || !hooks->is_object()) {
        s.probe_error("fault_hooks: args.hooks must be an object {method: {enter: ACTION, leave: ACTION}}", id);
        return E_FAIL;  // nothing set: not installed
    }
    for (const auto& [name, spec] : hooks->members()) {
        HookedMethod m;
        m.name = name;
        if (!spec.is_object() || !parse_action(spec.get("enter"), m.enter) || !parse_action(spec.get("leave"), m.leave)) {
            s.probe_error("fault_hooks: args.hooks." + name +
                              " must be {enter, leave} with actions none, lock, unlock, lock_sample, sample, "
                              "sample_wait, wait_gate",
                          id);
            continue;
        }
        if (f.hooked_count == kMaxHooked) {
            s.probe_error("fault_hooks: more than 8 hooked methods", id);
            break;
        }
        f.hooked[f.hooked_count++] = m;
    }
    HRESULT hr = info3->SetFunctionIDMapper2(&fault_mapper, nullptr);
    s.call("SetFunctionIDMapper2", id, Json::object(), Json::object(), hr);
    hr = info3->SetEnterLeaveFunctionHooks2(&fault_enter2, &fault_leave2, &fault_tailcall2);
    Json out = Json::object();
    out.set("hooked", Json(static_cast<std::uint64_t>(f.hooked_count)));
    s.call("SetEnterLeaveFunctionHooks2", id, Json::object(), out, hr);
    return hr;
}

void fault_hooks(ExperimentContext& ctx) {
    install_hooks_once(ctx, "fault_hooks", 3, faults().module, &install_fault_hooks);
}

void fault_sampler(ExperimentContext& ctx) {
    ProbeState& s = state();
    Faults& f = faults();
    const char* id = ctx.planned.id.c_str();
    ThreadID me = 0;
    HRESULT hr = s.info ? s.info->GetCurrentThreadID(&me) : E_NOINTERFACE;
    if (failed(hr) || !s.info_as<ICorProfilerInfo10>(10)) {
        s.probe_error("fault_sampler: plan it at a mark of a managed thread, on a runtime with ICorProfilerInfo10", id);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(f.mu);
        if (f.sampler_started) return;
        f.sampler_started = true;
        f.sampler_id = ctx.planned.id;
        f.lock_in_callback = ctx.bool_arg("lockInCallback", false);
    }
    try {
        std::thread(sampler_main, me).detach();
    } catch (const std::exception& e) {
        s.probe_error(std::string("fault_sampler: cannot start the sampler thread: ") + e.what(), id);
        std::lock_guard<std::mutex> lk(f.mu);
        f.sampler_started = false;
        return;
    }
    // This thread waits (bounded) in native code while the sampler's first walk, of this thread, runs.
    const auto limit = std::chrono::milliseconds(ctx.int_arg("warmupTimeoutMs", 10000));
    std::unique_lock<std::mutex> lk(f.mu);
    if (!f.cv.wait_for(lk, limit, [&] { return f.sampler_warm; }))
        s.probe_error("fault_sampler: the sampler's warm-up walk did not finish in time", id);
}

void fault_wait_sampled(ExperimentContext& ctx) {
    Faults& f = faults();
    const std::int64_t timeout_ms = ctx.int_arg("timeoutMs", 10000);
    const auto started = std::chrono::steady_clock::now();
    bool done = false;
    std::int64_t completed = 0, requested = 0;
    {
        std::unique_lock<std::mutex> lk(f.mu);
        done = f.cv.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                             [&] { return f.requested > 0 && f.completed >= f.requested; });
        completed = f.completed;
        requested = f.requested;
    }
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    Json out = Json::object();
    out.set("requested", Json(requested)).set("completed", Json(completed));
    out.set("waitedMs", Json(static_cast<std::int64_t>(waited))).set("timedOut", Json(!done));
    state().call("fault_wait_sampled", ctx.planned.id.c_str(), Json::object(), out, done ? S_OK : E_FAIL);
}

void fault_open_gate(ExperimentContext& ctx) {
    const std::int64_t after_ms = ctx.int_arg("afterMs", 100);
    std::string id = ctx.planned.id;
    // A native thread opens it, so the opener needs nothing from the runtime while a hook holds a thread.
    std::thread([after_ms, id] {
        std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
        Faults& f = faults();
        {
            std::lock_guard<std::mutex> lk(f.mu);
            f.gate_open = true;
        }
        f.cv.notify_all();
        Json a = Json::object();
        a.set("afterMs", Json(after_ms));
        state().call("fault_open_gate", id.c_str(), a, Json::object(), S_OK);
    }).detach();
}

void fault_spawn_child(ExperimentContext& ctx) {
    const std::string seconds = std::to_string(ctx.int_arg("seconds", 600));
    const std::string program = ctx.string_arg("program", "sleep");
    char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(seconds.c_str()), nullptr};
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, program.c_str(), nullptr, nullptr, argv, environ);
    Json a = Json::object();
    a.set("program", program).set("seconds", seconds);
    Json out = Json::object();
    out.set("pid", Json(static_cast<std::int64_t>(rc == 0 ? pid : 0))).set("rc", Json(rc));
    if (rc != 0) out.set("error", std::strerror(rc));
    state().call("posix_spawnp", ctx.planned.id.c_str(), a, out, rc == 0 ? S_OK : E_FAIL);
}

const ExperimentEntry kRows[] = {
    {"fault_hooks", &fault_hooks,
     "at Initialize: FunctionIDMapper2 + FunctionEnter2/Leave2 hooks on the methods of the scenario module "
     "(args.module, default \"app.dll\") named in args.hooks {method: {enter: ACTION, leave: ACTION}}; ACTION "
     "none, lock / unlock (the fault lock), lock_sample (lock, then ask the sampler for a walk of this thread), "
     "sample, sample_wait (ask and wait, unbounded, for the walk), wait_gate (wait, unbounded, for "
     "fault_open_gate). Planted hangs: records its hooks' entries and exits in two phases."},
    {"fault_sampler", &fault_sampler,
     "at a mark: starts the sampler (a native thread; first a warm-up DoStackSnapshot of the marking thread, "
     "which waits for it, bounded by args.warmupTimeoutMs 10000), which then serves the hooks' requests: "
     "SuspendRuntime, DoStackSnapshot of the requesting thread, ResumeRuntime. args.lockInCallback (false): "
     "the StackSnapshotCallback takes the fault lock (planted hang 1)."},
    {"fault_wait_sampled", &fault_wait_sampled,
     "at a mark: waits until every requested walk is done, bounded by args.timeoutMs (10000); a call record "
     "fault_wait_sampled with out {requested, completed, waitedMs, timedOut}."},
    {"fault_open_gate", &fault_open_gate,
     "at a mark: a native thread opens the gate wait_gate hooks wait for after args.afterMs (100)."},
    {"fault_spawn_child", &fault_spawn_child,
     "at a mark: posix_spawnp args.program (\"sleep\") args.seconds (600): a child in the run's process group; "
     "call record posix_spawnp with out.pid."},
};

}  // namespace

const ExperimentTable kFaultExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness
