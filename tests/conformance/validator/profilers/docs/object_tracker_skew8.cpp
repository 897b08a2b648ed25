// object_tracker_skew8.cpp -- DELIBERATELY FAULTY variant of object_tracker.cpp.
//
// Identical to object_tracker.cpp except that every ID remapped through MovedReferences2 is off by
// 8 bytes: newObjectID = newObjectIDRangeStart[i] + (oldObjectID - oldObjectIDRangeStart[i]) + 8.
// The ICorProfilerCallback4::MovedReferences2 page gives the formula without any offset, so after
// the first compacting GC this profiler holds IDs that are not the start of any live object and
// then inspects them (GetClassFromObject / GetObjectSize2) in GarbageCollectionFinished.
#define REMAP_SKEW 8
#include "object_tracker.cpp"
