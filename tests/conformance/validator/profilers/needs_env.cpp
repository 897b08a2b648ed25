// needs_env: a correct profiler that works only with FIXTURE_GREETING=hello in its environment (as real
// profilers read their configuration): without it Initialize fails and the runtime unloads it.
#include <cstdlib>
#include <cstring>

#include "fixture.h"

using namespace fixture;

namespace {

class NeedsEnv final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        const char* greeting = std::getenv("FIXTURE_GREETING");
        if (!greeting || std::strcmp(greeting, "hello") != 0) return E_FAIL;
        return take_info(unk, COR_PRF_MONITOR_THREADS);
    }
};

}  // namespace

FIXTURE_EXPORT(NeedsEnv)
