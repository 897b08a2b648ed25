// Experiments: the capture side of emu (issue 8): a sampling mode. Rows of this area's table; see
// experiments.h.
//
// capture_register_thread runs on the thread to be sampled (at one of its own marks) and stores what a
// signal handler cannot ask for safely: its ThreadID, pthread_t, gettid(), fs_base (arch_prctl
// ARCH_GET_FS) and its stack bounds (pthread_getattr_np).
//
// capture_sample starts a profiler thread (a std::thread that never runs managed code) which sends SIGPROF
// to the registered thread args.samples times, one every args.intervalUs (fixed deadlines on CLOCK_MONOTONIC,
// so the time a sample takes to record does not lower the rate; a sample later than its deadline is sent at
// once, without a burst to catch up). Past args.samples it goes on, up to args.maxSamples in all, until
// args.minManagedOk samples landed in managed code (GetFunctionFromIP knew the IP) and args.minUnmanagedOk
// elsewhere, each with a successful live walk: where the thread spends its time shifts with the machine's
// load, so a fixed count can miss a place a judge needs. The handler, on the sampled thread,
// copies into preallocated buffers (no allocation, no lock, no stdio): the ucontext general registers,
// fs_base, the stack from SP to min(SP + 64 KiB, the thread's stack end), up to 256 bytes around the IP
// (process_vm_readv, so an unmapped neighbour page costs bytes, never a fault); then it calls DoStackSnapshot
// seeded with a CONTEXT built from the ucontext as it is (the naive seed; the Walk of walk.h, prepared by the
// profiler thread). After the handler is done the profiler thread reads code around every stack word that
// points into executable memory (after the instant: code rarely changes, the record says so), classifies
// the IP (GetFunctionFromIP, else the mapping that holds it) and writes one `call` record `capture_sample`
// per sample. After the last sample it writes `capture_maps` (/proc/self/maps) and `capture_jit_map`
// (EnumJITedFunctions2; every native code version through GetNativeCodeStartAddresses + GetCodeInfo4, else
// GetCodeInfo2; names from metadata). Byte buffers are base64 (RFC 4648) strings.
//
// Bounds: each sample waits at most args.timeoutMs for the handler; a handler that does not finish is
// abandoned (probe_error), and sampling stops, since its buffers are still in use.
#include <asm/prctl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "experiments.h"
#include "exports.h"
#include "named_registry.h"
#include "signal_seed.h"
#include "profharness/metadata.h"
#include "walk.h"

namespace profharness {

// ICorProfilerFunctionEnum (corprof.idl order after IUnknown: Skip, Reset, Clone, GetCount, Next). Declared
// outside the anonymous namespace: an abstract class no TU can derive from would let the compiler
// devirtualize its calls to __cxa_pure_virtual.
struct CapturePrfFunction {
    FunctionID functionId;
    ReJITID reJitId;
};
struct CaptureFunctionEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(CaptureFunctionEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, CapturePrfFunction ids[], ULONG* pceltFetched) = 0;
};

namespace {

constexpr std::size_t kStackCaptureBytes = 64 * 1024;  // emu.capture.STACK_CAPTURE_BYTES
constexpr std::size_t kCodeWindow = 256;               // bytes around the IP (half before, half from it)
constexpr std::size_t kRedZone = 128;                  // System V AMD64: leaf code may use 128 bytes below SP
constexpr std::size_t kPrologueBytes = 32;             // first bytes of each JIT-compiled code range
constexpr int kSampleSignal = SIGPROF;

std::uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`; a deadline already past moves to now (no catching up).
void sleep_until_ns(std::uint64_t& deadline_ns) {
    const std::uint64_t now = now_ns();
    if (deadline_ns <= now) {
        deadline_ns = now;
        return;
    }
    timespec ts{static_cast<time_t>(deadline_ns / 1000000000ull), static_cast<long>(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

std::string base64(const unsigned char* p, std::size_t n) {
    static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        const std::uint32_t v = (std::uint32_t(p[i]) << 16) | (std::uint32_t(p[i + 1]) << 8) | p[i + 2];
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
        out += kAlphabet[v & 63];
    }
    if (i < n) {
        std::uint32_t v = std::uint32_t(p[i]) << 16;
        if (i + 1 < n) v |= std::uint32_t(p[i + 1]) << 8;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

// Reads up to n bytes at addr of this process without faulting; returns the count read (a syscall:
// async-signal-safe). Stops at the first unreadable byte (page granularity).
std::size_t read_own(std::uint64_t addr, unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
        const std::uint64_t a = addr + done;
        const std::uint64_t page_end = (a | 4095) + 1;
        std::size_t chunk = n - done;
        if (a + chunk > page_end) chunk = static_cast<std::size_t>(page_end - a);
        struct iovec local{out + done, chunk};
        struct iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)), chunk};
        const ssize_t got = ::syscall(SYS_process_vm_readv, ::getpid(), &local, 1UL, &remote, 1UL, 0UL);
        if (got <= 0) break;
        done += static_cast<std::size_t>(got);
        if (static_cast<std::size_t>(got) < chunk) break;
    }
    return done;
}

// ---------------------------------------------------------------------------------------------------
// The thread registry (threads that can be sampled)

struct CaptureThread : NamedThread {
    std::uint64_t fsBase = 0;
    std::uint64_t stackLow = 0, stackHigh = 0;  // 0, 0: unknown
};

NamedRegistry<CaptureThread, 8> g_threads;

void capture_register_thread(ExperimentContext& ctx) {
    CaptureThread t;
    if (!name_calling_thread(ctx, "capture_register_thread", t)) return;
    ProbeState& s = state();
    unsigned long fs = 0;
    const bool fs_ok = ::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs) == 0;
    t.fsBase = fs_ok ? fs : 0;
    pthread_attr_t attr;
    int attr_rc = pthread_getattr_np(pthread_self(), &attr);
    if (attr_rc == 0) {
        void* addr = nullptr;
        size_t size = 0;
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            t.stackLow = reinterpret_cast<std::uintptr_t>(addr);
            t.stackHigh = t.stackLow + size;
        }
        pthread_attr_destroy(&attr);
    }
    if (!g_threads.put(t)) s.probe_error("capture_register_thread: registry full", ctx.planned.id);
    Json args = Json::object();
    args.set("name", t.name);
    Json out = thread_ids_json(t);
    out.set("fsBase", fs_ok ? Json(static_cast<std::uint64_t>(t.fsBase)) : Json());
    out.set("stackLow", t.stackHigh ? Json(t.stackLow) : Json());
    out.set("stackHigh", t.stackHigh ? Json(t.stackHigh) : Json());
    out.set("getattrRc", Json(attr_rc));
    s.call("capture_register_thread", ctx.planned.id.c_str(), args, out, t.threadIdHr);
}

// ---------------------------------------------------------------------------------------------------
// The handler and its preallocated buffers (one sample in flight at a time)

// ucontext gregs in sys/ucontext.h order (REG_R8 = 0 ... REG_CR2 = 22), lower-case names as emu uses.
const char* const kGregNames[NGREG] = {"r8",  "r9",  "r10", "r11", "r12",    "r13", "r14",    "r15",
                                       "rdi", "rsi", "rbp", "rbx", "rdx",    "rax", "rcx",    "rsp",
                                       "rip", "efl", "csgsfs", "err", "trapno", "oldmask", "cr2"};


struct SampleBuffer {
    std::atomic<int> state{kIdle};
    std::atomic<Walk*> walk{nullptr};
    long targetOsTid = 0;
    std::uint64_t stackLow = 0, stackHigh = 0;
    // filled by the handler
    long handlerOsTid = 0;
    std::uint64_t gregs[NGREG] = {};
    std::uint64_t fsBase = 0;
    bool fsOk = false;
    std::uint64_t sp = 0, stackCopied = 0;
    bool stackInRange = false;
    std::uint64_t codeAddr = 0;
    std::size_t codeLen = 0;
    HRESULT hr = S_OK;
    std::int64_t phase = -1;  // the scenario's phase cell at the instant; -1 without one
    std::uint64_t tEnter = 0, tCopied = 0, tWalked = 0;
    alignas(64) BYTE seed[kContextBufferSize];
    alignas(64) unsigned char stack[kStackCaptureBytes];
    unsigned char redZone[kRedZone];
    std::size_t redZoneCopied = 0;
    unsigned char code[kCodeWindow];
};

SampleBuffer g_sample;
// The scenario's phase cell (profharness_capture_phase_cell): an int32 it writes before each phase; the
// handler reads it at the instant (a plain load: async-signal-safe).
std::atomic<const volatile std::int32_t*> g_phase_cell{nullptr};

void sample_handler(int sig, siginfo_t* info, void* ucv);
OnceHandler g_sample_handler(kSampleSignal, &sample_handler);

void sample_handler(int sig, siginfo_t* info, void* ucv) {
    if (!g_sample_handler.claim(g_sample.state, g_sample.targetOsTid, sig, info, ucv)) return;
    const int saved_errno = errno;
    SampleBuffer& b = g_sample;
    b.tEnter = now_ns();
    const auto* uc = static_cast<const ucontext_t*>(ucv);
    const greg_t* g = uc->uc_mcontext.gregs;
    b.handlerOsTid = os_tid();
    for (int i = 0; i < NGREG; ++i) b.gregs[i] = static_cast<std::uint64_t>(g[i]);
    unsigned long fs = 0;
    b.fsOk = ::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs) == 0;
    b.fsBase = b.fsOk ? fs : 0;
    // The stack: [sp, min(sp + 64 KiB, stack end)), when sp lies in the registered stack.
    b.sp = b.gregs[REG_RSP];
    b.stackInRange = b.stackHigh != 0 && b.sp >= b.stackLow && b.sp < b.stackHigh;
    b.stackCopied = 0;
    if (b.stackInRange) {
        std::uint64_t end = b.sp + kStackCaptureBytes;
        if (end > b.stackHigh) end = b.stackHigh;
        std::memcpy(b.stack, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(b.sp)), end - b.sp);
        b.stackCopied = end - b.sp;
    }
    // The red zone below SP (a leaf function's CFI may say a register is saved there).
    b.redZoneCopied = b.stackInRange && b.sp >= b.stackLow + kRedZone
                          ? read_own(b.sp - kRedZone, b.redZone, kRedZone) : 0;
    // Code around the IP: the IP's own bytes first (from the IP up), then the half before it if readable.
    const std::uint64_t ip = b.gregs[REG_RIP];
    const std::size_t half = kCodeWindow / 2;
    std::size_t after = read_own(ip, b.code + half, half);
    std::size_t before = ip >= half ? read_own(ip - half, b.code, half) : 0;
    if (before == half) {
        b.codeAddr = ip - half;
        b.codeLen = half + after;
    } else {
        std::memmove(b.code, b.code + half, after);
        b.codeAddr = ip;
        b.codeLen = after;
    }
    const volatile std::int32_t* cell = g_phase_cell.load(std::memory_order_acquire);
    b.phase = cell ? static_cast<std::int64_t>(*cell) : -1;
    b.tCopied = now_ns();
    naive_seed(uc, b.seed);
    Walk* w = b.walk.load(std::memory_order_acquire);
    b.hr = w ? w->run(state().info_as<ICorProfilerInfo2>(2)) : E_POINTER;
    b.tWalked = now_ns();
    b.state.store(kDone, std::memory_order_release);
    errno = saved_errno;
}

// ---------------------------------------------------------------------------------------------------
// /proc/self/maps

struct Mapping {
    std::uint64_t start, end;
    bool exec;
    std::string path;  // "" for anonymous memory
};

std::string read_maps_text() {
    std::ifstream in("/proc/self/maps");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<Mapping> parse_maps(const std::string& text) {
    std::vector<Mapping> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        Mapping m{};
        char perms[8] = {};
        int path_at = 0;
        unsigned long long s = 0, e = 0;
        if (std::sscanf(line.c_str(), "%llx-%llx %7s %*s %*s %*s %n", &s, &e, perms, &path_at) < 3) continue;
        m.start = s;
        m.end = e;
        m.exec = perms[2] == 'x';
        if (path_at > 0 && static_cast<std::size_t>(path_at) < line.size()) m.path = line.substr(path_at);
        out.push_back(m);
    }
    return out;
}

const Mapping* mapping_of(const std::vector<Mapping>& maps, std::uint64_t a) {
    for (const Mapping& m : maps)
        if (a >= m.start && a < m.end) return &m;
    return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// The JIT code map

// FunctionIDs whose ReadyToRun code the runtime chose (JITCachedFunctionSearchFinished with
// COR_PRF_CACHED_FUNCTION_FOUND, under COR_PRF_MONITOR_CACHE_SEARCHES): EnumJITedFunctions2 lists only
// JIT-compiled code, so without these the map has no FunctionID for CoreLib's precompiled frames.
std::mutex g_cached_mutex;
std::vector<FunctionID> g_cached_functions;

std::string function_name(FunctionID fid) {
    ProbeState& s = state();
    ComHolder<IMetaDataImport> md;
    mdToken tok = 0;
    if (failed(function_metadata(s.info, fid, md, tok)) || !md) return "";
    const MethodProps m = method_props(md.get(), tok);
    if (failed(m.hr)) return "";
    const TypeDefProps t = type_def_props(md.get(), m.owner);
    return (failed(t.hr) ? std::string("?") : t.name) + "::" + m.name;
}

// One code range, with its first bytes: the unwinder recognises a method's prologue (an OSR method's
// differs) from them, and no return address may point near the start of a method.
Json range_json(const COR_PRF_CODE_INFO& info) {
    Json r = Json::object();
    r.set("start", Json(static_cast<std::uint64_t>(info.startAddress)));
    r.set("size", Json(static_cast<std::uint64_t>(info.size)));
    unsigned char head[kPrologueBytes];
    const std::size_t n = std::min<std::size_t>(kPrologueBytes, info.size);
    const std::size_t got = read_own(info.startAddress, head, n);
    if (got) r.set("prologue", base64(head, got));
    return r;
}

Json code_ranges(FunctionID fid, ReJITID rejit, HRESULT& hr_out) {
    ProbeState& s = state();
    Json versions = Json::array();
    auto* info9 = s.info_as<ICorProfilerInfo9>(9);
    if (info9) {
        UINT_PTR starts[64];
        ULONG32 n = 0;
        hr_out = info9->GetNativeCodeStartAddresses(fid, rejit, 64, &n, starts);
        if (!failed(hr_out)) {
            for (ULONG32 i = 0; i < n && i < 64; ++i) {
                COR_PRF_CODE_INFO infos[16];
                ULONG32 m = 0;
                HRESULT hr = info9->GetCodeInfo4(starts[i], 16, &m, infos);
                if (failed(hr)) continue;
                Json ranges = Json::array();
                for (ULONG32 k = 0; k < m && k < 16; ++k) ranges.push(range_json(infos[k]));
                Json v = Json::object();
                v.set("start", Json(static_cast<std::uint64_t>(starts[i]))).set("ranges", ranges);
                versions.push(v);
            }
            if (!versions.items().empty()) return versions;
        }
    }
    auto* info2 = s.info_as<ICorProfilerInfo2>(2);
    COR_PRF_CODE_INFO infos[16];
    ULONG32 m = 0;
    hr_out = info2 ? info2->GetCodeInfo2(fid, 16, &m, infos) : E_NOINTERFACE;
    if (!failed(hr_out) && m) {
        Json ranges = Json::array();
        for (ULONG32 k = 0; k < m && k < 16; ++k) ranges.push(range_json(infos[k]));
        Json v = Json::object();
        v.set("start", Json(static_cast<std::uint64_t>(infos[0].startAddress))).set("ranges", ranges);
        versions.push(v);
    }
    return versions;
}

void record_jit_map(const char* exp) {
    ProbeState& s = state();
    auto* info4 = s.info_as<ICorProfilerInfo4>(4);
    Json methods = Json::array();
    HRESULT hr = E_NOINTERFACE;
    std::size_t failures = 0;
    std::set<FunctionID> listed;
    if (info4) {
        ICorProfilerFunctionEnum* raw = nullptr;
        hr = info4->EnumJITedFunctions2(&raw);
        auto* fe = reinterpret_cast<CaptureFunctionEnum*>(raw);
        if (!failed(hr) && fe) {
            CapturePrfFunction batch[256];
            ULONG got = 0;
            while (fe->Next(256, batch, &got) == S_OK || got > 0) {
                for (ULONG i = 0; i < got; ++i) {
                    HRESULT chr = S_OK;
                    Json versions = code_ranges(batch[i].functionId, batch[i].reJitId, chr);
                    if (versions.items().empty()) {
                        ++failures;
                        continue;
                    }
                    listed.insert(batch[i].functionId);
                    Json m = Json::object();
                    m.set("functionId", Json(static_cast<std::uint64_t>(batch[i].functionId)));
                    m.set("reJitId", Json(static_cast<std::uint64_t>(batch[i].reJitId)));
                    m.set("name", function_name(batch[i].functionId));
                    m.set("versions", versions);
                    methods.push(m);
                }
                if (got < 256) break;
                got = 0;
            }
            fe->Release();
        }
    }
    std::vector<FunctionID> cached;
    {
        std::lock_guard<std::mutex> lock(g_cached_mutex);
        cached = g_cached_functions;
    }
    std::size_t precompiled = 0;
    for (FunctionID fid : cached) {
        if (!listed.insert(fid).second) continue;
        HRESULT chr = S_OK;
        Json versions = code_ranges(fid, 0, chr);
        if (versions.items().empty()) {
            ++failures;
            continue;
        }
        Json m = Json::object();
        m.set("functionId", Json(static_cast<std::uint64_t>(fid)));
        m.set("reJitId", Json(static_cast<std::uint64_t>(0)));
        m.set("name", function_name(fid));
        m.set("tier", "r2r");
        m.set("versions", versions);
        methods.push(m);
        ++precompiled;
    }
    Json out = Json::object();
    out.set("methods", methods).set("withoutCode", Json(static_cast<std::uint64_t>(failures)));
    out.set("readyToRun", Json(static_cast<std::uint64_t>(precompiled)));
    out.set("taken", "after-sampling");
    s.call("capture_jit_map", exp, Json::object(), out, hr);
}

// ---------------------------------------------------------------------------------------------------
// The profiler thread

struct SamplingJob {
    const PlannedExperiment* planned = nullptr;
    std::string point;
    CaptureThread target;
    std::int64_t samples = 20, intervalUs = 1000, timeoutMs = 2000, maxCandidates = 256;
    // Sampling goes on past `samples` until minManagedOk samples had managed code on top and minUnmanagedOk
    // other code, each with a successful live walk (the places the judges need), up to maxSamples in all.
    std::int64_t minManagedOk = 0, minUnmanagedOk = 0, maxSamples = 20;
    ULONG32 infoFlags = 0;
    bool jitMap = true;
    std::atomic<bool> done{false};
};

Json where_of(std::uint64_t ip, std::vector<Mapping>& maps) {
    ProbeState& s = state();
    Json w = Json::object();
    FunctionID fid = 0;
    HRESULT fh = s.info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &fid);
    w.set("functionFromIpHr", Json(static_cast<std::uint32_t>(fh)));
    w.set("functionId", Json(static_cast<std::uint64_t>(failed(fh) ? 0 : fid)));
    const Mapping* m = mapping_of(maps, ip);
    if (!m) {
        maps = parse_maps(read_maps_text());  // new code regions appear as the runtime runs
        m = mapping_of(maps, ip);
    }
    if (!failed(fh) && fid) {
        w.set("kind", "managed");
    } else if (!m) {
        w.set("kind", "unmapped");
    } else if (m->path.empty() || m->path[0] == '[') {
        w.set("kind", m->exec ? "anonymous-executable" : "anonymous");
    } else {
        w.set("kind", "module");
    }
    w.set("module", m && !m->path.empty() ? Json(m->path) : Json());
    return w;
}

Json code_json(std::uint64_t addr, const unsigned char* p, std::size_t n) {
    Json c = Json::object();
    c.set("address", Json(addr)).set("bytes", base64(p, n));
    return c;
}

// Code around stack words that point into executable mappings (candidate return addresses).
Json candidate_code(const SampleBuffer& b, std::vector<Mapping>& maps, std::int64_t max_candidates) {
    Json out = Json::array();
    std::set<std::uint64_t> windows;
    bool refreshed = false;
    const std::size_t half = kCodeWindow / 2;
    for (std::size_t off = 0; off + 8 <= b.stackCopied; off += 8) {
        std::uint64_t word;
        std::memcpy(&word, b.stack + off, 8);
        if (word < 4096) continue;
        const Mapping* m = mapping_of(maps, word);
        if (!m && !refreshed) {
            maps = parse_maps(read_maps_text());  // code the runtime mapped since the last read
            refreshed = true;
            m = mapping_of(maps, word);
        }
        if (!m || !m->exec) continue;
        const std::uint64_t lo = std::max<std::uint64_t>(m->start, word >= half ? word - half : 0);
        if (windows.count(lo)) continue;
        if (static_cast<std::int64_t>(windows.size()) >= max_candidates) break;
        windows.insert(lo);
        const std::uint64_t hi = std::min<std::uint64_t>(m->end, word + half);
        unsigned char buf[kCodeWindow];
        const std::size_t got = read_own(lo, buf, static_cast<std::size_t>(hi - lo));
        if (got) out.push(code_json(lo, buf, got));
    }
    return out;
}

// Records one sample; returns whether its IP was managed code (GetFunctionFromIP gave a FunctionID).
bool record_sample(const SamplingJob& job, std::int64_t index, Walk& walk, std::vector<Mapping>& maps) {
    ProbeState& s = state();
    const SampleBuffer& b = g_sample;
    Json args = Json::object();
    Json target = Json::object();
    target.set("name", job.target.name).set("threadId", Json(static_cast<std::uint64_t>(job.target.threadId)));
    target.set("osTid", Json(static_cast<std::int64_t>(job.target.osTid)));
    args.set("sample", Json(index)).set("target", target).set("signal", "SIGPROF").set("seed", "naive");
    args.set("infoFlags", Json(static_cast<std::uint64_t>(job.infoFlags)));
    args.set("walk", Json(walk.number()));

    Json out = Json::object();
    out.set("handlerOsTid", Json(static_cast<std::int64_t>(b.handlerOsTid)));
    out.set("phase", b.phase >= 0 ? Json(b.phase) : Json());
    Json regs = Json::object();
    for (int i = 0; i < NGREG; ++i) regs.set(kGregNames[i], Json(b.gregs[i]));
    regs.set("fs_base", b.fsOk ? Json(b.fsBase) : Json());
    out.set("registers", regs);
    Json stack = Json::object();
    stack.set("sp", Json(b.sp)).set("inRange", Json(b.stackInRange));
    stack.set("stackLow", job.target.stackHigh ? Json(job.target.stackLow) : Json());
    stack.set("stackHigh", job.target.stackHigh ? Json(job.target.stackHigh) : Json());
    stack.set("capturedEnd", Json(b.sp + b.stackCopied));
    stack.set("bytes", base64(b.stack, static_cast<std::size_t>(b.stackCopied)));
    stack.set("redZone", base64(b.redZone, b.redZoneCopied));
    out.set("stack", stack);
    out.set("code", code_json(b.codeAddr, b.code, b.codeLen));
    out.set("candidateCode", candidate_code(b, maps, job.maxCandidates));
    out.set("candidateCodeTaken", "after-handler");
    out.set("seedContext", base64(b.seed, sizeof(AMD64Context)));
    Json w = Json::object();
    w.set("hr", Json(static_cast<std::uint32_t>(b.hr)));
    w.set("frameCount", Json(static_cast<std::uint64_t>(walk.delivered())));
    Json frames = Json::array();
    for (const FrameSlot& f : walk.frames()) {
        Json fr = Json::object();
        fr.set("funcId", Json(static_cast<std::uint64_t>(f.funcId)));
        fr.set("ip", Json(static_cast<std::uint64_t>(f.ip)));
        fr.set("sp", f.hasContext && f.contextSize >= kContextRipOffset + 8 ? Json(f.rsp) : Json());
        fr.set("inCall", Json(f.inCall));
        frames.push(fr);
    }
    w.set("frames", frames);
    out.set("walk", w);
    Json where = where_of(b.gregs[REG_RIP], maps);
    const Json* kind = where.get("kind");
    const bool managed = kind && kind->is_string() && kind->as_string() == "managed";
    out.set("where", std::move(where));
    Json timing = Json::object();
    timing.set("copyNs", Json(b.tCopied - b.tEnter)).set("walkNs", Json(b.tWalked - b.tCopied));
    out.set("timing", timing);
    s.call("capture_sample", job.planned->id.c_str(), args, out, S_OK);
    return managed;
}

void sampling_thread_main(std::shared_ptr<SamplingJob> job) {
    ProbeState& s = state();
    const char* exp = job->planned->id.c_str();
    record_profiler_thread_created(exp);
    std::vector<Mapping> maps = parse_maps(read_maps_text());
    std::int64_t taken = 0, timed_out = 0, managed_ok = 0, unmanaged_ok = 0;
    auto enough = [&] { return managed_ok >= job->minManagedOk && unmanaged_ok >= job->minUnmanagedOk; };
    std::uint64_t deadline_ns = now_ns();
    for (std::int64_t i = 0; i < job->maxSamples && (i < job->samples || !enough()); ++i) {
        if (i > 0 && job->intervalUs > 0) {
            deadline_ns += static_cast<std::uint64_t>(job->intervalUs) * 1000ull;
            sleep_until_ns(deadline_ns);
        }
        WalkRequest req;
        req.thread = 0;
        req.infoFlags = job->infoFlags;
        req.resolve = false;
        req.seed = g_sample.seed;
        req.contextSize = static_cast<ULONG32>(kContextBufferSize);
        auto* walk = new Walk(req);  // freed after recording; leaked if its handler never finishes
        g_sample.walk.store(walk, std::memory_order_release);
        g_sample.targetOsTid = job->target.osTid;
        g_sample.stackLow = job->target.stackLow;
        g_sample.stackHigh = job->target.stackHigh;
        g_sample.handlerOsTid = 0;
        g_sample.hr = S_OK;
        g_sample.state.store(kRequested, std::memory_order_release);
        const int rc = pthread_kill(job->target.pthread, kSampleSignal);
        std::int64_t waited_us = 0;
        if (rc == 0) {
            while (g_sample.state.load(std::memory_order_acquire) != kDone && waited_us < job->timeoutMs * 1000) {
                sleep_us(50);
                waited_us += 50;
            }
        }
        if (g_sample.state.load(std::memory_order_acquire) != kDone) {
            int requested = kRequested;
            const bool never_started = g_sample.state.compare_exchange_strong(requested, kAbandoned);
            ++timed_out;
            s.probe_error("capture_sample: sample " + std::to_string(i) + (rc ? ": pthread_kill failed" : "") +
                              (never_started ? ": the handler never ran" : ": the handler did not finish") +
                              " within " + std::to_string(job->timeoutMs) + " ms; sampling stops",
                          job->planned->id);
            if (never_started) {
                delete walk;
                g_sample.walk.store(nullptr);
                g_sample.state.store(kIdle);
            }
            break;
        }
        const bool managed = record_sample(*job, i, *walk, maps);
        if (g_sample.hr == S_OK) ++(managed ? managed_ok : unmanaged_ok);
        ++taken;
        delete walk;
        g_sample.walk.store(nullptr);
        g_sample.state.store(kIdle, std::memory_order_release);
    }
    {
        Json out = Json::object();
        out.set("maps", read_maps_text()).set("taken", "after-sampling");
        s.call("capture_maps", exp, Json::object(), out, S_OK);
    }
    if (job->jitMap) record_jit_map(exp);
    {
        Json args = Json::object();
        args.set("samples", Json(job->samples)).set("maxSamples", Json(job->maxSamples));
        args.set("minManagedOk", Json(job->minManagedOk)).set("minUnmanagedOk", Json(job->minUnmanagedOk));
        Json out = Json::object();
        out.set("taken", Json(taken)).set("timedOut", Json(timed_out));
        out.set("managedOk", Json(managed_ok)).set("unmanagedOk", Json(unmanaged_ok));
        out.set("enough", Json(enough()));
        s.call("capture_done", exp, args, out, timed_out ? E_FAIL : S_OK);
    }
    job->done.store(true, std::memory_order_release);
}

void capture_sample(ExperimentContext& ctx) {
    ProbeState& s = state();
    CaptureThread target;
    const std::string name = ctx.string_arg("target", "");
    if (!g_threads.find(name, target)) {
        s.probe_error("capture_sample: no thread registered as \"" + name + "\" (run capture_register_thread first)",
                      ctx.planned.id);
        return;
    }
    if (!s.info_as<ICorProfilerInfo2>(2)) {
        s.probe_error("capture_sample needs ICorProfilerInfo2", ctx.planned.id);
        return;
    }
    if (const int err = g_sample_handler.install()) {
        s.probe_error("capture_sample: sigaction(SIGPROF) failed: " + std::string(std::strerror(err)),
                      ctx.planned.id);
        return;
    }
    if (g_sample.state.load(std::memory_order_acquire) != kIdle) {
        s.probe_error("capture_sample: an earlier sample never finished; not sampling again", ctx.planned.id);
        return;
    }
    auto job = std::make_shared<SamplingJob>();
    job->planned = &ctx.planned;
    job->point = ctx.point;
    job->target = target;
    job->samples = ctx.int_arg("samples", 20);
    job->minManagedOk = ctx.int_arg("minManagedOk", 0);
    job->minUnmanagedOk = ctx.int_arg("minUnmanagedOk", 0);
    job->maxSamples = std::max(job->samples, ctx.int_arg("maxSamples", job->samples));
    job->intervalUs = ctx.int_arg("intervalUs", 1000);
    job->timeoutMs = ctx.int_arg("timeoutMs", 2000);
    job->maxCandidates = ctx.int_arg("maxCandidates", 256);
    job->infoFlags = static_cast<ULONG32>(ctx.int_arg("infoFlags", 0));
    job->jitMap = ctx.bool_arg("jitMap", true);
    const std::int64_t budget_ms =
        ctx.int_arg("totalTimeoutMs", 20000 + job->maxSamples * (job->timeoutMs + job->intervalUs / 1000 + 20));
    std::thread worker;
    try {
        worker = std::thread(sampling_thread_main, job);
    } catch (const std::exception& e) {
        s.probe_error(std::string("capture_sample: cannot start the profiler thread: ") + e.what(), ctx.planned.id);
        return;
    }
    if (!join_within(worker, job->done, budget_ms))
        s.probe_error("capture_sample: the profiler thread did not finish within " + std::to_string(budget_ms) + " ms",
                      ctx.planned.id);
}

// ---------------------------------------------------------------------------------------------------
// The table

const ExperimentEntry kRows[] = {
    {"capture_register_thread", &capture_register_thread,
     "Registers the calling thread for sampling under args.name (string): ThreadID, pthread_t, gettid, fs_base "
     "(arch_prctl), stack bounds (pthread_getattr_np). Records a capture_register_thread call."},
    {"capture_sample", &capture_sample,
     "A profiler thread sends SIGPROF to the registered thread args.target args.samples times (20), "
     "one every args.intervalUs (1000, fixed deadlines); the handler copies registers, fs_base, the stack (SP to min(SP + 64 KiB, "
     "stack end)) and 256 code bytes around the IP into preallocated buffers, then calls DoStackSnapshot seeded "
     "from the ucontext (args.infoFlags, 0). Past args.samples, sampling goes on (up to args.maxSamples, "
     "default args.samples) until args.minManagedOk (0) samples had managed code on top and "
     "args.minUnmanagedOk (0) other code, each with a live walk that returned S_OK. One capture_sample call "
     "record per sample, then capture_maps, capture_jit_map (args.jitMap true) and capture_done (taken, "
     "managedOk, unmanagedOk, enough). args: timeoutMs (2000, per sample), maxCandidates (256, code windows "
     "around stack words pointing into executable memory), totalTimeoutMs."},
};

}  // namespace

void capture_set_phase_cell(const volatile std::int32_t* cell) {
    g_phase_cell.store(cell, std::memory_order_release);
}

void capture_note_cached_function(FunctionID fid) {
    std::lock_guard<std::mutex> lock(g_cached_mutex);
    g_cached_functions.push_back(fid);
}

const ExperimentTable kCaptureExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness

// A scenario P/Invokes this with the address of a pinned int32 it writes its phase number into; the sampling
// handler reads it at each sample ("phase" in the capture_sample record). NULL stops reading.
PROFHARNESS_EXPORT void profharness_capture_phase_cell(const std::int32_t* cell) {
    profharness::capture_set_phase_cell(cell);
}

// A native function a scenario P/Invokes to park its thread in native code (no calls, no system calls):
// spins `iterations` times and returns a value that depends on every iteration.
PROFHARNESS_EXPORT __attribute__((noinline)) std::int64_t profharness_capture_spin(std::int64_t iterations) {
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < iterations; ++i) {
        n += i ^ (n >> 3);
        asm volatile("" : "+r"(n));
    }
    return n;
}
