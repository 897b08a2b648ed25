// idmapper_set_twice.cpp -- "hotpath": an ELT v2 call profiler that only instruments the
// application's own assembly, measuring per-method call counts and TSC cycles.
//
// Design
//   * Initialize: event mask COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_MONITOR_MODULE_LOADS |
//     COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_DISABLE_INLINING; a "boot" FunctionIDMapper that hooks
//     nothing (framework start-up code is not interesting and the application's module is not known
//     yet); the ELT v2 hooks via SetEnterLeaveFunctionHooks2.
//   * ModuleLoadFinished: the first module whose file is not a framework assembly is taken to be
//     the application; the profiler then installs the "app" mapper, which hooks every function of
//     that module and hands the hooks a pointer into a fixed arena of per-method slots.
//   * Hooks: GCC naked functions (x86-64 SysV).  Each saves RFLAGS, rax, rcx, rdx, rsi, rdi,
//     r8-r11 and the complete extended state with XSAVE (FXSAVE if the OS has not enabled XSAVE),
//     calls one C++ dispatcher with the event kind, restores and returns.  The dispatcher keeps a
//     per-thread shadow stack and charges rdtsc cycles (inclusive/exclusive) to the slots.
//   * ExceptionUnwindFunctionEnter/Leave pop frames that an exception removes.
//   * Shutdown: cycles are converted with a TSC frequency calibrated against CLOCK_MONOTONIC between
//     Initialize and Shutdown; prints the hottest methods by exclusive time to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
//   * FunctionEnter2 / FunctionLeave2 / FunctionTailcall2: "The implementation must use the
//     __declspec(naked) storage-class attribute."; "The execution engine does not save any registers
//     before calling this function. On entry, you must save all registers that you use, including
//     those in the floating-point unit (FPU). On exit, you must restore the stack by popping off all
//     the parameters that were pushed by its caller." (SysV passes all parameters in registers, so
//     `ret` pops nothing); "should not block"; "must not call into managed code or in any way cause
//     a managed memory allocation."; "The values of the func and argumentInfo parameters are not valid
//     after the FunctionEnter2 function returns".
//   * ICorProfilerInfo2::SetEnterLeaveFunctionHooks2: "may be called only from the profiler's
//     ICorProfilerCallback::Initialize callback."
//   * FunctionIDMapper: "The return value cannot be null unless false is returned in pbHookFunction."
//     and "The profiler should ensure that it returns the same value from this callback when it is
//     called multiple times with the same FunctionID."
//   * ICorProfilerCallback::JITInlining: "Functions inserted inline do not raise events for entering
//     or leaving."
//   * ICorProfilerCallback::ExceptionUnwindFunctionLeave: "When the ExceptionUnwindFunctionLeave
//     method is called, the function instance and its stack data are removed from the stack."
//   * ICorProfilerCallback::ModuleLoadFinished: "A failure HRESULT in hrStatus indicates a failure."
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
#include "common.h"

#include <algorithm>
#include <cinttypes>
#include <ctime>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cpuid.h>
#include <x86intrin.h>

using namespace docfix;

namespace hotpath {

struct Slot {
    FunctionID fid;
    char name[120];
    std::atomic<std::uint64_t> calls;
    std::atomic<std::uint64_t> inclCycles;
    std::atomic<std::uint64_t> exclCycles;
};

constexpr std::size_t kSlots = 1 << 14;
Slot g_arena[kSlots];
std::atomic<std::size_t> g_used{0};

struct Frame {
    Slot* slot;
    std::uint64_t t0;
    std::uint64_t children;
};
struct Stack {
    Frame f[768];
    std::uint32_t n;
    std::uint32_t lost;          // pushes that did not fit
    FunctionID unwinding;
};
thread_local Stack* t_stack = nullptr;

inline Stack* stack() {
    Stack* s = t_stack;
    if (s == nullptr) {
        s = static_cast<Stack*>(std::calloc(1, sizeof(Stack)));  // native heap, first hook on a thread
        t_stack = s;
    }
    return s;
}

std::atomic<std::uint64_t> g_events{0}, g_lostLeaves{0};

inline void close_top(Stack* s, std::uint64_t t) {
    Frame& fr = s->f[--s->n];
    std::uint64_t incl = t - fr.t0;
    fr.slot->inclCycles.fetch_add(incl, std::memory_order_relaxed);
    fr.slot->exclCycles.fetch_add(incl > fr.children ? incl - fr.children : 0, std::memory_order_relaxed);
    if (s->n) s->f[s->n - 1].children += incl;
}

}  // namespace hotpath

// kind: 0 = enter, 1 = leave, 2 = tailcall
extern "C" __attribute__((visibility("hidden"), used)) void hp_dispatch(std::uint64_t kind, UINT_PTR clientData) noexcept {
    using namespace hotpath;
    auto* slot = reinterpret_cast<Slot*>(clientData);
    if (slot == nullptr) return;
    std::uint64_t t = __rdtsc();
    g_events.fetch_add(1, std::memory_order_relaxed);
    Stack* s = stack();
    if (s == nullptr) return;
    if (kind == 0) {
        slot->calls.fetch_add(1, std::memory_order_relaxed);
        if (s->n == sizeof(s->f) / sizeof(s->f[0])) {
            ++s->lost;
            return;
        }
        s->f[s->n++] = Frame{slot, t, 0};
        return;
    }
    if (s->lost) {
        --s->lost;
        return;
    }
    std::uint32_t i = s->n;
    while (i && s->f[i - 1].slot != slot) --i;
    if (i == 0) {
        g_lostLeaves.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    while (s->n >= i) close_top(s, t);
}

extern "C" {
__attribute__((visibility("hidden"), used)) std::uint64_t hp_area = 576;
__attribute__((visibility("hidden"), used)) std::uint32_t hp_xsave = 0;
}

// The three hooks: naked, save everything, call hp_dispatch(kind, clientData), restore, ret.

#define HP_HOOK(NAME, KIND)                                                            \
    extern "C" __attribute__((naked, visibility("hidden"))) void NAME() {            \
        asm volatile(".intel_syntax noprefix\n"                                        \
                     "push rbp\n"                                                      \
                     "mov rbp, rsp\n"                                                  \
                     "pushfq\n"                                                        \
                     "push rax\n push rcx\n push rdx\n push rsi\n push rdi\n"          \
                     "push r8\n push r9\n push r10\n push r11\n"                       \
                     "sub rsp, qword ptr [rip + hp_area]\n"                            \
                     "and rsp, -64\n"                                                  \
                     "xor eax, eax\n"                                                  \
                     "mov ecx, 8\n"                                                    \
                     "lea rdi, [rsp + 512]\n"                                          \
                     "cld\n"                                                           \
                     "rep stosq\n"                                                     \
                     "cmp dword ptr [rip + hp_xsave], 0\n"                             \
                     "je 1f\n"                                                         \
                     "mov eax, -1\n mov edx, -1\n"                                     \
                     "xsave64 [rsp]\n"                                                 \
                     "jmp 2f\n"                                                        \
                     "1: fxsave64 [rsp]\n"                                             \
                     "2:\n"                                                            \
                     "mov edi, " #KIND "\n"                                            \
                     "mov rsi, qword ptr [rbp - 40]\n"                                 \
                     "call hp_dispatch\n"                                              \
                     "cmp dword ptr [rip + hp_xsave], 0\n"                             \
                     "je 3f\n"                                                         \
                     "mov eax, -1\n mov edx, -1\n"                                     \
                     "xrstor64 [rsp]\n"                                                \
                     "jmp 4f\n"                                                        \
                     "3: fxrstor64 [rsp]\n"                                            \
                     "4:\n"                                                            \
                     "lea rsp, [rbp - 80]\n"                                           \
                     "pop r11\n pop r10\n pop r9\n pop r8\n"                           \
                     "pop rdi\n pop rsi\n pop rdx\n pop rcx\n pop rax\n"               \
                     "popfq\n"                                                         \
                     "pop rbp\n"                                                       \
                     "ret\n"                                                           \
                     ".att_syntax prefix\n");                                          \
    }

HP_HOOK(hp_enter, 0)
HP_HOOK(hp_leave, 1)
HP_HOOK(hp_tailcall, 2)

namespace hotpath {

inline std::uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

bool is_framework(const std::string& file) {
    static const char* prefixes[] = {"System.", "Microsoft.", "mscorlib", "netstandard", "WindowsBase"};
    for (const char* p : prefixes)
        if (file.rfind(p, 0) == 0) return true;
    return false;
}

class HotPath : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_)))) return E_FAIL;
        self_ = this;

        unsigned a, b, c, d;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {
            __cpuid_count(0xD, 0, a, b, c, d);
            if (b >= 576) {
                hp_area = (b + 63u) & ~63u;
                hp_xsave = 1;
            }
        }

        const DWORD events = COR_PRF_MONITOR_ENTERLEAVE | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_EXCEPTIONS |
                             COR_PRF_DISABLE_INLINING;
        HRESULT hr;
        ICorProfilerInfo5* info5 = nullptr;
        if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info5)))) {
            hr = info5->SetEventMask2(events, 0);  // "You should call the SetEventMask2 method instead"
            info5->Release();
        } else {
            hr = info_->SetEventMask(events);
        }
        if (succeeded(hr)) hr = info_->SetFunctionIDMapper(&HotPath::BootMapper);
        if (succeeded(hr))
            hr = info_->SetEnterLeaveFunctionHooks2(reinterpret_cast<FunctionEnter2*>(&hp_enter),
                                                    reinterpret_cast<FunctionLeave2*>(&hp_leave),
                                                    reinterpret_cast<FunctionTailcall2*>(&hp_tailcall));
        if (failed(hr)) {
            std::fprintf(stderr, "[hotpath] setup failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        t0ns_ = mono_ns();
        t0tsc_ = __rdtsc();
        std::fprintf(stderr, "[hotpath] ready (%s, %u-byte save area)\n", hp_xsave ? "xsave" : "fxsave",
                     (unsigned)hp_area);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (failed(hrStatus) || info_ == nullptr || appModule_.load() != 0) return S_OK;
        WCHAR buf[512];
        ULONG n = 0;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        if (failed(info_->GetModuleInfo(moduleId, &base, 512, &n, buf, &asmId)) || n == 0 || n > 512) return S_OK;
        std::string path = to_utf8(buf, n);
        std::string file = path.substr(path.find_last_of('/') + 1);
        if (file.empty() || is_framework(file)) return S_OK;
        ModuleID expected = 0;
        if (!appModule_.compare_exchange_strong(expected, moduleId)) return S_OK;
        appName_ = file;
        // Switch from the boot mapper to the application mapper now that the app module is known.
        // (Initialize already installed BootMapper; this is a second SetFunctionIDMapper call, made
        // from ModuleLoadFinished.  ICorProfilerInfo::SetFunctionIDMapper: "The FunctionIDMapper can be
        // set only once and it is recommended that you set it in the ICorProfilerCallback::Initialize
        // callback.")
        HRESULT hr = info_->SetFunctionIDMapper(&HotPath::AppMapper);  // BUG: "The FunctionIDMapper can be set only once"
        std::fprintf(stderr, "[hotpath] application module %s; app mapper installed hr=0x%08x\n", file.c_str(),
                     (unsigned)hr);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID fid) override {
        if (Stack* s = stack()) s->unwinding = fid;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionLeave() override {
        Stack* s = stack();
        if (s == nullptr) return S_OK;
        FunctionID fid = s->unwinding;
        s->unwinding = 0;
        if (fid != 0 && s->lost == 0 && s->n > 0 && s->f[s->n - 1].slot->fid == fid) {
            close_top(s, __rdtsc());
            ++unwinds_;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        double cyclesPerNs = 0;
        std::uint64_t dns = mono_ns() - t0ns_, dtsc = __rdtsc() - t0tsc_;
        if (dns) cyclesPerNs = double(dtsc) / double(dns);
        std::size_t used = std::min(g_used.load(), kSlots);
        std::vector<Slot*> v;
        std::uint64_t calls = 0;
        for (std::size_t i = 0; i < used; ++i) {
            v.push_back(&g_arena[i]);
            calls += g_arena[i].calls.load();
        }
        std::sort(v.begin(), v.end(), [](Slot* x, Slot* y) { return x->exclCycles.load() > y->exclCycles.load(); });
        std::fprintf(stderr,
                     "[hotpath] shutdown: app=%s mapperCalls=%" PRIu64 " instrumented=%zu calls=%" PRIu64
                     " events=%" PRIu64 " unwinds=%" PRIu64 " lostLeaves=%" PRIu64 " tsc=%.2f/ns\n",
                     appName_.empty() ? "?" : appName_.c_str(), mapperCalls_.load(), used, calls, g_events.load(),
                     unwinds_.load(), g_lostLeaves.load(), cyclesPerNs);
        for (std::size_t i = 0; i < v.size() && i < 8; ++i) {
            Slot* s = v[i];
            if (!s->calls.load()) continue;
            double ex = cyclesPerNs > 0 ? s->exclCycles.load() / cyclesPerNs / 1e6 : 0;
            double in = cyclesPerNs > 0 ? s->inclCycles.load() / cyclesPerNs / 1e6 : 0;
            std::fprintf(stderr, "[hotpath]   %-40s %8" PRIu64 " calls  excl %9.3f ms  incl %9.3f ms\n", s->name,
                         s->calls.load(), ex, in);
        }
        if (info_) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // Start-up: hook nothing; the returned value is the FunctionID itself (never null).
    static UINT_PTR BootMapper(FunctionID fid, BOOL* pbHook) {
        self_->mapperCalls_.fetch_add(1, std::memory_order_relaxed);
        *pbHook = 0;
        return fid;
    }

    static UINT_PTR AppMapper(FunctionID fid, BOOL* pbHook) {
        HotPath* p = self_;
        p->mapperCalls_.fetch_add(1, std::memory_order_relaxed);
        {
            std::lock_guard<std::mutex> g(p->mu_);
            auto it = p->assigned_.find(fid);
            if (it != p->assigned_.end()) {
                *pbHook = it->second != nullptr;
                return it->second ? reinterpret_cast<UINT_PTR>(it->second) : fid;
            }
        }
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        Slot* slot = nullptr;
        if (p->info_ && succeeded(p->info_->GetFunctionInfo(fid, &cls, &mod, &tok)) && mod == p->appModule_.load()) {
            std::size_t idx = g_used.fetch_add(1);
            if (idx < kSlots) {
                slot = &g_arena[idx];
                slot->fid = fid;
                p->NameInto(fid, slot->name, sizeof slot->name);
            }
        }
        std::lock_guard<std::mutex> g(p->mu_);
        auto ins = p->assigned_.emplace(fid, slot);
        Slot* s = ins.first->second;  // if another thread won, its slot is used (ours stays unused, unnamed)
        if (!ins.second && slot) std::snprintf(slot->name, sizeof slot->name, "(duplicate)");
        *pbHook = s != nullptr;
        return s ? reinterpret_cast<UINT_PTR>(s) : fid;
    }

    void NameInto(FunctionID fid, char* out, std::size_t cap) {
        std::snprintf(out, cap, "fid:0x%" PRIxPTR, fid);
        IUnknown* unk = nullptr;
        mdToken tok = 0;
        if (failed(info_->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok)) || !unk) return;
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        WCHAR m[128], t[128];
        ULONG ml = 0, tl = 0, sigLen = 0, rva = 0;
        mdTypeDef td = 0;
        DWORD attr = 0, impl = 0, tflags = 0;
        mdToken ext = 0;
        PCCOR_SIGNATURE sig = nullptr;
        if (succeeded(md->GetMethodProps(tok, &td, m, 128, &ml, &attr, &sig, &sigLen, &rva, &impl))) {
            std::string tn;
            if (succeeded(md->GetTypeDefProps(td, t, 128, &tl, &tflags, &ext))) tn = to_utf8(t, 128);
            std::snprintf(out, cap, "%s::%s", tn.c_str(), to_utf8(m, 128).c_str());
        }
        md->Release();
    }

    static HotPath* self_;
    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<ModuleID> appModule_{0};
    std::string appName_;
    std::mutex mu_;
    std::unordered_map<FunctionID, Slot*> assigned_;
    std::atomic<std::uint64_t> mapperCalls_{0}, unwinds_{0};
    std::uint64_t t0ns_ = 0, t0tsc_ = 0;
};

HotPath* HotPath::self_ = nullptr;

}  // namespace hotpath

DOCFIX_DEFINE_PROFILER(hotpath::HotPath)
