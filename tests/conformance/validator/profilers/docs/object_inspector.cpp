// object_inspector.cpp -- an allocation profiler that looks inside strings and arrays.
//
// What it does
// ------------
//   * Initialize: QueryInterface the IUnknown it is handed for ICorProfilerInfo5 (it needs
//     GetStringLayout2 from ICorProfilerInfo3, GetObjectSize2 from ICorProfilerInfo4 and
//     GetEventMask2/SetEventMask2 from ICorProfilerInfo5), then sets, in Initialize and only there,
//     COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_MONITOR_GC |
//     COR_PRF_MONITOR_CLASS_LOADS.
//   * ObjectAllocated: counts every object.  It classifies the object's ClassID (cached per
//     ClassID): IsArrayClass decides "array"; otherwise GetClassIDInfo2 + GetModuleMetaData +
//     IMetaDataImport::GetTypeDefProps (+ GetModuleInfo to make sure the type lives in the core
//     library) decide "System.String".  For an array it calls GetObjectSize2 and
//     GetArrayObjectInfo (rank from IsArrayClass; dimension sizes, lower bounds and the address of
//     the element data); for a string it calls GetObjectSize2 and reads the length through the
//     offset given by GetStringLayout2.  All of this happens inside ObjectAllocated, on the
//     ObjectID the runtime handed to that callback, never on an ObjectID kept from earlier.
//   * GarbageCollectionStarted / MovedReferences2 / GarbageCollectionFinished: for every GC it
//     adds up cObjectIDRangeLength[] reported by MovedReferences2 (bytes moved by the compaction)
//     and files the total when the GC finishes.  No object is inspected during a GC.
//   * ClassUnloadStarted: forgets the cached classification of that ClassID.
//   * Shutdown: prints one stderr line starting "object_inspector:" with the counts, then releases
//     the info interface.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/...)
// --------------------------------------------------------------------------------
//   ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer."  "The Initialize
//     call is the only opportunity to enable (or disable) callbacks that are immutable."
//   COR_PRF_MONITOR: COR_PRF_ENABLE_OBJECT_ALLOCATED "Informs the runtime that the profiler may
//     want object allocation notifications. This flag must be set during initialization. It allows
//     the profiler to subsequently use the COR_PRF_MONITOR_OBJECT_ALLOCATED flag to receive
//     ObjectAllocated callbacks."  COR_PRF_MONITOR_GC "Controls the GarbageCollectionStarted,
//     GarbageCollectionFinished, MovedReferences, MovedReferences2, ... callbacks".
//     COR_PRF_MONITOR_CLASS_LOADS "Controls the ClassLoad* and ClassUnload* callbacks".
//   ICorProfilerInfo::SetEventMask: "You should call the SetEventMask2 method instead of this
//     method."  ICorProfilerInfo5::SetEventMask2: "Typically, you call the GetEventMask2 method to
//     determine which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh
//     values and any new bits you want to set, and then call the SetEventMask2 method."
//   ICorProfilerCallback::ObjectAllocated: "The ObjectedAllocated method is not called for
//     allocations from either the stack or unmanaged memory. The classId parameter can refer to a
//     class in managed code that has not been loaded yet."  (so a failure to describe the class is
//     expected now and then, and is not cached)
//   ICorProfilerInfo::IsArrayClass: "If the specified class is an array class, the IsArrayClass
//     method returns an S_OK HRESULT and values for any non-null output parameters. Otherwise, it
//     returns S_FALSE."  (S_FALSE is a success code, so the test is hr == S_OK, not SUCCEEDED)
//   ICorProfilerInfo2::GetArrayObjectInfo: cDimensions is "The rank (number of dimensions) of the
//     array."; "The pDimensionSizes and pDimensionLowerBounds are parallel arrays"; ppData is "A
//     pointer to the address of the raw buffer for the array, which is laid out according to the
//     C++ convention."
//   ICorProfilerInfo3::GetStringLayout2: pStringLengthOffset is "A pointer to the offset of the
//     location, relative to the ObjectID pointer, that stores the length of the string itself. The
//     length is stored as a DWORD."  "Strings may or may not be null-terminated." (the character
//     buffer is never scanned for a terminator; the length is taken from the DWORD)
//   ICorProfilerInfo4::GetObjectSize2: "Different objects of the same types often have the same
//     size. However, some types, such as arrays or strings, may have a different size for each
//     object."  (so the size is asked for every string/array, never cached per class)
//   ICorProfilerInfo2::GetClassIDInfo2 / caller-allocated buffers: "If InfoBuffer is null,
//     cBufferSizeStart must be 0." (typeArgs is not wanted: null buffer, size 0).
//   ICorProfilerInfo::GetModuleMetaData: "Some modules (such as resource modules) have no
//     metadata. In those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a
//     null in *ppOut."
//   ICorProfilerInfo::GetModuleInfo: "If pcchName points to a value that is larger than cchName,
//     allocate a larger szName buffer, update cchName with the new, larger size, and call
//     GetModuleInfo again." (single-pass method of "Caller-Allocated Buffers in the Profiling
//     API")
//   ICorProfilerCallback4::MovedReferences2: "cObjectIDRangeLength [in] An array of integers, each
//     of which is the size of a block of contiguous objects in memory."  "None of the ObjectID
//     values passed by MovedReferences2 are valid during the callback itself ... Therefore,
//     profilers should not attempt to inspect objects during a MovedReferences2 call."
//   ICorProfilerCallback2::GarbageCollectionStarted: "All callbacks that pertain to this garbage
//     collection will occur between the GarbageCollectionStarted callback and the corresponding
//     ICorProfilerCallback2::GarbageCollectionFinished callback. These callbacks need not occur on
//     the same thread."  (the per-GC accumulator is atomic)
//   Profiling Overview, Notification Threads: "these callbacks are not serialized. Users must
//     protect their code by creating thread-safe data structures".
//   ICorProfilerInfo2::DoStackSnapshot (locking guideline): "Do not hold a lock while your
//     profiler calls into a CLR function that can trigger a garbage collection." (the class cache
//     lock is never held across a call into the runtime)
//   ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."  "Certain immutable events
//     may still occur after shutdown; the profiler should take care to return immediately when
//     this occurs."
//
// Ambiguities met
// ---------------
//   * Which ClassID to trust in ObjectAllocated: the classId argument "can refer to a class ... that
//     has not been loaded yet".  This profiler uses the argument and falls back to
//     GetClassFromObject(objectId) only when the argument is 0; a class that cannot be described
//     yet (GetClassIDInfo2 failing) is counted as unclassified and not cached.
//   * The documents give no API that says "this ClassID is System.String".  The name comes from
//     metadata (GetTypeDefProps == "System.String") and the module must be the core library
//     (file name containing System.Private.CoreLib or mscorlib); the documents do not say what the
//     core library's module file name is.
//   * GetTypeDefProps: whether pchTypeDef counts the terminating null is not said; the name is
//     compared up to the first null, bounded by the buffer.
//   * GetArrayObjectInfo does not say whether ppData may be dereferenced beyond the array's
//     elements or whether it always lies inside [ObjectID, ObjectID + GetObjectSize2); it is only
//     used as an address (offset from the ObjectID) and checked against the object's size.
//   * GetStringLayout2 does not say whether the layout may be asked for in Initialize; it is asked
//     for (once, then cached) from inside ObjectAllocated.
//   * Whether a ClassID can be reused after ClassUnloadStarted is not said; the cache entry is
//     dropped there to be safe.
//   * MovedReferences2 "size of a block" is taken to be in bytes (ObjectIDs are addresses and the
//     formula adds (oldObjectID - oldObjectIDRangeStart[i]) to a start address).  The document does
//     not say whether the same bytes can be reported twice in one GC; they are simply added.
//   * Whether a callback may still be running on another thread when Shutdown arrives is not said;
//     Shutdown marks the profiler as shut down and waits (bounded) for callbacks in flight before
//     releasing the info pointer.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr ULONG kMaxArrayRank = 32;  // the CLR's documented maximum rank of an array type

enum class ClassKind { Other, String, Array };

struct ClassInfo {
    ClassKind kind = ClassKind::Other;
    ULONG rank = 0;  // arrays only
    CorElementType elementType = 0;
};

bool contains(const std::string& haystack, const char* needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

class ObjectInspector : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[object_inspector] QueryInterface(ICorProfilerInfo5) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        DWORD low = 0, high = 0;
        hr = info_->GetEventMask2(&low, &high);
        if (failed(hr)) {
            std::fprintf(stderr, "[object_inspector] GetEventMask2 failed 0x%08x\n", (unsigned)hr);
            low = 0;
            high = 0;
        }
        low |= COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_MONITOR_GC |
               COR_PRF_MONITOR_CLASS_LOADS;
        hr = info_->SetEventMask2(low, high);
        if (failed(hr)) {
            std::fprintf(stderr, "[object_inspector] SetEventMask2(0x%08x, 0x%08x) failed 0x%08x\n", (unsigned)low,
                         (unsigned)high, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[object_inspector] initialized\n");
        return S_OK;
    }

    // ---------------------------------------------------------------------------------------
    // Allocations
    // ---------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID objectId, ClassID classId) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        ++objects_;
        if (objectId == 0) {
            ++unclassified_;
            return S_OK;
        }

        ClassID cls = classId;
        if (cls == 0) {
            HRESULT hr = info_->GetClassFromObject(objectId, &cls);
            if (failed(hr) || cls == 0) {
                ++unclassified_;
                return S_OK;
            }
        }

        ClassInfo ci;
        if (!classify(cls, &ci)) {
            ++unclassified_;
            return S_OK;
        }
        switch (ci.kind) {
            case ClassKind::Array:
                inspectArray(objectId, ci);
                break;
            case ClassKind::String:
                inspectString(objectId);
                break;
            case ClassKind::Other:
                break;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassUnloadStarted(ClassID classId) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        std::lock_guard<std::mutex> lock(classMutex_);
        classes_.erase(classId);
        return S_OK;
    }

    // ---------------------------------------------------------------------------------------
    // Garbage collections: only numbers are kept, no object is touched.
    // ---------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        ++gcs_;
        movedThisGc_.store(0);
        rangesThisGc_.store(0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cMovedObjectIDRanges, ObjectID*, ObjectID*,
                                               SIZE_T* cObjectIDRangeLength) override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        if (cMovedObjectIDRanges == 0 || cObjectIDRangeLength == nullptr) return S_OK;
        unsigned long long bytes = 0;
        for (ULONG i = 0; i < cMovedObjectIDRanges; ++i) bytes += cObjectIDRangeLength[i];
        movedThisGc_.fetch_add(bytes);
        rangesThisGc_.fetch_add(cMovedObjectIDRanges);
        // S_OK: this profiler does not need the ULONG-sized MovedReferences as well (the base class
        // ignores it).
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        InFlight guard(*this);
        if (!guard.entered()) return S_OK;
        unsigned long long moved = movedThisGc_.exchange(0);
        unsigned long long ranges = rangesThisGc_.exchange(0);
        std::lock_guard<std::mutex> lock(gcMutex_);
        movedPerGc_.push_back(moved);
        totalMoved_ += moved;
        totalRanges_ += ranges;
        if (moved > maxMoved_) maxMoved_ = moved;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        // Let callbacks that were already running on other threads finish before the info pointer
        // goes away; do not wait forever.
        for (int i = 0; i < 2000 && active_.load() != 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));

        unsigned long long gcsFinished = 0, gcsWithMoves = 0, totalMoved = 0, totalRanges = 0, maxMoved = 0;
        {
            std::lock_guard<std::mutex> lock(gcMutex_);
            gcsFinished = movedPerGc_.size();
            for (unsigned long long m : movedPerGc_)
                if (m != 0) ++gcsWithMoves;
            totalMoved = totalMoved_;
            totalRanges = totalRanges_;
            maxMoved = maxMoved_;
        }
        std::fprintf(stderr,
                     "object_inspector: objects=%llu strings=%llu string_chars=%llu string_bytes=%llu "
                     "arrays=%llu multidim_arrays=%llu array_elements=%llu array_bytes=%llu "
                     "array_data_outside_object=%llu unclassified=%llu call_failures=%llu "
                     "gcs_started=%llu gcs_finished=%llu gcs_with_moves=%llu moved_ranges=%llu "
                     "moved_bytes=%llu max_moved_bytes_per_gc=%llu\n",
                     objects_.load(), strings_.load(), stringChars_.load(), stringBytes_.load(), arrays_.load(),
                     multiDimArrays_.load(), arrayElements_.load(), arrayBytes_.load(), arrayDataOutside_.load(),
                     unclassified_.load(), callFailures_.load(), gcs_.load(), gcsFinished, gcsWithMoves, totalRanges,
                     totalMoved, maxMoved);
        if (active_.load() == 0 && info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // Counts callbacks in flight so that Shutdown does not release the info pointer under them.
    class InFlight {
    public:
        explicit InFlight(ObjectInspector& p) : p_(p) {
            p_.active_.fetch_add(1);
            entered_ = !p_.shutdown_.load() && p_.info_ != nullptr;
        }
        ~InFlight() { p_.active_.fetch_sub(1); }
        bool entered() const { return entered_; }

    private:
        ObjectInspector& p_;
        bool entered_ = false;
    };

    void noteFailure(const char* what, HRESULT hr) {
        unsigned long long n = ++callFailures_;
        if (n <= 10)
            std::fprintf(stderr, "[object_inspector] %s failed 0x%08x\n", what, (unsigned)hr);
    }

    // Looks the class up in the cache; describes it through the runtime (without holding the lock)
    // when it is not there.  Returns false when the class cannot be described yet.
    bool classify(ClassID cls, ClassInfo* out) {
        {
            std::lock_guard<std::mutex> lock(classMutex_);
            auto it = classes_.find(cls);
            if (it != classes_.end()) {
                *out = it->second;
                return true;
            }
        }

        ClassInfo ci;
        CorElementType elemType = 0;
        ClassID elemClass = 0;
        ULONG rank = 0;
        HRESULT hr = info_->IsArrayClass(cls, &elemType, &elemClass, &rank);
        if (failed(hr)) {
            noteFailure("IsArrayClass", hr);
            return false;
        }
        if (hr == S_OK) {
            ci.kind = ClassKind::Array;
            ci.rank = rank;
            ci.elementType = elemType;
        } else {
            bool isString = false;
            if (!isSystemString(cls, &isString)) return false;
            ci.kind = isString ? ClassKind::String : ClassKind::Other;
        }

        std::lock_guard<std::mutex> lock(classMutex_);
        classes_[cls] = ci;
        *out = ci;
        return true;
    }

    // System.String is recognised by its metadata name, in the core library's module.
    bool isSystemString(ClassID cls, bool* isString) {
        *isString = false;
        ModuleID module = 0;
        mdTypeDef token = 0;
        ClassID parent = 0;
        ULONG32 typeArgCount = 0;
        HRESULT hr = info_->GetClassIDInfo2(cls, &module, &token, &parent, 0, &typeArgCount, nullptr);
        if (failed(hr)) {
            // Possibly a class that has not finished loading; try again on a later allocation.
            if (hr != CORPROF_E_DATAINCOMPLETE) noteFailure("GetClassIDInfo2", hr);
            return false;
        }
        if (typeArgCount != 0 || module == 0) return true;  // generic instantiation: not String

        IMetaDataImport* import = nullptr;
        hr = info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&import));
        if (failed(hr)) {
            noteFailure("GetModuleMetaData", hr);
            return false;
        }
        if (hr == S_FALSE || import == nullptr) return true;  // module without metadata

        WCHAR name[256] = {};
        ULONG nameLen = 0;
        DWORD flags = 0;
        mdToken extends = 0;
        hr = import->GetTypeDefProps(token, name, 256, &nameLen, &flags, &extends);
        import->Release();
        if (failed(hr)) {
            noteFailure("IMetaDataImport::GetTypeDefProps", hr);
            return false;
        }
        name[255] = 0;
        if (to_utf8(name, 256) != "System.String") return true;

        std::string moduleName;
        if (!moduleFileName(module, &moduleName)) return false;
        *isString = contains(moduleName, "System.Private.CoreLib") || contains(moduleName, "mscorlib");
        return true;
    }

    bool moduleFileName(ModuleID module, std::string* out) {
        std::vector<WCHAR> buf(260);
        for (int attempt = 0; attempt < 3; ++attempt) {
            LPCBYTE base = nullptr;
            ULONG needed = 0;
            AssemblyID assembly = 0;
            HRESULT hr = info_->GetModuleInfo(module, &base, static_cast<ULONG>(buf.size()), &needed, buf.data(),
                                              &assembly);
            if (hr == HRESULT_ERROR_INSUFFICIENT_BUFFER || (succeeded(hr) && needed > buf.size())) {
                buf.assign(static_cast<size_t>(needed) + 1, 0);
                continue;
            }
            if (failed(hr)) {
                noteFailure("GetModuleInfo", hr);
                return false;
            }
            *out = to_utf8(buf.data(), std::min<size_t>(needed, buf.size()));
            return true;
        }
        return false;
    }

    void inspectArray(ObjectID objectId, const ClassInfo& ci) {
        if (ci.rank == 0 || ci.rank > kMaxArrayRank) {
            ++unclassified_;
            return;
        }
        SIZE_T size = 0;
        HRESULT hr = info_->GetObjectSize2(objectId, &size);
        if (failed(hr)) {
            noteFailure("GetObjectSize2(array)", hr);
            return;
        }
        ULONG32 dimSizes[kMaxArrayRank] = {};
        int lowerBounds[kMaxArrayRank] = {};
        BYTE* data = nullptr;
        hr = info_->GetArrayObjectInfo(objectId, static_cast<ULONG32>(ci.rank), dimSizes, lowerBounds, &data);
        if (failed(hr)) {
            noteFailure("GetArrayObjectInfo", hr);
            return;
        }
        unsigned long long elements = 1;
        for (ULONG d = 0; d < ci.rank; ++d) elements *= dimSizes[d];
        ++arrays_;
        if (ci.rank > 1) ++multiDimArrays_;
        arrayElements_ += elements;
        arrayBytes_ += size;
        const UINT_PTR dataAddr = reinterpret_cast<UINT_PTR>(data);
        if (data == nullptr || dataAddr < objectId || dataAddr > objectId + size) ++arrayDataOutside_;
    }

    void inspectString(ObjectID objectId) {
        if (!stringLayoutKnown_.load(std::memory_order_acquire)) {
            ULONG lengthOffset = 0, bufferOffset = 0;
            HRESULT hr = info_->GetStringLayout2(&lengthOffset, &bufferOffset);
            if (failed(hr)) {
                noteFailure("GetStringLayout2", hr);
                return;
            }
            stringLengthOffset_.store(lengthOffset, std::memory_order_relaxed);
            stringBufferOffset_.store(bufferOffset, std::memory_order_relaxed);
            stringLayoutKnown_.store(true, std::memory_order_release);
        }
        SIZE_T size = 0;
        HRESULT hr = info_->GetObjectSize2(objectId, &size);
        if (failed(hr)) {
            noteFailure("GetObjectSize2(string)", hr);
            return;
        }
        const ULONG lengthOffset = stringLengthOffset_.load(std::memory_order_relaxed);
        if (static_cast<SIZE_T>(lengthOffset) + sizeof(DWORD) > size) {
            ++unclassified_;
            return;
        }
        DWORD length = 0;
        std::memcpy(&length, reinterpret_cast<const void*>(objectId + lengthOffset), sizeof(length));
        ++strings_;
        stringChars_ += length;
        stringBytes_ += size;
    }

    ICorProfilerInfo5* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<int> active_{0};

    std::mutex classMutex_;
    std::unordered_map<ClassID, ClassInfo> classes_;

    std::atomic<bool> stringLayoutKnown_{false};
    std::atomic<ULONG> stringLengthOffset_{0};
    std::atomic<ULONG> stringBufferOffset_{0};

    std::atomic<unsigned long long> objects_{0}, strings_{0}, stringChars_{0}, stringBytes_{0};
    std::atomic<unsigned long long> arrays_{0}, multiDimArrays_{0}, arrayElements_{0}, arrayBytes_{0};
    std::atomic<unsigned long long> arrayDataOutside_{0}, unclassified_{0}, callFailures_{0};

    std::atomic<unsigned long long> gcs_{0}, movedThisGc_{0}, rangesThisGc_{0};
    std::mutex gcMutex_;
    std::vector<unsigned long long> movedPerGc_;
    unsigned long long totalMoved_ = 0, totalRanges_ = 0, maxMoved_ = 0;
};

DOCFIX_DEFINE_PROFILER(ObjectInspector)
