// slow_call_tracer.cpp -- times every call of the app's own methods on the ELT v3 "WithInfo" hooks
// and, for calls slower than a threshold, reports the exact generic instantiation that was slow.
//
// What it does: Initialize (ICorProfilerInfo3) sets COR_PRF_MONITOR_ENTERLEAVE, the argument,
// return-value and frame-info flags and module loads, registers the WithInfo hooks and a
// FunctionIDMapper2 that hooks only methods of modules outside the framework directory (the one
// System.Private.CoreLib.dll came from) and returns a per-method record as client ID.
// Enter: GetFunctionEnter3Info (two-pass) for the frame info and the argument count, then a
// per-thread shadow-stack push {method, frame info, timestamp}.  Leave: GetFunctionLeave3Info
// (return-value size), pop to the matching entry (entries of frames left by an exception are
// dropped), and if the call took >= SLOW_CALL_TRACER_US microseconds (default 20) resolve its
// exact class and method type arguments with GetFunctionInfo2 -- done only for slow calls, so the
// common path stays cheap.  Tailcall: GetFunctionTailcall3Info, pop.  Shutdown prints
// "slow_call_tracer: calls=<n> slow=<s> ..." and one line per method to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * SetEnterLeaveFunctionHooks3WithInfo: "To access that information, the
//    COR_PRF_ENABLE_FUNCTION_ARGS, COR_PRF_ENABLE_FUNCTION_RETVAL, and/or COR_PRF_ENABLE_FRAME_INFO
//    flags have to be set."  "The SetEnterLeaveFunctionHooks3WithInfo method may be called only from
//    the profiler's ICorProfilerCallback::Initialize callback."
//  * SetFunctionIDMapper2: "we recommend that you set it in the ICorProfilerCallback::Initialize
//    callback."  FunctionIDMapper2: "The return value cannot be null unless false is returned in
//    pbHookFunction."
//  * FunctionEnter3WithInfo (and Leave/Tailcall): "The implementation must use the
//    __declspec(naked) storage-class attribute."  "The execution engine does not save any registers
//    before calling this function."  "On entry, you must save all registers that you use, including
//    those in the floating-point unit (FPU)."  "should not block" -> naked asm stubs saving all SysV
//    caller-saved GPRs, RFLAGS and x87/SSE/AVX state (XSAVE, else FXSAVE); bodies take no locks and
//    use no heap (alloca; shadow stacks are preallocated slots claimed with a CAS).
//  * GetFunctionEnter3Info: "To call GetFunctionEnter3Info just to retrieve the expected value for
//    *pcbArgumentInfo, set *pcbArgumentInfo=0 and pArgumentInfo=NULL."  "The profiler should
//    provide the same eltInfo that it was given by the FunctionEnter3WithInfo function."
//  * GetFunctionLeave3Info: "To access return value information, the COR_PRF_ENABLE_FUNCTION_RETVAL
//    flag must be set."
//  * GetFunctionInfo2: "you can first call GetFunctionInfo2 with a zero-length pcTypeArgs buffer to
//    obtain the correct buffer size."  GetModuleInfo: the same two-pass for szName.
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called." -- hooks stop calling it then.
//
// Left ambiguous by the documents:
//  * x86 wording ("__declspec(naked)", "__stdcall", "popping off all the parameters") on x86-64
//    SysV: nothing is pushed for two register arguments, so the stubs end in a plain `ret`.
//  * ERROR_INSUFFICIENT_BUFFER vs HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER): both accepted.
//  * GetFunctionInfo2 describes exactness only for frame infos "obtained from a FunctionEnter2
//    callback", and cTypeArgs once as a byte size ("divided by the size of a ClassID value"); it is
//    passed as an element count, as the caller-allocated-buffer page says.
#include "common.h"

#include <alloca.h>
#include <cpuid.h>
#include <ctime>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

using namespace docfix;
using u64 = unsigned long long;

// == Naked hook stubs (rdi/rsi = functionIDOrClientID, eltInfo are passed through untouched).
extern "C" {
__attribute__((visibility("hidden"))) unsigned sct_use_xsave = 0;
__attribute__((visibility("hidden"))) unsigned sct_xsave_mask = 0;
void sct_enter_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
void sct_leave_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
void sct_tailcall_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
}

asm(R"ASM(
    .text
    .macro SCT_STUB name, body
    .p2align 4
    .globl \name
    .hidden \name
    .type \name, @function
\name:
    .cfi_startproc
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushfq; pushq %rax; pushq %rcx; pushq %rdx; pushq %rsi
    pushq %rdi; pushq %r8; pushq %r9; pushq %r10; pushq %r11
    subq $4160, %rsp; andq $-64, %rsp
    xorl %eax, %eax                    # XSAVE header (bytes 512..575) must start zeroed
    movq %rax, 512(%rsp); movq %rax, 520(%rsp); movq %rax, 528(%rsp); movq %rax, 536(%rsp)
    movq %rax, 544(%rsp); movq %rax, 552(%rsp); movq %rax, 560(%rsp); movq %rax, 568(%rsp)
    cmpl $0, sct_use_xsave(%rip); je 1f
    movl sct_xsave_mask(%rip), %eax; xorl %edx, %edx; xsave64 (%rsp); jmp 2f
1:  fxsave64 (%rsp)
2:  call \body
    cmpl $0, sct_use_xsave(%rip); je 3f
    movl sct_xsave_mask(%rip), %eax; xorl %edx, %edx; xrstor64 (%rsp); jmp 4f
3:  fxrstor64 (%rsp)
4:  leaq -80(%rbp), %rsp
    popq %r11; popq %r10; popq %r9; popq %r8; popq %rdi
    popq %rsi; popq %rdx; popq %rcx; popq %rax; popfq
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size \name, .-\name
    .endm
    SCT_STUB sct_enter_naked, sct_enter_body
    SCT_STUB sct_leave_naked, sct_leave_body
    SCT_STUB sct_tailcall_naked, sct_tailcall_body
)ASM");

static void choose_save_method() {  // x87|SSE|AVX|opmask|ZMM_Hi256|Hi16_ZMM if enabled and they fit
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return;  // no OSXSAVE: FXSAVE
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned mask = lo & 0xE7u;
    for (unsigned i = 2; i < 8; ++i) {
        __cpuid_count(0xD, i, a, b, c, d);
        if ((mask & (1u << i)) && b + a > 4096) mask &= ~(1u << i);
    }
    sct_xsave_mask = mask, sct_use_xsave = 1;
}

// == Per-method records and per-thread shadow stacks.
struct MethodRec {
    FunctionID fid = 0;
    std::string name;
    std::atomic<u64> calls{0}, timed{0}, totalNs{0}, maxNs{0}, slow{0}, args{0}, retBytes{0};
    std::atomic<u64> resolved{0}, resolveFailed{0}, exactClass{0}, typeArgs{0}, errors{0};
};
struct ShadowEntry { MethodRec* rec; COR_PRF_FRAME_INFO enterFrame; u64 t0; };
constexpr int kSlots = 64, kDepth = 256;
struct ThreadSlot { std::atomic<long> owner{0}; unsigned depth = 0; ShadowEntry e[kDepth]; };

static ThreadSlot g_slots[kSlots];
static __thread int t_slot __attribute__((tls_model("initial-exec"))) = -1;
static ICorProfilerInfo3* g_info = nullptr;
static std::atomic<bool> g_shutdown{false};
static u64 g_thresholdNs = 20000;
static std::mutex g_mapLock;  // mapper / module callbacks only
static std::unordered_map<ModuleID, bool> g_appModule;
static std::unordered_map<FunctionID, MethodRec*> g_recs;
static std::string g_frameworkDir;

static u64 now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return u64(ts.tv_sec) * 1000000000ull + u64(ts.tv_nsec);
}

static ThreadSlot* my_slot() {  // lock-free, heap-free: claim a preallocated slot once per thread
    if (t_slot >= 0) return t_slot < kSlots ? &g_slots[t_slot] : nullptr;
    long tid = syscall(SYS_gettid);
    for (int i = 0; i < kSlots; ++i) {
        long expected = 0;
        if (g_slots[i].owner.compare_exchange_strong(expected, tid)) return &g_slots[t_slot = i];
    }
    t_slot = kSlots;
    return nullptr;
}

static bool is_insufficient(HRESULT hr) {
    return hr == HRESULT_ERROR_INSUFFICIENT_BUFFER || hr == static_cast<HRESULT>(0x7A);
}

// Exact class and method type arguments for `frame`, two-pass.
static void resolve_instantiation(MethodRec* r, COR_PRF_FRAME_INFO frame) {
    ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0; ULONG32 n = 0, got = 0;
    if (failed(g_info->GetFunctionInfo2(r->fid, frame, &cls, &mod, &tok, 0, &n, nullptr))) { ++r->resolveFailed; return; }
    if (n > 0 && n <= 64) {
        ClassID* targs = static_cast<ClassID*>(alloca(n * sizeof(ClassID)));
        if (failed(g_info->GetFunctionInfo2(r->fid, frame, nullptr, nullptr, nullptr, n, &got, targs))) {
            ++r->resolveFailed;
            return;
        }
        r->typeArgs += got;
    }
    ++r->resolved;
    if (cls != 0) ++r->exactClass;
}

// Pops to the entry of `r` (frames unwound by exceptions never got a leave) and times it.
static bool pop_entry(MethodRec* r, ShadowEntry* out) {
    ThreadSlot* s = my_slot();
    while (s != nullptr && s->depth > 0) {
        unsigned i = --s->depth;
        if (i >= unsigned(kDepth) || s->e[i].rec != r) continue;
        *out = s->e[i];
        u64 ns = now_ns() - out->t0, prev = r->maxNs.load();
        ++r->timed;
        r->totalNs += ns;
        while (ns > prev && !r->maxNs.compare_exchange_weak(prev, ns)) {}
        return ns >= g_thresholdNs;
    }
    return false;
}

#define SCT_BODY(fn) extern "C" __attribute__((visibility("hidden"), used)) void fn(FunctionIDOrClientID id, COR_PRF_ELT_INFO elt)

SCT_BODY(sct_enter_body) {
    auto* r = reinterpret_cast<MethodRec*>(id.clientID);
    if (r == nullptr || g_shutdown.load(std::memory_order_relaxed)) return;
    ++r->calls;
    COR_PRF_FRAME_INFO frame = 0;
    ULONG cb = 0;
    HRESULT hr = g_info->GetFunctionEnter3Info(r->fid, elt, &frame, &cb, nullptr);  // pass 1: size
    if (!is_insufficient(hr) || cb < sizeof(COR_PRF_FUNCTION_ARGUMENT_INFO) || cb > 16384) { ++r->errors; return; }
    auto* ai = static_cast<COR_PRF_FUNCTION_ARGUMENT_INFO*>(alloca(cb));
    if (failed(g_info->GetFunctionEnter3Info(r->fid, elt, &frame, &cb, ai))) { ++r->errors; return; }  // pass 2
    r->args += ai->numRanges;
    ThreadSlot* s = my_slot();
    if (s == nullptr) return;
    if (s->depth < unsigned(kDepth)) s->e[s->depth] = ShadowEntry{r, frame, now_ns()};
    ++s->depth;
}

SCT_BODY(sct_leave_body) {
    auto* r = reinterpret_cast<MethodRec*>(id.clientID);
    if (r == nullptr || g_shutdown.load(std::memory_order_relaxed)) return;
    COR_PRF_FRAME_INFO frame = 0;
    COR_PRF_FUNCTION_ARGUMENT_RANGE ret = {0, 0};
    if (failed(g_info->GetFunctionLeave3Info(r->fid, elt, &frame, &ret))) ++r->errors;
    else r->retBytes += ret.length;
    ShadowEntry entry;
    if (!pop_entry(r, &entry)) return;
    ++r->slow;
    // BUG: GetFunctionEnter3Info, pFrameInfo: "This handle is valid only during the FunctionEnter3WithInfo callback in which the profiler called the GetFunctionEnter3Info method." -- the enter-time handle is passed here, from the leave callback.
    resolve_instantiation(r, entry.enterFrame);
}

SCT_BODY(sct_tailcall_body) {
    auto* r = reinterpret_cast<MethodRec*>(id.clientID);
    if (r == nullptr || g_shutdown.load(std::memory_order_relaxed)) return;
    COR_PRF_FRAME_INFO frame = 0;
    if (failed(g_info->GetFunctionTailcall3Info(r->fid, elt, &frame))) ++r->errors;
    ShadowEntry entry;
    if (pop_entry(r, &entry)) ++r->slow;  // the caller's frame is gone after a tail call
}

// == Module classification and the mapper (ordinary calls, not hooks).
static std::string module_path(ModuleID mid) {
    ULONG cch = 0, got = 0; AssemblyID asmId = 0; const BYTE* base = nullptr;
    if (failed(g_info->GetModuleInfo(mid, &base, 0, &cch, nullptr, &asmId)) || cch == 0) return {};
    std::vector<WCHAR> buf(cch);
    if (failed(g_info->GetModuleInfo(mid, &base, cch, &got, buf.data(), &asmId)) || got > cch) return {};
    return to_utf8(buf.data(), got);
}

static bool classify_locked(ModuleID mid) {  // caller holds g_mapLock
    auto it = g_appModule.find(mid);
    if (it != g_appModule.end()) return it->second;
    std::string path = module_path(mid);
    static const std::string corelib = "/System.Private.CoreLib.dll";
    bool isApp = false;
    if (path.size() > corelib.size() && path.compare(path.size() - corelib.size(), corelib.size(), corelib) == 0)
        g_frameworkDir = path.substr(0, path.size() - corelib.size() + 1);
    else if (!path.empty())
        isApp = g_frameworkDir.empty() ? path.find("/Microsoft.NETCore.App/") == std::string::npos
                                       : path.compare(0, g_frameworkDir.size(), g_frameworkDir) != 0;
    return g_appModule[mid] = isApp;
}

static std::string method_name(FunctionID fid) {
    IUnknown* unk = nullptr; mdToken tok = 0;
    if (failed(g_info->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok)) || !unk) return "?";
    auto* md = static_cast<IMetaDataImport*>(unk);
    std::string out = "?";
    mdTypeDef td = 0; ULONG cch = 0, tcch = 0;
    if (succeeded(md->GetMethodProps(tok, &td, nullptr, 0, &cch, nullptr, nullptr, nullptr, nullptr, nullptr)) && cch) {
        std::vector<WCHAR> m(cch);
        if (succeeded(md->GetMethodProps(tok, &td, m.data(), cch, &cch, nullptr, nullptr, nullptr, nullptr, nullptr))) {
            out = to_utf8(m.data(), m.size());
            if (succeeded(md->GetTypeDefProps(td, nullptr, 0, &tcch, nullptr, nullptr)) && tcch) {
                std::vector<WCHAR> t(tcch);
                if (succeeded(md->GetTypeDefProps(td, t.data(), tcch, &tcch, nullptr, nullptr)))
                    out = to_utf8(t.data(), t.size()) + "." + out;
            }
        }
    }
    md->Release();
    return out;
}

static UINT_PTR sct_mapper(FunctionID fid, void* clientData, BOOL* pbHook) {
    *pbHook = 0;
    ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0;
    if (g_shutdown.load() || failed(g_info->GetFunctionInfo(fid, &cls, &mod, &tok))) return fid;
    std::lock_guard<std::mutex> lk(g_mapLock);
    if (!classify_locked(mod)) return fid;
    MethodRec*& slot = g_recs[fid];
    if (slot == nullptr) slot = new MethodRec(), slot->fid = fid, slot->name = method_name(fid);
    *pbHook = 1;
    return reinterpret_cast<UINT_PTR>(slot);  // non-null whenever *pbHook is TRUE
}

class SlowCallTracer : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&g_info));
        if (failed(hr)) return hr;
        if (const char* us = std::getenv("SLOW_CALL_TRACER_US")) g_thresholdNs = std::strtoull(us, nullptr, 10) * 1000ull;
        choose_save_method();
        hr = g_info->SetEventMask(COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FUNCTION_ARGS | COR_PRF_ENABLE_FUNCTION_RETVAL |
                                  COR_PRF_ENABLE_FRAME_INFO | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING);
        if (succeeded(hr))
            hr = g_info->SetEnterLeaveFunctionHooks3WithInfo(&sct_enter_naked, &sct_leave_naked, &sct_tailcall_naked);
        if (succeeded(hr)) hr = g_info->SetFunctionIDMapper2(&sct_mapper, this);
        if (failed(hr)) {
            std::fprintf(stderr, "[slow_call_tracer] setup failed 0x%08x\n", (unsigned)hr);
            g_info->Release();
            g_info = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[slow_call_tracer] initialized, threshold %llu us\n", g_thresholdNs / 1000);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mid, HRESULT hrStatus) override {
        if (g_shutdown.load() || failed(hrStatus)) return S_OK;
        std::lock_guard<std::mutex> lk(g_mapLock);
        classify_locked(mid);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        g_shutdown.store(true);
        std::lock_guard<std::mutex> lk(g_mapLock);
        u64 t[7] = {};  // calls, slow, resolved, resolveFailed, exactClass, typeArgs, errors
        for (auto& kv : g_recs) {
            const MethodRec& r = *kv.second;
            t[0] += r.calls, t[1] += r.slow, t[2] += r.resolved, t[3] += r.resolveFailed;
            t[4] += r.exactClass, t[5] += r.typeArgs, t[6] += r.errors;
        }
        std::fprintf(stderr, "slow_call_tracer: calls=%llu slow=%llu resolved=%llu resolve_failed=%llu exact_class=%llu "
                     "typeargs=%llu errors=%llu methods=%zu threshold_us=%llu\n",
                     t[0], t[1], t[2], t[3], t[4], t[5], t[6], g_recs.size(), g_thresholdNs / 1000);
        for (auto& kv : g_recs) {
            const MethodRec& r = *kv.second;
            std::fprintf(stderr, "slow_call_tracer:   %-22s calls=%llu timed=%llu slow=%llu max_us=%llu avg_us=%llu "
                         "args=%llu resolved=%llu failed=%llu\n", r.name.c_str(), r.calls.load(), r.timed.load(),
                         r.slow.load(), r.maxNs.load() / 1000, r.timed ? r.totalNs.load() / r.timed.load() / 1000 : 0ull,
                         r.args.load(), r.resolved.load(), r.resolveFailed.load());
        }
        if (g_info != nullptr) g_info->Release();  // pointer kept: late hooks see g_shutdown first
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(SlowCallTracer)
