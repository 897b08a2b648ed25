// COM activation: DllGetClassObject and the class factory that hands out the one Probe.
#include "exports.h"
#include "profiler.h"

namespace profharness {

namespace {

// CORECLR_PROFILER (conformance/core/probe.py CLSID).
constexpr GUID kProbeClsid = {0x8C3B5D2E, 0x6F4A, 0x4B1C, {0x9E, 0x7D, 0x2A, 0x5F, 0x3C, 0x1B, 0x0D, 0x9E}};

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
        return the_probe().QueryInterface(riid, ppv);
    }
    HRESULT STDMETHODCALLTYPE LockServer(BOOL) override { return S_OK; }
};

}  // namespace

}  // namespace profharness

using namespace profharness;

PROFHARNESS_EXPORT HRESULT DllGetClassObject(REFCLSID rclsid, REFIID riid, void** ppv) {
    if (!ppv) return E_POINTER;
    *ppv = nullptr;
    if (!(rclsid == kProbeClsid)) return CLASS_E_CLASSNOTAVAILABLE;
    static ClassFactory* factory = new ClassFactory();
    return factory->QueryInterface(riid, ppv);
}
