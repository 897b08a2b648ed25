// heap_graph.cpp -- heap-graph profiler: per GC, the object graph and the roots, plus the class
// names of a sample of the objects seen.
//
// What it does
//   * Initialize: QueryInterface the given IUnknown for ICorProfilerInfo2 (GetClassIDInfo2 is an
//     ICorProfilerInfo2 method) and set COR_PRF_MONITOR_GC only.
//   * GarbageCollectionStarted: opens a new per-GC record (which generations were collected) and
//     empties the object buffers.
//   * ObjectReferences / RootReferences2: copy the IDs they are given (object -> references, root
//     object + root kind) into the profiler's own buffers.  Nothing is inspected there: no
//     ICorProfilerInfo call is made with those ObjectIDs inside these callbacks.
//   * GarbageCollectionFinished: takes an evenly spaced sample (at most kSampleSize) of the
//     objects reported in this GC and, still inside GarbageCollectionFinished, resolves each one:
//     GetClassFromObject -> GetClassIDInfo2 (two-pass for the type arguments) ->
//     GetModuleMetaData(ofRead, IID_IMetaDataImport) -> IMetaDataImport::GetTypeDefProps
//     (two-pass for the name).  Array classes (GetClassIDInfo2 answers
//     CORPROF_E_CLASSID_IS_ARRAY) are labelled through IsArrayClass instead.
//   * Shutdown: prints one stderr line starting "heap_graph:" with, per GC, the object, reference
//     and root counts (plus how many sampled objects were resolved), and releases the info pointer.
//     No other ICorProfilerInfo call is made from Shutdown.
//
// Documentation followed (learn.microsoft.com, unmanaged-api/profiling):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."
//   * ICorProfilerCallback::ObjectReferences -- "The object IDs returned by ObjectReferences are
//     not valid during the callback itself, because the garbage collection might be in the middle
//     of moving objects. Therefore, profilers must not attempt to inspect objects during an
//     ObjectReferences call. When ICorProfilerCallback2::GarbageCollectionFinished is called, the
//     garbage collection has completed and inspection can be safely done."  Also (paraphrase of the
//     current page): a null classId means objectId's type is unloading (such objects are counted,
//     the classId argument is never used to inspect anything); and "If the profiler returns an error from this
//     callback, the profiling services will discontinue invoking this callback until the next
//     garbage collection." (we return S_OK, and E_OUTOFMEMORY only when our buffers cannot grow).
//   * ICorProfilerCallback2::RootReferences2 -- "The object IDs returned by RootReferences2 are not
//     valid during the callback itself, because the garbage collection might be in the middle of
//     moving objects from old addresses to new addresses. Therefore, profilers should not attempt
//     to inspect objects during a RootReferences2 call. When
//     ICorProfilerCallback2::GarbageCollectionFinished is called, all objects have been moved to
//     their new locations and inspection can be safely performed."  And "Entries in rootRefIds can
//     be zero, which implies that the corresponding root reference is null and does not refer to an
//     object on the managed heap." (zero roots are counted as null roots, never sampled).
//   * ICorProfilerCallback2::GarbageCollectionFinished -- "It is safe for the profiler to inspect
//     objects in their final locations when the GarbageCollectionFinished method is called."  This
//     is why the resolution happens inside GarbageCollectionFinished, not on a thread of our own:
//     the documents promise validity "when GarbageCollectionFinished is called" and say nothing
//     about how long the IDs stay valid after it returns (the runtime resumes and a later GC may
//     move the objects).
//   * MovedReferences2 -- "None of the ObjectID values passed by MovedReferences2 are valid during
//     the callback itself ... A ICorProfilerCallback2::GarbageCollectionFinished callback indicates
//     that all objects have been moved to their new locations and inspection can be performed."
//     (we do not need moved references: every ObjectID we inspect was reported in the same GC, by
//     ObjectReferences, which reports objects "remaining in the heap after a garbage collection").
//   * ICorProfilerInfo2::GetClassIDInfo2 and "Caller-Allocated Buffers in the Profiling API" --
//     double-pass: "First call with a zero-length InfoBuffer parameter to obtain the correct buffer
//     size. Then set the buffer size to the value returned in pcBufferMax and call the function
//     again."  and "If InfoBuffer is null, cBufferSizeStart must be 0."  After the second pass the
//     returned count is compared again with the size we passed (it is never trusted blindly).
//   * GetClassIDInfo2 remarks: "The profiler code can call ICorProfilerInfo::GetModuleMetaData to
//     obtain a metadata interface for a given module. The metadata token that is returned to the
//     location referenced by pTypeDefToken can then be used to access the metadata for the class."
//   * DoStackSnapshot remarks (general guidance): "Do not hold a lock while your profiler calls
//     into a CLR function that can trigger a garbage collection."  Our mutex guards only our own
//     buffers; it is never held across an ICorProfilerInfo / IMetaDataImport call.
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
//
// Ambiguities met
//   * Whether ObjectIDs stay valid after GarbageCollectionFinished returns (until the next
//     GarbageCollectionStarted) is not stated; we therefore do not defer inspection to a worker
//     thread.  Equally, the documents do not say whether metadata calls (GetModuleMetaData,
//     GetTypeDefProps) are appropriate while the runtime is still suspended for the GC; nothing
//     forbids it, and the class names are resolved there so that the ClassID from
//     GetClassFromObject is used while it is known to be current.
//   * ObjectReferences/RootReferences2 may be delivered on several GC threads (server GC) -- the
//     documents do not say which thread; the buffers are therefore mutex-protected.
//   * RootReferences2's COR_PRF_GC_ROOT_KIND values are counted by raw value (stack, finalizer,
//     handle, other); rootIds are not used (the page: for root kinds other than stack and handle the
//     ID is opaque and should be ignored -- paraphrased).
//   * Whether a GC can begin while another one is still being reported (nested
//     GarbageCollectionStarted) is not stated; a second Started before Finished simply starts a new
//     record, and the sample is taken from whatever the latest record holds.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr size_t kSampleSize = 16;           // objects resolved per GC
constexpr size_t kMaxStoredEdges = 1u << 22; // keep memory bounded; counts stay exact
constexpr size_t kMaxGcRecords = 4096;

// COR_PRF_GC_ROOT_KIND values (corprof.idl): OTHER=0, STACK=1, FINALIZER=2, HANDLE=3.
constexpr int kRootKinds = 4;

struct GcRecord {
    unsigned index = 0;
    int maxGenCollected = -1;
    unsigned long long objects = 0;
    unsigned long long references = 0;
    unsigned long long roots = 0;
    unsigned long long nullRoots = 0;
    unsigned long long rootsByKind[kRootKinds] = {0, 0, 0, 0};
    unsigned long long nullClassObjects = 0;
    unsigned sampled = 0;
    unsigned resolved = 0;
    std::string firstNames;  // a few resolved names, for the log line
};

}  // namespace

class HeapGraphProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[heap_graph] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[heap_graph] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lock(mu_);
        GcRecord rec;
        rec.index = ++gcCount_;
        if (generationCollected != nullptr) {
            for (int g = 0; g < cGenerations; ++g)
                if (generationCollected[g]) rec.maxGenCollected = g;
        }
        if (records_.size() < kMaxGcRecords) {
            records_.push_back(rec);
            current_ = &records_.back();
        } else {
            overflow_ = rec;
            current_ = &overflow_;
        }
        objects_.clear();
        edges_.clear();
        inGc_ = true;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID objectId, ClassID classId, ULONG cObjectRefs,
                                               ObjectID* objectRefIds) override {
        if (shutdown_.load()) return S_OK;
        // Only copying: the IDs "are not valid during the callback itself".
        std::lock_guard<std::mutex> lock(mu_);
        if (current_ == nullptr) return S_OK;
        current_->objects += 1;
        current_->references += cObjectRefs;
        if (classId == 0) current_->nullClassObjects += 1;
        try {
            objects_.push_back(objectId);
            if (objectRefIds != nullptr && edges_.size() + cObjectRefs <= kMaxStoredEdges)
                edges_.insert(edges_.end(), objectRefIds, objectRefIds + cObjectRefs);
        } catch (...) {
            return E_OUTOFMEMORY;  // stops ObjectReferences for the rest of this GC only
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG cRootRefs, ObjectID* rootRefIds, COR_PRF_GC_ROOT_KIND* rootKinds,
                                              COR_PRF_GC_ROOT_FLAGS*, UINT_PTR*) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lock(mu_);
        if (current_ == nullptr) return S_OK;
        for (ULONG i = 0; i < cRootRefs; ++i) {
            current_->roots += 1;
            if (rootRefIds != nullptr && rootRefIds[i] == 0) current_->nullRoots += 1;
            int kind = rootKinds != nullptr ? static_cast<int>(rootKinds[i]) : 0;
            if (kind < 0 || kind >= kRootKinds) kind = 0;
            current_->rootsByKind[kind] += 1;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;

        // Copy the sample out under the lock; make no runtime call while holding it.
        std::vector<ObjectID> sample;
        GcRecord* rec = nullptr;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!inGc_ || current_ == nullptr) return S_OK;
            inGc_ = false;
            rec = current_;
            const size_t n = objects_.size();
            if (n > 0) {
                const size_t step = std::max<size_t>(1, n / kSampleSize);
                for (size_t i = 0; i < n && sample.size() < kSampleSize; i += step)
                    if (objects_[i] != 0) sample.push_back(objects_[i]);
            }
            objects_.clear();
            edges_.clear();
        }

        // "It is safe for the profiler to inspect objects in their final locations when the
        // GarbageCollectionFinished method is called."
        std::unordered_map<ModuleID, IMetaDataImport*> importers;
        std::unordered_map<ClassID, std::string> names;
        unsigned resolved = 0;
        std::string firstNames;
        for (ObjectID obj : sample) {
            ClassID cls = 0;
            HRESULT hr = info_->GetClassFromObject(obj, &cls);
            if (failed(hr) || cls == 0) {
                ++classFailures_;
                continue;
            }
            auto it = names.find(cls);
            if (it == names.end()) it = names.emplace(cls, ClassName(cls, importers)).first;
            if (it->second.empty()) continue;
            ++resolved;
            if (resolved <= 3) {
                if (!firstNames.empty()) firstNames += ",";
                firstNames += it->second;
            }
        }
        for (auto& kv : importers)
            if (kv.second != nullptr) kv.second->Release();

        std::lock_guard<std::mutex> lock(mu_);
        rec->sampled = static_cast<unsigned>(sample.size());
        rec->resolved = resolved;
        rec->firstNames = firstNames;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::string line = "heap_graph:";
        {
            std::lock_guard<std::mutex> lock(mu_);
            line += " gcs=" + std::to_string(gcCount_);
            for (const GcRecord& r : records_) {
                char buf[512];
                std::snprintf(buf, sizeof buf,
                              " [gc%u gen%d objects=%llu refs=%llu roots=%llu (null=%llu stack=%llu finalizer=%llu "
                              "handle=%llu other=%llu) sampled=%u resolved=%u%s%s]",
                              r.index, r.maxGenCollected, r.objects, r.references, r.roots, r.nullRoots,
                              r.rootsByKind[1], r.rootsByKind[2], r.rootsByKind[3], r.rootsByKind[0], r.sampled,
                              r.resolved, r.firstNames.empty() ? "" : " e.g. ", r.firstNames.c_str());
                line += buf;
            }
            if (gcCount_ > records_.size()) line += " (later GCs not itemised)";
        }
        line += " classFailures=" + std::to_string(classFailures_.load());
        std::fprintf(stderr, "%s\n", line.c_str());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // ClassID -> "Namespace.Name<n>" using GetClassIDInfo2 (two-pass) and the module metadata.
    std::string ClassName(ClassID cls, std::unordered_map<ModuleID, IMetaDataImport*>& importers) {
        ModuleID module = 0;
        mdTypeDef token = 0;
        ClassID parent = 0;
        ULONG32 nTypeArgs = 0;
        // Pass 1: zero-length buffer ("If InfoBuffer is null, cBufferSizeStart must be 0.").
        HRESULT hr = info_->GetClassIDInfo2(cls, &module, &token, &parent, 0, &nTypeArgs, nullptr);
        if (hr == CORPROF_E_CLASSID_IS_ARRAY) {
            CorElementType elem = 0;
            ClassID elemClass = 0;
            ULONG rank = 0;
            HRESULT hrA = info_->IsArrayClass(cls, &elem, &elemClass, &rank);
            if (hrA == S_OK) return "array(rank " + std::to_string(rank) + ")";
            return std::string();
        }
        if (failed(hr)) return std::string();
        if (nTypeArgs > 0) {
            // Pass 2: buffer sized from pcNumTypeArgs; re-check the count afterwards.
            std::vector<ClassID> typeArgs(nTypeArgs);
            ULONG32 got = 0;
            hr = info_->GetClassIDInfo2(cls, &module, &token, &parent, nTypeArgs, &got, typeArgs.data());
            if (failed(hr)) return std::string();
            nTypeArgs = std::min(got, nTypeArgs);
        }
        if (module == 0 || token == 0) return std::string();

        IMetaDataImport* import = nullptr;
        auto it = importers.find(module);
        if (it != importers.end()) {
            import = it->second;
        } else {
            IUnknown* unk = nullptr;
            hr = info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk);
            if (succeeded(hr) && unk != nullptr) import = reinterpret_cast<IMetaDataImport*>(unk);
            importers.emplace(module, import);  // nullptr cached too: don't retry this GC
        }
        if (import == nullptr) return std::string();

        // GetTypeDefProps, two-pass.
        ULONG cch = 0;
        DWORD flags = 0;
        mdToken extends = 0;
        hr = import->GetTypeDefProps(token, nullptr, 0, &cch, &flags, &extends);
        if (failed(hr) || cch == 0) return std::string();
        std::vector<WCHAR> name(cch);
        ULONG cch2 = 0;
        hr = import->GetTypeDefProps(token, name.data(), cch, &cch2, &flags, &extends);
        if (failed(hr)) return std::string();
        std::string out = to_utf8(name.data(), std::min<ULONG>(cch, cch2));
        if (nTypeArgs > 0) out += "<" + std::to_string(nTypeArgs) + ">";
        return out;
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<bool> shutdown_{false};

    std::mutex mu_;
    std::vector<GcRecord> records_;  // reserved up front (ctor): pointers into it stay valid
    GcRecord overflow_;
    GcRecord* current_ = nullptr;
    bool inGc_ = false;
    std::vector<ObjectID> objects_;
    std::vector<ObjectID> edges_;
    unsigned gcCount_ = 0;
    std::atomic<unsigned long long> classFailures_{0};

public:
    HeapGraphProfiler() { records_.reserve(kMaxGcRecords); }
};

DOCFIX_DEFINE_PROFILER(HeapGraphProfiler)
