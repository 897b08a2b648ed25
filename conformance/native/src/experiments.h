// The experiment table. A plan experiment {"run": NAME, "args": {...}} fires at its `at` point and the
// dispatcher calls the table entry with this context. Adding an experiment = adding one table row in
// experiments.cpp (and its function); the dispatcher never changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

// The capture side's JIT map notes every FunctionID whose ReadyToRun code the runtime chose
// (JITCachedFunctionSearchFinished, COR_PRF_CACHED_FUNCTION_FOUND); experiments_capture.cpp.
void capture_note_cached_function(FunctionID fid);
// The scenario's phase cell the sampling handler reads (profharness_capture_phase_cell).
void capture_set_phase_cell(const volatile std::int32_t* cell);

// nullptr when no table has such a name.
const ExperimentEntry* find_experiment(const std::string& name);

}  // namespace profharness
