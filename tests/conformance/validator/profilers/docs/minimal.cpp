// minimal.cpp -- the smallest correct profiler: counts loaded modules.
//
// What it does: Initialize QueryInterfaces the IUnknown it is given for ICorProfilerInfo, asks for
// COR_PRF_MONITOR_MODULE_LOADS only, counts ModuleLoadFinished callbacks that succeeded, and in
// Shutdown prints one line and releases the ICorProfilerInfo pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."; "The
//     Initialize call is the only opportunity to enable (or disable) callbacks that are
//     immutable." (the mask is set there with ICorProfilerInfo::SetEventMask).
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_MODULE_LOADS "Controls the ModuleLoad*,
//     ModuleUnload*, and ModuleAttachedToAssembly callbacks in the ICorProfilerCallback
//     interface."
//   * ICorProfilerCallback::ModuleLoadFinished -- "A failure HRESULT in hrStatus indicates a
//     failure." (only successful loads are counted)
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."  The only thing done with
//     the info pointer in Shutdown is the final IUnknown::Release.
#include "common.h"

using namespace docfix;

class MinimalProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[minimal] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS);
        if (failed(hr)) {
            std::fprintf(stderr, "[minimal] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[minimal] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT hrStatus) override {
        if (shutdown_.load()) return S_OK;
        if (succeeded(hrStatus)) ++modules_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::fprintf(stderr, "[minimal] shutdown: modules loaded=%u\n", modules_.load());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    ICorProfilerInfo* info_ = nullptr;
    std::atomic<unsigned> modules_{0};
    std::atomic<bool> shutdown_{false};
};

DOCFIX_DEFINE_PROFILER(MinimalProfiler)
