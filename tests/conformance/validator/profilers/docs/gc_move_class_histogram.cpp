// gc_move_class_histogram.cpp -- "which types does the GC move?": bytes relocated per class.
//
// What it does: with COR_PRF_MONITOR_GC, every MovedReferences2 range is charged, whole, to the
// class of the object at the start of the range ("the plug head"), and SurvivingReferences2 bytes
// are counted.  In GarbageCollectionFinished the tool looks at the same range heads at their new
// addresses: GetClassFromObject, GetObjectSize2, and for arrays IsArrayClass + GetArrayObjectInfo,
// for strings GetStringLayout2, to list the largest moved heads, and compares the class it finds
// there with the class it charged during the callback (mismatch=).  Class names are resolved once
// per ClassID (GetClassIDInfo2 + IMetaDataImport::GetTypeDefProps, both two-pass).  Shutdown prints
// "gc_move_class_histogram: gcs=<n> ..." and the top classes by moved bytes to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * MovedReferences2: newObjectID = newObjectIDRangeStart[i] + (oldObjectID -
//    oldObjectIDRangeStart[i]); "A ICorProfilerCallback2::GarbageCollectionFinished callback
//    indicates that all objects have been moved to their new locations and inspection can be
//    performed."  (The one call that breaks this page is marked BUG below.)
//  * SurvivingReferences2: "In the case of multiple callbacks during a garbage collection, the
//    information is cumulative".
//  * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//    locations when the GarbageCollectionFinished method is called."
//  * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an
//    S_OK HRESULT ... Otherwise, it returns S_FALSE." (S_OK compared exactly, not SUCCEEDED).
//  * GetArrayObjectInfo: cDimensions is "The rank (number of dimensions) of the array."
//  * GetStringLayout2: the length "is stored as a DWORD".
//  * GetClassIDInfo2 / "Caller-Allocated Buffers": "First call with a zero-length InfoBuffer
//    parameter to obtain the correct buffer size. Then set the buffer size to the value returned in
//    pcBufferMax and call the function again."
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called."
//
// Ambiguities: the MovedReferences2 page does not say whether ranges can begin with a free/filler
// object, nor whether unmoved survivors of a compacting GC appear in it; a range head whose class
// cannot be found is counted under "unknown".  Whether the strings' class is recognised by name
// alone (no API says "this ClassID is System.String") is left to metadata.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {
struct Head { ObjectID new_id; ClassID charged; SIZE_T range_len; };
struct Top { SIZE_T size; std::string text; };
}  // namespace

class GcMoveClassHistogram : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) { std::fprintf(stderr, "[gmch] QI(ICorProfilerInfo4) failed 0x%08x\n", (unsigned)hr); return hr; }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) { std::fprintf(stderr, "[gmch] SetEventMask failed 0x%08x\n", (unsigned)hr); info_->Release(); info_ = nullptr; return hr; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        std::lock_guard<std::mutex> g(mu_);
        heads_.clear();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID* olds, ObjectID* news, SIZE_T* lens) override {
        if (shutdown_) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) {
            ClassID cls = 0;
            // BUG: "None of the ObjectID values passed by MovedReferences2 are valid during the callback itself,
            // because the garbage collector might be in the middle of moving objects from old locations to new
            // locations. Therefore, profilers should not attempt to inspect objects during a MovedReferences2 call."
            if (failed(info_->GetClassFromObject(olds[i], &cls))) cls = 0;
            bytes_by_class_[cls] += lens[i];
            moved_bytes_ += lens[i];
            ++moved_ranges_;
            if (heads_.size() < 256) heads_.push_back(Head{news[i], cls, lens[i]});
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG n, ObjectID*, SIZE_T* lens) override {
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) survived_bytes_ += lens[i];
        survived_ranges_ += n;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++gcs_;
        for (const Head& h : heads_) {  // objects are in their final locations now
            ClassID cls = 0;
            SIZE_T size = 0;
            if (failed(info_->GetClassFromObject(h.new_id, &cls)) || failed(info_->GetObjectSize2(h.new_id, &size))) {
                ++errors_;
                continue;
            }
            ++verified_;
            confirmed_[cls] = true;
            if (cls != h.charged) ++mismatch_;
            std::string text = name_of(cls) + " size=" + std::to_string(size) + " range=" + std::to_string(h.range_len);
            text += detail(h.new_id, cls);
            tops_.push_back(Top{size, text});
        }
        std::sort(tops_.begin(), tops_.end(), [](const Top& a, const Top& b) { return a.size > b.size; });
        if (tops_.size() > 5) tops_.resize(5);
        for (const auto& kv : bytes_by_class_)  // names while calls are still allowed, for classes seen
            if (confirmed_.count(kv.first)) name_of(kv.first);   // at a final location (no guessed IDs)
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_ = true;
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr,
                     "gc_move_class_histogram: gcs=%u moved_ranges=%llu moved_bytes=%llu survived_ranges=%llu "
                     "survived_bytes=%llu classes=%zu verified=%llu mismatch=%llu errors=%llu\n",
                     gcs_, (unsigned long long)moved_ranges_, (unsigned long long)moved_bytes_,
                     (unsigned long long)survived_ranges_, (unsigned long long)survived_bytes_, bytes_by_class_.size(),
                     (unsigned long long)verified_, (unsigned long long)mismatch_, (unsigned long long)errors_);
        std::vector<std::pair<SIZE_T, ClassID>> order;
        for (const auto& kv : bytes_by_class_) order.push_back({kv.second, kv.first});
        std::sort(order.rbegin(), order.rend());
        for (size_t i = 0; i < order.size() && i < 8; ++i) {
            auto it = names_.find(order[i].second);
            std::fprintf(stderr, "  %12llu bytes  %s\n", (unsigned long long)order[i].first,
                         it != names_.end() ? it->second.c_str() : "unknown");
        }
        for (const Top& t : tops_) std::fprintf(stderr, "  largest moved head: %s\n", t.text.c_str());
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    std::string name_of(ClassID cls) {
        auto it = names_.find(cls);
        if (it != names_.end()) return it->second;
        std::string name = "unknown";
        CorElementType et = 0; ClassID elem = 0; ULONG rank = 0;
        if (cls == 0) {
        } else if (info_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {
            name = (elem != 0 ? name_of(elem) : "elem0x" + std::to_string(et)) + "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        } else {
            ModuleID mod = 0; mdTypeDef td = 0; ClassID parent = 0; ULONG32 nargs = 0;
            if (succeeded(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nargs, nullptr))) {
                std::vector<ClassID> args(nargs);
                if (nargs > 0) info_->GetClassIDInfo2(cls, &mod, &td, &parent, nargs, &nargs, args.data());
                IMetaDataImport* mdi = nullptr;
                if (succeeded(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&mdi))) && mdi) {
                    ULONG len = 0; DWORD flags = 0; mdToken ext = 0;
                    if (succeeded(mdi->GetTypeDefProps(td, nullptr, 0, &len, &flags, &ext)) && len > 0) {
                        std::vector<WCHAR> buf(len);
                        if (succeeded(mdi->GetTypeDefProps(td, buf.data(), len, &len, &flags, &ext))) name = to_utf8(buf.data(), buf.size());
                    }
                    mdi->Release();
                }
                if (nargs > 0) {
                    name += "<";
                    for (ULONG32 a = 0; a < nargs && a < args.size(); ++a) name += (a ? "," : "") + name_of(args[a]);
                    name += ">";
                }
            }
        }
        names_[cls] = name;
        return name;
    }
    // Content detail of an object at its final location (arrays and strings).
    std::string detail(ObjectID id, ClassID cls) {
        CorElementType et = 0; ClassID elem = 0; ULONG rank = 0;
        if (info_->IsArrayClass(cls, &et, &elem, &rank) == S_OK && rank > 0) {
            std::vector<ULONG32> dims(rank);
            std::vector<int> lbs(rank);
            BYTE* data = nullptr;
            if (failed(info_->GetArrayObjectInfo(id, rank, dims.data(), lbs.data(), &data))) return " array?";
            std::string s = " dims=";
            for (ULONG r = 0; r < rank; ++r) s += (r ? "x" : "") + std::to_string(dims[r]);
            return s;
        }
        if (name_of(cls) == "System.String") {
            ULONG len_off = 0, buf_off = 0;
            if (failed(info_->GetStringLayout2(&len_off, &buf_off))) return " string?";
            DWORD len;
            std::memcpy(&len, reinterpret_cast<const BYTE*>(id) + len_off, sizeof len);
            const WCHAR* chars = reinterpret_cast<const WCHAR*>(reinterpret_cast<const BYTE*>(id) + buf_off);
            return " len=" + std::to_string(len) + " \"" + to_utf8(chars, std::min<DWORD>(len, 16)) + "\"";
        }
        return "";
    }

    ICorProfilerInfo4* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::vector<Head> heads_;
    std::vector<Top> tops_;
    std::map<ClassID, SIZE_T> bytes_by_class_;
    std::map<ClassID, std::string> names_;
    std::map<ClassID, bool> confirmed_;
    unsigned gcs_ = 0;
    std::uint64_t moved_ranges_ = 0, moved_bytes_ = 0, survived_ranges_ = 0, survived_bytes_ = 0;
    std::uint64_t verified_ = 0, mismatch_ = 0, errors_ = 0;
};

DOCFIX_DEFINE_PROFILER(GcMoveClassHistogram)
