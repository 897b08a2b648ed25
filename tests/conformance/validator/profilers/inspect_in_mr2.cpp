// inspect_in_mr2: one fault, MR2-09: inside MovedReferences2 it asks the generation of the first moved
// object (an inspection before GarbageCollectionFinished).
#include "fixture.h"

using namespace fixture;

namespace {

class InspectInMr2 final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID*, ObjectID* news, SIZE_T*) override {
        if (n > 0) {
            COR_PRF_GC_GENERATION_RANGE range{};
            info->GetObjectGeneration(news[0], &range);  // the fault
        }
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(InspectInMr2)
