// ClassFactory<Create>: the COM class factory of a profiler .so (the probe, the recording proxy, the test
// fixtures), and class_object<Create>: what its DllGetClassObject answers. The runtime asks
// DllGetClassObject for the factory, then the factory for the profiler: CreateInstance hands out what
// Create(riid, ppv) gives (the one probe, the proxy in front of a profiler, a new fixture object).
// The factory lives as long as the process: AddRef and Release count nothing.
#pragma once

#include "profharness/hresults.h"
#include "profharness/interfaces.h"

namespace profharness {

using CreateProfiler = HRESULT (*)(REFIID riid, void** ppv);

template <CreateProfiler Create>
class ClassFactory final : public IClassFactory {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        if (riid == IID_IUnknown || riid == IID_IClassFactory) {
            *ppv = static_cast<IClassFactory*>(this);
            return S_OK;
        }
        *ppv = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return 2; }
    ULONG STDMETHODCALLTYPE Release() override { return 1; }
    HRESULT STDMETHODCALLTYPE CreateInstance(IUnknown* outer, REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        if (outer) return CLASS_E_NOAGGREGATION;
        return Create(riid, ppv);
    }
    HRESULT STDMETHODCALLTYPE LockServer(BOOL) override { return S_OK; }
};

// DllGetClassObject's answer: the one ClassFactory<Create> for `clsid` (for any CLSID when clsid is null:
// the proxy stands in for whatever CLSID the harness chose), CLASS_E_CLASSNOTAVAILABLE for another.
template <CreateProfiler Create>
HRESULT class_object(const GUID* clsid, REFCLSID rclsid, REFIID riid, void** ppv) {
    if (!ppv) return E_POINTER;
    *ppv = nullptr;
    if (clsid && !(rclsid == *clsid)) return CLASS_E_CLASSNOTAVAILABLE;
    static ClassFactory<Create>* factory = new ClassFactory<Create>();
    return factory->QueryInterface(riid, ppv);
}

}  // namespace profharness
