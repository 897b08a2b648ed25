// Plan parsing: PROFHARNESS_PLAN (docs/design.md "The plan", numbers only: the harness resolves symbolic
// names before it writes the plan, conformance/core/plans.py) into state().plan and the reply table, from
// scratch at every Initialize. Problems become probe_error records; the run goes on.
#include <string>
#include <vector>

#include "callback_table.h"
#include "experiments.h"
#include "state.h"

namespace profharness {

namespace {

constexpr std::size_t kMaxRanges = 256;  // default: ranges logged per MovedReferences* call

std::vector<std::string> string_list(const Json* j, const char* where) {
    std::vector<std::string> out;
    if (!j) return out;
    if (!j->is_array()) {
        state().probe_error(std::string("plan.") + where + " must be a list of callback names", "plan");
        return out;
    }
    for (const auto& item : j->items()) {
        if (item.is_string()) out.push_back(item.as_string());
        else state().probe_error(std::string("plan.") + where + " holds a non-string", "plan");
    }
    return out;
}

}  // namespace

std::size_t g_max_ranges = kMaxRanges;  // plan "max_ranges" (0 = all)
bool g_reply_set[kCallbackCountMax] = {};
HRESULT g_reply[kCallbackCountMax] = {};

// Experiments of an earlier Initialize: kept, never freed (a detached walker thread that timed out may still
// read its PlannedExperiment).
static std::vector<std::unique_ptr<PlannedExperiment>>& retired_experiments() {
    static auto* retired = new std::vector<std::unique_ptr<PlannedExperiment>>();
    return *retired;
}

void load_plan(const char* text) {
    ProbeState& s = state();
    Plan& plan = s.plan;
    // Every Initialize starts from no plan: a host that initializes the probe again in one process (the
    // fake runtime, once per fuzz example) gets this plan's experiments once, not once more per Initialize.
    for (auto& pe : plan.experiments) retired_experiments().push_back(std::move(pe));
    plan.experiments.clear();
    plan.raw = Json::object();
    plan.event_mask = 0;
    plan.event_mask_hi = 0;
    for (int i = 0; i < kCallbackCountMax; ++i) {
        s.record_flags[i] = false;
        s.experiment_flags[i] = false;
        g_reply_set[i] = false;
        g_reply[i] = 0;
    }
    g_max_ranges = kMaxRanges;
    if (text && *text) {
        std::string err;
        Json parsed;
        if (!Json::parse(text, parsed, err)) {
            s.probe_error("PROFHARNESS_PLAN is not JSON: " + err, "plan");
        } else if (!parsed.is_object()) {
            s.probe_error("PROFHARNESS_PLAN is not a JSON object", "plan");
        } else {
            plan.raw = parsed;
        }
    }
    const Json& raw = plan.raw;
    if (const Json* m = raw.get("event_mask")) {
        if (m->is_integer()) plan.event_mask = static_cast<std::uint32_t>(m->as_uint());
        else s.probe_error("plan.event_mask must be an integer", "plan");
    }
    if (const Json* m = raw.get("event_mask_hi")) {
        if (m->is_integer()) plan.event_mask_hi = static_cast<std::uint32_t>(m->as_uint());
        else s.probe_error("plan.event_mask_hi must be an integer", "plan");
    }
    if (const Json* m = raw.get("max_ranges")) {
        if (m->is_integer() && m->as_int() >= 0) {
            std::int64_t v = m->as_int();
            g_max_ranges = v == 0 ? static_cast<std::size_t>(-1) : static_cast<std::size_t>(v);
        } else {
            s.probe_error("plan.max_ranges must be an integer >= 0", "plan");
        }
    }
    if (const Json* r = raw.get("replies")) {
        if (!r->is_object()) s.probe_error("plan.replies must be an object {callback: HRESULT}", "plan");
        else
            for (const auto& kv : r->members()) {
                int idx = callback_index(kv.first);
                if (idx < 0) s.probe_error("plan.replies names unknown callback " + kv.first, "plan");
                else if (!kv.second.is_integer()) s.probe_error("plan.replies." + kv.first + " must be an integer", "plan");
                else {
                    g_reply_set[idx] = true;
                    g_reply[idx] = static_cast<HRESULT>(static_cast<std::uint32_t>(kv.second.as_uint()));
                }
            }
    }
    plan.record = string_list(raw.get("record"), "record");
    plan.count = string_list(raw.get("count"), "count");

    for (const auto& name : plan.record) {
        if (name == "*") {
            for (int i = 0; i < kCbCount; ++i)
                if (!kCallbackHighVolume[i]) s.record_flags[i] = true;  // generated: the API table's
            continue;
        }
        int idx = callback_index(name);
        if (idx < 0) s.probe_error("plan.record names unknown callback " + name, "plan");
        else s.record_flags[idx] = true;
    }
    for (const auto& name : plan.count) {
        int idx = callback_index(name);
        if (idx < 0) s.probe_error("plan.count names unknown callback " + name, "plan");
        else s.record_flags[idx] = false;  // counted only
    }

    if (const Json* ex = raw.get("experiments")) {
        if (!ex->is_array()) {
            s.probe_error("plan.experiments must be a list", "plan");
        } else {
            int n = 0;
            for (const auto& e : ex->items()) {
                std::string where = "plan.experiments[" + std::to_string(n++) + "]";
                if (!e.is_object()) { s.probe_error("experiment is not an object", where); continue; }
                auto pe = std::make_unique<PlannedExperiment>();
                const Json* id = e.get("id");
                const Json* at = e.get("at");
                const Json* run = e.get("run");
                const Json* args = e.get("args");
                const Json* times = e.get("times");
                pe->id = id && id->is_string() ? id->as_string() : where;
                if (!at || !at->is_string() || !run || !run->is_string()) {
                    s.probe_error("experiment needs string `at` and `run`", where);
                    continue;
                }
                pe->at = at->as_string();
                pe->run = run->as_string();
                pe->args = args && args->is_object() ? *args : Json::object();
                if (times) {
                    if (times->is_integer() && times->as_int() >= 0) pe->times = times->as_int();
                    else s.probe_error("experiment `times` must be an integer >= 0", where);
                }
                if (!find_experiment(pe->run)) {
                    s.probe_error("unknown experiment " + pe->run, where);
                    continue;
                }
                if (pe->at.rfind("mark:", 0) != 0) {
                    int idx = callback_index(pe->at);
                    if (idx < 0) { s.probe_error("experiment at unknown callback " + pe->at, where); continue; }
                    s.experiment_flags[idx] = true;
                }
                plan.experiments.push_back(std::move(pe));
            }
        }
    }
}

}  // namespace profharness
