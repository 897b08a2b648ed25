// exception_stacks_deferred.cpp -- exception stack recorder, "cheap callback" variant.
//
// What it does: the same as exception_stacks.cpp (COR_PRF_MONITOR_EXCEPTIONS |
// COR_PRF_ENABLE_STACK_SNAPSHOT; on ExceptionThrown: name the thrown class with GetClassFromObject ->
// GetClassIDInfo2 -> GetTypeDefProps, walk the current thread synchronously with
// DoStackSnapshot(thread 0, no context), name the innermost kTopFrames managed frames, group by
// exception type and stack, print from Shutdown starting "exception_stacks: exceptions=<n>"), except
// that, to keep the walk callback as cheap as possible, the StackSnapshotCallback only records
// (funcId, ip, frameInfo) in a vector and every GetFunctionInfo2 call is made after
// DoStackSnapshot has returned, with the recorded frameInfo.
//
// THIS FILE CONTAINS ONE DELIBERATE, REALISTIC BUG (marked "// BUG:"): the frameInfo handed to
// the StackSnapshotCallback is used after that callback has returned.  StackSnapshotCallback says of
// frameInfo: "This value is valid for use only during this callback."
//
// Documentation followed otherwise (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * COR_PRF_MONITOR -- COR_PRF_MONITOR_EXCEPTIONS "Controls the ExceptionThrown callback ...";
//     COR_PRF_ENABLE_STACK_SNAPSHOT "Enables calls to the DoStackSnapshot method."
//   * DoStackSnapshot -- "Passing null in thread yields a snapshot of the current thread."; a
//     synchronous walk: "You just call DoStackSnapshot from within your ICorProfilerCallback method,
//     passing null in the context and thread parameters."; "If you are doing a synchronous walk,
//     no seed is necessary."
//   * StackSnapshotCallback -- "You must limit the complexity of work done in
//     StackSnapshotCallback." (the motive for deferring); "If this value is zero, this callback is
//     for a run of unmanaged frames" (those are counted, not named).
//   * GetFunctionInfo2 -- "you can first call GetFunctionInfo2 with a zero-length pcTypeArgs buffer
//     to obtain the correct buffer size" (two-pass, as in "Caller-Allocated Buffers");
//     GetClassIDInfo2 -- "Alternatively, you can first call GetClassIDInfo2 with a zero-length
//     typeArgs buffer" (two-pass).
//   * ExceptionThrown -- "The profiler should not block in its implementation of this method" and
//     "should not call into managed code or in any way cause a managed-memory allocation."  The
//     only lock is a short std::mutex around plain C++ maps, never held across a CLR call.
//   * Shutdown -- "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//     after the Shutdown method is called."  The summary is built only from strings already kept.
//
// Ambiguities met in the documents:
//   * GetFunctionInfo2 calls cTypeArgs "The size of the typeArgs array" and then says to compare
//     *pcTypeArgs with "cTypeArgs divided by the size of a ClassID value" (bytes?).  The
//     "Caller-Allocated Buffers" page says sizes are element counts; element counts are used here.
//   * For a frameInfo not from FunctionEnter2, "the ClassID might be null and some type arguments
//     might come back as Object": when pClassId is 0 the class is named from the method's typedef.
//   * GetFunctionInfo2 itself only says frameInfo "points to information about a stack frame"; the
//     lifetime limit is stated on the page of the callback that produced the value, not here.
//   * The IMetaDataImport pages do not say a null buffer is allowed, so names use the single-pass
//     method with reallocation ("Be prepared to reallocate the buffer if it proves to be too
//     small") rather than a zero-length first call.
//   * StackSnapshotCallback does not document what a non-S_OK return does, so the walk is never
//     cut short; frames beyond kTopFrames are just counted.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr size_t kTopFrames = 8;
constexpr size_t kStacksPerType = 4;

struct FrameRec {
    FunctionID func = 0;
    UINT_PTR ip = 0;
    COR_PRF_FRAME_INFO frameInfo = 0;  // recorded by the callback, used after the walk
    HRESULT hr = S_OK;  // result of GetFunctionInfo2 for this frame
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken tok = 0;
    std::vector<ClassID> typeArgs;
};

struct WalkState {
    ICorProfilerInfo2* info = nullptr;
    std::vector<FrameRec> frames;  // innermost kTopFrames managed frames
    size_t managed = 0;
    size_t unmanagedRuns = 0;
};

std::string hex(HRESULT hr) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", static_cast<unsigned>(hr));
    return b;
}

// StackSnapshotCallback: kept as cheap as possible -- it only records the frame.
HRESULT STDMETHODCALLTYPE OnFrame(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32,
                                  BYTE[], void* clientData) {
    auto* st = static_cast<WalkState*>(clientData);
    if (funcId == 0) {
        ++st->unmanagedRuns;
        return S_OK;
    }
    ++st->managed;
    if (st->frames.size() >= kTopFrames) return S_OK;
    FrameRec f;
    f.func = funcId;
    f.ip = ip;
    f.frameInfo = frameInfo;
    st->frames.push_back(std::move(f));
    return S_OK;
}

// Runs after DoStackSnapshot has returned: identifies each recorded frame.
void IdentifyFrames(WalkState& st) {
    for (FrameRec& f : st.frames) {
        ULONG32 n = 0;
        // BUG: frameInfo is used after its StackSnapshotCallback returned; the StackSnapshotCallback page says of frameInfo: "This value is valid for use only during this callback."
        f.hr = st.info->GetFunctionInfo2(f.func, f.frameInfo, &f.cls, &f.mod, &f.tok, 0, &n, nullptr);
        if (succeeded(f.hr) && n > 0) {
            f.typeArgs.resize(n);
            ULONG32 got = 0;
            f.hr = st.info->GetFunctionInfo2(f.func, f.frameInfo, &f.cls, &f.mod, &f.tok, n, &got, f.typeArgs.data());
            f.typeArgs.resize(succeeded(f.hr) ? (got < n ? got : n) : 0);
        }
    }
}

}  // namespace

class ExceptionStacks : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[exception_stacks_deferred] QueryInterface(ICorProfilerInfo2) failed %s\n", hex(hr).c_str());
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            std::fprintf(stderr, "[exception_stacks_deferred] SetEventMask failed %s\n", hex(hr).c_str());
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[exception_stacks_deferred] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrown) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        ++exceptions_;
        std::string type = "?";
        ClassID cls = 0;
        HRESULT hr = info_->GetClassFromObject(thrown, &cls);
        if (succeeded(hr)) type = ClassName(cls, 0);

        WalkState st;
        st.info = info_;
        st.frames.reserve(kTopFrames);
        // Synchronous walk of the current thread: thread 0, no seed context.
        hr = info_->DoStackSnapshot(0, &OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &st, nullptr, 0);
        if (failed(hr)) ++walkFailures_;
        IdentifyFrames(st);
        frames_ += st.managed;

        std::string stack;
        if (failed(hr)) stack = "    <DoStackSnapshot failed " + hex(hr) + ">\n";
        for (const FrameRec& f : st.frames) {
            if (failed(f.hr)) ++unresolved_;
            stack += "    at " + MethodName(f) + "\n";
        }
        if (st.managed > st.frames.size())
            stack += "    ... " + std::to_string(st.managed - st.frames.size()) + " more managed frames\n";

        std::lock_guard<std::mutex> lock(mu_);  // no CLR call below this point
        TypeStats& ts = byType_[type];
        ++ts.count;
        ++ts.stacks[stack];
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> lock(mu_);
        std::fprintf(stderr, "exception_stacks: exceptions=%u\n", exceptions_.load());
        std::fprintf(stderr, "exception_stacks: types=%zu walk_failures=%u managed_frames=%zu unresolved_frames=%u\n",
                     byType_.size(), walkFailures_.load(), frames_.load(), unresolved_.load());
        for (const auto& t : byType_) {
            std::fprintf(stderr, "exception_stacks: type %s count=%u distinct_stacks=%zu\n", t.first.c_str(),
                         t.second.count, t.second.stacks.size());
            std::vector<std::pair<unsigned, const std::string*>> order;
            for (const auto& s : t.second.stacks) order.emplace_back(s.second, &s.first);
            std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
            for (size_t i = 0; i < order.size() && i < kStacksPerType; ++i)
                std::fprintf(stderr, "  stack x%u:\n%s", order[i].first, order[i].second->c_str());
        }
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    struct TypeStats {
        unsigned count = 0;
        std::map<std::string, unsigned> stacks;
    };

    IMetaDataImport* Import(ModuleID mod) {
        IUnknown* unk = nullptr;
        if (mod == 0 || failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr)
            return nullptr;
        return static_cast<IMetaDataImport*>(unk);
    }

    // Single-pass with reallocation (see header): 256 WCHARs first, the reported size if larger.
    static std::string TypeDefName(IMetaDataImport* md, mdTypeDef td) {
        WCHAR small[256];
        ULONG need = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        if (failed(md->GetTypeDefProps(td, small, 256, &need, &flags, &ext))) return "?";
        std::string name;
        if (need > 256) {
            std::vector<WCHAR> big(need);
            if (failed(md->GetTypeDefProps(td, big.data(), need, &need, &flags, &ext))) return "?";
            name = to_utf8(big.data(), big.size());
        } else {
            name = to_utf8(small, 256);
        }
        mdTypeDef outer = 0;
        if (md->GetNestedClassProps(td, &outer) == S_OK && outer != 0 && outer != td)
            name = TypeDefName(md, outer) + "+" + name;
        return name;
    }

    std::string ClassName(ClassID cls, int depth) {
        if (cls == 0) return "?";
        if (depth > 4) return "...";
        CorElementType elem = 0;
        ClassID elemCls = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &elem, &elemCls, &rank) == S_OK)
            return (elemCls != 0 ? ClassName(elemCls, depth + 1) : "elem" + std::to_string(elem)) + "[" +
                   std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 n = 0;
        HRESULT hr = info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &n, nullptr);
        if (failed(hr)) return "<class " + hex(hr) + ">";
        std::vector<ClassID> args(n);
        if (n > 0) {
            ULONG32 got = 0;
            if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, n, &got, args.data()))) args.clear();
            else if (got < n) args.resize(got);
        }
        IMetaDataImport* md = Import(mod);
        if (md == nullptr) return "?";
        std::string name = TypeDefName(md, td);
        md->Release();
        return name + ArgList(args, depth);
    }

    std::string ArgList(const std::vector<ClassID>& args, int depth) {
        if (args.empty()) return "";
        std::string s = "<";
        for (size_t i = 0; i < args.size(); ++i) s += (i ? "," : "") + ClassName(args[i], depth + 1);
        return s + ">";
    }

    std::string MethodName(const FrameRec& f) {
        if (failed(f.hr)) return "<GetFunctionInfo2 failed " + hex(f.hr) + ">";
        IMetaDataImport* md = Import(f.mod);
        if (md == nullptr) return "<no metadata>";
        WCHAR small[256];
        ULONG need = 0;
        mdTypeDef owner = 0;
        DWORD attr = 0, impl = 0;
        PCCOR_SIGNATURE sig = nullptr;
        ULONG cbSig = 0, rva = 0;
        std::string method = "?";
        if (succeeded(md->GetMethodProps(f.tok, &owner, small, 256, &need, &attr, &sig, &cbSig, &rva, &impl))) {
            if (need > 256) {
                std::vector<WCHAR> big(need);
                if (succeeded(md->GetMethodProps(f.tok, &owner, big.data(), need, &need, &attr, &sig, &cbSig, &rva, &impl)))
                    method = to_utf8(big.data(), big.size());
            } else {
                method = to_utf8(small, 256);
            }
        }
        // An exact ClassID when the runtime gives one; otherwise the open typedef.
        std::string type = f.cls != 0 ? ClassName(f.cls, 0) : (owner != 0 ? TypeDefName(md, owner) : "?");
        md->Release();
        return type + "." + method + ArgList(f.typeArgs, 0);
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> exceptions_{0};
    std::atomic<unsigned> walkFailures_{0};
    std::atomic<unsigned> unresolved_{0};
    std::atomic<size_t> frames_{0};
    std::mutex mu_;
    std::map<std::string, TypeStats> byType_;
};

DOCFIX_DEFINE_PROFILER(ExceptionStacks)
