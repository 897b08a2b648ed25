// enum_leak: one fault (seen in public profilers): enumerates the threads on every ExceptionThrown and
// never releases the ICorProfilerThreadEnum.
#include "fixture.h"

using namespace fixture;

namespace {

class EnumLeak final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS);
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        ICorProfilerThreadEnum* threads = nullptr;
        info->EnumThreads(&threads);  // the fault: never released
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(EnumLeak)
