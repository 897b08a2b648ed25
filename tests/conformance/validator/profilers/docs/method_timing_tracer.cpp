// method_timing_tracer.cpp -- per-method call counts and inclusive wall time via enter/leave hooks.
//
// What it does: installs FunctionEnter2/FunctionLeave2/FunctionTailcall2 hooks in Initialize.  The
// enter hook pushes (FunctionID, frame info, timestamp) on a per-thread shadow stack; the leave
// and tailcall hooks pop it and add the elapsed time to a lock-free per-FunctionID table.  The
// first time a FunctionID completes, the tracer records its exact owning ClassID and how many
// generic type arguments it was instantiated with (GetFunctionInfo2), so that shared generic
// code can be reported per instantiation.  At Shutdown it prints a summary.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize -- query the IUnknown for ICorProfilerInfo2; "The
//     Initialize call is the only opportunity to enable (or disable) callbacks that are
//     immutable." COR_PRF_MONITOR_ENTERLEAVE and COR_PRF_ENABLE_FRAME_INFO are set there and the
//     hooks are installed there with ICorProfilerInfo2::SetEnterLeaveFunctionHooks2.
//   * FunctionEnter2 -- "The profiler should treat this as an opaque handle that can be passed
//     back to the execution engine in the ICorProfilerInfo2::GetFunctionInfo2 method."; "The
//     execution engine does not save any registers before calling this function. On entry, you
//     must save all registers that you use, including those in the floating-point unit (FPU)."
//     "The implementation must use the __declspec(naked) storage-class attribute." (g++ has no
//     __declspec; the hooks are hand-written assembly trampolines with no compiler prologue that
//     save every caller-saved integer and XMM register
//     -- on SysV x86_64 all arguments arrive in registers, so nothing is popped on return);
//     "The implementation of FunctionEnter2 should not block" (no locks on the hook path: the
//     shadow stack is thread-local and the statistics table is lock-free); "must not call into
//     managed code or in any way cause a managed memory allocation".
//   * GetFunctionInfo2 -- "The class ID and type arguments that are returned through the
//     pClassId and typeArgs parameters depend on the value that is passed in the frameInfo
//     parameter": a COR_PRF_FRAME_INFO obtained in a FunctionEnter2 callback gives exact values.
//   * Caller-Allocated Buffers in the Profiling API -- single-pass with a fixed inline array
//     ("Allocate a buffer that you expect will be large enough"); only the total count
//     (*pcTypeArgs, "the total number of available elements") is kept, no element is read.
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call after it, only Release.
#include <time.h>

#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr unsigned kTable = 1u << 15;  // FunctionID slots, power of two
constexpr ULONG32 kInlineTypeArgs = 8;

struct Slot {
    std::atomic<FunctionID> fn{0};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> nanos{0};
    std::atomic<ClassID> exactClass{0};
    std::atomic<ULONG32> typeArgs{0};
};

struct ShadowFrame {
    FunctionID fn;
    COR_PRF_FRAME_INFO enterFrame;  // the frame info this function was entered with
    std::uint64_t start;
};

ICorProfilerInfo2* g_info = nullptr;
std::atomic<bool> g_active{false};
Slot g_table[kTable];
std::atomic<std::uint64_t> g_enters{0};
std::atomic<std::uint64_t> g_leaves{0};
std::atomic<std::uint64_t> g_tailcalls{0};
std::atomic<std::uint64_t> g_unmatched{0};
std::atomic<unsigned> g_resolved{0};
std::atomic<unsigned> g_resolveFailed{0};
std::atomic<HRESULT> g_lastResolveFailure{S_OK};
std::atomic<unsigned> g_generic{0};
std::atomic<unsigned> g_tableFull{0};

thread_local std::vector<ShadowFrame>* t_stack = nullptr;

std::uint64_t NowNs() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::vector<ShadowFrame>& Stack() {
    if (t_stack == nullptr) {
        t_stack = new std::vector<ShadowFrame>();  // native heap only; never a managed allocation
        t_stack->reserve(256);
    }
    return *t_stack;
}

// Returns the slot and whether this call claimed it (first completion of that FunctionID).
Slot* FindSlot(FunctionID fn, bool* claimed) {
    *claimed = false;
    std::uint64_t h = static_cast<std::uint64_t>(fn) * 0x9E3779B97F4A7C15ull;
    for (unsigned probe = 0; probe < kTable; ++probe) {
        Slot& s = g_table[(h + probe) & (kTable - 1)];
        FunctionID cur = s.fn.load(std::memory_order_acquire);
        if (cur == fn) return &s;
        if (cur == 0) {
            FunctionID expected = 0;
            if (s.fn.compare_exchange_strong(expected, fn)) {
                *claimed = true;
                return &s;
            }
            if (expected == fn) return &s;
        }
    }
    g_tableFull.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
}

// Records the exact instantiation of a function the first time it completes.
void ResolveInstantiation(Slot* s, const ShadowFrame& f) {
    if (!g_active.load(std::memory_order_acquire)) return;
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken tok = 0;
    ULONG32 nArgs = 0;
    ClassID args[kInlineTypeArgs] = {};
    HRESULT hr = g_info->GetFunctionInfo2(f.fn, f.enterFrame, &cls, &mod, &tok, kInlineTypeArgs, &nArgs, args);  // BUG: "The values of the func and argumentInfo parameters are not valid after the FunctionEnter2 function returns because the values may change or be destroyed."
    unsigned n = g_resolved.fetch_add(1, std::memory_order_relaxed);
    if (n < 3) {
        std::fprintf(stderr,
                     "[method_timing_tracer] FunctionLeave2(fn=0x%llx): GetFunctionInfo2(fn, frameInfo=0x%llx saved "
                     "at FunctionEnter2) -> 0x%08x class=0x%llx token=0x%08x typeArgs=%u\n",
                     (unsigned long long)f.fn, (unsigned long long)f.enterFrame, (unsigned)hr,
                     (unsigned long long)cls, (unsigned)tok, (unsigned)nArgs);
    }
    if (failed(hr)) {
        g_resolveFailed.fetch_add(1, std::memory_order_relaxed);
        g_lastResolveFailure.store(hr, std::memory_order_relaxed);
        return;
    }
    s->exactClass.store(cls, std::memory_order_relaxed);
    s->typeArgs.store(nArgs, std::memory_order_relaxed);
    if (nArgs > 0) g_generic.fetch_add(1, std::memory_order_relaxed);
}

void Complete(FunctionID fn) {
    auto& st = Stack();
    // Pop until the matching frame (frames left behind by exceptions are discarded).
    while (!st.empty()) {
        ShadowFrame f = st.back();
        st.pop_back();
        if (f.fn != fn) {
            g_unmatched.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        std::uint64_t elapsed = NowNs() - f.start;
        bool claimed = false;
        Slot* s = FindSlot(fn, &claimed);
        if (s == nullptr) return;
        s->calls.fetch_add(1, std::memory_order_relaxed);
        s->nanos.fetch_add(elapsed, std::memory_order_relaxed);
        if (claimed) ResolveInstantiation(s, f);
        return;
    }
    g_unmatched.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// C++ bodies of the hooks, called by the register-saving trampolines below.
extern "C" __attribute__((visibility("hidden"))) void mtt_enter_impl(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO func,
                                                                     COR_PRF_FUNCTION_ARGUMENT_INFO*) {
    if (!g_active.load(std::memory_order_relaxed)) return;
    g_enters.fetch_add(1, std::memory_order_relaxed);
    Stack().push_back(ShadowFrame{funcId, func, NowNs()});
}

extern "C" __attribute__((visibility("hidden"))) void mtt_leave_impl(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO,
                                                                     COR_PRF_FUNCTION_ARGUMENT_RANGE*) {
    if (!g_active.load(std::memory_order_relaxed)) return;
    g_leaves.fetch_add(1, std::memory_order_relaxed);
    Complete(funcId);
}

extern "C" __attribute__((visibility("hidden"))) void mtt_tailcall_impl(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO) {
    if (!g_active.load(std::memory_order_relaxed)) return;
    g_tailcalls.fetch_add(1, std::memory_order_relaxed);
    Complete(funcId);
}

// Trampolines: save rax, rcx, rdx, rsi, rdi, r8-r11 and xmm0-xmm15 (everything the SysV ABI lets
// a C++ callee clobber), keep the stack 16-byte aligned, call the C++ body with the arguments
// still in rdi/rsi/rdx/rcx, restore, return.
#define MTT_TRAMPOLINE(name, impl)                                                   \
    asm(".text\n"                                                                    \
        ".globl " #name "\n"                                                         \
        ".hidden " #name "\n"                                                        \
        ".type " #name ", @function\n" #name ":\n"                                   \
        "  push %rbp\n  mov %rsp, %rbp\n"                                            \
        "  push %rax\n  push %rcx\n  push %rdx\n  push %rsi\n  push %rdi\n"          \
        "  push %r8\n  push %r9\n  push %r10\n  push %r11\n"                         \
        "  sub $0x108, %rsp\n"                                                       \
        "  movdqa %xmm0, 0x00(%rsp)\n  movdqa %xmm1, 0x10(%rsp)\n"                   \
        "  movdqa %xmm2, 0x20(%rsp)\n  movdqa %xmm3, 0x30(%rsp)\n"                   \
        "  movdqa %xmm4, 0x40(%rsp)\n  movdqa %xmm5, 0x50(%rsp)\n"                   \
        "  movdqa %xmm6, 0x60(%rsp)\n  movdqa %xmm7, 0x70(%rsp)\n"                   \
        "  movdqa %xmm8, 0x80(%rsp)\n  movdqa %xmm9, 0x90(%rsp)\n"                   \
        "  movdqa %xmm10, 0xa0(%rsp)\n  movdqa %xmm11, 0xb0(%rsp)\n"                 \
        "  movdqa %xmm12, 0xc0(%rsp)\n  movdqa %xmm13, 0xd0(%rsp)\n"                 \
        "  movdqa %xmm14, 0xe0(%rsp)\n  movdqa %xmm15, 0xf0(%rsp)\n"                 \
        "  call " #impl "\n"                                                         \
        "  movdqa 0x00(%rsp), %xmm0\n  movdqa 0x10(%rsp), %xmm1\n"                   \
        "  movdqa 0x20(%rsp), %xmm2\n  movdqa 0x30(%rsp), %xmm3\n"                   \
        "  movdqa 0x40(%rsp), %xmm4\n  movdqa 0x50(%rsp), %xmm5\n"                   \
        "  movdqa 0x60(%rsp), %xmm6\n  movdqa 0x70(%rsp), %xmm7\n"                   \
        "  movdqa 0x80(%rsp), %xmm8\n  movdqa 0x90(%rsp), %xmm9\n"                   \
        "  movdqa 0xa0(%rsp), %xmm10\n  movdqa 0xb0(%rsp), %xmm11\n"                 \
        "  movdqa 0xc0(%rsp), %xmm12\n  movdqa 0xd0(%rsp), %xmm13\n"                 \
        "  movdqa 0xe0(%rsp), %xmm14\n  movdqa 0xf0(%rsp), %xmm15\n"                 \
        "  add $0x108, %rsp\n"                                                       \
        "  pop %r11\n  pop %r10\n  pop %r9\n  pop %r8\n"                             \
        "  pop %rdi\n  pop %rsi\n  pop %rdx\n  pop %rcx\n  pop %rax\n"               \
        "  pop %rbp\n"                                                               \
        "  ret\n"                                                                    \
        ".size " #name ", .-" #name "\n")

MTT_TRAMPOLINE(mtt_enter_naked, mtt_enter_impl);
MTT_TRAMPOLINE(mtt_leave_naked, mtt_leave_impl);
MTT_TRAMPOLINE(mtt_tailcall_naked, mtt_tailcall_impl);

extern "C" void mtt_enter_naked(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*);
extern "C" void mtt_leave_naked(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*);
extern "C" void mtt_tailcall_naked(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO);

class MethodTimingTracer : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&g_info));
        if (failed(hr)) {
            std::fprintf(stderr, "[method_timing_tracer] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = g_info->SetEventMask(COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FRAME_INFO);
        if (failed(hr)) {
            std::fprintf(stderr, "[method_timing_tracer] SetEventMask failed 0x%08x\n", (unsigned)hr);
            g_info->Release();
            g_info = nullptr;
            return hr;
        }
        hr = g_info->SetEnterLeaveFunctionHooks2(mtt_enter_naked, mtt_leave_naked, mtt_tailcall_naked);
        if (failed(hr)) {
            std::fprintf(stderr, "[method_timing_tracer] SetEnterLeaveFunctionHooks2 failed 0x%08x\n", (unsigned)hr);
            g_info->Release();
            g_info = nullptr;
            return hr;
        }
        g_active.store(true);
        std::fprintf(stderr, "[method_timing_tracer] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        g_active.store(false);
        unsigned functions = 0;
        FunctionID hottest = 0;
        std::uint64_t hottestNs = 0, hottestCalls = 0;
        for (auto& s : g_table) {
            if (s.fn.load() == 0) continue;
            ++functions;
            if (s.nanos.load() > hottestNs) {
                hottestNs = s.nanos.load();
                hottest = s.fn.load();
                hottestCalls = s.calls.load();
            }
        }
        std::fprintf(stderr,
                     "method_timing_tracer: enters=%llu leaves=%llu tailcalls=%llu unmatched=%llu functions=%u "
                     "instantiations_resolved=%u resolve_failed=%u last_failure=0x%08x generic=%u "
                     "hottest_fn=0x%llx calls=%llu inclusive_ms=%.3f\n",
                     (unsigned long long)g_enters.load(), (unsigned long long)g_leaves.load(),
                     (unsigned long long)g_tailcalls.load(), (unsigned long long)g_unmatched.load(), functions,
                     g_resolved.load(), g_resolveFailed.load(), (unsigned)g_lastResolveFailure.load(),
                     g_generic.load(), (unsigned long long)hottest, (unsigned long long)hottestCalls,
                     hottestNs / 1e6);
        if (g_info != nullptr) {
            g_info->Release();
            g_info = nullptr;
        }
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(MethodTimingTracer)
