// bad_hook: one fault, FE2-08: its FunctionEnter2 hook (hand-written assembly) zeroes RBX, a callee-saved
// register, and returns. It registers the hooks with SetEnterLeaveFunctionHooks2 but does not ask for
// enter/leave events, so the hook never runs live: the validator finds the fault in its machine code.
#include "fixture.h"

using namespace fixture;

extern "C" void fixture_bad_enter2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*);
asm(".text\n"
    ".globl fixture_bad_enter2\n"
    ".type fixture_bad_enter2, @function\n"
    "fixture_bad_enter2:\n"
    "    xorl %ebx, %ebx\n"  // the fault
    "    ret\n"
    ".size fixture_bad_enter2, .-fixture_bad_enter2\n");

namespace {

void leave2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*) {}
void tailcall2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO) {}

class BadHook final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS);
        if (hr != S_OK) return hr;
        return info->SetEnterLeaveFunctionHooks2(&fixture_bad_enter2, &leave2, &tailcall2);
    }
};

}  // namespace

FIXTURE_EXPORT(BadHook)
