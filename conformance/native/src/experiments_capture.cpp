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
// points into executable memory (after the instant: code rarely changes, the record says so), classifies
// the IP (GetFunctionFromIP, else the mapping that holds it) and writes one `call` record `capture_sample`
// per sample. After the last sample it writes `capture_maps` (/proc/self/maps) and `capture_jit_map`
// (EnumJITedFunctions2; every native code version through GetNativeCodeStartAddresses + GetCodeInfo4, else
// GetCodeInfo2; names from metadata).
//
// A sample's bytes (the stack copy, the red zone, the code around the IP, the candidate code windows, the
// seed CONTEXT) do not go into the JSON record: the profiler thread appends them raw, as one frame (type
// kFrameSample, one write) to a frames v1 sidecar beside the trace (profharness/frames.h; the trace's path +
// kFramesSuffix, named in the record's out.framesFile), before it writes the record, which refers to each
// part as {"offset", "at", "length"}: the frame's file offset, the part's position in the frame's payload
// and its length (null when the frame could not be written). The candidate code part is a run of windows,
// each u64 address, u32 length, the bytes (little-endian); its reference adds "count". Only the profiler
// thread writes frames; the handler only fills its preallocated buffers, as before. The JIT map's prologue
// bytes (once per run) stay base64 (RFC 4648) strings.
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

// The capture sidecar (conformance/adapters/capture.py reads it): its name is the trace's + this suffix; the
// frame types of a sample's bytes.
constexpr const char* kFramesSuffix = ".capture.frames";
constexpr std::uint16_t kFrameSample = 1;
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

// The record's reference to `n` bytes at `pos` in the payload of the sample's frame at file offset `frame`
// ({"offset", "at", "length"}); null when the frame was not written (frame < 0).
Json frame_ref(std::int64_t frame, std::size_t pos, std::size_t n) {
    if (frame < 0) return Json();
    Json r = Json::object();
    r.set("offset", Json(static_cast<std::uint64_t>(frame))).set("at", Json(static_cast<std::uint64_t>(pos)));
    r.set("length", Json(static_cast<std::uint64_t>(n)));
    return r;
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
    std::atomic<Walk*> recWalk{nullptr};
    HRESULT recHr = S_OK;
    std::uint64_t tParked = 0, tResumed = 0, tRecWalked = 0, tLeft = 0;
    alignas(64) BYTE recSeed[kContextBufferSize];
};

// The states of SampleBuffer::park.
enum ParkState : int { kNotParked = 0, kParked = 1, kSeedReady = 2, kNoSeed = 3, kParkAbandoned = 4 };

SampleBuffer g_sample;
// Posted by the handler when it is done (sem_post is async-signal-safe): the profiler thread sleeps on it
// instead of polling (each poll costs a wake-up, many of them when the machine is loaded).
sem_t g_sample_done;
// Posted by the handler when it parks for the recovered seed.
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

// The sampled thread's own memory, read by its handler: the stack directly (it is this thread's, below the
// handler's frame), anything else through process_vm_readv (never a fault).
struct HandlerMemory final : WordReader {
    const SampleBuffer& b;
    explicit HandlerMemory(const SampleBuffer& buf) : b(buf) {}
    bool read(std::uint64_t addr, std::uint64_t& out) const override {
        if (addr >= b.sp && addr >= b.stackLow && addr + 8 <= b.stackHigh) {
            std::memcpy(&out, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(addr)), 8);
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
void recover_in_handler(SampleBuffer& b) {
    UnwindRegs regs;
    for (int r = 0; r < kDwarfRegs; ++r) regs.r[r] = b.gregs[kGregOfDwarf[r]];
    const HandlerMemory mem(b);
    recover_seed(g_unwind, g_code_map, mem, regs, b.stackLow, b.stackHigh, g_handler_recovery);
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
    bool recover = false, naiveWalk = true;  // args.seed "recovered"; args.naiveWalk
    std::int64_t parkTimeoutMs = 200;
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
        refresh_maps(maps);  // new code regions appear as the runtime runs
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

void put_le(std::vector<unsigned char>& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// Reads windows [addr, addr + len) of this process (len <= kCodeWindow) into out (kCodeWindow bytes each);
// got[i] is what read_own(addr, ..., len) would give for window i (the bytes up to its first unreadable
// page). The cost of process_vm_readv is in pinning pages, so each distinct page the windows touch is read
// once, whole (one iovec per page: a transfer stops only between iovec elements, so a short count names the
// page that failed), in as few calls as the failures allow; the windows are then cut from those pages.
void read_windows(const std::vector<std::pair<std::uint64_t, std::size_t>>& windows, unsigned char* out,
                  std::size_t* got) {
    // the profiler thread's, never destroyed (a thread left running at exit() never sees them freed)
    static std::vector<std::uint64_t>& pages = *new std::vector<std::uint64_t>();
    static std::vector<unsigned char>& data = *new std::vector<unsigned char>();  // 4096 bytes per page
    static std::vector<char>& readable = *new std::vector<char>();
    pages.clear();
    for (const auto& [addr, len] : windows)
        if (len) {
            for (std::uint64_t p = addr & ~std::uint64_t{4095}; p < addr + len; p += 4096) pages.push_back(p);
        }
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    data.resize(pages.size() * 4096);
    readable.assign(pages.size(), 0);
    constexpr std::size_t kBatch = 512;  // <= IOV_MAX
    struct iovec local[kBatch], remote[kBatch];
    std::size_t c = 0;
    while (c < pages.size()) {
        const std::size_t n = std::min(kBatch, pages.size() - c);
        for (std::size_t i = 0; i < n; ++i) {
            local[i] = {data.data() + (c + i) * 4096, 4096};
            remote[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(pages[c + i])), 4096};
        }
        const ssize_t r = ::syscall(SYS_process_vm_readv, ::getpid(), local, static_cast<unsigned long>(n), remote,
                                    static_cast<unsigned long>(n), 0UL);
        const std::size_t whole = r > 0 ? static_cast<std::size_t>(r) / 4096 : 0;
        for (std::size_t i = 0; i < whole; ++i) readable[c + i] = 1;
        c += whole < n ? whole + 1 : n;  // page c + whole failed (unreadable); go on after it
    }
    for (std::size_t w = 0; w < windows.size(); ++w) {
        const auto [addr, len] = windows[w];
        std::size_t done = 0;
        while (done < len) {  // page by page, as read_own reads: stop at the first unreadable page
            const std::uint64_t a = addr + done;
            const std::uint64_t page = a & ~std::uint64_t{4095};
            const std::size_t k = static_cast<std::size_t>(std::lower_bound(pages.begin(), pages.end(), page) - pages.begin());
            if (!readable[k]) break;
            std::size_t chunk = std::min<std::size_t>(len - done, static_cast<std::size_t>(page + 4096 - a));
            std::memcpy(out + w * kCodeWindow + done, data.data() + k * 4096 + (a - page), chunk);
            done += chunk;
        }
        got[w] = done;
    }
}

// Code around stack words that point into executable mappings (candidate return addresses), packed into
// `packed` as windows (u64 address, u32 length, the bytes; little-endian), at most `cap` bytes; returns the
// number of windows.
std::uint64_t candidate_code(const SampleBuffer& b, std::vector<Mapping>& maps, std::int64_t max_candidates,
                             std::vector<unsigned char>& packed, std::size_t cap) {
    using Wanted = std::vector<std::pair<std::uint64_t, std::size_t>>;
    static Wanted& wanted = *new Wanted();  // the profiler thread's, never destroyed
    static std::vector<unsigned char>& bytes = *new std::vector<unsigned char>();
    static std::vector<std::size_t>& got = *new std::vector<std::size_t>();
    packed.clear();
    wanted.clear();
    std::uint64_t count = 0;
    std::set<std::uint64_t> windows;
    bool refreshed = false;
    // The maps are read again (once per sample, as soon as a word needs it) when a word lies in no mapping
    // read earlier but is mapped now (mincore: new mappings, e.g. .NET 8's double-mapped code), or lies in
    // a reservation without access then ("---p") that is readable now (process_vm_readv of one byte: memory
    // the runtime committed since, executable on .NET Core 3.1's code heaps; a guard page stays unreadable).
    // A page found unchanged costs no second system call in this sample; x86-64 user space ends below 2^47
    // (the kernel maps higher only for an mmap hint above it, which the runtime does not give:
    // Documentation/arch/x86/x86_64/5level-paging.rst), so higher words need none.
    std::uint64_t unchanged[64];
    std::size_t n_unchanged = 0;
    auto changed_since = [&](std::uint64_t word, bool reserved) {
        if (word >= kUserSpaceEnd) return false;
        const std::uint64_t page = word & ~std::uint64_t{4095};
        for (std::size_t i = 0; i < n_unchanged; ++i)
            if (unchanged[i] == page) return false;
        unsigned char byte;
        if (reserved ? read_own(word, &byte, 1) == 1 : mapped_now(word)) return true;
        if (n_unchanged < 64) unchanged[n_unchanged++] = page;
        return false;
    };
    const std::size_t half = kCodeWindow / 2;
    for (std::size_t off = 0; off + 8 <= b.stackCopied; off += 8) {
        std::uint64_t word;
        std::memcpy(&word, b.stack + off, 8);
        if (word < 4096) continue;
        const Mapping* m = mapping_of(maps, word);
        if (!refreshed && (!m || m->none) && changed_since(word, m != nullptr)) {
            refresh_maps(maps);  // code the runtime mapped or committed since the last read
            refreshed = true;
            m = mapping_of(maps, word);
        }
        if (!m || !m->exec) continue;
        const std::uint64_t lo = std::max<std::uint64_t>(m->start, word >= half ? word - half : 0);
        if (windows.count(lo)) continue;
        if (static_cast<std::int64_t>(windows.size()) >= max_candidates) break;
        windows.insert(lo);
        const std::uint64_t hi = std::min<std::uint64_t>(m->end, word + half);
        wanted.emplace_back(lo, static_cast<std::size_t>(hi - lo));
    }
    bytes.resize(wanted.size() * kCodeWindow);
    got.resize(wanted.size());
    read_windows(wanted, bytes.data(), got.data());
    for (std::size_t w = 0; w < wanted.size(); ++w) {
        if (!got[w]) continue;
        if (packed.size() + 12 + got[w] > cap) break;
        put_le(packed, wanted[w].first, 8);
        put_le(packed, got[w], 4);
        const unsigned char* p = bytes.data() + w * kCodeWindow;
        packed.insert(packed.end(), p, p + got[w]);
        ++count;
    }
    return count;
}

// ---------------------------------------------------------------------------------------------------
// The recovered seed: the profiler thread's side (seed_recovery.h; docs/seeding.md)

// The sampled thread's memory as the recovery reads it: the handler's stack copy where it holds the word,
// else process_vm_readv (an unreadable address is an answer, never a fault).
struct SampleMemory final : WordReader {
    const SampleBuffer& b;
    explicit SampleMemory(const SampleBuffer& buf) : b(buf) {}
    bool read(std::uint64_t addr, std::uint64_t& out) const override {
        if (addr >= b.sp && addr + 8 <= b.sp + b.stackCopied) {
            std::memcpy(&out, b.stack + (addr - b.sp), 8);
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

// After a sample: the methods (and code versions) the runtime's walks reported that the map lacks.
void learn_from_walks(const Walk& naive, const Walk* recovered) {
    for (const Walk* w : {&naive, recovered}) {
        if (!w) continue;
        for (const FrameSlot& f : w->frames())
            if (f.funcId && g_code_map.function_at(f.ip ? f.ip - 1 : 0) != f.funcId) learn_function(f.funcId);
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
        ProbeState& s = state();
        if (auto* info4 = s.info_as<ICorProfilerInfo4>(4)) {
            ICorProfilerFunctionEnum* raw = nullptr;
            auto* fe = failed(info4->EnumJITedFunctions2(&raw)) ? nullptr : reinterpret_cast<CaptureFunctionEnum*>(raw);
            if (fe) {
                CapturePrfFunction batch[256];
                ULONG got = 0;
                while (fe->Next(256, batch, &got) == S_OK || got > 0) {
                    for (ULONG i = 0; i < got; ++i) learn_function(batch[i].functionId);
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
        for (FunctionID fid : cached) learn_function(fid);
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
    const SampleMemory mem(b);
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

// Records one sample; returns whether its IP was managed code (GetFunctionFromIP gave a FunctionID).
bool record_sample(const SamplingJob& job, std::int64_t index, Walk& walk, std::vector<Mapping>& maps) {
    const std::uint64_t cpu_start = thread_cpu_ns();
    ProbeState& s = state();
    const SampleBuffer& b = g_sample;
    Json args = Json::object();
    Json target = Json::object();
    target.set("name", job.target.name).set("threadId", Json(static_cast<std::uint64_t>(job.target.threadId)));
    target.set("osTid", Json(static_cast<std::int64_t>(job.target.osTid)));
    args.set("sample", Json(index)).set("target", std::move(target)).set("signal", "SIGPROF");
    args.set("seed", b.recover ? "recovered" : "naive").set("naiveWalk", Json(b.naiveWalk));
    args.set("infoFlags", Json(static_cast<std::uint64_t>(job.infoFlags)));
    args.set("walk", Json(walk.number()));

    Json out = Json::object();
    out.set("handlerOsTid", Json(static_cast<std::int64_t>(b.handlerOsTid)));
    out.set("phase", b.phase >= 0 ? Json(b.phase) : Json());
    Json regs = Json::object();
    for (int i = 0; i < NGREG; ++i) regs.set(kGregNames[i], Json(b.gregs[i]));
    regs.set("fs_base", b.fsOk ? Json(b.fsBase) : Json());
    out.set("registers", std::move(regs));
    Json stack = Json::object();
    stack.set("sp", Json(b.sp)).set("inRange", Json(b.stackInRange));
    stack.set("stackLow", job.target.stackHigh ? Json(job.target.stackLow) : Json());
    stack.set("stackHigh", job.target.stackHigh ? Json(job.target.stackHigh) : Json());
    stack.set("capturedEnd", Json(b.sp + b.stackCopied));
    // The sample's bytes: one frame, one write: stack, red zone, code around the IP, candidate code, seed.
    // the profiler thread's, never destroyed
    static std::vector<unsigned char>& packed = *new std::vector<unsigned char>();
    const std::size_t stack_n = static_cast<std::size_t>(b.stackCopied), seed_n = sizeof(AMD64Context);
    const std::size_t fixed = stack_n + b.redZoneCopied + b.codeLen + seed_n;
    const std::uint64_t cpu_candidates = thread_cpu_ns();
    const std::uint64_t windows = candidate_code(b, maps, job.maxCandidates, packed, g_frames.max_payload() - fixed);
    const std::uint64_t cpu_candidates_end = thread_cpu_ns();
    const FrameWriter::Part parts[] = {{b.stack, stack_n}, {b.redZone, b.redZoneCopied}, {b.code, b.codeLen},
                                       {packed.data(), packed.size()}, {b.seed, seed_n}};
    const std::int64_t frame = g_frames.append(kFrameSample, parts, sizeof parts / sizeof parts[0]);
    std::size_t pos = 0;
    auto next_ref = [&](std::size_t n) {
        Json r = frame_ref(frame, pos, n);
        pos += n;
        return r;
    };
    stack.set("bytes", next_ref(stack_n));
    stack.set("redZone", next_ref(b.redZoneCopied));
    out.set("stack", std::move(stack));
    Json code = Json::object();
    code.set("address", Json(b.codeAddr)).set("bytes", next_ref(b.codeLen));
    out.set("code", std::move(code));
    Json candidates = next_ref(packed.size());
    if (candidates.is_object()) candidates.set("count", Json(windows));
    out.set("candidateCode", std::move(candidates));
    out.set("candidateCodeTaken", "after-handler");
    out.set("seedContext", next_ref(seed_n));
    out.set("framesFile", g_frames_name);
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
        frames.push(std::move(fr));
    }
    w.set("frames", std::move(frames));
    out.set("walk", std::move(w));
    if (b.recover) out.set("recovered", recovered_json(b));
    Json where = where_of(b.gregs[REG_RIP], maps);
    const Json* kind = where.get("kind");
    const bool managed = kind && kind->is_string() && kind->as_string() == "managed";
    out.set("where", std::move(where));
    Json timing = Json::object();
    timing.set("copyNs", Json(b.tCopied - b.tEnter)).set("walkNs", Json(b.tWalked - b.tCopied));
    timing.set("handlerNs", Json(b.tLeft - b.tEnter));  // the whole handler after its claim
    if (b.recover) {
        timing.set("parkNs", Json(b.tResumed - b.tParked));
        timing.set("recoveredWalkNs", Json(b.tRecWalked - b.tResumed));
    }
    // the profiler thread's CPU time for this record (up to its write) and for its candidate code
    timing.set("candidatesCpuNs", Json(cpu_candidates_end - cpu_candidates));
    timing.set("recordCpuNs", Json(thread_cpu_ns() - cpu_start));
    out.set("timing", std::move(timing));
    s.call("capture_sample", job.planned->id.c_str(), std::move(args), std::move(out), S_OK);
    return managed;
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
    std::uint64_t deadline_ns = now_ns();
    const std::uint64_t refused_before = g_frames.refused();
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
        g_sample.recover = job->recover;
        g_sample.naiveWalk = job->naiveWalk || !job->recover;
        g_sample.parkTimeoutNs = job->parkTimeoutMs * 1000000;
        g_sample.park.store(kNotParked, std::memory_order_release);
        g_sample.recHr = S_OK;
        g_sample.tParked = g_sample.tResumed = g_sample.tRecWalked = 0;
        g_sample.fastPath = false;
        if (job->recover) {
            g_unwind.refresh();  // modules loaded since the last sample (a no-op when none were)
            prepare_code_map(maps, i == 0);
            WalkRequest rreq = req;
            rreq.seed = g_sample.recSeed;
            g_sample.recWalk.store(new Walk(rreq), std::memory_order_release);  // freed with `walk`
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
        const int rc = pthread_kill(job->target.pthread, kSampleSignal);
        if (rc == 0) {
            const std::uint64_t give_up = now_ns() + static_cast<std::uint64_t>(job->timeoutMs) * 1000000ull;
            const timespec until{static_cast<time_t>(give_up / 1000000000ull), static_cast<long>(give_up % 1000000000ull)};
            if (job->recover) serve_park(g_sample, job->target, give_up);
            while (g_sample.state.load(std::memory_order_acquire) != kDone) {
                if (sem_clockwait(&g_sample_done, CLOCK_MONOTONIC, &until) != 0 && errno == ETIMEDOUT) break;
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
                delete g_sample.recWalk.exchange(nullptr);
                delete walk;
                g_sample.walk.store(nullptr);
                g_sample.state.store(kIdle);
            }
            break;
        }
        const bool managed = record_sample(*job, i, *walk, maps);
        if (job->recover) learn_from_walks(*walk, g_sample.recWalk.load(std::memory_order_acquire));
        if ((job->recover && !job->naiveWalk ? g_sample.recHr : g_sample.hr) == S_OK) ++(managed ? managed_ok : unmanaged_ok);
        ++taken;
        delete walk;
        g_sample.walk.store(nullptr);
        delete g_sample.recWalk.exchange(nullptr);
        g_sample.state.store(kIdle, std::memory_order_release);
    }
    if (const std::uint64_t refused = g_frames.refused() - refused_before)
        s.probe_error("capture_sample: " + std::to_string(refused) + " frames could not be written to the sidecar " +
                          g_frames_name + " (their references are null)",
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
     "args.minUnmanagedOk (0) other code, each with a live walk that returned S_OK. One capture_sample call "
     "record per sample, then capture_maps, capture_jit_map (args.jitMap true) and capture_done (taken, "
     "managedOk, unmanagedOk, enough). args: timeoutMs (2000, per sample), maxCandidates (256, code windows "
     "around stack words pointing into executable memory), totalTimeoutMs."},
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
