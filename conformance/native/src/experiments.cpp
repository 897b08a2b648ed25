// The experiment table and its experiments. Each row: name, function, documented args.
// New experiments (cross-thread walks under SuspendRuntime, seeded walks, buffer probes, MovedReferences2
// tag checks, enter/leave hooks) are new rows here; run_experiments_at (dispatch.cpp) does not change.
#include "experiments.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "events.h"
#include "profharness/hresults.h"
#include "profharness/metadata.h"
#include "walk.h"

namespace profharness {

// ---------------------------------------------------------------------------------------------------
// Context helpers

namespace {

// args[name] when the plan gives it (not null) with the kind `is` accepts; else nullptr, after a probe_error
// saying what it `must_be` when it has another kind.
const Json* typed_arg(const PlannedExperiment& planned, const char* name, bool (Json::*is)() const,
                      const char* must_be) {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return nullptr;
    if (!(v->*is)()) {
        state().probe_error(std::string("argument ") + name + " must be " + must_be, planned.id);
        return nullptr;
    }
    return v;
}

}  // namespace

std::int64_t ExperimentContext::int_arg(const char* name, std::int64_t dflt) const {
    const Json* v = typed_arg(planned, name, &Json::is_integer, "an integer");
    return v ? v->as_int() : dflt;
}

bool ExperimentContext::bool_arg(const char* name, bool dflt) const {
    const Json* v = typed_arg(planned, name, &Json::is_bool, "true or false");
    return v ? v->as_bool() : dflt;
}

std::string ExperimentContext::string_arg(const char* name, const std::string& dflt) const {
    const Json* v = typed_arg(planned, name, &Json::is_string, "a string");
    return v ? v->as_string() : dflt;
}

bool planned_at_initialize(const ExperimentContext& ctx, const char* experiment) {
    if (ctx.point == "Initialize") return true;
    state().probe_error(std::string(experiment) + " must be planned at Initialize (hooks are accepted only there)",
                        ctx.planned.id);
    return false;
}

bool HookedModule::holds(ModuleID mod) const {
    ProbeState& s = state();
    WCHAR name[1024];
    ULONG n = 0;
    LPCBYTE base = nullptr;
    AssemblyID asm_id = 0;
    if (!s.info || failed(s.info->GetModuleInfo(mod, &base, 1024, &n, name, &asm_id)) || n == 0) return false;
    const std::string path = wide_name(name, n, 1024);
    return !path.empty() && path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---------------------------------------------------------------------------------------------------
// Threads

long os_tid() { return static_cast<long>(::syscall(SYS_gettid)); }

void sleep_us(long us) {
    timespec ts{us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

bool name_calling_thread(const ExperimentContext& ctx, const char* experiment, NamedThread& t) {
    ProbeState& s = state();
    const std::string name = ctx.string_arg("name", "");
    if (name.empty()) {
        s.probe_error(std::string(experiment) + ": args.name (a non-empty string) is required", ctx.planned.id);
        return false;
    }
    ThreadID tid = 0;
    t.threadIdHr = s.info ? s.info->GetCurrentThreadID(&tid) : E_NOINTERFACE;
    t.name = name;
    t.threadId = failed(t.threadIdHr) ? 0 : tid;
    t.pthread = pthread_self();
    t.osTid = os_tid();
    return true;
}

Json thread_ids_json(const NamedThread& t) {
    Json out = Json::object();
    out.set("threadId", Json(static_cast<std::uint64_t>(t.threadId)));
    out.set("osTid", Json(static_cast<std::int64_t>(t.osTid)));
    out.set("pthread", Json(static_cast<std::uint64_t>(t.pthread)));
    return out;
}

void record_profiler_thread_created(const char* experiment) {
    ProbeState& s = state();
    Json args = Json::object();
    args.set("osTid", Json(static_cast<std::int64_t>(os_tid())));
    ThreadID self = 0;
    HRESULT hr = s.info->GetCurrentThreadID(&self);
    Json out = Json::object();
    out.set("threadId", Json(static_cast<std::uint64_t>(self)));
    s.call("ProfilerThreadCreated", experiment, args, out, hr);
}

bool join_within(std::thread& worker, const std::atomic<bool>& done, std::int64_t timeout_ms) {
    std::int64_t waited = 0;
    while (!done.load(std::memory_order_acquire) && waited < timeout_ms) {
        sleep_us(2000);
        waited += 2;
    }
    if (done.load(std::memory_order_acquire)) {
        worker.join();
        return true;
    }
    worker.detach();
    return false;
}

namespace {

// ---------------------------------------------------------------------------------------------------
// stack_snapshot: one walk of the current thread through the shared machinery (walk.h).

void stack_snapshot(ExperimentContext& ctx) {
    const std::string thread = ctx.string_arg("thread", "self");
    if (thread != "self") {
        state().probe_error("stack_snapshot: thread must be \"self\" (other threads: experiments_async.cpp)",
                            ctx.planned.id);
        return;
    }
    WalkRequest req;
    req.infoFlags = static_cast<ULONG32>(ctx.int_arg("infoFlags", 0));
    req.resolve = ctx.bool_arg("resolve", true);
    req.clientData = ctx.int_arg("clientData", kDefaultClientData);
    walk_and_record(ctx, req);
}

// ---------------------------------------------------------------------------------------------------
// The table

const ExperimentEntry kExperiments[] = {
    {"stack_snapshot", &stack_snapshot,
     "DoStackSnapshot on the current thread. args: infoFlags int (default 0), resolve bool (default true), "
     "clientData int (default 0x5EED5EED), thread \"self\" (NULL ThreadID)"},
};

}  // namespace

const ExperimentTable kCoreExperiments{kExperiments, sizeof kExperiments / sizeof kExperiments[0]};

const ExperimentEntry* find_experiment(const std::string& name) {
    static const ExperimentTable* const tables[] = {&kCoreExperiments,   &kStackExperiments, &kAsyncExperiments,
                                                    &kBufferExperiments, &kGcExperiments,    &kHookExperiments,
                                                    &kCaptureExperiments, &kFaultExperiments, &kRejitExperiments};
    for (const ExperimentTable* table : tables)
        for (std::size_t i = 0; i < table->count; ++i)
            if (name == table->rows[i].name) return &table->rows[i];
    return nullptr;
}

}  // namespace profharness
