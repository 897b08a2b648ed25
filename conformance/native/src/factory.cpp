// COM activation: DllGetClassObject and the class factory (profharness/class_factory.h) that hands out the
// one Probe.
#include "exports.h"
#include "profharness/class_factory.h"
#include "profiler.h"

namespace profharness {
namespace {

// CORECLR_PROFILER (conformance/core/probe.py CLSID).
constexpr GUID kProbeClsid = {0x8C3B5D2E, 0x6F4A, 0x4B1C, {0x9E, 0x7D, 0x2A, 0x5F, 0x3C, 0x1B, 0x0D, 0x9E}};

HRESULT create_probe(REFIID riid, void** ppv) { return the_probe().QueryInterface(riid, ppv); }

}  // namespace
}  // namespace profharness

using namespace profharness;

PROFHARNESS_EXPORT HRESULT DllGetClassObject(REFCLSID rclsid, REFIID riid, void** ppv) {
    return class_object<create_probe>(&kProbeClsid, rclsid, riid, ppv);
}
