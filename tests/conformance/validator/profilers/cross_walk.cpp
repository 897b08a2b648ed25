// cross_walk: one fault, DSS-13: from ExceptionThrown on a worker thread it walks the main thread
// (another thread, running) without suspending the runtime.
#include "fixture.h"

using namespace fixture;

namespace {

HRESULT frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void*) { return S_OK; }

class CrossWalk final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        if (!first_) first_ = t;  // the main thread comes first
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        ThreadID self = 0;
        info->GetCurrentThreadID(&self);
        if (first_ && self != first_) info->DoStackSnapshot(first_, &frame, 0, nullptr, nullptr, 0);  // the fault
        return S_OK;
    }

 private:
    ThreadID first_ = 0;
};

}  // namespace

FIXTURE_EXPORT(CrossWalk)
