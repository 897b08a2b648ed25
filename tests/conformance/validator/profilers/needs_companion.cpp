// needs_companion: a correct profiler that calls fixture_companion_answer(), defined in libcompanion.so
// (companion.cpp), a library it does not link against: it loads only when the companion is LD_PRELOADed.
#include "fixture.h"

using namespace fixture;

extern "C" int fixture_companion_answer();

namespace {

class NeedsCompanion final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (fixture_companion_answer() != 42) return E_FAIL;
        return take_info(unk, COR_PRF_MONITOR_THREADS);
    }
};

}  // namespace

FIXTURE_EXPORT(NeedsCompanion)
