// Slow-path hooks (FunctionEnter3WithInfo/Leave3WithInfo/Tailcall3WithInfo) as profilers write them:
// ordinary C++ functions that call ICorProfilerInfo through the pointer their Initialize stored (zero in
// this file) and libc (tests/emu/test_hookcheck.py, kind slow, built for x64 and x86 against the
// project's interfaces.h). Each checks what it is answered; a wrong answer calls fail(), a call to an
// address the hook makes up, which the checker reports as FE2-06: no finding means every answer was right.
#include <cstdio>

#include "profharness/interfaces.h"

using namespace profharness;

ICorProfilerInfo3* g_info = nullptr;  // the profiler's Initialize sets it
unsigned long g_seen = 0;

namespace {

constexpr HRESULT kOk = 0;
constexpr HRESULT kInvalidArg = static_cast<HRESULT>(0x80070057u);
constexpr HRESULT kInsufficientBuffer = static_cast<HRESULT>(0x8007007Au);

__attribute__((noinline, noreturn)) void fail() {
    reinterpret_cast<void (*)()>(static_cast<UINT_PTR>(0xdead0000u))();
    __builtin_unreachable();
}

}  // namespace

extern "C" void withinfo_enter(FunctionIDOrClientID id, COR_PRF_ELT_INFO eltInfo) {
    // the documented double pass: the size first, then the ranges
    ULONG cb = 0;
    COR_PRF_FRAME_INFO frame = 0;
    if (g_info->GetFunctionEnter3Info(id.functionID, eltInfo, &frame, &cb, nullptr) != kInsufficientBuffer)
        fail();
    alignas(8) BYTE buffer[256];
    auto* args = reinterpret_cast<COR_PRF_FUNCTION_ARGUMENT_INFO*>(buffer);
    const ULONG need = cb;
    if (need < 8 || need > sizeof buffer) fail();
    if (g_info->GetFunctionEnter3Info(id.functionID, eltInfo, &frame, &cb, args) != kOk) fail();
    if (cb != need || frame == 0 || args->numRanges > 4) fail();
    if (need != 8 + args->numRanges * sizeof(COR_PRF_FUNCTION_ARGUMENT_RANGE)) fail();
    const COR_PRF_FUNCTION_ARGUMENT_RANGE* range = args->ranges;
    for (ULONG i = 0; i < args->numRanges; ++i, ++range)  // the arguments' bytes are readable
        g_seen += *reinterpret_cast<const BYTE*>(range->startAddress) + range->length;
    // an ordinary method: S_OK, its out-parameters zeroed
    ClassID cls = 1;
    ModuleID module = 1;
    mdToken token = 1;
    if (g_info->GetFunctionInfo(id.functionID, &cls, &module, &token) != kOk) fail();
    if (cls != 0 || module != 0 || token != 0) fail();
    // QueryInterface hands out the same object
    void* again = nullptr;
    if (g_info->QueryInterface(IID_ICorProfilerInfo3, &again) != kOk || again != g_info) fail();
    static_cast<ICorProfilerInfo3*>(again)->Release();
    std::printf("enter %lu ranges\n", static_cast<unsigned long>(args->numRanges));
}

extern "C" void withinfo_leave(FunctionIDOrClientID id, COR_PRF_ELT_INFO eltInfo) {
    COR_PRF_FRAME_INFO frame = 0;
    COR_PRF_FUNCTION_ARGUMENT_RANGE retval{0, 0};
    if (g_info->GetFunctionLeave3Info(id.functionID, eltInfo, &frame, &retval) != kOk) fail();
    if (frame == 0 || retval.length != 8) fail();
    g_seen += *reinterpret_cast<const BYTE*>(retval.startAddress);
}

extern "C" void withinfo_tailcall(FunctionIDOrClientID id, COR_PRF_ELT_INFO eltInfo) {
    COR_PRF_FRAME_INFO frame = 0;
    if (g_info->GetFunctionTailcall3Info(id.functionID, eltInfo, &frame) != kOk || frame == 0) fail();
    // another handle than the hook's own is refused
    if (g_info->GetFunctionTailcall3Info(id.functionID, eltInfo + 8, &frame) != kInvalidArg) fail();
}
