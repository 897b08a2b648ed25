// crash: one fault: dereferences NULL in the first GarbageCollectionStarted (a segfault in a callback).
#include "fixture.h"

using namespace fixture;

namespace {

volatile int* nowhere = nullptr;

class Crash final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        *nowhere = 42;  // the fault
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(Crash)
