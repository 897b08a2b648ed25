/* emu test fixture, 32-bit x86 (gcc -m32): a native program standing for a thread the emulator must unwind.
 *
 * Frames (leaf first) at the chosen stop points, with how each must be unwound:
 *   stub      anonymous executable memory, no unwind information: mov eax, c_leaf; jmp eax (tail call)
 *   stub_ret  (mode "ret") anonymous code, no unwind information, that returns to its caller
 *   c_leaf    (stopped inside it, or reached from the stub) no frame pointer: CFI
 *   c_deep    (mode "deep": DEEP copies) no frame pointer: CFI
 *   c_helper  no frame pointer: CFI
 *   jit C     (mode "scan") "managed" code with a JIT map entry that saves EBP with `push ebp`, then uses
 *             it as a data pointer (an EBP-less frame): the frame-pointer chain through it gives no code
 *             address, its caller is found by scanning the stack
 *   jit B     "managed" code in anonymous executable memory with a JIT map entry: frame-pointer chain
 *   jit A     the same
 *   c_outer   frame pointer, reached from managed code through the frame-pointer chain, then CFI
 *   run       frame pointer: CFI
 *   main      (the program's own record ends here: gcc realigns main's stack on i386, and
 *             __builtin_dwarf_cfa() in main gives the realigned frame's address, not the CFA)
 *
 * Each C function records, on entry, its return address and CFA (the caller's SP after the return) in
 * `truth`; the JIT code records its EBP (or its CFA, jit C) and return address, the returning stub its
 * return address and CFA. The program runs the chain once (so that the functions the stopped pass has not
 * entered yet have recorded too: their call sites and stack depths are the same), prints its addresses as
 * one JSON line, and spins until a tracer sets `go`; the second pass runs into the tracer's breakpoint,
 * where the tracer reads `truth`: the ground truth of the stopped stack.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define NOFP __attribute__((noinline, noclone, optimize("omit-frame-pointer")))
#define WITHFP __attribute__((noinline, noclone, optimize("no-omit-frame-pointer")))
#define DEEP 32

struct rec { uint32_t ret, cfa; };
/* the layout the tracer reads: 5 + DEEP + 1 records, then the three JIT slots */
struct truth {
    struct rec leaf, helper, outer, run, stub_ret, deep[DEEP + 1];
    uint32_t slot_a[2], slot_b[2], slot_c[2];
};
volatile struct truth truth;
volatile int go;
static int mode; /* 0 plain, 1 deep, 2 ret, 3 scan */
/* what a "managed" method is given: the method to call, that method's link, where to record itself */
struct link { uint32_t fn; struct link *next; volatile uint32_t *slot; };
static struct link link_a, link_b, link_c;
static long (*volatile stub_fn)(void);
static long (*volatile stub_ret_fn)(void);
static long (*volatile jit_a)(struct link *);
extern char leaf_point[];

#define RECORD(r) do { (r).ret = (uint32_t)(uintptr_t)__builtin_return_address(0); \
                       (r).cfa = (uint32_t)(uintptr_t)__builtin_dwarf_cfa(); } while (0)

NOFP long c_leaf(void) {
    volatile char buf[200];
    RECORD(truth.leaf);
    memset((char *)buf, 1, sizeof buf);
    __asm__ volatile(".globl leaf_point\nleaf_point:\n");
    return buf[7];
}

NOFP long c_deep(int n) {
    RECORD(truth.deep[n]);
    if (n == 0) return stub_fn() + 1;
    return c_deep(n - 1) + 1;
}

NOFP long c_helper(void) {
    RECORD(truth.helper);
    if (mode == 1) return c_deep(DEEP) + 1;
    if (mode == 2) return stub_ret_fn() + 2;
    return stub_fn() + 1;
}

WITHFP long c_outer(void) {
    RECORD(truth.outer);
    return jit_a(&link_a) + 1;
}

/* a "managed" method with a frame pointer: push ebp; mov ebp,esp; sub esp,8; mov ecx,[ebp+8];
 * mov ecx,[ecx+8]; mov [ecx],ebp; mov eax,[ebp+4]; mov [ecx+4],eax; mov ecx,[ebp+8]; sub esp,12;
 * push dword [ecx+4]; mov eax,[ecx]; call eax; leave; ret */
static const unsigned char managed[] = {
    0x55, 0x89, 0xe5, 0x83, 0xec, 0x08, 0x8b, 0x4d, 0x08, 0x8b, 0x49, 0x08, 0x89, 0x29, 0x8b, 0x45,
    0x04, 0x89, 0x41, 0x04, 0x8b, 0x4d, 0x08, 0x83, 0xec, 0x0c, 0xff, 0x71, 0x04, 0x8b, 0x01, 0xff,
    0xd0, 0xc9, 0xc3,
};
#define MANAGED_CALL 31 /* offset of `call eax` */
#define MANAGED_RET 33  /* its return address (`leave`) */
#define MANAGED_LAST 34 /* `ret` */
/* a "managed" method without a frame: push ebp; push 0 (x6: 24 bytes of zeroed locals);
 * mov ecx,[esp+0x20]; mov ecx,[ecx+8]; lea eax,[esp+0x20]; mov [ecx],eax (its CFA);
 * mov eax,[esp+0x1c]; mov [ecx+4],eax (its return address); mov ebp,esp (EBP points at zeros: no frame);
 * mov ecx,[esp+0x20]; push 0 (x3); push dword [ecx+4]; mov eax,[ecx]; call eax; add esp,16; add esp,24;
 * pop ebp; ret */
static const unsigned char frameless[] = {
    0x55, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0x8b, 0x4c, 0x24,
    0x20, 0x8b, 0x49, 0x08, 0x8d, 0x44, 0x24, 0x20, 0x89, 0x01, 0x8b, 0x44, 0x24, 0x1c, 0x89, 0x41,
    0x04, 0x89, 0xe5, 0x8b, 0x4c, 0x24, 0x20, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0xff, 0x71, 0x04,
    0x8b, 0x01, 0xff, 0xd0, 0x83, 0xc4, 0x10, 0x83, 0xc4, 0x18, 0x5d, 0xc3,
};
#define FRAMELESS_RET 52 /* the return address of its `call eax` */
#define OFF_A 0x100
#define OFF_B 0x140
#define OFF_C 0x180
#define OFF_STUB 0x200
#define OFF_STUB_RET 0x240
/* the returning stub: push ebx; mov ebx,[esp+4]; mov [&truth.stub_ret.ret],ebx; lea ebx,[esp+8];
 * mov [&truth.stub_ret.cfa],ebx; nop (the stop point); mov eax,7; pop ebx; ret */
#define STUB_RET_STOP 21

WITHFP int run(int argc, char **argv) {
    RECORD(truth.run);
    mode = argc > 1 ? (strcmp(argv[1], "deep") == 0 ? 1 : strcmp(argv[1], "ret") == 0 ? 2
                       : strcmp(argv[1], "scan") == 0 ? 3 : 0) : 0;
    unsigned char *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (jit == MAP_FAILED) return 2;
    memset(jit, 0xcc, 4096);
    memcpy(jit + OFF_A, managed, sizeof managed);
    memcpy(jit + OFF_B, managed, sizeof managed);
    memcpy(jit + OFF_C, frameless, sizeof frameless);
    unsigned char stub[] = {0xb8, 0, 0, 0, 0, 0xff, 0xe0};
    uint32_t target = (uint32_t)(uintptr_t)c_leaf;
    memcpy(stub + 1, &target, 4);
    memcpy(jit + OFF_STUB, stub, sizeof stub);
    unsigned char stub_ret[] = {0x53, 0x8b, 0x5c, 0x24, 0x04, 0x89, 0x1d, 0, 0, 0, 0, 0x8d, 0x5c, 0x24, 0x08,
                                0x89, 0x1d, 0, 0, 0, 0, 0x90, 0xb8, 0x07, 0, 0, 0, 0x5b, 0xc3};
    uint32_t ret_at = (uint32_t)(uintptr_t)&truth.stub_ret.ret, cfa_at = (uint32_t)(uintptr_t)&truth.stub_ret.cfa;
    memcpy(stub_ret + 7, &ret_at, 4);
    memcpy(stub_ret + 17, &cfa_at, 4);
    memcpy(jit + OFF_STUB_RET, stub_ret, sizeof stub_ret);
    if (mprotect(jit, 4096, PROT_READ | PROT_EXEC) != 0) return 3;
    stub_fn = (long (*)(void))(jit + OFF_STUB);
    stub_ret_fn = (long (*)(void))(jit + OFF_STUB_RET);
    jit_a = (long (*)(struct link *))(jit + OFF_A);
    link_a = (struct link){(uint32_t)(uintptr_t)(jit + OFF_B), &link_b, truth.slot_a};
    link_c = (struct link){(uint32_t)(uintptr_t)c_helper, 0, truth.slot_c};
    link_b = (struct link){mode == 3 ? (uint32_t)(uintptr_t)(jit + OFF_C) : (uint32_t)(uintptr_t)c_helper,
                           mode == 3 ? &link_c : 0, truth.slot_b};
    long total = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            printf("{\"jit\": %u, \"a\": %u, \"b\": %u, \"c\": %u, \"managed_size\": %u, \"managed_call\": %d, "
                   "\"managed_ret\": %d, \"managed_last\": %d, \"frameless_size\": %u, \"frameless_ret\": %d, "
                   "\"stub\": %u, \"stub_ret\": %u, \"stub_ret_stop\": %d, \"leaf_point\": %u, \"go\": %u, "
                   "\"deep\": %d, \"truth\": %u, \"truth_size\": %u}\n",
                   (unsigned)(uintptr_t)jit, (unsigned)(uintptr_t)(jit + OFF_A), (unsigned)(uintptr_t)(jit + OFF_B),
                   (unsigned)(uintptr_t)(jit + OFF_C), (unsigned)sizeof managed, MANAGED_CALL, MANAGED_RET,
                   MANAGED_LAST, (unsigned)sizeof frameless, FRAMELESS_RET, (unsigned)(uintptr_t)(jit + OFF_STUB),
                   (unsigned)(uintptr_t)(jit + OFF_STUB_RET), STUB_RET_STOP, (unsigned)(uintptr_t)leaf_point,
                   (unsigned)(uintptr_t)&go, DEEP, (unsigned)(uintptr_t)&truth, (unsigned)sizeof truth);
            fflush(stdout);
            while (!go) {}
        }
        total += c_outer();
    }
    return (int)(total & 1);
}

int main(int argc, char **argv) {
    return run(argc, argv) + 0;
}
