// Trampolines around the profiler's fast-path hooks (SetEnterLeaveFunctionHooks3: FunctionEnter3,
// FunctionLeave3, FunctionTailcall3). JIT code calls these hooks directly, with live values in registers the
// System V ABI calls volatile (argument registers, rax/rdx and xmm0/xmm1 holding a return value at a leave),
// so a wrapper in C++ cannot stand in for them. Each trampoline:
//
//   1. saves every volatile register (rax rcx rdx rsi rdi r8-r11, xmm0-xmm15) in its frame and calls
//      profharness_proxy_hook3_begin(kind, functionIDOrClientID), which opens the hook's frame on this
//      thread (objects.cpp): calls the profiler makes inside the hook are recorded inside it;
//   2. restores them and calls the profiler's hook with the registers exactly as the JIT code left them
//      (the stack is deeper, and aligned as at any call);
//   3. saves them again (the hook's own answer: the return value a leave must keep) and calls
//      profharness_proxy_hook3_end(), which closes the frame; restores them and returns to the JIT code.
//
// The proxy's C++ code is built for x86-64 without AVX, so the upper halves of the ymm registers are never
// touched. CFI describes the frame (rbp-based), so the runtime's unwinder can walk through a trampoline when
// the profiler walks its own stack from inside a hook. Other architectures hand the hooks over unwrapped
// (kFastHookTrampolines is false).
#include "proxy.h"

extern "C" {
__attribute__((used)) void* profharness_proxy_hook3_target[3] = {nullptr, nullptr, nullptr};
}

#if defined(__x86_64__)

// frame below rbp: 0x150 bytes, 16-aligned; gprs at rsp+0x00..0x40, xmm0..15 at rsp+0x50..0x140
#define PH_SAVE                                                                                         \
    "movq %rax, 0x00(%rsp)\n movq %rcx, 0x08(%rsp)\n movq %rdx, 0x10(%rsp)\n movq %rsi, 0x18(%rsp)\n"  \
    "movq %rdi, 0x20(%rsp)\n movq %r8, 0x28(%rsp)\n movq %r9, 0x30(%rsp)\n movq %r10, 0x38(%rsp)\n"    \
    "movq %r11, 0x40(%rsp)\n"                                                                           \
    "movups %xmm0, 0x50(%rsp)\n movups %xmm1, 0x60(%rsp)\n movups %xmm2, 0x70(%rsp)\n"                 \
    "movups %xmm3, 0x80(%rsp)\n movups %xmm4, 0x90(%rsp)\n movups %xmm5, 0xa0(%rsp)\n"                 \
    "movups %xmm6, 0xb0(%rsp)\n movups %xmm7, 0xc0(%rsp)\n movups %xmm8, 0xd0(%rsp)\n"                 \
    "movups %xmm9, 0xe0(%rsp)\n movups %xmm10, 0xf0(%rsp)\n movups %xmm11, 0x100(%rsp)\n"              \
    "movups %xmm12, 0x110(%rsp)\n movups %xmm13, 0x120(%rsp)\n movups %xmm14, 0x130(%rsp)\n"           \
    "movups %xmm15, 0x140(%rsp)\n"
#define PH_RESTORE                                                                                      \
    "movq 0x00(%rsp), %rax\n movq 0x08(%rsp), %rcx\n movq 0x10(%rsp), %rdx\n movq 0x18(%rsp), %rsi\n"  \
    "movq 0x20(%rsp), %rdi\n movq 0x28(%rsp), %r8\n movq 0x30(%rsp), %r9\n movq 0x38(%rsp), %r10\n"    \
    "movq 0x40(%rsp), %r11\n"                                                                           \
    "movups 0x50(%rsp), %xmm0\n movups 0x60(%rsp), %xmm1\n movups 0x70(%rsp), %xmm2\n"                 \
    "movups 0x80(%rsp), %xmm3\n movups 0x90(%rsp), %xmm4\n movups 0xa0(%rsp), %xmm5\n"                 \
    "movups 0xb0(%rsp), %xmm6\n movups 0xc0(%rsp), %xmm7\n movups 0xd0(%rsp), %xmm8\n"                 \
    "movups 0xe0(%rsp), %xmm9\n movups 0xf0(%rsp), %xmm10\n movups 0x100(%rsp), %xmm11\n"              \
    "movups 0x110(%rsp), %xmm12\n movups 0x120(%rsp), %xmm13\n movups 0x130(%rsp), %xmm14\n"           \
    "movups 0x140(%rsp), %xmm15\n"

#define PH_TRAMPOLINE(name, kind, slot)                                                   \
    ".text\n .p2align 4\n .globl " name "\n .hidden " name "\n .type " name ", @function\n" \
    name ":\n"                                                                            \
    " .cfi_startproc\n"                                                                   \
    " pushq %rbp\n .cfi_def_cfa_offset 16\n .cfi_offset %rbp, -16\n"                      \
    " movq %rsp, %rbp\n .cfi_def_cfa_register %rbp\n"                                     \
    " subq $0x150, %rsp\n" PH_SAVE                                                        \
    " movq %rdi, %rsi\n movl $" kind ", %edi\n call profharness_proxy_hook3_begin\n"      \
    PH_RESTORE                                                                            \
    " call *profharness_proxy_hook3_target+" slot "(%rip)\n" PH_SAVE                      \
    " call profharness_proxy_hook3_end\n" PH_RESTORE                                      \
    " leave\n .cfi_def_cfa %rsp, 8\n ret\n"                                               \
    " .cfi_endproc\n .size " name ", .-" name "\n"

asm(PH_TRAMPOLINE("profharness_proxy_enter3_tramp", "0", "0")
    PH_TRAMPOLINE("profharness_proxy_leave3_tramp", "1", "8")
    PH_TRAMPOLINE("profharness_proxy_tail3_tramp", "2", "16"));

#endif
