// exception_flow.cpp -- exception-flow tracer.
//
// What it does: asks for COR_PRF_MONITOR_EXCEPTIONS and follows every managed exception through
// its two passes on the thread that throws it.  For each exception it records the type name
// (GetClassFromObject -> GetClassIDInfo2 -> metadata), the Message string read out of the object
// (GetClassLayout up the parent chain + GetFieldProps to find the field, GetStringLayout2 to read
// the string), the methods visited by the search pass (with filters and the catcher found), the
// methods unwound by the second pass (with finally clauses), and the method whose catch block ran.
// Names are resolved inside the callbacks; Shutdown prints a summary that begins with
// "exception_flow: exceptions=<n>" to stderr and releases the info pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * COR_PRF_MONITOR: COR_PRF_MONITOR_EXCEPTIONS "Controls the ExceptionThrown callback and the
//     ExceptionSearch*, ExceptionOSHandler*, ExceptionUnwind*, and ExceptionCatcher* callbacks".
//   * ExceptionThrown / ExceptionUnwind* / ExceptionCatcher*: "The profiler should not block in its
//     implementation of this method" and "should not call into managed code or in any way cause a
//     managed-memory allocation."  Only native work is done; the one mutex guards bookkeeping and
//     is never held across a call into the runtime.
//   * ExceptionCatcherEnter: "The objectId value is passed again since a garbage collection could
//     have moved the object since the ExceptionThrown notification."  The ObjectID of
//     ExceptionThrown is used only inside that callback; CatcherEnter re-reads the type from its
//     own objectId.
//   * ExceptionUnwindFunctionLeave: "the function instance and its stack data are removed from the
//     stack." -- nothing is asked about the frame there.
//   * Caller-allocated buffers: "If InfoBuffer is null, cBufferSizeStart must be 0." and the
//     double-pass method ("First call with a zero-length InfoBuffer parameter to obtain the correct
//     buffer size. Then set the buffer size to the value returned in pcBufferMax and call the
//     function again.") -- used for GetClassIDInfo2 (typeArgs) and GetClassLayout (rFieldOffset).
//   * GetClassLayout: "returns only the fields defined by the class itself. If the class's parent
//     class has defined fields as well, the profiler must call GetClassLayout on the parent class"
//     and "If you use GetClassLayout with string classes, the method will fail with error code
//     E_INVALIDARG" (never called on String or arrays: only on the exception's class chain).
//   * GetStringLayout2 (GetStringLayout "is deprecated ... superseded by GetStringLayout2"): the
//     offsets are "relative to the ObjectID pointer"; "The length is stored as a DWORD";
//     "Strings may or may not be null-terminated." -- the read is bounded by that length.
//   * GetClassFromObject: "A null pClassId indicates that objectId has a type that is unloading."
//   * GetFunctionInfo: "The ClassID of a function on a generic class might not be obtainable ...
//     pClassId will be 0" -- method names come from the metadata token, not the ClassID.
//   * GetModuleMetaData: "Some modules (such as resource modules) have no metadata. In those cases,
//     GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//     after the Shutdown method is called." -- Shutdown only prints and Releases.
//
// Ambiguities the documents leave:
//   1. COR_FIELD_OFFSET.ulOffset is "The field's offset within its class": not said whether it is
//      relative to the ObjectID or to the first field.  Taken as ObjectID-relative (as
//      GetStringLayout2 states for strings); the field is also checked to be typed string.
//   2. No document names System.Exception's fields; "_message" is a base-library detail.  When it
//      is not found the message is reported as unavailable.
//   3. The thread exception callbacks arrive on is not stated; the throwing thread is assumed and
//      state is keyed by GetCurrentThreadID.  Nested exceptions are kept as a per-thread stack.
//   4. Nothing says what callbacks an exception superseded by one thrown from a finally/filter, or
//      a catch left by a rethrow, still receives; records never closed by ExceptionCatcherLeave
//      are reported as "unfinished".  Nor is it said whether the catching function gets an
//      ExceptionUnwindFunctionLeave: open_frames=<search>/<unwind> prints Enter minus Leave.
//   5. The IMetaDataImport name getters do not document a zero-length first pass or whether the
//      returned count includes the terminating null; two passes are made and the count is bounded.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

struct Flow {
    unsigned seq = 0, threadNo = 0;
    std::string type, message = "<unavailable>";
    std::vector<std::string> searched, filters, unwound, finallies;
    std::string catcherFound, caughtIn;
    int searchDepth = 0, unwindDepth = 0;  // Enter/Leave balance per pass
    bool caught = false, catchTypeSame = false;
};

std::string Join(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " > " : "") + v[i];
    return s;
}

// Two-pass WCHAR getters of IMetaDataImport (see ambiguity 5).
template <class Get>
std::string MetaName(Get get) {
    ULONG cch = 0;
    if (failed(get(nullptr, 0, &cch)) || cch == 0 || cch > 4096) return std::string();
    std::vector<WCHAR> buf(cch + 1, 0);
    if (failed(get(buf.data(), cch, &cch))) return std::string();
    return to_utf8(buf.data(), cch < buf.size() ? cch : buf.size() - 1);
}

std::string TypeDefName(IMetaDataImport* md, mdTypeDef td) {
    std::string name;
    for (int depth = 0; depth < 8 && td != 0; ++depth) {
        std::string part = MetaName([&](WCHAR* b, ULONG n, ULONG* pn) {
            return md->GetTypeDefProps(td, b, n, pn, nullptr, nullptr);
        });
        if (part.empty()) break;
        name = name.empty() ? part : part + "+" + name;
        mdTypeDef outer = 0;
        if (md->GetNestedClassProps(td, &outer) != S_OK) break;  // not nested
        td = outer;
    }
    return name.empty() ? "?" : name;
}

}  // namespace

class ExceptionFlowProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS);
        if (failed(hr)) { info_->Release(); info_ = nullptr; return hr; }
        haveStrLayout_ = succeeded(info_->GetStringLayout2(&strLenOff_, &strBufOff_));
        std::fprintf(stderr, "[exception_flow] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID obj) override {
        if (shutdown_.load()) return S_OK;
        Flow f;
        ClassID cls = 0;
        if (succeeded(info_->GetClassFromObject(obj, &cls)) && cls != 0) {
            f.type = ClassName(cls);
            ReadMessage(obj, cls, &f.message);  // obj is valid only during this callback
        } else {
            f.type = "?";
        }
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        f.seq = ++seq_;
        auto no = threadNo_.emplace(t, (unsigned)threadNo_.size() + 1).first;
        f.threadNo = no->second;
        live_[t].push_back(std::move(f));
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFunctionEnter(FunctionID fid) override {
        std::string n = FunctionName(fid);
        WithTop([&](Flow& f) { f.searched.push_back(n); ++f.searchDepth; });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFunctionLeave() override {
        WithTop([](Flow& f) { --f.searchDepth; });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFilterEnter(FunctionID fid) override {
        std::string n = FunctionName(fid);
        WithTop([&](Flow& f) { f.filters.push_back(n); });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionSearchCatcherFound(FunctionID fid) override {
        std::string n = FunctionName(fid);
        WithTop([&](Flow& f) { f.catcherFound = n; });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID fid) override {
        std::string n = FunctionName(fid);
        WithTop([&](Flow& f) { f.unwound.push_back(n); ++f.unwindDepth; });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionLeave() override {
        WithTop([](Flow& f) { --f.unwindDepth; });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyEnter(FunctionID fid) override {
        std::string n = FunctionName(fid);
        WithTop([&](Flow& f) { f.finallies.push_back(n); });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID fid, ObjectID obj) override {
        std::string n = FunctionName(fid);
        ClassID cls = 0;  // the fresh objectId, not the one from ExceptionThrown
        std::string type = (succeeded(info_->GetClassFromObject(obj, &cls)) && cls) ? ClassName(cls) : "?";
        WithTop([&](Flow& f) { f.caughtIn = n; f.catchTypeSame = (type == f.type); });
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherLeave() override {
        if (shutdown_.load()) return S_OK;
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        auto it = live_.find(t);
        if (it == live_.end() || it->second.empty()) { ++orphans_; return S_OK; }
        it->second.back().caught = true;
        done_.push_back(std::move(it->second.back()));
        it->second.pop_back();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        std::vector<Flow> all = done_;
        for (auto& kv : live_)
            for (auto& f : kv.second) all.push_back(f);
        unsigned caught = 0, filters = 0, finallies = 0;
        for (auto& f : all) {
            caught += f.caught;
            filters += (unsigned)f.filters.size();
            finallies += (unsigned)f.finallies.size();
        }
        std::fprintf(stderr,
                     "exception_flow: exceptions=%u caught=%u unfinished=%u threads=%zu filters=%u finallies=%u "
                     "orphan_callbacks=%u\n",
                     seq_, caught, (unsigned)all.size() - caught, threadNo_.size(), filters, finallies, orphans_);
        std::sort(all.begin(), all.end(), [](const Flow& a, const Flow& b) { return a.seq < b.seq; });
        size_t shown = 0;
        for (auto& f : all) {
            if (++shown > 40) { std::fprintf(stderr, "exception_flow:   ... %zu more\n", all.size() - 40); break; }
            std::fprintf(stderr,
                         "exception_flow:   #%u thread=%u type=%s message=\"%s\" searched=[%s] filters=[%s] "
                         "catcher=%s unwound=[%s] finally=[%s] caught_in=%s%s%s open_frames=%d/%d\n",
                         f.seq, f.threadNo, f.type.c_str(), f.message.c_str(), Join(f.searched).c_str(),
                         Join(f.filters).c_str(), f.catcherFound.empty() ? "-" : f.catcherFound.c_str(),
                         Join(f.unwound).c_str(), Join(f.finallies).c_str(),
                         f.caughtIn.empty() ? "-" : f.caughtIn.c_str(),
                         f.caught ? "" : " (unfinished)", (f.caughtIn.empty() || f.catchTypeSame) ? "" : " (type at catch differs)",
                         f.searchDepth, f.unwindDepth);
        }
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    ThreadID CurrentThread() {
        ThreadID t = 0;
        if (failed(info_->GetCurrentThreadID(&t))) t = 0;
        return t;
    }

    template <class Fn>
    void WithTop(Fn fn) {
        if (shutdown_.load()) return;
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        auto it = live_.find(t);
        if (it == live_.end() || it->second.empty()) { ++orphans_; return; }
        fn(it->second.back());
    }

    IMetaDataImport* ModuleMetaData(ModuleID mod) {
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return nullptr;
        return static_cast<IMetaDataImport*>(unk);
    }

    std::string FunctionName(FunctionID fid) {
        if (fid == 0 || shutdown_.load()) return "?";
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = names_.find(fid);
            if (it != names_.end()) return it->second;
        }
        std::string out = "?";
        ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0, tok2 = 0;
        IUnknown* unk = nullptr;
        if (succeeded(info_->GetFunctionInfo(fid, &cls, &mod, &tok)) &&
            succeeded(info_->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok2)) && unk) {
            auto* md = static_cast<IMetaDataImport*>(unk);
            mdTypeDef td = 0;
            std::string m = MetaName([&](WCHAR* b, ULONG n, ULONG* pn) {
                return md->GetMethodProps(tok2, &td, b, n, pn, nullptr, nullptr, nullptr, nullptr, nullptr);
            });
            if (!m.empty()) out = TypeDefName(md, td) + "." + m;
            md->Release();
        }
        std::lock_guard<std::mutex> g(mu_);
        names_.emplace(fid, out);
        return out;
    }

    // Type name of a ClassID, with its type arguments (double-pass on typeArgs).
    std::string ClassName(ClassID cls, int depth = 0) {
        ModuleID mod = 0; mdTypeDef td = 0; ClassID parent = 0; ULONG32 n = 0;
        if (depth > 4 || failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &n, nullptr))) return "?";
        std::vector<ClassID> args(n);
        if (n != 0 && failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, n, &n, args.data()))) args.clear();
        IMetaDataImport* md = ModuleMetaData(mod);
        if (md == nullptr) return "?";
        std::string name = TypeDefName(md, td);
        md->Release();
        if (!args.empty()) {
            name += "<";
            for (size_t i = 0; i < args.size() && i < n; ++i) name += (i ? "," : "") + ClassName(args[i], depth + 1);
            name += ">";
        }
        return name;
    }

    // Finds the string field "_message" in the class chain and reads it (see ambiguities 1, 2).
    void ReadMessage(ObjectID obj, ClassID cls, std::string* out) {
        if (!haveStrLayout_) return;
        for (int depth = 0; cls != 0 && depth < 16; ++depth) {
            ModuleID mod = 0; mdTypeDef td = 0; ClassID parent = 0; ULONG32 nArgs = 0;
            if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr))) return;
            ULONG count = 0, size = 0;
            std::vector<COR_FIELD_OFFSET> fields;
            if (succeeded(info_->GetClassLayout(cls, nullptr, 0, &count, &size)) && count != 0) {
                fields.resize(count);
                if (failed(info_->GetClassLayout(cls, fields.data(), count, &count, &size))) fields.clear();
                if (count < fields.size()) fields.resize(count);
            }
            IMetaDataImport* md = fields.empty() ? nullptr : ModuleMetaData(mod);
            for (size_t i = 0; md != nullptr && i < fields.size(); ++i) {
                PCCOR_SIGNATURE sig = nullptr; ULONG cbSig = 0;
                std::string fname = MetaName([&](WCHAR* b, ULONG n, ULONG* pn) {
                    return md->GetFieldProps(fields[i].ridOfField, nullptr, b, n, pn, nullptr, &sig, &cbSig,
                                             nullptr, nullptr, nullptr);
                });
                // FIELD calling convention (0x06) followed by ELEMENT_TYPE_STRING (0x0e).
                if (fname != "_message" || sig == nullptr || cbSig < 2 || sig[0] != 0x06 || sig[1] != 0x0e) continue;
                md->Release();
                ObjectID str = *reinterpret_cast<const ObjectID*>(obj + fields[i].ulOffset);
                if (str == 0) { *out = "<null>"; return; }
                DWORD len = *reinterpret_cast<const DWORD*>(str + strLenOff_);
                const WCHAR* chars = reinterpret_cast<const WCHAR*>(str + strBufOff_);
                *out = to_utf8(chars, len < 200 ? len : 200);
                return;
            }
            if (md != nullptr) md->Release();
            cls = parent;
        }
    }

    ICorProfilerInfo3* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    ULONG strLenOff_ = 0, strBufOff_ = 0;
    bool haveStrLayout_ = false;
    std::mutex mu_;  // guards everything below; never held across a runtime call
    unsigned seq_ = 0, orphans_ = 0;
    std::unordered_map<ThreadID, std::vector<Flow>> live_;  // per-thread stack of in-flight exceptions
    std::unordered_map<ThreadID, unsigned> threadNo_;
    std::unordered_map<FunctionID, std::string> names_;
    std::vector<Flow> done_;
};

DOCFIX_DEFINE_PROFILER(ExceptionFlowProfiler)
