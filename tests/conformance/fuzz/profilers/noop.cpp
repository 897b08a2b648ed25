// noop: a do-nothing profiler that asks for every event the fuzzer makes (bench/fuzz.py's baseline).
#include "fixture.h"

using namespace fixture;

namespace {

class Noop final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_GC | COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_EXCEPTIONS |
                                  COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_MODULE_LOADS |
                                  COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_OBJECT_ALLOCATED |
                                  COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_SUSPENDS);
    }
};

}  // namespace

FIXTURE_EXPORT(Noop)
