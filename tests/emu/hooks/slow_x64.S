/* x64 hooks of issue 19's misfires and of the slow path (tests/emu/test_hookcheck.py, kinds enter2, fast
 * and slow). A slow-path hook (FunctionEnter3WithInfo) is an ordinary System V function
 *   void enter3withinfo(FunctionIDOrClientID id, COR_PRF_ELT_INFO eltInfo);      (RDI, RSI)
 * called by the runtime's stub, so it may call libc and ICorProfilerInfo. `fail` jumps to an address the
 * hook makes up (0xdead0000): an FE2-06 finding, where a hook checks what the checker answered.
 */
        .text

.macro HOOK name
        .globl  \name
        .type   \name, @function
\name:
.endm

fail:
        movabsq $0xdead0000, %rax
        jmp     *%rax

HOOK calls_printf               /* slow: emulated (returns 0); fast and enter2: FE2-12 */
        subq    $8, %rsp                /* 16-byte aligned at the call */
        leaq    message(%rip), %rdi
        xorl    %eax, %eax
        call    printf@PLT
        testl   %eax, %eax              /* the emulated call returned 0 */
        jnz     fail
        addq    $8, %rsp
        ret

HOOK clobbers_rbx_after_printf  /* slow: FE2-08 RBX, after an emulated call */
        subq    $8, %rsp
        leaq    message(%rip), %rdi
        xorl    %eax, %eax
        call    printf@PLT
        notq    %rbx
        addq    $8, %rsp
        ret

HOOK printf_misaligned          /* slow: FE2-09, RSP + 8 = 8 mod 16 at the call to printf */
        leaq    message(%rip), %rdi
        xorl    %eax, %eax
        call    printf@PLT
        ret

HOOK uses_rcx_after_printf      /* slow: FE2-06, RCX is garbage after the call */
        pushq   %rbx
        leaq    counters(%rip), %rcx
        leaq    message(%rip), %rdi
        xorl    %eax, %eax
        call    printf@PLT
        movq    (%rcx), %rax
        popq    %rbx
        ret

/* The misfire: an argument pointer the emulator never gave. The COR_PRF_ELT_INFO handle is opaque: the
 * hook reads its first word and then 8 bytes past it (0 + 8): not emulated, never FE2-06. */
HOOK reads_through_elt_info
        movq    (%rsi), %rax
        movq    8(%rax), %rax
        ret

/* The misfire: a global only the profiler's Initialize sets (zero in the file), read 8 bytes in. */
HOOK reads_through_global
        movq    profiler(%rip), %rax
        movq    8(%rax), %rax
        ret

/* The checker learns where the ICorProfilerInfo pointer lives: the latest zero loaded before the vtable
 * read faults is `counter`'s, not `info`'s; the checker tries `counter`, sees its stand-in unused, drops it
 * and finds `info`. Release (IUnknown's slot 2) answers 1 and `counter` is 0 at the start of every run. */
HOOK learns_info_past_a_counter
        pushq   %rbx
        movq    info(%rip), %rbx        /* ICorProfilerInfo*: set by Initialize, zero in the file */
        movq    counter(%rip), %rax     /* another zero, loaded after it */
        testq   %rax, %rax
        jnz     fail
        movq    (%rbx), %rcx            /* the vtable */
        movq    %rbx, %rdi
        call    *16(%rcx)               /* Release */
        cmpl    $1, %eax
        jne     fail
        incq    counter(%rip)
        popq    %rbx
        ret

        .section .rodata
message:
        .string "entered\n"

        .bss
        .align  8
        .type   profiler, @object
        .size   profiler, 8
profiler:
        .zero   8
        .type   info, @object
        .size   info, 8
info:
        .zero   8
        .type   counter, @object
        .size   counter, 8
counter:
        .zero   8
counters:
        .zero   16

        .section .note.GNU-stack,"",@progbits
