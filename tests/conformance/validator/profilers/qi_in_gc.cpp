// qi_in_gc: one fault (seen in public profilers): inside every GarbageCollectionStarted it asks the
// IUnknown Initialize was given for ICorProfilerInfo10 again (QueryInterface inside a GC callback),
// releasing what it got.
#include "fixture.h"

using namespace fixture;

namespace {

class QiInGc final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        void* again = nullptr;
        if (unk_->QueryInterface(IID_ICorProfilerInfo10, &again) == S_OK && again)  // the fault
            static_cast<IUnknown*>(again)->Release();
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(QiInGc)
