// repeated_fault: one fault, BUF-04, made 30,000 times at one call site: on the first module load it asks
// for the module's name 30,000 times with a NULL buffer but a non-zero size (a loop a profiler might run
// over a cache). The validator must show it as one group of 30,000 at that source line, not 30,000 lines.
#include "fixture.h"

using namespace fixture;

namespace {

constexpr int kTimes = 30000;

class RepeatedFault final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_MODULE_LOADS);
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT) override {
        if (done_.exchange(true)) return S_OK;
        for (int k = 0; k < kTimes; ++k) ask_name(mod);
        return S_OK;
    }

 private:
    __attribute__((noinline)) void ask_name(ModuleID mod) {
        ULONG need = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        info->GetModuleInfo(mod, &base, 256, &need, nullptr, &assembly);  // REPEATED-FAULT-LINE
    }
    std::atomic<bool> done_{false};
};

}  // namespace

FIXTURE_EXPORT(RepeatedFault)
