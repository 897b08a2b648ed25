// arg_logger.cpp -- argument / return-value logger for the app's own methods on the ELT v3
// "WithInfo" hooks.
//
// What it does: Initialize (ICorProfilerInfo3) sets COR_PRF_MONITOR_ENTERLEAVE, the argument,
// return-value and frame-info flags and module loads, then registers the WithInfo hooks and a
// FunctionIDMapper2 that hooks only functions whose module is outside the directory
// System.Private.CoreLib.dll came from, names them from metadata and returns a per-method record as
// client ID.  Hooks: GetFunctionEnter3Info (two-pass) with the argument ranges' lengths summed per
// method; GetFunctionLeave3Info (return-value lengths summed); GetFunctionTailcall3Info; in all three
// GetFunctionInfo2 (two-pass) with the frame info just obtained.  Shutdown prints a summary beginning
// "arg_logger: calls=<n>" to stderr, then one line per hooked method.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * SetEnterLeaveFunctionHooks3WithInfo: "To access that information, the
//    COR_PRF_ENABLE_FUNCTION_ARGS, COR_PRF_ENABLE_FUNCTION_RETVAL, and/or
//    COR_PRF_ENABLE_FRAME_INFO flags have to be set."  "The profiler can use the
//    ICorProfilerInfo::SetEventMask method to set the event flags, and then use the
//    SetEnterLeaveFunctionHooks3WithInfo method".  "The SetEnterLeaveFunctionHooks3WithInfo method
//    may be called only from the profiler's ICorProfilerCallback::Initialize callback."
//  * SetFunctionIDMapper2: "The FunctionIDMapper2 method can be set only once; we recommend that you
//    set it in the ICorProfilerCallback::Initialize callback."
//  * FunctionIDMapper2: "The return value cannot be null unless false is returned in pbHookFunction."
//  * FunctionEnter3WithInfo / FunctionLeave3WithInfo / FunctionTailcall3WithInfo: "The
//    implementation must use the __declspec(naked) storage-class attribute."  "The execution engine
//    does not save any registers before calling this function."  "On entry, you must save all
//    registers that you use, including those in the floating-point unit (FPU)."  "On exit, you must
//    restore the stack by popping off all the parameters that were pushed by its caller."  "should
//    not block"; "must not call into managed code or cause a managed memory allocation in any way."
//    eltInfo: "This handle is valid only during the callback to which it is passed."
//    -> naked asm stubs save all SysV caller-saved GPRs, RFLAGS and the x87/SSE/AVX(/AVX-512) state
//    (XSAVE, else FXSAVE), call the C++ body with the arguments still in rdi/rsi, restore, and `ret`:
//    on x86-64 SysV both parameters come in registers, nothing was pushed, nothing to pop.  Bodies
//    take no locks and use no heap (alloca for second-pass buffers).
//  * GetFunctionEnter3Info: "This method can be called only during the FunctionEnter3WithInfo
//    callback."  "The profiler should provide the same eltInfo that it was given".  "To call
//    GetFunctionEnter3Info just to retrieve the expected value for *pcbArgumentInfo, set
//    *pcbArgumentInfo=0 and pArgumentInfo=NULL."  pFrameInfo "is valid only during the
//    FunctionEnter3WithInfo callback in which the profiler called the GetFunctionEnter3Info method."
//    (Leave3Info / Tailcall3Info: the same, for their own callbacks; "To access return value
//    information, the COR_PRF_ENABLE_FUNCTION_RETVAL flag must be set.")
//  * COR_PRF_FUNCTION_ARGUMENT_INFO: totalArgumentSize "is the sum of the argument lengths." (the
//    sum of range lengths is checked against it; mismatches are counted)
//  * GetFunctionInfo2: "you can first call GetFunctionInfo2 with a zero-length pcTypeArgs buffer to
//    obtain the correct buffer size" -- two passes, the second with a buffer of that many ClassIDs.
//  * GetModuleInfo: "you can first call GetModuleInfo with a zero-length szName buffer to obtain the
//    correct buffer size" (same two-pass for metadata names in the mapper).
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called." -- hooks stop calling it then; Shutdown only prints and Releases.
//
// Left ambiguous by the documents:
//  * "__declspec(naked)", "__stdcall" and "popping off all the parameters" describe x86 Windows;
//    nothing says what "all registers" means on x86-64 SysV (argument/return registers? vector
//    upper halves? flags?).  This file saves the widest reading.
//  * GetFunctionEnter3Info says ERROR_INSUFFICIENT_BUFFER (a Win32 code) is returned; an HRESULT
//    method would return HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER).  Both are accepted.  An
//    older revision of the page describes pcbArgumentInfo as "the number of arguments", the current
//    one as a size in bytes; bytes are used.
//  * GetFunctionInfo2's table only speaks of a COR_PRF_FRAME_INFO "obtained from a FunctionEnter2
//    callback", and COR_PRF_ENABLE_FRAME_INFO's description only of FunctionEnter2; whether frame
//    infos from Get*3Info are "exact" (in particular the leave/tailcall ones) is not stated.  It
//    also says to compare pcTypeArgs with "cTypeArgs divided by the size of a ClassID value", while
//    the caller-allocated-buffer page and the IDL count elements; cTypeArgs is passed as a count.
//  * Which ICorProfilerInfo calls a FunctionIDMapper2 may make is not stated; it makes only
//    GetFunctionInfo, GetModuleInfo and GetTokenAndMetaDataFromFunction (plus metadata reads).
//  * COR_PRF_DISABLE_INLINING ("Disables all inlining.") is also set so that small callees such as
//    Echo<T> are seen; whether inlined methods get ELT hooks is not documented.
#include "common.h"

#include <alloca.h>
#include <cpuid.h>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

// == Naked hook stubs.  Frame: rbp, RFLAGS, rax rcx rdx rsi rdi r8-r11, then a 64-byte aligned
// 4 KB save area for XSAVE/FXSAVE.  rdi/rsi (functionIDOrClientID, eltInfo) are untouched.
extern "C" {
__attribute__((visibility("hidden"))) unsigned arglog_use_xsave = 0;  // 1: XSAVE, 0: FXSAVE
__attribute__((visibility("hidden"))) unsigned arglog_xsave_mask = 0;  // XCR0 & components saved
void arglog_enter_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
void arglog_leave_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
void arglog_tailcall_naked(FunctionIDOrClientID, COR_PRF_ELT_INFO);
}

asm(R"ASM(
    .text
    .macro ARGLOG_STUB name, body
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
    cmpl $0, arglog_use_xsave(%rip); je 1f
    movl arglog_xsave_mask(%rip), %eax; xorl %edx, %edx; xsave64 (%rsp); jmp 2f
1:  fxsave64 (%rsp)
2:  call \body                        # rdi, rsi still hold the hook's two arguments
    cmpl $0, arglog_use_xsave(%rip); je 3f
    movl arglog_xsave_mask(%rip), %eax; xorl %edx, %edx; xrstor64 (%rsp); jmp 4f
3:  fxrstor64 (%rsp)
4:  leaq -80(%rbp), %rsp
    popq %r11; popq %r10; popq %r9; popq %r8; popq %rdi
    popq %rsi; popq %rdx; popq %rcx; popq %rax; popfq
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret                                # nothing was pushed by the caller: plain ret
    .cfi_endproc
    .size \name, .-\name
    .endm
    ARGLOG_STUB arglog_enter_naked, arglog_enter_body
    ARGLOG_STUB arglog_leave_naked, arglog_leave_body
    ARGLOG_STUB arglog_tailcall_naked, arglog_tailcall_body
)ASM");

// Decide XSAVE vs FXSAVE once, before the hooks are registered.  Components kept: x87, SSE, AVX,
// opmask, ZMM_Hi256, Hi16_ZMM (0xE7), each only if enabled in XCR0 and inside the 4096-byte area.
static void choose_save_method() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return;  // no OSXSAVE
    unsigned lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned mask = lo & 0xE7u;
    for (unsigned i = 2; i < 8; ++i) {
        __cpuid_count(0xD, i, a, b, c, d);  // a = size, b = offset (standard format)
        if ((mask & (1u << i)) && b + a > 4096) mask &= ~(1u << i);
    }
    arglog_xsave_mask = mask, arglog_use_xsave = 1;
}

// == Per-method record: the client ID handed back by the mapper.  Hook kinds: 0 enter, 1 leave, 2 tail.
using u64 = unsigned long long;
struct MethodRec {
    FunctionID fid = 0;
    std::string name;
    std::atomic<u64> calls[3] = {}, exactClass[3] = {}, typeArgCalls[3] = {};
    std::atomic<u64> argBytes{0}, argRanges{0}, retBytes{0}, sizeMismatch{0}, errors{0};
    std::atomic<ClassID> typeArgSeen[4] = {};  // distinct first type arguments seen on enter
};

static ICorProfilerInfo3* g_info = nullptr;
static std::atomic<bool> g_shutdown{false};
static std::mutex g_mapLock;  // mapper and module callbacks only, never the hooks
static std::unordered_map<ModuleID, bool> g_appModule;
static std::unordered_map<FunctionID, MethodRec*> g_recs;
static std::string g_frameworkDir;

static bool is_insufficient(HRESULT hr) {
    return hr == HRESULT_ERROR_INSUFFICIENT_BUFFER || hr == static_cast<HRESULT>(0x7A);
}

// GetFunctionInfo2 with a frame info from the current hook; both passes.
static void resolve_frame(MethodRec* r, COR_PRF_FRAME_INFO frame, int kind) {
    ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0; ULONG32 n = 0, got = 0;
    if (failed(g_info->GetFunctionInfo2(r->fid, frame, &cls, &mod, &tok, 0, &n, nullptr))) { ++r->errors; return; }
    if (cls != 0) ++r->exactClass[kind];
    if (n == 0 || n > 64) return;
    ClassID* args = static_cast<ClassID*>(alloca(n * sizeof(ClassID)));
    if (failed(g_info->GetFunctionInfo2(r->fid, frame, nullptr, nullptr, nullptr, n, &got, args)) || got == 0) {
        ++r->errors;
        return;
    }
    ++r->typeArgCalls[kind];
    if (kind != 0) return;
    for (auto& slot : r->typeArgSeen) {
        ClassID cur = slot.load();
        if (cur == args[0]) break;
        if (cur == 0 && (slot.compare_exchange_strong(cur, args[0]) || cur == args[0])) break;
    }
}

static MethodRec* hook_rec(FunctionIDOrClientID id, int kind) {
    auto* r = reinterpret_cast<MethodRec*>(id.clientID);
    if (r == nullptr || g_shutdown.load(std::memory_order_relaxed)) return nullptr;
    ++r->calls[kind];
    return r;
}

#define ARGLOG_BODY(fn) extern "C" __attribute__((visibility("hidden"), used)) void fn(FunctionIDOrClientID id, COR_PRF_ELT_INFO elt)

ARGLOG_BODY(arglog_enter_body) {
    MethodRec* r = hook_rec(id, 0);
    if (r == nullptr) return;
    COR_PRF_FRAME_INFO frame = 0;
    ULONG cb = 0;
    HRESULT hr = g_info->GetFunctionEnter3Info(r->fid, elt, &frame, &cb, nullptr);  // pass 1: size only
    if (!is_insufficient(hr) || cb < sizeof(COR_PRF_FUNCTION_ARGUMENT_INFO) || cb > 16384) { ++r->errors; return; }
    auto* ai = static_cast<COR_PRF_FUNCTION_ARGUMENT_INFO*>(alloca(cb));
    if (failed(g_info->GetFunctionEnter3Info(r->fid, elt, &frame, &cb, ai))) { ++r->errors; return; }  // pass 2
    const COR_PRF_FUNCTION_ARGUMENT_RANGE* ranges = ai->ranges;
    u64 sum = 0;
    for (ULONG i = 0; i < ai->numRanges; ++i) sum += ranges[i].length;
    r->argBytes += sum;
    r->argRanges += ai->numRanges;
    if (sum != ai->totalArgumentSize) ++r->sizeMismatch;
    resolve_frame(r, frame, 0);
}

ARGLOG_BODY(arglog_leave_body) {
    MethodRec* r = hook_rec(id, 1);
    if (r == nullptr) return;
    COR_PRF_FRAME_INFO frame = 0;
    COR_PRF_FUNCTION_ARGUMENT_RANGE ret = {0, 0};
    if (failed(g_info->GetFunctionLeave3Info(r->fid, elt, &frame, &ret))) { ++r->errors; return; }
    r->retBytes += ret.length;
    resolve_frame(r, frame, 1);
}

ARGLOG_BODY(arglog_tailcall_body) {
    MethodRec* r = hook_rec(id, 2);
    if (r == nullptr) return;
    COR_PRF_FRAME_INFO frame = 0;
    if (failed(g_info->GetFunctionTailcall3Info(r->fid, elt, &frame))) { ++r->errors; return; }
    resolve_frame(r, frame, 2);
}

// == Module classification and the mapper (normal C calls, not hooks: locks and heap are fine).
static std::string module_path(ModuleID mid) {
    ULONG cch = 0, got = 0; AssemblyID asmId = 0; const BYTE* base = nullptr;
    if (failed(g_info->GetModuleInfo(mid, &base, 0, &cch, nullptr, &asmId)) || cch == 0) return {};
    std::vector<WCHAR> buf(cch);
    if (failed(g_info->GetModuleInfo(mid, &base, cch, &got, buf.data(), &asmId)) || got > cch) return {};
    return to_utf8(buf.data(), got);
}

// Caller holds g_mapLock.
static bool classify_locked(ModuleID mid) {
    auto it = g_appModule.find(mid);
    if (it != g_appModule.end()) return it->second;
    std::string path = module_path(mid);
    static const std::string corelib = "/System.Private.CoreLib.dll";
    bool isApp = false;
    if (path.size() > corelib.size() && path.compare(path.size() - corelib.size(), corelib.size(), corelib) == 0) {
        g_frameworkDir = path.substr(0, path.size() - corelib.size() + 1);
    } else if (!path.empty()) {
        isApp = g_frameworkDir.empty() ? path.find("/Microsoft.NETCore.App/") == std::string::npos
                                       : path.compare(0, g_frameworkDir.size(), g_frameworkDir) != 0;
    }
    g_appModule[mid] = isApp;
    return isApp;
}

static std::string method_name(FunctionID fid) {
    IUnknown* unk = nullptr; mdToken tok = 0;
    if (failed(g_info->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok)) || !unk) return "?";
    auto* md = static_cast<IMetaDataImport*>(unk);
    std::string out = "?";
    mdTypeDef td = 0; ULONG cch = 0;
    if (succeeded(md->GetMethodProps(tok, &td, nullptr, 0, &cch, nullptr, nullptr, nullptr, nullptr, nullptr)) && cch) {
        std::vector<WCHAR> m(cch);
        if (succeeded(md->GetMethodProps(tok, &td, m.data(), cch, &cch, nullptr, nullptr, nullptr, nullptr, nullptr))) {
            out = to_utf8(m.data(), m.size());
            ULONG tcch = 0;
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

static UINT_PTR arglog_mapper(FunctionID fid, void* clientData, BOOL* pbHook) {
    *pbHook = 0;
    if (g_shutdown.load()) return fid;
    ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0;  // module lookup first: only app modules are hooked
    if (failed(g_info->GetFunctionInfo(fid, &cls, &mod, &tok))) return fid;
    std::lock_guard<std::mutex> lk(g_mapLock);
    if (!classify_locked(mod)) return fid;
    MethodRec*& slot = g_recs[fid];
    if (slot == nullptr) slot = new MethodRec(), slot->fid = fid, slot->name = method_name(fid);
    *pbHook = 1;
    return reinterpret_cast<UINT_PTR>(slot);  // never null while *pbHook is TRUE
}

class ArgLogger : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&g_info));
        if (failed(hr)) return hr;
        choose_save_method();
        const DWORD mask = COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_ENABLE_FUNCTION_ARGS | COR_PRF_ENABLE_FUNCTION_RETVAL |
                           COR_PRF_ENABLE_FRAME_INFO | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING;
        hr = g_info->SetEventMask(mask);
        if (succeeded(hr))
            hr = g_info->SetEnterLeaveFunctionHooks3WithInfo(&arglog_enter_naked, &arglog_leave_naked,
                                                             &arglog_tailcall_naked);
        if (succeeded(hr)) hr = g_info->SetFunctionIDMapper2(&arglog_mapper, this);
        if (failed(hr)) {
            std::fprintf(stderr, "[arg_logger] setup failed 0x%08x\n", (unsigned)hr);
            g_info->Release();
            g_info = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[arg_logger] initialized (%s)\n", arglog_use_xsave ? "xsave" : "fxsave");
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
        u64 t[16] = {};  // calls[3], exact[3], typeargs[3], argBytes, retBytes, mismatch, errors
        for (auto& kv : g_recs) {
            const MethodRec& r = *kv.second;
            for (int k = 0; k < 3; ++k) t[k] += r.calls[k], t[3 + k] += r.exactClass[k], t[6 + k] += r.typeArgCalls[k];
            t[9] += r.argBytes, t[10] += r.retBytes, t[11] += r.sizeMismatch, t[12] += r.errors;
        }
        std::fprintf(stderr, "arg_logger: calls=%llu leaves=%llu tailcalls=%llu methods=%zu argbytes=%llu retbytes=%llu "
                     "exact_class(enter/leave/tail)=%llu/%llu/%llu typearg_calls=%llu/%llu/%llu size_mismatch=%llu errors=%llu\n",
                     t[0], t[1], t[2], g_recs.size(), t[9], t[10], t[3], t[4], t[5], t[6], t[7], t[8], t[11], t[12]);
        for (auto& kv : g_recs) {
            const MethodRec& r = *kv.second;
            unsigned distinct = 0;
            for (auto& s : r.typeArgSeen) distinct += s.load() != 0;
            std::fprintf(stderr, "arg_logger:   %-22s calls=%llu ranges=%llu argbytes=%llu retbytes=%llu typeargs=%llu/%llu "
                         "distinct_typearg0=%u\n", r.name.c_str(), r.calls[0].load(), r.argRanges.load(), r.argBytes.load(),
                         r.retBytes.load(), r.typeArgCalls[0].load(), r.typeArgCalls[1].load(), distinct);
        }
        if (g_info != nullptr) g_info->Release();  // pointer kept: late hooks see g_shutdown first
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(ArgLogger)
