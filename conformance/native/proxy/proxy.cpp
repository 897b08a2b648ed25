// The recording proxy (proxy.h): configuration, the trace, thread states, callback and call scopes.
#include "proxy.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "generated.h"

namespace profharness::proxy {

__attribute__((tls_model("initial-exec"))) thread_local ThreadState* tl_state = nullptr;

const char* const* const g_callback_names = kProxyCbNames;
const bool* const g_callback_lazy = kProxyCbLazy;
static_assert(static_cast<int>(ProxyCb::Count_) <= kCallbackSlots, "CallbackCounts holds every callback");

namespace {

Json frame_args(const Frame& f) {
    Json args = Json::object();
    for (int k = 0; k < f.nargs; ++k) {
        switch (f.arg_kinds[k]) {
            case ArgKind::Int:
                args.set(f.arg_names[k], Json(static_cast<std::int64_t>(f.arg_values[k])));
                break;
            default:
                args.set(f.arg_names[k], Json(f.arg_values[k]));
                break;
        }
    }
    return args;
}

void write_enter(ThreadState& t, Frame& f, int depth) {
    Json rec = Json::object();
    rec.set("name", f.name).set("phase", "enter").set("depth", depth).set("args", frame_args(f));
    if (f.count_id < 0) rec.set("hook", true);
    trace().write("callback", std::move(rec));
    f.written = true;
    (void)t;
}

Json managed_thread_json() {
    ThreadState& t = me();
    if (!t.tid_known && !t.tid_asked) {
        t.tid_asked = true;
        ThreadID tid = 0;
        auto* info = static_cast<ICorProfilerInfo*>(runtime_info());
        if (info && info->GetCurrentThreadID(&tid) == S_OK && tid != 0) {
            t.managed_tid = tid;
            t.tid_known = true;
        }
    }
    return t.tid_known ? Json(t.managed_tid) : Json();
}

}  // namespace

ThreadRegistry& registry() {
    static ThreadRegistry* r = new ThreadRegistry();
    return *r;
}

ThreadState& new_thread_state() {
    auto* t = new ThreadState();
    t->os_tid = static_cast<long>(::syscall(SYS_gettid));
    registry().add(t);
    tl_state = t;
    return *t;
}

std::int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::int64_t now_coarse_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

TraceWriter& trace() {
    static TraceWriter* w = new TraceWriter(&managed_thread_json);
    return *w;
}

Json counts_json() {
    std::int64_t sums[static_cast<int>(ProxyCb::Count_)] = {};
    PerThread<CallbackCounts>::for_each([&sums](const CallbackCounts& c) {
        for (int k = 0; k < static_cast<int>(ProxyCb::Count_); ++k) sums[k] += c.n[k].load(std::memory_order_relaxed);
    });
    Json counts = Json::object();
    for (int k = 0; k < static_cast<int>(ProxyCb::Count_); ++k)
        if (sums[k]) counts.set(kProxyCbNames[k], Json(sums[k]));
    return counts;
}

void flush_frames(ThreadState& t) {
    int n = t.depth < kMaxFrames ? t.depth : kMaxFrames;
    for (int k = 0; k < n; ++k)
        if (!t.frames[k].written) write_enter(t, t.frames[k], k + 1);
}

void write_return(const Frame& f, int depth, HRESULT hr, bool has_hr) {
    Json rec = Json::object();
    rec.set("name", f.name).set("phase", "return").set("depth", depth);
    if (has_hr) rec.set("hr", Json(static_cast<std::uint32_t>(hr)));
    if (f.count_id < 0) rec.set("hook", true);
    trace().write("callback", std::move(rec));
}

// --- CallbackScope ---------------------------------------------------------------------------------------

HRESULT CallbackScope::hide() {
    finished_ = true;
    return id_ == static_cast<int>(ProxyCb::ObjectReferences) ? E_FAIL : S_OK;
}

// --- InfoScope -------------------------------------------------------------------------------------------

InfoScope::InfoScope(int id, bool two_phase, const void* caller) : InfoScope(kInfoNames[id], two_phase, caller) {}

InfoScope::InfoScope(const char* name, bool two_phase, const void* return_address)
    : HandlerCheck(name, return_address), name_(name), two_phase_(two_phase) {
    if (in_handler()) {  // inside the profiler's signal handler: forwarded only, nothing allocated or locked
        muted_ = true;
        if (ThreadState* known = me_if_known()) {  // the lock-free counts still hold (a thread never seen: none)
            if (shutdown_returned()) known->calls_after_shutdown.fetch_add(1, std::memory_order_relaxed);
            if (detached()) known->calls_after_detach.fetch_add(1, std::memory_order_relaxed);
        }
        return;
    }
    t_ = &me();
    outermost_call_ = t_->in_runtime == 0 && t_->depth == 0;
    prev_call_ = t_->current_call;
    t_->current_call = name;
    ++t_->in_runtime;
    if (outermost_call_) {  // a call outside any callback: the hang watchdog times it
        t_->outer_call.store(name, std::memory_order_relaxed);
        t_->call_since.store(now_coarse_ns(), std::memory_order_relaxed);
    }
    if (shutdown_returned()) t_->calls_after_shutdown.fetch_add(1, std::memory_order_relaxed);
    if (detached()) {
        t_->calls_after_detach.fetch_add(1, std::memory_order_relaxed);
        field("afterDetach", true);
    }
    caller(return_address);
    if (recording_enabled() && !in_handler()) note_caller(return_address);
}

void InfoScope::inspect(std::uint64_t object_id) {
    if (muted_) return;
    const bool in_gc = heap_in_gc();
    if (in_gc) field("inGc", true);
    if (!heap_enabled()) return;
    HeapClassification c = heap_classify(object_id, in_gc);
    if (c.verdict == HeapVerdict::Object) return;
    two_phase_ = true;
    Json heap = Json::object();
    heap.set("verdict", heap_verdict_name(c.verdict));
    heap.set("objectStart", c.verdict == HeapVerdict::Unknown ? Json() : Json(c.object_start));
    heap.set("offset", c.verdict == HeapVerdict::Interior ? Json(c.offset) : Json());
    field("heap", std::move(heap));
}

void InfoScope::frame_info(std::uint64_t frame_info) {
    if (muted_ || frame_info == 0) return;
    const int open = std::min(t_->open_frame_info_n, ThreadState::kOpenFrameInfos);
    if (t_->open_frame_info_n > open) return;  // more open than kept: it may be one of them
    for (int k = 0; k < open; ++k)
        if (t_->open_frame_infos[k] == frame_info) return;
    const std::uint64_t kept = t_->returned_kept();
    for (std::uint64_t k = 1; k <= kept; ++k) {  // the newest first
        const auto& r = t_->returned_ago(k);
        if (r.frame_info != frame_info) continue;
        std::uint64_t ago = 0;  // how many of its kind went out of use since, itself included
        for (std::uint64_t i = 1; i <= k; ++i)
            if (t_->returned_ago(i).from == r.from) ++ago;
        two_phase_ = true;  // its enter record survives a crash inside the runtime
        field("staleFrameInfo", Json::object()
                                    .set("hook", frame_info_holder(r.from))
                                    .set("funcId", Json(r.function))
                                    .set("returnedAgo", Json(ago)));
        return;
    }
}

void InfoScope::frame_info_given(const COR_PRF_FRAME_INFO* frame_info, FunctionID function, HRESULT hr) {
    if (muted_ || hr < 0 || frame_info == nullptr || *frame_info == 0) return;
    const auto value = static_cast<std::uint64_t>(*frame_info);
    if (t_->handed) {
        t_->handed->frame_info = value;
        t_->handed->function = function;
    }
    const std::uint64_t kept = t_->returned_kept();
    for (std::uint64_t k = 1; k <= kept; ++k)
        if (t_->returned_ago(k).frame_info == value) t_->returned_ago(k).frame_info = 0;
}

void InfoScope::begin() {
    if (muted_) return;
    // a call the profiler makes while its Initialize runs, on that thread (outermost): perturbed
    if (t_->in_runtime == 1 && t_->depth >= 1 && t_->frames[0].name &&
        (t_->frames[0].count_id == static_cast<int>(ProxyCb::Initialize) ||
         t_->frames[0].count_id == static_cast<int>(ProxyCb::InitializeForAttach)))
        perturb_initialize_call();
    if (!recording_enabled() || in_handler()) return;
    flush_frames(*t_);
    if (two_phase_) trace().write("call", enter_record(name_));
}

HRESULT InfoScope::finish(HRESULT hr) {
    if (muted_) return hr;
    --t_->in_runtime;
    t_->current_call = prev_call_;
    if (outermost_call_) {
        t_->call_since.store(0, std::memory_order_relaxed);
        t_->outer_call.store(nullptr, std::memory_order_relaxed);
    }
    if (!recording_enabled() || in_handler()) return hr;
    trace().write("call", call_record(name_, two_phase_, hr, shutdown_returned()));
    return hr;
}

}  // namespace profharness::proxy
