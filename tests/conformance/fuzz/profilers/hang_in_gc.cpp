// hang_in_gc: never returns from GarbageCollectionStarted (a deadlock on a lock it already holds).
#include <mutex>

#include "fixture.h"

using namespace fixture;

namespace {

class HangInGc final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL[], COR_PRF_GC_REASON) override {
        std::lock_guard<std::mutex> a(mu_);
        std::lock_guard<std::mutex> b(mu_);  // undefined behaviour in general; glibc blocks forever
        return S_OK;
    }

 private:
    std::mutex mu_;
};

}  // namespace

FIXTURE_EXPORT(HangInGc)
