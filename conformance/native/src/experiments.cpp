// The experiment table and its experiments. Each row: name, function, documented args.
// New experiments (cross-thread walks under SuspendRuntime, seeded walks, buffer probes, MovedReferences2
// tag checks, enter/leave hooks) are new rows here; run_experiments_at (dispatch.cpp) does not change.
#include "experiments.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "events.h"
#include "walk.h"

namespace profharness {

// ---------------------------------------------------------------------------------------------------
// Context helpers

std::int64_t ExperimentContext::int_arg(const char* name, std::int64_t dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_integer()) {
        state().probe_error(std::string("argument ") + name + " must be an integer", planned.id);
        return dflt;
    }
    return v->as_int();
}

bool ExperimentContext::bool_arg(const char* name, bool dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_bool()) {
        state().probe_error(std::string("argument ") + name + " must be true or false", planned.id);
        return dflt;
    }
    return v->as_bool();
}

std::string ExperimentContext::string_arg(const char* name, const std::string& dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_string()) {
        state().probe_error(std::string("argument ") + name + " must be a string", planned.id);
        return dflt;
    }
    return v->as_string();
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
                                                    &kCaptureExperiments, &kFaultExperiments};
    for (const ExperimentTable* table : tables)
        for (std::size_t i = 0; i < table->count; ++i)
            if (name == table->rows[i].name) return &table->rows[i];
    return nullptr;
}

}  // namespace profharness
