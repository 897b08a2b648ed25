// Experiments: caller-allocated buffer probes of ICorProfilerInfo methods.
// Rows of this area's table; see experiments.h. The table starts empty and grows one row per experiment.
#include "experiments.h"

namespace profharness {

const ExperimentTable kBufferExperiments{nullptr, 0};

}  // namespace profharness
