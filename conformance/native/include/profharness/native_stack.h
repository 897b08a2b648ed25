// Native stacks as trace JSON (profharness_common): what a crash or hang report carries for a thread.
#pragma once

#include "profharness/json.h"

namespace profharness {

// The return addresses `ips[0..n)` (from backtrace(3)), innermost first, as a JSON array of
// {"ip", "module" (basename), "offset" (from the module's load base), "symbol"}: module, offset and symbol
// only where dladdr(3) knows them.
Json native_stack_json(void* const* ips, int n);

}  // namespace profharness
