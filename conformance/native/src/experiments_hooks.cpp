// Experiments: FunctionEnter2 hooks (SetEnterLeaveFunctionHooks2, FunctionIDMapper).
// Rows of this area's table; see experiments.h. The table starts empty and grows one row per experiment.
#include "experiments.h"

namespace profharness {

const ExperimentTable kHookExperiments{nullptr, 0};

}  // namespace profharness
