// A profiler's walks against ground truth (issue 24 part 4, `validate --walk-quality`; proxy.h).
//
// With PROFHARNESS_PROXY_WALK_QUALITY=1, each DoStackSnapshot the profiler makes of a thread that is parked in
// the profiler's own signal handler (the calling thread itself, walking its own stack from the handler, or
// another thread the profiler holds in its handler) captures that thread's state at the call, as the probe's
// capture_sample does (experiments_capture.cpp): the ucontext general registers the kernel interrupted it with
// (the signal-safety preload keeps, per thread, the ucontext of its outermost wrapped handler:
// profharness_preload_parked_context), fs_base (the calling thread's own, arch_prctl; unknown for another
// thread), the stack from SP to SP + 64 KiB (process_vm_readv page by page, so the first unreadable page ends
// it), the red zone below SP and 256 code bytes around the IP, the seed CONTEXT the profiler passed (when it
// passed one), and the FunctionIDs and IPs the runtime delivered to the profiler's StackSnapshotCallback with
// the walk's HRESULT. The registers are the interrupted ones, never the seed: the truth is the whole stack at
// the instant, whatever seed the profiler chose.
//
// Everything at the call is copied into preallocated slots (atomics, memcpy, system calls: async-signal-safe;
// a walk from inside a handler allocates nothing here). A walk of a thread that is not parked in a handler
// (suspended by SuspendRuntime, or running) is counted, not captured: the proxy has no instant of it. The
// proxy's watchdog thread (walkq_drain) writes each finished slot: its bytes as one frame of a frames v1
// sidecar (the trace's path + ".walkq.frames", frame type 1, the parts in the probe's order: stack, red zone,
// code around the IP, candidate code windows, seed) and a proxy.walkq.sample mark holding the probe's
// capture_sample record shape ("args", "out"), so conformance/adapters/capture.py turns it into an emu capture.
// Read after the instant, as the probe's are: the code windows around stack words that point into executable
// memory, the place of the IP (GetFunctionFromIP, else the mapping) and, for every such word that is managed
// code, its method's code versions (GetNativeCodeStartAddresses + GetCodeInfo4, else GetCodeInfo2:
// JIT-compiled and ReadyToRun alike), written as they are noted (proxy.walkq.methods) with /proc/self/maps when
// it changed (proxy.walkq.maps), so a run that hangs or crashes keeps what its samples need; at the end
// (walkq_drain(true) before proxy.shutdown) the counts (proxy.walkq.map: captured, dropped for want of a
// free slot, walks of threads not parked).
#include <asm/prctl.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "profharness/frames.h"
#include "profharness/metadata.h"
#include "proxy.h"
#include "walkq.h"

namespace profharness::proxy {

namespace {

// 128 slots (about 9 MiB) drained every 10 ms (the watchdog's period while --walk-quality is on): a sampler at
// up to ~10 kHz loses no capture. With 32 drained every 100 ms, a 1 kHz sampler kept only the first 32 ms of
// each 100: 60% of its walks dropped, all from the same part of every window.
constexpr int kSlots = 128;
constexpr std::size_t kStackBytes = 64 * 1024;  // emu.capture.STACK_CAPTURE_BYTES
constexpr std::size_t kRedZone = 128;
constexpr std::size_t kCodeWindow = 256;
constexpr std::size_t kSeedBytes = sizeof(AMD64Context);
constexpr int kWalkFrames = 256;
constexpr int kMaxCandidates = 256;
constexpr std::size_t kPrologueBytes = 32;
constexpr std::uint16_t kFrameSample = 1;  // conformance/adapters/capture.py FRAME_SAMPLE
constexpr const char* kFramesSuffix = ".walkq.frames";

// ucontext gregs in sys/ucontext.h order, the names emu uses (experiments_capture.cpp kGregNames)
const char* const kGregNames[NGREG] = {"r8",  "r9",  "r10", "r11", "r12",    "r13", "r14",    "r15",
                                       "rdi", "rsi", "rbp", "rbx", "rdx",    "rax", "rcx",    "rsp",
                                       "rip", "efl", "csgsfs", "err", "trapno", "oldmask", "cr2"};

enum : int { kFree = 0, kFilling = 1, kReady = 2, kWriting = 3 };

}  // namespace

struct WalkqSlot {
    std::atomic<int> state{kFree};
    long os_tid = 0;
    bool same_thread = false;
    std::uint64_t thread_id = 0, caller = 0;
    std::uint32_t info_flags = 0;
    std::uint64_t gregs[NGREG] = {};
    std::uint64_t fs_base = 0;
    bool fs_ok = false;
    std::uint64_t sp = 0;
    std::size_t stack_n = 0, red_n = 0, code_n = 0;
    std::uint64_t code_addr = 0;
    bool seed_given = false;
    std::uint32_t seed_size = 0;
    std::uint32_t hr = 0;
    std::uint64_t delivered = 0;
    int n = 0;
    std::uint64_t fids[kWalkFrames], ips[kWalkFrames];
    unsigned char seed[kSeedBytes];
    unsigned char red[kRedZone];
    unsigned char code[kCodeWindow];
    unsigned char stack[kStackBytes];
};

namespace {

using ParkedFn = void* (*)(long);

bool g_enabled = false;
ParkedFn g_parked = nullptr;
WalkqSlot* g_slots = nullptr;
std::atomic<std::uint64_t> g_captured{0}, g_dropped{0}, g_not_parked{0}, g_written{0};
std::mutex g_drain_mu;
FrameWriter* g_frames = nullptr;
std::string* g_frames_name = nullptr;
std::string* g_frames_error = nullptr;
// FunctionID -> its code ranges as the JIT map's methods[] entry (written once, at the end)
struct Method;
std::map<std::uint64_t, Method>* g_methods = nullptr;
std::set<std::uint64_t>* g_unwritten = nullptr;  // methods noted (or noted again) since the last write
std::string* g_maps_written = nullptr;            // the /proc/self/maps text last written

long gettid_() { return static_cast<long>(::syscall(SYS_gettid)); }

// Up to n bytes at addr of this process without faulting, page by page in one system call; the count read
// (the bytes before the first unreadable page).
std::size_t read_own(std::uint64_t addr, unsigned char* out, std::size_t n) {
    constexpr std::size_t kIov = 20;
    struct iovec local[kIov], remote[kIov];
    std::size_t k = 0, off = 0;
    while (off < n && k < kIov) {
        const std::uint64_t a = addr + off;
        std::size_t chunk = static_cast<std::size_t>(((a | 4095) + 1) - a);
        if (chunk > n - off) chunk = n - off;
        local[k] = {out + off, chunk};
        remote[k] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)), chunk};
        off += chunk;
        ++k;
    }
    const ssize_t got = ::syscall(SYS_process_vm_readv, ::getpid(), local, k, remote, k, 0UL);
    return got > 0 ? static_cast<std::size_t>(got) : 0;
}

WalkqSlot* claim() {
    for (int k = 0; k < kSlots; ++k) {
        int free_state = kFree;
        if (g_slots[k].state.compare_exchange_strong(free_state, kFilling, std::memory_order_acquire)) return &g_slots[k];
    }
    return nullptr;
}

// --- the drain's side (never in a handler) -----------------------------------------------------------------

struct Mapping {
    std::uint64_t start, end;
    bool exec;
    std::string path;
};

std::string read_maps_text() {
    std::string text;
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return text;
    char buf[65536];
    for (;;) {
        const ssize_t got = ::read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        text.append(buf, static_cast<std::size_t>(got));
    }
    ::close(fd);
    return text;
}

std::vector<Mapping> parse_maps(const std::string& text) {
    std::vector<Mapping> out;
    std::size_t at = 0;
    while (at < text.size()) {
        std::size_t eol = text.find('\n', at);
        if (eol == std::string::npos) eol = text.size();
        const std::string line = text.substr(at, eol - at);
        at = eol + 1;
        unsigned long long start = 0, end = 0;
        char perms[8] = {};
        int consumed = 0;
        if (std::sscanf(line.c_str(), "%llx-%llx %7s %*s %*s %*s%n", &start, &end, perms, &consumed) < 3) continue;
        std::size_t p = static_cast<std::size_t>(consumed);
        while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
        out.push_back({start, end, perms[2] == 'x', line.substr(p)});
    }
    return out;
}

const Mapping* mapping_of(const std::vector<Mapping>& maps, std::uint64_t a) {
    auto it = std::upper_bound(maps.begin(), maps.end(), a, [](std::uint64_t x, const Mapping& m) { return x < m.start; });
    if (it == maps.begin()) return nullptr;
    --it;
    return a < it->end ? &*it : nullptr;
}

std::string base64(const unsigned char* p, std::size_t n) {
    static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < n; i += 3) {
        std::uint32_t v = std::uint32_t(p[i]) << 16;
        if (i + 1 < n) v |= std::uint32_t(p[i + 1]) << 8;
        if (i + 2 < n) v |= p[i + 2];
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
        out += i + 2 < n ? kAlphabet[v & 63] : '=';
    }
    return out;
}

Json range_json(std::uint64_t start, std::uint64_t size) {
    Json r = Json::object();
    r.set("start", Json(start)).set("size", Json(size));
    unsigned char head[kPrologueBytes];
    const std::size_t got = read_own(start, head, std::min<std::size_t>(kPrologueBytes, size));
    if (got) r.set("prologue", base64(head, got));
    return r;
}

// Every native code version of `fid` (GetNativeCodeStartAddresses + GetCodeInfo4; else GetCodeInfo2, the
// current version only) as the JIT map's methods[] entry; `spans` gets their [start, end) ranges.
Json method_json(std::uint64_t fid, std::vector<std::pair<std::uint64_t, std::uint64_t>>& spans) {
    Json versions = Json::array();
    auto add = [&](std::uint64_t start, const COR_PRF_CODE_INFO* infos, ULONG32 m) {
        Json ranges = Json::array();
        for (ULONG32 k = 0; k < m && k < 16; ++k) {
            ranges.push(range_json(infos[k].startAddress, infos[k].size));
            spans.emplace_back(infos[k].startAddress, infos[k].startAddress + infos[k].size);
        }
        Json v = Json::object();
        v.set("start", Json(start)).set("ranges", std::move(ranges));
        versions.push(std::move(v));
    };
    if (auto* info9 = static_cast<ICorProfilerInfo9*>(runtime_info_of(9))) {
        UINT_PTR starts[64];
        ULONG32 n = 0;
        if (!failed(info9->GetNativeCodeStartAddresses(static_cast<FunctionID>(fid), 0, 64, &n, starts))) {
            for (ULONG32 i = 0; i < n && i < 64; ++i) {
                COR_PRF_CODE_INFO infos[16];
                ULONG32 m = 0;
                if (!failed(info9->GetCodeInfo4(starts[i], 16, &m, infos)) && m) add(starts[i], infos, m);
            }
        }
    }
    if (spans.empty()) {
        auto* info2 = static_cast<ICorProfilerInfo2*>(runtime_info_of(2));
        COR_PRF_CODE_INFO infos[16];
        ULONG32 m = 0;
        if (info2 && !failed(info2->GetCodeInfo2(static_cast<FunctionID>(fid), 16, &m, infos)) && m)
            add(infos[0].startAddress, infos, m);
    }
    Json method = Json::object();
    method.set("functionId", Json(fid)).set("reJitId", Json(std::uint64_t{0})).set("versions", std::move(versions));
    // its name ("Type::Method", as the probe's map names methods), from metadata on the watchdog's thread
    if (auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1))) {
        ComHolder<IMetaDataImport> md;
        mdToken token = 0;
        if (function_metadata(info, static_cast<FunctionID>(fid), md, token) == S_OK && md.get()) {
            const MethodProps m = method_props(md.get(), token);
            if (!failed(m.hr)) {
                const TypeDefProps t = type_def_props(md.get(), m.owner);
                method.set("name", (failed(t.hr) ? std::string("?") : t.name) + "::" + m.name);
            }
        }
    }
    return method;
}

struct Method {
    Json json;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
};

// The managed method at `ip` (GetFunctionFromIP), its code versions noted for the map (again when `ip` lies in
// none noted so far: a version compiled since); 0 when none.
std::uint64_t note_function(std::uint64_t ip);

std::uint64_t note_function(std::uint64_t ip) {
    auto* info = static_cast<ICorProfilerInfo2*>(runtime_info_of(2));
    if (!info) return 0;
    FunctionID fid = 0;
    if (failed(info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &fid)) || !fid)
        return 0;
    auto it = g_methods->find(fid);
    if (it != g_methods->end()) {
        for (const auto& [lo, hi] : it->second.spans)
            if (ip >= lo && ip < hi) return fid;
    }
    Method m;
    m.json = method_json(fid, m.spans);
    (*g_methods)[fid] = std::move(m);
    g_unwritten->insert(fid);
    return fid;
}

void put_le(std::vector<unsigned char>& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

Json frame_ref(std::int64_t frame, std::size_t pos, std::size_t n) {
    if (frame < 0) return Json();
    Json r = Json::object();
    r.set("offset", Json(static_cast<std::uint64_t>(frame))).set("at", Json(static_cast<std::uint64_t>(pos)));
    r.set("length", Json(static_cast<std::uint64_t>(n)));
    return r;
}

void write_slot(const WalkqSlot& s, std::vector<Mapping>& maps) {
    const std::uint64_t ip = s.gregs[REG_RIP];
    const Mapping* stack_map = mapping_of(maps, s.sp);
    // the thread's stack ends where its mapping does, or where the copy stopped (an unreadable page)
    std::uint64_t high = stack_map ? stack_map->end : s.sp + s.stack_n;
    const std::uint64_t want = std::min<std::uint64_t>(s.sp + kStackBytes, high);
    if (s.sp + s.stack_n < want) high = s.sp + s.stack_n;
    const std::size_t stack_n = static_cast<std::size_t>(std::min<std::uint64_t>(s.sp + kStackBytes, high) - s.sp);
    // candidate code: windows around stack words in executable mappings; their methods noted for the map
    std::vector<unsigned char> packed;
    std::set<std::uint64_t> windows;
    std::uint64_t count = 0;
    note_function(ip);
    unsigned char buf[kCodeWindow];
    for (std::size_t off = 0; off + 8 <= stack_n; off += 8) {
        std::uint64_t word;
        std::memcpy(&word, s.stack + off, 8);
        if (word < 4096) continue;
        const Mapping* m = mapping_of(maps, word);
        if (!m || !m->exec) continue;
        note_function(word);
        const std::uint64_t lo = std::max<std::uint64_t>(m->start, word >= kCodeWindow / 2 ? word - kCodeWindow / 2 : 0);
        if (windows.count(lo) || static_cast<int>(windows.size()) >= kMaxCandidates) continue;
        windows.insert(lo);
        const std::uint64_t hi = std::min<std::uint64_t>(m->end, word + kCodeWindow / 2);
        const std::size_t got = read_own(lo, buf, static_cast<std::size_t>(hi - lo));
        if (!got) continue;
        put_le(packed, lo, 8);
        put_le(packed, got, 4);
        packed.insert(packed.end(), buf, buf + got);
        ++count;
    }
    unsigned char zeros[kSeedBytes] = {};
    const FrameWriter::Part parts[] = {{s.stack, stack_n}, {s.red, s.red_n}, {s.code, s.code_n},
                                       {packed.data(), packed.size()}, {s.seed_given ? s.seed : zeros, kSeedBytes}};
    const std::int64_t frame = g_frames ? g_frames->append(kFrameSample, parts, sizeof parts / sizeof parts[0]) : -1;
    std::size_t pos = 0;
    auto next_ref = [&](std::size_t n) {
        Json r = frame_ref(frame, pos, n);
        pos += n;
        return r;
    };
    Json args = Json::object();
    Json target = Json::object();
    target.set("name", "").set("threadId", Json(s.thread_id)).set("osTid", Json(static_cast<std::int64_t>(s.os_tid)));
    args.set("sample", Json(g_written.load())).set("target", std::move(target));
    args.set("seed", s.seed_given ? "given" : "none").set("infoFlags", Json(static_cast<std::uint64_t>(s.info_flags)));
    args.set("sameThread", s.same_thread);
    Json out = Json::object();
    Json regs = Json::object();
    for (int i = 0; i < NGREG; ++i) regs.set(kGregNames[i], Json(s.gregs[i]));
    regs.set("fs_base", s.fs_ok ? Json(s.fs_base) : Json());
    out.set("registers", std::move(regs));
    Json stack = Json::object();
    stack.set("sp", Json(s.sp)).set("inRange", Json(stack_map != nullptr && stack_n > 0));
    stack.set("stackLow", stack_map ? Json(stack_map->start) : Json()).set("stackHigh", Json(high));
    stack.set("capturedEnd", Json(s.sp + stack_n));
    stack.set("bytes", next_ref(stack_n)).set("redZone", next_ref(s.red_n));
    out.set("stack", std::move(stack));
    Json code = Json::object();
    code.set("address", Json(s.code_addr)).set("bytes", next_ref(s.code_n));
    out.set("code", std::move(code));
    Json candidates = next_ref(packed.size());
    if (candidates.is_object()) candidates.set("count", Json(count));
    out.set("candidateCode", std::move(candidates)).set("candidateCodeTaken", "after-walk");
    out.set("seedContext", next_ref(kSeedBytes));
    out.set("framesFile", g_frames_name ? *g_frames_name : std::string());
    Json walk = Json::object();
    walk.set("hr", Json(s.hr)).set("frameCount", Json(s.delivered));
    Json frames = Json::array();
    for (int i = 0; i < s.n; ++i) {
        Json f = Json::object();
        f.set("funcId", Json(s.fids[i])).set("ip", Json(s.ips[i])).set("sp", Json());
        frames.push(std::move(f));
    }
    walk.set("frames", std::move(frames));
    out.set("walk", std::move(walk));
    // the IP's place, as the probe's where_of
    Json where = Json::object();
    const std::uint64_t fid = note_function(ip);
    const Mapping* m = mapping_of(maps, ip);
    where.set("functionId", Json(fid));
    if (fid) where.set("kind", "managed");
    else if (!m) where.set("kind", "unmapped");
    else if (m->path.empty() || m->path[0] == '[') where.set("kind", m->exec ? "anonymous-executable" : "anonymous");
    else where.set("kind", "module");
    where.set("module", m && !m->path.empty() ? Json(m->path) : Json());
    out.set("where", std::move(where));
    note_caller(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(s.caller)));
    Json rec = Json::object();
    rec.set("name", "proxy.walkq.sample").set("payload", Json());
    rec.set("caller", Json(s.caller)).set("args", std::move(args)).set("out", std::move(out));
    trace().write("mark", rec);
    g_written.fetch_add(1);
}

}  // namespace

bool walkq_enabled() { return g_enabled; }

void walkq_init(const char* trace_path) {
    const char* on = std::getenv("PROFHARNESS_PROXY_WALK_QUALITY");
    if (!on || std::strcmp(on, "1") != 0 || g_slots) return;
    g_parked = reinterpret_cast<ParkedFn>(dlsym(RTLD_DEFAULT, "profharness_preload_parked_context"));
    void* mem = ::mmap(nullptr, sizeof(WalkqSlot) * kSlots, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return;
    g_slots = new (mem) WalkqSlot[kSlots];
    g_methods = new std::map<std::uint64_t, Method>();
    g_unwritten = new std::set<std::uint64_t>();
    g_maps_written = new std::string();
    g_frames_error = new std::string();
    if (trace_path && *trace_path) {
        const std::string path = std::string(trace_path) + kFramesSuffix;
        g_frames = new FrameWriter();
        if (!g_frames->open(path.c_str(), 0, *g_frames_error)) {
            delete g_frames;
            g_frames = nullptr;
        } else {
            const std::size_t slash = path.rfind('/');
            g_frames_name = new std::string(slash == std::string::npos ? path : path.substr(slash + 1));
        }
    }
    g_enabled = true;
}

WalkqSlot* walkq_begin(std::uint64_t thread, std::uint32_t info_flags, const unsigned char* context,
                       std::uint32_t context_size, const void* caller) {
    if (!g_enabled) return nullptr;
    const long self = gettid_();
    long tid = self;
    if (thread) {
        auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
        ThreadID current = 0;
        if (info && info->GetCurrentThreadID(&current) == S_OK && current == thread) {
            tid = self;
        } else {
            DWORD os = 0;
            tid = info && info->GetThreadInfo(static_cast<ThreadID>(thread), &os) == S_OK ? static_cast<long>(os) : 0;
        }
    }
    void* ucv = g_parked && tid > 0 ? g_parked(tid) : nullptr;
    if (!ucv) {
        g_not_parked.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    WalkqSlot* s = claim();
    if (!s) {
        g_dropped.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    const auto* uc = static_cast<const ucontext_t*>(ucv);
    s->os_tid = tid;
    s->same_thread = tid == self;
    s->thread_id = thread;
    s->caller = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(caller));
    s->info_flags = info_flags;
    for (int i = 0; i < NGREG; ++i) s->gregs[i] = static_cast<std::uint64_t>(uc->uc_mcontext.gregs[i]);
    s->fs_ok = false;
    if (s->same_thread) {
        unsigned long fs = 0;
        s->fs_ok = ::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs) == 0;
        s->fs_base = fs;
    }
    s->sp = s->gregs[REG_RSP];
    s->stack_n = read_own(s->sp, s->stack, kStackBytes);
    s->red_n = s->sp >= kRedZone && s->stack_n ? read_own(s->sp - kRedZone, s->red, kRedZone) : 0;
    if (s->red_n != kRedZone) s->red_n = 0;
    const std::uint64_t ip = s->gregs[REG_RIP];
    const std::size_t half = kCodeWindow / 2;
    const std::size_t after = read_own(ip, s->code + half, half);
    const std::size_t before = ip >= half ? read_own(ip - half, s->code, half) : 0;
    if (before == half) {
        s->code_addr = ip - half;
        s->code_n = half + after;
    } else {
        std::memmove(s->code, s->code + half, after);
        s->code_addr = ip;
        s->code_n = after;
    }
    s->seed_given = context != nullptr && context_size > 0;
    s->seed_size = context_size;
    if (s->seed_given) {
        const std::size_t n = std::min<std::size_t>(context_size, kSeedBytes);
        std::memcpy(s->seed, context, n);
        if (n < kSeedBytes) std::memset(s->seed + n, 0, kSeedBytes - n);
    }
    s->n = 0;
    s->delivered = 0;
    s->hr = 0;
    return s;
}

void walkq_frame(WalkqSlot* s, std::uint64_t function, std::uint64_t ip) {
    if (!s) return;
    if (s->n < kWalkFrames) {
        s->fids[s->n] = function;
        s->ips[s->n] = ip;
        ++s->n;
    }
    ++s->delivered;
}

void walkq_end(WalkqSlot* s, std::int32_t hr) {
    if (!s) return;
    s->hr = static_cast<std::uint32_t>(hr);
    g_captured.fetch_add(1, std::memory_order_relaxed);
    s->state.store(kReady, std::memory_order_release);
}

void walkq_drain(bool final) {
    if (!g_enabled || !recording_enabled()) return;
    std::lock_guard<std::mutex> lock(g_drain_mu);
    std::vector<Mapping> maps;
    bool have_maps = false;
    for (int k = 0; k < kSlots; ++k) {
        WalkqSlot& s = g_slots[k];
        int ready = kReady;
        if (!s.state.compare_exchange_strong(ready, kWriting, std::memory_order_acquire)) continue;
        if (!have_maps) {
            maps = parse_maps(read_maps_text());
            have_maps = true;
        }
        write_slot(s, maps);
        s.state.store(kFree, std::memory_order_release);
    }
    // What the replay needs besides the samples, as it grows (a run that hangs or crashes keeps what was
    // written): the code of the methods noted since the last write, and the maps when they changed.
    if (!g_unwritten->empty()) {
        Json methods = Json::array();
        for (std::uint64_t fid : *g_unwritten) {
            auto it = g_methods->find(fid);
            if (it != g_methods->end() && !it->second.spans.empty()) methods.push(it->second.json);
        }
        g_unwritten->clear();
        Json rec = Json::object();
        rec.set("name", "proxy.walkq.methods").set("payload", Json()).set("methods", std::move(methods));
        trace().write("mark", rec);
    }
    if (have_maps || final) {
        std::string text = read_maps_text();
        if (text != *g_maps_written) {
            Json rec = Json::object();
            rec.set("name", "proxy.walkq.maps").set("payload", Json()).set("maps", text);
            trace().write("mark", rec);
            *g_maps_written = std::move(text);
        }
    }
    if (!final) return;
    Json rec = Json::object();
    rec.set("name", "proxy.walkq.map").set("payload", Json());
    rec.set("captured", Json(g_captured.load())).set("written", Json(g_written.load()));
    rec.set("dropped", Json(g_dropped.load())).set("notParked", Json(g_not_parked.load()));
    rec.set("preload", g_parked != nullptr);
    rec.set("framesFile", g_frames_name ? Json(*g_frames_name) : Json());
    if (!g_frames && g_frames_error && !g_frames_error->empty()) rec.set("framesError", *g_frames_error);
    trace().write("mark", rec);
}

}  // namespace profharness::proxy
