// null_tailcall.cpp -- call-counting ELT profiler that does not care about tail calls.
//
// What it does: in Initialize sets COR_PRF_MONITOR_ENTERLEAVE and registers FunctionEnter2 and
// FunctionLeave2 hooks with ICorProfilerInfo2::SetEnterLeaveFunctionHooks2(enter, leave, nullptr):
// the tailcall hook is NULL because this profiler only counts enters and leaves.  The hooks make
// no runtime calls at all; they increment two relaxed atomic counters.  Shutdown prints the counts
// and releases the info pointer.  Believed CORRECT as far as the documentation says (see below:
// the docs are silent about NULL for SetEnterLeaveFunctionHooks2).
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerInfo2::SetEnterLeaveFunctionHooks2 -- parameters are "A pointer to the
//     implementation to be used as the FunctionEnter2 / FunctionLeave2 / FunctionTailcall2
//     callback."  "The SetEnterLeaveFunctionHooks2 method may be called only from the profiler's
//     ICorProfilerCallback::Initialize callback."  The page says NOTHING about NULL pointers:
//     it neither allows nor forbids a NULL pFuncTailcall.
//   * ICorProfilerInfo::SetEnterLeaveFunctionHooks (the v1 method) -- "In .NET Framework version
//     1.0, each function pointer can be null to disable that corresponding callback."  That is
//     the only sentence in the profiling docs about NULL hook pointers, and it is stated for the
//     v1 method and for .NET Framework 1.0 only.  This profiler relies on the same behaviour for
//     the v2 method (ambiguous: see README).
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_ENTERLEAVE "Controls the FunctionEnter*,
//     FunctionLeave*, and FunctionTailCall* profiling global static functions."  It is set in
//     Initialize, just before the hooks, which may only be registered there.
//   * FunctionEnter2 / FunctionLeave2 -- "The implementation must use the __declspec(naked)
//     storage-class attribute. The execution engine does not save any registers before calling
//     this function."  That text is written for x86 Windows; on CoreCLR x64 (Linux included) the
//     runtime's own ProfileEnter/ProfileLeave assembly stubs save the registers and call the
//     registered hook as an ordinary C function, which is what these hooks are.  They also follow
//     "The implementation of FunctionEnter2 should not block" and "must not call into managed code
//     or in any way cause a managed memory allocation".
//   * ICorProfilerCallback::Shutdown -- only the final Release on the info pointer.
#include "common.h"

using namespace docfix;

namespace nulltc {

std::atomic<unsigned long> g_enters{0};
std::atomic<unsigned long> g_leaves{0};

void OnEnter2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*) {
    g_enters.fetch_add(1, std::memory_order_relaxed);
}

void OnLeave2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*) {
    g_leaves.fetch_add(1, std::memory_order_relaxed);
}

class NullTailcall : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_ENTERLEAVE);
        if (succeeded(hr)) hr = info_->SetEnterLeaveFunctionHooks2(&OnEnter2, &OnLeave2, nullptr);
        std::fprintf(stderr, "[null_tailcall] SetEnterLeaveFunctionHooks2(enter, leave, NULL) -> 0x%08x\n",
                     (unsigned)hr);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::fprintf(stderr, "[null_tailcall] summary: enters=%lu leaves=%lu\n", g_enters.load(), g_leaves.load());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    ICorProfilerInfo2* info_ = nullptr;
};

}  // namespace nulltc

DOCFIX_DEFINE_PROFILER(nulltc::NullTailcall)
