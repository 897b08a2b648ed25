// The experiment table. A plan experiment {"run": NAME, "args": {...}} fires at its `at` point and the
// dispatcher calls the table entry with this context. Adding an experiment = adding one table row in
// experiments.cpp (and its function); the dispatcher never changes.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "profharness/hresults.h"
#include "state.h"

namespace profharness {

struct ExperimentContext {
    const PlannedExperiment& planned;
    const std::string& point;  // where it fired: callback name or "mark:NAME"

    const Json& args() const { return planned.args; }
    // Typed argument access with defaults; a wrong type becomes a probe_error and the default.
    std::int64_t int_arg(const char* name, std::int64_t dflt) const;
    bool bool_arg(const char* name, bool dflt) const;
    std::string string_arg(const char* name, const std::string& dflt) const;
};

using ExperimentFn = void (*)(ExperimentContext& ctx);

// Hooks are accepted only at Initialize: false (and a probe_error naming `experiment`) when planned elsewhere.
bool planned_at_initialize(const ExperimentContext& ctx, const char* experiment);

// ---------------------------------------------------------------------------------------------------
// Hooks on the scenario module's functions (experiments_hooks.cpp, experiments_faults.cpp)

// The module whose functions an experiment hooks: the one whose path ends with args.module (default
// "app.dll"); and whether the experiment's hooks are installed.
struct HookedModule {
    std::string suffix = "app.dll";
    bool installed = false;
    // Whether the path GetModuleInfo answers for mod (non-empty) ends with suffix (experiments.cpp).
    bool holds(ModuleID mod) const;
};

// An experiment `experiment` that installs hooks, once: planned at Initialize (else a probe_error), not
// installed yet, and the runtime offers ICorProfilerInfo<level> (else a probe_error "EXPERIMENT needs
// ICorProfilerInfoN"). It reads args.module into `hooked`, then `install` sets the hooks and answers what
// the hook setter answered: the hooks are installed when that succeeded.
template <class Info>
void install_hooks_once(ExperimentContext& ctx, const char* experiment, int level, HookedModule& hooked,
                        HRESULT (*install)(ExperimentContext& ctx, Info* info)) {
    if (!planned_at_initialize(ctx, experiment) || hooked.installed) return;
    Info* info = state().info_as<Info>(level);
    if (!info) {
        state().probe_error(std::string(experiment) + " needs ICorProfilerInfo" + std::to_string(level),
                            ctx.planned.id);
        return;
    }
    hooked.suffix = ctx.string_arg("module", "app.dll");
    hooked.installed = !failed(install(ctx, info));
}

// ---------------------------------------------------------------------------------------------------
// Threads the experiments name, start and wait for (experiments.cpp)

long os_tid();  // gettid()
void sleep_us(long us);  // nanosleep, resumed after a signal

// A thread a scenario registers under args.name (at one of its own marks) so that experiments can take it as
// args.target.
struct NamedThread {
    std::string name;
    ThreadID threadId = 0;  // 0 when GetCurrentThreadID failed
    HRESULT threadIdHr = S_OK;  // what GetCurrentThreadID answered (E_NOINTERFACE without ICorProfilerInfo)
    pthread_t pthread{};
    long osTid = 0;
};
// The registering experiment `experiment`'s start: the calling thread under args.name (a non-empty string;
// else a probe_error and false) in `t`.
bool name_calling_thread(const ExperimentContext& ctx, const char* experiment, NamedThread& t);
// The out-values of a registration record: threadId, osTid, pthread.
Json thread_ids_json(const NamedThread& t);

// The first record of a profiler-created thread: a ProfilerThreadCreated `call` record of `experiment` with
// its gettid and what GetCurrentThreadID answers there.
void record_profiler_thread_created(const char* experiment);

// Waits up to timeout_ms (polling every 2 ms) for `done`, then joins `worker`; one still running is detached
// (what it reads must be shared, so that it stays valid for it) and the answer is false.
bool join_within(std::thread& worker, const std::atomic<bool>& done, std::int64_t timeout_ms);

struct ExperimentEntry {
    const char* name;
    ExperimentFn fn;
    const char* args_doc;
};

// One table per area, each in its own file (experiments_<area>.cpp), so areas grow independently.
struct ExperimentTable {
    const ExperimentEntry* rows;
    std::size_t count;
};
extern const ExperimentTable kCoreExperiments;    // experiments.cpp: stack_snapshot
extern const ExperimentTable kStackExperiments;   // experiments_stack.cpp: same-thread DoStackSnapshot variants
extern const ExperimentTable kAsyncExperiments;   // experiments_async.cpp: cross-thread and signal-handler walks
extern const ExperimentTable kBufferExperiments;  // experiments_buffers.cpp: caller-allocated buffer probes
extern const ExperimentTable kGcExperiments;      // experiments_gc.cpp: MovedReferences2 checks
extern const ExperimentTable kHookExperiments;    // experiments_hooks.cpp: FunctionEnter2 hooks
extern const ExperimentTable kCaptureExperiments; // experiments_capture.cpp: sampling captures (emu)
extern const ExperimentTable kFaultExperiments;   // experiments_faults.cpp: planted hangs (tests/robustness)
extern const ExperimentTable kRejitExperiments;   // experiments_rejit.cpp: the ReJIT protocol (issue 25)

// The capture side's JIT map notes every FunctionID whose ReadyToRun code the runtime chose
// (JITCachedFunctionSearchFinished, COR_PRF_CACHED_FUNCTION_FOUND); experiments_capture.cpp.
void capture_note_cached_function(FunctionID fid);
// The recovered seed's code map (seed_recovery.h) learns every method the JIT compiles (JITCompilationFinished,
// under COR_PRF_MONITOR_JIT_COMPILATION) before the next sample; experiments_capture.cpp.
void capture_note_jitted_function(FunctionID fid);
// The scenario's phase cell the sampling handler reads (profharness_capture_phase_cell).
void capture_set_phase_cell(const volatile std::int32_t* cell);

// nullptr when no table has such a name.
const ExperimentEntry* find_experiment(const std::string& name);

}  // namespace profharness
