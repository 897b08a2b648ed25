// The profiler object the runtime talks to: every ICorProfilerCallback* method (CallbackBase, generated),
// with Initialize/Shutdown (profiler.cpp) and the callbacks it reports in more detail (callbacks.cpp).
#pragma once

#include <atomic>

#include "callback_base.h"
#include "profharness/hresults.h"

namespace profharness {

class Probe final : public CallbackBase {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override;
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override { return --refs_; }  // static lifetime: never deleted

    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override;
    HRESULT STDMETHODCALLTYPE Shutdown() override;
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrownObjectId) override;
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override;
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override;
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID functionId,
                                                              COR_PRF_JIT_CACHE result) override;
    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus,
                                                     BOOL fIsSafeToBlock) override;
    HRESULT STDMETHODCALLTYPE MovedReferences(ULONG cMovedObjectIDRanges, ObjectID* oldObjectIDRangeStart,
                                              ObjectID* newObjectIDRangeStart,
                                              ULONG* cObjectIDRangeLength) override;
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cMovedObjectIDRanges, ObjectID* oldObjectIDRangeStart,
                                               ObjectID* newObjectIDRangeStart,
                                               SIZE_T* cObjectIDRangeLength) override;
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cSurvivingObjectIDRanges, ObjectID* objectIDRangeStart,
                                                   SIZE_T* cObjectIDRangeLength) override;
    // experiments_rejit.cpp: the function control for rejit_parameters; the recompiled method's token
    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID moduleId, mdMethodDef methodId,
                                                 ICorProfilerFunctionControl* pFunctionControl) override;
    HRESULT STDMETHODCALLTYPE ReJITCompilationStarted(FunctionID functionId, ReJITID rejitId,
                                                      BOOL fIsSafeToBlock) override;
    HRESULT STDMETHODCALLTYPE ReJITCompilationFinished(FunctionID functionId, ReJITID rejitId, HRESULT hrStatus,
                                                       BOOL fIsSafeToBlock) override;
    // experiments_rejit.cpp: the inliner's and the inlinee's tokens beside their FunctionIDs
    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID callerId, FunctionID calleeId, BOOL* pfShouldInline) override;

 private:
    std::atomic<ULONG> refs_{1};
};

// The one Probe of the process (never destroyed).
Probe& the_probe();

}  // namespace profharness
