// What the signal-safety preload (conformance/native/preload, libprofharness_preload.so) shares with the
// recording proxy: one table in the preload's memory, found by the proxy with
// dlsym(RTLD_DEFAULT, "profharness_preload_shared"). Written from inside signal handlers (atomics only, no
// allocation, no lock), read and written into the trace by the proxy's watchdog thread (docs/design.md).
#pragma once

#include <atomic>
#include <cstdint>

namespace profharness::preload {

inline constexpr int kSites = 1024;      // distinct (profiler frame, function) pairs kept
inline constexpr int kHandlers = 65;     // one per signal number
inline constexpr int kStackDepth = 32;
inline constexpr int kInfoBase = 256;    // function ids from here on: ICorProfilerInfo methods (InfoM + base)

// The interposed functions, in the order of kFunctions (preload.cpp).
enum Function : int {
    kMalloc, kCalloc, kRealloc, kFree, kPosixMemalign, kAlignedAlloc, kMemalign,
    kNew, kNewArray, kNewNothrow, kNewArrayNothrow, kDelete, kDeleteArray, kDeleteSized, kDeleteArraySized,
    kPrintf, kFprintf, kVprintf, kVfprintf, kSprintf, kSnprintf, kVsnprintf, kPuts, kFputs, kFputc, kPutchar,
    kFwrite, kFflush, kFopen, kFclose, kPrintfChk, kFprintfChk, kVfprintfChk, kSnprintfChk, kVsnprintfChk,
    kMutexLock, kMutexTrylock, kMutexTimedlock, kMutexUnlock, kCondWait, kCondTimedwait, kCondSignal,
    kCondBroadcast, kRwlockRdlock, kRwlockWrlock, kRwlockUnlock,
    kDlopen, kDlsym, kDladdr, kDlclose,
    kErrno,  // not a call: the handler returned with errno changed
    kFunctionCount
};

// One (profiler frame, function) pair seen inside a wrapped handler. `key` is (caller << 16) | function
// (user-space addresses fit in 47 bits), 0 for a free slot.
struct Site {
    std::atomic<std::uint64_t> key;
    std::atomic<std::uint64_t> count;
    std::atomic<std::uint64_t> via;     // the immediate return address (a library's, when it differs)
    std::atomic<long> os_tid;           // the first thread
    std::atomic<int> signo;             // the handler's signal
    std::atomic<int> published;         // the fields above are set
    std::atomic<std::uint64_t> written;  // the count the proxy last wrote into the trace (0: not yet)
};

struct Handler {
    std::atomic<std::uintptr_t> fn;     // the profiler's handler (0: none wrapped)
    std::atomic<int> siginfo;           // SA_SIGINFO
    std::atomic<std::uintptr_t> installer;  // return address of the sigaction/signal call
    std::atomic<std::uint64_t> runs;
    std::atomic<int> written;
};

// The deadlock injection (once a run): the thread that held the allocator lock when the profiler's signal
// was raised on it, and a handler that then allocated and waits for that lock.
struct Injection {
    // 0 off, 1 enabled (not fired yet), 2 fired (the lock is held), 4 the handler runs under the lock,
    // 3 it returned (no allocation in it), 5 the signal was not delivered while the lock was held
    std::atomic<int> state;
    std::atomic<int> signo;
    std::atomic<long> holder_tid;
    std::atomic<long> waiter_tid;
    std::atomic<std::int64_t> wait_since_ns;  // CLOCK_MONOTONIC; 0: nobody waits
    std::atomic<std::uint64_t> waiter_caller;  // the profiler's frame that allocated
    std::atomic<int> waiter_function;
    void* holder_stack[kStackDepth];
    int holder_n;
    void* waiter_stack[kStackDepth];
    std::atomic<int> waiter_n;
    std::atomic<int> reported;
    // A wrapped handler's own call into the real allocator (the malloc family, operator new/delete) or into
    // a lock that waits (pthread_mutex_lock/timedlock, pthread_rwlock_rdlock/wrlock) in flight, injected or
    // not: the first one claims these (stuck_tid by CAS) and clears them when the call returns. An allocator
    // call that has not returned after a second is a real deadlock (ASYNC-07): the signal interrupted its
    // thread inside the allocator, whose lock the handler now waits for. A lock call is one (ASYNC-08) when
    // the lock's owner is the waiting thread itself: the code the signal interrupted holds it.
    std::atomic<long> stuck_tid;               // 0: no call in flight
    std::atomic<std::int64_t> stuck_since_ns;  // CLOCK_MONOTONIC
    std::atomic<int> stuck_function;
    std::atomic<int> stuck_signo;
    std::atomic<std::uint64_t> stuck_caller;   // the profiler's frame that called
    std::atomic<std::uint64_t> stuck_lock;     // the pthread_mutex_t / pthread_rwlock_t waited for; 0: allocator
};

struct Shared {
    std::uint32_t version;              // 1
    std::uint32_t function_count;       // kFunctionCount
    const char* const* function_names;  // kFunctionCount names
    Site sites[kSites];
    std::atomic<std::uint64_t> dropped;  // pairs that found no free slot
    Handler handlers[kHandlers];
    Injection injection;
};

}  // namespace profharness::preload

extern "C" {
// The preload's table (the proxy resolves it; null when the preload is not loaded).
profharness::preload::Shared* profharness_preload_shared();
// Whether the calling thread is inside a wrapped handler of the profiler.
int profharness_preload_in_handler();
// An ICorProfilerInfo method `id` called inside a wrapped handler from `caller` (the proxy's wrapper).
void profharness_preload_note_info(int id, const void* caller);
// The harness's own work on this thread (quiet > 0): not the profiler's, not noted. Returns the old value.
int profharness_preload_set_quiet(int quiet);
}
