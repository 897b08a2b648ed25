// The native-stack helper of profharness_common (include/profharness/native_stack.h).
#include "profharness/native_stack.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>

namespace profharness {

Json native_stack_json(void* const* ips, int n) {
    Json frames = Json::array();
    for (int k = 0; k < n; ++k) {
        Json f = Json::object();
        f.set("ip", Json::pointer(ips[k]));
        Dl_info di;
        if (dladdr(ips[k], &di) && di.dli_fname) {
            const char* base = std::strrchr(di.dli_fname, '/');
            f.set("module", base ? base + 1 : di.dli_fname);
            f.set("offset", Json(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ips[k]) -
                                                            reinterpret_cast<std::uintptr_t>(di.dli_fbase))));
            if (di.dli_sname) f.set("symbol", di.dli_sname);
        }
        frames.push(f);
    }
    return frames;
}

}  // namespace profharness
