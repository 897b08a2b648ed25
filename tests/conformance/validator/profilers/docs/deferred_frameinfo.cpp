// deferred_frameinfo.cpp -- "exception fingerprinting" error tracker for CoreCLR (Linux x86_64).
//
// What it does
// ------------
// Every first-chance exception is reduced to a fingerprint = FNV-1a(type name, every frame name of
// the throwing stack).  Identical fingerprints are counted together; for each fingerprint it keeps
// the type, the exception's Message (read from the object through GetClassLayout field offsets and
// GetStringLayout2), the frames, and how the exception ended: the handler the search phase found
// (ExceptionSearchCatcherFound), the number of functions unwound (ExceptionUnwindFunctionLeave) and
// the function whose catch block ran (ExceptionCatcherEnter).  Shutdown prints a fingerprint table.
//
// Design choice that differs from errortracker.cpp: the stack walk is kept "raw and cheap" -- the
// StackSnapshotCallback only appends (FunctionID, ip, COR_PRF_FRAME_INFO) to an array, and
// symbolization (GetFunctionInfo2 + metadata) happens after DoStackSnapshot has returned.
//
// Documentation followed (quoted)
// -------------------------------
// * ICorProfilerCallback::Initialize: "The Initialize call is the only opportunity to enable (or
//   disable) callbacks that are immutable."  (COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT)
// * ICorProfilerCallback::ExceptionThrown: "The profiler's implementation of this method should not
//   call into managed code or in any way cause a managed-memory allocation."
// * DoStackSnapshot (shared spec): "Passing null in thread yields a snapshot of the current thread."
//   "You just call DoStackSnapshot from within your ICorProfilerCallback method, passing null in the
//   context and thread parameters."
// * ICorProfilerInfo2::GetClassLayout: "The GetClassLayout method returns only the fields defined by
//   the class itself. If the class's parent class has defined fields as well, the profiler must call
//   GetClassLayout on the parent class to obtain those fields."  (walks GetClassIDInfo2 parents)
//   "Alternatively, you can first call GetClassLayout with a zero-length rFieldOffset buffer to
//   obtain the correct buffer size."
// * ICorProfilerInfo3::GetStringLayout2: offsets "relative to the ObjectID pointer"; "The length is
//   stored as a DWORD."  "Strings may or may not be null-terminated."
// * ICorProfilerCallback::ExceptionCatcherEnter: "The objectId value is passed again since a garbage
//   collection could have moved the object since the ExceptionThrown notification."
// * "Garbage Collection Blocking in the Profiling API": in ExceptionUnwindFunctionEnter/Leave and
//   ExceptionCatcherEnter/Leave "garbage collection is disabled around that callback. In these
//   cases, the profiler should return control as soon as possible." -- those callbacks only update
//   per-thread counters and names already cached.
// * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//   ICorProfilerInfo interface after the Shutdown method is called."
//
// THE ONE BUG (deliberate, marked `// BUG:` below): the COR_PRF_FRAME_INFO handed to
// StackSnapshotCallback is stored and passed to ICorProfilerInfo2::GetFunctionInfo2 after
// DoStackSnapshot has returned.  StackSnapshotCallback documents frameInfo as: "A COR_PRF_FRAME_INFO
// value that references information about the stack frame. This value is valid for use only during
// this callback."
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

struct Frame {
    FunctionID fid;
    UINT_PTR ip;
    COR_PRF_FRAME_INFO frameInfo;
};

struct Walk {
    std::vector<Frame> frames;
};

HRESULT CollectFrame(FunctionID fid, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32, BYTE*, void* clientData) {
    auto* w = static_cast<Walk*>(clientData);
    if (w->frames.size() < 48) w->frames.push_back(Frame{fid, ip, frameInfo});
    return S_OK;
}

std::uint64_t fnv1a(std::uint64_t h, const std::string& s) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
    return h;
}

struct Fingerprint {
    std::string type;
    std::string message;
    std::vector<std::string> frames;
    unsigned long hits = 0;
    unsigned long caught = 0;
    unsigned long unwound = 0;
    std::map<std::string, unsigned long> handlers;  // from ExceptionCatcherEnter
    std::map<std::string, unsigned long> found;     // from ExceptionSearchCatcherFound
};

struct Pending {
    std::uint64_t fp;
    ClassID cls;
    unsigned unwound;
};
thread_local std::vector<Pending> t_pending;

}  // namespace

class FingerprintTracker : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (!unk || failed(unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&prof_))) || !prof_) {
            prof_ = nullptr;
            std::fprintf(stderr, "[exfp] no ICorProfilerInfo3\n");
            return E_FAIL;
        }
        HRESULT hr = prof_->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            std::fprintf(stderr, "[exfp] SetEventMask 0x%08x\n", (unsigned)hr);
            prof_->Release();
            prof_ = nullptr;
            return hr;
        }
        if (failed(prof_->GetStringLayout2(&strLen_, &strBuf_))) strLen_ = strBuf_ = 0;
        std::fprintf(stderr, "[exfp] ready\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrown) override {
        if (!prof_ || done_) return S_OK;
        ClassID cls = 0;
        if (failed(prof_->GetClassFromObject(thrown, &cls))) cls = 0;
        std::string type = TypeName(cls);
        std::string msg = MessageOf(thrown, cls);

        Walk walk;
        walk.frames.reserve(48);
        HRESULT hr = prof_->DoStackSnapshot(0, CollectFrame, COR_PRF_SNAPSHOT_DEFAULT, &walk, nullptr, 0);

        // Symbolize after the walk (keeps the snapshot callback trivial).
        std::vector<std::string> names;
        std::uint64_t fp = fnv1a(1469598103934665603ull, type);
        for (const Frame& f : walk.frames) {
            // BUG: f.frameInfo was captured in CollectFrame; DoStackSnapshot has returned, yet it is passed to
            // GetFunctionInfo2 here. StackSnapshotCallback: frameInfo "... This value is valid for use only during this callback."
            std::string n = f.fid ? MethodName(f.fid, f.frameInfo) : std::string("<native>");
            fp = fnv1a(fp, n);
            names.push_back(std::move(n));
        }
        if (failed(hr)) fp = fnv1a(fp, "walk-failed");

        {
            std::lock_guard<std::mutex> g(mu_);
            Fingerprint& e = table_[fp];
            if (e.hits++ == 0) {
                e.type = type;
                e.message = msg;
                e.frames = names;
            }
            thrown_++;
        }
        if (t_pending.size() > 16) t_pending.erase(t_pending.begin());
        t_pending.push_back(Pending{fp, cls, 0});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionSearchCatcherFound(FunctionID fid) override {
        if (!prof_ || done_ || t_pending.empty()) return S_OK;
        std::string n = MethodName(fid, 0);
        std::lock_guard<std::mutex> g(mu_);
        table_[t_pending.back().fp].found[n]++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionLeave() override {
        if (!prof_ || done_ || t_pending.empty()) return S_OK;
        t_pending.back().unwound++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID fid, ObjectID obj) override {
        if (!prof_ || done_ || t_pending.empty()) return S_OK;
        ClassID cls = 0;
        if (failed(prof_->GetClassFromObject(obj, &cls))) cls = 0;
        // Pop to the innermost pending exception of this class.
        while (t_pending.size() > 1 && cls != 0 && t_pending.back().cls != cls) t_pending.pop_back();
        Pending p = t_pending.back();
        t_pending.pop_back();
        std::string n = MethodName(fid, 0);
        std::lock_guard<std::mutex> g(mu_);
        Fingerprint& e = table_[p.fp];
        e.caught++;
        e.unwound += p.unwound;
        e.handlers[n]++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        done_ = true;
        std::lock_guard<std::mutex> g(mu_);
        unsigned long caught = 0;
        for (auto& kv : table_) caught += kv.second.caught;
        std::fprintf(stderr, "[exfp] exceptions=%lu fingerprints=%zu caught=%lu\n", thrown_, table_.size(), caught);
        for (auto& kv : table_) {
            const Fingerprint& e = kv.second;
            std::string h;
            for (auto& x : e.handlers) h += (h.empty() ? "" : ", ") + x.first + " x" + std::to_string(x.second);
            std::fprintf(stderr, "[exfp] %016llx %s x%lu caught=%lu unwound=%lu handler=[%s] msg=\"%s\"\n",
                         (unsigned long long)kv.first, e.type.c_str(), e.hits, e.caught, e.unwound, h.c_str(),
                         e.message.c_str());
            std::string st;
            for (size_t i = 0; i < e.frames.size() && i < 6; ++i) st += (i ? " <- " : "") + e.frames[i];
            std::fprintf(stderr, "[exfp]     %s\n", st.c_str());
        }
        for (auto& kv : md_)
            if (kv.second) kv.second->Release();
        md_.clear();
        prof_->Release();
        prof_ = nullptr;
        return S_OK;
    }

private:
    IMetaDataImport* Md(ModuleID m) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = md_.find(m);
            if (it != md_.end()) return it->second;
        }
        IUnknown* u = nullptr;
        IMetaDataImport* md = nullptr;
        if (prof_->GetModuleMetaData(m, ofRead, IID_IMetaDataImport, &u) == S_OK && u) md = reinterpret_cast<IMetaDataImport*>(u);
        else if (u) u->Release();
        std::lock_guard<std::mutex> g(mu_);
        auto r = md_.emplace(m, md);
        if (!r.second && md) md->Release();
        return r.first->second;
    }

    std::string TypeDefName(ModuleID m, mdTypeDef td) {
        IMetaDataImport* md = Md(m);
        if (!md) return "?";
        WCHAR buf[400];
        ULONG n = 0;
        DWORD fl = 0;
        mdToken ext = 0;
        if (failed(md->GetTypeDefProps(td, buf, 400, &n, &fl, &ext))) return "?";
        std::string s = to_utf8(buf, 400);
        mdTypeDef outer = 0;
        if (succeeded(md->GetNestedClassProps(td, &outer)) && outer) s = TypeDefName(m, outer) + "+" + s;
        return s;
    }

    std::string TypeName(ClassID cls) {
        if (!cls) return "?";
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = types_.find(cls);
            if (it != types_.end()) return it->second;
        }
        ModuleID m = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 nargs = 0;
        std::string s = succeeded(prof_->GetClassIDInfo2(cls, &m, &td, &parent, 0, &nargs, nullptr)) ? TypeDefName(m, td)
                                                                                                   : std::string("?");
        std::lock_guard<std::mutex> g(mu_);
        types_[cls] = s;
        return s;
    }

    std::string MethodName(FunctionID fid, COR_PRF_FRAME_INFO frameInfo) {
        ClassID cls = 0;
        ModuleID m = 0;
        mdToken tok = 0;
        ULONG32 nargs = 0;
        if (failed(prof_->GetFunctionInfo2(fid, frameInfo, &cls, &m, &tok, 0, &nargs, nullptr))) return "<fn>";
        IMetaDataImport* md = Md(m);
        if (!md) return "<fn>";
        mdTypeDef owner = 0;
        WCHAR buf[400];
        ULONG n = 0, sigLen = 0, rva = 0;
        DWORD attr = 0, impl = 0;
        PCCOR_SIGNATURE sig = nullptr;
        if (failed(md->GetMethodProps(tok, &owner, buf, 400, &n, &attr, &sig, &sigLen, &rva, &impl))) return "<fn>";
        std::string t = cls ? TypeName(cls) : TypeDefName(m, owner);
        return t + "::" + to_utf8(buf, 400);
    }

    // Message: walk up the class chain; GetClassLayout on each class gives only its own fields.
    std::string MessageOf(ObjectID obj, ClassID cls) {
        if (!obj || !cls || !strBuf_) return "";
        ULONG off = 0;
        bool have = false;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = msgOffset_.find(cls);
            if (it != msgOffset_.end()) {
                have = true;
                off = it->second;
            }
        }
        if (!have) {
            off = 0;
            for (ClassID c = cls; c && !off;) {
                ModuleID m = 0;
                mdTypeDef td = 0;
                ClassID parent = 0;
                ULONG32 na = 0;
                if (failed(prof_->GetClassIDInfo2(c, &m, &td, &parent, 0, &na, nullptr))) break;
                if (TypeDefName(m, td) == "System.Exception") {
                    ULONG nf = 0, sz = 0;
                    if (succeeded(prof_->GetClassLayout(c, nullptr, 0, &nf, &sz)) && nf) {
                        std::vector<COR_FIELD_OFFSET> fo(nf);
                        ULONG got = 0;
                        IMetaDataImport* md = Md(m);
                        if (md && succeeded(prof_->GetClassLayout(c, fo.data(), nf, &got, &sz))) {
                            for (ULONG i = 0; i < std::min(nf, got); ++i) {
                                WCHAR fn[64];
                                ULONG fnl = 0, sl = 0, cch = 0;
                                mdTypeDef ow = 0;
                                DWORD fa = 0, cp = 0;
                                PCCOR_SIGNATURE sg = nullptr;
                                const void* v = nullptr;
                                if (succeeded(md->GetFieldProps(fo[i].ridOfField, &ow, fn, 64, &fnl, &fa, &sg, &sl, &cp, &v, &cch)) &&
                                    to_utf8(fn, 64) == "_message")
                                    off = fo[i].ulOffset;
                            }
                        }
                    }
                    break;
                }
                c = parent;
            }
            std::lock_guard<std::mutex> g(mu_);
            msgOffset_[cls] = off;
        }
        if (!off) return "";
        ObjectID s = *reinterpret_cast<const ObjectID*>(obj + off);
        if (!s) return "";
        ClassID sc = 0;
        if (failed(prof_->GetClassFromObject(s, &sc)) || TypeName(sc) != "System.String") return "";
        DWORD len = *reinterpret_cast<const DWORD*>(s + strLen_);
        return to_utf8(reinterpret_cast<const WCHAR*>(s + strBuf_), std::min<DWORD>(len, 120));
    }

    ICorProfilerInfo3* prof_ = nullptr;
    std::atomic<bool> done_{false};
    ULONG strLen_ = 0, strBuf_ = 0;
    std::mutex mu_;  // tables only; never held across a runtime call
    unsigned long thrown_ = 0;
    std::map<std::uint64_t, Fingerprint> table_;
    std::unordered_map<ModuleID, IMetaDataImport*> md_;
    std::unordered_map<ClassID, std::string> types_;
    std::unordered_map<ClassID, ULONG> msgOffset_;
};

DOCFIX_DEFINE_PROFILER(FingerprintTracker)
