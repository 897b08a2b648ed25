// The recording proxy's COM objects: the class factory that loads the profiler behind the proxy, the
// callback forwarder the runtime talks to, the ICorProfilerInfo wrapper the profiler talks to, the hooks
// and enumerators it wraps, and the exports of the probe's seat (docs/design.md) so scenarios run as usual.
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "generated.h"
#include "il_bodies.h"
#include "profharness/class_factory.h"
#include "profharness/com.h"
#include "profharness/flags.h"
#include "profharness/native_stack.h"
#include "proxy.h"
#include "walkq.h"

#define PROXY_EXPORT extern "C" __attribute__((visibility("default")))

namespace profharness::proxy {

namespace {

// --- configuration (environment, docs: conformance/validator) ---------------------------------------------

struct Config {
    std::string target;  // PROFHARNESS_PROXY_TARGET: the third-party profiler .so
    GUID clsid{};        // PROFHARNESS_PROXY_CLSID
    bool clsid_ok = false;
    long hang_ms = 0;    // PROFHARNESS_PROXY_HANG_MS: a callback open longer is a hang (0: off)
};

Config& config() {
    static Config* c = [] {
        auto* cfg = new Config();
        if (const char* t = std::getenv("PROFHARNESS_PROXY_TARGET")) cfg->target = t;
        if (const char* c = std::getenv("PROFHARNESS_PROXY_CLSID")) cfg->clsid_ok = parse_guid(c, cfg->clsid);
        if (const char* h = std::getenv("PROFHARNESS_PROXY_HANG_MS")) cfg->hang_ms = std::atol(h);
        return cfg;
    }();
    return *c;
}

std::atomic<bool> g_trace_open{false};
std::atomic<bool> g_shutdown_returned{false};
std::atomic<bool> g_detached{false};                   // the profiler's ProfilerDetachSucceeded has returned
std::atomic<std::int64_t> g_initialize_for_attach_ns{0};  // when InitializeForAttach was entered
std::atomic<void*> g_real_info{nullptr};
std::atomic<bool> g_crash_written{false};
// The addresses the target .so's loaded segments span: in_target is a compare, so the fault handler needs no
// dladdr (its lock and its stack) on the alternate signal stack it shares with the runtime's own handler.
std::uintptr_t g_target_lo = 0, g_target_hi = 0;
std::string g_target_path;
// The target's own marks entry points, when it has them (the project's probe does): a scenario's marks go
// to the proxy (it sits in the probe's seat) and are handed on, so mark-triggered work still happens.
using MarkFn = std::int32_t (*)(const char16_t*, const char16_t*);
using MarkIdsFn = std::int32_t (*)(const char16_t*, const std::int64_t*, std::int32_t);
std::atomic<MarkFn> g_target_mark{nullptr};
std::atomic<MarkIdsFn> g_target_mark_ids{nullptr};
std::set<long>* g_profiler_threads = nullptr;  // threads that appeared while the profiler ran its start-up

void probe_error(const char* what, const char* where) {
    if (!g_trace_open.load()) {
        std::fprintf(stderr, "profharness proxy: %s (%s)\n", what, where);
        return;
    }
    Json rec = Json::object();
    rec.set("what", what).set("where", where);
    trace().write("probe_error", rec);
}

void note(const char* name, Json data) {
    if (!g_trace_open.load()) return;
    Json rec = Json::object();
    rec.set("name", name).set("payload", Json());
    for (const auto& [k, v] : data.members()) rec.set(k, v);
    trace().write("mark", rec);
}

std::set<long> task_ids() {
    std::set<long> ids;
    if (DIR* d = opendir("/proc/self/task")) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9') ids.insert(std::atol(e->d_name));
        closedir(d);
    }
    return ids;
}

bool task_alive(long tid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%ld", tid);
    struct stat st;
    return ::stat(path, &st) == 0;
}

Json frames_json(const ThreadState& t) {
    Json names = Json::array();
    int n = t.depth < kMaxFrames ? t.depth : kMaxFrames;
    for (int k = 0; k < n; ++k) names.push(Json(t.frames[k].name ? t.frames[k].name : "?"));
    return names;
}

bool in_target(const void* ip) {
    const auto a = reinterpret_cast<std::uintptr_t>(ip);
    return a != 0 && a >= g_target_lo && a < g_target_hi;
}

// g_target_lo/hi from the program headers of the loaded object whose segments hold `inside`.
void find_target_extent(const void* inside) {
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
            const auto at = reinterpret_cast<std::uintptr_t>(data);
            std::uintptr_t lo = UINTPTR_MAX, hi = 0;
            for (int k = 0; k < info->dlpi_phnum; ++k) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[k];
                if (ph.p_type != PT_LOAD) continue;
                lo = std::min<std::uintptr_t>(lo, info->dlpi_addr + ph.p_vaddr);
                hi = std::max<std::uintptr_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
            }
            if (at < lo || at >= hi) return 0;
            g_target_lo = lo;
            g_target_hi = hi;
            return 1;
        },
        const_cast<void*>(inside));
}

std::string hex_bytes(const void* p, int n) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    if (!p) return s;
    const auto* b = static_cast<const unsigned char*>(p);
    for (int k = 0; k < n; ++k) {
        s.push_back(digits[b[k] >> 4]);
        s.push_back(digits[b[k] & 15]);
    }
    return s;
}

// A hook the profiler registered: where it is and its first bytes, for the hook checker.
Json hook_json(const void* fn) {
    Json h = Json::object();
    h.set("address", Json::pointer(fn));
    if (!fn) return h;
    Dl_info di;
    if (dladdr(fn, &di) && di.dli_fname) {
        h.set("module", di.dli_fname);
        h.set("offset", Json(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(fn) -
                                                        reinterpret_cast<std::uintptr_t>(di.dli_fbase))));
        if (di.dli_sname) h.set("symbol", di.dli_sname);
    }
    h.set("code", hex_bytes(fn, 64));
    return h;
}

// --- hooks ----------------------------------------------------------------------------------------------

constexpr int kHookKinds = static_cast<int>(Hook::Count_);  // generated.h: the hooks, from the API table
std::atomic<std::int64_t> g_hook_counts[kHookKinds];

// A hook's lazy frame on the calling thread (counted; written only if the profiler calls the runtime in it).
Frame* open_hook(ThreadState& t, int kind) {
    g_hook_counts[kind].fetch_add(1, std::memory_order_relaxed);
    return push_frame(t, kHookNames[kind], -1, true);
}
void close_hook(ThreadState& t) { pop_frame(t, S_OK, false); }

class HookScope {
 public:
    explicit HookScope(Hook kind, ThreadState& t = me())
        : t_(t), frame_(open_hook(t_, static_cast<int>(kind))) {}
    ~HookScope() { close_hook(t_); }
    template <typename T>
    void arg(const char* name, T v) { store_arg(frame_, name, v); }
    ThreadState& thread() const { return t_; }

 private:
    ThreadState& t_;
    Frame* frame_;
};

// The hooks of one SetEnterLeaveFunctionHooks* call: the profiler's, or the wrappers the runtime gets.
template <typename E, typename L, typename T>
struct HookSet {
    E* enter;
    L* leave;
    T* tail;
};

HookSet<FunctionEnter2, FunctionLeave2, FunctionTailcall2> g_hooks2;
HookSet<FunctionEnter3WithInfo, FunctionLeave3WithInfo, FunctionTailcall3WithInfo> g_hooks3i;
FunctionIDMapper* g_mapper;
FunctionIDMapper2* g_mapper2;

void enter2_wrap(FunctionID f, UINT_PTR cd, COR_PRF_FRAME_INFO fi, COR_PRF_FUNCTION_ARGUMENT_INFO* ai) {
    ThreadState& t = me();
    {
        HookScope h(Hook::FunctionEnter2, t);
        h.arg("funcId", f); h.arg("clientData", cd); h.arg("func", fi); h.arg("argumentInfo", ai);
        OpenFrameInfo open(t, reinterpret_cast<std::uint64_t>(fi));
        g_hooks2.enter(f, cd, fi, ai);
    }
    frame_info_returned(t, reinterpret_cast<std::uint64_t>(fi), f, ThreadState::FrameInfoFrom::FunctionEnter2);
}
void leave2_wrap(FunctionID f, UINT_PTR cd, COR_PRF_FRAME_INFO fi, COR_PRF_FUNCTION_ARGUMENT_RANGE* r) {
    HookScope h(Hook::FunctionLeave2);
    h.arg("funcId", f); h.arg("clientData", cd); h.arg("func", fi); h.arg("retvalRange", r);
    OpenFrameInfo open(h.thread(), reinterpret_cast<std::uint64_t>(fi));
    g_hooks2.leave(f, cd, fi, r);
}
void tail2_wrap(FunctionID f, UINT_PTR cd, COR_PRF_FRAME_INFO fi) {
    HookScope h(Hook::FunctionTailcall2);
    h.arg("funcId", f); h.arg("clientData", cd); h.arg("func", fi);
    OpenFrameInfo open(h.thread(), reinterpret_cast<std::uint64_t>(fi));
    g_hooks2.tail(f, cd, fi);
}
void enter3i_wrap(FunctionIDOrClientID id, COR_PRF_ELT_INFO elt) {
    ThreadState& t = me();
    HandedFrameInfoScope handed(t, ThreadState::FrameInfoFrom::FunctionEnter3WithInfo);
    HookScope h(Hook::FunctionEnter3WithInfo, t);
    h.arg("functionIDOrClientID", id.functionID); h.arg("eltInfo", elt);
    g_hooks3i.enter(id, elt);
}
void leave3i_wrap(FunctionIDOrClientID id, COR_PRF_ELT_INFO elt) {
    ThreadState& t = me();
    HandedFrameInfoScope handed(t, ThreadState::FrameInfoFrom::FunctionLeave3WithInfo);
    HookScope h(Hook::FunctionLeave3WithInfo, t);
    h.arg("functionIDOrClientID", id.functionID); h.arg("eltInfo", elt);
    g_hooks3i.leave(id, elt);
}
void tail3i_wrap(FunctionIDOrClientID id, COR_PRF_ELT_INFO elt) {
    ThreadState& t = me();
    HandedFrameInfoScope handed(t, ThreadState::FrameInfoFrom::FunctionTailcall3WithInfo);
    HookScope h(Hook::FunctionTailcall3WithInfo, t);
    h.arg("functionIDOrClientID", id.functionID); h.arg("eltInfo", elt);
    g_hooks3i.tail(id, elt);
}

// A SetEnterLeaveFunctionHooks* call's three hooks as its arguments pFuncEnter<suffix>, pFuncLeave<suffix>
// and pFuncTailcall<suffix>.
void record_hooks(InfoScope& s, const std::string& suffix, const void* e, const void* l, const void* t) {
    s.args().set("pFuncEnter" + suffix, hook_json(e))
        .set("pFuncLeave" + suffix, hook_json(l))
        .set("pFuncTailcall" + suffix, hook_json(t));
}

}  // namespace
}  // namespace profharness::proxy

// Called by hooks3.cpp's trampolines, every volatile register saved: open and close the fast-path hook's
// frame (the same lazy frame a wrapped FunctionEnter2 has).
extern "C" __attribute__((used)) void profharness_proxy_hook3_begin(int kind, std::uintptr_t id) {
    using namespace profharness::proxy;
    Frame* f = open_hook(me(), kFirstFastHook + kind);
    store_arg(f, "functionIDOrClientID", static_cast<profharness::UINT_PTR>(id));
}

extern "C" __attribute__((used)) void profharness_proxy_hook3_end() { profharness::proxy::close_hook(profharness::proxy::me()); }

namespace profharness::proxy {
namespace {

UINT_PTR mapper_wrap(FunctionID f, BOOL* hook) {
    ThreadState& t = me();
    Frame* fr = push_frame(t, "FunctionIDMapper", -1, true);
    store_arg(fr, "funcId", f);
    UINT_PTR r = g_mapper(f, hook);
    pop_frame(t, S_OK, false);
    return r;
}
UINT_PTR mapper2_wrap(FunctionID f, void* cd, BOOL* hook) {
    ThreadState& t = me();
    Frame* fr = push_frame(t, "FunctionIDMapper2", -1, true);
    store_arg(fr, "funcId", f);
    UINT_PTR r = g_mapper2(f, cd, hook);
    pop_frame(t, S_OK, false);
    return r;
}

// --- stack walks ----------------------------------------------------------------------------------------

struct WalkRelay {
    StackSnapshotCallback* callback;
    void* client;
    ULONG frames;
    std::vector<std::uint64_t>* ids;  // a marked thread's walk: the FunctionIDs delivered (truth.cpp)
    bool muted;                       // inside the profiler's signal handler: no frame recorded (ASYNC)
    WalkqSlot* walkq = nullptr;       // the walked thread's captured state (walkq.cpp), or null
};

// At most this many FunctionIDs of one walk are recorded (innermost first); "frameIdsCut" says more came.
constexpr std::size_t kMaxWalkIds = 256;

HRESULT walk_relay(FunctionID f, UINT_PTR ip, COR_PRF_FRAME_INFO fi, ULONG32 cs, BYTE ctx[], void* data) {
    auto* relay = static_cast<WalkRelay*>(data);
    ++relay->frames;
    walkq_frame(relay->walkq, f, ip);
    if (relay->ids && relay->ids->size() < kMaxWalkIds) relay->ids->push_back(f);
    if (relay->muted) {
        const int quiet = async_set_quiet(0);
        HRESULT hr = relay->callback ? relay->callback(f, ip, fi, cs, ctx, relay->client) : S_OK;
        async_set_quiet(quiet);
        return hr;
    }
    ThreadState& t = me();
    Frame* fr = push_frame(t, "StackSnapshotCallback", -2, true);
    store_arg(fr, "funcId", f);
    store_arg(fr, "ip", ip);
    const int quiet = async_set_quiet(0);  // the profiler's own callback (in a signal handler: noted)
    HRESULT hr;
    {
        OpenFrameInfo open(t, reinterpret_cast<std::uint64_t>(fi));
        hr = relay->callback ? relay->callback(f, ip, fi, cs, ctx, relay->client) : S_OK;
    }
    frame_info_returned(t, reinterpret_cast<std::uint64_t>(fi), f,
                        ThreadState::FrameInfoFrom::StackSnapshotCallback);
    async_set_quiet(quiet);
    pop_frame(t, hr, true);
    return hr;
}

// --- enumerators ----------------------------------------------------------------------------------------

std::mutex g_enum_mu;
std::set<const void*>* g_live_enums = new std::set<const void*>();

class ThreadEnumWrapper final : public ICorProfilerThreadEnum {
 public:
    explicit ThreadEnumWrapper(ICorProfilerThreadEnum* real) : real_(real) {
        std::lock_guard<std::mutex> lock(g_enum_mu);
        g_live_enums->insert(this);
    }
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        return query_one<ICorProfilerThreadEnum>(this, IID_ICorProfilerThreadEnum, riid, ppv);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        ULONG n = --refs_;
        if (n == 0) {
            {
                std::lock_guard<std::mutex> lock(g_enum_mu);
                g_live_enums->erase(this);
            }
            Json rec = Json::object();
            rec.set("name", "ICorProfilerThreadEnum::Release").set("args", Json::object().set("enumerator", Json::pointer(this)))
                .set("out", Json::object().set("refs", Json(0u))).set("hr", Json(0u));
            const void* caller = __builtin_return_address(0);
            rec.set("caller", Json::pointer(caller));
            if (g_trace_open.load()) {
                note_caller(caller);
                trace().write("call", rec);
            }
            real_->Release();
            delete this;
        }
        return n;
    }
    HRESULT STDMETHODCALLTYPE Skip(ULONG celt) override { return real_->Skip(celt); }
    HRESULT STDMETHODCALLTYPE Reset() override { return real_->Reset(); }
    HRESULT STDMETHODCALLTYPE Clone(ICorProfilerThreadEnum** pp) override {
        ICorProfilerThreadEnum* inner = nullptr;
        HRESULT hr = real_->Clone(&inner);
        if (pp) *pp = (hr == S_OK && inner) ? new ThreadEnumWrapper(inner) : inner;
        return hr;
    }
    HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) override { return real_->GetCount(pcelt); }
    HRESULT STDMETHODCALLTYPE Next(ULONG celt, ThreadID* ids, ULONG* fetched) override {
        return real_->Next(celt, ids, fetched);
    }

 private:
    ICorProfilerThreadEnum* real_;
    std::atomic<ULONG> refs_{1};
};

// --- the ICorProfilerInfo wrapper -----------------------------------------------------------------------

class InfoWrapper final : public InfoRecorderBase {
 public:
    explicit InfoWrapper(IUnknown* runtime_unk) : level_(query_levels(runtime_unk, kMaxInfoLevel, info_iid, real_)) {}
    int level() const { return level_; }
    void* real(int k) const { return real_[k]; }
    long refs() const { return refs_.load(); }
    // After ProfilerDetachSucceeded the runtime lets go of the profiler and its ICorProfilerInfo: a later call
    // through the wrapper is recorded (afterDetach) and answered E_NOINTERFACE, never handed to the runtime.
    void forget_runtime() {
        for (void*& r : real_) r = nullptr;
    }

    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        InfoScope s("QueryInterface", false, __builtin_return_address(0));
        s.arg("riid", riid);
        s.begin();
        if (!ppv) return s.finish(E_POINTER);
        if (riid == IID_IUnknown) {
            *ppv = static_cast<IUnknown*>(static_cast<ICorProfilerInfo*>(this));
            ++refs_;
            s.out_value("refs", Json(static_cast<std::int64_t>(refs_.load())));
            return s.finish(S_OK);
        }
        for (int k = 1; k <= kMaxInfoLevel; ++k) {
            if (riid == *info_iid(k)) {
                if (!real_[k]) {
                    *ppv = nullptr;
                    return s.finish(E_NOINTERFACE);
                }
                *ppv = static_cast<ICorProfilerInfo*>(this);  // one object, the newest vtable
                ++refs_;
                s.out_value("refs", Json(static_cast<std::int64_t>(refs_.load())));
                return s.finish(S_OK);
            }
        }
        // Not an Info interface: the runtime's own object answers (unwrapped).
        auto* real1 = static_cast<IUnknown*>(real_[1]);
        return s.finish(real1 ? real1->QueryInterface(riid, ppv) : E_NOINTERFACE);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return static_cast<ULONG>(++refs_); }
    ULONG STDMETHODCALLTYPE Release() override {
        long n = --refs_;
        if (n <= 0 && g_trace_open.load()) {
            // The profiler let go of its last reference: later calls use an interface it released.
            Json rec = Json::object();
            rec.set("name", "Release").set("args", Json::object()).set("out", Json::object().set("refs", Json(static_cast<std::int64_t>(n))))
                .set("hr", Json(0u));
            const void* caller = __builtin_return_address(0);
            rec.set("caller", Json::pointer(caller));
            flush_frames(me());
            note_caller(caller);
            trace().write("call", rec);
        }
        return n < 0 ? 0 : static_cast<ULONG>(n);
    }

    HRESULT STDMETHODCALLTYPE DoStackSnapshot(ThreadID thread, StackSnapshotCallback* callback, ULONG32 infoFlags,
                                              void* clientData, BYTE* context, ULONG32 contextSize) override {
        InfoScope s(static_cast<int>(InfoM::DoStackSnapshot), true, __builtin_return_address(0));
        s.snapshot_args(thread, callback, infoFlags, clientData, context, contextSize,
                        [this](std::uint64_t rip, FunctionID* fn) {
                            if (!real_[1]) return E_NOINTERFACE;
                            return static_cast<ICorProfilerInfo*>(real_[1])->GetFunctionFromIP(
                                reinterpret_cast<LPCBYTE>(rip), fn);
                        });
        s.begin();
        if (!real_[2]) return s.finish(E_NOINTERFACE);
        std::vector<std::uint64_t> ids;
        bool marked = false;
        if (!s.muted() && truth_any()) {
            ThreadID target = thread;
            if (!target) static_cast<ICorProfilerInfo*>(real_[1])->GetCurrentThreadID(&target);
            marked = target && truth_thread(target);
        }
        WalkRelay relay{callback, clientData, 0, marked ? &ids : nullptr, s.muted()};
        relay.walkq = walkq_begin(thread, infoFlags, context, contextSize, __builtin_return_address(0));
        HRESULT hr = static_cast<ICorProfilerInfo2*>(real_[2])->DoStackSnapshot(thread, &walk_relay, infoFlags,
                                                                                 &relay, context, contextSize);
        walkq_end(relay.walkq, hr);
        s.out_value("frameCount", Json(relay.frames));
        if (marked) {
            Json arr = Json::array();
            for (std::uint64_t id : ids) arr.push(Json(id));
            s.out_value("frameIds", arr);
            if (relay.frames > ids.size()) s.out_value("frameIdsCut", Json(true));
            truth_delivered(ids);
        }
        return s.finish(hr);
    }

    // SetEnterLeaveFunctionHooks2 and 3WithInfo (interface level Level): the runtime gets the proxy's wrappers
    // (each records its hook's frame, then calls the profiler's, kept in `kept`); a null hook stays null.
    // caller: the wrapper method's return address into the profiler.
    template <int Level, typename I, typename E, typename L, typename T>
    HRESULT set_wrapped_hooks(InfoM method, const void* caller, const char* suffix, HookSet<E, L, T> given,
                              HookSet<E, L, T>& kept, HookSet<E, L, T> wrappers,
                              HRESULT (STDMETHODCALLTYPE I::*set)(E*, L*, T*)) {
        InfoScope s(static_cast<int>(method), false, caller);
        record_hooks(s, suffix, reinterpret_cast<void*>(given.enter), reinterpret_cast<void*>(given.leave),
                     reinterpret_cast<void*>(given.tail));
        s.begin();
        if (!real_[Level]) return s.finish(E_NOINTERFACE);
        kept = given;
        return s.finish((static_cast<I*>(real_[Level])->*set)(given.enter ? wrappers.enter : nullptr,
                                                               given.leave ? wrappers.leave : nullptr,
                                                               given.tail ? wrappers.tail : nullptr));
    }

    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks(FunctionEnter* e, FunctionLeave* l,
                                                         FunctionTailcall* t) override {
        InfoScope s(static_cast<int>(InfoM::SetEnterLeaveFunctionHooks), false, __builtin_return_address(0));
        record_hooks(s, "", reinterpret_cast<void*>(e), reinterpret_cast<void*>(l), reinterpret_cast<void*>(t));
        s.begin();
        if (!real_[1]) return s.finish(E_NOINTERFACE);
        return s.finish(static_cast<ICorProfilerInfo*>(real_[1])->SetEnterLeaveFunctionHooks(e, l, t));
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks2(FunctionEnter2* e, FunctionLeave2* l,
                                                          FunctionTailcall2* t) override {
        return set_wrapped_hooks<2>(InfoM::SetEnterLeaveFunctionHooks2, __builtin_return_address(0), "", {e, l, t},
                                    g_hooks2, {&enter2_wrap, &leave2_wrap, &tail2_wrap},
                                    &ICorProfilerInfo2::SetEnterLeaveFunctionHooks2);
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks3(FunctionEnter3* e, FunctionLeave3* l,
                                                          FunctionTailcall3* t) override {
        // The fast-path hooks are called straight from JIT code and must keep every register: the runtime
        // gets hooks3.cpp's register-preserving trampolines around them (x64; elsewhere the hooks unwrapped).
        InfoScope s(static_cast<int>(InfoM::SetEnterLeaveFunctionHooks3), false, __builtin_return_address(0));
        record_hooks(s, "3", reinterpret_cast<void*>(e), reinterpret_cast<void*>(l), reinterpret_cast<void*>(t));
        s.args().set("wrapped", kFastHookTrampolines);
        s.begin();
        if (!real_[3]) return s.finish(E_NOINTERFACE);
        if constexpr (kFastHookTrampolines) {
            profharness_proxy_hook3_target[0] = reinterpret_cast<void*>(e);
            profharness_proxy_hook3_target[1] = reinterpret_cast<void*>(l);
            profharness_proxy_hook3_target[2] = reinterpret_cast<void*>(t);
            return s.finish(static_cast<ICorProfilerInfo3*>(real_[3])->SetEnterLeaveFunctionHooks3(
                e ? reinterpret_cast<FunctionEnter3*>(&profharness_proxy_enter3_tramp) : nullptr,
                l ? reinterpret_cast<FunctionLeave3*>(&profharness_proxy_leave3_tramp) : nullptr,
                t ? reinterpret_cast<FunctionTailcall3*>(&profharness_proxy_tail3_tramp) : nullptr));
        }
        return s.finish(static_cast<ICorProfilerInfo3*>(real_[3])->SetEnterLeaveFunctionHooks3(e, l, t));
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks3WithInfo(FunctionEnter3WithInfo* e, FunctionLeave3WithInfo* l,
                                                                  FunctionTailcall3WithInfo* t) override {
        return set_wrapped_hooks<3>(InfoM::SetEnterLeaveFunctionHooks3WithInfo, __builtin_return_address(0),
                                    "3WithInfo", {e, l, t}, g_hooks3i, {&enter3i_wrap, &leave3i_wrap, &tail3i_wrap},
                                    &ICorProfilerInfo3::SetEnterLeaveFunctionHooks3WithInfo);
    }
    HRESULT STDMETHODCALLTYPE SetFunctionIDMapper(FunctionIDMapper* f) override {
        InfoScope s(static_cast<int>(InfoM::SetFunctionIDMapper), false, __builtin_return_address(0));
        s.args().set("pFunc", hook_json(reinterpret_cast<void*>(f)));
        s.begin();
        g_mapper = f;
        if (!real_[1]) return s.finish(E_NOINTERFACE);
        return s.finish(static_cast<ICorProfilerInfo*>(real_[1])->SetFunctionIDMapper(f ? &mapper_wrap : nullptr));
    }
    HRESULT STDMETHODCALLTYPE SetFunctionIDMapper2(FunctionIDMapper2* f, void* cd) override {
        InfoScope s(static_cast<int>(InfoM::SetFunctionIDMapper2), false, __builtin_return_address(0));
        s.args().set("pFunc", hook_json(reinterpret_cast<void*>(f)));
        s.arg("clientData", cd);
        s.begin();
        if (!real_[3]) return s.finish(E_NOINTERFACE);
        g_mapper2 = f;
        return s.finish(static_cast<ICorProfilerInfo3*>(real_[3])->SetFunctionIDMapper2(f ? &mapper2_wrap : nullptr, cd));
    }
    // The event mask: the profiler's bits go on with the proxy's (mask.cpp); it is answered its own.
    HRESULT STDMETHODCALLTYPE GetEventMask(DWORD* pdwEvents) override {
        InfoScope s(static_cast<int>(InfoM::GetEventMask), false, __builtin_return_address(0));
        s.arg("pdwEvents", pdwEvents);
        s.begin();
        if (!real_[1]) return s.finish(E_NOINTERFACE);
        HRESULT hr = static_cast<ICorProfilerInfo*>(real_[1])->GetEventMask(pdwEvents);
        if (hr == S_OK && pdwEvents) *pdwEvents = answered_low(*pdwEvents);
        s.out("pdwEvents", pdwEvents);
        return s.finish(hr);
    }
    HRESULT STDMETHODCALLTYPE SetEventMask(DWORD dwEvents) override {
        InfoScope s(static_cast<int>(InfoM::SetEventMask), false, __builtin_return_address(0));
        s.arg("dwEvents", dwEvents);
        const std::uint32_t fwd = forwarded_low(dwEvents);
        if (fwd != dwEvents) s.field("forwardedLow", Json(static_cast<std::uint64_t>(fwd)));
        s.begin();
        if (!real_[1]) return s.finish(E_NOINTERFACE);
        HRESULT hr = static_cast<ICorProfilerInfo*>(real_[1])->SetEventMask(fwd);
        if (hr == S_OK) {
            mask().profiler_low.store(dwEvents);
            mask().profiler_high.store(0);  // SetEventMask clears the high mask
        }
        return s.finish(hr);
    }
    HRESULT STDMETHODCALLTYPE GetEventMask2(DWORD* pdwEventsLow, DWORD* pdwEventsHigh) override {
        InfoScope s(static_cast<int>(InfoM::GetEventMask2), false, __builtin_return_address(0));
        s.arg("pdwEventsLow", pdwEventsLow);
        s.arg("pdwEventsHigh", pdwEventsHigh);
        s.begin();
        if (!real_[5]) return s.finish(E_NOINTERFACE);
        HRESULT hr = static_cast<ICorProfilerInfo5*>(real_[5])->GetEventMask2(pdwEventsLow, pdwEventsHigh);
        if (hr == S_OK && pdwEventsLow) *pdwEventsLow = answered_low(*pdwEventsLow);
        s.out("pdwEventsLow", pdwEventsLow);
        s.out("pdwEventsHigh", pdwEventsHigh);
        return s.finish(hr);
    }
    HRESULT STDMETHODCALLTYPE SetEventMask2(DWORD dwEventsLow, DWORD dwEventsHigh) override {
        InfoScope s(static_cast<int>(InfoM::SetEventMask2), false, __builtin_return_address(0));
        s.arg("dwEventsLow", dwEventsLow);
        s.arg("dwEventsHigh", dwEventsHigh);
        const std::uint32_t fwd = forwarded_low(dwEventsLow);
        if (fwd != dwEventsLow) s.field("forwardedLow", Json(static_cast<std::uint64_t>(fwd)));
        s.begin();
        if (!real_[5]) return s.finish(E_NOINTERFACE);
        HRESULT hr = static_cast<ICorProfilerInfo5*>(real_[5])->SetEventMask2(fwd, dwEventsHigh);
        if (hr == S_OK) {
            mask().profiler_low.store(dwEventsLow);
            mask().profiler_high.store(dwEventsHigh);
        }
        return s.finish(hr);
    }
    HRESULT STDMETHODCALLTYPE EnumThreads(ICorProfilerThreadEnum** ppEnum) override {
        InfoScope s(static_cast<int>(InfoM::EnumThreads), false, __builtin_return_address(0));
        s.arg("ppEnum", ppEnum);
        s.begin();
        if (!real_[4]) return s.finish(E_NOINTERFACE);
        ICorProfilerThreadEnum* inner = nullptr;
        HRESULT hr = static_cast<ICorProfilerInfo4*>(real_[4])->EnumThreads(&inner);
        ICorProfilerThreadEnum* handed = (hr == S_OK && inner) ? new ThreadEnumWrapper(inner) : inner;
        if (ppEnum) *ppEnum = handed;
        s.out_value("enumerator", Json::pointer(handed));
        return s.finish(hr);
    }
    // The bodies a profiler reads and hands over (il_bodies.h, issue 25).
    HRESULT STDMETHODCALLTYPE GetILFunctionBody(ModuleID m, mdMethodDef d, LPCBYTE* header, ULONG* size) override {
        return il_get_body(static_cast<ICorProfilerInfo*>(real_[1]), m, d, header, size, __builtin_return_address(0));
    }
    HRESULT STDMETHODCALLTYPE GetILFunctionBodyAllocator(ModuleID m, IMethodMalloc** malloc) override {
        return il_get_allocator(static_cast<ICorProfilerInfo*>(real_[1]), m, malloc, __builtin_return_address(0));
    }
    HRESULT STDMETHODCALLTYPE SetILFunctionBody(ModuleID m, mdMethodDef d, LPCBYTE header) override {
        return il_set_body(static_cast<ICorProfilerInfo*>(real_[1]), m, d, header, __builtin_return_address(0));
    }

 private:
    int level_ = 0;
    std::atomic<long> refs_{0};
};

InfoWrapper* g_wrapper = nullptr;

// --- crash and hang reports -----------------------------------------------------------------------------

constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
struct sigaction g_previous[65];
int g_stack_signal = 0;

const char* signal_name(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGILL: return "SIGILL";
        case SIGFPE: return "SIGFPE";
        case SIGABRT: return "SIGABRT";
        default: return "signal";
    }
}

void chain(int sig, siginfo_t* si, void* uc) {
    const struct sigaction& old = g_previous[sig];
    if (old.sa_flags & SA_SIGINFO) {
        if (old.sa_sigaction) {
            old.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old.sa_handler == SIG_IGN) {
        return;
    } else if (old.sa_handler != SIG_DFL && old.sa_handler) {
        old.sa_handler(sig);
        return;
    }
    // Default action: restore it; returning re-runs the faulting instruction (abort raises again).
    signal(sig, SIG_DFL);
    if (si && si->si_code <= 0 && sig != SIGABRT) raise(sig);
}

// The crash record of a fault that is the profiler's (kept out of on_fault, so a fault that only passes
// through costs the alternate signal stack one small frame).
__attribute__((noinline)) void report_fault(int sig, const siginfo_t* si, ThreadState* t, void* pc,
                                            bool target_pc) {
    alarm(5);  // a report that deadlocks (heap corrupted) still ends the process
    if (t) t->tid_asked = true;
    void* ips[48];
    int n = backtrace(ips, 48);
    Json rec = Json::object();
    rec.set("name", "proxy.crash").set("payload", signal_name(sig));
    rec.set("signal", signal_name(sig)).set("signo", sig);
    rec.set("code", si ? si->si_code : 0).set("addr", Json::pointer(si ? si->si_addr : nullptr));
    rec.set("pc", Json::pointer(pc)).set("pcInProfiler", target_pc);
    rec.set("callbacks", t ? frames_json(*t) : Json::array());
    rec.set("call", t && t->current_call ? Json(t->current_call) : Json());
    rec.set("lastCallback", t && t->last_callback ? Json(t->last_callback) : Json());
    rec.set("shutdownReturned", g_shutdown_returned.load());
    rec.set("stack", native_stack_json(ips, n, pc));
    trace().write("mark", rec);
    perturb_write_delays();
    async_drain(true);  // what the profiler's signal handlers did up to the crash
    trace().flush();    // the records still buffered, before the process dies
}

// Runs first for every hardware fault, the runtime's own NullReferenceExceptions too, on the runtime's
// alternate signal stack (SA_ONSTACK): .NET 8 leaves no room there for one more signal frame, so this frame
// stays small when the fault is not the profiler's.
void on_fault(int sig, siginfo_t* si, void* uc) {
    ThreadState* t = me_if_known();
    void* pc = interrupted_pc(uc);
    const bool target_pc = in_target(pc);
    const bool ours = sig == SIGABRT || target_pc || (t && (t->depth > 0 || t->in_runtime > 0));
    if (ours && g_trace_open.load() && !g_crash_written.exchange(true)) report_fault(sig, si, t, pc, target_pc);
    chain(sig, si, uc);
}

// One thread's stack asked for by its OS thread id (threads the proxy never saw have no ThreadState): the
// asker sets g_stack_for, signals the thread and waits for g_stack_done.
std::atomic<long> g_stack_for{0};
void* g_stack_ips[48];
int g_stack_n = 0;
void* g_stack_pc = nullptr;  // the instruction the request's signal interrupted
std::atomic<int> g_stack_done{0};

void on_stack_request(int, siginfo_t*, void* uc) {
    void* pc = interrupted_pc(uc);
    const long self = static_cast<long>(::syscall(SYS_gettid));
    if (g_stack_for.load(std::memory_order_acquire) == self) {
        g_stack_n = backtrace(g_stack_ips, 48);
        g_stack_pc = pc;
        g_stack_done.store(1, std::memory_order_release);
        return;
    }
    ThreadState* t = me_if_known();
    if (!t) return;
    t->stack_n = backtrace(t->stack, 48);
    t->stack_pc = pc;
    t->stack_ready.store(1, std::memory_order_release);
}

}  // namespace

int stack_ips_of(long tid, void** out, int max, void** pc) {
    g_stack_done.store(0);
    g_stack_for.store(tid, std::memory_order_release);
    int n = 0;
    if (::syscall(SYS_tgkill, static_cast<long>(getpid()), tid, g_stack_signal) == 0) {
        for (int waited = 0; waited < 300 && !g_stack_done.load(std::memory_order_acquire); ++waited)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (g_stack_done.load(std::memory_order_acquire)) {
            n = std::min(g_stack_n, max);
            std::copy(g_stack_ips, g_stack_ips + n, out);
            if (pc) *pc = g_stack_pc;
        }
    }
    g_stack_for.store(0);
    return n;
}

namespace {

// The native stack of thread `tid` (signalled as the hang report does), or null when it did not answer
// within 300 ms.
Json stack_of(long tid) {
    void* ips[48];
    void* pc = nullptr;
    const int n = stack_ips_of(tid, ips, 48, &pc);
    return n > 0 ? native_stack_json(ips, n, pc) : Json();
}

void install_signal_handlers() {
    static bool done = false;
    if (done) return;
    done = true;
    void* prime[4];
    backtrace(prime, 4);  // loads the unwinder now, not in a signal handler
    for (int sig : kFaultSignals) {
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = &on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, &g_previous[sig]);
    }
    g_stack_signal = SIGRTMIN + 7;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &on_stack_request;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(g_stack_signal, &sa, nullptr);
}

// The watchdog's view of each registered thread (by registry index; the one watchdog thread alone touches it):
// its outermost open callback frame (keyed by ThreadState::busy_epoch) and its outermost ICorProfilerInfo call
// made outside any callback (keyed by its entry time, call_since), each with the tick that first saw it open.
// Both are timed from that tick, so a hang is reported at most one period late and never before its limit
// (a call's key is its coarse entry time: two calls of one thread within a few ms share it), and the two
// compare on one clock. Fixed arrays: nothing to destroy at exit under the detached watchdog.
struct SeenOpen {
    std::uint64_t key = 0;
    std::int64_t since = 0;
};
SeenOpen g_seen_frame[kMaxThreads];
SeenOpen g_seen_call[kMaxThreads];

// `seen` updated for `key` (0: nothing open) at tick `now`; the tick that first saw it open (0: none open).
std::int64_t seen_since(SeenOpen& seen, std::uint64_t key, std::int64_t now) {
    if (key == 0) seen = SeenOpen{};
    else if (seen.key != key) seen = SeenOpen{key, now};
    return seen.since;
}

// Thread k's outermost callback frame: the tick that first saw it open (0: none open).
std::int64_t busy_since(int k, const ThreadState& t, std::int64_t now) {
    return seen_since(g_seen_frame[k], t.busy_epoch.load(std::memory_order_relaxed), now);
}

// Thread k's outermost ICorProfilerInfo call made outside any callback: the tick that first saw it (0: none).
std::int64_t call_seen_since(int k, const ThreadState& t, std::int64_t now) {
    return seen_since(g_seen_call[k], static_cast<std::uint64_t>(t.call_since.load(std::memory_order_relaxed)),
                      now);
}

void report_hang(ThreadState* stuck, std::int64_t busy_ns, bool in_call) {
    ThreadRegistry& reg = registry();
    const int n = reg.size();
    const long pid = static_cast<long>(getpid());
    for (int k = 0; k < n; ++k) {
        ThreadState* t = reg.at(k);
        if (!t || !task_alive(t->os_tid)) continue;
        t->stack_ready.store(0);
        ::syscall(SYS_tgkill, pid, t->os_tid, g_stack_signal);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Json threads = Json::array();
    const long self = static_cast<long>(::syscall(SYS_gettid));
    for (int k = 0; k < n; ++k) {
        ThreadState* t = reg.at(k);
        if (!t || t->os_tid == self || !task_alive(t->os_tid)) continue;
        Json th = Json::object();
        th.set("osTid", Json(static_cast<std::int64_t>(t->os_tid)));
        th.set("tid", t->tid_known ? Json(t->managed_tid) : Json());
        th.set("callbacks", frames_json(*t));
        th.set("call", t->current_call ? Json(t->current_call) : Json());
        th.set("lastCallback", t->last_callback ? Json(t->last_callback) : Json());
        const std::int64_t now = now_coarse_ns();
        const std::int64_t since = busy_since(k, *t, now);
        th.set("busyMs", since ? Json((now - since) / 1000000) : Json());
        const std::int64_t call_since = t->call_since.load();
        th.set("callBusyMs", call_since ? Json((now - call_since) / 1000000) : Json());
        const bool ready = t->stack_ready.load(std::memory_order_acquire);
        th.set("stack", ready ? native_stack_json(t->stack, t->stack_n, t->stack_pc) : Json());
        threads.push(th);
    }
    Json rec = Json::object();
    rec.set("name", "proxy.hang").set("payload", Json());
    rec.set("stuckOsTid", Json(static_cast<std::int64_t>(stuck->os_tid)));
    rec.set("busyMs", Json(busy_ns / 1000000)).set("limitMs", Json(config().hang_ms));
    // what was open on the stuck thread: its outermost callback, or an ICorProfilerInfo call made outside any
    const char* open_name = nullptr;
    if (in_call) open_name = stuck->outer_call.load();
    else if (stuck->depth > 0) open_name = stuck->frames[0].name;
    rec.set("open", in_call ? "call" : "callback").set("openName", open_name ? Json(open_name) : Json());
    rec.set("threads", threads).set("otherThreads", Json(static_cast<std::int64_t>(task_ids().size())));
    trace().write("mark", rec);
    perturb_write_delays();
    trace().flush();
    ::kill(getpid(), SIGKILL);
}

void watchdog_loop() {
    const std::int64_t limit = static_cast<std::int64_t>(config().hang_ms) * 1000000LL;
    me().harness = true;  // it writes the signal-safety preload's notes: a ThreadState, not the profiler's
    const auto period = std::chrono::milliseconds(walkq_enabled() ? 10 : 100);  // walkq.cpp kSlots
    for (;;) {
        std::this_thread::sleep_for(period);
        async_poll();  // what the signal-safety preload noted; an injected deadlock
        walkq_drain(false);  // walks captured for --walk-quality
        ThreadRegistry& reg = registry();
        const int n = reg.size();
        const std::int64_t now = now_coarse_ns();
        // the thread open longest (a callback's frame, or an ICorProfilerInfo call made outside any callback:
        // on one thread the one that opened first, the outermost)
        ThreadState* worst = nullptr;
        std::int64_t worst_since = 0;
        bool worst_call = false;
        for (int k = 0; k < n; ++k) {
            ThreadState* t = reg.at(k);
            if (!t) continue;
            const std::int64_t since = busy_since(k, *t, now);
            const std::int64_t call = call_seen_since(k, *t, now);
            // on one thread an open call is the outermost: it began with no callback open (a callback open
            // beside it was made inside it, as RuntimeSuspendStarted inside SuspendRuntime)
            const bool is_call = call != 0;
            const std::int64_t first = is_call ? call : since;
            // across threads, first seen at the same tick: the callback (a call blocked behind a callback that
            // hangs, as SuspendRuntime waits for a thread inside one, is the usual case)
            if (first && (!worst || first < worst_since || (first == worst_since && worst_call && !is_call))) {
                worst = t;
                worst_since = first;
                worst_call = is_call;
            }
        }
        if (worst && now - worst_since > limit) report_hang(worst, now - worst_since, worst_call);
    }
}

// One watchdog per process (Initialize and InitializeForAttach each ask for it; its tables are its own).
void start_watchdog() {
    static std::once_flag once;
    std::call_once(once, [] { std::thread(watchdog_loop).detach(); });
}

// --- the callback object the runtime talks to -----------------------------------------------------------

class ProxyCallback final : public CallbackForwarderBase {
 public:
    bool attach(IUnknown* target) {
        level_ = query_levels(target, kMaxCallbackLevel, callback_iid, target_);
        return target_[2] != nullptr || target_[1] != nullptr;
    }
    int level() const { return level_; }

    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        if (riid == IID_IUnknown) {
            *ppv = static_cast<ICorProfilerCallback*>(this);
            AddRef();
            return S_OK;
        }
        for (int k = 1; k <= kMaxCallbackLevel; ++k) {
            if (riid == *callback_iid(k)) {
                if (!target_[k]) return E_NOINTERFACE;  // the runtime sees what the profiler implements
                *ppv = static_cast<ICorProfilerCallback*>(this);
                AddRef();
                return S_OK;
            }
        }
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        ULONG n = --refs_;
        if (n == 0) {
            // The runtime let the profiler go: so does the proxy (its references from QueryInterface).
            note("proxy.released", Json::object());
            for (int k = 1; k <= kMaxCallbackLevel; ++k)
                if (target_[k]) static_cast<IUnknown*>(target_[k])->Release();
        }
        return n;
    }

    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        write_header(unk);
        CallbackScope s(static_cast<int>(ProxyCb::Initialize), 1, true);
        s.arg("pICorProfilerInfoUnk", static_cast<void*>(unk));
        s.begin();
        std::set<long> before = task_ids();
        HRESULT hr = static_cast<ICorProfilerCallback*>(target_[1])->Initialize(
            g_wrapper ? static_cast<IUnknown*>(static_cast<ICorProfilerInfo*>(g_wrapper)) : unk);
        note_new_threads(before);
        mask_after_initialize(hr);  // still inside the runtime's Initialize: the immutable bits may be set
        if (config().hang_ms > 0) start_watchdog();
        return s.finish(hr);
    }
    // Attach (the runtime's diagnostics IPC AttachProfiler named the proxy): the profiler behind it gets
    // InitializeForAttach with the trigger's client data, the proxy records its mask (it adds none of its own
    // bits: the shadow heap needs COR_PRF_ENABLE_OBJECT_ALLOCATED, which an attached profiler cannot set) and
    // the threads it started, as after Initialize.
    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown* unk, void* data, UINT cb) override {
        g_initialize_for_attach_ns.store(now_ns());
        write_header(unk);
        CallbackScope s(static_cast<int>(ProxyCb::InitializeForAttach), 3, target_[3] != nullptr);
        s.arg("pCorProfilerInfoUnk", static_cast<void*>(unk));
        s.arg("pvClientData", data);
        s.arg("cbClientData", cb);
        s.begin();
        if (!target_[3]) return s.finish(E_NOINTERFACE);
        std::set<long> before = task_ids();
        HRESULT hr = static_cast<ICorProfilerCallback3*>(target_[3])->InitializeForAttach(
            static_cast<IUnknown*>(static_cast<ICorProfilerInfo*>(g_wrapper)), data, cb);
        note_new_threads(before);
        mask_after_attach(hr);
        if (config().hang_ms > 0 && hr >= 0) start_watchdog();
        return s.finish(hr);
    }
    HRESULT STDMETHODCALLTYPE ProfilerAttachComplete() override {
        const std::int64_t now = now_ns(), began = g_initialize_for_attach_ns.load();
        note("proxy.attach", Json::object()
                                 .set("initializeForAttachNs", Json(began))
                                 .set("attachCompleteNs", Json(now))
                                 .set("afterInitializeForAttachMs", Json(began ? (now - began) / 1000000 : 0)));
        CallbackScope s(static_cast<int>(ProxyCb::ProfilerAttachComplete), 3, target_[3] != nullptr);
        s.begin();
        if (!target_[3]) return s.finish(S_OK);
        std::set<long> before = task_ids();
        HRESULT hr = static_cast<ICorProfilerCallback3*>(target_[3])->ProfilerAttachComplete();
        note_new_threads(before);
        return s.finish(hr);
    }
    // Detach: once the profiler's ProfilerDetachSucceeded returned the runtime releases it and unloads its
    // library (the proxy: pinned in memory, see create_proxy, and the profiler behind it stays loaded by the
    // proxy's dlopen). From then on every call through the wrapper is recorded (afterDetach) and not handed to
    // the runtime; the proxy.detached mark names the profiler's threads still alive.
    HRESULT STDMETHODCALLTYPE ProfilerDetachSucceeded() override {
        HRESULT hr;
        {
            CallbackScope s(static_cast<int>(ProxyCb::ProfilerDetachSucceeded), 3, target_[3] != nullptr);
            s.begin();
            hr = s.finish(target_[3] ? static_cast<ICorProfilerCallback3*>(target_[3])->ProfilerDetachSucceeded()
                                     : S_OK);
        }
        g_detached.store(true);
        if (g_wrapper) g_wrapper->forget_runtime();
        g_real_info.store(nullptr);
        if (g_trace_open.load()) {
            Json threads = Json::array(), alive = Json::array();
            leftover_threads(alive, threads, "callsAfterDetach");
            Json rec = Json::object();
            rec.set("name", "proxy.detached").set("payload", Json());
            rec.set("profilerThreadsAlive", alive).set("threads", threads);
            trace().write("mark", rec);
        }
        return hr;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        HRESULT hr;
        {
            CallbackScope s(static_cast<int>(ProxyCb::Shutdown), 1, true);
            s.begin();
            hr = s.finish(static_cast<ICorProfilerCallback*>(target_[1])->Shutdown());
        }
        g_shutdown_returned.store(true);
        after_shutdown();
        return hr;
    }
    // The shadow heap's inputs (heap.cpp): fed whether or not the profiler asked for them, forwarded only when
    // it did. The batches of one GC are fed from the version the runtime makes for this profiler:
    // MovedReferences2/SurvivingReferences2 to one with ICorProfilerCallback4, the 32-bit versions (which
    // then repeat each batch) only to one without.
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        const std::uint64_t size = heap_allocated(objectId);
        const int id = static_cast<int>(ProxyCb::ObjectAllocated);
        CallbackScope s(id, 1, true, !(profiler_asked(id) || allocation_wanted(objectId, size)));
        if (s.hidden()) return s.hide();
        s.arg("objectId", objectId);
        s.arg("classId", classId);
        s.begin();
        return s.finish(static_cast<ICorProfilerCallback*>(target_[1])->ObjectAllocated(objectId, classId));
    }
    // The compilation tally's input (jit.cpp): counted whether or not the profiler asked for it. A
    // recompilation (tier-up, OSR) carries `compiledBefore`, the compilations of this FunctionID started
    // before it (REJIT-01: SetILFunctionBody on a function the JIT has compiled).
    // `compiledOk`: how many of them finished with success (jit_finished).
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID functionId, BOOL fIsSafeToBlock) override {
        const std::uint32_t before = jit_started(functionId);
        const std::uint32_t compiled = before ? jit_compiled(functionId) : 0;
        CallbackScope s(static_cast<int>(ProxyCb::JITCompilationStarted), 1, target_[1] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("functionId", functionId);
        s.arg("fIsSafeToBlock", fIsSafeToBlock);
        if (before) {
            s.arg("compiledBefore", before);
            s.arg("compiledOk", compiled);
        }
        s.begin();
        if (!target_[1]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback*>(target_[1])->JITCompilationStarted(functionId, fIsSafeToBlock));
    }
    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus,
                                                     BOOL fIsSafeToBlock) override {
        jit_finished(functionId, hrStatus);
        CallbackScope s(static_cast<int>(ProxyCb::JITCompilationFinished), 1, target_[1] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("functionId", functionId);
        s.arg("hrStatus", hrStatus);
        s.arg("fIsSafeToBlock", fIsSafeToBlock);
        s.begin();
        if (!target_[1]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback*>(target_[1])->JITCompilationFinished(functionId, hrStatus, fIsSafeToBlock));
    }
    // The profiler is given the proxy's function control (il_bodies.h, issue 25): its calls are recorded.
    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID moduleId, mdMethodDef methodId,
                                                 ICorProfilerFunctionControl* pFunctionControl) override {
        CallbackScope s(static_cast<int>(ProxyCb::GetReJITParameters), 4, target_[4] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("moduleId", moduleId);
        s.arg("methodId", methodId);
        s.arg("pFunctionControl", pFunctionControl);
        s.begin();
        if (!target_[4]) return s.finish(S_OK);
        ICorProfilerFunctionControl* control = il_wrap_control(pFunctionControl, moduleId, methodId);
        return s.finish(static_cast<ICorProfilerCallback4*>(target_[4])->GetReJITParameters(moduleId, methodId, control));
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        heap_gc_started(cGenerations, generationCollected);
        HRESULT hr = S_OK;
        {
            CallbackScope s(static_cast<int>(ProxyCb::GarbageCollectionStarted), 2, target_[2] != nullptr);
            if (s.hidden()) {
                hr = s.hide();
            } else {
                s.arg("cGenerations", cGenerations);
                s.arg("generationCollected", generationCollected);
                s.arg("reason", reason);
                s.begin();
                hr = s.finish(target_[2] ? static_cast<ICorProfilerCallback2*>(target_[2])->GarbageCollectionStarted(
                                               cGenerations, generationCollected, reason)
                                         : S_OK);
            }
        }
        heap_gc_started_returned();
        return hr;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        heap_gc_finished();
        CallbackScope s(static_cast<int>(ProxyCb::GarbageCollectionFinished), 2, target_[2] != nullptr);
        if (s.hidden()) return s.hide();
        s.begin();
        if (!target_[2]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback2*>(target_[2])->GarbageCollectionFinished());
    }
    HRESULT STDMETHODCALLTYPE MovedReferences(ULONG n, ObjectID* olds, ObjectID* news, ULONG* lens) override {
        if (!target_[4]) feed_moved(n, olds, news, lens);
        CallbackScope s(static_cast<int>(ProxyCb::MovedReferences), 1, true);
        if (s.hidden()) return s.hide();
        s.arg("cMovedObjectIDRanges", n);
        ranges_record("MovedReferences", n, olds, news, lens);
        s.begin();
        return s.finish(static_cast<ICorProfilerCallback*>(target_[1])->MovedReferences(n, olds, news, lens));
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID* olds, ObjectID* news, SIZE_T* lens) override {
        feed_moved(n, olds, news, lens);
        CallbackScope s(static_cast<int>(ProxyCb::MovedReferences2), 4, target_[4] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("cMovedObjectIDRanges", n);
        ranges_record("MovedReferences2", n, olds, news, lens);
        s.begin();
        if (!target_[4]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback4*>(target_[4])->MovedReferences2(n, olds, news, lens));
    }
    HRESULT STDMETHODCALLTYPE SurvivingReferences(ULONG n, ObjectID* starts, ULONG* lens) override {
        if (!target_[4]) feed_surviving(n, starts, lens);
        CallbackScope s(static_cast<int>(ProxyCb::SurvivingReferences), 2, target_[2] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("cSurvivingObjectIDRanges", n);
        s.arg("objectIDRangeStart", starts);
        s.arg("cObjectIDRangeLength", lens);
        s.begin();
        if (!target_[2]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback2*>(target_[2])->SurvivingReferences(n, starts, lens));
    }
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG n, ObjectID* starts, SIZE_T* lens) override {
        feed_surviving(n, starts, lens);
        CallbackScope s(static_cast<int>(ProxyCb::SurvivingReferences2), 4, target_[4] != nullptr);
        if (s.hidden()) return s.hide();
        s.arg("cSurvivingObjectIDRanges", n);
        s.arg("objectIDRangeStart", starts);
        s.arg("cObjectIDRangeLength", lens);
        s.begin();
        if (!target_[4]) return s.finish(S_OK);
        return s.finish(static_cast<ICorProfilerCallback4*>(target_[4])->SurvivingReferences2(n, starts, lens));
    }

 private:
    template <typename L>
    static void feed_moved(ULONG n, const ObjectID* olds, const ObjectID* news, const L* lens) {
        if (!lens) return;
        std::vector<std::uint64_t> l(lens, lens + n);
        heap_moved(n, olds, news, l.data());
    }
    template <typename L>
    static void feed_surviving(ULONG n, const ObjectID* starts, const L* lens) {
        if (!lens) return;
        std::vector<std::uint64_t> l(lens, lens + n);
        heap_surviving(n, starts, l.data());
    }

    template <typename L>
    void ranges_record(const char* name, ULONG n, ObjectID* olds, ObjectID* news, L* lens) {
        if (!g_trace_open.load()) return;
        // the calling thread (inside a GC) copies the three arrays packed (Json::uints: a memcpy each, no
        // Json per number); the writer thread formats them
        static_assert(sizeof(ObjectID) == sizeof(std::uint64_t));
        std::vector<std::uint64_t> l;
        if (lens) l.assign(lens, lens + n);
        Json rec = Json::object();
        rec.set("name", "proxy.ranges").set("payload", name).set("callback", name)
            .set("oldObjectIDRangeStart", Json::uints(reinterpret_cast<const std::uint64_t*>(olds), olds ? n : 0))
            .set("newObjectIDRangeStart", Json::uints(reinterpret_cast<const std::uint64_t*>(news), news ? n : 0))
            .set("cObjectIDRangeLength", Json::uints(l.data(), l.size()));
        trace().write("mark", std::move(rec));
    }

    void write_header(IUnknown* unk) {
        if (!g_wrapper && unk) g_wrapper = new InfoWrapper(unk);
        if (g_wrapper) g_real_info.store(g_wrapper->real(1));
        Json runtime = Json();
        if (g_wrapper && g_wrapper->real(3)) {
            USHORT id = 0, major = 0, minor = 0, build = 0, qfe = 0;
            COR_PRF_RUNTIME_TYPE type = 0;
            if (static_cast<ICorProfilerInfo3*>(g_wrapper->real(3))->GetRuntimeInformation(
                    &id, &type, &major, &minor, &build, &qfe, 0, nullptr, nullptr) == S_OK) {
                runtime = Json::object();
                runtime.set("clr_type", Json(static_cast<std::int64_t>(type))).set("major", Json(major))
                    .set("minor", Json(minor)).set("build", Json(build)).set("qfe", Json(qfe));
            }
        }
        Json rec = Json::object();
        rec.set("probe", "profharness-proxy 1").set("pid", Json(static_cast<std::int64_t>(getpid())));
        rec.set("runtime", runtime).set("context_size", Json(static_cast<std::uint64_t>(sizeof(AMD64Context))));
        rec.set("proxy", Json::object()
                             .set("target", g_target_path)
                             .set("clsid", guid_text(config().clsid))
                             .set("callbackLevel", Json(level_))
                             .set("infoLevel", Json(g_wrapper ? g_wrapper->level() : 0))
                             .set("hangMs", Json(static_cast<std::int64_t>(config().hang_ms))));
        trace().write("header", rec);
    }

    void note_new_threads(const std::set<long>& before) {
        for (long id : task_ids())
            if (!before.count(id)) g_profiler_threads->insert(id);
    }

    void after_shutdown() {
        if (!g_trace_open.load()) return;
        trace().write("counts", Json::object().set("counts", counts_json()).set("hooks", hook_counts())
                                    .set("hidden", hidden_counts_json()));
        Json alive = Json::array();
        Json threads = Json::array();
        leftover_threads(alive, threads, "callsAfterShutdown");
        Json leaks = Json::array();
        {
            std::lock_guard<std::mutex> lock(g_enum_mu);
            for (const void* e : *g_live_enums) leaks.push(Json::pointer(e));
        }
        truth_name_pending();  // the FunctionIDs marked threads' walks delivered, named
        walkq_drain(true);
        Json rec = Json::object();
        rec.set("name", "proxy.shutdown").set("payload", Json());
        rec.set("profilerThreadsAlive", alive).set("threads", threads).set("liveEnumerators", leaks);
        rec.set("heap", heap_json());
        rec.set("jit", jit_json());
        async_drain(true);
        rec.set("signals", async_summary_json());
        rec.set("infoRefs", Json(static_cast<std::int64_t>(g_wrapper ? g_wrapper->refs() : 0)));
        trace().write("mark", rec);
        perturb_write_delays();
        trace().write("end", Json::object());
        trace().flush();  // the run's records are in the file when Shutdown returns
    }

    // Threads the profiler started (during its construction, Initialize, InitializeForAttach or
    // ProfilerAttachComplete, or that called the runtime without ever being managed) that are still running
    // now (after Shutdown or ProfilerDetachSucceeded returned). One that is on its way out gets up to 50 ms to
    // finish (polled: a profiler without threads pays nothing). `calls`: the field naming, per thread, its
    // ICorProfilerInfo calls after that point.
    void leftover_threads(Json& alive, Json& threads, const char* calls_field) {
        const bool after_detach = std::strcmp(calls_field, "callsAfterDetach") == 0;
        const long self = static_cast<long>(::syscall(SYS_gettid));
        std::set<long> candidates(g_profiler_threads->begin(), g_profiler_threads->end());
        ThreadRegistry& reg = registry();
        for (int k = 0; k < reg.size(); ++k) {
            ThreadState* t = reg.at(k);
            if (!t) continue;
            if (t->harness) candidates.erase(t->os_tid);
            else if (!t->tid_known && !t->called_by_runtime) candidates.insert(t->os_tid);
            else candidates.erase(t->os_tid);  // a runtime thread that appeared while the profiler started
        }
        candidates.erase(self);
        // Perturbed (`validate --perturb`), the Shutdown point holds the runtime up to 300 ms longer while a
        // profiler thread still runs, so that a thread that goes on calling the API after Shutdown (a sampler
        // Shutdown neither stops nor joins) shows it in every run, not only when its tick falls before the
        // process ends; it ends at the thread's first such call.
        const int limit_ms = perturbing() && !after_detach ? 350 : 50;
        for (int waited_ms = 0;; waited_ms += 2) {
            bool any = false, called = false;
            for (long id : candidates) any = any || task_alive(id);
            for (int k = 0; k < reg.size() && waited_ms >= 50; ++k) {
                ThreadState* t = reg.at(k);
                called = called || (t && candidates.count(t->os_tid) && t->calls_after_shutdown.load() > 0);
            }
            if (!any || called || waited_ms >= limit_ms) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        for (long id : candidates) {
            if (!task_alive(id)) continue;
            alive.push(Json(static_cast<std::int64_t>(id)));
            std::int64_t calls = 0;
            for (int k = 0; k < reg.size(); ++k) {
                ThreadState* t = reg.at(k);
                if (t && t->os_tid == id) calls += after_detach ? t->calls_after_detach.load() : t->calls_after_shutdown.load();
            }
            Json th = Json::object();
            th.set("osTid", Json(static_cast<std::int64_t>(id))).set("stack", stack_of(id));
            th.set(calls_field, Json(calls));
            threads.push(th);
        }
    }

    Json hook_counts() {
        Json h = Json::object();
        for (int k = 0; k < kHookKinds; ++k)
            if (std::int64_t n = g_hook_counts[k].load()) h.set(kHookNames[k], Json(n));
        return h;
    }

    int level_ = 0;
    std::atomic<ULONG> refs_{0};

 public:
    std::set<long> startup_before_;
};

ProxyCallback* g_proxy = nullptr;

HRESULT create_proxy(REFIID riid, void** ppv) {
    if (g_proxy) return g_proxy->QueryInterface(riid, ppv);
    Config& cfg = config();
    const char* trace_path = std::getenv("PROFHARNESS_TRACE");
    if (trace_path && *trace_path) {
        std::string err;
        if (trace().open(trace_path, err)) {
            // buffered (issue 23): per-thread buffers, formatted and written by the writer thread;
            // PROFHARNESS_PROXY_TRACE_SYNC=1 keeps the synchronous writer (one write per record)
            const char* sync = std::getenv("PROFHARNESS_PROXY_TRACE_SYNC");
            if (!(sync && std::strcmp(sync, "1") == 0)) trace().start_writer();
            g_trace_open.store(true);
        } else std::fprintf(stderr, "profharness proxy: %s\n", err.c_str());
    }
    g_profiler_threads = new std::set<long>();
    install_signal_handlers();
    // Pinned: a runtime that detaches the profiler unloads its library (the proxy) once ProfilerDetachSucceeded
    // returned; the profiler behind it may still run code that calls the wrapper, and the proxy's signal
    // handlers must stay, so the proxy is never unmapped.
    {
        Dl_info self;
        if (dladdr(reinterpret_cast<void*>(&create_proxy), &self) && self.dli_fname)
            dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
    async_init();
    walkq_init(trace_path);
    if (cfg.target.empty()) {
        probe_error("PROFHARNESS_PROXY_TARGET is not set: no profiler to load", "DllGetClassObject");
        return E_FAIL;
    }
    if (!cfg.clsid_ok) {
        probe_error("PROFHARNESS_PROXY_CLSID is not a CLSID", "DllGetClassObject");
        return E_FAIL;
    }
    // PROFHARNESS_TRACE names the proxy's trace: a profiler behind it that reads the same variable (the
    // project's own probe does) gets PROFHARNESS_PROXY_TARGET_TRACE instead, or no trace path at all, so
    // the two never write one file. Set before the profiler is loaded, the variable exists already
    // (glibc replaces its slot in place).
    if (const char* theirs = std::getenv("PROFHARNESS_PROXY_TARGET_TRACE"); theirs && *theirs)
        ::setenv("PROFHARNESS_TRACE", theirs, 1);
    else
        ::unsetenv("PROFHARNESS_TRACE");
    std::set<long> before = task_ids();
    void* lib = dlopen(cfg.target.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        probe_error((std::string("cannot load the profiler: ") + (why ? why : "?")).c_str(), cfg.target.c_str());
        return E_FAIL;
    }
    g_target_path = cfg.target;
    g_target_mark.store(reinterpret_cast<MarkFn>(dlsym(lib, "profharness_mark")));
    g_target_mark_ids.store(reinterpret_cast<MarkIdsFn>(dlsym(lib, "profharness_mark_ids")));
    using GetClassObject = HRESULT (*)(REFCLSID, REFIID, void**);
    auto get = reinterpret_cast<GetClassObject>(dlsym(lib, "DllGetClassObject"));
    if (!get) {
        probe_error("the profiler exports no DllGetClassObject", cfg.target.c_str());
        return E_FAIL;
    }
    find_target_extent(reinterpret_cast<const void*>(get));
    IClassFactory* factory = nullptr;
    HRESULT hr = get(cfg.clsid, IID_IClassFactory, reinterpret_cast<void**>(&factory));
    if (hr != S_OK || !factory) {
        probe_error("DllGetClassObject refused the CLSID", cfg.target.c_str());
        return hr != S_OK ? hr : E_FAIL;
    }
    IUnknown* obj = nullptr;
    hr = factory->CreateInstance(nullptr, riid, reinterpret_cast<void**>(&obj));
    factory->Release();
    if (hr != S_OK || !obj) {
        probe_error("the profiler's class factory created no profiler", cfg.target.c_str());
        return hr != S_OK ? hr : E_FAIL;
    }
    auto* proxy = new ProxyCallback();
    if (!proxy->attach(obj)) {
        probe_error("the profiler implements no ICorProfilerCallback", cfg.target.c_str());
        return E_NOINTERFACE;
    }
    obj->Release();  // the proxy keeps the references its QueryInterface calls took
    for (long id : task_ids())
        if (!before.count(id)) g_profiler_threads->insert(id);
    g_proxy = proxy;
    return proxy->QueryInterface(riid, ppv);
}

}  // namespace

bool recording_enabled() { return g_trace_open.load(std::memory_order_relaxed); }
void* runtime_info_of(int level) {
    return g_wrapper && level >= 1 && level <= kMaxInfoLevel ? g_wrapper->real(level) : nullptr;
}
bool shutdown_returned() { return g_shutdown_returned.load(std::memory_order_relaxed); }
bool detached() { return g_detached.load(std::memory_order_relaxed); }
void* runtime_info() { return g_real_info.load(std::memory_order_relaxed); }

}  // namespace profharness::proxy

using namespace profharness;
using namespace profharness::proxy;

// The runtime loads the proxy as its profiler under whatever CLSID the harness chose (class_object with no
// CLSID of its own); the profiler behind it is named by PROFHARNESS_PROXY_TARGET and PROFHARNESS_PROXY_CLSID.
PROXY_EXPORT HRESULT DllGetClassObject(REFCLSID rclsid, REFIID riid, void** ppv) {
    return class_object<create_proxy>(nullptr, rclsid, riid, ppv);
}

// --- the probe's seat: scenarios P/Invoke these (docs/design.md); the proxy records their marks ---------

PROXY_EXPORT std::int32_t profharness_mark(const char16_t* name, const char16_t* payload) {
    std::int32_t rc = -1;
    if (g_trace_open.load()) {
        Json rec = Json::object();
        const std::string text = utf16_to_utf8(name ? name : u"");
        rec.set("name", text).set("payload", payload ? Json(utf16_to_utf8(payload)) : Json());
        trace().write("mark", rec);
        rc = 0;
        truth_mark(text);
    }
    if (MarkFn theirs = g_target_mark.load()) theirs(name, payload);
    return rc;
}

PROXY_EXPORT std::int64_t profharness_record_count(void) { return trace().count(); }

PROXY_EXPORT std::int32_t profharness_mark_ids(const char16_t* name, const std::int64_t* ids, std::int32_t count) {
    std::int32_t rc = -1;
    if (g_trace_open.load()) {
        Json list = Json::array();
        for (std::int32_t k = 0; ids && k < count; ++k) list.push(Json(ids[k]));
        Json rec = Json::object();
        rec.set("name", utf16_to_utf8(name ? name : u"")).set("payload", Json()).set("ids", list);
        trace().write("mark", rec);
        rc = 0;
    }
    if (MarkIdsFn theirs = g_target_mark_ids.load()) theirs(name, ids, count);
    return rc;
}

PROXY_EXPORT std::int32_t profharness_call_back(void (*fn)(void)) {
    if (!fn) return -1;
    fn();
    return 0;
}

// profharness_capture_spin: common/spin.cpp (the probe's, so a workload spins in the same code).
