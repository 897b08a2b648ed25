// withinfo_hooks.cpp -- argument-inspecting ELT profiler using the "3WithInfo" hooks.
//
// What it does: in Initialize sets COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FUNCTION_ARGS |
// COR_PRF_ENABLE_FUNCTION_RETVAL | COR_PRF_ENABLE_FRAME_INFO and registers ordinary C++ functions
// (not naked, no assembly) with ICorProfilerInfo3::SetEnterLeaveFunctionHooks3WithInfo.
//   * enter hook: ICorProfilerInfo3::GetFunctionEnter3Info (single-pass into a stack buffer,
//     falling back to the double-pass protocol when the buffer is too small); for the first 50
//     calls it prints the FunctionID and the number of argument ranges to stderr.
//   * leave hook: ICorProfilerInfo3::GetFunctionLeave3Info (frame info + return-value range).
//   * tailcall hook: ICorProfilerInfo3::GetFunctionTailcall3Info (frame info), counted.
// Shutdown prints totals and releases the info pointer.  Believed CORRECT.
//
// Why COR_PRF_ENABLE_FUNCTION_RETVAL although the leave hook only wants the frame: the
// GetFunctionLeave3Info page says of pRetvalRange "To access return value information, the
// COR_PRF_ENABLE_FUNCTION_RETVAL flag must be set", and the hook does pass pRetvalRange.
//
// What the documentation says about these hooks (learn.microsoft.com/dotnet/framework/
// unmanaged-api/profiling/...):
//   * ICorProfilerInfo3::SetEnterLeaveFunctionHooks3WithInfo: "The FunctionEnter3WithInfo,
//     FunctionLeave3WithInfo, and FunctionTailcall3WithInfo hooks provide stack frame and argument
//     inspection. To access that information, the COR_PRF_ENABLE_FUNCTION_ARGS,
//     COR_PRF_ENABLE_FUNCTION_RETVAL, and/or COR_PRF_ENABLE_FRAME_INFO flags have to be set. The
//     profiler can use the ICorProfilerInfo::SetEventMask method to set the event flags, and then
//     use the SetEnterLeaveFunctionHooks3WithInfo method to register your implementation of this
//     function."  "Only one set of callbacks may be active at a time, and the newest version takes
//     precedence."  "The SetEnterLeaveFunctionHooks3WithInfo method may be called only from the
//     profiler's ICorProfilerCallback::Initialize callback."
//   * FunctionEnter3WithInfo: eltInfo is "An opaque handle that represents information about a
//     given stack frame. This handle is valid only during the callback to which it is passed."
//     "To access argument information, the COR_PRF_ENABLE_FUNCTION_ARGS flag has to be set."
//     "The FunctionEnter3WithInfo function is a callback; you must implement it. The
//     implementation must use the __declspec(naked) storage-class attribute. The execution engine
//     does not save any registers before calling this function."  -- These hooks are NOT naked:
//     __declspec(naked) does not exist for x64 (MSVC or GCC), and on CoreCLR x64 (Linux included)
//     the runtime's ProfileEnterNaked/ProfileLeaveNaked/ProfileTailcallNaked stubs save the
//     argument/return registers themselves and call the hook as a normal C function.  The docs
//     describe the x86 contract; this is the point where the docs and 64-bit reality differ.
//     The hooks obey the other rules: no blocking beyond a short stderr write in the first 50
//     calls, no calls into managed code, no managed allocations.
//   * ICorProfilerInfo3::GetFunctionEnter3Info: "This method can be called only during the
//     FunctionEnter3WithInfo callback."  pcbArgumentInfo: "If the specified size is not enough,
//     ERROR_INSUFFICIENT_BUFFER is returned and the expected size is stored in pcbArgumentInfo. To
//     call GetFunctionEnter3Info just to retrieve the expected value for *pcbArgumentInfo, set
//     *pcbArgumentInfo=0 and pArgumentInfo=NULL."  pFrameInfo "is valid only during the
//     FunctionEnter3WithInfo callback in which the profiler called the GetFunctionEnter3Info
//     method."
//   * ICorProfilerInfo3::GetFunctionLeave3Info: "This method can be called only during the
//     FunctionLeave3WithInfo callback."
//   * ICorProfilerInfo3::GetFunctionTailcall3Info: callable only during FunctionTailcall3WithInfo.
#include <vector>

#include "common.h"

using namespace docfix;

namespace withinfo {

ICorProfilerInfo3* g_info = nullptr;
std::atomic<unsigned long> g_enters{0}, g_leaves{0}, g_tailcalls{0};
std::atomic<unsigned long> g_enterInfoFailures{0}, g_leaveInfoFailures{0}, g_tailInfoFailures{0};
std::atomic<unsigned long> g_bigArgBuffers{0}, g_retvalBytes{0}, g_argRanges{0};
std::atomic<bool> g_shutdown{false};

void OnEnter3WithInfo(FunctionIDOrClientID fid, COR_PRF_ELT_INFO eltInfo) {
    if (g_shutdown.load(std::memory_order_relaxed)) return;
    unsigned long n = g_enters.fetch_add(1, std::memory_order_relaxed) + 1;

    // Single pass into a stack buffer; double pass only if it proves too small.
    alignas(8) BYTE stackBuf[512];
    auto* args = reinterpret_cast<COR_PRF_FUNCTION_ARGUMENT_INFO*>(stackBuf);
    ULONG cb = sizeof stackBuf;
    COR_PRF_FRAME_INFO frame = 0;
    HRESULT hr = g_info->GetFunctionEnter3Info(fid.functionID, eltInfo, &frame, &cb, args);
    std::vector<BYTE> heapBuf;
    if (hr == HRESULT_ERROR_INSUFFICIENT_BUFFER) {
        g_bigArgBuffers.fetch_add(1, std::memory_order_relaxed);
        heapBuf.resize(cb);
        args = reinterpret_cast<COR_PRF_FUNCTION_ARGUMENT_INFO*>(heapBuf.data());
        hr = g_info->GetFunctionEnter3Info(fid.functionID, eltInfo, &frame, &cb, args);
    }
    if (failed(hr)) {
        g_enterInfoFailures.fetch_add(1, std::memory_order_relaxed);
        if (n <= 50)
            std::fprintf(stderr, "[withinfo_hooks] enter #%lu func=%#lx GetFunctionEnter3Info -> 0x%08x\n", n,
                         (unsigned long)fid.functionID, (unsigned)hr);
        return;
    }
    g_argRanges.fetch_add(args->numRanges, std::memory_order_relaxed);
    if (n <= 50)
        std::fprintf(stderr, "[withinfo_hooks] enter #%lu func=%#lx args=%u arg_bytes=%u\n", n,
                     (unsigned long)fid.functionID, args->numRanges, args->totalArgumentSize);
}

void OnLeave3WithInfo(FunctionIDOrClientID fid, COR_PRF_ELT_INFO eltInfo) {
    if (g_shutdown.load(std::memory_order_relaxed)) return;
    g_leaves.fetch_add(1, std::memory_order_relaxed);
    COR_PRF_FRAME_INFO frame = 0;
    COR_PRF_FUNCTION_ARGUMENT_RANGE retval{0, 0};
    HRESULT hr = g_info->GetFunctionLeave3Info(fid.functionID, eltInfo, &frame, &retval);
    if (failed(hr))
        g_leaveInfoFailures.fetch_add(1, std::memory_order_relaxed);
    else
        g_retvalBytes.fetch_add(retval.length, std::memory_order_relaxed);
}

void OnTailcall3WithInfo(FunctionIDOrClientID fid, COR_PRF_ELT_INFO eltInfo) {
    if (g_shutdown.load(std::memory_order_relaxed)) return;
    g_tailcalls.fetch_add(1, std::memory_order_relaxed);
    COR_PRF_FRAME_INFO frame = 0;
    if (failed(g_info->GetFunctionTailcall3Info(fid.functionID, eltInfo, &frame)))
        g_tailInfoFailures.fetch_add(1, std::memory_order_relaxed);
}

class WithInfoHooks : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&g_info));
        if (failed(hr)) return hr;
        DWORD mask = COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FUNCTION_ARGS | COR_PRF_ENABLE_FUNCTION_RETVAL |
                     COR_PRF_ENABLE_FRAME_INFO;
        hr = g_info->SetEventMask(mask);
        if (succeeded(hr))
            hr = g_info->SetEnterLeaveFunctionHooks3WithInfo(&OnEnter3WithInfo, &OnLeave3WithInfo, &OnTailcall3WithInfo);
        std::fprintf(stderr, "[withinfo_hooks] SetEventMask+SetEnterLeaveFunctionHooks3WithInfo -> 0x%08x\n",
                     (unsigned)hr);
        if (failed(hr)) {
            g_info->Release();
            g_info = nullptr;
            return hr;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        g_shutdown.store(true);
        std::fprintf(stderr,
                     "[withinfo_hooks] summary: enters=%lu leaves=%lu tailcalls=%lu arg_ranges=%lu retval_bytes=%lu "
                     "big_arg_buffers=%lu enter_info_failures=%lu leave_info_failures=%lu tail_info_failures=%lu\n",
                     g_enters.load(), g_leaves.load(), g_tailcalls.load(), g_argRanges.load(), g_retvalBytes.load(),
                     g_bigArgBuffers.load(), g_enterInfoFailures.load(), g_leaveInfoFailures.load(),
                     g_tailInfoFailures.load());
        // Hooks may still fire on other threads after Shutdown; they check g_shutdown first and the
        // info object is only released, never freed by us.
        if (g_info != nullptr) g_info->Release();
        return S_OK;
    }
};

}  // namespace withinfo

DOCFIX_DEFINE_PROFILER(withinfo::WithInfoHooks)
