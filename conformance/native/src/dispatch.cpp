// The experiment dispatcher: runs the plan's experiments planned at a point. Experiments themselves are
// rows of the per-area tables (experiments.h); this file never changes when one is added.
#include "experiments.h"
#include "state.h"

namespace profharness {

namespace {

thread_local int t_experiment_depth = 0;

}  // namespace

void run_experiments_at(const std::string& point) {
    ProbeState& s = state();
    if (t_experiment_depth > 0) return;  // no experiments from inside an experiment
    for (auto& pe : s.plan.experiments) {
        if (pe->at != point) continue;
        if (pe->times > 0) {
            std::int64_t k = pe->fired.fetch_add(1);
            if (k >= pe->times) continue;
        } else {
            pe->fired.fetch_add(1);
        }
        const ExperimentEntry* entry = find_experiment(pe->run);
        if (!entry) {
            s.probe_error("unknown experiment " + pe->run, pe->id);
            continue;
        }
        ExperimentContext ctx{*pe, point};
        ++t_experiment_depth;
        entry->fn(ctx);
        --t_experiment_depth;
    }
}

}  // namespace profharness
