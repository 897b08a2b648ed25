// Experiments: cross-thread walks (with and without SuspendRuntime) and walks from a signal handler.
// Rows of this area's table; see experiments.h. The table starts empty and grows one row per experiment.
#include "experiments.h"

namespace profharness {

const ExperimentTable kAsyncExperiments{nullptr, 0};

}  // namespace profharness
