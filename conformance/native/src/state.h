// Process-wide probe state: the plan, the profiler-info interface, the trace, callback counters.
// Created once (never destroyed: runtime threads may call in during process exit).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "json.h"
#include "profharness/interfaces.h"
#include "trace.h"

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

class ProbeState {
 public:
    TraceWriter trace;
    Plan plan;
    ICorProfilerInfo* info = nullptr;  // the highest ICorProfilerInfoN obtained (single-inheritance chain)
    int info_level = 0;
    std::atomic<bool> initialized{false};
    std::atomic<bool> shut_down{false};
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

// Runs the experiments planned at `point` (a callback name or "mark:NAME") on the calling thread.
void run_experiments_at(const std::string& point);

// Plan parsing (probe.cpp): fills state().plan; problems become probe_error records.
void load_plan(const char* text);

}  // namespace profharness
