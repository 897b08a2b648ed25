// gc_compaction_stats.cpp -- how much memory each compacting GC relocates, and of which types.
//
// What it does: counts garbage collections per generation (GarbageCollectionStarted), and for
// compacting ones sums the moved ranges and bytes reported by ICorProfilerCallback4::
// MovedReferences2.  Each moved block is attributed to the type of the object at its start, giving
// a "bytes relocated per type" histogram (which types make compaction expensive).  After each GC
// (GarbageCollectionFinished) the name of the top type is resolved through metadata.  At Shutdown
// it prints a summary.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize -- query the IUnknown for ICorProfilerInfo; the event
//     mask COR_PRF_MONITOR_GC "Controls the ... MovedReferences ... callbacks"
//     is set there.
//   * ICorProfilerCallback4::MovedReferences2 -- "This method is called if the profiler has
//     implemented the ICorProfilerCallback4 interface."; the three arrays are parallel
//     ("oldObjectIDRangeStart[i], newObjectIDRangeStart[i], and cObjectIDRangeLength[i] all concern
//     a single block of contiguous objects"); cObjectIDRangeLength[i] is "the size of a block of
//     contiguous objects in memory" (summed as bytes moved); "If the profiler implements both the
//     ICorProfilerCallback and the ICorProfilerCallback4 interfaces, the MovedReferences2 method is
//     called before the ICorProfilerCallback::MovedReferences method, but only if the
//     MovedReferences2 method returns successfully" (MovedReferences is left a no-op, so the
//     ranges are counted once).
//   * ICorProfilerCallback2::GarbageCollectionStarted / GarbageCollectionFinished -- the
//     generationCollected array has cGenerations entries; "A ICorProfilerCallback2::
//     GarbageCollectionFinished callback indicates that all objects have been moved to their new
//     locations and inspection can be performed." (name lookups happen there).
//   * Caller-Allocated Buffers in the Profiling API -- type names are read with the double-pass
//     method ("First call with a zero-length InfoBuffer parameter to obtain the correct buffer
//     size. Then set the buffer size to the value returned in pcBufferMax and call the function
//     again.").
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call after it, only Release.
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr unsigned kTypes = 1024;  // power of two
constexpr int kMaxGen = 3;  // gen0, gen1, gen2

struct TypeBucket {
    std::atomic<ClassID> cls{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> blocks{0};
};

}  // namespace

class GcCompactionStats : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[gc_compaction_stats] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[gc_compaction_stats] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[gc_compaction_stats] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        // Classify by the oldest small-object generation collected (0, 1, 2); the entries past 2
        // are the large (and, on newer runtimes, pinned) object heaps, collected with gen 2.
        int highest = -1;
        for (int g = 0; g < cGenerations && g < kMaxGen && generationCollected != nullptr; ++g)
            if (generationCollected[g]) highest = g;
        if (highest >= 0) gcs_[highest].fetch_add(1);
        movedThisGc_ = false;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cRanges, ObjectID* oldStart, ObjectID* newStart,
                                               SIZE_T* lengths) override {
        if (shutdown_.load() || cRanges == 0) return S_OK;
        if (!movedThisGc_) {
            movedThisGc_ = true;
            compactingGcs_.fetch_add(1);
        }
        ranges_.fetch_add(cRanges);
        for (ULONG i = 0; i < cRanges; ++i) {
            bytesMoved_.fetch_add(lengths[i]);
            if (newStart[i] == oldStart[i]) continue;  // block did not actually move
            // Attribute the block to the type of the object it starts with.  The block's contents
            // are still at the old address while the GC is reporting the plan, so read it there.
            ClassID cls = 0;
            unsigned k = inspected_.fetch_add(1);
            if (k < 3) {
                std::fprintf(stderr, "[gc_compaction_stats] MovedReferences2 range %u/%u: inspecting old=0x%llx (new=0x%llx len=%llu)\n",
                             (unsigned)i, (unsigned)cRanges, (unsigned long long)oldStart[i],
                             (unsigned long long)newStart[i], (unsigned long long)lengths[i]);
            }
            HRESULT hr = info_->GetClassFromObject(oldStart[i], &cls);  // BUG: "Therefore, profilers should not attempt to inspect objects during a MovedReferences2 call."
            if (k < 3) {
                std::fprintf(stderr, "[gc_compaction_stats]   GetClassFromObject(old=0x%llx) -> 0x%08x class=0x%llx\n",
                             (unsigned long long)oldStart[i], (unsigned)hr, (unsigned long long)cls);
            }
            if (failed(hr) || cls == 0) {
                inspectFailed_.fetch_add(1);
                lastFailure_.store(hr);
                continue;
            }
            Attribute(cls, lengths[i]);
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        // Objects are at their new locations now: safe point for metadata lookups.
        TypeBucket* top = nullptr;
        for (auto& b : types_)
            if (b.cls.load() != 0 && (top == nullptr || b.bytes.load() > top->bytes.load())) top = &b;
        if (top != nullptr && top->cls.load() != topClass_) {
            topClass_ = top->cls.load();
            ResolveTypeName(topClass_, topName_, sizeof(topName_));
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        unsigned distinct = 0;
        std::uint64_t topBytes = 0;
        for (auto& b : types_) {
            if (b.cls.load() == 0) continue;
            ++distinct;
            if (b.bytes.load() > topBytes) topBytes = b.bytes.load();
        }
        std::fprintf(stderr,
                     "gc_compaction_stats: gcs(gen0/1/2)=%u/%u/%u compacting=%u moved_ranges=%llu "
                     "bytes_moved=%llu blocks_inspected=%u inspect_failed=%u last_failure=0x%08x types=%u "
                     "top_type=%s top_type_bytes=%llu\n",
                     gcs_[0].load(), gcs_[1].load(), gcs_[2].load(), compactingGcs_.load(),
                     (unsigned long long)ranges_.load(), (unsigned long long)bytesMoved_.load(), inspected_.load(),
                     inspectFailed_.load(), (unsigned)lastFailure_.load(), distinct,
                     topName_[0] ? topName_ : "(unresolved)", (unsigned long long)topBytes);
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    void Attribute(ClassID cls, SIZE_T bytes) {
        std::uint64_t h = static_cast<std::uint64_t>(cls) * 0x9E3779B97F4A7C15ull;
        for (unsigned probe = 0; probe < kTypes; ++probe) {
            TypeBucket& b = types_[(h + probe) & (kTypes - 1)];
            ClassID cur = b.cls.load();
            if (cur == 0) {
                ClassID expected = 0;
                if (b.cls.compare_exchange_strong(expected, cls)) cur = cls;
                else cur = expected;
            }
            if (cur == cls) {
                b.bytes.fetch_add(bytes);
                b.blocks.fetch_add(1);
                return;
            }
        }
    }

    void ResolveTypeName(ClassID cls, char* out, size_t outSize) {
        ModuleID mod = 0;
        mdTypeDef td = 0;
        HRESULT hr = info_->GetClassIDInfo(cls, &mod, &td);
        if (failed(hr) || mod == 0 || td == 0) {  // arrays and other composite types have no typedef
            std::snprintf(out, outSize, "(class 0x%llx, no typedef: 0x%08x)", (unsigned long long)cls, (unsigned)hr);
            return;
        }
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return;
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        ULONG needed = 0;
        if (succeeded(md->GetTypeDefProps(td, nullptr, 0, &needed, nullptr, nullptr)) && needed > 0) {
            std::vector<WCHAR> name(needed);
            if (succeeded(md->GetTypeDefProps(td, name.data(), needed, &needed, nullptr, nullptr)))
                std::snprintf(out, outSize, "%s", to_utf8(name.data(), name.size()).c_str());
        }
        md->Release();
    }

    ICorProfilerInfo* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> gcs_[kMaxGen] = {};
    std::atomic<unsigned> compactingGcs_{0};
    std::atomic<std::uint64_t> ranges_{0};
    std::atomic<std::uint64_t> bytesMoved_{0};
    std::atomic<unsigned> inspected_{0};
    std::atomic<unsigned> inspectFailed_{0};
    std::atomic<HRESULT> lastFailure_{S_OK};
    bool movedThisGc_ = false;  // GC callbacks of one collection arrive on one thread, in order
    TypeBucket types_[kTypes];
    ClassID topClass_ = 0;
    char topName_[256] = {0};
};

DOCFIX_DEFINE_PROFILER(GcCompactionStats)
