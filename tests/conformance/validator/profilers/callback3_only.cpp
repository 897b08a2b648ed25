// callback3_only: one fault, MR2-13: implements only up to ICorProfilerCallback3 while monitoring the GC,
// so the runtime falls back to MovedReferences with 32-bit lengths.
#include "fixture.h"

using namespace fixture;

namespace {

class Callback3Only final : public Profiler<Callbacks3, 3> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
};

}  // namespace

FIXTURE_EXPORT(Callback3Only)
