// fast_hook_gc: one fault, FE2-11: its fast-path FunctionEnter3 hook (SetEnterLeaveFunctionHooks3, called
// straight from JIT code) calls ForceGC (a call that triggers a garbage collection) the first time it runs.
// The validator sees the call inside the hook only because the proxy wraps fast-path hooks too. Being a
// fast-path hook, it keeps every register: an assembly stub saves the volatile ones around the C++ body,
// as profilers write such hooks.
#include <atomic>

#include "fixture.h"

using namespace fixture;

namespace {

ICorProfilerInfo10* g_info = nullptr;
std::atomic<bool> g_done{false};

}  // namespace

extern "C" __attribute__((visibility("hidden"), used)) void fast_hook_gc_enter_body(FunctionIDOrClientID) {
    if (g_info && !g_done.exchange(true)) g_info->ForceGC();  // the fault
}
extern "C" void fast_hook_gc_enter(FunctionIDOrClientID);
extern "C" void fast_hook_gc_nothing(FunctionIDOrClientID);

// fast_hook_gc_enter: rbp frame; rax rcx rdx rsi rdi r8-r11 and xmm0-7 saved around the body (16-aligned
// calls); fast_hook_gc_nothing: the leave and tailcall hooks, which do nothing and so keep every register
asm(".text\n .p2align 4\n .globl fast_hook_gc_enter\n .type fast_hook_gc_enter, @function\n"
    "fast_hook_gc_enter:\n"
    " .cfi_startproc\n pushq %rbp\n .cfi_def_cfa_offset 16\n .cfi_offset %rbp, -16\n"
    " movq %rsp, %rbp\n .cfi_def_cfa_register %rbp\n subq $0xd0, %rsp\n"
    " movq %rax, 0x00(%rsp)\n movq %rcx, 0x08(%rsp)\n movq %rdx, 0x10(%rsp)\n movq %rsi, 0x18(%rsp)\n"
    " movq %rdi, 0x20(%rsp)\n movq %r8, 0x28(%rsp)\n movq %r9, 0x30(%rsp)\n movq %r10, 0x38(%rsp)\n"
    " movq %r11, 0x40(%rsp)\n movups %xmm0, 0x50(%rsp)\n movups %xmm1, 0x60(%rsp)\n"
    " movups %xmm2, 0x70(%rsp)\n movups %xmm3, 0x80(%rsp)\n movups %xmm4, 0x90(%rsp)\n"
    " movups %xmm5, 0xa0(%rsp)\n movups %xmm6, 0xb0(%rsp)\n movups %xmm7, 0xc0(%rsp)\n"
    " call fast_hook_gc_enter_body\n"
    " movq 0x00(%rsp), %rax\n movq 0x08(%rsp), %rcx\n movq 0x10(%rsp), %rdx\n movq 0x18(%rsp), %rsi\n"
    " movq 0x20(%rsp), %rdi\n movq 0x28(%rsp), %r8\n movq 0x30(%rsp), %r9\n movq 0x38(%rsp), %r10\n"
    " movq 0x40(%rsp), %r11\n movups 0x50(%rsp), %xmm0\n movups 0x60(%rsp), %xmm1\n"
    " movups 0x70(%rsp), %xmm2\n movups 0x80(%rsp), %xmm3\n movups 0x90(%rsp), %xmm4\n"
    " movups 0xa0(%rsp), %xmm5\n movups 0xb0(%rsp), %xmm6\n movups 0xc0(%rsp), %xmm7\n"
    " leave\n .cfi_def_cfa %rsp, 8\n ret\n .cfi_endproc\n .size fast_hook_gc_enter, .-fast_hook_gc_enter\n"
    " .p2align 4\n .globl fast_hook_gc_nothing\n .type fast_hook_gc_nothing, @function\n"
    "fast_hook_gc_nothing:\n .cfi_startproc\n ret\n .cfi_endproc\n"
    " .size fast_hook_gc_nothing, .-fast_hook_gc_nothing\n");

namespace {

class FastHookGc final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        HRESULT hr = take_info(unk, COR_PRF_MONITOR_ENTERLEAVE);  // no argument, retval or frame info: fast path
        if (hr != S_OK) return hr;
        g_info = info;
        return info->SetEnterLeaveFunctionHooks3(&fast_hook_gc_enter, &fast_hook_gc_nothing, &fast_hook_gc_nothing);
    }
};

}  // namespace

FIXTURE_EXPORT(FastHookGc)
