// The proxy's event mask (proxy.h, docs/design.md "The recording proxy"): the bits it adds to the profiler's
// own for the shadow heap and the compilation tally (COR_PRF_MONITOR_JIT_COMPILATION, jit.cpp), the callbacks
// it hides because only those bits enable them.
//
// Which bits: COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED (ObjectAllocated) and
// COR_PRF_MONITOR_GC (GarbageCollectionStarted/Finished, MovedReferences(2), SurvivingReferences(2)). The high
// mask's COR_PRF_HIGH_BASIC_GC | COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS would spare the heap walk, but neither
// bundled runtime delivers the whole set with them (checked live on heapchurn: 8.0.4 makes no
// MovedReferences(2) and no SurvivingReferences(2) call, 3.1.23 no SurvivingReferences(2) call), so the proxy
// takes COR_PRF_MONITOR_GC and answers a hidden ObjectReferences with E_FAIL, which (documented) stops the
// runtime calling it until the next GC.
//
// Which callbacks are hidden: those the runtime would not make with the profiler's own mask, judged by the
// flag that gates each (the API table's monitor=, kProxyCbMonitor), with what the runtime also accepts
// (COR_PRF_HIGH_BASIC_GC for GarbageCollectionStarted/Finished, COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS for
// MovedReferences(2)/SurvivingReferences(2)) and one correction: ObjectsAllocatedByClass is gated by
// COR_PRF_MONITOR_GC on both bundled runtimes (live: made with COR_PRF_MONITOR_GC alone, not with
// COR_PRF_MONITOR_OBJECT_ALLOCATED alone), not by the flag its page names. ObjectAllocated goes to a profiler
// that asked for COR_PRF_MONITOR_OBJECT_ALLOCATED (or, with only the high mask's large/pinned allocation
// bits, for the objects those name: heap.cpp decides per object).
#include <cstdlib>
#include <cstring>

#include "generated.h"
#include "profharness/flags.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

constexpr std::uint32_t kProxyLow =
    COR_PRF_MONITOR_GC | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED;

// COR_PRF_GC_GENERATION: COR_PRF_GC_PINNED_OBJECT_HEAP (corprof.idl)
constexpr COR_PRF_GC_GENERATION kPinnedObjectHeap = 4;

std::atomic<std::int64_t> g_hidden[static_cast<int>(ProxyCb::Count_)];

bool heap_wanted() {
    const char* v = std::getenv("PROFHARNESS_PROXY_HEAP");
    return !(v && std::strcmp(v, "0") == 0);
}

// The compilation tally (jit.cpp): COR_PRF_MONITOR_JIT_COMPILATION, unless PROFHARNESS_PROXY_JIT=0.
bool jit_wanted() {
    const char* v = std::getenv("PROFHARNESS_PROXY_JIT");
    return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace

MaskState& mask() {
    static MaskState* m = new MaskState();
    return *m;
}

bool profiler_asked(int cb) {
    const MaskState& m = mask();
    const std::uint32_t added = m.added_low.load(std::memory_order_relaxed);
    if (added == 0) return true;  // the proxy asked for nothing the profiler did not
    std::uint32_t gate = kProxyCbMonitor[cb];
    if (cb == static_cast<int>(ProxyCb::ObjectsAllocatedByClass)) gate = COR_PRF_MONITOR_GC;  // live, see above
    if (!(gate & added)) return true;  // no bit of the proxy's enables it
    const std::uint32_t low = m.profiler_low.load(std::memory_order_relaxed);
    const std::uint32_t high = m.profiler_high.load(std::memory_order_relaxed);
    if (low & gate) return true;
    switch (static_cast<ProxyCb>(cb)) {
        case ProxyCb::GarbageCollectionStarted:
        case ProxyCb::GarbageCollectionFinished:
            return (high & COR_PRF_HIGH_BASIC_GC) != 0;
        case ProxyCb::MovedReferences:
        case ProxyCb::MovedReferences2:
        case ProxyCb::SurvivingReferences:
        case ProxyCb::SurvivingReferences2:
            return (high & COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS) != 0;
        default:
            return false;
    }
}

std::uint32_t forwarded_low(std::uint32_t low) {
    const MaskState& m = mask();
    const std::uint32_t added = m.added_low.load(std::memory_order_relaxed);
    std::uint32_t out = low | added;
    // COR_PRF_ENABLE_OBJECT_ALLOCATED is immutable after Initialize: a profiler that sets it later (the proxy
    // set it for itself) is handed on without it, so that the runtime refuses the change as it would have.
    if (m.initialized.load() && (low & added & COR_PRF_ENABLE_OBJECT_ALLOCATED)) out &= ~COR_PRF_ENABLE_OBJECT_ALLOCATED;
    return out;
}

std::uint32_t answered_low(std::uint32_t runtime_low) {
    const MaskState& m = mask();
    return runtime_low & ~(m.added_low.load() & ~m.profiler_low.load());
}

bool allocation_wanted(std::uint64_t id, std::uint64_t size) {
    const std::uint32_t high = mask().profiler_high.load(std::memory_order_relaxed);
    if (!(high & (COR_PRF_HIGH_MONITOR_LARGEOBJECT_ALLOCATED | COR_PRF_HIGH_MONITOR_PINNEDOBJECT_ALLOCATED)))
        return false;
    auto* info10 = static_cast<ICorProfilerInfo10*>(runtime_info_of(10));
    if ((high & COR_PRF_HIGH_MONITOR_LARGEOBJECT_ALLOCATED) && info10) {
        DWORD threshold = 0;
        if (info10->GetLOHObjectSizeThreshold(&threshold) == S_OK && size >= threshold) return true;
    }
    auto* info2 = static_cast<ICorProfilerInfo2*>(runtime_info_of(2));
    if ((high & COR_PRF_HIGH_MONITOR_PINNEDOBJECT_ALLOCATED) && info2) {
        COR_PRF_GC_GENERATION_RANGE range{};
        if (info2->GetObjectGeneration(static_cast<ObjectID>(id), &range) == S_OK &&
            range.generation == kPinnedObjectHeap)
            return true;
    }
    return false;
}

void hidden_callback(int cb) { g_hidden[cb].fetch_add(1, std::memory_order_relaxed); }

Json hidden_counts_json() {
    Json h = Json::object();
    for (int k = 0; k < static_cast<int>(ProxyCb::Count_); ++k)
        if (std::int64_t n = g_hidden[k].load(std::memory_order_relaxed)) h.set(kProxyCbNames[k], Json(n));
    return h;
}

void mask_after_initialize(HRESULT hr) {
    MaskState& m = mask();
    auto* info5 = static_cast<ICorProfilerInfo5*>(runtime_info_of(5));
    DWORD low = 0, high = 0;
    HRESULT get_hr = info5 ? info5->GetEventMask2(&low, &high) : E_NOINTERFACE;
    m.profiler_low.store(low);
    m.profiler_high.store(high);
    std::uint32_t wanted = heap_wanted() ? kProxyLow : 0;
    if (jit_wanted()) wanted |= COR_PRF_MONITOR_JIT_COMPILATION;
    const std::uint32_t add = (hr >= 0 && get_hr == S_OK) ? (wanted & ~low) : 0;
    HRESULT set_hr = S_OK;
    if (add) {
        m.added_low.store(add);  // before the runtime can make the callbacks they enable
        set_hr = info5->SetEventMask2(low | add, high);
        if (set_hr != S_OK) m.added_low.store(0);
    }
    m.initialized.store(true);
    m.jit_monitored.store(hr >= 0 && get_hr == S_OK && set_hr == S_OK && ((low | add) & COR_PRF_MONITOR_JIT_COMPILATION));
    const bool on = hr >= 0 && get_hr == S_OK && heap_wanted() && set_hr == S_OK;
    if (on) heap_start();
    if (!recording_enabled()) return;
    Json rec = Json::object();
    rec.set("name", "proxy.mask").set("payload", Json());
    rec.set("profiler", Json::object().set("low", Json(static_cast<std::uint64_t>(low))).set("high", Json(static_cast<std::uint64_t>(high))));
    rec.set("added", Json::object().set("low", Json(static_cast<std::uint64_t>(m.added_low.load()))).set("high", Json(0u)));
    rec.set("hr", Json(static_cast<std::uint32_t>(set_hr))).set("heap", on);
    trace().write("mark", rec);
}

}  // namespace profharness::proxy

namespace profharness::proxy {

void mask_after_attach(HRESULT hr) {
    MaskState& m = mask();
    auto* info5 = static_cast<ICorProfilerInfo5*>(runtime_info_of(5));
    DWORD low = 0, high = 0;
    if (info5) info5->GetEventMask2(&low, &high);
    m.profiler_low.store(low);
    m.profiler_high.store(high);
    m.initialized.store(true);
    if (!recording_enabled()) return;
    Json rec = Json::object();
    rec.set("name", "proxy.mask").set("payload", Json()).set("attach", true);
    rec.set("profiler", Json::object().set("low", Json(static_cast<std::uint64_t>(low))).set("high", Json(static_cast<std::uint64_t>(high))));
    rec.set("added", Json::object().set("low", Json(0u)).set("high", Json(0u)));
    rec.set("hr", Json(static_cast<std::uint32_t>(hr))).set("heap", false);
    trace().write("mark", rec);
}

}  // namespace profharness::proxy
