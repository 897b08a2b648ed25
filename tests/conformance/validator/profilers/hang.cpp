// hang: one fault: the first GarbageCollectionFinished takes a lock it already holds (a deadlock in a callback).
#include <mutex>

#include "fixture.h"

using namespace fixture;

namespace {

std::mutex lock;

class Hang final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        lock.lock();
        lock.lock();  // the fault: never returns
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(Hang)
