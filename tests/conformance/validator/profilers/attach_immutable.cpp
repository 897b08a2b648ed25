// attach_immutable: one fault, ATT-01: an allocation profiler made attachable by adding InitializeForAttach
// to what its Initialize did. Its attach asks for the same events as at startup, among them
// COR_PRF_ENABLE_OBJECT_ALLOCATED and COR_PRF_MONITOR_OBJECT_ALLOCATED, which COR_PRF_ALLOWABLE_AFTER_ATTACH
// does not contain (COR_PRF_ENABLE_OBJECT_ALLOCATED is one of COR_PRF_MONITOR_IMMUTABLE: "can be set only
// during initialization"). The runtime refuses the mask; the profiler passes the failure on, so the attach
// fails with it.
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

constexpr DWORD kEvents = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_OBJECT_ALLOCATED |
                          COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_GC;

class AttachImmutable final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, kEvents); }
    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown* unk, void*, UINT) override {
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info));
        if (hr != S_OK) return hr;
        return info->SetEventMask2(kEvents, 0);  // the fault: immutable and not allowable after attach
    }
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID) override {
        allocations_.fetch_add(1);
        return S_OK;
    }

 private:
    std::atomic<long> allocations_{0};
};

}  // namespace

FIXTURE_EXPORT(AttachImmutable)
