// stale_ids: one fault, MR2-17: keeps the ObjectIDs of the exceptions it sees (asking each one's
// generation) and, after every garbage collection, asks them again with the ids it kept, never remapping
// them through MovedReferences2 (the scenario's compacting collections move them).
#include <mutex>
#include <vector>

#include "fixture.h"

using namespace fixture;

namespace {

class StaleIds final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_GC | COR_PRF_MONITOR_EXCEPTIONS);
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrown) override {
        COR_PRF_GC_GENERATION_RANGE range{};
        info->GetObjectGeneration(thrown, &range);
        std::lock_guard<std::mutex> lock(mu_);
        kept_.push_back(thrown);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        std::lock_guard<std::mutex> lock(mu_);
        for (ObjectID id : kept_) {
            COR_PRF_GC_GENERATION_RANGE range{};
            info->GetObjectGeneration(id, &range);  // the fault: the id from before the GC
        }
        return S_OK;
    }

 private:
    std::mutex mu_;
    std::vector<ObjectID> kept_;
};

}  // namespace

FIXTURE_EXPORT(StaleIds)
