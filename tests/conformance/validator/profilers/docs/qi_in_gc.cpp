// qi_in_gc.cpp -- GC heap-layout monitor that obtains ICorProfilerInfo4 lazily.
//
// What it does: Initialize keeps only the ICorProfilerInfo it QueryInterfaces from the IUnknown it
// is given and sets COR_PRF_MONITOR_GC.  In the first GarbageCollectionStarted it QueryInterfaces
// that ICorProfilerInfo for ICorProfilerInfo4 (cached for later GCs) and, in every
// GarbageCollectionStarted, calls GetGenerationBounds through it to record how many bytes each
// generation spans before the collection.  ObjectReferences/RootReferences (turned on by
// COR_PRF_MONITOR_GC) are only counted.  At Shutdown it prints a summary and releases both
// interface pointers.  Believed CORRECT.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."
//   * ICorProfilerInfo4 Interface: "Provides methods that code profilers use to communicate with
//     the common language runtime (CLR) to control event monitoring and request information."
//     It derives from ICorProfilerInfo3/2/ICorProfilerInfo, so the IUnknown::QueryInterface of the
//     info object is the documented way to reach it; nothing in the docs restricts when
//     QueryInterface may be called.
//   * ICorProfilerCallback2::GarbageCollectionStarted: "It is safe for the profiler to inspect
//     objects in their original locations during the GarbageCollectionStarted callback."
//   * ICorProfilerInfo2::GetGenerationBounds: "The GetGenerationBounds method can be called from
//     any profiler callback, provided that garbage collection is not in progress." ... "Therefore,
//     the most interesting places to call GetGenerationBounds are in
//     ICorProfilerCallback2::GarbageCollectionStarted and
//     ICorProfilerCallback2::GarbageCollectionFinished."  (Older versions of the page add: "That
//     is, it can be called from any callback except those that occur between
//     ICorProfilerCallback2::GarbageCollectionStarted and
//     ICorProfilerCallback2::GarbageCollectionFinished." -- GarbageCollectionStarted itself is not
//     "between".)  "This function uses caller-allocated buffers." -> double-pass protocol of the
//     Caller-Allocated Buffers page.
//   * ICorProfilerCallback::Shutdown: no ICorProfilerInfo calls except the final Releases.
#include <mutex>
#include <vector>

#include "common.h"

using namespace docfix;

namespace qigc {

class QiInGc : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[qi_in_gc] initialized (ICorProfilerInfo only)\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        if (info4_ == nullptr) {
            HRESULT hr = info_->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info4_));
            std::fprintf(stderr, "[qi_in_gc] first GC: QueryInterface(ICorProfilerInfo4) -> 0x%08x\n", (unsigned)hr);
            if (failed(hr)) {
                info4_ = nullptr;
                return S_OK;
            }
        }
        ULONG total = 0;
        HRESULT hr = info4_->GetGenerationBounds(0, &total, nullptr);
        std::vector<COR_PRF_GC_GENERATION_RANGE> ranges;
        if (succeeded(hr) && total > 0) {
            ranges.resize(total);
            ULONG got = 0;
            hr = info4_->GetGenerationBounds(total, &got, ranges.data());
            ranges.resize(succeeded(hr) ? std::min(got, total) : 0);
        }
        unsigned long long bytes[5] = {0, 0, 0, 0, 0};
        for (const auto& r : ranges)
            if (r.generation >= 0 && r.generation < 5) bytes[r.generation] += r.rangeLength;
        int highest = -1;
        for (int g = 0; g < cGenerations; ++g)
            if (generationCollected[g]) highest = g;
        std::lock_guard<std::mutex> g(mu_);
        ++gcs_;
        if (failed(hr)) ++boundsFailures_;
        rangesSeen_ += ranges.size();
        if (gcs_ <= 3 || std::getenv("DOCFIX_VERBOSE") != nullptr)
            std::fprintf(stderr,
                         "[qi_in_gc] gc#%lu reason=%d collects<=gen%d ranges=%zu gen0=%llu gen1=%llu gen2=%llu "
                         "loh=%llu poh=%llu\n",
                         gcs_, (int)reason, highest, ranges.size(), bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID, ClassID, ULONG, ObjectID*) override {
        ++objRefs_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        ++finished_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::fprintf(stderr,
                     "[qi_in_gc] summary: gcs_started=%lu gcs_finished=%lu ranges_seen=%lu bounds_failures=%lu "
                     "objref_callbacks=%lu info4=%s\n",
                     gcs_, finished_.load(), rangesSeen_, boundsFailures_, objRefs_.load(),
                     info4_ != nullptr ? "yes" : "no");
        // Final Releases only; pointers kept so that a callback racing with Shutdown (it returns
        // early on shutdown_) never dereferences null.
        if (info4_ != nullptr) info4_->Release();
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo4* info4_ = nullptr;  // obtained lazily in the first GarbageCollectionStarted
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    unsigned long gcs_ = 0, rangesSeen_ = 0, boundsFailures_ = 0;
    std::atomic<unsigned long> finished_{0}, objRefs_{0};
};

}  // namespace qigc

DOCFIX_DEFINE_PROFILER(qigc::QiInGc)
