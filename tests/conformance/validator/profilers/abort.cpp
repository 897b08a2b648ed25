// abort: one fault: calls abort() in the first GarbageCollectionFinished (SIGABRT inside a callback).
#include <cstdlib>

#include "fixture.h"

using namespace fixture;

namespace {

class Abort final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        std::abort();  // the fault
    }
};

}  // namespace

FIXTURE_EXPORT(Abort)
