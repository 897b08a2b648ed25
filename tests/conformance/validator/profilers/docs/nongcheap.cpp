// nongcheap.cpp -- heap census: what lives in each GC generation, and what lives OUTSIDE the GC
// heap (the non-GC / "frozen" heap that .NET 8 uses for string literals, RuntimeType objects, ...).
//
// What it does
// ------------
//   * Initialize: QueryInterface for ICorProfilerInfo4 (required: GetObjectSize2), and -- optionally --
//     ICorProfilerInfo10 (IsFrozenObject) and ICorProfilerInfo14 (EnumerateNonGCObjects,
//     GetNonGCHeapBounds).  The event mask is COR_PRF_MONITOR_GC only.
//   * GarbageCollectionStarted: remembers which generations this GC collects and why; starts a new
//     census buffer.  No object is touched here.
//   * ObjectReferences (the heap walk): records (ObjectID, ClassID) of every object that survived.
//     The object is NOT inspected there (no Info call at all).
//   * GarbageCollectionFinished: the census proper.
//       - GetGenerationBounds (caller-allocated buffer, re-sized when too small) -> the ranges of each
//         generation (gen0/1/2, LOH, POH) and their used/reserved bytes;
//       - for every recorded object: GetObjectSize2 and a binary search in the ranges -> objects/bytes
//         per generation and per type; an object found in no range is asked IsFrozenObject (Info10);
//       - Info14 present (.NET 8): GetNonGCHeapBounds (caller-allocated buffer) and
//         EnumerateNonGCObjects -> per-type census of the non-GC heap, with a cross-check that every
//         non-GC object lies inside the reported non-GC ranges and that IsFrozenObject says TRUE;
//       - Info14 absent (.NET Core 3.1): the non-GC part degrades to "not available" (the heap walk
//         is still checked with IsFrozenObject when Info10 exists); nothing fails.
//       - names of the few top types are resolved (IsArrayClass, GetClassIDInfo2, GetModuleMetaData +
//         IMetaDataImport::GetTypeDefProps) and cached.
//   * Shutdown: prints the summary from data already collected; no ICorProfilerInfo call except the
//     final Release of the interface pointers.
//   Environment: NONGCHEAP_VERBOSE=1 prints one line per GC (plus NONGCHEAP_RANGES=1: every range).
//
// Observed on the kit's runtimes (not in the documents): 8.0.4's heap walk (ObjectReferences) also
// reports the non-GC objects (they show up as "frozen-in-walk", IsFrozenObject TRUE, in no generation
// range); ICorProfilerObjectEnum::GetCount from EnumerateNonGCObjects returns the real count; all
// MovedReferences2 callbacks of a GC arrive before its heap walk, so walk IDs are final addresses.
//
// Documentation followed (learn.microsoft.com, unmanaged profiling API), quoted:
//   * COR_PRF_MONITOR / "Garbage Collection in the Profiling API": "When the user specifies the
//     COR_PRF_MONITOR_GC flag, all garbage collection events except for
//     ICorProfilerCallback::ObjectAllocated events will be raised in the profiler." and "Note that when
//     the COR_PRF_MONITOR_GC flag is enabled, concurrent garbage collection is turned off."
//   * GarbageCollectionStarted: "All callbacks that pertain to this garbage collection will occur
//     between the GarbageCollectionStarted callback and the corresponding
//     ICorProfilerCallback2::GarbageCollectionFinished callback. These callbacks need not occur on the
//     same thread."  "The array is indexed by a value of the COR_PRF_GC_GENERATION enumeration" (only
//     cGenerations entries are read).  "After the profiler has returned from this callback, the
//     profiler should consider all object IDs to be invalid until it receives a
//     ICorProfilerCallback2::GarbageCollectionFinished callback."
//   * ObjectReferences: "The ObjectReferences method is called for each object remaining in the heap
//     after a garbage collection has completed."  "The object IDs returned by ObjectReferences are not
//     valid during the callback itself, because the garbage collection might be in the middle of
//     moving objects. Therefore, profilers must not attempt to inspect objects during an
//     ObjectReferences call. When ICorProfilerCallback2::GarbageCollectionFinished is called, the
//     garbage collection is complete and inspection can be safely done."  "A null ClassId indicates
//     that objectId has a type that is unloading."  -> only IDs are stored; sizes are taken later.
//     "If the profiler returns an error from this callback, the profiling services will discontinue
//     invoking this callback until the next garbage collection." -> used only when our buffer is full.
//   * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//     locations when the GarbageCollectionFinished method is called."
//   * GetGenerationBounds: "Therefore, the most interesting places to call GetGenerationBounds are in
//     ICorProfilerCallback2::GarbageCollectionStarted and ICorProfilerCallback2::GarbageCollectionFinished."
//     and "This function uses caller-allocated buffers."  COR_PRF_GC_GENERATION_RANGE: "The rangeLength
//     value is guaranteed to be accurate only if ICorProfilerInfo2::GetGenerationBounds or
//     ICorProfilerInfo2::GetObjectGeneration ... is called from the
//     ICorProfilerCallback2::GarbageCollectionStarted or the
//     ICorProfilerCallback2::GarbageCollectionFinished method."  (called in Finished only.)
//   * GetObjectGeneration is NOT used: "it may be called from any callback except those that occur
//     between ICorProfilerCallback2::GarbageCollectionStarted and
//     ICorProfilerCallback2::GarbageCollectionFinished."  (the census classifies by the bounds.)
//   * Caller-Allocated Buffers: "If pcBufferMax points to a value that is larger than
//     cBufferSizeStart, allocate a larger InfoBuffer buffer, update cBufferSizeStart with the new,
//     larger size, and call the method again."  "If InfoBuffer is null, cBufferSizeStart must be 0."
//   * GetObjectSize2: "Different objects of the same types often have the same size. However, some
//     types, such as arrays or strings, may have a different size for each object."
//   * COR_PRF_GC_GENERATION: COR_PRF_GC_GEN_0..2 = 0..2, COR_PRF_GC_LARGE_OBJECT_HEAP = 3,
//     COR_PRF_GC_PINNED_OBJECT_HEAP = 4.
//   * ICorProfilerInfo10::IsFrozenObject: "Given an ObjectID, determines whether the object is in a
//     read-only segment."  "Available since .NET Core 3.0".
//   * ICorProfilerObjectEnum: Next "Gets the specified number of contiguous objects from a sequential
//     collection of objects, starting at the enumerator's current position in the sequence."
//     GetCount: "This method will always return zero in .NET Framework version 3.5 Service Pack 1
//     (SP1) and later versions." -> GetCount is only reported, never trusted; Next is looped.
//   * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an
//     S_OK HRESULT and values for any non-null output parameters. Otherwise, it returns S_FALSE."
//   * GetClassIDInfo2 / GetModuleMetaData: "Profiler code can call ICorProfilerInfo::GetModuleMetaData
//     to obtain a metadata interface for a given module."  "Some modules (such as resource modules)
//     have no metadata. In those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and
//     a null in *ppOut."
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//     the Shutdown method is called."
//
// ICorProfilerInfo14 has no page on learn.microsoft.com (checked).  Its declarations below come from
// the public corprof.idl facts: ICorProfilerInfo14 : ICorProfilerInfo13 { EnumerateNonGCObjects(
// [out] ICorProfilerObjectEnum**); GetNonGCHeapBounds([in] ULONG cObjectRanges, [out] ULONG*
// pcObjectRanges, [out, size_is(cObjectRanges), length_is(*pcObjectRanges)]
// COR_PRF_NONGC_HEAP_RANGE ranges[]); EventPipeCreateProvider2(...) } (already in the kit's
// interfaces.h), and typedef struct COR_PRF_NONGC_HEAP_RANGE { ObjectID rangeStart; UINT_PTR
// rangeLength; UINT_PTR rangeLengthReserved; } (declared here).  ICorProfilerObjectEnum is declared
// here from its documented IDL (Skip, Reset, Clone, GetCount, Next).  GetNonGCHeapBounds is treated
// exactly like GetGenerationBounds (same parameter shape -> the caller-allocated-buffer rules), and
// both Info14 calls are made where the GC documentation says heap inspection is safe
// (GarbageCollectionFinished).
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace profharness {
// corprof.idl (public): the non-GC heap range returned by ICorProfilerInfo14::GetNonGCHeapBounds.
struct COR_PRF_NONGC_HEAP_RANGE {
    ObjectID rangeStart;
    UINT_PTR rangeLength;
    UINT_PTR rangeLengthReserved;
};
// corprof.idl / documented interface, vtable order: IUnknown, Skip, Reset, Clone, GetCount, Next.
struct ICorProfilerObjectEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerObjectEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, ObjectID objects[], ULONG* pceltFetched) = 0;
};
}  // namespace profharness

using namespace docfix;

namespace {

constexpr int kMaxGen = 5;  // COR_PRF_GC_GEN_0..2, LARGE_OBJECT_HEAP, PINNED_OBJECT_HEAP
const char* const kGenName[kMaxGen] = {"gen0", "gen1", "gen2", "LOH", "POH"};
constexpr size_t kMaxWalkObjects = 8u * 1024u * 1024u;  // census buffer cap (entries)
constexpr int kTopTypes = 3;

struct Tally {
    std::uint64_t objects = 0;
    std::uint64_t bytes = 0;
    void add(std::uint64_t b) {
        ++objects;
        bytes += b;
    }
};

struct TypeLine {
    std::string name;
    Tally t;
};

// One census, taken at GarbageCollectionFinished.  Plain data only (printable in Shutdown).
struct Census {
    unsigned gcIndex = 0;
    int cGenerations = 0;
    bool collected[kMaxGen] = {};
    COR_PRF_GC_REASON reason = 0;
    // GC heap
    HRESULT boundsHr = S_OK;
    unsigned rangeCount[kMaxGen] = {};
    std::uint64_t rangeUsed[kMaxGen] = {};
    std::uint64_t rangeReserved[kMaxGen] = {};
    Tally gen[kMaxGen];
    Tally frozenInWalk;     // walked object outside every generation range, IsFrozenObject == TRUE
    Tally unclassified;     // walked object outside every range and not (known to be) frozen
    std::uint64_t unloadingType = 0;
    std::uint64_t sizeFailures = 0;
    std::uint64_t droppedWalk = 0;
    std::vector<TypeLine> topGc;
    // non-GC heap
    bool nongcAvailable = false;
    HRESULT nongcBoundsHr = S_OK;
    HRESULT nongcEnumHr = S_OK;
    unsigned nongcRanges = 0;
    std::uint64_t nongcUsed = 0;
    std::uint64_t nongcReserved = 0;
    ULONG nongcGetCount = 0;
    HRESULT nongcGetCountHr = S_OK;
    Tally nongc;
    std::uint64_t nongcOutsideBounds = 0;
    std::uint64_t nongcNotFrozen = 0;  // IsFrozenObject said FALSE for a non-GC object
    std::uint64_t nongcIsFrozenChecked = 0;
    std::uint64_t nongcInfoFailures = 0;
    std::vector<TypeLine> topNongc;
};

struct WalkEntry {
    ObjectID id;
    ClassID cls;
};

const char* ElementTypeName(CorElementType et) {
    switch (et) {
        case 0x02: return "System.Boolean";
        case 0x03: return "System.Char";
        case 0x04: return "System.SByte";
        case 0x05: return "System.Byte";
        case 0x06: return "System.Int16";
        case 0x07: return "System.UInt16";
        case 0x08: return "System.Int32";
        case 0x09: return "System.UInt32";
        case 0x0a: return "System.Int64";
        case 0x0b: return "System.UInt64";
        case 0x0c: return "System.Single";
        case 0x0d: return "System.Double";
        case 0x0e: return "System.String";
        case 0x18: return "System.IntPtr";
        case 0x19: return "System.UIntPtr";
        case 0x1c: return "System.Object";
        default: return "?";
    }
}

}  // namespace

class NonGcHeapCensus : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[nongcheap] QueryInterface(ICorProfilerInfo4) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        // Optional interfaces: their absence only narrows the report.
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info10_)))) info10_ = nullptr;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo14, reinterpret_cast<void**>(&info14_)))) info14_ = nullptr;

        // Caller-allocated buffer, single pass (a version string fits in 64 WCHARs; re-asked if not).
        // Note: a zero-length "size query" is answered with ERROR_INSUFFICIENT_BUFFER by 3.1, so a real
        // buffer is always passed.
        USHORT clrId = 0, major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE rtType = 0;
        std::vector<WCHAR> ver(64);
        ULONG verLen = 0;
        HRESULT rhr = info_->GetRuntimeInformation(&clrId, &rtType, &major, &minor, &build, &qfe, (ULONG)ver.size(),
                                                   &verLen, ver.data());
        if (succeeded(rhr) && verLen > ver.size()) {
            ver.resize(verLen);
            rhr = info_->GetRuntimeInformation(&clrId, &rtType, &major, &minor, &build, &qfe, (ULONG)ver.size(),
                                               &verLen, ver.data());
        }
        if (succeeded(rhr))
            std::snprintf(runtime_, sizeof runtime_, "%u.%u.%u (%s)", major, minor, build,
                          to_utf8(ver.data(), std::min<size_t>(verLen, ver.size())).c_str());
        else
            std::snprintf(runtime_, sizeof runtime_, "? (hr 0x%08x)", (unsigned)rhr);

        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[nongcheap] SetEventMask failed 0x%08x\n", (unsigned)hr);
            ReleaseAll();
            return hr;
        }
        verbose_ = std::getenv("NONGCHEAP_VERBOSE") != nullptr;
        std::fprintf(stderr, "[nongcheap] initialized: runtime %s, Info10 %s, Info14 %s\n", runtime_,
                     info10_ ? "yes" : "no", info14_ ? "yes" : "no (non-GC heap census disabled)");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(walkLock_);
        inGc_ = true;
        cur_ = Census();
        cur_.gcIndex = ++gcCount_;
        cur_.reason = reason;
        cur_.cGenerations = cGenerations;
        for (int i = 0; i < cGenerations && i < kMaxGen; ++i)
            cur_.collected[i] = generationCollected != nullptr && generationCollected[i] != 0;
        if (reason == 1 /* COR_PRF_GC_INDUCED */) ++induced_;
        walk_.clear();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID objectId, ClassID classId, ULONG, ObjectID*) override {
        if (shutdown_.load()) return S_OK;
        // Record only; the object must not be inspected during this callback.
        std::lock_guard<std::mutex> g(walkLock_);
        if (!inGc_) return S_OK;
        if (walk_.size() >= kMaxWalkObjects) {
            ++cur_.droppedWalk;
            return E_FAIL;  // documented: stops this callback until the next GC
        }
        walk_.push_back(WalkEntry{objectId, classId});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(walkLock_);
        if (!inGc_) return S_OK;  // attached mid-GC or unmatched: nothing consistent to report
        inGc_ = false;
        CensusGcHeap();
        if (info14_ != nullptr) CensusNonGcHeap();
        cur_.topGc = TopTypes(gcTypes_);
        cur_.topNongc = TopTypes(nongcTypes_);
        gcTypes_.clear();
        nongcTypes_.clear();
        walk_.clear();

        std::uint64_t live = 0, liveBytes = 0;
        for (int i = 0; i < kMaxGen; ++i) {
            live += cur_.gen[i].objects;
            liveBytes += cur_.gen[i].bytes;
        }
        if (liveBytes > peakLiveBytes_) {
            peakLiveBytes_ = liveBytes;
            peakLiveObjects_ = live;
            peakGc_ = cur_.gcIndex;
        }
        totalWalked_ += live + cur_.frozenInWalk.objects + cur_.unclassified.objects;
        if (cur_.nongcAvailable) {
            if (firstNongcObjects_ == UINT64_MAX) firstNongcObjects_ = cur_.nongc.objects;
            lastNongcObjects_ = cur_.nongc.objects;
        }
        if (verbose_) PrintCensusLine(cur_);
        last_ = cur_;
        haveLast_ = true;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(walkLock_);
        std::fprintf(stderr, "[nongcheap] shutdown: runtime %s, gcs=%u (induced %u), heap-walked objects=%llu\n",
                     runtime_, gcCount_, induced_, (unsigned long long)totalWalked_);
        if (haveLast_) {
            const Census& c = last_;
            std::fprintf(stderr, "[nongcheap] last census (gc #%u):", c.gcIndex);
            for (int i = 0; i < kMaxGen && i < std::max(c.cGenerations, 4); ++i)
                std::fprintf(stderr, " %s %llu obj/%llu KB (%u ranges)", kGenName[i],
                             (unsigned long long)c.gen[i].objects, (unsigned long long)(c.gen[i].bytes / 1024),
                             c.rangeCount[i]);
            std::fprintf(stderr, "; frozen-in-walk %llu; unclassified %llu; size failures %llu\n",
                         (unsigned long long)c.frozenInWalk.objects, (unsigned long long)c.unclassified.objects,
                         (unsigned long long)c.sizeFailures);
            PrintTop("top GC-heap types", c.topGc);
            if (c.nongcAvailable) {
                std::fprintf(stderr,
                             "[nongcheap] non-GC heap: %u range(s), used %llu KB / reserved %llu KB; %llu objects, "
                             "%llu KB (enum GetCount=%lu hr=0x%08x); first/last census objects %llu/%llu; outside "
                             "bounds %llu; IsFrozenObject FALSE %llu of %llu\n",
                             c.nongcRanges, (unsigned long long)(c.nongcUsed / 1024),
                             (unsigned long long)(c.nongcReserved / 1024), (unsigned long long)c.nongc.objects,
                             (unsigned long long)(c.nongc.bytes / 1024), (unsigned long)c.nongcGetCount,
                             (unsigned)c.nongcGetCountHr, (unsigned long long)firstNongcObjects_,
                             (unsigned long long)lastNongcObjects_, (unsigned long long)c.nongcOutsideBounds,
                             (unsigned long long)c.nongcNotFrozen, (unsigned long long)c.nongcIsFrozenChecked);
                PrintTop("top non-GC types", c.topNongc);
            } else if (info14_ != nullptr) {
                std::fprintf(stderr, "[nongcheap] non-GC heap: census failed (bounds hr=0x%08x, enum hr=0x%08x)\n",
                             (unsigned)c.nongcBoundsHr, (unsigned)c.nongcEnumHr);
            } else {
                std::fprintf(stderr, "[nongcheap] non-GC heap: not available (ICorProfilerInfo14 not supported by "
                                     "this runtime)\n");
            }
            std::fprintf(stderr, "[nongcheap] peak live GC heap: %llu objects, %llu KB at gc #%u\n",
                         (unsigned long long)peakLiveObjects_, (unsigned long long)(peakLiveBytes_ / 1024), peakGc_);
        } else {
            std::fprintf(stderr, "[nongcheap] no garbage collection observed: nothing to report\n");
        }
        ReleaseAll();
        return S_OK;
    }

private:
    // --- GC heap -------------------------------------------------------------------------------
    void CensusGcHeap() {
        // Caller-allocated buffer, single pass with re-allocation when too small.
        if (genRanges_.size() < 64) genRanges_.resize(64);
        ULONG total = 0;
        HRESULT hr = S_OK;
        for (int attempt = 0; attempt < 4; ++attempt) {
            hr = info_->GetGenerationBounds((ULONG)genRanges_.size(), &total, genRanges_.data());
            if (failed(hr) || total <= genRanges_.size()) break;
            genRanges_.resize(total + 16);
        }
        cur_.boundsHr = hr;
        std::vector<COR_PRF_GC_GENERATION_RANGE> ranges;
        if (succeeded(hr)) {
            ULONG n = std::min<ULONG>(total, (ULONG)genRanges_.size());
            ranges.assign(genRanges_.begin(), genRanges_.begin() + n);
        }
        for (const auto& r : ranges) {
            if (verbose_ && std::getenv("NONGCHEAP_RANGES"))
                std::fprintf(stderr, "   range gen=%d start=%llx len=%llx res=%llx\n", (int)r.generation,
                             (unsigned long long)r.rangeStart, (unsigned long long)r.rangeLength,
                             (unsigned long long)r.rangeLengthReserved);
            if (r.generation < 0 || r.generation >= kMaxGen) continue;
            ++cur_.rangeCount[r.generation];
            cur_.rangeUsed[r.generation] += r.rangeLength;
            cur_.rangeReserved[r.generation] += r.rangeLengthReserved;
        }
        std::sort(ranges.begin(), ranges.end(),
                  [](const COR_PRF_GC_GENERATION_RANGE& a, const COR_PRF_GC_GENERATION_RANGE& b) {
                      return a.rangeStart < b.rangeStart;
                  });

        for (const WalkEntry& e : walk_) {
            if (e.cls == 0) ++cur_.unloadingType;
            SIZE_T size = 0;
            if (failed(info_->GetObjectSize2(e.id, &size))) {
                ++cur_.sizeFailures;
                size = 0;
            }
            int gen = FindGeneration(ranges, e.id);
            if (gen >= 0) {
                cur_.gen[gen].add(size);
            } else {
                BOOL frozen = 0;
                if (info10_ != nullptr && succeeded(info10_->IsFrozenObject(e.id, &frozen)) && frozen)
                    cur_.frozenInWalk.add(size);
                else
                    cur_.unclassified.add(size);
            }
            if (e.cls != 0) gcTypes_[e.cls].add(size);
        }
    }

    static int FindGeneration(const std::vector<COR_PRF_GC_GENERATION_RANGE>& sorted, ObjectID id) {
        auto it = std::upper_bound(sorted.begin(), sorted.end(), id,
                                   [](ObjectID v, const COR_PRF_GC_GENERATION_RANGE& r) { return v < r.rangeStart; });
        if (it == sorted.begin()) return -1;
        --it;
        // rangeLength is the used portion ("accurate" in GarbageCollectionFinished).
        if (id >= it->rangeStart && id < it->rangeStart + it->rangeLength && it->generation >= 0 &&
            it->generation < kMaxGen)
            return it->generation;
        return -1;
    }

    // --- non-GC heap (ICorProfilerInfo14) ---------------------------------------------------------
    void CensusNonGcHeap() {
        // Same caller-allocated-buffer protocol as GetGenerationBounds.
        if (nongcRanges_.size() < 8) nongcRanges_.resize(8);
        ULONG total = 0;
        HRESULT hr = S_OK;
        for (int attempt = 0; attempt < 4; ++attempt) {
            hr = info14_->GetNonGCHeapBounds((ULONG)nongcRanges_.size(), &total, nongcRanges_.data());
            if (failed(hr) || total <= nongcRanges_.size()) break;
            nongcRanges_.resize(total + 8);
        }
        cur_.nongcBoundsHr = hr;
        std::vector<COR_PRF_NONGC_HEAP_RANGE> ranges;
        if (succeeded(hr)) {
            ULONG n = std::min<ULONG>(total, (ULONG)nongcRanges_.size());
            ranges.assign(nongcRanges_.begin(), nongcRanges_.begin() + n);
            cur_.nongcRanges = n;
            for (const auto& r : ranges) {
                cur_.nongcUsed += r.rangeLength;
                cur_.nongcReserved += r.rangeLengthReserved;
            }
        }

        ICorProfilerObjectEnum* en = nullptr;
        hr = info14_->EnumerateNonGCObjects(&en);
        cur_.nongcEnumHr = hr;
        if (failed(hr) || en == nullptr) return;
        cur_.nongcGetCountHr = en->GetCount(&cur_.nongcGetCount);

        ObjectID batch[256];
        for (;;) {
            ULONG fetched = 0;
            HRESULT nhr = en->Next(256, batch, &fetched);
            if (failed(nhr)) {
                cur_.nongcEnumHr = nhr;
                break;
            }
            if (fetched > 256) fetched = 256;
            for (ULONG i = 0; i < fetched; ++i) {
                ObjectID id = batch[i];
                SIZE_T size = 0;
                ClassID cls = 0;
                if (failed(info_->GetObjectSize2(id, &size))) {
                    ++cur_.nongcInfoFailures;
                    size = 0;
                }
                if (failed(info_->GetClassFromObject(id, &cls))) {
                    ++cur_.nongcInfoFailures;
                    cls = 0;
                }
                cur_.nongc.add(size);
                if (cls != 0) nongcTypes_[cls].add(size);
                bool inside = false;
                for (const auto& r : ranges)
                    if (id >= r.rangeStart && id < r.rangeStart + r.rangeLength) {
                        inside = true;
                        break;
                    }
                if (!inside && !ranges.empty()) ++cur_.nongcOutsideBounds;
                if (info10_ != nullptr) {
                    BOOL frozen = 0;
                    if (succeeded(info10_->IsFrozenObject(id, &frozen))) {
                        ++cur_.nongcIsFrozenChecked;
                        if (!frozen) ++cur_.nongcNotFrozen;
                    }
                }
            }
            if (nhr != S_OK || fetched == 0) break;  // S_FALSE: fewer than requested -> end
        }
        en->Release();
        cur_.nongcAvailable = succeeded(cur_.nongcEnumHr);
    }

    // --- type names ------------------------------------------------------------------------------
    std::vector<TypeLine> TopTypes(const std::unordered_map<ClassID, Tally>& types) {
        std::vector<std::pair<ClassID, Tally>> v(types.begin(), types.end());
        size_t k = std::min<size_t>(kTopTypes, v.size());
        std::partial_sort(v.begin(), v.begin() + k, v.end(),
                          [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
        std::vector<TypeLine> out;
        for (size_t i = 0; i < k; ++i) out.push_back(TypeLine{ClassName(v[i].first, 0), v[i].second});
        return out;
    }

    std::string ClassName(ClassID cls, int depth) {
        if (cls == 0) return "<unloading type>";
        auto it = names_.find(cls);
        if (it != names_.end()) return it->second;
        std::string name;
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {
            std::string en = (elem != 0 && depth < 4) ? ClassName(elem, depth + 1) : std::string(ElementTypeName(et));
            name = en + (rank <= 1 ? std::string("[]") : "[" + std::string(rank - 1, ',') + "]");
        } else {
            ModuleID mod = 0;
            mdTypeDef td = 0;
            ClassID parent = 0;
            ULONG32 nTypeArgs = 0;
            // Zero-length typeArgs buffer: only the count is wanted.
            if (succeeded(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nTypeArgs, nullptr)) && mod != 0) {
                IUnknown* unk = nullptr;
                HRESULT hr = info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk);
                if (hr == S_OK && unk != nullptr) {
                    auto* import = static_cast<IMetaDataImport*>(unk);
                    WCHAR buf[512];
                    ULONG len = 0;
                    DWORD flags = 0;
                    mdToken ext = 0;
                    if (succeeded(import->GetTypeDefProps(td, buf, 512, &len, &flags, &ext))) {
                        name = to_utf8(buf, std::min<ULONG>(len, 512));
                        if (len > 512) name += "...";
                    }
                    import->Release();
                }
                if (!name.empty() && nTypeArgs > 0) name += "<" + std::to_string(nTypeArgs) + " type args>";
            }
            if (name.empty()) {
                char tmp[40];
                std::snprintf(tmp, sizeof tmp, "class 0x%llx", (unsigned long long)cls);
                name = tmp;
            }
        }
        names_[cls] = name;
        return name;
    }

    // --- output / cleanup ------------------------------------------------------------------------
    void PrintCensusLine(const Census& c) {
        std::fprintf(stderr, "[nongcheap] gc #%u reason=%d collected=", c.gcIndex, (int)c.reason);
        for (int i = 0; i < c.cGenerations && i < kMaxGen; ++i) std::fputc(c.collected[i] ? '1' : '0', stderr);
        for (int i = 0; i < kMaxGen; ++i)
            std::fprintf(stderr, " %s=%llu/%lluKB", kGenName[i], (unsigned long long)c.gen[i].objects,
                         (unsigned long long)(c.gen[i].bytes / 1024));
        if (c.nongcAvailable)
            std::fprintf(stderr, " nongc=%llu/%lluKB", (unsigned long long)c.nongc.objects,
                         (unsigned long long)(c.nongc.bytes / 1024));
        std::fputc('\n', stderr);
    }

    static void PrintTop(const char* what, const std::vector<TypeLine>& top) {
        std::fprintf(stderr, "[nongcheap] %s:", what);
        if (top.empty()) std::fprintf(stderr, " (none)");
        for (const auto& t : top)
            std::fprintf(stderr, " %s x%llu (%llu KB);", t.name.c_str(), (unsigned long long)t.t.objects,
                         (unsigned long long)(t.t.bytes / 1024));
        std::fputc('\n', stderr);
    }

    void ReleaseAll() {
        if (info14_ != nullptr) info14_->Release();
        if (info10_ != nullptr) info10_->Release();
        if (info_ != nullptr) info_->Release();
        info14_ = nullptr;
        info10_ = nullptr;
        info_ = nullptr;
    }

    ICorProfilerInfo4* info_ = nullptr;
    ICorProfilerInfo10* info10_ = nullptr;
    ICorProfilerInfo14* info14_ = nullptr;
    char runtime_[96] = "?";
    bool verbose_ = false;
    std::atomic<bool> shutdown_{false};

    std::mutex walkLock_;  // guards everything below
    bool inGc_ = false;
    unsigned gcCount_ = 0;
    unsigned induced_ = 0;
    std::vector<WalkEntry> walk_;
    std::vector<COR_PRF_GC_GENERATION_RANGE> genRanges_;
    std::vector<COR_PRF_NONGC_HEAP_RANGE> nongcRanges_;
    std::unordered_map<ClassID, Tally> gcTypes_;
    std::unordered_map<ClassID, Tally> nongcTypes_;
    std::unordered_map<ClassID, std::string> names_;
    Census cur_;
    Census last_;
    bool haveLast_ = false;
    std::uint64_t totalWalked_ = 0;
    std::uint64_t peakLiveBytes_ = 0;
    std::uint64_t peakLiveObjects_ = 0;
    unsigned peakGc_ = 0;
    std::uint64_t firstNongcObjects_ = UINT64_MAX;
    std::uint64_t lastNongcObjects_ = 0;
};

DOCFIX_DEFINE_PROFILER(NonGcHeapCensus)
