// rootref_generation_census.cpp -- "handle age census": how old are the objects GC handles keep alive?
//
// A second, independent take on the GC-handle area, written the way a quick in-house diagnostic would be:
// flat globals instead of a class with tables, a per-GC census line, no ICorProfilerInfo13.
//
// What it does:
//  * COR_PRF_MONITOR_GC only.  HandleCreated / HandleDestroyed keep a live-handle count and a set of live
//    handle IDs (to tell "handle roots we know" from "handles created before we loaded").
//  * For every GC, RootReferences2 tallies handle roots by COR_PRF_GC_ROOT_FLAGS (strong / weak / pinned /
//    refcounted) and -- the point of the tool -- buckets each non-null handle target by its generation, so a
//    census line per GC says how many handle targets live in gen0/gen1/gen2/LOH/POH.
//  * ConditionalWeakTableElementReferences pairs are counted.
//  * GarbageCollectionFinished prints nothing per GC unless CENSUS_VERBOSE is set; Shutdown prints totals.
//
// Documentation followed (quoted):
//  * COR_PRF_MONITOR_GC: "When the user specifies the COR_PRF_MONITOR_GC flag, all garbage collection events
//    except for ICorProfilerCallback::ObjectAllocated events will be raised in the profiler."
//  * RootReferences2: "If the type of the root is a handle, the root ID is for the garbage collection handle.";
//    "An entry in rootRefIds can be zero, which implies that the corresponding root reference is null".
//  * COR_PRF_GC_ROOT_FLAGS: "methods that use this enumeration, such as the ICorProfilerCallback2::RootReferences2
//    method, send 0 for the flags bitmask, indicating that all flags are turned off."
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//    Shutdown method is called."
//
// THE ONE BUG (the line tagged BUG below): the generation of each handle target is read with
// ICorProfilerInfo2::GetObjectGeneration from inside RootReferences2, i.e. while the garbage collection is in
// progress.  ICorProfilerInfo2::GetObjectGeneration: "The GetObjectGeneration method may be called from any
// profiler callback, provided that garbage collection is not in progress. That is, it may be called from any
// callback except those that occur between ICorProfilerCallback2::GarbageCollectionStarted and
// ICorProfilerCallback2::GarbageCollectionFinished."  RootReferences2 itself adds: "profilers should not
// attempt to inspect objects during a RootReferences2 call."
#include <mutex>
#include <unordered_set>

#include "common.h"

using namespace docfix;

namespace {

ICorProfilerInfo2* g_info = nullptr;
std::atomic<bool> g_down{false};
std::mutex g_mu;
std::unordered_set<GCHandleID> g_live;
unsigned long long g_created = 0, g_destroyed = 0, g_null_created = 0, g_destroy_unknown = 0;
unsigned long long g_gcs = 0, g_handle_roots = 0, g_known_roots = 0, g_null_roots = 0, g_other_roots = 0;
unsigned long long g_by_kind[4] = {};       // strong, weak, pinned, refcounted
unsigned long long g_gen_total[6] = {};     // gen0 gen1 gen2 loh poh ?
unsigned long long g_gen_this_gc[6] = {};
unsigned long long g_gen_calls = 0, g_gen_ok = 0, g_gen_failed = 0;
HRESULT g_gen_last_error = S_OK;
unsigned long long g_cwt = 0;
bool g_verbose = false;

const char* const kGen[6] = {"gen0", "gen1", "gen2", "loh", "poh", "?"};

}  // namespace

class RootRefGenerationCensus : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&g_info))) || !g_info) {
            std::fprintf(stderr, "[census] no ICorProfilerInfo2\n");
            return E_FAIL;
        }
        HRESULT hr = g_info->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[census] SetEventMask failed 0x%08x\n", (unsigned)hr);
            g_info->Release();
            g_info = nullptr;
            return E_FAIL;
        }
        g_verbose = std::getenv("CENSUS_VERBOSE") != nullptr;
        std::fprintf(stderr, "[census] handle age census loaded\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID handleId, ObjectID initialObjectId) override {
        if (g_down) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        ++g_created;
        if (initialObjectId == 0) ++g_null_created;
        g_live.insert(handleId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID handleId) override {
        if (g_down) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        ++g_destroyed;
        if (g_live.erase(handleId) == 0) ++g_destroy_unknown;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        if (g_down) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        ++g_gcs;
        for (auto& g : g_gen_this_gc) g = 0;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG n, ObjectID* refs, COR_PRF_GC_ROOT_KIND* kinds,
                                              COR_PRF_GC_ROOT_FLAGS* flags, UINT_PTR* ids) override {
        if (g_down || n == 0 || refs == nullptr || kinds == nullptr) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        for (ULONG i = 0; i < n; ++i) {
            if (kinds[i] != 3) {  // COR_PRF_GC_ROOT_HANDLE
                ++g_other_roots;
                continue;
            }
            ++g_handle_roots;
            if (ids && g_live.count(static_cast<GCHandleID>(ids[i]))) ++g_known_roots;
            COR_PRF_GC_ROOT_FLAGS f = flags ? flags[i] : 0;
            int k = (f & 0x2) ? 1 : (f & 0x1) ? 2 : (f & 0x8) ? 3 : 0;  // WEAKREF, PINNING, REFCOUNTED, else strong
            ++g_by_kind[k];
            if (refs[i] == 0) {
                ++g_null_roots;
                continue;
            }
            if (f & 0x4) continue;  // INTERIOR: not an object start
            COR_PRF_GC_GENERATION_RANGE range{};
            ++g_gen_calls;
            HRESULT hr = g_info->GetObjectGeneration(refs[i], &range);  // BUG: GetObjectGeneration during a GC (inside RootReferences2); the docs allow it only "provided that garbage collection is not in progress"
            int slot = 5;
            if (failed(hr)) {
                ++g_gen_failed;
                g_gen_last_error = hr;
            } else {
                ++g_gen_ok;
                if (range.generation >= 0 && range.generation <= 4) slot = range.generation;
            }
            ++g_gen_total[slot];
            ++g_gen_this_gc[slot];
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ConditionalWeakTableElementReferences(ULONG n, ObjectID*, ObjectID*, GCHandleID*) override {
        if (g_down) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        g_cwt += n;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (g_down || !g_verbose) return S_OK;
        std::lock_guard<std::mutex> l(g_mu);
        std::fprintf(stderr, "[census] gc#%llu handle targets: gen0=%llu gen1=%llu gen2=%llu loh=%llu poh=%llu ?=%llu\n",
                     g_gcs, g_gen_this_gc[0], g_gen_this_gc[1], g_gen_this_gc[2], g_gen_this_gc[3], g_gen_this_gc[4],
                     g_gen_this_gc[5]);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        g_down = true;
        std::lock_guard<std::mutex> l(g_mu);
        std::fprintf(stderr,
                     "[census] summary: gcs=%llu handles created=%llu destroyed=%llu live=%zu null-initial=%llu "
                     "destroy-unknown=%llu\n",
                     g_gcs, g_created, g_destroyed, g_live.size(), g_null_created, g_destroy_unknown);
        std::fprintf(stderr,
                     "[census] handle roots=%llu known=%llu null=%llu (strong=%llu weak=%llu pinned=%llu refcounted=%llu) "
                     "other roots=%llu cwt pairs=%llu\n",
                     g_handle_roots, g_known_roots, g_null_roots, g_by_kind[0], g_by_kind[1], g_by_kind[2], g_by_kind[3],
                     g_other_roots, g_cwt);
        std::string gens;
        for (int i = 0; i < 6; ++i) {
            if (!g_gen_total[i]) continue;
            gens += (gens.empty() ? "" : " ") + std::string(kGen[i]) + "=" + std::to_string(g_gen_total[i]);
        }
        std::fprintf(stderr,
                     "[census] target generations: %s | GetObjectGeneration calls=%llu ok=%llu failed=%llu last-error=0x%08x\n",
                     gens.empty() ? "-" : gens.c_str(), g_gen_calls, g_gen_ok, g_gen_failed, (unsigned)g_gen_last_error);
        if (g_info) {
            g_info->Release();
            g_info = nullptr;
        }
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(RootRefGenerationCensus)
