// A minimal CoreCLR profiler: the starting point `profharness skeleton DIR` writes out. It keeps the
// profiling API's rules as the documents state them and validates clean under `profharness validate`:
// - Initialize asks for the newest ICorProfilerInfo it needs (QueryInterface on the IUnknown it is given),
//   sets its event mask once, and keeps the interface (one reference) until Shutdown;
// - ModuleLoadFinished reads the module's name with the two-pass buffer protocol of the
//   caller-allocated-buffers page (ask the size with a zero-length buffer, then fill exactly that);
// - it starts no thread, and Shutdown releases the interface: no call follows Shutdown.
// Build: cmake -S . -B build && cmake --build build   (libskeleton_profiler.so)
// Run:   profharness validate build/libskeleton_profiler.so --clsid {A1B2C3D4-0000-4000-8000-00000000C0DE}
#include <atomic>
#include <cstdio>
#include <vector>

#include "profharness/callbacks.h"
#include "profharness/class_factory.h"
#include "profharness/flags.h"
#include "profharness/hresults.h"
#include "profharness/interfaces.h"

using namespace profharness;

namespace {

// {A1B2C3D4-0000-4000-8000-00000000C0DE}: choose your own for a real profiler.
constexpr GUID kClsid = {0xA1B2C3D4, 0x0000, 0x4000, {0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0xC0, 0xDE}};

// Implements ICorProfilerCallback..ICorProfilerCallback4 (4: the runtime then reports MovedReferences2);
// Callbacks4 (callbacks.h) answers S_OK to every callback it does not override. No virtual destructor: the
// vtable must be the IDL's.
class Profiler final : public Callbacks4 {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        if (riid == IID_IUnknown || riid == IID_ICorProfilerCallback || riid == IID_ICorProfilerCallback2 ||
            riid == IID_ICorProfilerCallback3 || riid == IID_ICorProfilerCallback4) {
            *ppv = static_cast<ICorProfilerCallback4*>(this);
            AddRef();
            return S_OK;
        }
        *ppv = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override { return --refs_; }  // one instance, for the process's life

    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unknown) override {
        HRESULT hr = unknown->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (hr != S_OK) return hr;
        return info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS);
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::fprintf(stderr, "skeleton profiler: %lu module(s) loaded\n", modules_.load());
        if (info_) info_->Release();
        info_ = nullptr;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID module, HRESULT status) override {
        if (status != S_OK || !info_) return S_OK;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        ULONG needed = 0;
        // Caller-allocated buffers, double pass: ask for the size, then call again with a buffer that large;
        // "if pcBufferMax points to a value that is larger than cBufferSizeStart, allocate a larger InfoBuffer
        // buffer ... and call the method again" (a bounded number of times)
        HRESULT hr = info_->GetModuleInfo(module, &base, 0, &needed, nullptr, &assembly);
        std::vector<WCHAR> name;
        for (int attempt = 0; hr == S_OK && needed > name.size() && attempt < 8; ++attempt) {
            name.resize(needed);
            hr = info_->GetModuleInfo(module, &base, static_cast<ULONG>(name.size()), &needed, name.data(), &assembly);
        }
        if (hr == S_OK && !name.empty() && needed <= name.size()) ++modules_;
        return S_OK;
    }


 private:
    std::atomic<ULONG> refs_{0};
    std::atomic<unsigned long> modules_{0};
    ICorProfilerInfo4* info_ = nullptr;
};

HRESULT create(REFIID riid, void** ppv) {
    static Profiler* profiler = new Profiler();
    return profiler->QueryInterface(riid, ppv);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) HRESULT DllGetClassObject(REFCLSID clsid, REFIID riid,
                                                                          void** ppv) {
    return class_object<&create>(&kClsid, clsid, riid, ppv);
}
