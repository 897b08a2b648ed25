// The signal-safety preload (issue 21, docs/design.md): LD_PRELOAD-ed into every validate run, beside the
// user's companions. It wraps the signal handlers the profiler installs (sigaction, signal, bsd_signal,
// sysv_signal called from the profiler's own module) so that each runs inside a wrapper that counts a
// thread-local depth; inside a wrapped handler, a call of a function signal-safety(7) does not list (the
// malloc family, operator new/delete, stdio, pthread mutexes, condition variables and rwlocks, dlopen/dlsym/
// dladdr/dlclose) is noted with the profiler's frame that made it, into a preallocated table of atomics
// (profharness/preload.h) the proxy writes into the trace from its watchdog thread. Outside a handler each
// interposed function costs one thread-local test and a jump.
//
// Whose handler: the caller of sigaction/signal must be a profiler module (the file PROFHARNESS_PROXY_TARGET
// names, or a companion the user preloaded: PROFHARNESS_PRELOAD_PROFILER), never any other: the runtime's
// own handlers (libcoreclr's SIGSEGV/SIGILL/activation-injection handlers, libSystem.Native's SIGINT/SIGCHLD/
// ..., libclrjit) use the runtime's own machinery legitimately and are left alone, and so are the app's
// native libraries (a denylist of "the runtime's and libc's modules" would blame the profiler for them).
//
// Deadlock injection (PROFHARNESS_PRELOAD_INJECT=1): once a run, after a wrapped handler ran a few times,
// the next allocation on a thread the handler already ran on takes the preload's own non-recursive
// "allocator lock" around the real malloc and raises the profiler's signal on that thread (rt_tgsigqueueinfo,
// with the last siginfo the kernel gave that signal: a timer sampler reads si_value) while
// holding it; an allocation inside a wrapped handler waits for that lock, as glibc's malloc waits for its
// arena's: a handler that allocates deadlocks there, deterministically. Both stacks (where the lock was
// taken, where the handler waits) are kept for the proxy's watchdog, which reports and ends the process.
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "profharness/preload.h"

#define PRELOAD_EXPORT extern "C" __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RA() __builtin_return_address(0)

using namespace profharness::preload;

// --- state shared with the assembly trampolines (dlopen, dlsym: the caller's return address stays theirs) --

extern "C" {
HIDDEN __attribute__((tls_model("initial-exec"))) __thread int profharness_preload_depth = 0;
HIDDEN void* profharness_preload_real_dlopen = nullptr;
HIDDEN void* profharness_preload_real_dlsym = nullptr;
HIDDEN void profharness_preload_note_asm(int fn, void* ra);
}

namespace {

// The interposed functions, in the order of the Function enum (preload.h): each one's name (as the proxy reports
// it) and the libc / libstdc++ symbol its wrapper forwards to (the printf family forwards to its v-variant;
// errno is not a call and forwards to nothing).
struct Interposed {
    const char* name;
    const char* real;
};
constexpr Interposed kFunctions[kFunctionCount] = {
    {"malloc", "malloc"}, {"calloc", "calloc"}, {"realloc", "realloc"}, {"free", "free"},
    {"posix_memalign", "posix_memalign"}, {"aligned_alloc", "aligned_alloc"}, {"memalign", "memalign"},
    {"operator new", "_Znwm"}, {"operator new[]", "_Znam"}, {"operator new(nothrow)", "_ZnwmRKSt9nothrow_t"},
    {"operator new[](nothrow)", "_ZnamRKSt9nothrow_t"}, {"operator delete", "_ZdlPv"},
    {"operator delete[]", "_ZdaPv"}, {"operator delete(sized)", "_ZdlPvm"}, {"operator delete[](sized)", "_ZdaPvm"},
    {"printf", "vprintf"}, {"fprintf", "vfprintf"}, {"vprintf", "vprintf"}, {"vfprintf", "vfprintf"},
    {"sprintf", "vsprintf"}, {"snprintf", "vsnprintf"}, {"vsnprintf", "vsnprintf"}, {"puts", "puts"},
    {"fputs", "fputs"}, {"fputc", "fputc"}, {"putchar", "putchar"}, {"fwrite", "fwrite"}, {"fflush", "fflush"},
    {"fopen", "fopen"}, {"fclose", "fclose"}, {"__printf_chk", "__vprintf_chk"},
    {"__fprintf_chk", "__vfprintf_chk"}, {"__vfprintf_chk", "__vfprintf_chk"},
    {"__snprintf_chk", "__vsnprintf_chk"}, {"__vsnprintf_chk", "__vsnprintf_chk"},
    {"pthread_mutex_lock", "pthread_mutex_lock"}, {"pthread_mutex_trylock", "pthread_mutex_trylock"},
    {"pthread_mutex_timedlock", "pthread_mutex_timedlock"}, {"pthread_mutex_unlock", "pthread_mutex_unlock"},
    {"pthread_cond_wait", "pthread_cond_wait"}, {"pthread_cond_timedwait", "pthread_cond_timedwait"},
    {"pthread_cond_signal", "pthread_cond_signal"}, {"pthread_cond_broadcast", "pthread_cond_broadcast"},
    {"pthread_rwlock_rdlock", "pthread_rwlock_rdlock"}, {"pthread_rwlock_wrlock", "pthread_rwlock_wrlock"},
    {"pthread_rwlock_unlock", "pthread_rwlock_unlock"},
    {"dlopen", "dlopen"}, {"dlsym", "dlsym"}, {"dladdr", "dladdr"}, {"dlclose", "dlclose"},
    {"errno", nullptr},
};
// their names alone, the table the proxy reads through g_shared.function_names
template <std::size_t... K>
constexpr std::array<const char*, kFunctionCount> names_of(std::index_sequence<K...>) {
    return {kFunctions[K].name...};
}
constexpr std::array<const char*, kFunctionCount> kFunctionNames = names_of(std::make_index_sequence<kFunctionCount>{});

Shared g_shared;
void* g_real[kFunctionCount];
using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
SigactionFn g_real_sigaction = nullptr;
using SimpleFn = void (*(*)(int, void (*)(int)))(int);
SimpleFn g_real_signal = nullptr, g_real_bsd_signal = nullptr, g_real_sysv_signal = nullptr;
std::atomic<int> g_resolved{0};  // 0 not yet, 1 resolving, 2 done

__attribute__((tls_model("initial-exec"))) __thread int tl_quiet = 0;
__attribute__((tls_model("initial-exec"))) __thread int tl_sig = 0;
__attribute__((tls_model("initial-exec"))) __thread std::uintptr_t tl_handler_sp = 0;
__attribute__((tls_model("initial-exec"))) __thread std::uintptr_t tl_handler_fn = 0;  // the profiler's handler
__attribute__((tls_model("initial-exec"))) __thread std::uintptr_t tl_alt_lo = 0;  // the sigaltstack the
__attribute__((tls_model("initial-exec"))) __thread std::uintptr_t tl_alt_hi = 0;  // handler runs on (0: none)
__attribute__((tls_model("initial-exec"))) __thread int tl_seen = 0;       // a wrapped handler ran here
__attribute__((tls_model("initial-exec"))) __thread int tl_injecting = 0;

// Whether the depth still describes a running handler: a handler left without returning (siglongjmp out of a
// "safe read" SIGSEGV handler, a C++ throw, a context restore) leaves it above 0. The handler's frames lie
// below its entry frame (tl_handler_sp) and, on a sigaltstack, inside that stack; a stack pointer outside
// that region means the handler is gone: the depth and the handler's marks are reset (self-correcting).
__attribute__((noinline)) bool handler_live() {
    if (profharness_preload_depth <= 0) return false;
    volatile char here = 0;
    const auto sp = reinterpret_cast<std::uintptr_t>(&here);
    if (sp < tl_handler_sp && (tl_alt_hi == 0 || (sp >= tl_alt_lo && sp < tl_alt_hi))) return true;
    profharness_preload_depth = 0;
    tl_handler_sp = 0;
    tl_handler_fn = 0;
    tl_alt_lo = tl_alt_hi = 0;
    tl_sig = 0;
    return false;
}

// --- the bootstrap arena: allocations made while the real functions are being looked up (dlsym may
// calloc) come from here and are never freed ---------------------------------------------------------------

alignas(16) char g_boot[1 << 16];
std::atomic<std::size_t> g_boot_used{0};

bool is_boot(const void* p) {
    return p >= static_cast<const void*>(g_boot) && p < static_cast<const void*>(g_boot + sizeof g_boot);
}

void* boot_alloc(std::size_t n) {
    const std::size_t need = ((n + 15) & ~std::size_t{15}) + 16;
    const std::size_t at = g_boot_used.fetch_add(need);
    if (at + need > sizeof g_boot) return nullptr;
    *reinterpret_cast<std::size_t*>(g_boot + at) = n;
    return g_boot + at + 16;
}

std::size_t boot_size(const void* p) { return *reinterpret_cast<const std::size_t*>(static_cast<const char*>(p) - 16); }

// --- the profiler's modules ---------------------------------------------------------------------------------

struct Range {
    std::uintptr_t lo, hi;
};
constexpr int kMaxModules = 8;
constexpr int kMaxRanges = 32;
Range g_ranges[kMaxRanges];
std::atomic<int> g_nranges{0};
std::uintptr_t g_module_bases[kMaxModules];
std::atomic<int> g_nmodules{0};
struct FileId {
    dev_t dev;
    ino_t ino;
};
FileId g_profiler_files[kMaxModules];
int g_nfiles = 0;

void add_file(const char* path, std::size_t len) {
    char buf[4096];
    if (len == 0 || len >= sizeof buf || g_nfiles >= kMaxModules) return;
    memcpy(buf, path, len);
    buf[len] = 0;
    struct stat st;
    if (::stat(buf, &st) == 0) g_profiler_files[g_nfiles++] = FileId{st.st_dev, st.st_ino};
}

// PROFHARNESS_PROXY_TARGET and PROFHARNESS_PRELOAD_PROFILER (colon- or space-separated companions).
void read_profiler_files() {
    if (const char* t = getenv("PROFHARNESS_PROXY_TARGET")) add_file(t, strlen(t));
    if (const char* c = getenv("PROFHARNESS_PRELOAD_PROFILER")) {
        const char* p = c;
        while (*p) {
            const char* e = p;
            while (*e && *e != ':' && *e != ' ') ++e;
            add_file(p, static_cast<std::size_t>(e - p));
            p = *e ? e + 1 : e;
        }
    }
}

bool in_ranges(std::uintptr_t a) {
    const int n = g_nranges.load(std::memory_order_acquire);
    for (int k = 0; k < n; ++k)
        if (a >= g_ranges[k].lo && a < g_ranges[k].hi) return true;
    return false;
}

int add_ranges_of(dl_phdr_info* info, std::size_t, void* base) {
    if (info->dlpi_addr != *static_cast<std::uintptr_t*>(base)) return 0;
    for (int k = 0; k < info->dlpi_phnum; ++k) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[k];
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
        const int n = g_nranges.load();
        if (n >= kMaxRanges) break;
        g_ranges[n] = Range{info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
        g_nranges.store(n + 1, std::memory_order_release);
    }
    return 1;
}

// Whether `ra` (outside any handler) is in a profiler module; the first time one is seen its executable
// ranges are kept for the frame scan. Called from sigaction/signal only (dladdr and stat are not
// async-signal-safe; a handler changing dispositions is passed through).
bool profiler_caller_uncached(const void* ra) {
    Dl_info di;
    if (!dladdr(ra, &di) || !di.dli_fname || !di.dli_fbase) return false;
    const auto base = reinterpret_cast<std::uintptr_t>(di.dli_fbase);
    const int nm = g_nmodules.load();
    for (int k = 0; k < nm; ++k)
        if (g_module_bases[k] == base) return true;
    struct stat st;
    if (::stat(di.dli_fname, &st) != 0) return false;
    bool ours = false;
    for (int k = 0; k < g_nfiles; ++k)
        ours = ours || (g_profiler_files[k].dev == st.st_dev && g_profiler_files[k].ino == st.st_ino);
    if (!ours || nm >= kMaxModules) return ours;
    g_module_bases[nm] = base;
    g_nmodules.store(nm + 1);
    std::uintptr_t b = base;
    dl_iterate_phdr(&add_ranges_of, &b);
    return true;
}

// profiler_caller_uncached's verdict per call site (return address), kept in a lock-free table so that
// dladdr and stat run at most once per site: sigaction/signal stay async-signal-safe for everyone after
// a site's first call. A full table answers uncached.
constexpr int kCallerSlots = 512;
std::atomic<std::uintptr_t> g_caller_key[kCallerSlots];
std::atomic<int> g_caller_verdict[kCallerSlots];  // 0: being decided, 1: not the profiler, 2: the profiler

bool profiler_caller(const void* ra) {
    const auto key = reinterpret_cast<std::uintptr_t>(ra);
    if (!key) return false;
    std::uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    for (int probe = 0; probe < 16; ++probe, h += 0x9E3779B97F4A7C15ULL) {
        const auto slot = static_cast<int>((h >> 40) % kCallerSlots);
        std::uintptr_t k = g_caller_key[slot].load(std::memory_order_acquire);
        if (k == 0) {
            std::uintptr_t expected = 0;
            if (g_caller_key[slot].compare_exchange_strong(expected, key)) {
                const bool ours = profiler_caller_uncached(ra);
                g_caller_verdict[slot].store(ours ? 2 : 1, std::memory_order_release);
                return ours;
            }
            k = expected;
        }
        if (k == key) {
            const int v = g_caller_verdict[slot].load(std::memory_order_acquire);
            if (v != 0) return v == 2;
            return profiler_caller_uncached(ra);  // another thread is deciding it now
        }
    }
    return profiler_caller_uncached(ra);
}

// Whether the bytes before `a` end a call instruction (so `a` is a return address, not stale data).
bool after_call(std::uintptr_t a) {
    const auto* p = reinterpret_cast<const unsigned char*>(a);
    if (!in_ranges(a - 7)) return false;
    if (p[-5] == 0xE8) return true;                                       // call rel32
    if (p[-2] == 0xFF && (p[-1] & 0x38) == 0x10) return true;             // call *%reg / (%reg)
    if (p[-3] == 0xFF && (p[-2] & 0x38) == 0x10) return true;             // call *disp8(%reg)
    if (p[-6] == 0xFF && (p[-5] & 0x38) == 0x10) return true;             // call *disp32(%rip|%reg)
    if (p[-7] == 0xFF && (p[-6] & 0x38) == 0x10) return true;             // with a SIB byte
    if (p[-4] == 0xFF && (p[-3] & 0x38) == 0x10) return true;             // disp8 with SIB
    return false;
}

// The profiler's frame a call inside a handler came from: the immediate return address when it is the
// profiler's, else the innermost return address into the profiler on the stack between here and the
// handler's wrapper (a call made inside libstdc++ or libc on the profiler's behalf); else (the handler
// tail-called the function: its frame is gone) the handler's entry + 1, which names the handler itself.
std::uintptr_t profiler_frame(std::uintptr_t ra) {
    if (in_ranges(ra)) return ra;
    volatile std::uintptr_t here = 0;
    auto p = reinterpret_cast<std::uintptr_t>(&here) & ~std::uintptr_t{7};
    std::uintptr_t top = tl_handler_sp;  // the handler's entry frame, never more than 64 KiB up
    if (top > p + (std::uintptr_t{64} << 10)) top = p + (std::uintptr_t{64} << 10);
    if (tl_alt_hi && top > tl_alt_hi) top = tl_alt_hi;
    for (; top && p + 8 <= top; p += 8) {
        const std::uintptr_t w = *reinterpret_cast<const std::uintptr_t*>(p);
        if (in_ranges(w) && after_call(w)) return w;
    }
    return tl_handler_fn ? tl_handler_fn + 1 : 0;
}

std::int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

long gettid_() { return static_cast<long>(::syscall(SYS_gettid)); }

// --- the table --------------------------------------------------------------------------------------------

void note_site(int fn, std::uintptr_t caller, std::uintptr_t via) {
    const std::uint64_t key = (static_cast<std::uint64_t>(caller ? caller : via) << 16) | static_cast<std::uint64_t>(fn);
    std::uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    for (int probe = 0; probe < kSites; ++probe) {
        Site& s = g_shared.sites[(h >> 40) % kSites];
        h += 0x9E3779B97F4A7C15ULL;
        std::uint64_t k = s.key.load(std::memory_order_acquire);
        if (k == 0) {
            std::uint64_t expected = 0;
            if (s.key.compare_exchange_strong(expected, key)) {
                s.via.store(via, std::memory_order_relaxed);
                s.os_tid.store(gettid_(), std::memory_order_relaxed);
                s.signo.store(tl_sig, std::memory_order_relaxed);
                s.count.fetch_add(1, std::memory_order_relaxed);
                s.published.store(1, std::memory_order_release);
                return;
            }
            k = expected;
        }
        if (k == key) {
            s.count.fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
    g_shared.dropped.fetch_add(1, std::memory_order_relaxed);
}

void note(int fn, const void* ra) {
    if (tl_quiet || !handler_live()) return;
    const int saved = errno;
    const auto via = reinterpret_cast<std::uintptr_t>(ra);
    note_site(fn, profiler_frame(via), via);
    errno = saved;
}

// --- resolving the real functions --------------------------------------------------------------------------

using DlsymFn = void* (*)(void*, const char*);

void resolve_all() {
    int expected = 0;
    if (!g_resolved.compare_exchange_strong(expected, 1)) return;  // resolving elsewhere or done
    void* ds = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!ds) ds = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    profharness_preload_real_dlsym = ds;
    auto real_dlsym = reinterpret_cast<DlsymFn>(ds);
    for (int k = 0; k < kFunctionCount; ++k) {
        if (!kFunctions[k].real) continue;
        void* f = nullptr;
        if (k == kCondWait || k == kCondTimedwait || k == kCondSignal || k == kCondBroadcast)
            f = dlvsym(RTLD_NEXT, kFunctions[k].real, "GLIBC_2.3.2");
        if (!f && real_dlsym) f = real_dlsym(RTLD_NEXT, kFunctions[k].real);
        __atomic_store_n(&g_real[k], f, __ATOMIC_RELEASE);
    }
    profharness_preload_real_dlopen = g_real[kDlopen];
    g_real_sigaction = real_dlsym ? reinterpret_cast<SigactionFn>(real_dlsym(RTLD_NEXT, "sigaction")) : nullptr;
    if (real_dlsym) {  // once: pass_simple never looks them up again
        g_real_signal = reinterpret_cast<SimpleFn>(real_dlsym(RTLD_NEXT, "signal"));
        g_real_bsd_signal = reinterpret_cast<SimpleFn>(real_dlsym(RTLD_NEXT, "bsd_signal"));
        g_real_sysv_signal = reinterpret_cast<SimpleFn>(real_dlsym(RTLD_NEXT, "sysv_signal"));
    }
    g_resolved.store(2, std::memory_order_release);
}

template <typename F>
F real(int fn) {
    void* f = __atomic_load_n(&g_real[fn], __ATOMIC_ACQUIRE);
    if (UNLIKELY(!f) && g_resolved.load(std::memory_order_acquire) == 0) {
        resolve_all();
        f = __atomic_load_n(&g_real[fn], __ATOMIC_ACQUIRE);
    }
    return reinterpret_cast<F>(f);
}

// libstdc++'s operator new/delete: it is seldom in the global scope of a runtime's process (the host and the
// profiler load it RTLD_LOCAL), so RTLD_NEXT misses it; it is looked up in libstdc++ itself, outside any
// handler (at the profiler's sigaction, or at the first call), never from inside one.
void resolve_cxx() {
    if (g_resolved.load() != 2 || !profharness_preload_real_dlopen || !profharness_preload_real_dlsym) return;
    using DlopenFn = void* (*)(const char*, int);
    void* lib = reinterpret_cast<DlopenFn>(profharness_preload_real_dlopen)("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return;
    for (int k = kNew; k <= kDeleteArraySized; ++k)
        if (!__atomic_load_n(&g_real[k], __ATOMIC_ACQUIRE))
            __atomic_store_n(&g_real[k],
                             reinterpret_cast<DlsymFn>(profharness_preload_real_dlsym)(lib, kFunctions[k].real),
                             __ATOMIC_RELEASE);
}

template <typename F>
F real_late(int fn) {
    F f = real<F>(fn);
    if (LIKELY(f) || profharness_preload_depth != 0) return f;
    resolve_cxx();
    return real<F>(fn);
}

// --- the deadlock injection -----------------------------------------------------------------------------------

bool g_inject_enabled = false;
std::atomic<int> g_armed{0};
std::atomic<long> g_lock_owner{0};  // the emulated allocator lock (0: free)
constexpr std::uint64_t kRunsBeforeInjection = 3;
// The last real siginfo of each signal (copied in the wrapper while the injection is pending): the injected
// signal carries it (si_code, si_value: a timer sampler reads its context from si_value.sival_ptr).
siginfo_t g_last_info[kHandlers];
std::atomic<int> g_have_info[kHandlers];

using MallocFn = void* (*)(std::size_t);

// An allocation inside a wrapped handler: waits for the allocator lock when someone holds it (never, when
// the holder is this very thread: the deadlock a real allocator's lock makes).
void wait_for_allocator(int fn, const void* ra) {
    if (g_lock_owner.load(std::memory_order_acquire) == 0 || !handler_live()) return;
    Injection& inj = g_shared.injection;
    const int saved = errno;
    inj.waiter_caller.store(profiler_frame(reinterpret_cast<std::uintptr_t>(ra)));
    inj.waiter_function.store(fn);
    inj.waiter_n.store(backtrace(inj.waiter_stack, kStackDepth), std::memory_order_release);
    inj.waiter_tid.store(gettid_());
    inj.wait_since_ns.store(now_ns(), std::memory_order_release);
    while (g_lock_owner.load(std::memory_order_acquire) != 0) {
        timespec ts{0, 1000000};
        nanosleep(&ts, nullptr);
    }
    inj.wait_since_ns.store(0);
    errno = saved;
}

void* inject_malloc(std::size_t n) {
    Injection& inj = g_shared.injection;
    int expected = 1;
    tl_injecting = 1;
    if (!g_armed.exchange(0) || !inj.state.compare_exchange_strong(expected, 2)) {
        tl_injecting = 0;
        return real<MallocFn>(kMalloc)(n);
    }
    const long self = gettid_();
    const int sig = inj.signo.load();
    inj.holder_n = backtrace(inj.holder_stack, kStackDepth);
    inj.holder_tid.store(self);
    g_lock_owner.store(self, std::memory_order_release);
    void* p = real<MallocFn>(kMalloc)(n);
    // delivered before the call returns; with the signal's last real siginfo (never an empty SI_TKILL one)
    siginfo_t copy;
    const bool have = sig > 0 && sig < kHandlers && g_have_info[sig].load(std::memory_order_acquire) != 0;
    if (have) copy = g_last_info[sig];
    if (!have || ::syscall(SYS_rt_tgsigqueueinfo, static_cast<long>(getpid()), self, sig, &copy) != 0)
        ::syscall(SYS_tgkill, static_cast<long>(getpid()), self, sig);
    g_lock_owner.store(0, std::memory_order_release);
    inj.state.store(inj.state.load() == 4 ? 3 : 5);  // 3: delivered under the lock, returned; 5: not delivered
    tl_injecting = 0;
    return p;
}

// --- threads parked in a wrapped handler (issue 24 part 4, proxy/walkq.cpp): the ucontext each was
// interrupted with, by thread id, while its outermost wrapped handler runs. A slot is claimed with one CAS on
// entry and freed on return (atomics only: async-signal-safe); a full table leaves the thread out.
constexpr int kParkedSlots = 256;
struct Parked {
    std::atomic<long> tid{0};
    std::atomic<void*> uc{nullptr};
};
Parked g_parked[kParkedSlots];

int park(long tid, void* uc) {
    for (int k = 0; k < kParkedSlots; ++k) {
        long free_tid = 0;
        if (g_parked[k].tid.load(std::memory_order_relaxed) == 0 &&
            g_parked[k].tid.compare_exchange_strong(free_tid, -1, std::memory_order_acquire)) {
            g_parked[k].uc.store(uc, std::memory_order_relaxed);
            g_parked[k].tid.store(tid, std::memory_order_release);
            return k;
        }
    }
    return -1;
}

void unpark(int k) {
    if (k < 0) return;
    g_parked[k].tid.store(-1, std::memory_order_relaxed);
    g_parked[k].uc.store(nullptr, std::memory_order_relaxed);
    g_parked[k].tid.store(0, std::memory_order_release);
}

// --- the handler wrapper ----------------------------------------------------------------------------------

using ActionFn = void (*)(int, siginfo_t*, void*);
using HandlerFn = void (*)(int);

void wrapped(int sig, siginfo_t* si, void* uc) {
    Handler& h = g_shared.handlers[sig];
    const std::uintptr_t fn = h.fn.load(std::memory_order_acquire);
    if (!fn) return;
    const int saved_errno = errno;
    const std::uintptr_t prev_sp = tl_handler_sp;
    const std::uintptr_t prev_fn = tl_handler_fn;
    tl_handler_fn = fn;
    const int prev_sig = tl_sig;
    const std::uintptr_t prev_alt_lo = tl_alt_lo, prev_alt_hi = tl_alt_hi;
    const int prev_depth = handler_live() ? profharness_preload_depth : 0;  // a stale depth starts afresh
    volatile char marker = 0;
    tl_handler_sp = reinterpret_cast<std::uintptr_t>(&marker);
    stack_t ss;
    if (sigaltstack(nullptr, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)) {
        tl_alt_lo = reinterpret_cast<std::uintptr_t>(ss.ss_sp);
        tl_alt_hi = tl_alt_lo + ss.ss_size;
    } else {
        tl_alt_lo = tl_alt_hi = 0;
    }
    tl_sig = sig;
    tl_seen = 1;
    if (UNLIKELY(g_inject_enabled) && si && g_shared.injection.state.load(std::memory_order_relaxed) == 1 &&
        !g_armed.load(std::memory_order_relaxed)) {
        g_last_info[sig] = *si;
        g_have_info[sig].store(1, std::memory_order_release);
    }
    if (UNLIKELY(g_lock_owner.load(std::memory_order_relaxed) != 0) && g_lock_owner.load() == gettid_())
        g_shared.injection.state.store(4);  // the injected signal arrived while this thread holds the lock
    profharness_preload_depth = prev_depth + 1;
    // The handler is the profiler's code even where it interrupted the harness's own quiet work (the proxy's
    // drain inside free(), say): not quiet while it runs, or an Info call from it would not be muted and the
    // proxy would allocate under the malloc lock the interrupted free() holds (a deadlock seen on .NET 8).
    const int prev_quiet = tl_quiet;
    tl_quiet = 0;
    const int parked = prev_depth == 0 ? park(gettid_(), uc) : -1;
    if (h.siginfo.load(std::memory_order_relaxed)) reinterpret_cast<ActionFn>(fn)(sig, si, uc);
    else reinterpret_cast<HandlerFn>(fn)(sig);
    unpark(parked);
    profharness_preload_depth = prev_depth;
    const bool errno_changed = errno != saved_errno;
    if (errno_changed && !tl_quiet) note_site(kErrno, fn + 1, fn + 1);  // +1: a "return address" in it
    tl_quiet = prev_quiet;
    tl_handler_sp = prev_sp;
    tl_handler_fn = prev_fn;
    tl_sig = prev_sig;
    tl_alt_lo = prev_alt_lo;
    tl_alt_hi = prev_alt_hi;
    (void)marker;
    const std::uint64_t runs = h.runs.fetch_add(1, std::memory_order_relaxed) + 1;
    if (g_inject_enabled && runs == kRunsBeforeInjection && g_shared.injection.state.load() == 1) {
        g_shared.injection.signo.store(sig);
        g_armed.store(1, std::memory_order_release);
    }
}

bool is_function(HandlerFn h) { return h != SIG_DFL && h != SIG_IGN && h != SIG_ERR && h != nullptr; }

// The disposition `old` as the profiler sees it: its own handler where the kernel has the wrapper.
void translate_old(struct sigaction* old, std::uintptr_t prev_fn, int prev_siginfo) {
    if (!old || !(old->sa_flags & SA_SIGINFO) || old->sa_sigaction != &wrapped || !prev_fn) return;
    if (prev_siginfo) {
        old->sa_sigaction = reinterpret_cast<ActionFn>(prev_fn);
    } else {
        old->sa_flags &= ~SA_SIGINFO;
        old->sa_handler = reinterpret_cast<HandlerFn>(prev_fn);
    }
}

int install(int sig, const struct sigaction* act, struct sigaction* old, const void* ra) {
    if (!g_real_sigaction) resolve_all();
    if (sig <= 0 || sig >= kHandlers || handler_live() || !g_real_sigaction)
        return g_real_sigaction ? g_real_sigaction(sig, act, old) : (errno = ENOSYS, -1);
    Handler& h = g_shared.handlers[sig];
    const std::uintptr_t prev_fn = h.fn.load();
    const int prev_siginfo = h.siginfo.load();
    struct sigaction mine;
    const struct sigaction* use = act;
    const bool profiler = profiler_caller(ra);
    if (act && profiler) {
        const bool info = (act->sa_flags & SA_SIGINFO) != 0;
        const auto fn = info ? reinterpret_cast<std::uintptr_t>(act->sa_sigaction)
                             : reinterpret_cast<std::uintptr_t>(act->sa_handler);
        if (info || is_function(act->sa_handler)) {
            void* prime[2];
            backtrace(prime, 2);  // loads the unwinder now, not inside a handler
            resolve_cxx();
            mine = *act;
            mine.sa_sigaction = &wrapped;
            mine.sa_flags |= SA_SIGINFO;
            h.siginfo.store(info ? 1 : 0);
            h.installer.store(reinterpret_cast<std::uintptr_t>(ra));
            h.fn.store(fn, std::memory_order_release);
            h.written.store(0);
            use = &mine;
        } else {
            h.fn.store(0);  // the profiler's SIG_DFL / SIG_IGN
        }
    }
    const int rc = g_real_sigaction(sig, use, old);
    // the profiler sees its own handler; anyone else (the runtime chaining to the previous handler) the wrapper
    if (rc == 0 && profiler) translate_old(old, prev_fn, prev_siginfo);
    return rc;
}

HandlerFn install_simple(int sig, HandlerFn handler, int flags, const void* ra) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (!(flags & SA_NODEFER)) sigaddset(&act.sa_mask, sig);
    act.sa_flags = flags;
    if (install(sig, &act, &old, ra) != 0) return SIG_ERR;
    return old.sa_handler;  // the union: the previous handler of either kind
}

__attribute__((constructor(101))) void preload_init() {
    g_shared.version = 1;
    g_shared.function_count = kFunctionCount;
    g_shared.function_names = kFunctionNames.data();
    read_profiler_files();
    if (const char* inj = getenv("PROFHARNESS_PRELOAD_INJECT"); inj && inj[0] == '1') {
        g_inject_enabled = true;
        g_shared.injection.state.store(1);
    }
    resolve_all();
}

// A wrapped handler's call into the real allocator, or into a lock that waits, published while it runs
// (Injection::stuck_*) for the proxy's watchdog: an allocator call that never returns is a real deadlock, a
// lock call one when the lock's owner is its own thread. `fn` < 0: not inside a handler, nothing kept. The
// first such call in flight claims the fields; a nested one (operator new calling malloc) or one on another
// thread meanwhile does not.
class InFlightCall {
 public:
    InFlightCall(int fn, const void* ra, const void* lock = nullptr) {
        if (fn < 0) return;
        Injection& inj = g_shared.injection;
        long none = 0;
        const long self = gettid_();
        if (!inj.stuck_tid.compare_exchange_strong(none, self, std::memory_order_acq_rel)) return;
        claimed_ = true;
        inj.stuck_function.store(fn, std::memory_order_relaxed);
        inj.stuck_signo.store(tl_sig, std::memory_order_relaxed);
        inj.stuck_caller.store(profiler_frame(reinterpret_cast<std::uintptr_t>(ra)), std::memory_order_relaxed);
        inj.stuck_lock.store(reinterpret_cast<std::uintptr_t>(lock), std::memory_order_relaxed);
        inj.stuck_since_ns.store(now_ns(), std::memory_order_release);
    }
    ~InFlightCall() {
        if (!claimed_) return;
        g_shared.injection.stuck_since_ns.store(0, std::memory_order_relaxed);
        g_shared.injection.stuck_tid.store(0, std::memory_order_release);
    }
    InFlightCall(const InFlightCall&) = delete;
    InFlightCall& operator=(const InFlightCall&) = delete;

 private:
    bool claimed_ = false;
};

// The shape every allocation wrapper shares: outside a handler the real function (the injection's chance
// first, when armed); inside, noted (and the allocator lock awaited) before the real function runs, which
// the watchdog then sees in flight (InFlightCall) until it returns.
#define ALLOC_ENTRY(fn_id)                                                                 \
    const bool in_handler_call = UNLIKELY(profharness_preload_depth != 0) && handler_live(); \
    if (in_handler_call) {                                                                 \
        note(fn_id, RA());                                                                 \
        wait_for_allocator(fn_id, RA());                                                   \
    }                                                                                      \
    InFlightCall allocator_call(in_handler_call ? (fn_id) : -1, RA());

}  // namespace

// --- exported to the proxy ---------------------------------------------------------------------------------

PRELOAD_EXPORT Shared* profharness_preload_shared() { return &g_shared; }
PRELOAD_EXPORT int profharness_preload_in_handler() { return handler_live() && tl_quiet == 0; }
PRELOAD_EXPORT void profharness_preload_note_info(int id, const void* caller) {
    if (tl_quiet || !handler_live()) return;
    const auto c = reinterpret_cast<std::uintptr_t>(caller);
    note_site(kInfoBase + id, c, c);
}
// The ucontext thread `tid` was interrupted with while it runs the profiler's (outermost wrapped) signal
// handler; null when it runs none. Valid only while that handler runs: the caller keeps it parked there
// (the thread is inside the call that asks, or the profiler holds it in its handler).
PRELOAD_EXPORT void* profharness_preload_parked_context(long tid) {
    if (tid <= 0) return nullptr;
    for (int k = 0; k < kParkedSlots; ++k)
        if (g_parked[k].tid.load(std::memory_order_acquire) == tid) return g_parked[k].uc.load(std::memory_order_relaxed);
    return nullptr;
}
PRELOAD_EXPORT int profharness_preload_set_quiet(int quiet) {
    const int old = tl_quiet;
    tl_quiet = quiet;
    return old;
}

extern "C" HIDDEN void profharness_preload_note_asm(int fn, void* ra) {
    if (g_resolved.load(std::memory_order_acquire) != 2) resolve_all();
    if (profharness_preload_depth != 0) note(fn, ra);
}

// --- signal dispositions ----------------------------------------------------------------------------------

PRELOAD_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
    return install(sig, act, old, RA());
}
namespace {
// signal/bsd_signal/sysv_signal from anyone but the profiler: libc's own (siginterrupt's state and all).
// `real_fn`: &g_real_signal and its siblings, resolved once by resolve_all (no lookup here).
HandlerFn pass_simple(SimpleFn* real_fn, int sig, HandlerFn handler) {
    if (g_resolved.load(std::memory_order_acquire) != 2) resolve_all();
    const SimpleFn f = *real_fn;
    if (!f) {
        errno = ENOSYS;
        return SIG_ERR;
    }
    return f(sig, handler);
}
bool wraps(const void* ra) { return !handler_live() && profiler_caller(ra); }
}  // namespace

PRELOAD_EXPORT HandlerFn signal(int sig, HandlerFn handler) {
    return wraps(RA()) ? install_simple(sig, handler, SA_RESTART, RA()) : pass_simple(&g_real_signal, sig, handler);
}
PRELOAD_EXPORT HandlerFn bsd_signal(int sig, HandlerFn handler) {
    return wraps(RA()) ? install_simple(sig, handler, SA_RESTART, RA()) : pass_simple(&g_real_bsd_signal, sig, handler);
}
PRELOAD_EXPORT HandlerFn sysv_signal(int sig, HandlerFn handler) {
    return wraps(RA()) ? install_simple(sig, handler, SA_RESETHAND | SA_NODEFER, RA())
                       : pass_simple(&g_real_sysv_signal, sig, handler);
}

// --- the malloc family ------------------------------------------------------------------------------------

PRELOAD_EXPORT void* malloc(std::size_t n) {
    if (LIKELY(profharness_preload_depth == 0)) {
        if (UNLIKELY(g_armed.load(std::memory_order_relaxed)) && tl_seen && !tl_injecting) return inject_malloc(n);
        auto f = real<MallocFn>(kMalloc);
        return LIKELY(f) ? f(n) : boot_alloc(n);
    }
    ALLOC_ENTRY(kMalloc)
    auto f = real<MallocFn>(kMalloc);
    return f ? f(n) : boot_alloc(n);
}

PRELOAD_EXPORT void* calloc(std::size_t n, std::size_t size) {
    ALLOC_ENTRY(kCalloc)
    using Fn = void* (*)(std::size_t, std::size_t);
    auto f = real<Fn>(kCalloc);
    if (LIKELY(f)) return f(n, size);
    void* p = boot_alloc(n * size);  // the arena is zero (static) and never reused
    return p;
}

PRELOAD_EXPORT void* realloc(void* p, std::size_t n) {
    ALLOC_ENTRY(kRealloc)
    using Fn = void* (*)(void*, std::size_t);
    if (UNLIKELY(is_boot(p))) {
        void* q = malloc(n);
        if (q) memcpy(q, p, boot_size(p) < n ? boot_size(p) : n);
        return q;
    }
    auto f = real<Fn>(kRealloc);
    return f ? f(p, n) : boot_alloc(n);
}

PRELOAD_EXPORT void free(void* p) {
    const bool in_handler_call = UNLIKELY(profharness_preload_depth != 0);
    if (in_handler_call) note(kFree, RA());
    InFlightCall allocator_call(in_handler_call && handler_live() ? kFree : -1, RA());
    if (UNLIKELY(is_boot(p)) || !p) return;
    using Fn = void (*)(void*);
    if (auto f = real<Fn>(kFree)) f(p);
}

PRELOAD_EXPORT int posix_memalign(void** out, std::size_t align, std::size_t n) {
    ALLOC_ENTRY(kPosixMemalign)
    using Fn = int (*)(void**, std::size_t, std::size_t);
    auto f = real<Fn>(kPosixMemalign);
    return f ? f(out, align, n) : ENOMEM;
}

PRELOAD_EXPORT void* aligned_alloc(std::size_t align, std::size_t n) {
    ALLOC_ENTRY(kAlignedAlloc)
    using Fn = void* (*)(std::size_t, std::size_t);
    auto f = real<Fn>(kAlignedAlloc);
    return f ? f(align, n) : nullptr;
}

PRELOAD_EXPORT void* memalign(std::size_t align, std::size_t n) {
    ALLOC_ENTRY(kMemalign)
    using Fn = void* (*)(std::size_t, std::size_t);
    auto f = real<Fn>(kMemalign);
    return f ? f(align, n) : nullptr;
}

// --- operator new / delete (noted with the profiler's frame; the real ones allocate quietly) ----------------

namespace {
template <typename Fn, typename... A>
auto quiet_call(Fn f, A... a) {
    ++tl_quiet;
    auto r = f(a...);
    --tl_quiet;
    return r;
}
void* new_fallback(std::size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}
}  // namespace

#define NEW_WRAPPER(sym, fn_id)                                                                    \
    PRELOAD_EXPORT void* sym(std::size_t n) {                                                      \
        using Fn = void* (*)(std::size_t);                                                         \
        auto f = real_late<Fn>(fn_id);                                                             \
        if (LIKELY(profharness_preload_depth == 0)) return f ? f(n) : new_fallback(n);             \
        ALLOC_ENTRY(fn_id)                                                                         \
        return f ? quiet_call(f, n) : new_fallback(n);                                             \
    }
NEW_WRAPPER(_Znwm, kNew)
NEW_WRAPPER(_Znam, kNewArray)

#define NEW_NOTHROW_WRAPPER(sym, fn_id)                                                            \
    PRELOAD_EXPORT void* sym(std::size_t n, const std::nothrow_t& t) {                             \
        using Fn = void* (*)(std::size_t, const std::nothrow_t&);                                  \
        auto f = real_late<Fn>(fn_id);                                                             \
        if (LIKELY(profharness_preload_depth == 0)) return f ? f(n, t) : malloc(n ? n : 1);        \
        ALLOC_ENTRY(fn_id)                                                                         \
        if (!f) return malloc(n ? n : 1);                                                          \
        ++tl_quiet;                                                                                \
        void* p = f(n, t);                                                                         \
        --tl_quiet;                                                                                \
        return p;                                                                                  \
    }
NEW_NOTHROW_WRAPPER(_ZnwmRKSt9nothrow_t, kNewNothrow)
NEW_NOTHROW_WRAPPER(_ZnamRKSt9nothrow_t, kNewArrayNothrow)

#define DELETE_WRAPPER(sym, fn_id, ...)                                                            \
    PRELOAD_EXPORT void sym(void* p __VA_OPT__(, ) __VA_ARGS__) {                                  \
        if (UNLIKELY(profharness_preload_depth != 0)) note(fn_id, RA());                           \
        ++tl_quiet;                                                                                \
        free(p);                                                                                   \
        --tl_quiet;                                                                                \
    }
DELETE_WRAPPER(_ZdlPv, kDelete)
DELETE_WRAPPER(_ZdaPv, kDeleteArray)
DELETE_WRAPPER(_ZdlPvm, kDeleteSized, std::size_t)
DELETE_WRAPPER(_ZdaPvm, kDeleteArraySized, std::size_t)

// --- stdio -----------------------------------------------------------------------------------------------------

#define IN_HANDLER_NOTE(fn_id) \
    if (UNLIKELY(profharness_preload_depth != 0)) note(fn_id, RA());

PRELOAD_EXPORT int printf(const char* fmt, ...) {
    IN_HANDLER_NOTE(kPrintf)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(const char*, va_list)>(kPrintf)(fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int fprintf(FILE* fp, const char* fmt, ...) {
    IN_HANDLER_NOTE(kFprintf)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(FILE*, const char*, va_list)>(kFprintf)(fp, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int vprintf(const char* fmt, va_list ap) {
    IN_HANDLER_NOTE(kVprintf)
    return real<int (*)(const char*, va_list)>(kVprintf)(fmt, ap);
}
PRELOAD_EXPORT int vfprintf(FILE* fp, const char* fmt, va_list ap) {
    IN_HANDLER_NOTE(kVfprintf)
    return real<int (*)(FILE*, const char*, va_list)>(kVfprintf)(fp, fmt, ap);
}
PRELOAD_EXPORT int sprintf(char* s, const char* fmt, ...) {
    IN_HANDLER_NOTE(kSprintf)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(char*, const char*, va_list)>(kSprintf)(s, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int snprintf(char* s, std::size_t n, const char* fmt, ...) {
    IN_HANDLER_NOTE(kSnprintf)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(char*, std::size_t, const char*, va_list)>(kSnprintf)(s, n, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int vsnprintf(char* s, std::size_t n, const char* fmt, va_list ap) {
    IN_HANDLER_NOTE(kVsnprintf)
    return real<int (*)(char*, std::size_t, const char*, va_list)>(kVsnprintf)(s, n, fmt, ap);
}
PRELOAD_EXPORT int puts(const char* s) {
    IN_HANDLER_NOTE(kPuts)
    return real<int (*)(const char*)>(kPuts)(s);
}
PRELOAD_EXPORT int fputs(const char* s, FILE* fp) {
    IN_HANDLER_NOTE(kFputs)
    return real<int (*)(const char*, FILE*)>(kFputs)(s, fp);
}
PRELOAD_EXPORT int fputc(int c, FILE* fp) {
    IN_HANDLER_NOTE(kFputc)
    return real<int (*)(int, FILE*)>(kFputc)(c, fp);
}
PRELOAD_EXPORT int putchar(int c) {
    IN_HANDLER_NOTE(kPutchar)
    return real<int (*)(int)>(kPutchar)(c);
}
PRELOAD_EXPORT std::size_t fwrite(const void* p, std::size_t size, std::size_t n, FILE* fp) {
    IN_HANDLER_NOTE(kFwrite)
    return real<std::size_t (*)(const void*, std::size_t, std::size_t, FILE*)>(kFwrite)(p, size, n, fp);
}
PRELOAD_EXPORT int fflush(FILE* fp) {
    IN_HANDLER_NOTE(kFflush)
    return real<int (*)(FILE*)>(kFflush)(fp);
}
PRELOAD_EXPORT FILE* fopen(const char* path, const char* mode) {
    IN_HANDLER_NOTE(kFopen)
    return real<FILE* (*)(const char*, const char*)>(kFopen)(path, mode);
}
PRELOAD_EXPORT int fclose(FILE* fp) {
    IN_HANDLER_NOTE(kFclose)
    return real<int (*)(FILE*)>(kFclose)(fp);
}
PRELOAD_EXPORT int __printf_chk(int flag, const char* fmt, ...) {
    IN_HANDLER_NOTE(kPrintfChk)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(int, const char*, va_list)>(kPrintfChk)(flag, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int __fprintf_chk(FILE* fp, int flag, const char* fmt, ...) {
    IN_HANDLER_NOTE(kFprintfChk)
    va_list ap;
    va_start(ap, fmt);
    const int r = real<int (*)(FILE*, int, const char*, va_list)>(kFprintfChk)(fp, flag, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int __vfprintf_chk(FILE* fp, int flag, const char* fmt, va_list ap) {
    IN_HANDLER_NOTE(kVfprintfChk)
    return real<int (*)(FILE*, int, const char*, va_list)>(kVfprintfChk)(fp, flag, fmt, ap);
}
PRELOAD_EXPORT int __snprintf_chk(char* s, std::size_t n, int flag, std::size_t slen, const char* fmt, ...) {
    IN_HANDLER_NOTE(kSnprintfChk)
    va_list ap;
    va_start(ap, fmt);
    using Fn = int (*)(char*, std::size_t, int, std::size_t, const char*, va_list);
    const int r = real<Fn>(kSnprintfChk)(s, n, flag, slen, fmt, ap);
    va_end(ap);
    return r;
}
PRELOAD_EXPORT int __vsnprintf_chk(char* s, std::size_t n, int flag, std::size_t slen, const char* fmt, va_list ap) {
    IN_HANDLER_NOTE(kVsnprintfChk)
    using Fn = int (*)(char*, std::size_t, int, std::size_t, const char*, va_list);
    return real<Fn>(kVsnprintfChk)(s, n, flag, slen, fmt, ap);
}

// --- pthread locks -------------------------------------------------------------------------------------------

// The profiler's own call (not the runtime's, tl_quiet) inside a live handler to a lock that waits: in flight
// (InFlightCall) while it waits, for the watchdog's self-deadlock check.
#define LOCK_IN_FLIGHT(fn_id, lock)                                                               \
    InFlightCall lock_call(                                                                       \
        UNLIKELY(profharness_preload_depth != 0) && tl_quiet == 0 && handler_live() ? (fn_id) : -1, RA(), lock);

// A pthread function of one lock argument: noted inside a handler, then `before` (nothing, or
// LOCK_IN_FLIGHT for a call that waits), then the real function.
#define LOCK_WRAPPER_WITH(sym, fn_id, T, before)                                                   \
    PRELOAD_EXPORT int sym(T* m) {                                                                 \
        IN_HANDLER_NOTE(fn_id)                                                                     \
        before return real<int (*)(T*)>(fn_id)(m);                                                 \
    }
#define LOCK_WRAPPER(sym, fn_id, T) LOCK_WRAPPER_WITH(sym, fn_id, T, )
#define WAITING_LOCK_WRAPPER(sym, fn_id, T) LOCK_WRAPPER_WITH(sym, fn_id, T, LOCK_IN_FLIGHT(fn_id, m))
WAITING_LOCK_WRAPPER(pthread_mutex_lock, kMutexLock, pthread_mutex_t)
LOCK_WRAPPER(pthread_mutex_trylock, kMutexTrylock, pthread_mutex_t)
LOCK_WRAPPER(pthread_mutex_unlock, kMutexUnlock, pthread_mutex_t)
LOCK_WRAPPER(pthread_cond_signal, kCondSignal, pthread_cond_t)
LOCK_WRAPPER(pthread_cond_broadcast, kCondBroadcast, pthread_cond_t)
WAITING_LOCK_WRAPPER(pthread_rwlock_rdlock, kRwlockRdlock, pthread_rwlock_t)
WAITING_LOCK_WRAPPER(pthread_rwlock_wrlock, kRwlockWrlock, pthread_rwlock_t)
LOCK_WRAPPER(pthread_rwlock_unlock, kRwlockUnlock, pthread_rwlock_t)

PRELOAD_EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const struct timespec* t) {
    IN_HANDLER_NOTE(kMutexTimedlock)
    LOCK_IN_FLIGHT(kMutexTimedlock, m)
    return real<int (*)(pthread_mutex_t*, const struct timespec*)>(kMutexTimedlock)(m, t);
}
PRELOAD_EXPORT int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
    IN_HANDLER_NOTE(kCondWait)
    return real<int (*)(pthread_cond_t*, pthread_mutex_t*)>(kCondWait)(c, m);
}
PRELOAD_EXPORT int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* t) {
    IN_HANDLER_NOTE(kCondTimedwait)
    return real<int (*)(pthread_cond_t*, pthread_mutex_t*, const struct timespec*)>(kCondTimedwait)(c, m, t);
}

// --- the dynamic loader ------------------------------------------------------------------------------------------

PRELOAD_EXPORT int dladdr(const void* addr, Dl_info* info) {
    IN_HANDLER_NOTE(kDladdr)
    return real<int (*)(const void*, Dl_info*)>(kDladdr)(addr, info);
}
PRELOAD_EXPORT int dlclose(void* handle) {
    IN_HANDLER_NOTE(kDlclose)
    return real<int (*)(void*)>(kDlclose)(handle);
}

// dlopen and dlsym read their caller's return address (RTLD_NEXT, the caller's RUNPATH): the wrappers are
// assembly that jumps to the real function with the caller's frame untouched, noting the call first when a
// wrapped handler is running on the thread.
#define PRELOAD_TRAMPOLINE(sym, fn_id, real_ptr)                                         \
    asm(".text\n"                                                                        \
        ".globl " #sym "\n"                                                              \
        ".type " #sym ",@function\n" #sym ":\n"                                          \
        "  cmpq $0, " #real_ptr "(%rip)\n"                                               \
        "  je 1f\n"                                                                      \
        "  movq profharness_preload_depth@gottpoff(%rip), %rax\n"                        \
        "  movl %fs:(%rax), %eax\n"                                                      \
        "  testl %eax, %eax\n"                                                           \
        "  jne 1f\n"                                                                     \
        "  jmp *" #real_ptr "(%rip)\n"                                                   \
        "1:\n"                                                                           \
        "  pushq %rdi\n  pushq %rsi\n  pushq %rdx\n  pushq %rcx\n  pushq %r8\n  pushq %r9\n" \
        "  subq $8, %rsp\n"                                                              \
        "  movl $" #fn_id ", %edi\n"                                                     \
        "  movq 56(%rsp), %rsi\n"                                                        \
        "  call profharness_preload_note_asm\n"                                          \
        "  addq $8, %rsp\n"                                                              \
        "  popq %r9\n  popq %r8\n  popq %rcx\n  popq %rdx\n  popq %rsi\n  popq %rdi\n"   \
        "  jmp *" #real_ptr "(%rip)\n"                                                   \
        ".size " #sym ", .-" #sym "\n")

static_assert(kDlopen == 46 && kDlsym == 47, "the trampolines name the function ids");
PRELOAD_TRAMPOLINE(dlopen, 46, profharness_preload_real_dlopen);
PRELOAD_TRAMPOLINE(dlsym, 47, profharness_preload_real_dlsym);
