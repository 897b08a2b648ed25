// objgen_in_heapwalk.cpp -- "genhisto": a lightweight generation histogram plus a non-GC-heap gauge.
//
// What it does
// ------------
// After every garbage collection it reports how many surviving objects sit in each generation
// (gen0/gen1/gen2/LOH/POH), how many bytes each generation uses, and -- on runtimes that expose
// ICorProfilerInfo14 (.NET 8) -- how large the non-GC ("frozen") heap is and how many objects it
// holds.  On .NET Core 3.1 (no Info14) the non-GC gauge reports "n/a" and everything else still works.
//
//   * Initialize: QI ICorProfilerInfo3 (required), ICorProfilerInfo14 (optional); mask COR_PRF_MONITOR_GC.
//   * GarbageCollectionStarted: opens a histogram for this GC.
//   * ObjectReferences: bins the walked object by generation.                <-- contains the BUG
//   * GarbageCollectionFinished: GetGenerationBounds (double-pass) for bytes per generation;
//     GetNonGCHeapBounds (double-pass) and EnumerateNonGCObjects for the non-GC gauge.
//   * Shutdown: prints the summary; only Release calls on the info interfaces.
//
// Documentation followed (quoted):
//   * "When the user specifies the COR_PRF_MONITOR_GC flag, all garbage collection events except for
//     ICorProfilerCallback::ObjectAllocated events will be raised in the profiler."
//   * GarbageCollectionStarted: "All callbacks that pertain to this garbage collection will occur
//     between the GarbageCollectionStarted callback and the corresponding
//     ICorProfilerCallback2::GarbageCollectionFinished callback."
//   * GetGenerationBounds: "the most interesting places to call GetGenerationBounds are in
//     ICorProfilerCallback2::GarbageCollectionStarted and ICorProfilerCallback2::GarbageCollectionFinished."
//   * Caller-Allocated Buffers, double-pass method: "First call with a zero-length InfoBuffer parameter
//     to obtain the correct buffer size. Then set the buffer size to the value returned in pcBufferMax
//     and call the function again."  "If InfoBuffer is null, cBufferSizeStart must be 0."
//   * ICorProfilerObjectEnum::Next: "Gets the specified number of contiguous objects from a sequential
//     collection of objects, starting at the enumerator's current position in the sequence."
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//     the Shutdown method is called."
//   ICorProfilerInfo14 is undocumented on learn.microsoft.com; COR_PRF_NONGC_HEAP_RANGE and
//   ICorProfilerObjectEnum are declared below from the public corprof.idl facts.
//
// THE BUG (one line, marked with a BUG comment in ObjectReferences): ICorProfilerInfo2::GetObjectGeneration is
// called from inside the ObjectReferences heap-walk callback, i.e. while the garbage collection is
// still in progress (between GarbageCollectionStarted and GarbageCollectionFinished).
#include "common.h"

#include <mutex>
#include <vector>

namespace profharness {
struct COR_PRF_NONGC_HEAP_RANGE {
    ObjectID rangeStart;
    UINT_PTR rangeLength;
    UINT_PTR rangeLengthReserved;
};
struct ICorProfilerObjectEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerObjectEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, ObjectID objects[], ULONG* pceltFetched) = 0;
};
}  // namespace profharness

using namespace docfix;

namespace genhisto {

enum { kGens = 5 };
static const char* const kLabels[kGens] = {"g0", "g1", "g2", "loh", "poh"};

struct Histogram {
    unsigned gc = 0;
    unsigned long long objs[kGens] = {};
    unsigned long long usedBytes[kGens] = {};
    unsigned long long genLookupFailures = 0;
    unsigned long long outOfRange = 0;
    bool nongc = false;
    unsigned long long nongcRanges = 0, nongcUsed = 0, nongcReserved = 0, nongcObjects = 0;
};

struct State {
    ICorProfilerInfo3* info = nullptr;
    ICorProfilerInfo14* info14 = nullptr;
    std::mutex lock;
    bool open = false;
    Histogram cur;
    Histogram last;
    unsigned gcs = 0;
    unsigned long long maxNongcObjects = 0;
    std::atomic<bool> down{false};
};

static State g;

static HRESULT ReadGenerationBytes(Histogram& h) {
    ULONG needed = 0;
    HRESULT hr = g.info->GetGenerationBounds(0, &needed, nullptr);  // pass 1: size only
    if (failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) return hr;
    std::vector<COR_PRF_GC_GENERATION_RANGE> ranges(needed);
    ULONG got = 0;
    hr = g.info->GetGenerationBounds(needed, &got, ranges.data());  // pass 2
    if (failed(hr)) return hr;
    if (got > needed) got = needed;  // grew in between: report what fitted
    for (ULONG i = 0; i < got; ++i)
        if (ranges[i].generation >= 0 && ranges[i].generation < kGens)
            h.usedBytes[ranges[i].generation] += ranges[i].rangeLength;
    return S_OK;
}

static void ReadNonGcGauge(Histogram& h) {
    if (g.info14 == nullptr) return;
    ULONG needed = 0;
    HRESULT hr = g.info14->GetNonGCHeapBounds(0, &needed, nullptr);  // pass 1: size only
    if (failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) return;
    std::vector<COR_PRF_NONGC_HEAP_RANGE> ranges(needed);
    ULONG got = 0;
    if (needed != 0 && failed(g.info14->GetNonGCHeapBounds(needed, &got, ranges.data()))) return;
    if (got > needed) got = needed;
    h.nongcRanges = got;
    for (ULONG i = 0; i < got; ++i) {
        h.nongcUsed += ranges[i].rangeLength;
        h.nongcReserved += ranges[i].rangeLengthReserved;
    }
    ICorProfilerObjectEnum* objects = nullptr;
    if (failed(g.info14->EnumerateNonGCObjects(&objects)) || objects == nullptr) return;
    ObjectID chunk[128];
    ULONG n = 0;
    HRESULT nhr;
    do {
        n = 0;
        nhr = objects->Next(128, chunk, &n);
        if (failed(nhr)) break;
        h.nongcObjects += (n > 128 ? 128 : n);
    } while (nhr == S_OK && n != 0);
    objects->Release();
    h.nongc = true;
}

}  // namespace genhisto

class GenHisto : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        using namespace genhisto;
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&g.info));
        if (failed(hr) || g.info == nullptr) {
            g.info = nullptr;
            std::fprintf(stderr, "[genhisto] no ICorProfilerInfo3 (0x%08x)\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo14, reinterpret_cast<void**>(&g.info14)))) g.info14 = nullptr;
        hr = g.info->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[genhisto] SetEventMask failed 0x%08x\n", (unsigned)hr);
            if (g.info14) g.info14->Release();
            g.info->Release();
            g.info = nullptr;
            g.info14 = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[genhisto] up (non-GC gauge %s)\n", g.info14 ? "on" : "n/a: no ICorProfilerInfo14");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        using namespace genhisto;
        if (g.down.load()) return S_OK;
        std::lock_guard<std::mutex> l(g.lock);
        g.cur = Histogram();
        g.cur.gc = ++g.gcs;
        g.open = true;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID objectId, ClassID, ULONG, ObjectID*) override {
        using namespace genhisto;
        if (g.down.load()) return S_OK;
        COR_PRF_GC_GENERATION_RANGE where{};
        // The ICorProfilerInfo2::GetObjectGeneration page says: "The GetObjectGeneration method may be
        // called from any profiler callback, provided that garbage collection is not in progress. That is,
        // it may be called from any callback except those that occur between
        // ICorProfilerCallback2::GarbageCollectionStarted and ICorProfilerCallback2::GarbageCollectionFinished."
        HRESULT hr = g.info->GetObjectGeneration(objectId, &where);  // BUG: called inside the GC (heap walk)
        std::lock_guard<std::mutex> l(g.lock);
        if (!g.open) return S_OK;
        if (failed(hr))
            ++g.cur.genLookupFailures;
        else if (where.generation >= 0 && where.generation < kGens)
            ++g.cur.objs[where.generation];
        else
            ++g.cur.outOfRange;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        using namespace genhisto;
        if (g.down.load()) return S_OK;
        std::lock_guard<std::mutex> l(g.lock);
        if (!g.open) return S_OK;
        g.open = false;
        ReadGenerationBytes(g.cur);
        ReadNonGcGauge(g.cur);
        if (g.cur.nongcObjects > g.maxNongcObjects) g.maxNongcObjects = g.cur.nongcObjects;
        g.last = g.cur;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        using namespace genhisto;
        g.down.store(true);
        std::lock_guard<std::mutex> l(g.lock);
        const Histogram& h = g.last;
        std::fprintf(stderr, "[genhisto] gcs=%u last gc #%u |", g.gcs, h.gc);
        for (int i = 0; i < kGens; ++i)
            std::fprintf(stderr, " %s:%llu obj/%llu KB", kLabels[i], h.objs[i], h.usedBytes[i] / 1024);
        std::fprintf(stderr, " | lookup failures %llu, out of range %llu\n", h.genLookupFailures, h.outOfRange);
        if (h.nongc)
            std::fprintf(stderr, "[genhisto] non-GC heap: %llu range(s) %llu/%llu KB used/reserved, %llu objects (max %llu)\n",
                         h.nongcRanges, h.nongcUsed / 1024, h.nongcReserved / 1024, h.nongcObjects, g.maxNongcObjects);
        else
            std::fprintf(stderr, "[genhisto] non-GC heap: n/a\n");
        if (g.info14) g.info14->Release();
        if (g.info) g.info->Release();
        g.info14 = nullptr;
        g.info = nullptr;
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(GenHisto)
