// The recording proxy (issue 10): a profiler the runtime loads that loads a third-party profiler behind
// it, forwards every callback to it and hands it an ICorProfilerInfo wrapper that records every call.
// The recording is a profharness trace (docs/design.md) with edges: callback records carry
// "phase":"enter"/"return", two-phase calls likewise, other calls one record after they return.
//
// What each thread is doing is kept in a ThreadState (thread-local, registered once): the callbacks and
// hooks open on it (a stack of frames), whether it is inside a runtime call. High-volume callbacks and
// hooks are "lazy": counted, and written only when the profiler calls the runtime inside them, so that
// a call is always recorded inside the callback it was made in.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/json.h"
#include "profharness/record_scope.h"
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
    const char* current_call = nullptr;   // the Info method the thread is inside
    std::atomic<std::int64_t> busy_since{0};  // entry time of the outermost open frame (0: none)
    // managed ThreadID cache
    std::uint64_t managed_tid = 0;
    bool tid_known = false;
    bool tid_asked = false;
    // native stack captured on request (hang report)
    void* stack[48];
    int stack_n = 0;
    std::atomic<int> stack_ready{0};
};

ThreadState& me();
ThreadState* me_if_known();  // null when this thread never touched the proxy
std::int64_t now_ns();
TraceWriter& trace();
bool recording_enabled();      // the trace is open
bool shutdown_returned();      // the profiler's Shutdown has returned
void* runtime_info();          // the runtime's own ICorProfilerInfo (never the wrapper), or null
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

// Writes the enter records of this thread's frames that are not written yet (outermost first).
void flush_frames(ThreadState& t);
// Frame enter/leave used by callbacks and hooks.
Frame* push_frame(ThreadState& t, const char* name, int count_id, bool lazy);
void pop_frame(ThreadState& t, HRESULT hr, bool has_hr);
void count_callback(int id);

template <typename T>
inline void store_arg(Frame* f, const char* name, T value) {
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
    CallbackScope(const CallbackScope&) = delete;
    CallbackScope& operator=(const CallbackScope&) = delete;
    ~CallbackScope();

    template <typename T>
    void arg(const char* name, T value) {
        if (frame_ && !frame_->written) store_arg(frame_, name, value);
    }
    void arg(const char* name, const GUID& g) { arg(name, &g); }
    // Writes the enter record now (an eager callback writes it here, after its arguments).
    void begin();
    HRESULT finish(HRESULT hr);
    Frame* frame() { return frame_; }

 private:
    ThreadState& t_;
    Frame* frame_ = nullptr;
    bool lazy_;
    bool begun_ = false;
    bool finished_ = false;
};

// One ICorProfilerInfo call made through the wrapper: its arguments and out-values (RecordScope), recorded
// in the calling thread's state.
class InfoScope : public RecordScope {
 public:
    InfoScope(int id, bool two_phase);              // an ICorProfilerInfo method (InfoM)
    InfoScope(const char* name, bool two_phase);    // IUnknown's methods on the wrapper

    // After the arguments: flushes the thread's lazy frames, writes the enter record of a two-phase call.
    void begin();
    HRESULT finish(HRESULT hr);

 private:
    ThreadState& t_;
    const char* name_;
    bool two_phase_;
    const char* prev_call_;
};

}  // namespace proxy
}  // namespace profharness
