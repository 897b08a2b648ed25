// The proxy's shadow heap (proxy.h, profharness/shadow_heap.h): fed from the runtime's own reports as they
// arrive (ObjectAllocated with GetObjectSize2's size, GarbageCollectionStarted with GetGenerationBounds at
// that instant, every MovedReferences(2)/SurvivingReferences(2) batch, GarbageCollectionFinished), asked
// about every ObjectID a profiler hands to an `inspects` method. One mutex around it: allocations come from
// every thread, a GC's callbacks from the thread doing it while the runtime is suspended.
//
// An allocation takes no lock (issue 23): it goes into its thread's allocation log (a ring of kLogSize
// entries, one writer: the thread; read under the mutex), and every log is folded into the heap, in each
// thread's order, before the heap is read or a GC touches it (and when a log is full). Folding thread by
// thread rather than in time order gives the same heap: between two GCs live objects never overlap, so
// allocations on different threads never touch each other's objects.
//
// A GC is applied off the GC's thread (issue 23: the runtime's threads
// wait for GarbageCollectionFinished to return, so its work is the application's wall time):
// GarbageCollectionFinished notes how far each allocation log has come (those allocations came before the
// GC: every managed thread is suspended) and returns; the heap's own thread then folds each log up to that
// point and applies the GC. Whoever takes the mutex first applies a GC still pending (a verdict, the next
// GC, a full log), so every reader sees the heap as if the GC had been applied when it finished. The logs are
// large enough (kLogSize) that a thread allocating between two GCs rarely waits for the mutex. With
// PROFHARNESS_PROXY_HEAP_THREAD=0 GarbageCollectionFinished applies it at once, on the GC's thread.
#include <signal.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "generated.h"
#include "profharness/flags.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

std::mutex g_mu;
ShadowHeap* g_heap = nullptr;  // made by heap_start, never freed (callbacks may race the process's end)
std::atomic<bool> g_on{false};
std::atomic<bool> g_in_gc{false};
std::atomic<std::int64_t> g_gcs{0}, g_bounds_failures{0};
std::atomic<std::int64_t> g_verdicts[4];
std::atomic<std::int64_t> g_in_gc_inspections{0};

constexpr std::uint32_t kLogSize = 8192;

// One thread's allocations not yet in the heap: entries [tail, head) of the ring (indexes grow without end,
// the slot is the index mod kLogSize). The thread writes a slot, then publishes head; the holder of g_mu
// reads up to head and publishes tail.
struct AllocLog {
    // user-provided: the ring is not zeroed (its pages are touched only as the thread allocates)
    AllocLog() {}
    std::atomic<std::uint32_t> head{0};
    std::atomic<std::uint32_t> tail{0};
    // the thread's allocations and GetObjectSize2 failures (one writer, no locked add; heap_json sums them)
    std::atomic<std::int64_t> allocations{0}, size_failures{0};
    std::uint64_t ids[kLogSize];
    std::uint64_t sizes[kLogSize];
};

// g_mu held: `log`'s allocations up to index `head` into the heap.
void fold_log_locked(AllocLog& log, std::uint32_t head) {
    std::uint32_t t = log.tail.load(std::memory_order_relaxed);
    for (; t != head; ++t) g_heap->allocate(log.ids[t % kLogSize], log.sizes[t % kLogSize]);
    log.tail.store(head, std::memory_order_release);
}

// A finished GC not applied yet (guarded by g_mu): how far each log had come when it finished.
bool g_gc_pending = false;
using GcHeads = std::vector<std::pair<AllocLog*, std::uint32_t>>;
GcHeads& g_gc_heads = *new GcHeads();  // never destroyed: the heap's thread may be using it at exit

// g_mu held: the pending GC, if any, after the allocations that came before it.
void apply_pending_locked() {
    if (!g_gc_pending) return;
    for (const auto& [log, head] : g_gc_heads) fold_log_locked(*log, head);
    g_gc_heads.clear();
    g_gc_pending = false;
    g_heap->gc_finished();
}

// g_mu held: the pending GC, then every thread's log (PerThread) into the heap.
void fold_locked() {
    apply_pending_locked();
    PerThread<AllocLog>::for_each([](AllocLog& log) { fold_log_locked(log, log.head.load(std::memory_order_acquire)); });
}

// The heap's own thread: applies each GC GarbageCollectionFinished leaves pending. Its mutex and condition
// are never destroyed (a condition's destructor at exit would wait for the thread that waits on it).
std::mutex& g_wake_mu = *new std::mutex();
std::condition_variable& g_wake = *new std::condition_variable();
bool g_wake_pending = false;  // guarded by g_wake_mu
std::once_flag g_thread_started;

// Each GC applied by the heap's own thread (the default since 2026-11-28: bench/proxy.py's loop on the idle
// machine, 1.29-1.33 against 1.33-1.38 on the GC's thread in three runs of 20-25 rounds; at load 2-4 on 2
// cores, on 11-26, neither was ahead); PROFHARNESS_PROXY_HEAP_THREAD=0: on the GC's thread, inside
// GarbageCollectionFinished.
bool heap_thread_wanted() {
    static const bool wanted = [] {
        const char* v = std::getenv("PROFHARNESS_PROXY_HEAP_THREAD");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    return wanted;
}

void heap_thread() {
    sigset_t all;  // signals are for the application's and the profiler's threads (as the trace writer's)
    sigfillset(&all);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) sigdelset(&all, sig);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(g_wake_mu);
            g_wake.wait(lock, [] { return g_wake_pending; });
            g_wake_pending = false;
        }
        std::lock_guard<std::mutex> lock(g_mu);
        apply_pending_locked();
    }
}

}  // namespace

bool heap_enabled() { return g_on.load(std::memory_order_acquire); }

void heap_start() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_heap) g_heap = new ShadowHeap();
    g_on.store(true, std::memory_order_release);
}

std::uint64_t heap_allocated(std::uint64_t id) {
    if (!heap_enabled()) return 0;
    SIZE_T size = 0;
    AllocLog& log = PerThread<AllocLog>::mine();
    auto* info4 = static_cast<ICorProfilerInfo4*>(runtime_info_of(4));
    if (!info4 || info4->GetObjectSize2(static_cast<ObjectID>(id), &size) != S_OK) {
        log.size_failures.store(log.size_failures.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        size = 0;
    }
    log.allocations.store(log.allocations.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const std::uint32_t h = log.head.load(std::memory_order_relaxed);
    if (h - log.tail.load(std::memory_order_acquire) >= kLogSize) {  // full: fold (the only lock taken)
        std::lock_guard<std::mutex> lock(g_mu);
        fold_locked();
    }
    log.ids[h % kLogSize] = id;
    log.sizes[h % kLogSize] = size;
    log.head.store(h + 1, std::memory_order_release);
    return size;
}

void heap_gc_started(int n, const BOOL* collected) {
    if (!heap_enabled()) return;
    std::uint64_t mask = 0;
    for (int g = 0; g < n && g < 64; ++g)
        if (collected && collected[g]) mask |= std::uint64_t{1} << g;
    std::vector<GenerationRange> ranges;
    auto* info2 = static_cast<ICorProfilerInfo2*>(runtime_info_of(2));
    COR_PRF_GC_GENERATION_RANGE buf[64];
    ULONG count = 0;
    HRESULT hr = info2 ? info2->GetGenerationBounds(64, &count, buf) : E_NOINTERFACE;
    std::vector<COR_PRF_GC_GENERATION_RANGE> big;
    const COR_PRF_GC_GENERATION_RANGE* got = buf;
    if (hr == S_OK && count > 64) {  // more ranges than the buffer: ask again with room for all
        big.resize(count);
        ULONG again = 0;
        hr = info2->GetGenerationBounds(count, &again, big.data());
        count = again < count ? again : count;
        got = big.data();
    }
    if (hr == S_OK) {
        for (ULONG k = 0; k < count; ++k) {
            GenerationRange r{};
            r.start = got[k].rangeStart;
            r.end = got[k].rangeStart + got[k].rangeLength;
            r.generation = static_cast<int>(got[k].generation);
            ranges.push_back(r);
        }
    } else {
        g_bounds_failures.fetch_add(1, std::memory_order_relaxed);  // no ranges: every generation collected
    }
    std::lock_guard<std::mutex> lock(g_mu);
    fold_locked();
    g_heap->gc_started(mask, std::move(ranges));
}

void heap_gc_started_returned() { g_in_gc.store(true, std::memory_order_release); }

// ObjectID is a 64-bit address: the runtime's arrays are handed to the heap as they are (no copy)
static_assert(sizeof(ObjectID) == sizeof(std::uint64_t));

void heap_moved(ULONG n, const ObjectID* olds, const ObjectID* news, const std::uint64_t* lens) {
    if (!heap_enabled() || !olds || !news || !lens) return;
    std::lock_guard<std::mutex> lock(g_mu);
    fold_locked();
    g_heap->moved(n, reinterpret_cast<const std::uint64_t*>(olds), reinterpret_cast<const std::uint64_t*>(news), lens);
}

void heap_surviving(ULONG n, const ObjectID* starts, const std::uint64_t* lens) {
    if (!heap_enabled() || !starts || !lens) return;
    std::lock_guard<std::mutex> lock(g_mu);
    fold_locked();
    g_heap->surviving(n, reinterpret_cast<const std::uint64_t*>(starts), lens);
}

// The heap's thread, started by the first GC that wants it; false while none can be made (that GC is then
// applied on its own thread, as with PROFHARNESS_PROXY_HEAP_THREAD=0; the next GC tries again).
bool heap_thread_running() {
    try {
        std::call_once(g_thread_started, [] { std::thread(heap_thread).detach(); });
        return true;
    } catch (const std::system_error&) {
        return false;
    }
}

void heap_gc_finished() {
    g_in_gc.store(false, std::memory_order_release);
    if (!heap_enabled()) return;
    g_gcs.fetch_add(1, std::memory_order_relaxed);
    const bool threaded = heap_thread_wanted() && heap_thread_running();
    {
        std::lock_guard<std::mutex> lock(g_mu);
        apply_pending_locked();  // the previous one, when its thread has not come to it yet
        PerThread<AllocLog>::for_each([](AllocLog& log) {
            g_gc_heads.emplace_back(&log, log.head.load(std::memory_order_acquire));
        });
        g_gc_pending = true;
        if (!threaded) {
            apply_pending_locked();
            return;
        }
    }
    {
        std::lock_guard<std::mutex> lock(g_wake_mu);
        g_wake_pending = true;
    }
    g_wake.notify_one();
}

bool heap_in_gc() { return g_in_gc.load(std::memory_order_acquire); }

HeapClassification heap_classify(std::uint64_t id, bool in_gc) {
    HeapClassification c;
    if (in_gc) g_in_gc_inspections.fetch_add(1, std::memory_order_relaxed);
    if (!heap_enabled()) return c;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        fold_locked();
        c = g_heap->classify(id);
    }
    g_verdicts[static_cast<int>(c.verdict)].fetch_add(1, std::memory_order_relaxed);
    return c;
}

Json heap_json() {
    Json h = Json::object();
    h.set("enabled", heap_enabled());
    std::int64_t allocations = 0, size_failures = 0;
    PerThread<AllocLog>::for_each([&](const AllocLog& log) {
        allocations += log.allocations.load(std::memory_order_relaxed);
        size_failures += log.size_failures.load(std::memory_order_relaxed);
    });
    h.set("allocations", Json(allocations)).set("sizeFailures", Json(size_failures));
    h.set("gcs", Json(g_gcs.load())).set("boundsFailures", Json(g_bounds_failures.load()));
    Json verdicts = Json::object();
    for (HeapVerdict v : {HeapVerdict::Object, HeapVerdict::Stale, HeapVerdict::Interior, HeapVerdict::Unknown})
        verdicts.set(heap_verdict_name(v), Json(g_verdicts[static_cast<int>(v)].load()));
    h.set("verdicts", verdicts).set("inGcInspections", Json(g_in_gc_inspections.load()));
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_heap) fold_locked();
    if (g_heap) {
        h.set("objects", Json(static_cast<std::uint64_t>(g_heap->objects())));
        h.set("compactingGcs", Json(g_heap->compacting_gcs())).set("reuseGcs", Json(g_heap->reuse_gcs()));
        h.set("leftAddresses", Json(static_cast<std::uint64_t>(g_heap->left_addresses())));
        h.set("leftForgotten", Json(g_heap->left_dropped()));
    }
    h.set("leftGcs", Json(ShadowHeap::kDefaultLeftGcs));
    h.set("leftMax", Json(static_cast<std::uint64_t>(ShadowHeap::kDefaultLeftMax)));
    return h;
}

}  // namespace profharness::proxy
