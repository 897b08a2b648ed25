// mr2_off_by_one: remaps its ObjectIDs at MovedReferences2 with old <= start + length (MR2-07 says <): an
// object that starts right where a moved block ends is moved with that block, to an address no object has;
// it inspects it after GarbageCollectionFinished (MR2-17).
#include "heap.h"

using namespace fixture;

namespace {

class OffByOne final : public Tracker<true> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, tracking_mask()); }
};

}  // namespace

FIXTURE_EXPORT(OffByOne)
