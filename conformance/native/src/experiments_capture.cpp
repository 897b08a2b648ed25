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
// profiler thread); last it posts a semaphore (sem_post: async-signal-safe) the profiler thread sleeps on
// (sem_clockwait, up to args.timeoutMs). After the handler is done the profiler thread reads code around every stack word that
// points into executable memory (after the instant, once per code page and again when the JIT put code into
// the page since, the job's record says so), classifies the IP (GetFunctionFromIP, else the mapping that
// holds it) and writes the
// sample as one binary record (below). After the last sample it writes `capture_maps` (/proc/self/maps) and `capture_jit_map`
// (EnumJITedFunctions2; every native code version through GetNativeCodeStartAddresses + GetCodeInfo4, else
// GetCodeInfo2; names from metadata).
//
// No JSON per sample (issue 23 part 4): the profiler thread writes one `capture_sampling` call record per
// job (what every sample shares: target, signal, seed kind, stack bounds, the sidecar's name, the job's
// number), then each sample as one frame (kFrameSampleRecord, one write) of a frames v1 sidecar beside the
// trace (profharness/frames.h; the trace's path + kFramesSuffix): a fixed head, the walk's frames, the
// candidate windows' addresses and lengths, then the stack copy, the red zone, the code around the IP and
// the seed CONTEXT, raw (SampleHead below; conformance/adapters/capture_records.py reads it). A candidate
// window's bytes are those of kFrameCodePage frames, each page read and written when a window first needs
// it and again when a later sample finds its windows' bytes there changed; module paths are interned
// (kFrameString). Once the buffers have grown, a sample costs no
// allocation but its Walk. `capture_done` ends the job. Only the profiler thread writes frames; the handler
// only fills its preallocated buffers, as before. The JIT map's prologue bytes (once per run) stay base64
// (RFC 4648) strings.
//
// Bounds: each sample waits at most args.timeoutMs for the handler; a handler that does not finish is
// abandoned (probe_error), and sampling stops, since its buffers are still in use.
#include <asm/prctl.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
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
#include "seed_recovery.h"
#include "signal_seed.h"
#include "profharness/frames.h"
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

// The capture sidecar (conformance/adapters/capture.py reads it): its name is the trace's + this suffix; its
// frame types. kFrameSample (one sample's bytes, referred to by a JSON record) is an earlier probe's; this
// one writes kFrameSampleRecord (one sample, record and bytes: SampleHead below), kFrameCodePage (one page of
// code, read once: u64 address, 4096 bytes) and kFrameString (an interned string: u32 id, UTF-8 bytes).
constexpr const char* kFramesSuffix = ".capture.frames";
constexpr std::uint16_t kFrameSampleRecord = 2;
constexpr std::uint16_t kFrameCodePage = 3;
constexpr std::uint16_t kFrameString = 4;
constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kUserSpaceEnd = std::uint64_t{1} << 47;

std::uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
std::uint64_t thread_cpu_ns() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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

// This process's id for process_vm_readv, asked once (glibc's getpid() is a system call each time); a plain
// atomic load in a handler.
pid_t own_pid() {
    static std::atomic<pid_t> pid{0};
    pid_t p = pid.load(std::memory_order_relaxed);
    if (p == 0) {
        p = static_cast<pid_t>(::syscall(SYS_getpid));
        pid.store(p, std::memory_order_relaxed);
    }
    return p;
}

// Reads up to n bytes at addr of this process without faulting; returns the count read (a syscall:
// async-signal-safe). Stops at the first unreadable byte (page granularity): one iovec per page (a transfer
// stops only between iovec elements), up to kReadIov pages per call, so a window across a page boundary is
// one system call.
std::size_t read_own(std::uint64_t addr, unsigned char* out, std::size_t n) {
    constexpr std::size_t kReadIov = 8;
    std::size_t done = 0;
    while (done < n) {
        struct iovec local[kReadIov], remote[kReadIov];
        std::size_t k = 0, span = 0;
        for (; k < kReadIov && done + span < n; ++k) {
            const std::uint64_t a = addr + done + span;
            const std::uint64_t page_end = (a | 4095) + 1;
            std::size_t chunk = n - done - span;
            if (a + chunk > page_end) chunk = static_cast<std::size_t>(page_end - a);
            local[k] = {out + done + span, chunk};
            remote[k] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)), chunk};
            span += chunk;
        }
        const ssize_t got = ::syscall(SYS_process_vm_readv, own_pid(), local, static_cast<unsigned long>(k), remote,
                                      static_cast<unsigned long>(k), 0UL);
        if (got <= 0) break;
        done += static_cast<std::size_t>(got);
        if (static_cast<std::size_t>(got) < span) break;
    }
    return done;
}

// ---------------------------------------------------------------------------------------------------
// The sidecar of a sample's bytes

// never destroyed (as the probe's state): a profiler thread left running at exit() never writes through a
// destroyed writer
FrameWriter& g_frames = *new FrameWriter();
std::string& g_frames_name = *new std::string();  // the sidecar's file name (beside the trace)
std::mutex g_frames_open_mutex;

// Opens the sidecar once per process (the trace's path + kFramesSuffix); false with a reason.
bool open_capture_frames(std::string& error) {
    std::lock_guard<std::mutex> lock(g_frames_open_mutex);
    if (g_frames.is_open()) return true;
    const char* trace = std::getenv("PROFHARNESS_TRACE");
    if (trace == nullptr || *trace == '\0') {
        error = "PROFHARNESS_TRACE is not set: no place for the capture sidecar";
        return false;
    }
    const std::string path = std::string(trace) + kFramesSuffix;
    if (!g_frames.open(path.c_str(), 0, error)) return false;
    const std::size_t slash = path.rfind('/');
    g_frames_name = slash == std::string::npos ? path : path.substr(slash + 1);
    return true;
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
    // The recovered seed (seed_recovery.h; --seed recovered): the handler parks (kParked) after the naive
    // walk; the profiler thread recovers the seed into recSeed and moves `park` on (kSeedReady or kNoSeed),
    // or the handler gives up waiting (kParkAbandoned) and leaves.
    bool recover = false;    // set by the profiler thread before the signal
    bool naiveWalk = true;   // run the naive-seed walk too (false: the bench's recovered mode)
    std::int64_t parkTimeoutNs = 0;
    std::atomic<int> park{0};
    bool fastPath = false;   // the handler recovered the seed itself (no park)
    int topAsked = 0;        // TopAnswer: what the runtime's walk said of an interrupted IP the map could not tell
    std::atomic<Walk*> recWalk{nullptr};
    std::atomic<Walk*> topWalk{nullptr};  // the walk seeded at the instant (recover_in_handler); freed with recWalk
    HRESULT recHr = S_OK;
    std::uint64_t tParked = 0, tResumed = 0, tRecWalked = 0, tLeft = 0;
    alignas(64) BYTE recSeed[kContextBufferSize];
};

// The states of SampleBuffer::park.
enum ParkState : int { kNotParked = 0, kParked = 1, kSeedReady = 2, kNoSeed = 3, kParkAbandoned = 4 };

// SampleBuffer::topAsked: the handler did not ask (0), or the walk seeded at the instant said the interrupted
// IP is managed code (it walked) or is not (it refused the seed, DSS-21).
enum TopAnswer : int { kTopNotAsked = 0, kTopManaged = 1, kTopNotManaged = 2 };

// CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX (corerror.h): DoStackSnapshot's refusal of a seed outside managed code.
constexpr HRESULT kStackSnapshotUnmanagedCtx = static_cast<HRESULT>(0x8013135F);

SampleBuffer g_sample;
// Posted by the handler when it is done (sem_post is async-signal-safe): the profiler thread sleeps on it
// instead of polling (each poll costs a wake-up, many of them when the machine is loaded).
sem_t g_sample_done;
// Posted by the handler when it parks for the recovered seed (and, in recovered mode, when it is done).
sem_t g_sample_parked;
std::once_flag g_sample_done_once;
// The scenario's phase cell (profharness_capture_phase_cell): an int32 it writes before each phase; the
// handler reads it at the instant (a plain load: async-signal-safe).
std::atomic<const volatile std::int32_t*> g_phase_cell{nullptr};

// The loaded modules' CFI tables, prepared on the profiler thread (at sampler start, then between samples
// when the loader's count of added objects moved). Never destroyed.
UnwindTables& g_unwind = *new UnwindTables();

// What the handler knows of managed code (seed_recovery.h CodeMap): filled at sampler start from the JIT map
// (EnumJITedFunctions2, the ReadyToRun methods the runtime chose) and from every answer GetFunctionFromIP
// gives the profiler thread; changed only between samples. Never destroyed.
CodeMap& g_code_map = *new CodeMap(g_unwind);

// ucontext greg index of each DWARF register (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip).
constexpr int kGregOfDwarf[kDwarfRegs] = {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI,
                                          REG_RBP, REG_RSP, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                          REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
const char* const kDwarfNames[kDwarfRegs] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8",
                                             "r9",  "r10", "r11", "r12", "r13", "r14", "r15", "rip"};
constexpr std::size_t kContextOfDwarf[kDwarfRegs] = {
    offsetof(AMD64Context, Rax), offsetof(AMD64Context, Rdx), offsetof(AMD64Context, Rcx),
    offsetof(AMD64Context, Rbx), offsetof(AMD64Context, Rsi), offsetof(AMD64Context, Rdi),
    offsetof(AMD64Context, Rbp), offsetof(AMD64Context, Rsp), offsetof(AMD64Context, R8),
    offsetof(AMD64Context, R9),  offsetof(AMD64Context, R10), offsetof(AMD64Context, R11),
    offsetof(AMD64Context, R12), offsetof(AMD64Context, R13), offsetof(AMD64Context, R14),
    offsetof(AMD64Context, R15), offsetof(AMD64Context, Rip)};

// The recovery the handler ran (its own buffer: no allocation in the handler).
RecoveryResult& g_handler_recovery = *new RecoveryResult();

// The sampled thread's memory as a seed recovery reads it: the stack words in [lo, hi) from `at` (lo's bytes),
// anything else through process_vm_readv (an unreadable address is an answer, never a fault).
struct SampledMemory final : WordReader {
    std::uint64_t lo, hi;
    const unsigned char* at;

    // Read by the thread's own handler: the stack in place (it is this thread's, below the handler's frame).
    static SampledMemory in_handler(const SampleBuffer& b) {
        const std::uint64_t lo = std::max(b.sp, b.stackLow);
        return {lo, b.stackHigh, reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(lo))};
    }
    // Read by the profiler thread: the handler's copy of the stack from sp on.
    static SampledMemory copied(const SampleBuffer& b) { return {b.sp, b.sp + b.stackCopied, b.stack}; }

    SampledMemory(std::uint64_t l, std::uint64_t h, const unsigned char* a) : lo(l), hi(h), at(a) {}
    bool read(std::uint64_t addr, std::uint64_t& out) const override {
        if (addr >= lo && addr + 8 <= hi) {
            std::memcpy(&out, at + (addr - lo), 8);
            return true;
        }
        unsigned char w[8];
        if (read_own(addr, w, 8) != 8) return false;
        std::memcpy(&out, w, 8);
        return true;
    }
    std::size_t read_bytes(std::uint64_t addr, unsigned char* out, std::size_t n) const override {
        return read_own(addr, out, n);
    }
};

// The recovered seed as a CONTEXT in b.recSeed: the naive seed's flags, SegCs and EFlags, the recovered
// registers.
void write_recovered_seed(SampleBuffer& b, const RecoveryResult& r) {
    std::memcpy(b.recSeed, b.seed, sizeof(AMD64Context));
    for (int k = 0; k < kDwarfRegs; ++k) std::memcpy(b.recSeed + kContextOfDwarf[k], &r.seed.r[k], 8);
}

// In the handler (--seed recovered): parks until the profiler thread has recovered the seed or
// b.parkTimeoutNs passed (a raw futex wait: a system call, async-signal-safe), then walks from the
// recovered seed. A timed park cannot deadlock: were the profiler thread blocked on a lock this thread
// holds, the park ends, this thread leaves the handler, and the recovery is discarded.
void park_for_seed(SampleBuffer& b) {
    b.tParked = now_ns();
    b.park.store(kParked, std::memory_order_release);
    sem_post(&g_sample_parked);
    const std::uint64_t give_up = b.tParked + static_cast<std::uint64_t>(b.parkTimeoutNs);
    for (;;) {
        if (b.park.load(std::memory_order_acquire) != kParked) break;
        const std::uint64_t now = now_ns();
        if (now >= give_up) {
            int parked = kParked;
            if (b.park.compare_exchange_strong(parked, kParkAbandoned, std::memory_order_acq_rel)) break;
            continue;
        }
        const std::uint64_t left = give_up - now;
        timespec rel{static_cast<time_t>(left / 1000000000ull), static_cast<long>(left % 1000000000ull)};
        ::syscall(SYS_futex, reinterpret_cast<int*>(&b.park), FUTEX_WAIT_PRIVATE, kParked, &rel, nullptr, 0);
    }
    b.tResumed = now_ns();
    Walk* rw = b.recWalk.load(std::memory_order_acquire);
    if (b.park.load(std::memory_order_acquire) == kSeedReady && rw)
        b.recHr = rw->run(state().info_as<ICorProfilerInfo2>(2));
    b.tRecWalked = now_ns();
}

// In the handler (--seed recovered): the recovery with what the handler may use (the CFI tables, the code
// map, its own stack; no call into the runtime), then the walk from the seed it found. Only when the walk
// meets code the map cannot tell does the thread park for the profiler thread (park_for_seed).
//
// When the code the map cannot tell is the interrupted IP itself (on 8.0 mostly runtime stubs in the
// double-mapped code heap, each met for the first time: docs/seeding.md), the handler asks the runtime's walk
// before parking: seeded at the instant (the top frame's registers), DoStackSnapshot walks when the IP is
// managed code, and refuses the seed without a frame when it is not (DSS-21,
// CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX). A walk is the sample's walk (the top frame is the seed); a
// refusal lets the stub rules go on from the top in the handler (TopNotManaged), and the profiler thread
// learns the stub after the sample. Any other answer parks as before.
struct TopNotManaged final : ManagedOracle {
    const CodeMap& map;
    std::uint64_t top;
    TopNotManaged(const CodeMap& m, std::uint64_t ip) : map(m), top(ip) {}
    std::uint64_t function_at(std::uint64_t ip) const override { return ip == top ? 0 : map.function_at(ip); }
    bool unknown(std::uint64_t ip) const override { return ip != top && map.unknown(ip); }
    bool unknown_return(std::uint64_t ip) const override { return ip != top && map.unknown_return(ip); }
};

void recover_in_handler(SampleBuffer& b) {
    UnwindRegs regs;
    for (int r = 0; r < kDwarfRegs; ++r) regs.r[r] = b.gregs[kGregOfDwarf[r]];
    const SampledMemory mem = SampledMemory::in_handler(b);
    recover_seed(g_unwind, g_code_map, mem, regs, b.stackLow, b.stackHigh, g_handler_recovery);
    b.topAsked = kTopNotAsked;
    Walk* const top_walk = b.topWalk.load(std::memory_order_acquire);
    const std::uint64_t top = regs.r[kDwarfRip];
    if (g_handler_recovery.needsRuntime && g_handler_recovery.unknownIp == top && g_handler_recovery.stepCount == 1 &&
        top_walk) {
        RecoveryResult& r = g_handler_recovery;
        r.seed = regs;
        write_recovered_seed(b, r);
        const HRESULT hr = top_walk->run(state().info_as<ICorProfilerInfo2>(2));
        // Managed code only when the walk's first frame is a method at that very IP: the runtime also accepts
        // a seed in some of its stubs (virtual stub dispatch, allocation helpers) and then reports the caller
        // first, or frames the replay does not find (measured: 23 of 63 dispatch samples before this check).
        const auto& frames = top_walk->frames();
        // (or a few bytes before it: a thread in a P/Invoke's preemptive window is walked from its
        // InlinedCallFrame, whose return address precedes the IP, DSS-07)
        const bool at_top = hr == S_OK && !frames.empty() && frames.front().funcId != 0 &&
                            frames.front().ip <= top && top - frames.front().ip < 64;
        if (at_top) {  // managed code: the walk seeded at the top is the sample's
            b.topAsked = kTopManaged;
            r.ok = true;
            r.needsRuntime = false;
            r.reason = "";
            r.functionId = static_cast<std::uint64_t>(frames.front().funcId);
            b.topWalk.store(b.recWalk.exchange(top_walk, std::memory_order_acq_rel), std::memory_order_release);
            b.recHr = hr;
            b.fastPath = true;
            b.tParked = b.tResumed = now_ns();
            b.park.store(kSeedReady, std::memory_order_release);
            b.tRecWalked = now_ns();
            return;
        }
        if (hr == kStackSnapshotUnmanagedCtx || hr == S_OK) {  // not managed code: the stub rules from the top
            b.topAsked = kTopNotManaged;
            const TopNotManaged oracle(g_code_map, top);
            recover_seed(g_unwind, oracle, mem, regs, b.stackLow, b.stackHigh, r);
        }
    }
    if (g_handler_recovery.needsRuntime) {
        b.fastPath = false;
        park_for_seed(b);
        return;
    }
    b.fastPath = true;
    b.tParked = b.tResumed = now_ns();
    if (!g_handler_recovery.ok) {
        b.park.store(kNoSeed, std::memory_order_release);
        b.tRecWalked = b.tResumed;
        return;
    }
    write_recovered_seed(b, g_handler_recovery);
    b.park.store(kSeedReady, std::memory_order_release);
    Walk* rw = b.recWalk.load(std::memory_order_acquire);
    if (rw) b.recHr = rw->run(state().info_as<ICorProfilerInfo2>(2));
    b.tRecWalked = now_ns();
}

void sample_handler(int sig, siginfo_t* info, void* ucv);
OnceHandler g_sample_handler(kSampleSignal, &sample_handler);

void sample_handler(int sig, siginfo_t* info, void* ucv) {
    if (!g_sample_handler.claim(g_sample.state, g_sample.targetOsTid, sig, info, ucv)) return;
    const int saved_errno = errno;
    SampleBuffer& b = g_sample;
    b.tEnter = now_ns();
    const auto* uc = static_cast<const ucontext_t*>(ucv);
    const greg_t* g = uc->uc_mcontext.gregs;
    b.handlerOsTid = b.targetOsTid;  // the claim compared gettid() with it (no second system call)
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
    // The red zone below SP (a leaf function's CFI may say a register is saved there): this thread's own
    // stack, mapped, since the kernel put the handler's signal frame below it (no SA_ONSTACK), so a memcpy.
    b.redZoneCopied = 0;
    if (b.stackInRange && b.sp >= b.stackLow + kRedZone) {
        std::memcpy(b.redZone, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(b.sp - kRedZone)), kRedZone);
        b.redZoneCopied = kRedZone;
    }
    // Code around the IP: the half before it and the IP's own bytes in one read; when the half before is not
    // all readable, the IP's bytes alone (from the IP up).
    const std::uint64_t ip = b.gregs[REG_RIP];
    const std::size_t half = kCodeWindow / 2;
    const std::size_t whole = ip >= half ? read_own(ip - half, b.code, kCodeWindow) : 0;
    if (whole >= half) {
        b.codeAddr = ip - half;
        b.codeLen = whole;
    } else {
        b.codeAddr = ip;
        b.codeLen = read_own(ip, b.code, half);
    }
    const volatile std::int32_t* cell = g_phase_cell.load(std::memory_order_acquire);
    b.phase = cell ? static_cast<std::int64_t>(*cell) : -1;
    b.tCopied = now_ns();
    naive_seed(uc, b.seed);
    Walk* w = b.naiveWalk ? b.walk.load(std::memory_order_acquire) : nullptr;
    b.hr = w ? w->run(state().info_as<ICorProfilerInfo2>(2)) : b.naiveWalk ? E_POINTER : S_FALSE;
    b.tWalked = now_ns();
    if (b.recover) recover_in_handler(b);
    b.tLeft = now_ns();
    b.state.store(kDone, std::memory_order_release);
    sem_post(&g_sample_done);
    if (b.recover) sem_post(&g_sample_parked);  // a profiler thread waiting for a park that never came
    errno = saved_errno;
}

// ---------------------------------------------------------------------------------------------------
// /proc/self/maps

struct Mapping {
    std::uint64_t start, end;
    bool exec;
    bool none;  // "---p": reserved, no access (the runtime reserves, then commits, code heaps this way)
    std::string path;  // "" for anonymous memory
};

std::string read_maps_text() {
    std::ifstream in("/proc/self/maps");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Reads /proc/self/maps into `maps` (start, end, whether executable, the path: the text after the inode and
// its spaces), reusing its buffers: one read(2) loop into a kept buffer and a parser without stdio or
// streams (candidate_code says when the profiler thread reads them again).
std::uint64_t g_maps_reads = 0;  // refresh_maps calls (capture_done out.mapsReads)

void refresh_maps(std::vector<Mapping>& maps) {
    // the profiler thread's, never destroyed
    static std::vector<char>& text = *new std::vector<char>(64 * 1024);
    ++g_maps_reads;
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    std::size_t n = 0;
    if (fd >= 0) {
        for (;;) {
            if (n == text.size()) text.resize(text.size() * 2);
            const ssize_t got = ::read(fd, text.data() + n, text.size() - n);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            n += static_cast<std::size_t>(got);
        }
        ::close(fd);
    }
    auto hex = [](const char*& p, const char* end, std::uint64_t& v) {
        const char* start = p;
        v = 0;
        for (; p < end; ++p) {
            const char c = *p;
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) break;
            v = v << 4 | static_cast<std::uint64_t>(d);
        }
        return p > start;
    };
    auto skip_field = [](const char*& p, const char* end) {  // spaces, then a field
        while (p < end && *p == ' ') ++p;
        while (p < end && *p != ' ') ++p;
    };
    std::size_t count = 0;
    const char* p = text.data();
    const char* const all_end = text.data() + n;
    while (p < all_end) {
        const char* eol = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(all_end - p)));
        const char* end = eol ? eol : all_end;
        std::uint64_t start = 0, stop = 0;
        const char* q = p;
        if (hex(q, end, start) && q < end && *q == '-' && hex(++q, end, stop) && q < end && *q == ' ') {
            ++q;
            const char* perms = q;
            while (q < end && *q != ' ') ++q;
            const bool perms3 = q - perms >= 3;
            if (q > perms) {
                skip_field(q, end);  // offset
                skip_field(q, end);  // device
                skip_field(q, end);  // inode
                while (q < end && (*q == ' ' || *q == '\t')) ++q;
                if (count == maps.size()) maps.emplace_back();
                Mapping& m = maps[count++];
                m.start = start;
                m.end = stop;
                m.exec = perms3 && perms[2] == 'x';
                m.none = perms3 && perms[0] == '-' && perms[1] == '-' && perms[2] == '-';
                m.path.assign(q, end);
            }
        }
        p = eol ? eol + 1 : all_end;
    }
    maps.resize(count);
}

// Whether the page of `a` is mapped now (mincore(2) fails with ENOMEM on an unmapped page).
bool mapped_now(std::uint64_t a) {
    unsigned char resident = 0;
    void* page = reinterpret_cast<void*>(static_cast<std::uintptr_t>(a & ~std::uint64_t{4095}));
    return ::mincore(page, 1, &resident) == 0 || errno != ENOMEM;
}

// The mapping that holds `a` (/proc/self/maps lists mappings in ascending, disjoint address order).
const Mapping* mapping_of(const std::vector<Mapping>& maps, std::uint64_t a) {
    auto it = std::upper_bound(maps.begin(), maps.end(), a,
                               [](std::uint64_t x, const Mapping& m) { return x < m.start; });
    if (it == maps.begin()) return nullptr;
    --it;
    return a < it->end ? &*it : nullptr;
}

// mapping_of for the many stack words a sample scans, through a direct-mapped cache of pages (the profiler
// thread's): a stack's words fall in few pages (the stack's own, the heap's, code), so most cost one
// compare instead of a binary search over hundreds of mappings. An entry holds for the maps it was computed
// from (g_maps_reads counts their reads); a mapping never spans a page partly, so a page has one answer.
// A page number's slot in a table of 2^bits (Fibonacci hashing: the high bits of the product, so pages whose
// low bits agree, e.g. one every 1 MiB, spread).
std::size_t page_slot(std::uint64_t page, unsigned bits) {
    return static_cast<std::size_t>((page * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

struct MappingCacheSlot {
    std::uint64_t page = ~std::uint64_t{0};
    std::uint64_t reads = 0;
    const Mapping* mapping = nullptr;
};

const Mapping* mapping_of_cached(const std::vector<Mapping>& maps, std::uint64_t a, std::uint64_t reads) {
    static MappingCacheSlot* const slots = new MappingCacheSlot[4096];  // never destroyed
    const std::uint64_t page = a >> 12;
    MappingCacheSlot& slot = slots[page_slot(page, 12)];
    if (slot.page != page || slot.reads != reads) {
        slot.page = page;
        slot.reads = reads;
        slot.mapping = mapping_of(maps, a);
    }
    return slot.mapping;
}


// ---------------------------------------------------------------------------------------------------
// The JIT code map

// FunctionIDs whose ReadyToRun code the runtime chose (JITCachedFunctionSearchFinished with
// COR_PRF_CACHED_FUNCTION_FOUND, under COR_PRF_MONITOR_CACHE_SEARCHES): EnumJITedFunctions2 lists only
// JIT-compiled code, so without these the map has no FunctionID for CoreLib's precompiled frames.
std::mutex g_cached_mutex;
// Methods the JIT compiled since the code map last learned (JITCompilationFinished): learned before the next
// sample of a --seed recovered capture.
std::mutex g_jitted_mutex;
std::atomic<bool> g_learn_jitted{false};  // set when a --seed recovered sampler starts
std::vector<FunctionID>& g_jitted_pending = *new std::vector<FunctionID>();

std::vector<FunctionID> g_cached_functions;

// Every function EnumJITedFunctions2 lists, in its batches (`each` called once per entry); its HRESULT
// (E_NOINTERFACE without ICorProfilerInfo4).
HRESULT for_each_jitted(const std::function<void(const CapturePrfFunction&)>& each) {
    auto* info4 = state().info_as<ICorProfilerInfo4>(4);
    if (!info4) return E_NOINTERFACE;
    ICorProfilerFunctionEnum* raw = nullptr;
    const HRESULT hr = info4->EnumJITedFunctions2(&raw);
    auto* fe = reinterpret_cast<CaptureFunctionEnum*>(raw);
    if (failed(hr) || !fe) return hr;
    CapturePrfFunction batch[256];
    ULONG got = 0;
    while (fe->Next(256, batch, &got) == S_OK || got > 0) {
        for (ULONG i = 0; i < got; ++i) each(batch[i]);
        if (got < 256) break;
        got = 0;
    }
    fe->Release();
    return hr;
}

// A copy of g_cached_functions, taken under its lock.
std::vector<FunctionID> cached_functions() {
    std::lock_guard<std::mutex> lock(g_cached_mutex);
    return g_cached_functions;
}

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
    Json methods = Json::array();
    std::size_t failures = 0;
    std::set<FunctionID> listed;
    const HRESULT hr = for_each_jitted([&](const CapturePrfFunction& f) {
        HRESULT chr = S_OK;
        Json versions = code_ranges(f.functionId, f.reJitId, chr);
        if (versions.items().empty()) {
            ++failures;
            return;
        }
        listed.insert(f.functionId);
        Json m = Json::object();
        m.set("functionId", Json(static_cast<std::uint64_t>(f.functionId)));
        m.set("reJitId", Json(static_cast<std::uint64_t>(f.reJitId)));
        m.set("name", function_name(f.functionId));
        m.set("versions", versions);
        methods.push(m);
    });
    std::size_t precompiled = 0;
    for (FunctionID fid : cached_functions()) {
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
    bool recover = false, naiveWalk = true;  // args.seed "recovered"; args.naiveWalk
    bool seedRecord = false;                  // args.seed given: one capture_seed record per sample
    std::int64_t parkTimeoutMs = 200;
    std::uint32_t job = 0;  // the capture_sampling record's out.job, in each of its samples' records
    std::atomic<bool> done{false};
};

// ---------------------------------------------------------------------------------------------------
// A sample's record in the sidecar (kFrameSampleRecord; conformance/adapters/capture.py decodes it)
//
// Payload, little-endian: SampleHead (headSize bytes; a reader skips what it does not know), then
// framesListed walk frames (SampleFrame), then `windows` candidate code windows (SampleWindow: the address
// and length of the bytes read; the bytes are those of the kFrameCodePage frames written before, one per
// page), then the stack copy (stackLen), the red zone (redZoneLen), the code around the IP (codeLen) and the
// seed CONTEXT (seedLen). Everything the JSON record of an earlier probe held per sample is here; what is
// the same for every sample of a job (target thread, signal, seed kind, stack bounds, the sidecar's name) is
// in the job's one `capture_sampling` call record.

// SampleHead.kind: where the IP was (the JSON record's out.where.kind)
enum class WhereKind : std::uint32_t { kManaged = 1, kUnmapped = 2, kAnonymousExecutable = 3, kAnonymous = 4,
                                       kModule = 5 };
constexpr std::uint32_t kHeadFsOk = 1, kHeadInRange = 2;           // SampleHead.flags
constexpr std::uint32_t kFrameSpKnown = 1, kFrameInCall = 2;        // SampleFrame.flags

struct SampleHead {
    std::uint32_t headSize;  // sizeof(SampleHead)
    std::uint32_t job;
    std::int64_t sample;
    std::int64_t walk;  // the walk's number (as a DoStackSnapshot record's)
    std::int64_t handlerOsTid;
    std::int64_t phase;  // the scenario's phase cell; -1 without one
    std::uint64_t gregs[NGREG];  // ucontext order (kGregNames)
    std::uint64_t fsBase;
    std::uint64_t sp, capturedEnd;
    std::uint64_t codeAddress;
    std::uint64_t copyNs, walkNs, candidatesCpuNs, recordCpuNs;
    std::uint64_t functionId;  // GetFunctionFromIP's (0 when it failed)
    std::uint32_t functionFromIpHr, walkHr;
    std::uint32_t flags;      // kHeadFsOk, kHeadInRange
    std::uint32_t kind;       // WhereKind
    std::uint32_t module;     // the mapping's path as a kFrameString id; 0: none
    std::uint32_t frameCount;  // frames the walk delivered
    std::uint32_t framesListed, stackLen, redZoneLen, codeLen, windows, seedLen;
};
static_assert(NGREG == 23 && sizeof(SampleHead) == 344, "SampleHead is a file layout");

struct SampleFrame {
    std::uint64_t funcId, ip, sp;
    std::uint32_t flags;  // kFrameSpKnown, kFrameInCall
    std::uint32_t reserved;
};
static_assert(sizeof(SampleFrame) == 32, "SampleFrame is a file layout");

struct SampleWindow {
    std::uint64_t address;
    std::uint32_t length;
    std::uint32_t reserved;
};
static_assert(sizeof(SampleWindow) == 16, "SampleWindow is a file layout");

// Interned strings (the profiler thread's, never destroyed): each written once as a kFrameString frame before
// the first record that names it; 0 when it could not be written (the record then names no module).
std::uint32_t intern_string(const std::string& text) {
    static std::vector<std::string>& known = *new std::vector<std::string>();
    static std::vector<std::uint32_t>& ids = *new std::vector<std::uint32_t>();
    static std::uint32_t next = 1;
    for (std::size_t i = 0; i < known.size(); ++i)
        if (known[i] == text) return ids[i];
    const std::uint32_t id = next;
    const FrameWriter::Part parts[] = {{&id, 4}, {text.data(), text.size()}};
    if (g_frames.append(kFrameString, parts, 2) < 0) return 0;
    ++next;
    known.push_back(text);
    ids.push_back(id);
    return id;
}

// Where the IP is: GetFunctionFromIP, else the mapping that holds it.
WhereKind where_of(std::uint64_t ip, std::vector<Mapping>& maps, SampleHead& head) {
    ProbeState& s = state();
    FunctionID fid = 0;
    HRESULT fh = s.info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &fid);
    head.functionFromIpHr = static_cast<std::uint32_t>(fh);
    head.functionId = failed(fh) ? 0 : static_cast<std::uint64_t>(fid);
    const Mapping* m = mapping_of(maps, ip);
    if (!m) {
        refresh_maps(maps);  // new code regions appear as the runtime runs
        m = mapping_of(maps, ip);
    }
    head.module = m && !m->path.empty() ? intern_string(m->path) : 0;
    if (!failed(fh) && fid) return WhereKind::kManaged;
    if (!m) return WhereKind::kUnmapped;
    if (m->path.empty() || m->path[0] == '[') return m->exec ? WhereKind::kAnonymousExecutable : WhereKind::kAnonymous;
    return WhereKind::kModule;
}

// The code pages written so far (the profiler thread's, never destroyed): a page is read when a candidate
// window first needs it and written as one kFrameCodePage frame; later windows in that page refer to it.
// The JIT never rewrites a method's code in place, but it does place new methods (tiered and OSR versions
// among them) in the free part of a page it filled partly before: a page read earlier holds zeros where the
// new method now lies. A run under load had a frameless leaf called from an OSR method compiled after its
// page was read; the replay found no call before the return address, fell back to the frame-pointer chain
// and lost two frames (DSS-03/07/16 [emu 8.0.4] diverged). So each sample reads again its windows' bytes in
// known pages where the copy held free space (all-zero blocks, CodePageCopy) and writes a page again when
// they changed there (recheck_code_pages); the reader cuts a
// sample's windows from the newest frame of each page written before it. Candidate code was always read
// after the instant; a page that could not be read is tried again by the next sample that needs it.
std::vector<std::uint64_t>& g_code_pages = *new std::vector<std::uint64_t>();  // sorted
// Each known page as last written: its bytes, and which of its 64-byte blocks were all zero then. The JIT
// writes new code only into free space, which a code heap's fresh memory holds as zeros: a window with no
// such block in the page's copy cannot have changed, and is not read again (the recheck's cost stays a few
// windows per sample).
struct CodePageCopy {
    std::unique_ptr<unsigned char[]> bytes;
    std::uint64_t zeroBlocks = 0;  // bit k: bytes [64k, 64k + 64) were all zero
};
std::map<std::uint64_t, CodePageCopy>& g_code_page_bytes = *new std::map<std::uint64_t, CodePageCopy>();

std::uint64_t zero_blocks(const unsigned char* page) {
    std::uint64_t out = 0;
    for (unsigned k = 0; k < kPage / 64; ++k) {
        bool zero = true;
        for (unsigned i = 0; i < 64 && zero; ++i) zero = page[k * 64 + i] == 0;
        if (zero) out |= std::uint64_t{1} << k;
    }
    return out;
}
std::uint64_t g_code_pages_read = 0;     // pages read while sampling (capture_done out.codePagesRead)
std::uint64_t g_code_pages_changed = 0;  // of them, pages written again (capture_done out.codePagesChanged)

bool code_page_known(std::uint64_t page) {
    return std::binary_search(g_code_pages.begin(), g_code_pages.end(), page);
}

// Reads the pages of `pages` (sorted, unique; the known ones are pages found changed), one iovec per page (a
// transfer stops only between iovec elements, so a short count names the page that failed), in as few calls
// as the failures allow, and writes each page read whole as a frame.
void read_code_pages(const std::vector<std::uint64_t>& pages) {
    static std::vector<unsigned char>& data = *new std::vector<unsigned char>();  // kPage bytes per page
    constexpr std::size_t kBatch = 64;  // <= IOV_MAX
    if (data.size() < kBatch * kPage) data.resize(kBatch * kPage);
    struct iovec local[kBatch], remote[kBatch];
    std::size_t c = 0;
    while (c < pages.size()) {
        const std::size_t n = std::min(kBatch, pages.size() - c);
        for (std::size_t i = 0; i < n; ++i) {
            local[i] = {data.data() + i * kPage, kPage};
            remote[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(pages[c + i])), kPage};
        }
        const ssize_t r = ::syscall(SYS_process_vm_readv, own_pid(), local, static_cast<unsigned long>(n), remote,
                                    static_cast<unsigned long>(n), 0UL);
        const std::size_t whole = r > 0 ? static_cast<std::size_t>(r) / kPage : 0;
        for (std::size_t i = 0; i < whole; ++i) {
            const std::uint64_t page = pages[c + i];
            const FrameWriter::Part parts[] = {{&page, 8}, {data.data() + i * kPage, kPage}};
            if (g_frames.append(kFrameCodePage, parts, 2) < 0) continue;  // not written: as before
            CodePageCopy& copy = g_code_page_bytes[page];
            if (copy.bytes) {
                ++g_code_pages_changed;  // written again (recheck_code_pages found it changed)
            } else {
                copy.bytes.reset(new unsigned char[kPage]);
                g_code_pages.insert(std::upper_bound(g_code_pages.begin(), g_code_pages.end(), page), page);
            }
            std::memcpy(copy.bytes.get(), data.data() + i * kPage, kPage);
            copy.zeroBlocks = zero_blocks(copy.bytes.get());
        }
        g_code_pages_read += whole;
        c += whole < n ? whole + 1 : n;  // page c + whole failed (unreadable); go on after it
    }
}

// The known pages among the windows [lo, hi) of `wanted` whose bytes there are no longer those last written
// (the JIT put code into the page since): added to `changed`, to be read and written again. One
// process_vm_readv per batch of window parts; a part that cannot be read now is left as it was.
void recheck_code_pages(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& wanted,
                        std::vector<std::uint64_t>& changed) {
    static std::vector<unsigned char>& now = *new std::vector<unsigned char>();
    constexpr std::size_t kBatch = 64;  // <= IOV_MAX
    struct Part {
        std::uint64_t page, at, len;
    };
    Part parts[kBatch];
    struct iovec local[kBatch], remote[kBatch];
    std::size_t n = 0, bytes = 0;
    auto flush = [&]() {
        if (n == 0) return;
        if (now.size() < bytes) now.resize(bytes);
        std::size_t off = 0;
        for (std::size_t i = 0; i < n; ++i) {
            local[i] = {now.data() + off, static_cast<std::size_t>(parts[i].len)};
            remote[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(parts[i].at)),
                         static_cast<std::size_t>(parts[i].len)};
            off += parts[i].len;
        }
        const ssize_t r = ::syscall(SYS_process_vm_readv, own_pid(), local, static_cast<unsigned long>(n), remote,
                                    static_cast<unsigned long>(n), 0UL);
        std::size_t got = r > 0 ? static_cast<std::size_t>(r) : 0;  // whole iovec elements (see readv(2))
        off = 0;
        for (std::size_t i = 0; i < n && off + parts[i].len <= got; ++i) {
            const auto it = g_code_page_bytes.find(parts[i].page);
            const unsigned char* was =
                it != g_code_page_bytes.end() ? it->second.bytes.get() + (parts[i].at - parts[i].page) : nullptr;
            if (was && std::memcmp(now.data() + off, was, parts[i].len) != 0) changed.push_back(parts[i].page);
            off += parts[i].len;
        }
        n = bytes = 0;
    };
    for (const auto& [lo, hi] : wanted) {
        for (std::uint64_t p = lo & ~(kPage - 1); p < hi; p += kPage) {
            const auto it = g_code_page_bytes.find(p);
            if (it == g_code_page_bytes.end()) continue;  // not known: read whole below anyway
            const std::uint64_t at = std::max(lo, p), end = std::min(hi, p + kPage);
            const auto first = static_cast<unsigned>((at - p) / 64), last = static_cast<unsigned>((end - 1 - p) / 64);
            const std::uint64_t blocks = (last == 63 ? ~std::uint64_t{0} : (std::uint64_t{1} << (last + 1)) - 1) &
                                         ~((std::uint64_t{1} << first) - 1);
            if ((it->second.zeroBlocks & blocks) == 0) continue;  // no free space there when written
            parts[n++] = Part{p, at, end - at};
            bytes += end - at;
            if (n == kBatch) flush();
        }
    }
    flush();
}

// Pages a sample found unchanged since the maps were read (the profiler thread's; see candidate_code).
struct UnchangedSlot {
    std::uint64_t page = ~std::uint64_t{0};
    std::uint64_t reads = 0;
    std::int64_t sample = 0;
    bool reserved = false;
};
constexpr unsigned kUnchangedBits = 10;
constexpr std::size_t kUnchangedSlots = std::size_t{1} << kUnchangedBits;
constexpr std::int64_t kRecheckSamples = 16;
UnchangedSlot* const g_unchanged = new UnchangedSlot[kUnchangedSlots];  // never destroyed

// The last sample's scan (the profiler thread's, never destroyed; see candidate_code): its stack copy and
// every word of it that pointed into an executable mapping, with that word's window.
struct ScanMemo {
    std::vector<unsigned char> stack;
    std::uint64_t sp = 0;
    std::size_t len = 0;
    struct Hit {
        std::uint64_t at, lo, hi;  // the word's address; its window [lo, hi)
    };
    std::vector<Hit> hits;
    std::uint64_t reads = ~std::uint64_t{0};  // the maps it was computed from (g_maps_reads)
    std::int64_t fullSample = 0;              // the last sample scanned word by word to its end
    bool usable = false;                      // complete (no cap, no re-read of the maps half way)
};
ScanMemo& g_scan_memo = *new ScanMemo();

// Code around stack words that point into executable mappings (candidate return addresses): the windows
// (address, length of the bytes readable from it, up to its first unreadable page) into `out`, at most
// `cap`; their pages read and written first where no earlier sample did.
//
// Between two samples of a thread only the top of its stack changes: the frames below those that ran since
// hold the same bytes at the same addresses. The words from the highest address where this stack differs
// from the last sample's up to its end are not looked up again: their hits come from the last scan (the same
// words, against the same maps, give the same windows, in the same order), unless the maps were read again
// since, the last scan was cut short, or kRecheckSamples samples passed since a scan went word by word to
// the end (that one asks again about words in no mapping, as below).
void candidate_code(const SampleBuffer& b, std::vector<Mapping>& maps, std::int64_t max_candidates,
                    std::vector<SampleWindow>& out, std::size_t cap, std::int64_t sample) {
    static std::vector<std::pair<std::uint64_t, std::uint64_t>>& wanted =
        *new std::vector<std::pair<std::uint64_t, std::uint64_t>>();  // the profiler thread's, never destroyed
    static std::vector<std::uint64_t>& missing = *new std::vector<std::uint64_t>();
    static std::vector<ScanMemo::Hit>& hits = *new std::vector<ScanMemo::Hit>();
    ScanMemo& memo = g_scan_memo;
    out.clear();
    wanted.clear();
    missing.clear();
    hits.clear();
    bool refreshed = false;
    const std::uint64_t reads_before = g_maps_reads;
    // The maps are read again (once per sample, as soon as a word needs it) when a word lies in no mapping
    // read earlier but is mapped now (mincore: new mappings, e.g. .NET 8's double-mapped code), or lies in
    // a reservation without access then ("---p") that is readable now (process_vm_readv of one byte: memory
    // the runtime committed since, executable on .NET Core 3.1's code heaps; a guard page stays unreadable).
    // x86-64 user space ends below 2^47 (the kernel maps higher only for an mmap hint above it, which the
    // runtime does not give: Documentation/arch/x86/x86_64/5level-paging.rst), so higher words need none.
    // A page found unchanged is not asked again for kRecheckSamples samples (g_unchanged, while the maps
    // stay those it was checked against): a thread's stack holds the same stale words sample after sample,
    // and a word into code mapped since lies in a page no sample found unchanged, unless that page was
    // unmapped less than kRecheckSamples samples ago.
    auto changed_since = [&](std::uint64_t word, bool reserved) {
        if (word >= kUserSpaceEnd) return false;
        const std::uint64_t page = word >> 12;
        UnchangedSlot& slot = g_unchanged[page_slot(page, kUnchangedBits)];
        if (slot.page == page && slot.reads == g_maps_reads && sample - slot.sample < kRecheckSamples &&
            slot.reserved == reserved)
            return false;
        unsigned char byte;
        if (reserved ? read_own(word, &byte, 1) == 1 : mapped_now(word)) return true;
        slot = UnchangedSlot{page, g_maps_reads, sample, reserved};
        return false;
    };
    // One hit (a word at `at` with the window [lo, hi)): wanted unless an earlier word wanted the same
    // window; false when the cap is reached (the scan stops there).
    auto take = [&](std::uint64_t at, std::uint64_t lo, std::uint64_t hi) {
        hits.push_back(ScanMemo::Hit{at, lo, hi});
        for (const auto& w : wanted)
            if (w.first == lo) return true;
        if (static_cast<std::int64_t>(wanted.size()) >= max_candidates) return false;
        wanted.emplace_back(lo, hi);
        for (std::uint64_t p = lo & ~(kPage - 1); p < hi; p += kPage)
            if (!code_page_known(p)) missing.push_back(p);
        return true;
    };
    const std::size_t half = kCodeWindow / 2;
    const std::size_t words_end = b.stackCopied & ~std::size_t{7};  // the offset after the last whole word
    // [from, words_end): the offsets whose bytes are the last sample's at the same addresses
    std::size_t from = words_end;
    const bool memo_ok = memo.usable && memo.reads == g_maps_reads && sample - memo.fullSample < kRecheckSamples &&
                         memo.sp + (memo.len & ~std::size_t{7}) == b.sp + words_end && (b.sp - memo.sp) % 8 == 0;
    if (memo_ok) {
        const std::uint64_t lowest = std::max(b.sp, memo.sp);
        while (from >= 8 && b.sp + from - 8 >= lowest &&
               std::memcmp(b.stack + from - 8, memo.stack.data() + (b.sp + from - 8 - memo.sp), 8) == 0)
            from -= 8;
    }
    bool capped = false;
    auto scan = [&](std::size_t lo_off, std::size_t hi_off) {
        for (std::size_t off = lo_off; off < hi_off; off += 8) {
            std::uint64_t word;
            std::memcpy(&word, b.stack + off, 8);
            if (word < 4096) continue;
            const Mapping* m = mapping_of_cached(maps, word, g_maps_reads);
            if (!refreshed && (!m || m->none) && changed_since(word, m != nullptr)) {
                refresh_maps(maps);  // code the runtime mapped or committed since the last read
                refreshed = true;
                m = mapping_of_cached(maps, word, g_maps_reads);
            }
            if (!m || !m->exec) continue;
            const std::uint64_t lo = std::max<std::uint64_t>(m->start, word >= half ? word - half : 0);
            if (!take(b.sp + off, lo, std::min<std::uint64_t>(m->end, word + half))) {
                capped = true;
                return;
            }
        }
    };
    scan(0, from);
    bool full = true;
    if (!capped && from < words_end) {
        if (!refreshed) {  // the same words against the same maps: the last scan's hits
            full = false;
            for (const ScanMemo::Hit& h : memo.hits) {
                if (h.at < b.sp + from) continue;
                if (!take(h.at, h.lo, h.hi)) {
                    capped = true;
                    break;
                }
            }
        } else {
            scan(from, words_end);
        }
    }
    memo.stack.assign(b.stack, b.stack + b.stackCopied);
    memo.sp = b.sp;
    memo.len = b.stackCopied;
    memo.hits.assign(hits.begin(), hits.end());
    memo.reads = g_maps_reads;
    if (full) memo.fullSample = sample;
    memo.usable = !capped && g_maps_reads == reads_before;
    recheck_code_pages(wanted, missing);  // known pages the JIT put code into since they were written
    if (!missing.empty()) {
        std::sort(missing.begin(), missing.end());
        missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
        read_code_pages(missing);
    }
    for (const auto& [lo, hi] : wanted) {
        std::uint64_t end = lo;  // up to the first page not known (as a page-by-page read would stop)
        while (end < hi && code_page_known(end & ~(kPage - 1))) end = std::min(hi, (end & ~(kPage - 1)) + kPage);
        if (end == lo) continue;
        if (out.size() >= cap) break;
        out.push_back(SampleWindow{lo, static_cast<std::uint32_t>(end - lo), 0});
    }
}

// ---------------------------------------------------------------------------------------------------
// The recovered seed: the profiler thread's side (seed_recovery.h; docs/seeding.md)

// Every native code range of `fid` (each code version: GetNativeCodeStartAddresses + GetCodeInfo4, else
// GetCodeInfo2) into the code map (committed before the next sample).
void learn_function(FunctionID fid) {
    ProbeState& s = state();
    bool any = false;
    if (auto* info9 = s.info_as<ICorProfilerInfo9>(9)) {
        UINT_PTR starts[64];
        ULONG32 n = 0;
        if (!failed(info9->GetNativeCodeStartAddresses(fid, 0, 64, &n, starts))) {
            for (ULONG32 i = 0; i < n && i < 64; ++i) {
                COR_PRF_CODE_INFO infos[16];
                ULONG32 m = 0;
                if (failed(info9->GetCodeInfo4(starts[i], 16, &m, infos))) continue;
                for (ULONG32 k = 0; k < m && k < 16; ++k) {
                    g_code_map.add_method(infos[k].startAddress, infos[k].startAddress + infos[k].size, fid);
                    any = true;
                }
            }
        }
    }
    if (any) return;
    if (auto* info2 = s.info_as<ICorProfilerInfo2>(2)) {
        COR_PRF_CODE_INFO infos[16];
        ULONG32 m = 0;
        if (!failed(info2->GetCodeInfo2(fid, 16, &m, infos)))
            for (ULONG32 k = 0; k < m && k < 16; ++k)
                g_code_map.add_method(infos[k].startAddress, infos[k].startAddress + infos[k].size, fid);
    }
}

// GetFunctionFromIP, on the profiler thread (never in the handler); every answer teaches the code map: a
// method's code ranges, or an IP that is not managed code.
struct RuntimeOracle final : ManagedOracle {
    std::uint64_t function_at(std::uint64_t ip) const override {
        FunctionID fid = 0;
        const HRESULT hr =
            state().info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &fid);
        const std::uint64_t got = failed(hr) ? 0 : static_cast<std::uint64_t>(fid);
        if (got && g_code_map.function_at(ip) != got) {  // a new method, or a new code version of one
            learn_function(static_cast<FunctionID>(got));
            g_code_map.commit();
            // code the runtime lists in no code version (an OSR method's, on 8.0): this IP alone
            if (g_code_map.function_at(ip) != got) {
                g_code_map.add_method(ip, ip + 1, got);
                g_code_map.commit();
            }
        } else if (!got && g_code_map.unknown(ip)) {
            g_code_map.add_not_managed(ip);
        }
        return got;
    }
};

// After a sample: the methods (and code versions) the runtime's walks reported that the map lacks, and the
// stub the handler passed after the walk refused the interrupted IP (recover_in_handler).
void learn_from_walks(const Walk& naive, const Walk* recovered) {
    for (const Walk* w : {&naive, recovered}) {
        if (!w) continue;
        for (const FrameSlot& f : w->frames())
            if (f.funcId && g_code_map.function_at(f.ip ? f.ip - 1 : 0) != f.funcId) learn_function(f.funcId);
    }
    const SampleBuffer& b = g_sample;
    if (b.fastPath && b.topAsked == kTopNotManaged && g_handler_recovery.stepCount > 1) {
        g_code_map.add_not_managed(b.gregs[REG_RIP]);  // this IP is not asked again
        g_code_map.add_stub_page(b.gregs[REG_RIP]);    // nor its page, when no known method shares it
    }
    g_code_map.commit();
}

// The code map's mappings without code (readable, not executable; not "---p": reserved memory the runtime
// may commit as code later) and, at the first call, the methods of the JIT map.
void prepare_code_map(const std::vector<Mapping>& maps, bool first) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> data;
    for (const Mapping& m : maps)
        if (!m.exec && !m.none) data.emplace_back(m.start, m.end);
    g_code_map.set_data_regions(std::move(data));
    std::vector<FunctionID> jitted;
    {
        std::lock_guard<std::mutex> lock(g_jitted_mutex);
        jitted.swap(g_jitted_pending);
    }
    for (FunctionID fid : jitted) learn_function(fid);
    if (first) {
        for_each_jitted([](const CapturePrfFunction& f) { learn_function(f.functionId); });
        for (FunctionID fid : cached_functions()) learn_function(fid);
    }
    g_code_map.commit();
}

RecoveryResult& g_recovery = *new RecoveryResult();  // the profiler thread's, one sample at a time
std::uint64_t g_recover_cpu_ns = 0;
bool g_recovery_ran = false;

// After the signal (--seed recovered): waits (until give_up_ns) for the handler to park, recovers the seed
// from the registers and stack it copied, writes it as a CONTEXT into b.recSeed and lets the handler go on.
void serve_park(SampleBuffer& b, const CaptureThread& target, std::uint64_t give_up_ns) {
    g_recovery_ran = false;
    const timespec until{static_cast<time_t>(give_up_ns / 1000000000ull), static_cast<long>(give_up_ns % 1000000000ull)};
    while (b.park.load(std::memory_order_acquire) != kParked) {
        if (b.state.load(std::memory_order_acquire) == kDone) return;
        if (sem_clockwait(&g_sample_parked, CLOCK_MONOTONIC, &until) != 0 && errno == ETIMEDOUT) return;
    }
    const std::uint64_t cpu0 = thread_cpu_ns();
    UnwindRegs regs;
    for (int r = 0; r < kDwarfRegs; ++r) regs.r[r] = b.gregs[kGregOfDwarf[r]];
    const SampledMemory mem = SampledMemory::copied(b);
    const RuntimeOracle oracle;
    recover_seed(g_unwind, oracle, mem, regs, target.stackLow, target.stackHigh, g_recovery);
    g_recovery_ran = true;
    // an interrupted IP in code the map could not tell and that is not managed: a stub, its page a stub page
    const std::uint64_t top = regs.r[kDwarfRip];
    if (g_handler_recovery.needsRuntime && g_handler_recovery.unknownIp == top && g_recovery.stepCount &&
        !(g_recovery.ok && g_recovery.stepCount == 1))
        g_code_map.add_stub_page(top);
    if (g_recovery.ok) write_recovered_seed(b, g_recovery);
    g_recover_cpu_ns = thread_cpu_ns() - cpu0;
    int parked = kParked;
    if (b.park.compare_exchange_strong(parked, g_recovery.ok ? kSeedReady : kNoSeed, std::memory_order_acq_rel))
        ::syscall(SYS_futex, reinterpret_cast<int*>(&b.park), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

Json walk_json(const Walk& walk, HRESULT hr) {
    Json w = Json::object();
    w.set("hr", Json(static_cast<std::uint32_t>(hr)));
    w.set("frameCount", Json(static_cast<std::uint64_t>(walk.delivered())));
    Json frames = Json::array();
    for (const FrameSlot& f : walk.frames()) {
        Json fr = Json::object();
        fr.set("funcId", Json(static_cast<std::uint64_t>(f.funcId)));
        fr.set("ip", Json(static_cast<std::uint64_t>(f.ip)));
        fr.set("sp", f.hasContext && f.contextSize >= kContextRipOffset + 8 ? Json(f.rsp) : Json());
        fr.set("inCall", Json(f.inCall));
        frames.push(std::move(fr));
    }
    w.set("frames", std::move(frames));
    return w;
}

// The record's out.recovered: what the recovery found and what the walk seeded with it said.
Json recovered_json(const SampleBuffer& b) {
    Json r = Json::object();
    const int park = b.park.load(std::memory_order_acquire);
    const char* status = park == kSeedReady ? "walked" : park == kNoSeed ? "no-managed-frame"
                         : park == kParkAbandoned ? "park-timeout" : "not-parked";
    r.set("status", status);
    r.set("path", b.fastPath ? "handler" : "profiler-thread");
    const bool ran = b.fastPath || g_recovery_ran;
    const RecoveryResult& g_rec = b.fastPath ? g_handler_recovery : g_recovery;
    r.set("reason", ran && !g_rec.ok ? Json(g_rec.reason) : Json());
    r.set("unknownIp", !b.fastPath && g_handler_recovery.needsRuntime ? Json(g_handler_recovery.unknownIp) : Json());
    // what the walk seeded at the instant said of an interrupted IP the map could not tell (recover_in_handler)
    r.set("topAskedWalk", b.topAsked == kTopManaged ? Json("managed")
                          : b.topAsked == kTopNotManaged ? Json("not-managed") : Json());
    Json steps = Json::array();
    for (std::size_t i = 0; ran && i < g_rec.stepCount; ++i) {
        Json st = Json::object();
        st.set("ip", Json(g_rec.steps[i].ip)).set("sp", Json(g_rec.steps[i].sp));
        st.set("rule", step_rule_name(g_rec.steps[i].rule));
        steps.push(std::move(st));
    }
    r.set("steps", std::move(steps));
    if (ran && g_rec.ok) {
        Json seed = Json::object();
        for (int k = 0; k < kDwarfRegs; ++k) seed.set(kDwarfNames[k], Json(g_rec.seed.r[k]));
        r.set("seed", std::move(seed));
        r.set("functionId", Json(g_rec.functionId));
    } else {
        r.set("seed", Json());
        r.set("functionId", Json());
    }
    const Walk* w = b.recWalk.load(std::memory_order_acquire);
    r.set("walk", park == kSeedReady && w ? walk_json(*w, b.recHr) : Json());
    r.set("recoverCpuNs", Json(!b.fastPath && g_recovery_ran ? g_recover_cpu_ns : 0));
    r.set("codeMapMethods", Json(static_cast<std::uint64_t>(g_code_map.methods())));
    r.set("unwindModules", Json(static_cast<std::uint64_t>(g_unwind.modules())));
    return r;
}

// One `capture_seed` call record per sample of a job given args.seed (docs/seeding.md): the seed mode, the
// handler's whole time, and with --seed recovered what the recovery found and the walk seeded with it
// (conformance/adapters/capture.py joins it to the sample by args.job and args.sample).
void record_seed(const SamplingJob& job, std::int64_t index) {
    const SampleBuffer& b = g_sample;
    Json args = Json::object();
    args.set("sample", Json(index)).set("job", Json(static_cast<std::uint64_t>(job.job)));
    args.set("seed", b.recover ? "recovered" : "naive").set("naiveWalk", Json(b.naiveWalk));
    Json out = Json::object();
    if (b.recover) out.set("recovered", recovered_json(b));
    if (b.naiveWalk) out.set("naiveHr", Json(static_cast<std::uint32_t>(b.hr)));  // the naive walk's HRESULT
    Json timing = Json::object();
    timing.set("copyNs", Json(b.tCopied - b.tEnter)).set("walkNs", Json(b.tWalked - b.tCopied));
    timing.set("handlerNs", Json(b.tLeft - b.tEnter));  // the whole handler after its claim
    if (b.recover) {
        timing.set("parkNs", Json(b.tResumed - b.tParked));
        timing.set("recoveredWalkNs", Json(b.tRecWalked - b.tResumed));
    }
    out.set("timing", std::move(timing));
    state().call("capture_seed", job.planned->id.c_str(), std::move(args), std::move(out), S_OK);
}

// The profiler thread's CPU time building sample records and writing them (capture_done out.recordCpuNs,
// out.writeCpuNs).
std::uint64_t g_record_cpu_ns = 0, g_write_cpu_ns = 0;
std::int64_t g_samples_recorded = 0;  // in this process, every job (the clock of g_unchanged)

// PROFHARNESS_FAULT=sample:<N>:<KILL|SEGV|ABRT> (tests/robustness): the process dies half way through writing
// sample N's record frame. -1: no fault.
std::int64_t g_fault_sample = -1;
int g_fault_signal = 0;

// Writes the first half of the frame of `parts` to the sidecar (bypassing the writer), then dies.
[[noreturn]] void die_in_frame(std::uint16_t type, const FrameWriter::Part* parts, std::size_t count) {
    std::vector<unsigned char> frame(kFrameHeaderSize);
    std::uint32_t crc = 0;
    for (std::size_t i = 0; i < count; ++i) {
        crc = frames_crc32(parts[i].data, parts[i].size, crc);
        const auto* p = static_cast<const unsigned char*>(parts[i].data);
        frame.insert(frame.end(), p, p + parts[i].size);
    }
    const std::uint32_t n = static_cast<std::uint32_t>(frame.size() - kFrameHeaderSize);
    std::memcpy(frame.data(), &n, 4);
    std::memcpy(frame.data() + 4, &crc, 4);
    std::memcpy(frame.data() + 8, &type, 2);
    const std::string path = std::string(std::getenv("PROFHARNESS_TRACE")) + kFramesSuffix;
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0 && ::write(fd, frame.data(), frame.size() / 2) < 0) ::raise(g_fault_signal);
    ::raise(g_fault_signal);
    ::_exit(99);
}

// Records one sample as one kFrameSampleRecord frame; returns whether its IP was managed code
// (GetFunctionFromIP gave a FunctionID). No JSON, no allocation once its buffers have grown.
bool record_sample(const SamplingJob& job, std::int64_t index, Walk& walk, std::vector<Mapping>& maps) {
    const std::uint64_t cpu_start = thread_cpu_ns();
    const SampleBuffer& b = g_sample;
    // the profiler thread's, never destroyed
    static std::vector<SampleFrame>& frames = *new std::vector<SampleFrame>();
    static std::vector<SampleWindow>& windows = *new std::vector<SampleWindow>();
    SampleHead head{};
    head.headSize = sizeof(SampleHead);
    head.job = job.job;
    head.sample = index;
    head.walk = walk.number();
    head.handlerOsTid = b.handlerOsTid;
    head.phase = b.phase;
    std::memcpy(head.gregs, b.gregs, sizeof head.gregs);
    head.fsBase = b.fsOk ? b.fsBase : 0;
    head.flags = (b.fsOk ? kHeadFsOk : 0) | (b.stackInRange ? kHeadInRange : 0);
    head.sp = b.sp;
    head.capturedEnd = b.sp + b.stackCopied;
    head.codeAddress = b.codeAddr;
    head.copyNs = b.tCopied - b.tEnter;
    head.walkNs = b.tWalked - b.tCopied;
    head.walkHr = static_cast<std::uint32_t>(b.hr);
    head.frameCount = static_cast<std::uint32_t>(walk.delivered());
    frames.clear();
    for (const FrameSlot& f : walk.frames()) {
        const bool sp_known = f.hasContext && f.contextSize >= kContextRipOffset + 8;
        frames.push_back(SampleFrame{static_cast<std::uint64_t>(f.funcId), static_cast<std::uint64_t>(f.ip),
                                     sp_known ? f.rsp : 0,
                                     (sp_known ? kFrameSpKnown : 0) | (f.inCall ? kFrameInCall : 0), 0});
    }
    head.framesListed = static_cast<std::uint32_t>(frames.size());
    const WhereKind kind = where_of(b.gregs[REG_RIP], maps, head);
    head.kind = static_cast<std::uint32_t>(kind);
    const std::size_t seed_n = sizeof(AMD64Context);
    const std::size_t fixed = sizeof head + frames.size() * sizeof(SampleFrame) + b.stackCopied + b.redZoneCopied +
                              b.codeLen + seed_n;
    const std::size_t room = g_frames.max_payload() > fixed ? (g_frames.max_payload() - fixed) / sizeof(SampleWindow) : 0;
    const std::uint64_t cpu_candidates = thread_cpu_ns();
    candidate_code(b, maps, job.maxCandidates, windows, room, g_samples_recorded++);
    const std::uint64_t cpu_candidates_end = thread_cpu_ns();
    head.candidatesCpuNs = cpu_candidates_end - cpu_candidates;
    head.stackLen = static_cast<std::uint32_t>(b.stackCopied);
    head.redZoneLen = static_cast<std::uint32_t>(b.redZoneCopied);
    head.codeLen = static_cast<std::uint32_t>(b.codeLen);
    head.windows = static_cast<std::uint32_t>(windows.size());
    head.seedLen = static_cast<std::uint32_t>(seed_n);
    const std::uint64_t cpu_write = thread_cpu_ns();  // one clock read (a system call) ends the build, starts the write
    head.recordCpuNs = cpu_write - cpu_start;  // building the record, before its write
    const FrameWriter::Part parts[] = {{&head, sizeof head},
                                       {frames.data(), frames.size() * sizeof(SampleFrame)},
                                       {windows.data(), windows.size() * sizeof(SampleWindow)},
                                       {b.stack, b.stackCopied},
                                       {b.redZone, b.redZoneCopied},
                                       {b.code, b.codeLen},
                                       {b.seed, seed_n}};
    if (index == g_fault_sample) die_in_frame(kFrameSampleRecord, parts, sizeof parts / sizeof parts[0]);
    g_frames.append(kFrameSampleRecord, parts, sizeof parts / sizeof parts[0]);
    g_record_cpu_ns += cpu_write - cpu_start;
    g_write_cpu_ns += thread_cpu_ns() - cpu_write;
    return kind == WhereKind::kManaged;
}

void sampling_thread_main(std::shared_ptr<SamplingJob> job) {
    ProbeState& s = state();
    const char* exp = job->planned->id.c_str();
    record_profiler_thread_created(exp);
    const std::uint64_t cpu_begin = thread_cpu_ns();
    const std::uint64_t maps_reads_before = g_maps_reads;
    std::vector<Mapping> maps;
    refresh_maps(maps);
    std::int64_t taken = 0, timed_out = 0, managed_ok = 0, unmanaged_ok = 0;
    auto enough = [&] { return managed_ok >= job->minManagedOk && unmanaged_ok >= job->minUnmanagedOk; };
    const std::uint64_t refused_before = g_frames.refused();
    const std::uint64_t pages_before = g_code_pages_read, changed_before = g_code_pages_changed;
    const std::uint64_t record_before = g_record_cpu_ns, write_before = g_write_cpu_ns;
    {
        // The job's one record: what every sample of it shares; each sample is a frame of the sidecar.
        static std::atomic<std::uint32_t> jobs{0};
        job->job = ++jobs;
        Json args = Json::object();
        Json target = Json::object();
        target.set("name", job->target.name).set("threadId", Json(static_cast<std::uint64_t>(job->target.threadId)));
        target.set("osTid", Json(static_cast<std::int64_t>(job->target.osTid)));
        args.set("target", std::move(target)).set("signal", "SIGPROF");
        args.set("seed", job->recover ? "recovered" : "naive").set("naiveWalk", Json(job->naiveWalk));
        args.set("infoFlags", Json(static_cast<std::uint64_t>(job->infoFlags)));
        Json out = Json::object();
        out.set("job", Json(static_cast<std::uint64_t>(job->job))).set("framesFile", g_frames_name);
        out.set("stackLow", job->target.stackHigh ? Json(job->target.stackLow) : Json());
        out.set("stackHigh", job->target.stackHigh ? Json(job->target.stackHigh) : Json());
        out.set("candidateCodeTaken", "first-needed");
        s.call("capture_sampling", exp, std::move(args), std::move(out), S_OK);
    }
    // One wake-up per sample: at each deadline the thread records the sample it sent at the one before
    // (its handler long done: no wait, and the handler's sem_post finds no waiter to wake), then sends the
    // next. The buffers are one, so a sample is recorded before the next is sent; whether to send it is
    // decided after the samples before it are counted, as before.
    Walk* pending = nullptr;  // the walk of the sample sent last, not yet recorded
    std::uint64_t give_up = 0;
    int rc = 0;
    auto finish = [&](std::int64_t index) {  // waits for sample `index`'s handler, records it; false: stop
        Walk* walk = pending;
        pending = nullptr;
        if (rc == 0) {
            const timespec until{static_cast<time_t>(give_up / 1000000000ull), static_cast<long>(give_up % 1000000000ull)};
            while (g_sample.state.load(std::memory_order_acquire) != kDone) {
                if (sem_clockwait(&g_sample_done, CLOCK_MONOTONIC, &until) != 0 && errno == ETIMEDOUT) break;
            }
        }
        if (g_sample.state.load(std::memory_order_acquire) != kDone) {
            int requested = kRequested;
            const bool never_started = g_sample.state.compare_exchange_strong(requested, kAbandoned);
            ++timed_out;
            s.probe_error("capture_sample: sample " + std::to_string(index) + (rc ? ": pthread_kill failed" : "") +
                              (never_started ? ": the handler never ran" : ": the handler did not finish") +
                              " within " + std::to_string(job->timeoutMs) + " ms; sampling stops",
                          job->planned->id);
            if (never_started) {
                delete g_sample.recWalk.exchange(nullptr);
                delete g_sample.topWalk.exchange(nullptr);
                delete walk;
                g_sample.walk.store(nullptr);
                g_sample.state.store(kIdle);
            }
            return false;
        }
        while (sem_trywait(&g_sample_done) == 0) {
        }  // this sample's post (when nobody waited for it)
        const bool managed = record_sample(*job, index, *walk, maps);
        if (job->seedRecord) record_seed(*job, index);
        if (job->recover) learn_from_walks(*walk, g_sample.recWalk.load(std::memory_order_acquire));
        if ((job->recover && !job->naiveWalk ? g_sample.recHr : g_sample.hr) == S_OK) ++(managed ? managed_ok : unmanaged_ok);
        ++taken;
        delete walk;
        g_sample.walk.store(nullptr);
        delete g_sample.recWalk.exchange(nullptr);
        delete g_sample.topWalk.exchange(nullptr);
        g_sample.state.store(kIdle, std::memory_order_release);
        return true;
    };
    std::uint64_t deadline_ns = now_ns();
    for (std::int64_t i = 0;; ++i) {
        if (pending) {
            if (i < job->maxSamples && job->intervalUs > 0) {  // no wait when no sample can follow
                deadline_ns += static_cast<std::uint64_t>(job->intervalUs) * 1000ull;
                sleep_until_ns(deadline_ns);
            }
            if (!finish(i - 1)) break;
        }
        if (!(i < job->maxSamples && (i < job->samples || !enough()))) break;
        WalkRequest req;
        req.thread = 0;
        req.infoFlags = job->infoFlags;
        req.resolve = false;
        req.seed = g_sample.seed;
        req.contextSize = static_cast<ULONG32>(kContextBufferSize);
        pending = new Walk(req);  // freed after recording; leaked if its handler never finishes
        g_sample.walk.store(pending, std::memory_order_release);
        g_sample.recover = job->recover;
        g_sample.naiveWalk = job->naiveWalk || !job->recover;
        g_sample.parkTimeoutNs = job->parkTimeoutMs * 1000000;
        g_sample.park.store(kNotParked, std::memory_order_release);
        g_sample.recHr = S_OK;
        g_sample.tParked = g_sample.tResumed = g_sample.tRecWalked = 0;
        g_sample.fastPath = false;
        g_sample.topAsked = kTopNotAsked;
        if (job->recover) {
            g_unwind.refresh();  // modules loaded since the last sample (a no-op when none were)
            prepare_code_map(maps, i == 0);
            WalkRequest rreq = req;
            rreq.seed = g_sample.recSeed;
            g_sample.recWalk.store(new Walk(rreq), std::memory_order_release);  // freed with `pending`
            WalkRequest treq = req;
            treq.seed = g_sample.recSeed;
            g_sample.topWalk.store(new Walk(treq), std::memory_order_release);  // likewise
            while (sem_trywait(&g_sample_parked) == 0) {
            }
        }
        g_sample.targetOsTid = job->target.osTid;
        g_sample.stackLow = job->target.stackLow;
        g_sample.stackHigh = job->target.stackHigh;
        g_sample.handlerOsTid = 0;
        g_sample.hr = S_OK;
        while (sem_trywait(&g_sample_done) == 0) {
        }  // a post left by a handler that finished after its sample was abandoned
        g_sample.state.store(kRequested, std::memory_order_release);
        rc = pthread_kill(job->target.pthread, kSampleSignal);
        give_up = now_ns() + static_cast<std::uint64_t>(job->timeoutMs) * 1000000ull;
        // --seed recovered: serve a park at once (the handler waits for it), then sleep as before
        if (rc == 0 && job->recover) serve_park(g_sample, job->target, give_up);
    }
    if (const std::uint64_t refused = g_frames.refused() - refused_before)
        s.probe_error("capture_sample: " + std::to_string(refused) + " frames could not be written to the sidecar " +
                          g_frames_name + " (those samples or code pages are missing from it)",
                      job->planned->id);
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
        out.set("profilerCpuNs", Json(thread_cpu_ns() - cpu_begin));  // the profiler thread's CPU time
        out.set("mapsReads", Json(g_maps_reads - maps_reads_before));  // /proc/self/maps read while sampling
        out.set("codePagesRead", Json(g_code_pages_read - pages_before));  // code pages written while sampling
        out.set("codePagesChanged", Json(g_code_pages_changed - changed_before));  // of them, written again
        out.set("recordCpuNs", Json(g_record_cpu_ns - record_before));  // building the samples' records
        out.set("writeCpuNs", Json(g_write_cpu_ns - write_before));     // writing them (one frame each)
        out.set("job", Json(static_cast<std::uint64_t>(job->job))).set("framesFile", g_frames_name);
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
    std::call_once(g_sample_done_once, [] {
        sem_init(&g_sample_done, 0, 0);
        sem_init(&g_sample_parked, 0, 0);
    });
    if (const int err = g_sample_handler.install()) {
        s.probe_error("capture_sample: sigaction(SIGPROF) failed: " + std::string(std::strerror(err)),
                      ctx.planned.id);
        return;
    }
    if (g_sample.state.load(std::memory_order_acquire) != kIdle) {
        s.probe_error("capture_sample: an earlier sample never finished; not sampling again", ctx.planned.id);
        return;
    }
    std::string frames_error;
    parse_fault(std::getenv("PROFHARNESS_FAULT"), "sample", g_fault_sample, g_fault_signal);
    if (!open_capture_frames(frames_error)) {
        s.probe_error("capture_sample: " + frames_error, ctx.planned.id);
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
    const std::string seed_mode = ctx.string_arg("seed", "naive");
    if (seed_mode != "naive" && seed_mode != "recovered") {
        s.probe_error("capture_sample: args.seed \"" + seed_mode + "\": must be \"naive\" or \"recovered\"",
                      ctx.planned.id);
        return;
    }
    job->recover = seed_mode == "recovered";
    job->seedRecord = ctx.args().is_object() && ctx.args().get("seed") != nullptr;
    job->naiveWalk = ctx.bool_arg("naiveWalk", true);
    job->parkTimeoutMs = ctx.int_arg("parkTimeoutMs", 200);
    if (job->recover) {
        g_unwind.refresh();  // the CFI tables, prepared before the first signal
        g_learn_jitted.store(true, std::memory_order_release);
    }
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
     "args.minUnmanagedOk (0) other code, each with a live walk that returned S_OK. One capture_sampling call "
     "record, one sidecar frame per sample, then capture_maps, capture_jit_map (args.jitMap true) and capture_done (taken, "
     "managedOk, unmanagedOk, enough). args: timeoutMs (2000, per sample), maxCandidates (256, code windows "
     "around stack words pointing into executable memory), totalTimeoutMs. args.seed \"naive\" or \"recovered\" "
     "(docs/seeding.md: the handler also walks from the first managed frame, recovered in the handler or, for "
     "code its map cannot tell, by the profiler thread while it parks up to args.parkTimeoutMs, 200) writes a "
     "capture_seed record per sample; args.naiveWalk (true) false skips the naive walk."},
};

}  // namespace

void capture_set_phase_cell(const volatile std::int32_t* cell) {
    g_phase_cell.store(cell, std::memory_order_release);
}

void capture_note_jitted_function(FunctionID fid) {
    if (!g_learn_jitted.load(std::memory_order_acquire)) return;  // no --seed recovered sampler
    std::lock_guard<std::mutex> lock(g_jitted_mutex);
    if (g_jitted_pending.size() < (1u << 20)) g_jitted_pending.push_back(fid);
}

void capture_note_cached_function(FunctionID fid) {
    {
        std::lock_guard<std::mutex> lock(g_cached_mutex);
        g_cached_functions.push_back(fid);
    }
    capture_note_jitted_function(fid);  // ReadyToRun code the runtime chose: the code map learns it too
}

const ExperimentTable kCaptureExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness

// A scenario P/Invokes this with the address of a pinned int32 it writes its phase number into; the sampling
// handler reads it at each sample ("phase" in the capture_sample record). NULL stops reading.
PROFHARNESS_EXPORT void profharness_capture_phase_cell(const std::int32_t* cell) {
    profharness::capture_set_phase_cell(cell);
}

// profharness_capture_spin (the scenario's native phase) is common/spin.cpp, shared with the proxy.
