// What the fuzz fixtures share: a profiler that tracks the objects it is told about (ObjectAllocated),
// remaps them at each MovedReferences2 by a membership test the fixture chooses, and inspects every one of
// them after GarbageCollectionFinished (MR2-10: allowed again there). Written for the fuzzer's tests.
#pragma once

#include <vector>

#include "fixture.h"

namespace fixture {

// inclusive_end: the planted off-by-one of MR2-07 (old <= start + length instead of old < start + length).
template <bool inclusive_end>
class Tracker : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID id, ClassID) override {
        ids_.push_back(id);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL[], COR_PRF_GC_REASON) override {
        moved_.assign(ids_.size(), false);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID olds[], ObjectID news[], SIZE_T lens[]) override {
        if (moved_.size() != ids_.size()) moved_.assign(ids_.size(), false);
        for (std::size_t k = 0; k < ids_.size(); ++k) {
            if (moved_[k]) continue;  // remapped by an earlier batch of this GC
            for (ULONG i = 0; i < n; ++i) {
                const ObjectID id = ids_[k];
                const bool inside = inclusive_end ? (id >= olds[i] && id - olds[i] <= lens[i])
                                                  : (id >= olds[i] && id - olds[i] < lens[i]);
                if (inside) {
                    ids_[k] = news[i] + (id - olds[i]);
                    moved_[k] = true;
                    break;
                }
            }
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        moved_.clear();
        for (ObjectID id : ids_) {
            ClassID cls = 0;
            info->GetClassFromObject(id, &cls);
        }
        return S_OK;
    }

 protected:
    DWORD tracking_mask() const {
        return COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED;
    }
    std::vector<ObjectID> ids_;
    std::vector<bool> moved_;
};

}  // namespace fixture
