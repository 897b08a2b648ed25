// native_seed: one fault, DSS-19: from the first ExceptionThrown it walks its own stack seeded with a
// register context whose instruction pointer is in the profiler's own (native) code instead of walking
// down to the first managed frame first.
#include <atomic>
#include <cstring>

#include "fixture.h"

using namespace fixture;

namespace {

HRESULT frame(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void*) { return S_OK; }

alignas(64) unsigned char seed[kContextBufferSize];

class NativeSeed final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    __attribute__((noinline)) HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        if (done_.exchange(true)) return S_OK;
        std::memset(seed, 0, sizeof seed);
        std::uint64_t rip = reinterpret_cast<std::uint64_t>(&frame);  // native code: not JIT-compiled
        std::uint64_t rsp = reinterpret_cast<std::uint64_t>(__builtin_frame_address(0));
        std::uint64_t rbp = rsp;
        std::uint32_t flags = 0x00100001u;  // CONTEXT_AMD64 | CONTEXT_CONTROL
        std::memcpy(seed + offsetof(AMD64Context, ContextFlags), &flags, 4);
        std::memcpy(seed + kContextRipOffset, &rip, 8);
        std::memcpy(seed + kContextRspOffset, &rsp, 8);
        std::memcpy(seed + kContextRbpOffset, &rbp, 8);
        info->DoStackSnapshot(0, &frame, COR_PRF_SNAPSHOT_DEFAULT, nullptr, seed,
                              static_cast<ULONG32>(sizeof seed));  // the fault
        return S_OK;
    }

 private:
    std::atomic<bool> done_{false};
};

}  // namespace

FIXTURE_EXPORT(NativeSeed)
