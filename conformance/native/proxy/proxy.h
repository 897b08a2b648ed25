// The recording proxy (issue 10): a profiler the runtime loads that loads a third-party profiler behind
// it, forwards every callback to it and hands it an ICorProfilerInfo wrapper that records every call.
// The recording is a profharness trace (docs/design.md) with edges: callback records carry
// "phase":"enter"/"return", two-phase calls likewise, other calls one record after they return.
//
// What each thread is doing is kept in a ThreadState (thread-local, registered once): the callbacks and
// hooks open on it (a stack of frames), whether it is inside a runtime call. High-volume callbacks and
// hooks are "lazy": counted, and written only when the profiler calls the runtime inside them, so that
// a call is always recorded inside the callback it was made in.
//
// The shadow heap (heap.cpp, profharness/shadow_heap.h): the proxy asks the runtime for allocation and GC
// events itself (mask.cpp: bits OR-ed into the profiler's event mask after its Initialize) and hides from the
// profiler the callbacks only those bits enable (counted as "hidden", not forwarded, not written); every
// ObjectID an `inspects` method is given is judged against it before the call goes on (InfoScope::inspect).
// Every recorded call carries its caller (the return address into the profiler); modules.cpp names each
// module a caller falls in once (a proxy.module mark).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/json.h"
#include "profharness/record_scope.h"
#include "profharness/shadow_heap.h"
#include "profharness/trace.h"
#include "profharness/types.h"

// hooks3.cpp: the trampolines the runtime is given in place of the profiler's fast-path hooks (x64), the
// hooks they call (index: 0 enter, 1 leave, 2 tailcall), and the two functions they call around each
// (objects.cpp), which open and close the hook's frame on the calling thread.
extern "C" {
extern void* profharness_proxy_hook3_target[3];
void profharness_proxy_enter3_tramp();
void profharness_proxy_leave3_tramp();
void profharness_proxy_tail3_tramp();
void profharness_proxy_hook3_begin(int kind, std::uintptr_t id);
void profharness_proxy_hook3_end();
}

namespace profharness {

#if defined(__x86_64__)
inline constexpr bool kFastHookTrampolines = true;
#else
inline constexpr bool kFastHookTrampolines = false;
#endif

// ICorProfilerInfo12..14 structs the probe never needs (clr_model/api/interfaces.txt names them by elaborated
// type).
struct COR_PRF_EVENTPIPE_PROVIDER_CONFIG {
    const WCHAR* providerName;
    std::uint64_t keywords;
    std::uint32_t loggingLevel;
    const WCHAR* filterData;
};

namespace proxy {

inline constexpr int kMaxFrames = 16;  // callbacks/hooks open on one thread that the proxy tracks
inline constexpr int kMaxArgs = 16;
inline constexpr int kMaxThreads = 4096;

enum class ArgKind : std::uint8_t { Int, UInt, Pointer };

struct Frame {
    const char* name;        // the callback or hook
    int count_id;            // index into the callback counters, -1 for hooks and mappers, -2 for
                             // StackSnapshotCallback
    bool written;            // its enter record is in the trace
    std::int64_t entered_ns;
    int nargs;
    const char* arg_names[kMaxArgs];
    std::uint64_t arg_values[kMaxArgs];
    ArgKind arg_kinds[kMaxArgs];
};

struct ThreadState {
    long os_tid = 0;
    int depth = 0;                 // frames open (may exceed kMaxFrames: only the first are kept)
    Frame frames[kMaxFrames];
    int in_runtime = 0;            // inside an ICorProfilerInfo call made through the wrapper
    const char* last_callback = nullptr;  // the last callback that returned on this thread
    bool called_by_runtime = false;       // the runtime called a callback, hook or mapper on it
    bool harness = false;                 // the proxy's own thread (the watchdog): never the profiler's
    const char* current_call = nullptr;   // the Info method the thread is inside
    // The outermost open frame, for the hang watchdog: 0 while none is open, else a number new to each outermost
    // entry on this thread (outer_entries, the thread's own count). The watchdog times a frame from the first
    // tick that sees its number: no clock is read on a callback's path (issue 23).
    std::atomic<std::uint64_t> busy_epoch{0};
    std::uint64_t outer_entries = 0;
    // entry time of the outermost ICorProfilerInfo call made outside any callback (0: none): the hang
    // watchdog's other clock (a profiler thread stuck in SuspendRuntime)
    std::atomic<std::int64_t> call_since{0};
    std::atomic<const char*> outer_call{nullptr};   // that call's name
    std::atomic<std::int64_t> calls_after_shutdown{0};  // ICorProfilerInfo calls made after Shutdown returned
    std::atomic<std::int64_t> calls_after_detach{0};  // ... after ProfilerDetachSucceeded returned
    // managed ThreadID cache
    std::uint64_t managed_tid = 0;
    bool tid_known = false;
    bool tid_asked = false;
    // COR_PRF_FRAME_INFO values: those the hooks and walk callbacks open on this thread were given (a value
    // past kOpenFrameInfos is not kept: none is judged stale then), the one GetFunction*3Info handed out
    // inside each WithInfo hook open on it (`handed`, innermost first), and the last kReturnedFrameInfos that
    // went out of use (a ring, the newest last): a FunctionEnter2 hook's when it returned (FE2-05), a
    // StackSnapshotCallback's when that callback returned (SSC-01), a GetFunction*3Info answer when its
    // WithInfo hook returned (FE3-01..03), each with the FunctionID it came with. A value the runtime hands
    // out (GetFunction*3Info's out-value) leaves the ring, so a hook's own is never held stale.
    static constexpr int kOpenFrameInfos = 16;
    static constexpr int kReturnedFrameInfos = 32;
    std::uint64_t open_frame_infos[kOpenFrameInfos] = {};
    int open_frame_info_n = 0;
    enum class FrameInfoFrom : std::uint8_t {
        FunctionEnter2,
        StackSnapshotCallback,
        FunctionEnter3WithInfo,
        FunctionLeave3WithInfo,
        FunctionTailcall3WithInfo,
    };
    struct HandedFrameInfo {
        FrameInfoFrom hook;
        std::uint64_t frame_info = 0;  // the last GetFunction*3Info inside the hook handed out (0: none)
        std::uint64_t function = 0;    // the FunctionID that call was given
        HandedFrameInfo* outer = nullptr;
    };
    HandedFrameInfo* handed = nullptr;
    struct ReturnedFrameInfo {
        std::uint64_t frame_info;
        std::uint64_t function;
        FrameInfoFrom from;
    };
    ReturnedFrameInfo returned_frame_infos[kReturnedFrameInfos] = {};
    std::uint64_t returned_frame_info_n = 0;  // how many ever went out of use (next slot: n % kReturnedFrameInfos)
    // How many entries the ring holds, and the k-th newest of them (1: the newest; k <= returned_kept()).
    std::uint64_t returned_kept() const {
        return std::min(returned_frame_info_n, static_cast<std::uint64_t>(kReturnedFrameInfos));
    }
    ReturnedFrameInfo& returned_ago(std::uint64_t k) {
        return returned_frame_infos[(returned_frame_info_n - k) % kReturnedFrameInfos];
    }
    // native stack captured on request (hang report)
    void* stack[48];
    int stack_n = 0;
    void* stack_pc = nullptr;  // where the request's signal interrupted the thread
    std::atomic<int> stack_ready{0};
};

// A COR_PRF_FRAME_INFO a hook or walk callback was given: open on this thread while the scope lives (FE2-05).
class OpenFrameInfo {
 public:
    OpenFrameInfo(ThreadState& t, std::uint64_t frame_info) : t_(t) {
        if (t_.open_frame_info_n < ThreadState::kOpenFrameInfos)
            t_.open_frame_infos[t_.open_frame_info_n] = frame_info;
        ++t_.open_frame_info_n;
    }
    ~OpenFrameInfo() { --t_.open_frame_info_n; }
    OpenFrameInfo(const OpenFrameInfo&) = delete;
    OpenFrameInfo& operator=(const OpenFrameInfo&) = delete;

 private:
    ThreadState& t_;
};

// The hook or walk callback that was given `frame_info` has returned: the value is no longer valid (FE2-05,
// SSC-01, FE3-01..03), kept with its FunctionID. A walk callback's value equal to the newest entry, also a
// walk callback's, only updates it (a walk's callbacks are often given one address for every frame); every
// hook's is an entry of its own (`returnedAgo` counts hooks).
inline void frame_info_returned(ThreadState& t, std::uint64_t frame_info, std::uint64_t function,
                                ThreadState::FrameInfoFrom from) {
    if (frame_info == 0) return;
    if (from == ThreadState::FrameInfoFrom::StackSnapshotCallback && t.returned_frame_info_n > 0) {
        auto& newest = t.returned_ago(1);
        if (newest.frame_info == frame_info && newest.from == from) {
            newest.function = function;
            return;
        }
    }
    ++t.returned_frame_info_n;
    t.returned_ago(1) = {frame_info, function, from};
}

// The name of a frame info's holder, as `staleFrameInfo` says it.
inline const char* frame_info_holder(ThreadState::FrameInfoFrom from) {
    switch (from) {
        case ThreadState::FrameInfoFrom::FunctionEnter2: return "FunctionEnter2";
        case ThreadState::FrameInfoFrom::StackSnapshotCallback: return "StackSnapshotCallback";
        case ThreadState::FrameInfoFrom::FunctionEnter3WithInfo: return "FunctionEnter3WithInfo";
        case ThreadState::FrameInfoFrom::FunctionLeave3WithInfo: return "FunctionLeave3WithInfo";
        case ThreadState::FrameInfoFrom::FunctionTailcall3WithInfo: return "FunctionTailcall3WithInfo";
    }
    return "?";
}

// A WithInfo hook of the profiler's runs: the frame info GetFunction*3Info hands out inside it is valid while
// it runs and goes out of use when it returns (FE3-01..03).
class HandedFrameInfoScope {
 public:
    HandedFrameInfoScope(ThreadState& t, ThreadState::FrameInfoFrom hook) : t_(t) {
        mine_.hook = hook;
        mine_.outer = t_.handed;
        t_.handed = &mine_;
    }
    ~HandedFrameInfoScope() {
        t_.handed = mine_.outer;
        frame_info_returned(t_, mine_.frame_info, mine_.function, mine_.hook);
    }
    HandedFrameInfoScope(const HandedFrameInfoScope&) = delete;
    HandedFrameInfoScope& operator=(const HandedFrameInfoScope&) = delete;

 private:
    ThreadState& t_;
    ThreadState::HandedFrameInfo mine_{};
};

// What every callback, hook and call runs: always inlined (issue 23: as out-of-line calls they were a third of
// the proxy's cost per callback on the callback-heavy workload of bench/proxy.py).
#define PROFHARNESS_HOT __attribute__((always_inline)) inline

// The calling thread's state (made by its first call), inline: every callback, hook and call asks for it.
extern __attribute__((tls_model("initial-exec"))) thread_local ThreadState* tl_state;
ThreadState& new_thread_state();  // makes and registers the calling thread's
PROFHARNESS_HOT ThreadState& me() {
    if (ThreadState* t = tl_state) return *t;
    return new_thread_state();
}
inline ThreadState* me_if_known() { return tl_state; }  // null when this thread never touched the proxy
std::int64_t now_ns();
// CLOCK_MONOTONIC_COARSE (a few ms of resolution, a fraction of now_ns's cost): the hang watchdog's clock
// (its ticks; call_since, read once per outermost ICorProfilerInfo call made outside any callback)
std::int64_t now_coarse_ns();
TraceWriter& trace();
bool recording_enabled();      // the trace is open
bool shutdown_returned();      // the profiler's Shutdown has returned
bool detached();               // the profiler's ProfilerDetachSucceeded has returned (the runtime let it go)
void* runtime_info();          // the runtime's own ICorProfilerInfo (never the wrapper), or null
void* runtime_info_of(int level);  // the runtime's own ICorProfilerInfo<level>, or null
Json counts_json();

// Every ThreadState ever made (never freed), for the hang report and the crash handler.
class ThreadRegistry {
 public:
    void add(ThreadState* t) {
        int k = n_.load();
        while (k < kMaxThreads && !n_.compare_exchange_weak(k, k + 1)) {
        }
        if (k < kMaxThreads) slots_[k].store(t, std::memory_order_release);
    }
    int size() const { int n = n_.load(); return n < kMaxThreads ? n : kMaxThreads; }
    ThreadState* at(int k) const { return slots_[k].load(std::memory_order_acquire); }

 private:
    std::atomic<int> n_{0};
    std::atomic<ThreadState*> slots_[kMaxThreads] = {};
};
ThreadRegistry& registry();

// One T per thread, made by the thread's first mine() and listed (never freed: callbacks may race the
// process's end): what a hot path counts or logs without a locked instruction (issue 23), one writer each;
// for_each visits every thread's under the list's mutex (sums, folds).
template <typename T>
class PerThread {
 public:
    PROFHARNESS_HOT static T& mine() {
        if (T* t = tl_) return *t;
        return make();
    }
    template <typename F>
    static void for_each(F&& f) {
        std::lock_guard<std::mutex> lock(mu());
        for (T* t : all()) f(*t);
    }

 private:
    __attribute__((noinline)) static T& make() {
        auto* t = new T();
        std::lock_guard<std::mutex> lock(mu());
        all().push_back(t);
        tl_ = t;
        return *t;
    }
    static std::mutex& mu() {
        static auto* m = new std::mutex();
        return *m;
    }
    static std::vector<T*>& all() {
        static auto* v = new std::vector<T*>();
        return *v;
    }
    __attribute__((tls_model("initial-exec"))) static inline thread_local T* tl_ = nullptr;
};

// --- the event mask (mask.cpp) ---------------------------------------------------------------------------
// The bits the proxy adds (COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED,
// each one the profiler's own mask lacks), set after the profiler's Initialize returned successfully; the
// profiler's own mask as it last set it.
struct MaskState {
    std::atomic<std::uint32_t> profiler_low{0}, profiler_high{0};
    std::atomic<std::uint32_t> added_low{0};
    std::atomic<bool> initialized{false};  // the profiler's Initialize returned
    std::atomic<bool> jit_monitored{false};  // the runtime makes JITCompilationStarted (the tally is whole)
};
MaskState& mask();
// After the profiler's Initialize returned `hr` (still inside the runtime's Initialize): read its mask, add
// the proxy's bits, write the proxy.mask mark, start the shadow heap when the runtime took them.
void mask_after_initialize(HRESULT hr);
// After the profiler's InitializeForAttach returned `hr`: read its mask and write the proxy.mask mark ("attach":
// true); the proxy adds no bits (the shadow heap's COR_PRF_ENABLE_OBJECT_ALLOCATED cannot be set after attach).
void mask_after_attach(HRESULT hr);
// Whether the runtime would make callback `cb` (ProxyCb) with the profiler's own mask: false only for a
// callback the proxy's added bits alone enable.
bool profiler_asked(int cb);
// The low mask forwarded for a profiler's SetEventMask(2)(low): its bits and the proxy's.
std::uint32_t forwarded_low(std::uint32_t low);
// What the profiler's GetEventMask(2) answers: the runtime's mask without the bits only the proxy wanted.
std::uint32_t answered_low(std::uint32_t runtime_low);
// ObjectAllocated for a profiler that asked only for the high mask's large / pinned object allocations:
// whether this object is one of those.
bool allocation_wanted(std::uint64_t id, std::uint64_t size);
void hidden_callback(int cb);
Json hidden_counts_json();

// --- the shadow heap (heap.cpp) --------------------------------------------------------------------------
bool heap_enabled();
void heap_start();  // the proxy's events are on: feed the heap from now on
// ObjectAllocated: the size from GetObjectSize2 (0 when it fails); returns the size.
std::uint64_t heap_allocated(std::uint64_t id);
// GarbageCollectionStarted: the generations collected and GetGenerationBounds now.
void heap_gc_started(int n, const BOOL* collected);
void heap_gc_started_returned();  // a GC is in progress from here (inGc) ...
void heap_moved(ULONG n, const ObjectID* olds, const ObjectID* news, const std::uint64_t* lens);
void heap_surviving(ULONG n, const ObjectID* starts, const std::uint64_t* lens);
void heap_gc_finished();  // ... to here (GarbageCollectionFinished's entry): apply the GC
bool heap_in_gc();
// The verdict on an ObjectID a profiler hands to an `inspects` method (counted).
HeapClassification heap_classify(std::uint64_t id, bool in_gc);
Json heap_json();  // the proxy.shutdown mark's "heap"

// --- the compilation tally (jit.cpp) ----------------------------------------------------------------------
// JITCompilationStarted (before it is forwarded or hidden): counts it for its FunctionID; a recompilation
// made with the method on this thread's stack is an OSR transition (a proxy.osr mark).
// Returns how many compilations of `function` started before this one (0: its first).
std::uint32_t jit_started(std::uint64_t function);
// JITCompilationFinished: a success hrStatus counts a compiled version of `function` (REJIT-01: a start after a
// halted or failed one is no recompilation, the JITCompilationStarted page's class-constructor case).
void jit_finished(std::uint64_t function, HRESULT status);
// How many compilations of `function` finished with success so far.
std::uint32_t jit_compiled(std::uint64_t function);
// A FunctionID naming (module, methodDef) whose compilation finished with success (0: none): the method's IL
// has been compiled, for that FunctionID or another instantiation sharing it (REJIT-01).
std::uint64_t jit_method_compiled(std::uint64_t module, std::uint32_t token);
Json jit_json();  // the proxy.shutdown mark's "jit"

// --- ground truth (truth.cpp) -------------------------------------------------------------------------------
// A mark (profharness_mark) that PROFHARNESS_PROXY_GROUND_TRUTH names: the calling managed thread becomes a
// marked thread; the FunctionIDs delivered so far are named (a proxy.functions mark).
void truth_mark(const std::string& name);
bool truth_any();                          // some thread is marked
bool truth_thread(std::uint64_t thread);   // this ThreadID is marked
void truth_delivered(const std::vector<std::uint64_t>& ids);  // a marked thread's walk delivered these
void truth_name_pending();                 // names them (a proxy.functions mark); also before proxy.shutdown

// --- callers (modules.cpp) -------------------------------------------------------------------------------
// Names the module `ip` falls in with a proxy.module mark the first time an address falls outside every
// module named so far.
void note_caller(const void* ip);

// --- perturbation (perturb.cpp, perturb.h: `validate --perturb SEED`) ----------------------------------
// Each delays the calling thread when the seeded schedule says so (no-ops when not perturbing).
bool perturbing();
// Perturbing (perturbing(), read once, at load): without it the callback points below do nothing, and a
// callback's scope does not call them
extern const bool g_perturb_configured;
void perturb_callback_enter(int cb);   // a callback about to be forwarded (ProxyCb)
void perturb_callback_return(int cb);  // the profiler's callback returned
void perturb_initialize_call();        // a call the profiler makes during its Initialize, on that thread
void perturb_write_delays();           // the proxy.perturb.delays mark (once; at the end of the run)

// --- the signal-safety preload (async.cpp, profharness/preload.h) ----------------------------------------
void async_init();        // finds the preload (LD_PRELOAD-ed by validate); without it the rest do nothing
bool async_loaded();
int async_set_quiet(int quiet);  // the calling thread's "the harness's own work" level; returns the old one
// Writes what the preload noted since the last drain (never from a handler); `final`: every count up to date.
void async_drain(bool final);
void async_poll();        // the watchdog's turn: report a deadlocked handler and end the process; drain
// Thread `tid`'s native stack (up to `max` return addresses, innermost first), taken by a signal its
// handler answers within 300 ms (the hang report's); 0 when it did not answer. `pc`: where the signal
// interrupted the thread (the one address of the stack that is no return address), when asked.
int stack_ips_of(long tid, void** out, int max, void** pc = nullptr);
Json async_summary_json();  // the proxy.shutdown mark's "signals"

// An ICorProfilerInfo call made inside the profiler's signal handler: noted in the preload's table (with
// its caller), and the call's own recording is skipped (the trace writer locks and allocates); what the
// proxy and the runtime do inside the call is not the profiler's and is not noted.
class HandlerCheck {
 public:
    HandlerCheck(const char* name, const void* caller);
    ~HandlerCheck();
    HandlerCheck(const HandlerCheck&) = delete;
    HandlerCheck& operator=(const HandlerCheck&) = delete;
    bool in_handler() const { return in_handler_; }

 private:
    bool in_handler_ = false;
    int quiet_before_ = 0;
};

// Writes the enter records of this thread's frames that are not written yet (outermost first).
void flush_frames(ThreadState& t);
// Frame enter/leave used by callbacks and hooks (inline: the path of every callback and hook, issue 23).
PROFHARNESS_HOT Frame* push_frame(ThreadState& t, const char* name, int count_id, bool lazy) {
    const int d = t.depth++;
    if (d == 0) t.busy_epoch.store(++t.outer_entries, std::memory_order_relaxed);
    if (count_id >= 0 && !t.tid_known) t.tid_asked = false;  // a callback: the thread may be managed now
    if (count_id != -2) t.called_by_runtime = true;  // not a StackSnapshotCallback (the walker's own thread)
    if (d >= kMaxFrames) return nullptr;
    Frame& f = t.frames[d];
    f.name = name;
    f.count_id = count_id;
    f.written = false;
    f.nargs = 0;
    f.entered_ns = 0;
    (void)lazy;
    return &f;
}
// The return record of a frame whose enter record was written (depth: the frame's, 1-based).
void write_return(const Frame& f, int depth, HRESULT hr, bool has_hr);
PROFHARNESS_HOT void pop_frame(ThreadState& t, HRESULT hr, bool has_hr) {
    const int d = --t.depth;
    if (d < kMaxFrames && d >= 0) {
        Frame& f = t.frames[d];
        if (f.written) write_return(f, d + 1, hr, has_hr);
        if (f.count_id >= 0) t.last_callback = f.name;
    }
    if (d == 0) t.busy_epoch.store(0, std::memory_order_relaxed);
}
// Each thread's callback counts (PerThread: a locked add on one shared array was most of a callback scope's
// cost); counts_json sums them. kCallbackSlots >= the callbacks of generated.h (checked in proxy.cpp).
inline constexpr int kCallbackSlots = 128;
struct CallbackCounts {
    std::atomic<std::int64_t> n[kCallbackSlots] = {};
};
PROFHARNESS_HOT void count_callback(int id) {
    if (id < 0 || id >= kCallbackSlots) return;
    std::atomic<std::int64_t>& n = PerThread<CallbackCounts>::mine().n[id];
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

template <typename T>
PROFHARNESS_HOT void store_arg(Frame* f, const char* name, T value) {
    if (!f || f->nargs >= kMaxArgs) return;
    int k = f->nargs++;
    f->arg_names[k] = name;
    if constexpr (std::is_pointer<T>::value) {
        f->arg_values[k] = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(value));
        f->arg_kinds[k] = ArgKind::Pointer;
    } else if constexpr (std::is_enum<T>::value || std::is_signed<T>::value) {
        f->arg_values[k] = static_cast<std::uint64_t>(static_cast<std::int64_t>(value));
        f->arg_kinds[k] = ArgKind::Int;
    } else {
        f->arg_values[k] = static_cast<std::uint64_t>(value);
        f->arg_kinds[k] = ArgKind::UInt;
    }
}

// One ICorProfilerCallback method: its frame (lazy or eager) and its count.
class CallbackScope {
 public:
    CallbackScope(int id, int level, bool forwarded);
    CallbackScope(int id, int level, bool forwarded, bool hidden);  // hidden decided by the caller
    CallbackScope(const CallbackScope&) = delete;
    CallbackScope& operator=(const CallbackScope&) = delete;
    ~CallbackScope();

    template <typename T>
    PROFHARNESS_HOT void arg(const char* name, T value) {
        if (frame_ && !frame_->written) store_arg(frame_, name, value);
    }
    void arg(const char* name, const GUID& g) { arg(name, &g); }
    // Writes the enter record now (an eager callback writes it here, after its arguments).
    void begin();
    HRESULT finish(HRESULT hr);
    Frame* frame() { return frame_; }
    // The profiler did not ask for this callback (only the proxy's bits enable it): not forwarded, not written.
    bool hidden() const { return hidden_; }
    // What a hidden callback returns to the runtime: S_OK, E_FAIL for ObjectReferences (documented: the
    // runtime then stops calling it until the next GC, which spares the heap walk's flood).
    HRESULT hide();

 private:
    ThreadState& t_;
    int id_;
    bool hidden_;
    Frame* frame_ = nullptr;
    bool lazy_;
    bool begun_ = false;
    bool finished_ = false;
};

// The callbacks' names and whether each is lazy (generated.h's kProxyCbNames and kProxyCbLazy, which come
// after this header), for CallbackScope's inline members.
extern const char* const* const g_callback_names;
extern const bool* const g_callback_lazy;

PROFHARNESS_HOT CallbackScope::CallbackScope(int id, int level, bool forwarded)
    : CallbackScope(id, level, forwarded, !profiler_asked(id)) {}

PROFHARNESS_HOT CallbackScope::CallbackScope(int id, int level, bool forwarded, bool hidden)
    : t_(me()), id_(id), hidden_(hidden), lazy_(g_callback_lazy[id]) {
    (void)level;
    (void)forwarded;
    if (hidden_) {
        hidden_callback(id);
        t_.called_by_runtime = true;  // a runtime thread, though the profiler never sees the callback
        return;
    }
    count_callback(id);
    frame_ = push_frame(t_, g_callback_names[id], id, lazy_);
}

PROFHARNESS_HOT CallbackScope::~CallbackScope() {
    if (!finished_) finish(S_OK);
}

PROFHARNESS_HOT void CallbackScope::begin() {
    if (begun_ || hidden_) return;
    begun_ = true;
    if (!lazy_ && recording_enabled()) flush_frames(t_);
    if (g_perturb_configured) perturb_callback_enter(id_);
}

PROFHARNESS_HOT HRESULT CallbackScope::finish(HRESULT hr) {
    if (finished_) return hr;
    finished_ = true;
    if (hidden_) return hr;
    if (begun_ && g_perturb_configured) perturb_callback_return(id_);
    pop_frame(t_, hr, true);
    return hr;
}

// One ICorProfilerInfo call made through the wrapper: its arguments and out-values (RecordScope), recorded
// in the calling thread's state.
class InfoScope : private HandlerCheck, public RecordScope {
 public:
    // caller: the return address into the profiler (__builtin_return_address(0) in the wrapper's method)
    InfoScope(int id, bool two_phase, const void* caller);            // an ICorProfilerInfo method (InfoM)
    InfoScope(const char* name, bool two_phase, const void* caller);  // IUnknown's and the enumerator's

    // An `inspects` method's ObjectID: judged against the shadow heap; a verdict other than `object` makes
    // the call two-phase (its enter record survives a crash inside the runtime) with a `heap` field; an
    // inspection while a GC is in progress carries `inGc`.
    void inspect(std::uint64_t object_id);
    // A COR_PRF_FRAME_INFO argument: when it is no hook's or walk callback's open on this thread but one a
    // FunctionEnter2 hook or a StackSnapshotCallback that has returned was given, the record carries
    // `staleFrameInfo` (FE2-05, SSC-01).
    void frame_info(std::uint64_t frame_info);
    // A COR_PRF_FRAME_INFO out-value (GetFunctionEnter3Info and its siblings): the runtime hands the value out
    // afresh, so it leaves the ring of returned ones.
    // Inside a WithInfo hook the value is that hook's until it returns (FE3-01..03), asked for `function`.
    void frame_info_given(const COR_PRF_FRAME_INFO* frame_info, FunctionID function, HRESULT hr);
    // After the arguments: flushes the thread's lazy frames, writes the enter record of a two-phase call.
    void begin();
    HRESULT finish(HRESULT hr);

 private:
    // null when muted (inside the profiler's signal handler: no ThreadState is made there, ASYNC)
    ThreadState* t_ = nullptr;
    const char* name_;
    bool two_phase_;
    bool outermost_call_ = false;
    const char* prev_call_ = nullptr;
};

}  // namespace proxy
}  // namespace profharness
