// suspend_managed: one fault, DSS-22: from the first ExceptionThrown (a managed thread, inside a callback)
// it suspends the runtime itself (SuspendRuntime, then ResumeRuntime at once).
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

class SuspendManaged final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS);
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        if (done_.exchange(true)) return S_OK;
        if (info->SuspendRuntime() == S_OK) info->ResumeRuntime();  // the fault: a managed thread suspends
        return S_OK;
    }

 private:
    std::atomic<bool> done_{false};
};

}  // namespace

FIXTURE_EXPORT(SuspendManaged)
