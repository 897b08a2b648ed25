// catch_site_reporter.cpp -- "where was it thrown, where was it handled" report for first-chance
// exceptions, the way an error-monitoring agent groups handled exceptions.
//
// What it does: with COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT it
//   * in ExceptionThrown: names the exception type (GetClassFromObject -> GetClassIDInfo2 ->
//     metadata) and takes a synchronous DoStackSnapshot of the throwing thread; each managed frame's
//     exact class is asked with GetFunctionInfo2 and the frame's COR_PRF_FRAME_INFO inside the
//     snapshot callback, and the throw site (first managed frame) is named after the walk returns;
//   * in ExceptionSearchCatcherFound: records the handler's native entry point and frame with
//     GetNotifiedExceptionClauseInfo and checks with GetFunctionFromIP that the entry point lies in
//     the function the runtime reported as catcher;
//   * in ExceptionCatcherEnter: closes the record (catch site) and groups it by
//     (type, throw site, catch site).
// Shutdown prints "catch_site_reporter: exceptions=<n> ..." and the groups to stderr.
//
// Documentation followed:
//   * COR_PRF_MONITOR: COR_PRF_ENABLE_STACK_SNAPSHOT "Enables calls to the DoStackSnapshot method."
//   * DoStackSnapshot: "You just call DoStackSnapshot from within your ICorProfilerCallback method,
//     passing null in the context and thread parameters." (synchronous walk; no seed, no suspend);
//     "The order in which the stack is walked is ... leaf (last-pushed) frame first".
//   * StackSnapshotCallback: frameInfo "is valid for use only during this callback." -- it is used
//     only there; "If this value is zero, this callback is for a run of unmanaged frames".
//   * GetClassIDInfo2 / GetFunctionInfo2 and "Caller-Allocated Buffers": "First call with a
//     zero-length InfoBuffer parameter to obtain the correct buffer size" and "If InfoBuffer is
//     null, cBufferSizeStart must be 0."
//   * ExceptionThrown / ExceptionCatcherEnter: "The profiler should not block" and should not
//     "cause a managed-memory allocation"; the mutex guards only bookkeeping, never a runtime call.
//     ExceptionCatcherEnter: "The objectId value is passed again since a garbage collection could
//     have moved the object" -- no ObjectID is kept across callbacks.
//   * GetModuleMetaData may return "S_FALSE, and a null in *ppOut".
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//     after the Shutdown method is called." -- Shutdown only prints and Releases.
//
// Ambiguities the documents leave:
//   * GetFunctionFromIP on a handler entry point: whether funclet code (Linux x64 runs catch/
//     finally as funclets) maps back to the parent method is not stated.
//   * COR_PRF_SNAPSHOT_DEFAULT is not described beyond the enum; a StackSnapshotCallback that
//     returns a failure is not documented as stopping the walk, so every frame is visited and only
//     the first kMaxFrames are kept.
#include "common.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr size_t kMaxFrames = 8;

struct Frame {
    FunctionID fn = 0;
    ClassID exactClass = 0;
};

struct Pending {
    std::string type, thrownAt, catcherFound;
    bool haveHandler = false, handlerVerified = false;
    UINT_PTR handlerPc = 0, handlerFrame = 0;
};

struct Group {
    unsigned count = 0, handlerKnown = 0, handlerVerified = 0;
};

template <class Get>
std::string MetaName(Get get) {
    ULONG cch = 0;
    if (failed(get(nullptr, 0, &cch)) || cch == 0 || cch > 4096) return std::string();
    std::vector<WCHAR> buf(cch + 1, 0);
    if (failed(get(buf.data(), cch, &cch))) return std::string();
    return to_utf8(buf.data(), cch < buf.size() ? cch : buf.size() - 1);
}

}  // namespace

class CatchSiteReporter : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) { info_->Release(); info_ = nullptr; return hr; }
        std::fprintf(stderr, "[catch_site_reporter] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID obj) override {
        if (shutdown_.load()) return S_OK;
        Pending p;
        ClassID cls = 0;
        p.type = (succeeded(info_->GetClassFromObject(obj, &cls)) && cls != 0) ? ClassName(cls) : "?";
        Walk walk{this, {}};
        HRESULT hr = info_->DoStackSnapshot(0, &CatchSiteReporter::OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &walk, nullptr, 0);
        bool walked = succeeded(hr) && !walk.frames.empty();
        p.thrownAt = walked ? FrameName(walk.frames.front()) : "?";
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        ++thrown_;
        walkFailures_ += !walked;
        pending_[t].push_back(std::move(p));  // nested exceptions stack up per thread
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionSearchCatcherFound(FunctionID fid) override {
        if (shutdown_.load()) return S_OK;
        std::string name = MethodName(fid, 0);
        COR_PRF_EX_CLAUSE_INFO clause{};
        // BUG: "This call can be made at any time after one of the Enter callbacks above until either the matching Leave callback is received or a nested exception is thrown in the current clause" -- no ExceptionCatcherEnter/ExceptionUnwindFinallyEnter/ExceptionSearchFilterEnter is outstanding while the search pass reports the catcher.
        HRESULT hr = info_->GetNotifiedExceptionClauseInfo(&clause);
        bool have = (hr == S_OK && clause.programCounter != 0);
        bool verified = false;
        if (have) {
            FunctionID owner = 0;
            verified = succeeded(info_->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(clause.programCounter), &owner)) &&
                       owner == fid;
        }
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        auto it = pending_.find(t);
        if (it == pending_.end() || it->second.empty()) { ++orphans_; return S_OK; }
        Pending& p = it->second.back();
        p.catcherFound = name;
        p.haveHandler = have;
        p.handlerVerified = verified;
        p.handlerPc = clause.programCounter;
        p.handlerFrame = clause.framePointer;
        ++clauseResults_[hr];
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID fid, ObjectID) override {
        if (shutdown_.load()) return S_OK;
        std::string caughtAt = MethodName(fid, 0);
        ThreadID t = CurrentThread();
        std::lock_guard<std::mutex> g(mu_);
        auto it = pending_.find(t);
        if (it == pending_.end() || it->second.empty()) { ++orphans_; return S_OK; }
        const Pending& p = it->second.back();
        Group& grp = groups_[p.type + " thrown_at=" + p.thrownAt + " caught_at=" + caughtAt];
        ++grp.count;
        grp.handlerKnown += p.haveHandler;
        grp.handlerVerified += p.handlerVerified;
        ++caught_;
        it->second.pop_back();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        unsigned known = 0, verified = 0;
        size_t open = 0;  // superseded, rethrown from a catch, or caught outside JIT-compiled code
        for (auto& kv : pending_) open += kv.second.size();
        for (auto& kv : groups_) { known += kv.second.handlerKnown; verified += kv.second.handlerVerified; }
        std::fprintf(stderr,
                     "catch_site_reporter: exceptions=%u caught=%u pending=%zu handler_known=%u handler_verified=%u "
                     "walk_failures=%u orphans=%u\n",
                     thrown_, caught_, open, known, verified, walkFailures_, orphans_);
        for (auto& kv : clauseResults_)
            std::fprintf(stderr, "catch_site_reporter:   clause_info hr=0x%08x x%u\n", (unsigned)kv.first, kv.second);
        for (auto& kv : groups_)
            std::fprintf(stderr, "catch_site_reporter:   %ux %s handler_known=%u handler_verified=%u\n", kv.second.count,
                         kv.first.c_str(), kv.second.handlerKnown, kv.second.handlerVerified);
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    struct Walk {
        CatchSiteReporter* self;
        std::vector<Frame> frames;
    };

    // Synchronous walk: runs on the throwing thread, inside ExceptionThrown.
    static HRESULT OnFrame(FunctionID fn, UINT_PTR, COR_PRF_FRAME_INFO frameInfo, ULONG32, BYTE*, void* data) {
        auto* walk = static_cast<Walk*>(data);
        if (fn == 0 || walk->frames.size() >= kMaxFrames) return S_OK;  // unmanaged run, or enough frames
        Frame f;
        f.fn = fn;
        ModuleID mod = 0; mdToken tok = 0; ULONG32 nArgs = 0;
        // frameInfo is valid only during this callback: the exact class is asked for here.
        if (failed(walk->self->info_->GetFunctionInfo2(fn, frameInfo, &f.exactClass, &mod, &tok, 0, &nArgs, nullptr)))
            f.exactClass = 0;
        walk->frames.push_back(f);
        return S_OK;
    }

    ThreadID CurrentThread() {
        ThreadID t = 0;
        if (failed(info_->GetCurrentThreadID(&t))) t = 0;
        return t;
    }

    IMetaDataImport* ModuleMetaData(ModuleID mod) {
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return nullptr;
        return static_cast<IMetaDataImport*>(unk);
    }

    std::string ClassName(ClassID cls, int depth = 0) {
        ModuleID mod = 0; mdTypeDef td = 0; ClassID parent = 0; ULONG32 n = 0;
        if (depth > 4 || failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &n, nullptr))) return "?";
        std::vector<ClassID> args(n);
        if (n != 0 && failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, n, &n, args.data()))) args.clear();
        IMetaDataImport* md = ModuleMetaData(mod);
        if (md == nullptr) return "?";
        std::string name = MetaName([&](WCHAR* b, ULONG c, ULONG* pc) {
            return md->GetTypeDefProps(td, b, c, pc, nullptr, nullptr);
        });
        md->Release();
        if (name.empty()) name = "?";
        for (size_t i = 0; i < args.size(); ++i) name += (i ? "," : "<") + ClassName(args[i], depth + 1);
        if (!args.empty()) name += ">";
        return name;
    }

    // Method name; the class part comes from exactClass when the walk supplied one.
    std::string MethodName(FunctionID fn, ClassID exactClass) {
        if (fn == 0) return "?";
        std::string out = "?";
        ClassID cls = 0; ModuleID mod = 0; mdToken tok = 0;
        if (failed(info_->GetFunctionInfo(fn, &cls, &mod, &tok))) return out;
        IMetaDataImport* md = ModuleMetaData(mod);
        if (md == nullptr) return out;
        mdTypeDef td = 0;
        std::string m = MetaName([&](WCHAR* b, ULONG c, ULONG* pc) {
            return md->GetMethodProps(tok, &td, b, c, pc, nullptr, nullptr, nullptr, nullptr, nullptr);
        });
        std::string owner = MetaName([&](WCHAR* b, ULONG c, ULONG* pc) {
            return md->GetTypeDefProps(td, b, c, pc, nullptr, nullptr);
        });
        md->Release();
        if (exactClass != 0) owner = ClassName(exactClass);
        if (!m.empty()) out = (owner.empty() ? "?" : owner) + "." + m;
        return out;
    }

    std::string FrameName(const Frame& f) { return MethodName(f.fn, f.exactClass); }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;  // guards the members below; never held across a runtime call
    unsigned thrown_ = 0, caught_ = 0, walkFailures_ = 0, orphans_ = 0;
    std::unordered_map<ThreadID, std::vector<Pending>> pending_;
    std::map<std::string, Group> groups_;
    std::map<HRESULT, unsigned> clauseResults_;
};

DOCFIX_DEFINE_PROFILER(CatchSiteReporter)
