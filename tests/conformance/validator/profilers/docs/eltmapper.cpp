// eltmapper.cpp -- a call-count and timing profiler built on the ELT v2 hooks and a FunctionIDMapper.
//
// What it does
//   * Initialize asks for COR_PRF_MONITOR_ENTERLEAVE (function enter/leave/tailcall hooks),
//     COR_PRF_MONITOR_EXCEPTIONS (to learn about frames that are left by an exception instead of
//     a FunctionLeave2) and COR_PRF_DISABLE_INLINING (inlined callees raise no enter/leave), installs
//     a FunctionIDMapper with ICorProfilerInfo::SetFunctionIDMapper and the three hooks with
//     ICorProfilerInfo2::SetEnterLeaveFunctionHooks2 -- all from Initialize.
//   * The mapper runs once (or a few times, concurrently) per FunctionID.  It looks up the function's
//     module, decides whether the function is "user code" (module file name not System.* /
//     Microsoft.* / mscorlib / netstandard; ELTMAPPER_HOOK=all hooks everything), resolves the
//     method's name from metadata, allocates the profiler's own per-method record and returns the
//     record's address as the client data.  For functions it does not want it sets
//     *pbHookFunction = FALSE.  The same FunctionID always gets the same record back.
//   * The hooks are assembly stubs (x86-64 SysV) that save every register the C++ code may touch
//     -- rax, rcx, rdx, rsi, rdi, r8-r11, RFLAGS and the whole x87/SSE/AVX(/AVX-512) state via
//     XSAVE (FXSAVE when the OS has not enabled XSAVE) -- then call C++ with a 16-byte aligned
//     stack, restore everything and `ret`.  rbx, rbp, r12-r15 are preserved by the compiled C++
//     (SysV callee-saved) and by the stub's own frame.
//   * The C++ side keeps a per-thread shadow stack of {record, start time, time spent in children}:
//     FunctionEnter2 pushes, FunctionLeave2 pops (inclusive and exclusive time are accumulated into
//     the record with relaxed atomics), FunctionTailcall2 pops the caller (no FunctionLeave2 will
//     come for it).  ExceptionUnwindFunctionEnter/Leave pop frames that an exception removes.
//     Nothing in the hooks blocks, allocates managed memory, calls managed code or the runtime.
//   * Shutdown prints a summary (totals and the top methods by inclusive time) to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
//   * ICorProfilerCallback::Initialize -- "The Initialize call is the only opportunity to enable
//     (or disable) callbacks that are immutable." (COR_PRF_DISABLE_INLINING is immutable, so the
//     whole mask is set here.)
//   * ICorProfilerInfo::SetEventMask -- "You should call the SetEventMask2 method instead of this
//     method." (SetEventMask2 is used, via ICorProfilerInfo5.)
//   * ICorProfilerCallback::JITInlining -- "Functions inserted inline do not raise events for
//     entering or leaving." (hence COR_PRF_DISABLE_INLINING, for exact call counts)
//   * ICorProfilerInfo2::SetEnterLeaveFunctionHooks2 -- "The SetEnterLeaveFunctionHooks2 method may
//     be called only from the profiler's ICorProfilerCallback::Initialize callback."
//   * ICorProfilerInfo::SetFunctionIDMapper -- "The alternatives for the FunctionID values will be
//     passed to the profiler's function entry/exit hooks (FunctionEnter2, FunctionLeave2, and
//     FunctionTailcall2) that are specified by the ICorProfilerInfo2::SetEnterLeaveFunctionHooks2
//     method." and "The FunctionIDMapper can be set only once and it is recommended that you set it
//     in the ICorProfilerCallback::Initialize callback."  (SetFunctionIDMapper2's page ties its
//     values to the FunctionEnter3 family instead, so the v1 mapper is the one paired with ELT v2.)
//   * FunctionIDMapper -- "pbHookFunction [out] A pointer to a value that the profiler sets to true
//     if it wants to receive FunctionEnter2, FunctionLeave2, and FunctionTailcall2 callbacks;
//     otherwise, it sets this value to false."; "The return value cannot be null unless false is
//     returned in pbHookFunction."; "the profiler may receive multiple FunctionIDMapper callbacks
//     for the same FunctionID. The profiler should ensure that it returns the same value from this
//     callback when it is called multiple times with the same FunctionID."
//   * FunctionEnter2 / FunctionLeave2 / FunctionTailcall2 -- "clientData [in] The remapped function
//     identifier, which the profiler previously specified by using the FunctionIDMapper function.";
//     "The implementation must use the __declspec(naked) storage-class attribute."; "The execution
//     engine does not save any registers before calling this function. On entry, you must save all
//     registers that you use, including those in the floating-point unit (FPU). On exit, you must
//     restore the stack by popping off all the parameters that were pushed by its caller."; "The
//     implementation of FunctionEnter2 should not block because it will delay garbage collection.";
//     "the FunctionEnter2 function must not call into managed code or in any way cause a managed
//     memory allocation."; "The values of the func and argumentInfo parameters are not valid after
//     the FunctionEnter2 function returns" (func/argumentInfo/retvalRange are never kept).
//     On x86-64 SysV all four parameters arrive in rdi/rsi/rdx/rcx, so nothing was pushed by the
//     caller and a plain `ret` is the "popping off" the page asks for; a top-level assembly stub
//     is GCC's equivalent of __declspec(naked).
//   * FunctionTailcall2 -- "The target function of the tail call will use the current stack frame,
//     and will return directly to the caller of the function that made the tail call. This means
//     that a FunctionLeave2 callback will not be issued for a function that is the target of a tail
//     call."  (read with FunctionTailcall: the function *making* the tail call gets no leave; the
//     stub pops that function's frame at the tailcall hook.)
//   * ICorProfilerCallback::ExceptionUnwindFunctionEnter -- "functionId [in] The ID of the function
//     that is being unwound."; ExceptionUnwindFunctionLeave -- "When the
//     ExceptionUnwindFunctionLeave method is called, the function instance and its stack data are
//     removed from the stack." and "the profiler must not call into managed code or in any way
//     cause a managed-memory allocation."
//   * ICorProfilerInfo::GetFunctionInfo -- "The ClassID of a function on a generic class might not
//     be obtainable without more contextual information ... In this case, pClassId will be 0." (only
//     the module and token are used); GetModuleInfo -- "the GetModuleInfo method may be called as
//     soon as the module's ID exists" and the double-pass buffer rule of "Caller-Allocated Buffers"
//     ("First call with a zero-length InfoBuffer parameter to obtain the correct buffer size.").
//   * ICorProfilerInfo::GetTokenAndMetaDataFromFunction -- "Gets the metadata token and a metadata
//     interface instance that can be used against the token for the specified function."
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." (all names are resolved in
//     the mapper; Shutdown only reads the profiler's own records.)
//
// Interfaces/constants: everything used is in the kit headers.  ICorProfilerInfo5 is only used for
// SetEventMask2 (falls back to SetEventMask when the QueryInterface fails).
#include "common.h"

#include <algorithm>
#include <cinttypes>
#include <ctime>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cpuid.h>

using namespace docfix;

namespace {

// ---------------------------------------------------------------------------------------------
// Per-method record: the client data the mapper hands to the runtime.
// ---------------------------------------------------------------------------------------------
struct MethodRecord {
    FunctionID functionId = 0;
    std::string name;
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> tailcalls{0};
    std::atomic<std::uint64_t> unwound{0};      // frames ended by an exception unwind
    std::atomic<std::uint64_t> inclusiveNs{0};
    std::atomic<std::uint64_t> exclusiveNs{0};
};

// ---------------------------------------------------------------------------------------------
// Per-thread shadow stack (native TLS; first touch on a thread is a native allocation by the C
// library, never a managed one).
// ---------------------------------------------------------------------------------------------
constexpr std::uint32_t kMaxDepth = 1024;

struct ShadowFrame {
    MethodRecord* record;
    std::uint64_t startNs;
    std::uint64_t childNs;
};

struct ThreadState {
    std::uint32_t depth = 0;
    std::uint32_t overflow = 0;        // frames pushed beyond kMaxDepth (counted, not timed)
    FunctionID unwinding = 0;          // function named by the last ExceptionUnwindFunctionEnter
    ShadowFrame frames[kMaxDepth];
};

thread_local ThreadState t_state;

inline std::uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Global statistics (relaxed atomics; hooks may run on any thread).
std::atomic<std::uint64_t> g_enters{0}, g_leaves{0}, g_tailcalls{0}, g_unwindPops{0};
std::atomic<std::uint64_t> g_resyncDropped{0}, g_unmatchedLeaves{0}, g_overflowFrames{0};

// Pops one frame and charges its time to its record and its caller.
inline void pop_frame(ThreadState& ts, std::uint64_t t) {
    ShadowFrame& f = ts.frames[--ts.depth];
    std::uint64_t incl = t >= f.startNs ? t - f.startNs : 0;
    std::uint64_t excl = incl >= f.childNs ? incl - f.childNs : 0;
    f.record->inclusiveNs.fetch_add(incl, std::memory_order_relaxed);
    f.record->exclusiveNs.fetch_add(excl, std::memory_order_relaxed);
    if (ts.depth > 0) ts.frames[ts.depth - 1].childNs += incl;
}

// Pops frames until `rec` is on top (frames above it were left without a leave notification),
// then pops `rec` itself.  Returns false when `rec` is not on the shadow stack at all.
inline bool pop_through(ThreadState& ts, MethodRecord* rec, std::uint64_t t) {
    if (ts.overflow > 0) {  // we are deeper than we record: this leave belongs to an untracked frame
        --ts.overflow;
        return true;
    }
    std::uint32_t i = ts.depth;
    while (i > 0 && ts.frames[i - 1].record != rec) --i;
    if (i == 0) return false;
    while (ts.depth > i) {
        pop_frame(ts, t);
        g_resyncDropped.fetch_add(1, std::memory_order_relaxed);
    }
    pop_frame(ts, t);
    return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// C++ halves of the hooks (called only from the assembly stubs below).
// ---------------------------------------------------------------------------------------------
extern "C" __attribute__((visibility("hidden"))) void eltm_enter_impl(FunctionID, UINT_PTR clientData,
                                                                       COR_PRF_FRAME_INFO,
                                                                       COR_PRF_FUNCTION_ARGUMENT_INFO*) noexcept {
    auto* rec = reinterpret_cast<MethodRecord*>(clientData);
    if (rec == nullptr) return;
    rec->calls.fetch_add(1, std::memory_order_relaxed);
    g_enters.fetch_add(1, std::memory_order_relaxed);
    ThreadState& ts = t_state;
    if (ts.depth >= kMaxDepth) {
        ++ts.overflow;
        g_overflowFrames.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    ts.frames[ts.depth++] = ShadowFrame{rec, now_ns(), 0};
}

extern "C" __attribute__((visibility("hidden"))) void eltm_leave_impl(FunctionID, UINT_PTR clientData,
                                                                       COR_PRF_FRAME_INFO,
                                                                       COR_PRF_FUNCTION_ARGUMENT_RANGE*) noexcept {
    auto* rec = reinterpret_cast<MethodRecord*>(clientData);
    if (rec == nullptr) return;
    g_leaves.fetch_add(1, std::memory_order_relaxed);
    if (!pop_through(t_state, rec, now_ns())) g_unmatchedLeaves.fetch_add(1, std::memory_order_relaxed);
}

extern "C" __attribute__((visibility("hidden"))) void eltm_tailcall_impl(FunctionID, UINT_PTR clientData,
                                                                          COR_PRF_FRAME_INFO) noexcept {
    auto* rec = reinterpret_cast<MethodRecord*>(clientData);
    if (rec == nullptr) return;
    rec->tailcalls.fetch_add(1, std::memory_order_relaxed);
    g_tailcalls.fetch_add(1, std::memory_order_relaxed);
    // The function making the tail call gets no FunctionLeave2: its frame ends here.
    if (!pop_through(t_state, rec, now_ns())) g_unmatchedLeaves.fetch_add(1, std::memory_order_relaxed);
}

// Register-save configuration read by the stubs (set once in Initialize, before the hooks can run).
extern "C" {
__attribute__((visibility("hidden"))) std::uint64_t eltm_save_area_size = 512;  // bytes, 64-aligned
__attribute__((visibility("hidden"))) std::uint32_t eltm_use_xsave = 0;
}

// ---------------------------------------------------------------------------------------------
// The hooks proper: naked assembly stubs.
//   frame:  push rbp; mov rbp,rsp; push rflags, rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11
//           (80 bytes below rbp), then an XSAVE/FXSAVE area of eltm_save_area_size bytes, 64-byte
//           aligned (XRSTOR faults on a non-zero header, so the 64-byte header is zeroed first).
//   call:   the four argument registers are reloaded from their save slots (rdx/rax were used for
//           the XSAVE mask) and the C++ half is called with rsp 64-byte aligned.
//   exit:   XRSTOR/FXRSTOR, pop everything in reverse order, ret (nothing was passed on the stack).
// ---------------------------------------------------------------------------------------------
#define ELTM_STUB(NAME, TARGET)                                   \
    ".globl " #NAME "\n"                                          \
    ".hidden " #NAME "\n"                                         \
    ".type " #NAME ", @function\n"                                \
    ".p2align 4\n" #NAME ":\n"                                    \
    "  .cfi_startproc\n"                                          \
    "  push rbp\n"                                                \
    "  .cfi_def_cfa_offset 16\n"                                  \
    "  .cfi_offset rbp, -16\n"                                    \
    "  mov rbp, rsp\n"                                            \
    "  .cfi_def_cfa_register rbp\n"                               \
    "  pushfq\n"                                                  \
    "  push rax\n"                                                \
    "  push rcx\n"                                                \
    "  push rdx\n"                                                \
    "  push rsi\n"                                                \
    "  push rdi\n"                                                \
    "  push r8\n"                                                 \
    "  push r9\n"                                                 \
    "  push r10\n"                                                \
    "  push r11\n"                                                \
    "  sub rsp, qword ptr [rip + eltm_save_area_size]\n"          \
    "  and rsp, -64\n"                                            \
    "  xor eax, eax\n"                                            \
    "  mov qword ptr [rsp + 512], rax\n"                          \
    "  mov qword ptr [rsp + 520], rax\n"                          \
    "  mov qword ptr [rsp + 528], rax\n"                          \
    "  mov qword ptr [rsp + 536], rax\n"                          \
    "  mov qword ptr [rsp + 544], rax\n"                          \
    "  mov qword ptr [rsp + 552], rax\n"                          \
    "  mov qword ptr [rsp + 560], rax\n"                          \
    "  mov qword ptr [rsp + 568], rax\n"                          \
    "  cmp dword ptr [rip + eltm_use_xsave], 0\n"                 \
    "  je 1f\n"                                                   \
    "  mov eax, -1\n"                                             \
    "  mov edx, -1\n"                                             \
    "  xsave64 [rsp]\n"                                           \
    "  jmp 2f\n"                                                  \
    "1:\n"                                                        \
    "  fxsave64 [rsp]\n"                                          \
    "2:\n"                                                        \
    "  mov rdi, qword ptr [rbp - 48]\n"                           \
    "  mov rsi, qword ptr [rbp - 40]\n"                           \
    "  mov rdx, qword ptr [rbp - 32]\n"                           \
    "  mov rcx, qword ptr [rbp - 24]\n"                           \
    "  cld\n"                                                     \
    "  call " #TARGET "\n"                                        \
    "  cmp dword ptr [rip + eltm_use_xsave], 0\n"                 \
    "  je 3f\n"                                                   \
    "  mov eax, -1\n"                                             \
    "  mov edx, -1\n"                                             \
    "  xrstor64 [rsp]\n"                                          \
    "  jmp 4f\n"                                                  \
    "3:\n"                                                        \
    "  fxrstor64 [rsp]\n"                                         \
    "4:\n"                                                        \
    "  lea rsp, [rbp - 80]\n"                                     \
    "  pop r11\n"                                                 \
    "  pop r10\n"                                                 \
    "  pop r9\n"                                                  \
    "  pop r8\n"                                                  \
    "  pop rdi\n"                                                 \
    "  pop rsi\n"                                                 \
    "  pop rdx\n"                                                 \
    "  pop rcx\n"                                                 \
    "  pop rax\n"                                                 \
    "  popfq\n"                                                   \
    "  pop rbp\n"                                                 \
    "  .cfi_def_cfa rsp, 8\n"                                     \
    "  ret\n"                                                     \
    "  .cfi_endproc\n"                                            \
    ".size " #NAME ", .-" #NAME "\n"

asm(".intel_syntax noprefix\n"
    ".text\n"
    ELTM_STUB(eltm_enter_stub, eltm_enter_impl)
    ELTM_STUB(eltm_leave_stub, eltm_leave_impl)
    ELTM_STUB(eltm_tailcall_stub, eltm_tailcall_impl)
    ".att_syntax prefix\n");

extern "C" void eltm_enter_stub(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_INFO*);
extern "C" void eltm_leave_stub(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*);
extern "C" void eltm_tailcall_stub(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO);

namespace {

// Decides XSAVE vs FXSAVE and the save-area size (CPUID leaf 0xD, sub-leaf 0: EBX = bytes needed
// for the features currently enabled in XCR0).
void configure_register_save() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) /* OSXSAVE */) {
        unsigned a2 = 0, b2 = 0, c2 = 0, d2 = 0;
        __cpuid_count(0xD, 0, a2, b2, c2, d2);
        if (b2 >= 576) {
            eltm_save_area_size = (static_cast<std::uint64_t>(b2) + 63) & ~static_cast<std::uint64_t>(63);
            eltm_use_xsave = 1;
            return;
        }
    }
    eltm_save_area_size = 576;  // FXSAVE needs 512; the stub also zeroes bytes 512..575
    eltm_use_xsave = 0;
}

bool env_is(const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, value) == 0;
}

class EltMapperProfiler;
EltMapperProfiler* g_profiler = nullptr;

class EltMapperProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[eltmapper] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hookAll_ = env_is("ELTMAPPER_HOOK", "all");
        configure_register_save();

        const DWORD mask = COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_DISABLE_INLINING;
        ICorProfilerInfo5* info5 = nullptr;
        if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info5)))) {
            hr = info5->SetEventMask2(mask, 0);
            info5->Release();
        } else {
            hr = info_->SetEventMask(mask);
        }
        if (failed(hr)) return fail("SetEventMask2", hr);

        g_profiler = this;
        hr = info_->SetFunctionIDMapper(&EltMapperProfiler::MapperThunk);
        if (failed(hr)) return fail("SetFunctionIDMapper", hr);

        hr = info_->SetEnterLeaveFunctionHooks2(&eltm_enter_stub, &eltm_leave_stub, &eltm_tailcall_stub);
        if (failed(hr)) return fail("SetEnterLeaveFunctionHooks2", hr);

        std::fprintf(stderr, "[eltmapper] initialized: hooks=ELT2 mapper=FunctionIDMapper filter=%s save=%s(%u bytes)\n",
                     hookAll_ ? "all" : "user-modules", eltm_use_xsave ? "xsave" : "fxsave",
                     (unsigned)eltm_save_area_size);
        return S_OK;
    }

    // ---- exception unwinding: frames left without FunctionLeave2 --------------------------------
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID functionId) override {
        t_state.unwinding = functionId;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionLeave() override {
        ThreadState& ts = t_state;
        FunctionID fid = ts.unwinding;
        ts.unwinding = 0;
        if (fid == 0) return S_OK;
        if (ts.overflow > 0) return S_OK;  // untracked deep frames: counting only
        // Only frames we hooked are on the shadow stack; the unwound frame is the topmost one.
        if (ts.depth > 0 && ts.frames[ts.depth - 1].record->functionId == fid) {
            ts.frames[ts.depth - 1].record->unwound.fetch_add(1, std::memory_order_relaxed);
            pop_frame(ts, now_ns());
            g_unwindPops.fetch_add(1, std::memory_order_relaxed);
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::vector<MethodRecord*> recs;
        std::size_t mapped = 0;
        {
            std::lock_guard<std::mutex> g(lock_);
            mapped = byFunction_.size();
            for (auto& kv : byFunction_)
                if (kv.second.hooked) recs.push_back(kv.second.record);
        }
        std::sort(recs.begin(), recs.end(), [](MethodRecord* a, MethodRecord* b) {
            return a->inclusiveNs.load(std::memory_order_relaxed) > b->inclusiveNs.load(std::memory_order_relaxed);
        });
        std::uint64_t called = 0;
        for (auto* r : recs)
            if (r->calls.load(std::memory_order_relaxed) > 0) ++called;
        std::fprintf(stderr,
                     "[eltmapper] shutdown: mapped=%zu hooked=%zu called=%" PRIu64 " enters=%" PRIu64 " leaves=%" PRIu64
                     " tailcalls=%" PRIu64 " unwound=%" PRIu64 " resynced=%" PRIu64 " unmatched=%" PRIu64
                     " overflow=%" PRIu64 " mapErrors=%u\n",
                     mapped, recs.size(), called, g_enters.load(), g_leaves.load(), g_tailcalls.load(),
                     g_unwindPops.load(), g_resyncDropped.load(), g_unmatchedLeaves.load(),
                     g_overflowFrames.load(), mapErrors_.load());
        // Generic methods have one FunctionID per code instantiation and therefore several records
        // with the same metadata name: tell them apart by FunctionID.
        std::unordered_map<std::string, int> nameCount;
        for (auto* r : recs) ++nameCount[r->name];
        std::size_t shown = 0;
        for (auto* r : recs) {
            if (shown == 12) break;
            std::uint64_t calls = r->calls.load(std::memory_order_relaxed);
            if (calls == 0) continue;
            char idbuf[40] = "";
            if (nameCount[r->name] > 1) std::snprintf(idbuf, sizeof idbuf, " [fid 0x%" PRIxPTR "]", r->functionId);
            std::fprintf(stderr, "[eltmapper]   %10" PRIu64 " calls %10.3f ms incl %10.3f ms excl  %s%s%s\n", calls,
                         r->inclusiveNs.load() / 1e6, r->exclusiveNs.load() / 1e6, r->name.c_str(), idbuf,
                         r->unwound.load() ? " (some frames unwound by exceptions)" : "");
            ++shown;
        }
        // Records are deliberately never freed: other threads may still be inside a hook.
        // Wait (briefly) for mapper calls that started before shutdown_ was set.
        for (int spins = 0; inflight_.load() != 0 && spins < 1000; ++spins) {
            timespec ts{0, 1000000};
            nanosleep(&ts, nullptr);
        }
        if (info_ != nullptr && inflight_.load() == 0) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    struct MapEntry {
        MethodRecord* record;  // null when not hooked
        bool hooked;
        UINT_PTR value;        // what the mapper returned for this FunctionID
    };

    HRESULT fail(const char* what, HRESULT hr) {
        std::fprintf(stderr, "[eltmapper] %s failed 0x%08x; profiler disabled\n", what, (unsigned)hr);
        info_->Release();
        info_ = nullptr;
        g_profiler = nullptr;
        return hr;
    }

    static UINT_PTR MapperThunk(FunctionID functionId, BOOL* pbHookFunction) {
        EltMapperProfiler* self = g_profiler;
        if (self == nullptr) {
            if (pbHookFunction) *pbHookFunction = 0;
            return functionId;
        }
        return self->Map(functionId, pbHookFunction);
    }

    // Keeps Shutdown from releasing info_ while a mapper call on another thread is still using it.
    struct InflightGuard {
        std::atomic<int>& n;
        explicit InflightGuard(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
        ~InflightGuard() { n.fetch_sub(1); }
    };

    UINT_PTR Map(FunctionID functionId, BOOL* pbHookFunction) {
        InflightGuard guard(inflight_);
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = byFunction_.find(functionId);
            if (it != byFunction_.end()) {  // same FunctionID -> same answer and same value
                *pbHookFunction = it->second.hooked ? 1 : 0;
                return it->second.value;
            }
        }
        // Not yet known: do the runtime lookups without holding our lock.
        ClassID classId = 0;
        ModuleID moduleId = 0;
        mdToken token = 0;
        bool hook = false;
        std::string name;
        if (!shutdown_.load() && info_ != nullptr &&
            succeeded(info_->GetFunctionInfo(functionId, &classId, &moduleId, &token))) {
            hook = hookAll_ || IsUserModule(moduleId);
            if (hook) name = ResolveName(functionId);
        } else {
            mapErrors_.fetch_add(1);
        }
        MethodRecord* rec = nullptr;
        if (hook) {
            rec = new (std::nothrow) MethodRecord();
            if (rec != nullptr) {
                rec->functionId = functionId;
                rec->name = name.empty() ? "?" : name;
            }
        }
        // Hooked: the record's address.  Not hooked: the FunctionID itself (non-null either way).
        MapEntry entry{rec, rec != nullptr, rec != nullptr ? reinterpret_cast<UINT_PTR>(rec) : functionId};

        std::lock_guard<std::mutex> g(lock_);
        auto ins = byFunction_.emplace(functionId, entry);
        if (!ins.second) delete rec;  // another thread mapped it first: return its value
        *pbHookFunction = ins.first->second.hooked ? 1 : 0;
        return ins.first->second.value;
    }

    bool IsUserModule(ModuleID moduleId) {
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = moduleIsUser_.find(moduleId);
            if (it != moduleIsUser_.end()) return it->second;
        }
        // Double-pass caller-allocated buffer.
        ULONG len = 0;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        bool user = false;
        HRESULT hr = info_->GetModuleInfo(moduleId, &base, 0, &len, nullptr, &asmId);
        if (succeeded(hr) && len > 0) {
            std::vector<WCHAR> buf(len + 1, 0);
            ULONG len2 = 0;
            hr = info_->GetModuleInfo(moduleId, &base, static_cast<ULONG>(buf.size()), &len2, buf.data(), &asmId);
            if (succeeded(hr)) {
                std::string path = to_utf8(buf.data(), buf.size());
                std::size_t slash = path.find_last_of('/');
                std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
                user = !(file.rfind("System.", 0) == 0 || file.rfind("Microsoft.", 0) == 0 ||
                         file.rfind("mscorlib", 0) == 0 || file.rfind("netstandard", 0) == 0);
            }
        }
        // Dynamic modules (empty name) are treated as non-user code.
        std::lock_guard<std::mutex> g(lock_);
        moduleIsUser_.emplace(moduleId, user);
        return user;
    }

    std::string ResolveName(FunctionID functionId) {
        IUnknown* unk = nullptr;
        mdToken token = 0;
        if (failed(info_->GetTokenAndMetaDataFromFunction(functionId, IID_IMetaDataImport, &unk, &token)) ||
            unk == nullptr)
            return std::string();
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        std::string out;
        WCHAR method[256] = {0};
        ULONG methodLen = 0;
        mdTypeDef typeDef = 0;
        DWORD attr = 0, implFlags = 0;
        PCCOR_SIGNATURE sig = nullptr;
        ULONG sigLen = 0, rva = 0;
        if (succeeded(md->GetMethodProps(token, &typeDef, method, 256, &methodLen, &attr, &sig, &sigLen, &rva,
                                         &implFlags))) {
            std::string typeName;
            // Walk out through enclosing types (nested classes), at most a few levels.
            mdTypeDef td = typeDef;
            for (int level = 0; level < 4 && td != 0; ++level) {
                WCHAR tname[256] = {0};
                ULONG tlen = 0;
                DWORD tflags = 0;
                mdToken ext = 0;
                if (failed(md->GetTypeDefProps(td, tname, 256, &tlen, &tflags, &ext))) break;
                std::string part = to_utf8(tname, 256);
                typeName = typeName.empty() ? part : part + "+" + typeName;
                mdTypeDef outer = 0;
                if (failed(md->GetNestedClassProps(td, &outer)) || outer == 0) break;
                td = outer;
            }
            out = (typeName.empty() ? std::string() : typeName + ".") + to_utf8(method, 256);
        }
        md->Release();
        return out;
    }

    ICorProfilerInfo2* info_ = nullptr;
    bool hookAll_ = false;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> mapErrors_{0};
    std::atomic<int> inflight_{0};
    std::mutex lock_;
    std::unordered_map<FunctionID, MapEntry> byFunction_;
    std::unordered_map<ModuleID, bool> moduleIsUser_;
};

}  // namespace

DOCFIX_DEFINE_PROFILER(EltMapperProfiler)
