// The callbacks the probe reports in more detail than CallbackBase's generic record: ExceptionThrown (with
// the exception's class name), GarbageCollectionStarted/Finished, MovedReferences(2), SurvivingReferences2.
#include <cstddef>

#include "profharness/metadata.h"
#include "experiments.h"
#include "profiler.h"
#include "state.h"

namespace profharness {

namespace {

template <typename T>
Json range_array(const T* values, std::size_t n) {
    Json a = Json::array();
    for (std::size_t i = 0; i < n && values; ++i) a.push(Json(static_cast<std::uint64_t>(values[i])));
    return a;
}

// The exception's class name through GetClassFromObject, then GetClassIDInfo / GetModuleMetaData /
// GetTypeDefProps (metadata.h); null when any of them fails.
Json class_name_of(ObjectID obj) {
    ProbeState& s = state();
    if (!s.info) return Json();
    ClassID cls = 0;
    if (failed(s.info->GetClassFromObject(obj, &cls)) || !cls) return Json();
    std::string name;
    return class_name(s.info, cls, name) ? Json(name) : Json();
}

}  // namespace

HRESULT Probe::ExceptionThrown(ObjectID thrownObjectId) {
    CallbackEvent ev(static_cast<int>(Cb::ExceptionThrown));
    if (ev.recording()) {
        ExceptionThrownArgs(ev, thrownObjectId);
        ev.args().set("className", class_name_of(thrownObjectId));
    }
    return ev.finish();
}

// Besides the generic record: the capture side's JIT map keeps the FunctionIDs of ReadyToRun code.
HRESULT Probe::JITCachedFunctionSearchFinished(FunctionID functionId, COR_PRF_JIT_CACHE result) {
    CallbackEvent ev(static_cast<int>(Cb::JITCachedFunctionSearchFinished));
    if (ev.recording()) JITCachedFunctionSearchFinishedArgs(ev, functionId, result);
    constexpr COR_PRF_JIT_CACHE kCachedFunctionFound = 0;  // COR_PRF_CACHED_FUNCTION_FOUND (corprof.idl)
    if (result == kCachedFunctionFound) capture_note_cached_function(functionId);
    return ev.finish();
}

// Besides the generic record: the recovered seed's code map learns the method's code (docs/seeding.md).
HRESULT Probe::JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL fIsSafeToBlock) {
    CallbackEvent ev(static_cast<int>(Cb::JITCompilationFinished));
    if (ev.recording()) JITCompilationFinishedArgs(ev, functionId, hrStatus, fIsSafeToBlock);
    if (hrStatus >= 0) capture_note_jitted_function(functionId);
    return ev.finish();
}

HRESULT Probe::GarbageCollectionStarted(int cGenerations, BOOL* generationCollected, COR_PRF_GC_REASON reason) {
    CallbackEvent ev(static_cast<int>(Cb::GarbageCollectionStarted));
    if (ev.recording()) {
        ev.arg("cGenerations", cGenerations);
        Json gens = Json::array();
        for (int i = 0; i < cGenerations && generationCollected; ++i) gens.push(Json(generationCollected[i] != 0));
        ev.args().set("generationCollected", gens);
        ev.arg("reason", reason);
    }
    return ev.finish();
}

HRESULT Probe::GarbageCollectionFinished() {
    HRESULT hr;
    {
        CallbackEvent ev(static_cast<int>(Cb::GarbageCollectionFinished));
        hr = ev.finish();
    }
    state().counts_record();
    return hr;
}

namespace {

template <typename Len>
void moved_args(CallbackEvent& ev, ULONG n, const ObjectID* olds, const ObjectID* news, const Len* lens) {
    std::size_t shown = n < g_max_ranges ? n : g_max_ranges;
    ev.arg("cMovedObjectIDRanges", n);
    ev.args().set("old", range_array(olds, shown));
    ev.args().set("new", range_array(news, shown));
    ev.args().set("len", range_array(lens, shown));
    ev.args().set("truncated", Json(shown < n));
}

}  // namespace

HRESULT Probe::MovedReferences(ULONG n, ObjectID* olds, ObjectID* news, ULONG* lens) {
    CallbackEvent ev(static_cast<int>(Cb::MovedReferences));
    if (ev.recording()) moved_args(ev, n, olds, news, lens);
    return ev.finish();
}

HRESULT Probe::MovedReferences2(ULONG n, ObjectID* olds, ObjectID* news, SIZE_T* lens) {
    CallbackEvent ev(static_cast<int>(Cb::MovedReferences2));
    if (ev.recording()) moved_args(ev, n, olds, news, lens);
    return ev.finish();
}

HRESULT Probe::SurvivingReferences2(ULONG n, ObjectID* starts, SIZE_T* lens) {
    CallbackEvent ev(static_cast<int>(Cb::SurvivingReferences2));
    if (ev.recording()) {
        std::size_t shown = n < g_max_ranges ? n : g_max_ranges;
        ev.arg("cSurvivingObjectIDRanges", n);
        ev.args().set("start", range_array(starts, shown));
        ev.args().set("len", range_array(lens, shown));
        ev.args().set("truncated", Json(shown < n));
    }
    return ev.finish();
}

}  // namespace profharness
