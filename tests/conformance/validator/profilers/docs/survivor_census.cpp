// survivor_census.cpp -- per-GC census of the objects that survive each garbage collection.
//
// What it does: with COR_PRF_MONITOR_GC it records, for every GC, the blocks of surviving objects
// the runtime reports (MovedReferences2 for compacting collections, SurvivingReferences2 for
// non-compacting ones; a GC may deliver both, for different generations).  The blocks are only
// copied during those callbacks.  In GarbageCollectionFinished it inspects a sample of the
// survivors (the first object of up to 64 evenly spaced blocks): GetObjectSize2,
// GetClassFromObject, IsFrozenObject, and EnumerateObjectReferences (whose referents are
// IsFrozenObject-checked too).  Class names are resolved outside the GC, in RuntimeResumeFinished
// (COR_PRF_MONITOR_SUSPENDS), with GetClassIDInfo2 / IsArrayClass / GetModuleMetaData and
// IMetaDataImport::GetTypeDefProps.  Shutdown prints "survivor_census: gcs=<n> ..." and, per GC
// and per class, what was seen; it makes no ICorProfilerInfo call except the final Release.
// Uses ICorProfilerInfo10 (.NET Core 3.0+); without it (older runtimes) it falls back to
// ICorProfilerInfo4, says so on stderr, and skips the frozen / reference inspection.
//
// Documentation followed (learn.microsoft.com, profiling API):
//  * COR_PRF_MONITOR: COR_PRF_MONITOR_GC "Controls the GarbageCollectionStarted,
//    GarbageCollectionFinished, MovedReferences, MovedReferences2, SurvivingReferences,
//    SurvivingReferences2, ... callbacks"; COR_PRF_MONITOR_SUSPENDS "Controls the RuntimeSuspend*,
//    RuntimeResume*, ... callbacks".
//  * MovedReferences2: "None of the ObjectID values passed by MovedReferences2 are valid during the
//    callback itself ... Therefore, profilers should not attempt to inspect objects during a
//    MovedReferences2 call. A ICorProfilerCallback2::GarbageCollectionFinished callback indicates
//    that all objects have been moved to their new locations and inspection can be performed."
//    The new location of a block is newObjectIDRangeStart[i].
//  * SurvivingReferences2: "The common language runtime (CLR) calls SurvivingReferences2 for
//    non-compacting garbage collections. For compacting garbage collections, MovedReferences2 is
//    called instead. A single garbage collection can be compacting for one generation and
//    non-compacting for another."  "In the case of multiple callbacks during a garbage collection,
//    the information is cumulative" -- every callback's blocks are appended.
//  * GarbageCollectionStarted: "After the profiler has returned from this callback, the profiler
//    should consider all object IDs to be invalid until it receives a
//    ICorProfilerCallback2::GarbageCollectionFinished callback."
//  * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//    locations when the GarbageCollectionFinished method is called."
//  * GetClassIDInfo2: "Alternatively, you can first call GetClassIDInfo2 with a zero-length
//    typeArgs buffer to obtain the correct buffer size." (two passes; likewise for the type name
//    of GetTypeDefProps, per "Caller-Allocated Buffers": "First call with a zero-length InfoBuffer
//    parameter to obtain the correct buffer size.")
//  * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an
//    S_OK HRESULT ... Otherwise, it returns S_FALSE."
//  * GetModuleMetaData: "Some modules ... have no metadata. In those cases, GetModuleMetaData will
//    return an HRESULT value of S_FALSE, and a null in *ppOut."
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//    after the Shutdown method is called." "Certain immutable events may still occur after
//    shutdown; the profiler should take care to return immediately when this occurs."
//  * DoStackSnapshot (guideline reused): "Do not hold a lock while your profiler calls into a CLR
//    function that can trigger a garbage collection." -- no lock is held across runtime calls.
//
// Left ambiguous by the documents:
//  * No page says how to find the objects inside a reported block after the first one (object
//    alignment / padding are not documented), so only block starts are sampled.
//  * EnumerateObjectReferences says only that it "is similar to ObjectReferences"; it does not say
//    when it may be called, and ObjectReferenceCallback has no page (meaning of its BOOL result,
//    of `root`, whether the runtime may be re-entered from it).  It is called from
//    GarbageCollectionFinished, the callback returns TRUE ("continue"), and referents are checked
//    only after the enumeration has returned.
//  * IsFrozenObject has no remarks at all (when callable, what "read-only segment" covers).
//  * None of the pages of GetClassIDInfo2 / GetModuleMetaData say whether they may be called
//    during a GC; names are therefore resolved after it, in RuntimeResumeFinished.
//  * Whether MovedReferences2 also reports blocks that did not actually move is not said; every
//    reported block counts as a survivor block.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>
using namespace docfix;

namespace {

constexpr size_t kSamplesPerGc = 64;       // blocks inspected per GC
constexpr size_t kReferentsChecked = 16;   // referents per sampled object checked with IsFrozenObject
constexpr int kMaxNameDepth = 3;           // generic-argument nesting resolved in names

struct Block { ObjectID start; SIZE_T length; };

struct GcRecord {
    unsigned index = 0;
    unsigned gens = 0;  // bit g set when generationCollected[g]
    int reason = 0;
    size_t movedBlocks = 0, survivingBlocks = 0;
    unsigned long long movedBytes = 0, survivingBytes = 0;
    size_t sampled = 0, failures = 0, frozenSampled = 0, refs = 0, frozenReferents = 0;
    unsigned long long sampledBytes = 0;
};

struct ClassStat {
    size_t count = 0;
    unsigned long long bytes = 0;
    std::string name;  // empty until resolved in RuntimeResumeFinished
};

struct RefWalk { size_t count = 0; std::vector<ObjectID> firstFew; };

BOOL CollectReference(ObjectID /*root*/, ObjectID* reference, void* clientData) {
    auto* walk = static_cast<RefWalk*>(clientData);
    ObjectID target = reference != nullptr ? *reference : 0;
    if (target != 0) {
        ++walk->count;
        if (walk->firstFew.size() < kReferentsChecked) walk->firstFew.push_back(target);
    }
    return 1;  // keep enumerating
}

const char* ElementTypeName(CorElementType et) {  // primitive array elements without a ClassID
    static const char* const kNames[] = {nullptr, nullptr, "System.Boolean", "System.Char", "System.SByte",
                                         "System.Byte", "System.Int16", "System.UInt16", "System.Int32",
                                         "System.UInt32", "System.Int64", "System.UInt64", "System.Single",
                                         "System.Double", "System.String"};
    if (et < sizeof(kNames) / sizeof(kNames[0]) && kNames[et] != nullptr) return kNames[et];
    return et == 0x18 ? "System.IntPtr" : et == 0x19 ? "System.UIntPtr" : et == 0x1c ? "System.Object" : "<element>";
}

}  // namespace

class SurvivorCensus : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info10_));
        if (succeeded(hr) && info10_ != nullptr) {
            info_ = info10_;
        } else {
            info10_ = nullptr;
            hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
            if (failed(hr) || info_ == nullptr) {
                std::fprintf(stderr, "[survivor_census] ICorProfilerInfo4 unavailable (0x%08x)\n", (unsigned)hr);
                return failed(hr) ? hr : E_FAIL;
            }
            std::fprintf(stderr, "[survivor_census] ICorProfilerInfo10 unavailable: no IsFrozenObject / "
                                 "EnumerateObjectReferences, sizes and classes only\n");
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC | COR_PRF_MONITOR_SUSPENDS);
        if (failed(hr)) {
            std::fprintf(stderr, "[survivor_census] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = info10_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[survivor_census] initialized (%s)\n",
                     info10_ != nullptr ? "ICorProfilerInfo10" : "ICorProfilerInfo4");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        cur_ = GcRecord{};
        cur_.index = ++gcs_;
        cur_.reason = reason;
        for (int i = 0; i < cGenerations && i < 32 && generationCollected != nullptr; ++i)
            if (generationCollected[i]) cur_.gens |= 1u << i;
        blocks_.clear();
        return S_OK;
    }

    // Only the numbers are copied: the objects are not valid during this callback.
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cRanges, ObjectID* oldStart, ObjectID* newStart,
                                               SIZE_T* cLength) override {
        if (shutdown_.load() || newStart == nullptr || cLength == nullptr) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        for (ULONG i = 0; i < cRanges; ++i) {
            blocks_.push_back(Block{newStart[i], cLength[i]});
            cur_.movedBytes += cLength[i];
        }
        cur_.movedBlocks += cRanges;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cRanges, ObjectID* start, SIZE_T* cLength) override {
        if (shutdown_.load() || start == nullptr || cLength == nullptr) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        for (ULONG i = 0; i < cRanges; ++i) {
            blocks_.push_back(Block{start[i], cLength[i]});
            cur_.survivingBytes += cLength[i];
        }
        cur_.survivingBlocks += cRanges;
        return S_OK;
    }

    // Objects are at their final locations: inspect the sample here (no lock held while calling in).
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        std::vector<Block> blocks;
        GcRecord rec;
        {
            std::lock_guard<std::mutex> g(lock_);
            blocks.swap(blocks_);
            rec = cur_;
        }
        std::vector<std::pair<ClassID, SIZE_T>> seen;
        const size_t stride = std::max<size_t>(1, blocks.size() / kSamplesPerGc);
        for (size_t i = 0; i < blocks.size() && rec.sampled < kSamplesPerGc; i += stride) {
            Inspect(blocks[i].start, rec, seen);
        }
        std::lock_guard<std::mutex> g(lock_);
        for (auto& s : seen) {
            ClassStat& cs = classes_[s.first];
            ++cs.count;
            cs.bytes += s.second;
        }
        records_.push_back(rec);
        return S_OK;
    }

    // The runtime is running again: resolve the names of classes seen in the last GC.
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        std::vector<ClassID> todo;
        {
            std::lock_guard<std::mutex> g(lock_);
            for (auto& kv : classes_)
                if (kv.second.name.empty()) todo.push_back(kv.first);
        }
        if (todo.empty()) return S_OK;
        std::vector<std::string> names;
        for (ClassID c : todo) names.push_back(ClassName(c, 0));
        std::lock_guard<std::mutex> g(lock_);
        for (size_t i = 0; i < todo.size(); ++i) classes_[todo[i]].name = names[i];
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(lock_);
        GcRecord t;
        unsigned compacting = 0, noncompacting = 0, mixed = 0;
        for (const GcRecord& r : records_) {
            t.movedBlocks += r.movedBlocks; t.survivingBlocks += r.survivingBlocks;
            t.movedBytes += r.movedBytes; t.survivingBytes += r.survivingBytes;
            t.sampled += r.sampled; t.sampledBytes += r.sampledBytes; t.failures += r.failures;
            t.frozenSampled += r.frozenSampled; t.refs += r.refs; t.frozenReferents += r.frozenReferents;
            if (r.movedBlocks && r.survivingBlocks) ++mixed;
            else if (r.movedBlocks) ++compacting;
            else if (r.survivingBlocks) ++noncompacting;
        }
        std::fprintf(stderr,
                     "survivor_census: gcs=%u finished=%zu compacting=%u noncompacting=%u mixed=%u "
                     "moved_blocks=%zu surviving_blocks=%zu survivor_bytes=%llu sampled=%zu sampled_bytes=%llu "
                     "frozen_sampled=%zu refs=%zu frozen_referents=%zu inspect_failures=%zu api=%s\n",
                     gcs_, records_.size(), compacting, noncompacting, mixed, t.movedBlocks, t.survivingBlocks,
                     t.movedBytes + t.survivingBytes, t.sampled, t.sampledBytes, t.frozenSampled, t.refs,
                     t.frozenReferents, t.failures, info10_ != nullptr ? "ICorProfilerInfo10" : "ICorProfilerInfo4");
        for (const GcRecord& r : records_)
            std::fprintf(stderr,
                         "survivor_census:   gc#%u gens=0x%x reason=%d moved_blocks=%zu (%llu B) "
                         "surviving_blocks=%zu (%llu B) sampled=%zu refs=%zu\n",
                         r.index, r.gens, r.reason, r.movedBlocks, r.movedBytes, r.survivingBlocks,
                         r.survivingBytes, r.sampled, r.refs);
        std::vector<std::pair<ClassID, ClassStat>> top(classes_.begin(), classes_.end());
        std::sort(top.begin(), top.end(),
                  [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
        for (size_t i = 0; i < top.size() && i < 8; ++i)
            std::fprintf(stderr, "survivor_census:   class %-48s sampled=%zu bytes=%llu\n",
                         top[i].second.name.empty() ? "<unresolved>" : top[i].second.name.c_str(),
                         top[i].second.count, top[i].second.bytes);
        if (info_ != nullptr) info_->Release();  // the only use of the info pointer in Shutdown
        info_ = info10_ = nullptr;
        return S_OK;
    }

private:
    void Inspect(ObjectID obj, GcRecord& rec, std::vector<std::pair<ClassID, SIZE_T>>& seen) {
        SIZE_T size = 0;
        ClassID cls = 0;
        if (failed(info_->GetObjectSize2(obj, &size)) || failed(info_->GetClassFromObject(obj, &cls))) {
            ++rec.failures;
            return;
        }
        ++rec.sampled;
        rec.sampledBytes += size;
        seen.emplace_back(cls, size);
        if (info10_ == nullptr) return;
        BOOL frozen = 0;
        if (succeeded(info10_->IsFrozenObject(obj, &frozen)) && frozen) ++rec.frozenSampled;
        RefWalk walk;
        if (failed(info10_->EnumerateObjectReferences(obj, &CollectReference, &walk))) {
            ++rec.failures;
            return;
        }
        rec.refs += walk.count;
        for (ObjectID target : walk.firstFew) {
            BOOL f = 0;
            if (succeeded(info10_->IsFrozenObject(target, &f)) && f) ++rec.frozenReferents;
        }
    }

    std::string ClassName(ClassID cls, int depth) {
        if (cls == 0) return "?";
        CorElementType elemType = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &elemType, &elem, &rank) == S_OK) {
            std::string inner = elem != 0 && depth < kMaxNameDepth ? ClassName(elem, depth + 1)
                                                                    : ElementTypeName(elemType);
            return inner + "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        }
        ModuleID module = 0;
        mdTypeDef token = 0;
        ClassID parent = 0;
        ULONG32 nArgs = 0;
        // Pass 1: zero-length typeArgs buffer, to learn how many type arguments there are.
        if (failed(info_->GetClassIDInfo2(cls, &module, &token, &parent, 0, &nArgs, nullptr))) return "<unknown>";
        std::vector<ClassID> args(nArgs);
        if (nArgs > 0) {
            ULONG32 got = 0;
            if (failed(info_->GetClassIDInfo2(cls, &module, &token, &parent, nArgs, &got, args.data())) ||
                got > nArgs)
                args.clear();
        }
        std::string name = TypeDefName(module, token);
        if (!args.empty() && depth < kMaxNameDepth) {
            name += "<";
            for (size_t i = 0; i < args.size(); ++i) name += (i ? "," : "") + ClassName(args[i], depth + 1);
            name += ">";
        }
        return name;
    }

    std::string TypeDefName(ModuleID module, mdTypeDef token) {
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr)
            return "<no metadata>";
        auto* import = static_cast<IMetaDataImport*>(unk);
        std::string name = "<unnamed>";
        ULONG needed = 0;
        DWORD flags = 0;
        mdToken extends = 0;
        // Pass 1 asks for the length only; pass 2 fills a buffer of that size.
        if (succeeded(import->GetTypeDefProps(token, nullptr, 0, &needed, &flags, &extends)) && needed > 0) {
            std::vector<WCHAR> buf(needed + 1, 0);
            ULONG got = 0;
            if (succeeded(import->GetTypeDefProps(token, buf.data(), needed + 1, &got, &flags, &extends)))
                name = to_utf8(buf.data(), std::min<size_t>(got, needed + 1));
        }
        import->Release();
        return name;
    }

    ICorProfilerInfo4* info_ = nullptr;     // newest common denominator actually used
    ICorProfilerInfo10* info10_ = nullptr;  // null when the runtime predates .NET Core 3.0
    std::atomic<bool> shutdown_{false};
    std::mutex lock_;
    unsigned gcs_ = 0;
    GcRecord cur_;
    std::vector<Block> blocks_;  // survivor blocks of the GC in progress (new locations)
    std::vector<GcRecord> records_;
    std::unordered_map<ClassID, ClassStat> classes_;
};

DOCFIX_DEFINE_PROFILER(SurvivorCensus)
