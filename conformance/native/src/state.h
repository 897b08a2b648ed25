// Process-wide probe state: the plan, the profiler-info interface, the trace, callback counters
// (state.cpp). Created once (never destroyed: runtime threads may call in during process exit).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "profharness/json.h"
#include "profharness/interfaces.h"
#include "profharness/trace.h"

namespace profharness {

inline constexpr const char* kProbeVersion = "0.1.0";
inline constexpr int kCallbackCountMax = 256;

struct PlannedExperiment {
    std::string id;
    std::string at;     // callback name or "mark:NAME"
    std::string run;    // experiment table entry
    Json args;          // object
    std::int64_t times = 1;  // 0 = unbounded
    std::atomic<std::int64_t> fired{0};
};

struct Plan {
    Json raw = Json::object();
    std::uint32_t event_mask = 0;
    std::uint32_t event_mask_hi = 0;
    std::vector<std::string> record;
    std::vector<std::string> count;
    std::vector<std::unique_ptr<PlannedExperiment>> experiments;
};

// The calling thread's managed ThreadID for the trace writer (state().current_managed_thread()).
Json managed_thread_of_caller();

class ProbeState {
 public:
    TraceWriter trace{&managed_thread_of_caller};
    Plan plan;
    ICorProfilerInfo* info = nullptr;  // the highest ICorProfilerInfoN obtained (single-inheritance chain)
    int info_level = 0;
    std::atomic<bool> initialized{false};
    std::atomic<bool> shut_down{false};
    // the runtime has called Shutdown: from then on the probe calls no ICorProfilerInfo method (SHD-02: "The
    // profiler code cannot safely call methods of the ICorProfilerInfo interface after the Shutdown method is
    // called"); a record's managed thread is the one its thread last had
    std::atomic<bool> shutdown_called{false};
    bool record_flags[kCallbackCountMax] = {};
    bool experiment_flags[kCallbackCountMax] = {};
    std::atomic<std::uint64_t> counts[kCallbackCountMax] = {};

    template <typename T>
    T* info_as(int level) const { return info_level >= level ? static_cast<T*>(info) : nullptr; }

    // The managed ThreadID of the calling thread, or null (not managed, or no info yet).
    Json current_managed_thread() const;

    // Records.
    void probe_error(const std::string& what, const std::string& where);
    void call(const char* name, const char* experiment, Json args, Json out, HRESULT hr);
    void counts_record();
};

ProbeState& state();

// Runs the experiments planned at `point` (a callback name or "mark:NAME") on the calling thread
// (dispatch.cpp).
void run_experiments_at(const std::string& point);

// Plan parsing (plan.cpp): fills state().plan; problems become probe_error records.
void load_plan(const char* text);

// What load_plan sets beside state().plan (plan.cpp):
// plan "replies": {callback name: HRESULT} the probe returns instead of S_OK (CallbackEvent::finish),
extern bool g_reply_set[kCallbackCountMax];
extern HRESULT g_reply[kCallbackCountMax];
// plan "max_ranges": ranges logged per MovedReferences* / SurvivingReferences2 call (SIZE_MAX = all).
extern std::size_t g_max_ranges;

}  // namespace profharness
