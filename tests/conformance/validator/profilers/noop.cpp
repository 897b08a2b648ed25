// noop: a do-nothing profiler that asks for many callbacks (bench/proxy.py's baseline): GC, threads,
// exceptions, class and module loads, JIT compilation, object allocations. Every callback returns S_OK.
#include "fixture.h"

using namespace fixture;

namespace {

class Noop final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_GC | COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_EXCEPTIONS |
                                  COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_MODULE_LOADS |
                                  COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_OBJECT_ALLOCATED |
                                  COR_PRF_ENABLE_OBJECT_ALLOCATED);
    }
};

}  // namespace

FIXTURE_EXPORT(Noop)
