// withinfo_bad_hook: one fault, FE2-08: its FunctionEnter3WithInfo hook (hand-written assembly, an ordinary
// C function as the runtime's stub calls it) prints a line with printf, which a slow-path hook may do, then
// zeroes RBX, a callee-saved register, and returns. It registers the hooks with
// SetEnterLeaveFunctionHooks3WithInfo (which needs a slow-path flag: COR_PRF_ENABLE_FRAME_INFO) but does not
// ask for enter/leave events, so the hook never runs live: the validator finds the fault in its machine code
// (issue 19: WithInfo hooks were not checked at all, and a printf in one was FE2-12).
#include "fixture.h"

using namespace fixture;

extern "C" void fixture_withinfo_bad_enter(FunctionIDOrClientID, COR_PRF_ELT_INFO);
asm(".text\n"
    ".globl fixture_withinfo_bad_enter\n"
    ".type fixture_withinfo_bad_enter, @function\n"
    "fixture_withinfo_bad_enter:\n"
    "    subq $8, %rsp\n"  // 16-byte aligned at the call
    "    leaq .Lwithinfo_bad_message(%rip), %rdi\n"
    "    xorl %eax, %eax\n"
    "    call printf@PLT\n"
    "    addq $8, %rsp\n"
    "    xorl %ebx, %ebx\n"  // the fault
    "    ret\n"
    ".size fixture_withinfo_bad_enter, .-fixture_withinfo_bad_enter\n"
    ".section .rodata\n"
    ".Lwithinfo_bad_message: .string \"enter\\n\"\n"
    ".text\n");

namespace {

void leave(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}
void tailcall(FunctionIDOrClientID, COR_PRF_ELT_INFO) {}

class WithInfoBadHook final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_FRAME_INFO);
        if (hr != S_OK) return hr;
        return info->SetEnterLeaveFunctionHooks3WithInfo(&fixture_withinfo_bad_enter, &leave, &tailcall);
    }
};

}  // namespace

FIXTURE_EXPORT(WithInfoBadHook)
