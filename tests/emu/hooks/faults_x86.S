/* x86 FunctionEnter2 hooks with exactly one planted fault each (tests/emu/test_hookcheck.py).
 *
 * Every hook is the reference hook's skeleton (save EFLAGS, the general registers and the x87/SSE state,
 * restore them, `ret $16`) with one change, placed so that it breaks its rule in every random state:
 * `notl`, `leal 1(...)`, `cmc` always change their register (and no other); `fld1` always moves TOP; the control words are
 * XORed with a non-zero mask.
 */
        .text

.macro SAVE
        pushfl
        pushal
        movl    %esp, %ebp
        subl    $528, %esp
        andl    $-16, %esp
        fxsave  (%esp)
        cld
.endm

.macro RESTORE
        fxrstor (%esp)
        movl    %ebp, %esp
        popal
        popfl
.endm

.macro HOOK name
        .globl  \name
        .type   \name, @function
\name:
.endm

HOOK x86_ok                     /* no fault: the control case */
        SAVE
        movl    40(%ebp), %eax
        notl    %ebx
        fld1
        pxor    %xmm3, %xmm3
        RESTORE
        ret     $16

HOOK x86_clobbers_ebx           /* FE2-08 */
        SAVE
        RESTORE
        notl    %ebx
        ret     $16

HOOK x86_clobbers_esi           /* FE2-08 */
        SAVE
        RESTORE
        leal    1(%esi), %esi
        ret     $16

HOOK x86_clobbers_edi           /* FE2-08 */
        SAVE
        RESTORE
        notl    %edi
        ret     $16

HOOK x86_clobbers_ebp           /* FE2-08 */
        SAVE
        RESTORE
        leal    4(%ebp), %ebp
        ret     $16

HOOK x86_clobbers_eax           /* FE2-07: the EE saves no registers, not even EAX */
        SAVE
        RESTORE
        notl    %eax
        ret     $16

HOOK x86_clobbers_eflags        /* a note, not FE2-07: CF flipped (the JIT's call does not rely on it) */
        SAVE
        RESTORE
        cmc
        ret     $16

HOOK x86_leaves_df_set          /* FE2-07: DF set on return (clear at every call and return) */
        SAVE
        RESTORE
        std
        ret     $16

/* The misfire of issue 19: a hook that keeps every register but whose frame set-up (`sub esp`/`add esp`)
 * changes the status flags, which the JIT's call does not rely on: a note, never a finding. */
HOOK x86_sub_add_esp
        pushl   %ebp
        movl    %esp, %ebp
        subl    $16, %esp
        movl    $0, (%esp)              /* a local */
        addl    $16, %esp
        popl    %ebp
        ret     $16

HOOK x86_reads_tls              /* not emulated: gs-relative thread-local storage the emulator did not set up */
        pushl   %eax
        movl    %gs:0, %eax
        popl    %eax
        ret     $16

HOOK x86_pushes_x87             /* FE2-08: the x87 stack changed (one more value, TOP moved) */
        SAVE
        RESTORE
        fld1
        ret     $16

HOOK x86_changes_fpu_control    /* FE2-08: the x87 control word's rounding bits flipped */
        SAVE
        RESTORE
        pushfl
        subl    $4, %esp
        fnstcw  (%esp)
        xorw    $0x0c00, (%esp)
        fldcw   (%esp)
        addl    $4, %esp
        popfl
        ret     $16

HOOK x86_clobbers_xmm3          /* FE2-08 */
        SAVE
        RESTORE
        paddd   %xmm3, %xmm3
        ret     $16

HOOK x86_changes_mxcsr          /* FE2-08: rounding control flipped */
        SAVE
        RESTORE
        pushfl
        subl    $4, %esp
        stmxcsr (%esp)
        xorl    $0x6000, (%esp)
        ldmxcsr (%esp)
        addl    $4, %esp
        popfl
        ret     $16

HOOK x86_ret_without_16         /* FE2-09: cdecl-style return */
        SAVE
        RESTORE
        ret

HOOK x86_ret_12                 /* FE2-09: one parameter left on the stack */
        SAVE
        RESTORE
        ret     $12

HOOK x86_loops_forever          /* FE2-10 */
1:      jmp     1b

HOOK x86_jumps_to_unmapped      /* FE2-06 */
        movl    $0xdead0000, %eax
        jmp     *%eax

HOOK x86_writes_caller_frame    /* FE2-06: above its four parameters */
        movl    $0, 24(%esp)
        ret     $16

HOOK x86_calls_printf           /* FE2-12: a call to libc */
        SAVE
        call    1f
1:      popl    %ebx
        addl    $_GLOBAL_OFFSET_TABLE_+[.-1b], %ebx
        leal    message@GOTOFF(%ebx), %eax
        pushl   %eax
        call    printf@PLT
        addl    $4, %esp
        RESTORE
        ret     $16

        .section .rodata
message:
        .string "entered\n"

        .section .note.GNU-stack,"",@progbits
