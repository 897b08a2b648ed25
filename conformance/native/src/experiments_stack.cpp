// Experiments: same-thread DoStackSnapshot variants (seeds, contextSize, callback replies, flags).
// Rows of this area's table; see experiments.h. The table starts empty and grows one row per experiment.
#include "experiments.h"

namespace profharness {

const ExperimentTable kStackExperiments{nullptr, 0};

}  // namespace profharness
