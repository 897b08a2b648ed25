// exception_tracker.cpp -- counts managed exceptions by type name, follows each exception through its
// search and unwind phases, and records which function caught it.
//
// What it does:
//   * Initialize QueryInterfaces the IUnknown it is given for ICorProfilerInfo2 (GetClassIDInfo2 is an
//     ICorProfilerInfo2 method), asks for COR_PRF_MONITOR_EXCEPTIONS only, and fails Initialize with the
//     HRESULT of whichever step failed (releasing what it had obtained).
//   * ExceptionThrown: GetClassFromObject on the thrown object, then the class's name
//     (IsArrayClass / GetClassIDInfo2, falling back to GetClassIDInfo; GetModuleMetaData for
//     IMetaDataImport; IMetaDataImport::GetTypeDefProps), cached per ClassID.  The exception is pushed on
//     a per-thread stack of "live" exceptions and counted under its type name.
//   * ExceptionSearchFunctionEnter / ExceptionUnwindFunctionEnter: count the frames searched and unwound
//     for the live exception on top of the calling thread's stack.
//   * ExceptionCatcherEnter: names the catching function (GetTokenAndMetaDataFromFunction for
//     IMetaDataImport + the method token, IMetaDataImport::GetMethodProps, GetTypeDefProps for its type),
//     matches the caught object to a live exception on this thread by ClassID (GetClassFromObject on the
//     objectId passed to this callback, not on the one saved at ExceptionThrown), and folds that
//     exception's frame counts into the per-type totals.
//   * Shutdown: prints the per-type table and the most frequent catchers to stderr, then releases the
//     ICorProfilerInfo2 pointer.  Nothing is printed from inside the exception callbacks.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/... and
// .../metadata/...):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer."; the event mask is set
//     there with ICorProfilerInfo::SetEventMask.
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_EXCEPTIONS "Controls the ExceptionThrown callback
//     and the ExceptionSearch*, ExceptionOSHandler*, ExceptionUnwind*, and ExceptionCatcher* callbacks".
//     No other flag is needed.
//   * ICorProfilerCallback::ExceptionThrown / ExceptionUnwindFunctionEnter / ExceptionUnwindFunctionLeave
//     / ExceptionCatcherEnter -- "The profiler should not block in its implementation of this method
//     because the stack may not be in a state that allows garbage collection" and "should not call into
//     managed code or in any way cause a managed-memory allocation."  So: no I/O in these callbacks, only
//     a short std::mutex section that never calls the runtime while held; ICorProfilerInfo/metadata calls
//     are made with no profiler lock held.
//   * "Garbage Collection Blocking in the Profiling API" -- for ExceptionUnwindFunction*, ExceptionCatcher*
//     "garbage collection is disabled around that callback ... the profiler should return control as soon
//     as possible": the catcher's name is cached per FunctionID so the metadata work is done once.
//   * ICorProfilerCallback::ExceptionCatcherEnter -- "The objectId value is passed again since a garbage
//     collection could have moved the object since the ExceptionThrown notification."  ObjectIDs are
//     therefore never stored; the ClassID is.
//   * ICorProfilerInfo::GetClassFromObject -- "A null pClassId indicates that objectId has a type that is
//     unloading." (reported as "<unloading type>").
//   * ICorProfilerInfo::IsArrayClass -- "If the specified class is an array class, the IsArrayClass method
//     returns an S_OK HRESULT ... Otherwise, it returns S_FALSE." (arrays have no TypeDef of their own).
//   * ICorProfilerInfo2::GetClassIDInfo2 -- "you can first call GetClassIDInfo2 with a zero-length
//     typeArgs buffer to obtain the correct buffer size. You can then set the typeArgs buffer size to the
//     value returned in pcNumTypeArgs and call GetClassIDInfo2 again." (two-pass; the first pass passes a
//     null buffer with size 0, per "Caller-Allocated Buffers": "If InfoBuffer is null, cBufferSizeStart
//     must be 0.")
//   * ICorProfilerInfo::GetModuleMetaData -- "Some modules (such as resource modules) have no metadata. In
//     those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."  Only
//     S_OK with a non-null pointer is used; every interface obtained is Released.
//   * IMetaDataImport::GetTypeDefProps -- cchTypeDef is "The size in wide characters of szTypeDef",
//     pchTypeDef "The number of wide characters returned".  IMetaDataImport::GetMethodProps -- pchMethod is
//     "the size in wide characters of szMethod, or in the case of truncation, the actual number of wide
//     characters in the method name."  Both are read with a heap buffer that is grown to *pch + 1 and the
//     call repeated when *pch does not fit ("Be prepared to reallocate the buffer if it proves to be too
//     small"); the text is cut at the first NUL or at the buffer size, whichever comes first.
//   * The metadata pages do not say which [out] parameters of GetTypeDefProps / GetMethodProps may be null,
//     so every [out] parameter is given a real location (only the name is used).
//   * "Notification Threads" (Profiling Overview) -- "In most cases, the thread that generates an event
//     also executes notifications" and "these callbacks are not serialized": the live-exception stack is
//     thread_local, shared tables are behind one mutex.
//   * "Callbacks and Stack Depth" -- "A profiler should make sure to use as little stack as possible in
//     response to callbacks": name buffers are on the heap.
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." and "Certain immutable events may
//     still occur after shutdown; the profiler should take care to return immediately".
#include <algorithm>
#include <cinttypes>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// Calls an IMetaDataImport "name" method through `call(buffer, cch, &pch)`.  Grows the buffer when the
// returned count says the name did not fit.  Returns false (name untouched) on a failing HRESULT.
template <class Call>
bool read_md_name(Call call, std::string& name) {
    std::vector<WCHAR> buf(128, 0);
    for (int attempt = 0; attempt < 4; ++attempt) {
        ULONG pch = 0;
        HRESULT hr = call(buf.data(), static_cast<ULONG>(buf.size()), &pch);
        if (failed(hr)) return false;
        if (pch < buf.size()) {
            name = to_utf8(buf.data(), buf.size());
            return true;
        }
        buf.assign(static_cast<size_t>(pch) + 1, 0);
    }
    return false;
}

// COM pointer released on scope exit.
template <class T>
struct Released {
    T* p = nullptr;
    Released() = default;
    Released(const Released&) = delete;
    Released& operator=(const Released&) = delete;
    ~Released() {
        if (p != nullptr) p->Release();
    }
};

std::string hex_id(const char* what, UINT_PTR id) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "<%s 0x%" PRIxPTR ">", what, static_cast<std::uintptr_t>(id));
    return buf;
}

const char* element_type_name(CorElementType t) {
    switch (t) {
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
        default: return nullptr;
    }
}

// Name of the TypeDef `td` in module `mod`: GetModuleMetaData + GetTypeDefProps.
bool typedef_name(ICorProfilerInfo* info, ModuleID mod, mdTypeDef td, std::string& name) {
    Released<IUnknown> unk;
    HRESULT hr = info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk.p);
    if (hr != S_OK || unk.p == nullptr) return false;  // S_FALSE + null: module without metadata
    auto* md = static_cast<IMetaDataImport*>(unk.p);
    return read_md_name(
        [&](WCHAR* b, ULONG cch, ULONG* pch) {
            DWORD flags = 0;
            mdToken extends = 0;
            return md->GetTypeDefProps(td, b, cch, pch, &flags, &extends);
        },
        name);
}

// Full name of a ClassID: arrays as Elem[], generic instantiations as Name`N<Arg,...>.
std::string class_name(ICorProfilerInfo2* info, ClassID cls, int depth = 0) {
    if (cls == 0) return "<unloading type>";
    if (depth > 4) return "...";

    CorElementType elem = 0;
    ClassID elemClass = 0;
    ULONG rank = 0;
    if (info->IsArrayClass(cls, &elem, &elemClass, &rank) == S_OK) {
        std::string base;
        if (elemClass != 0) {
            base = class_name(info, elemClass, depth + 1);
        } else if (const char* n = element_type_name(elem)) {
            base = n;
        } else {
            base = hex_id("element type", elem);
        }
        std::string dims = "[";
        for (ULONG i = 1; i < rank; ++i) dims += ',';
        return base + dims + "]";
    }

    ModuleID mod = 0;
    mdTypeDef td = 0;
    ClassID parent = 0;
    ULONG32 nArgs = 0;
    std::vector<ClassID> args;
    HRESULT hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr);
    if (succeeded(hr) && nArgs > 0) {
        args.resize(nArgs);
        ULONG32 got = 0;
        hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data());
        if (succeeded(hr)) args.resize(std::min<ULONG32>(got, nArgs));
    }
    if (failed(hr)) {
        args.clear();
        hr = info->GetClassIDInfo(cls, &mod, &td);
        if (failed(hr)) return hex_id("class", cls);
    }

    std::string name;
    if (td == 0 || !typedef_name(info, mod, td, name)) return hex_id("class", cls);
    if (!args.empty()) {
        name += '<';
        for (size_t i = 0; i < args.size(); ++i) {
            if (i) name += ',';
            name += class_name(info, args[i], depth + 1);
        }
        name += '>';
    }
    return name;
}

// Type::Method name of a FunctionID: GetTokenAndMetaDataFromFunction + GetMethodProps + GetTypeDefProps.
std::string catcher_name(ICorProfilerInfo* info, FunctionID fid) {
    Released<IUnknown> unk;
    mdToken token = 0;
    HRESULT hr = info->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk.p, &token);
    if (failed(hr) || unk.p == nullptr) return hex_id("function", fid);
    auto* md = static_cast<IMetaDataImport*>(unk.p);

    mdTypeDef owner = 0;
    std::string method;
    bool ok = read_md_name(
        [&](WCHAR* b, ULONG cch, ULONG* pch) {
            DWORD attr = 0, impl = 0;
            PCCOR_SIGNATURE sig = nullptr;
            ULONG cbSig = 0, rva = 0;
            return md->GetMethodProps(token, &owner, b, cch, pch, &attr, &sig, &cbSig, &rva, &impl);
        },
        method);
    if (!ok) return hex_id("function", fid);

    std::string type;
    if (owner == 0 ||
        !read_md_name([&](WCHAR* b, ULONG cch, ULONG* pch) {
                          DWORD flags = 0;
                          mdToken extends = 0;
                          return md->GetTypeDefProps(owner, b, cch, pch, &flags, &extends);
                      },
                      type)) {
        type = "<module>";
    }
    return type + "::" + method;
}

// One exception that has been thrown on this thread and not yet caught.
struct LiveException {
    ClassID cls = 0;
    std::string type;
    unsigned searched = 0;
    unsigned unwound = 0;
};

constexpr size_t kMaxLivePerThread = 32;

// Per-thread because exception callbacks arrive on the thread that is handling the exception.
thread_local std::vector<LiveException> t_live;

struct TypeStats {
    std::uint64_t thrown = 0;
    std::uint64_t caught = 0;
    std::uint64_t searched = 0;  // summed over caught exceptions
    std::uint64_t unwound = 0;   // summed over caught exceptions
    unsigned max_searched = 0;
    unsigned max_unwound = 0;
};

}  // namespace

class ExceptionTracker : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo2* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[exception_tracker] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS);
        if (failed(hr)) {
            std::fprintf(stderr, "[exception_tracker] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrownObjectId) override {
        ICorProfilerInfo2* info = live_info();
        if (info == nullptr) return S_OK;

        ClassID cls = 0;
        std::string type;
        if (failed(info->GetClassFromObject(thrownObjectId, &cls))) {
            type = "<unknown type>";
        } else {
            type = cached_class_name(info, cls);
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            ++by_type_[type].thrown;
            ++thrown_total_;
        }
        if (t_live.size() >= kMaxLivePerThread) {
            // Exceptions that never reached a managed catch (replaced by another exception, caught in
            // native or runtime code, or unhandled): drop the oldest.
            t_live.erase(t_live.begin());
        }
        LiveException e;
        e.cls = cls;
        e.type = std::move(type);
        t_live.push_back(std::move(e));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionSearchFunctionEnter(FunctionID) override {
        if (shutdown_.load()) return S_OK;
        search_frames_.fetch_add(1, std::memory_order_relaxed);
        if (!t_live.empty()) ++t_live.back().searched;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID) override {
        if (shutdown_.load()) return S_OK;
        unwind_frames_.fetch_add(1, std::memory_order_relaxed);
        if (!t_live.empty()) ++t_live.back().unwound;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID functionId, ObjectID objectId) override {
        ICorProfilerInfo2* info = live_info();
        if (info == nullptr) return S_OK;

        std::string catcher = cached_function_name(info, functionId);

        // Which live exception is being caught: the newest one of the caught object's class.  The
        // ObjectID given here is the current one (the object may have moved since ExceptionThrown).
        ClassID cls = 0;
        bool have_cls = succeeded(info->GetClassFromObject(objectId, &cls));
        LiveException caught;
        bool found = false;
        if (!t_live.empty()) {
            size_t idx = t_live.size() - 1;
            if (have_cls) {
                for (size_t i = t_live.size(); i-- > 0;) {
                    if (t_live[i].cls == cls) {
                        idx = i;
                        break;
                    }
                }
            }
            caught = std::move(t_live[idx]);
            // Anything newer than the caught exception was abandoned while it propagated.
            t_live.erase(t_live.begin() + static_cast<std::ptrdiff_t>(idx), t_live.end());
            found = true;
        }
        if (!found) caught.type = have_cls ? cached_class_name(info, cls) : std::string("<unknown type>");

        std::lock_guard<std::mutex> g(mu_);
        ++caught_total_;
        TypeStats& s = by_type_[caught.type];
        ++s.caught;
        s.searched += caught.searched;
        s.unwound += caught.unwound;
        s.max_searched = std::max(s.max_searched, caught.searched);
        s.max_unwound = std::max(s.max_unwound, caught.unwound);
        ++catchers_[catcher + "  (" + caught.type + ")"];
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        ICorProfilerInfo2* info = info_.exchange(nullptr);

        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr,
                     "[exception_tracker] shutdown: thrown=%" PRIu64 " caught=%" PRIu64
                     " not-caught-in-managed-code=%" PRIu64 " frames searched=%" PRIu64 " unwound=%" PRIu64 "\n",
                     thrown_total_, caught_total_, thrown_total_ > caught_total_ ? thrown_total_ - caught_total_ : 0,
                     search_frames_.load(), unwind_frames_.load());

        std::vector<std::pair<std::string, TypeStats>> types(by_type_.begin(), by_type_.end());
        std::sort(types.begin(), types.end(), [](const auto& a, const auto& b) {
            return a.second.thrown != b.second.thrown ? a.second.thrown > b.second.thrown : a.first < b.first;
        });
        size_t shown = 0;
        for (const auto& [name, s] : types) {
            if (++shown > 20) break;
            double avg_s = s.caught ? double(s.searched) / double(s.caught) : 0.0;
            double avg_u = s.caught ? double(s.unwound) / double(s.caught) : 0.0;
            std::fprintf(stderr,
                         "[exception_tracker]   %-50s thrown=%" PRIu64 " caught=%" PRIu64
                         " searched avg=%.1f max=%u unwound avg=%.1f max=%u\n",
                         name.c_str(), s.thrown, s.caught, avg_s, s.max_searched, avg_u, s.max_unwound);
        }

        std::vector<std::pair<std::string, std::uint64_t>> cs(catchers_.begin(), catchers_.end());
        std::sort(cs.begin(), cs.end(), [](const auto& a, const auto& b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
        shown = 0;
        for (const auto& [name, n] : cs) {
            if (++shown > 10) break;
            std::fprintf(stderr, "[exception_tracker]   caught %" PRIu64 "x in %s\n", n, name.c_str());
        }

        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    ICorProfilerInfo2* live_info() const {
        if (shutdown_.load()) return nullptr;
        return info_.load();
    }

    // The runtime is called with no profiler lock held; the result is cached afterwards.
    std::string cached_class_name(ICorProfilerInfo2* info, ClassID cls) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = class_names_.find(cls);
            if (it != class_names_.end()) return it->second;
        }
        std::string name = class_name(info, cls);
        if (cls == 0) return name;  // "unloading": never cache
        std::lock_guard<std::mutex> g(mu_);
        return class_names_.emplace(cls, std::move(name)).first->second;
    }

    std::string cached_function_name(ICorProfilerInfo2* info, FunctionID fid) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = function_names_.find(fid);
            if (it != function_names_.end()) return it->second;
        }
        std::string name = catcher_name(info, fid);
        std::lock_guard<std::mutex> g(mu_);
        return function_names_.emplace(fid, std::move(name)).first->second;
    }

    std::atomic<ICorProfilerInfo2*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<std::uint64_t> search_frames_{0};
    std::atomic<std::uint64_t> unwind_frames_{0};

    std::mutex mu_;  // guards everything below
    std::uint64_t thrown_total_ = 0;
    std::uint64_t caught_total_ = 0;
    std::unordered_map<std::string, TypeStats> by_type_;
    std::unordered_map<std::string, std::uint64_t> catchers_;
    std::unordered_map<ClassID, std::string> class_names_;
    std::unordered_map<FunctionID, std::string> function_names_;
};

DOCFIX_DEFINE_PROFILER(ExceptionTracker)
