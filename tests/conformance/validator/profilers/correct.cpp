// correct: a profiler that keeps every rule the validator checks. It walks its own stack from
// ExceptionThrown (synchronous, no seed), reads module names with the double-pass buffer protocol
// (BUF-07), records MovedReferences2 without inspecting objects and inspects only after
// GarbageCollectionFinished, enumerates threads and releases the enumerator, keeps its ICorProfilerInfo until
// Shutdown, starts no thread; its FunctionEnter2/Leave2/Tailcall2 hooks only count (they keep every ABI
// rule the hook checker runs).
#include <vector>

#include "fixture.h"

using namespace fixture;

namespace {

HRESULT count_frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
    ++*static_cast<int*>(data);
    return S_OK;
}

unsigned long g_enters = 0, g_leaves = 0, g_tailcalls = 0;

void enter2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*) { ++g_enters; }
void leave2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*) { ++g_leaves; }
void tailcall2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO) { ++g_tailcalls; }

class Correct final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_GC | COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_EXCEPTIONS |
                                        COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_ENABLE_STACK_SNAPSHOT |
                                        COR_PRF_MONITOR_ENTERLEAVE);
        if (hr != S_OK) return hr;
        return info->SetEnterLeaveFunctionHooks2(&enter2, &leave2, &tailcall2);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        ULONG need = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        if (info->GetModuleInfo(mod, &base, 0, &need, nullptr, &assembly) != S_OK || need == 0) return S_OK;
        std::vector<WCHAR> name(need);
        info->GetModuleInfo(mod, &base, need, &need, name.data(), &assembly);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        int frames = 0;
        info->DoStackSnapshot(0, &count_frame, COR_PRF_SNAPSHOT_DEFAULT, &frames, nullptr, 0);
        ICorProfilerThreadEnum* threads = nullptr;
        if (info->EnumThreads(&threads) == S_OK && threads) threads->Release();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID*, ObjectID*, SIZE_T*) override {
        moved_ += n;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        ULONG n = 0;
        info->GetGenerationBounds(0, &n, nullptr);
        std::vector<COR_PRF_GC_GENERATION_RANGE> ranges(n);
        if (n) info->GetGenerationBounds(n, &n, ranges.data());
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        info->Release();
        info = nullptr;
        return S_OK;
    }

 private:
    unsigned long moved_ = 0;
};

}  // namespace

FIXTURE_EXPORT(Correct)
