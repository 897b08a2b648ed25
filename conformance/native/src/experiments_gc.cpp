// Experiments: MovedReferences2 checks against the scenario's tagged objects.
// Rows of this area's table; see experiments.h. The table starts empty and grows one row per experiment.
#include "experiments.h"

namespace profharness {

const ExperimentTable kGcExperiments{nullptr, 0};

}  // namespace profharness
