// terminate: one fault: in the first GarbageCollectionFinished an exception leaves a noexcept helper, so the
// C++ runtime calls std::terminate (SIGABRT, the runtime library's abort machinery above the profiler's frame).
#include <stdexcept>

#include "fixture.h"

using namespace fixture;

namespace {

volatile int depth = 0;

void census() noexcept {
    if (depth == 0) throw std::runtime_error("census before the first GC");  // the fault: escapes noexcept
}

class Terminate final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        census();
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(Terminate)
