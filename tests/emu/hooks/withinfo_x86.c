/* An i386 slow-path hook (FunctionEnter3WithInfo) in C: an ordinary cdecl function (the project's headers
 * define STDMETHODCALLTYPE empty) that calls ICorProfilerInfo through the pointer its Initialize stored
 * (zero in this file) and libc (tests/emu/test_hookcheck.py, kind slow, x86). C, not C++: gcc -m32 needs no
 * 32-bit libstdc++ headers. The vtable slots are clr_model.api's order (IUnknown's 3, then ICorProfilerInfo
 * onwards); the test holds the SLOT_ constants to it. A wrong answer calls fail() (FE2-06).
 */
typedef int HRESULT;
typedef unsigned int ULONG;
typedef unsigned int UINT_PTR; /* 32 bits */

enum { SLOT_RELEASE = 2, SLOT_GET_FUNCTION_INFO = 15, SLOT_GET_FUNCTION_ENTER3_INFO = 63 };

typedef struct Info { void **vtable; } Info;
typedef struct Range { UINT_PTR startAddress; ULONG length; } Range;
typedef struct ArgumentInfo { ULONG numRanges; ULONG totalArgumentSize; Range ranges[1]; } ArgumentInfo;
typedef HRESULT (*GetFunctionEnter3Info)(Info *, UINT_PTR, UINT_PTR, UINT_PTR *, ULONG *, ArgumentInfo *);
typedef HRESULT (*GetFunctionInfo)(Info *, UINT_PTR, UINT_PTR *, UINT_PTR *, unsigned *);
typedef ULONG (*Release)(Info *);

extern int printf(const char *, ...);

Info *g_info; /* the profiler's Initialize sets it */
unsigned long g_seen;

__attribute__((noinline, noreturn)) static void fail(void) {
    ((void (*)(void))0xdead0000u)();
    __builtin_unreachable();
}

void withinfo_enter_x86(UINT_PTR id, UINT_PTR eltInfo) {
    ULONG cb = 0, need, i;
    UINT_PTR frame = 0, cls = 1, module = 1;
    unsigned token = 1;
    unsigned char buffer[128] __attribute__((aligned(8)));
    ArgumentInfo *args = (ArgumentInfo *)buffer;
    GetFunctionEnter3Info enter3 = (GetFunctionEnter3Info)g_info->vtable[SLOT_GET_FUNCTION_ENTER3_INFO];
    if (enter3(g_info, id, eltInfo, &frame, &cb, 0) != (HRESULT)0x8007007Au) fail();
    need = cb;
    if (need < 8 || need > sizeof buffer) fail();
    if (enter3(g_info, id, eltInfo, &frame, &cb, args) != 0 || cb != need || !frame) fail();
    if (args->numRanges > 4 || need != 8 + args->numRanges * sizeof(Range)) fail();
    for (i = 0; i < args->numRanges; ++i)
        g_seen += *(const unsigned char *)args->ranges[i].startAddress;
    if (((GetFunctionInfo)g_info->vtable[SLOT_GET_FUNCTION_INFO])(g_info, id, &cls, &module, &token) != 0) fail();
    if (cls || module || token) fail();
    if (((Release)g_info->vtable[SLOT_RELEASE])(g_info) != 1) fail();
    printf("enter %u ranges\n", args->numRanges);
}
