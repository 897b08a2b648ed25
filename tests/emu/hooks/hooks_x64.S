/* x64 (System V) FunctionEnter2 hooks: one correct hook and hooks with exactly one planted fault each
 * (tests/emu/test_hookcheck.py). The hook is an ordinary System V function
 *   void enter2(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func,
 *               COR_PRF_FUNCTION_ARGUMENT_INFO *argumentInfo);     (RDI, RSI, RDX, RCX)
 */
        .text

.macro HOOK name
        .globl  \name
        .type   \name, @function
\name:
.endm

/* record(rdi = funcId, rsi = numRanges): a helper in the same object, reached through a pointer in .data
 * (an R_X86_64_RELATIVE relocation); keeps a count and the last funcId in .bss */
        .type   record, @function
record:
        movq    counters_ptr(%rip), %rax
        incq    (%rax)
        xorq    %rsi, %rdi
        movq    %rdi, 8(%rax)
        ret
        .size   record, .-record

/* The correct hook: saves the callee-saved registers it uses, calls the helper on a 16-byte aligned
 * stack, uses scratch registers, SSE and the x87 stack (left empty) freely. */
HOOK x64_ok
        pushq   %rbx
        pushq   %r12                    /* entry RSP = 8 mod 16; two pushes: 8 mod 16 */
        subq    $24, %rsp               /* 16 + 8 -> 0 mod 16 at the call */
        movq    %rdi, %rbx
        xorl    %esi, %esi
        testq   %rcx, %rcx
        jz      1f
        movl    (%rcx), %esi            /* argumentInfo->numRanges */
1:      movq    %rsi, %r12
        movq    %rbx, (%rsp)
        fildq   (%rsp)                  /* x87: funcId + 1.0, popped again */
        fld1
        faddp
        fistpq  8(%rsp)
        movq    %rbx, %xmm0             /* SSE: scratch */
        paddq   %xmm0, %xmm0
        pxor    %xmm15, %xmm15
        stmxcsr (%rsp)                  /* MXCSR status flags are scratch: set PE */
        orl     $0x20, (%rsp)
        ldmxcsr (%rsp)
        movq    %rbx, %rdi
        movq    %r12, %rsi
        call    *record_fn(%rip)
        xorl    %ecx, %ecx              /* more scratch: RCX, R8-R11 */
        movq    $-1, %r8
        movq    %r8, %r11
        addq    $24, %rsp
        popq    %r12
        popq    %rbx
        ret
        .size   x64_ok, .-x64_ok

.macro CLOBBER name, insn
HOOK \name
        \insn
        ret
.endm

CLOBBER x64_clobbers_rbx, "notq %rbx"
CLOBBER x64_clobbers_rbp, "notq %rbp"
CLOBBER x64_clobbers_r12, "notq %r12"
CLOBBER x64_clobbers_r13, "notq %r13"
CLOBBER x64_clobbers_r14, "notq %r14"
CLOBBER x64_clobbers_r15, "notq %r15"

HOOK x64_misaligned_call        /* FE2-09 (System V reading): RSP = 8 mod 16 at the call */
        call    record
        ret

HOOK x64_changes_fpu_control    /* FE2-08: the x87 control word's rounding bits flipped */
        subq    $8, %rsp
        fnstcw  (%rsp)
        xorw    $0x0c00, (%rsp)
        fldcw   (%rsp)
        addq    $8, %rsp
        ret

HOOK x64_changes_mxcsr_control  /* FE2-08: MXCSR rounding control flipped */
        subq    $8, %rsp
        stmxcsr (%rsp)
        xorl    $0x6000, (%rsp)
        ldmxcsr (%rsp)
        addq    $8, %rsp
        ret

HOOK x64_leaves_df_set          /* FE2-08: DF set on return */
        std
        ret

HOOK x64_leaves_x87_value       /* FE2-08: the x87 stack is not empty on return */
        fld1
        ret

HOOK x64_ret_8                  /* FE2-09: pops 8 bytes that are not its own */
        ret     $8

HOOK x64_loops_forever          /* FE2-10 */
1:      jmp     1b

HOOK x64_jumps_to_unmapped      /* FE2-06 */
        movabsq $0xdead0000, %rax
        jmp     *%rax

HOOK x64_writes_caller_frame    /* FE2-06: above its return address */
        movq    $0, 16(%rsp)
        ret

HOOK x64_calls_printf           /* FE2-12: a call to libc (on an aligned stack) */
        subq    $8, %rsp
        leaq    message(%rip), %rdi
        xorl    %eax, %eax
        call    printf@PLT
        addq    $8, %rsp
        ret

        .section .rodata
message:
        .string "entered\n"

        .data
        .align  8
counters_ptr:
        .quad   counters
record_fn:
        .quad   record

        .bss
        .align  8
counters:
        .zero   16

        .section .note.GNU-stack,"",@progbits
