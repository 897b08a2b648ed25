// Native stacks as trace JSON (profharness_common): what a crash or hang report carries for a thread.
#pragma once

#include "profharness/json.h"

namespace profharness {

// The return addresses `ips[0..n)` (from backtrace(3)), innermost first, as a JSON array of
// {"ip", "module" (basename), "offset" (from the module's load base), "symbol"}: module, offset and symbol
// only where dladdr(3) knows them, a return address's symbol that of the call before it; `exact`: the one
// address that is no return address (the instruction a signal interrupted), named by itself.
Json native_stack_json(void* const* ips, int n, const void* exact = nullptr);

// The instruction a signal interrupted, from the ucontext a SA_SIGINFO handler is given (x86-64); null
// without one: native_stack_json's `exact`.
void* interrupted_pc(const void* ucontext);

// The same array, each frame named from /proc/self/maps ("module", "offset" from the module's first
// mapping, "path": the file, whose symbols the validator reads) and never by the dynamic loader, so without
// "symbol": for a report made while another thread may
// be stopped holding the loader's lock (inside dlopen, where an allocation or a signal stopped it), which
// dladdr(3) takes. One caller at a time (a static buffer holds the maps).
Json native_stack_json_unlocked(void* const* ips, int n);

}  // namespace profharness
