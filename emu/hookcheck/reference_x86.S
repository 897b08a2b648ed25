/* The x86 reference FunctionEnter2 hook: naked, __stdcall, keeps every rule of FunctionEnter2.md.
 *
 *   void __stdcall reference_enter2(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func,
 *                                   COR_PRF_FUNCTION_ARGUMENT_INFO *argumentInfo);
 *
 * FE2-06: naked, so at the first instruction [ESP] is the return address and the parameters are at
 * ESP+4..ESP+16. FE2-07/08: it saves EFLAGS and every general register (pushfl, pushal) and the whole
 * x87/SSE state (fxsave: R0-R7, control/status/tag words, MXCSR, XMM0-7) before it uses any of them, and
 * restores them before it returns. FE2-09: `ret $16` pops the four parameters.
 *
 * Between the save and the restore it uses what a real hook uses: its parameters, the argument ranges
 * (numRanges read through argumentInfo), x87 and SSE arithmetic, a helper in the same object called through
 * a function pointer in .data (an R_386_RELATIVE relocation) and a counter in .bss reached via the GOT.
 */
        .text

        .type   get_pc_ecx, @function
get_pc_ecx:
        movl    (%esp), %ecx
        ret
        .size   get_pc_ecx, .-get_pc_ecx

/* count_enter(eax = funcId, edx = numRanges): enter_count += 1, last = funcId ^ numRanges. */
        .type   count_enter, @function
count_enter:
        pushl   %ebx
        call    get_pc_ecx
        addl    $_GLOBAL_OFFSET_TABLE_, %ecx
        movl    counters_ptr@GOTOFF(%ecx), %ebx
        incl    (%ebx)
        xorl    %edx, %eax
        movl    %eax, 4(%ebx)
        popl    %ebx
        ret
        .size   count_enter, .-count_enter

        .globl  reference_enter2
        .type   reference_enter2, @function
reference_enter2:
        pushfl                          /* FE2-07: EFLAGS */
        pushal                          /* FE2-07/08: EAX ECX EDX EBX ESP EBP ESI EDI */
        movl    %esp, %ebp              /* ebp: 36 bytes below the return address */
        subl    $528, %esp
        andl    $-16, %esp
        fxsave  (%esp)                  /* FE2-08: x87, MXCSR, XMM0-7 */
        cld
        fninit
        movl    40(%ebp), %eax          /* funcId */
        xorl    %edx, %edx
        movl    52(%ebp), %ecx          /* argumentInfo */
        testl   %ecx, %ecx
        jz      1f
        movl    (%ecx), %edx            /* argumentInfo->numRanges */
1:      movl    %eax, 512(%esp)
        fildl   512(%esp)               /* x87: funcId + 1.0 */
        fld1
        faddp
        fistpl  516(%esp)
        movd    %eax, %xmm0             /* SSE: funcId * 2 */
        paddd   %xmm0, %xmm0
        movd    %xmm0, %esi
        call    get_pc_ecx
        addl    $_GLOBAL_OFFSET_TABLE_, %ecx
        call    *count_fn@GOTOFF(%ecx)  /* the helper, through an R_386_RELATIVE pointer */
        fxrstor (%esp)
        movl    %ebp, %esp
        popal
        popfl
        ret     $16                     /* FE2-09 */
        .size   reference_enter2, .-reference_enter2

        .data
        .align  4
counters_ptr:
        .long   counters
count_fn:
        .long   count_enter

        .bss
        .align  4
counters:
        .zero   8

        .section .note.GNU-stack,"",@progbits
