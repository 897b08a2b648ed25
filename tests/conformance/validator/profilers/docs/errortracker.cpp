// errortracker.cpp -- an APM-style "error tracker" for CoreCLR (Linux x86_64, C++17).
//
// What it does
// ------------
// For every first-chance managed exception it records:
//   * the exception type: GetClassFromObject -> GetClassIDInfo2 (module, typedef, parent, type
//     arguments) -> IMetaDataImport::GetTypeDefProps / GetNestedClassProps names;
//   * the Message string read from the exception object itself: the System.Exception ClassID is
//     found by walking the parent chain from GetClassIDInfo2, its field offsets come from
//     ICorProfilerInfo2::GetClassLayout (two-pass caller-allocated buffer), the "_message" field
//     is found by name with IMetaDataImport::GetFieldProps, and the string's length/characters are
//     read at the offsets ICorProfilerInfo3::GetStringLayout2 reports;
//   * the throwing stack: a synchronous DoStackSnapshot of the current thread (thread = 0,
//     context = null) inside ExceptionThrown; in the StackSnapshotCallback only the FunctionID,
//     ip and the GetFunctionInfo2(funcId, frameInfo, ...) results are captured (frameInfo is used
//     only inside that callback); every frame is named afterwards from metadata, and the throw site
//     gets an IL offset (GetNativeCodeStartAddresses + GetILToNativeMapping3, falling back to
//     GetCodeInfo2 + GetILToNativeMapping);
//   * whether and where it was caught: ExceptionSearchCatcherFound (search phase found a handler),
//     ExceptionUnwindFunctionEnter / ExceptionUnwindFinallyEnter (frames unwound, finallys run),
//     ExceptionCatcherEnter (catching function; the objectId handed in again is re-resolved with
//     GetClassFromObject to match the in-flight record) and GetNotifiedExceptionClauseInfo for the
//     native address -> IL offset of the catch handler.
// Errors are grouped by (type, throw-site method, throw-site IL offset).  Shutdown prints a short
// summary to stderr: totals, and per group count / caught / catchers / sample message / sample stack.
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/..., quoted)
// ------------------------------------------------------------------------------------
// * ICorProfilerCallback::Initialize: "The Initialize call is the only opportunity to enable (or
//   disable) callbacks that are immutable." -- COR_PRF_MONITOR_EXCEPTIONS |
//   COR_PRF_ENABLE_STACK_SNAPSHOT are set there with SetEventMask.
// * ICorProfilerCallback::ExceptionThrown: "This function is called only if the exception reaches
//   managed code."  "The profiler should not block in its implementation of this method because
//   the stack may not be in a state that allows garbage collection ..."  "The profiler's
//   implementation of this method should not call into managed code or in any way cause a
//   managed-memory allocation."  -- nothing here calls managed code or allocates managed memory;
//   the only lock is the profiler's own short table lock, which is never held across a call into
//   the runtime (so no holder can wait for a GC while another thread waits for the lock).
// * ICorProfilerInfo2::DoStackSnapshot (shared spec): "Passing null in thread yields a snapshot of
//   the current thread."  "You make a synchronous call when, in response to the CLR calling one of
//   your profiler's ICorProfilerCallback ... methods, you call DoStackSnapshot to walk the stack of
//   the current thread. ... passing null in the context and thread parameters."  "Do not hold a
//   lock while your profiler calls into a CLR function that can trigger a garbage collection."
// * StackSnapshotCallback: frameInfo "... This value is valid for use only during this callback."
//   and "You must limit the complexity of work done in StackSnapshotCallback." -- the callback only
//   copies values and calls GetFunctionInfo2 with that frameInfo; names are resolved after the walk.
// * ICorProfilerInfo2::GetFunctionInfo2: for a COR_PRF_FRAME_INFO "obtained from a source other than
//   the FunctionEnter2 callback" / zero, "The exact ClassID and type arguments cannot be determined.
//   That is, the ClassID might be null and some type arguments might come back as Object." -- a null
//   ClassID falls back to the method's metadata parent typedef.
// * ICorProfilerInfo2::GetClassIDInfo2: "The profiler code can call ICorProfilerInfo::GetModuleMetaData
//   to obtain a metadata interface for a given module. The metadata token that is returned to the
//   location referenced by pTypeDefToken can then be used to access the metadata for the class."
//   and the caller-allocated-buffer rule: "compare the value that pcNumTypeArgs points to with the
//   value of the cNumTypeArgs parameter" (double-pass used).
// * ICorProfilerInfo::GetModuleMetaData: "Some modules (such as resource modules) have no metadata.
//   In those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."
// * ICorProfilerInfo2::GetClassLayout: "The GetClassLayout method returns only the fields defined by
//   the class itself. If the class's parent class has defined fields as well, the profiler must call
//   GetClassLayout on the parent class to obtain those fields." (so it is called on System.Exception
//   itself, found up the parent chain, not on the thrown subclass)  "If you use GetClassLayout with
//   string classes, the method will fail with error code E_INVALIDARG. Use
//   ICorProfilerInfo2::GetStringLayout ..." and "Alternatively, you can first call GetClassLayout with
//   a zero-length rFieldOffset buffer to obtain the correct buffer size."
// * COR_FIELD_OFFSET: ulOffset "The field's offset within its class."  (see AMBIGUITY below)
// * ICorProfilerInfo3::GetStringLayout2 (supersedes GetStringLayout): pStringLengthOffset "the offset
//   of the location, relative to the ObjectID pointer, that stores the length of the string itself.
//   The length is stored as a DWORD."  pBufferOffset "the offset of the buffer, relative to the
//   ObjectID pointer, which stores the string of wide characters."  "Strings may or may not be
//   null-terminated." -- the length is always used, never a terminator.
// * ICorProfilerCallback::ExceptionCatcherEnter: "The objectId value is passed again since a garbage
//   collection could have moved the object since the ExceptionThrown notification."  -- no ObjectID
//   is kept past the callback that delivered it; the catch is matched by ClassID (stable).
//   "The ExceptionCatcherEnter method is called only if the catch point is in code compiled with the
//   just-in-time (JIT) compiler. An exception that is caught in unmanaged code or in the internal
//   code of the runtime will not call this notification." -- such exceptions are reported as
//   "not seen caught", never as caught.
// * ICorProfilerCallback::ExceptionSearchCatcherFound: "the search phase of exception handling has
//   located a handler for the exception that was thrown."
// * ICorProfilerCallback::ExceptionUnwindFunctionEnter / ExceptionUnwindFinallyEnter: the unwind
//   phase "has begun to unwind a function" / finally clause; same no-block / no-managed rules.
// * ICorProfilerInfo2::GetNotifiedExceptionClauseInfo: "This call can be made at any time after one
//   of the Enter callbacks above until either the matching Leave callback is received or a nested
//   exception is thrown in the current clause" -- it is called only inside ExceptionCatcherEnter.
// * ICorProfilerInfo9::GetILToNativeMapping3 / GetNativeCodeStartAddresses: "When tiered compilation
//   is enabled, a method may have more than one native code body." -- the body whose map covers the
//   ip is located first.
// * "Garbage Collection Blocking in the Profiling API": for ExceptionUnwindFunctionEnter/Leave,
//   ExceptionUnwindFinallyEnter/Leave, ExceptionCatcherEnter/Leave ... "the runtime cannot perform a
//   garbage collection until the profiler returns control from that call ... garbage collection is
//   disabled around that callback. In these cases, the profiler should return control as soon as
//   possible."  CORPROF_E_UNSUPPORTED_CALL_SEQUENCE: returned "When a profiler tries to call an
//   informational method that triggers garbage collection from a callback method that forbids
//   garbage collection."  ICorProfilerInfo4::GetFunctionFromIP2: "GetFunctionFromIP2 can trigger a
//   garbage collection, whereas GetFunctionFromIP will not." -- no GC-triggering method
//   (GetFunctionFromIP2, GetCodeInfo4) is called from any exception callback; the unwind callbacks
//   only bump per-thread counters.
// * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//   ICorProfilerInfo interface after the Shutdown method is called." -- all names are resolved
//   eagerly in the callbacks; Shutdown only prints and Releases.
//
// AMBIGUITY noted: COR_FIELD_OFFSET.ulOffset is documented only as "The field's offset within its
// class", not (as GetStringLayout2 says explicitly) "relative to the ObjectID pointer".  This
// profiler treats it as relative to the ObjectID and validates the result before trusting it: the
// referenced object must be null or an instance of System.String (GetClassFromObject + name
// check on the first read).  If that check ever fails, message reading is disabled.
//
// Interfaces: everything used is declared in profharness/interfaces.h (ICorProfilerInfo3/9,
// IMetaDataImport); nothing had to be declared here.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr size_t kMaxFrames = 64;        // frames captured per throw
constexpr size_t kMaxMessageChars = 160;  // characters of Message kept
constexpr size_t kMaxInFlight = 32;       // per-thread nesting bound
constexpr ULONG32 kMaxTypeArgs = 8;

// One frame as captured inside StackSnapshotCallback (no names yet).
struct RawFrame {
    FunctionID fid = 0;
    UINT_PTR ip = 0;
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken tok = 0;
    ULONG32 nTypeArgs = 0;
    ClassID typeArgs[kMaxTypeArgs] = {};
};

struct WalkBuffer {
    RawFrame frames[kMaxFrames];
    size_t count = 0;
    size_t dropped = 0;
    ICorProfilerInfo3* info = nullptr;
};

// One exception currently travelling on a thread.
struct InFlight {
    ClassID cls = 0;
    std::string key;           // group key
    std::string searchCatcher; // from ExceptionSearchCatcherFound
    unsigned unwoundFrames = 0;
    unsigned finallies = 0;
    unsigned filters = 0;
};

struct ThreadState {
    std::vector<InFlight> inflight;
};
thread_local ThreadState t_state;

struct Group {
    std::string type;
    std::string site;
    unsigned long thrown = 0;
    unsigned long caught = 0;
    unsigned long unwoundFrames = 0;
    unsigned long finallies = 0;
    std::map<std::string, unsigned long> catchers;
    std::string sampleMessage;
    bool haveMessage = false;
    std::vector<std::string> sampleStack;
    size_t sampleStackTotal = 0;
    HRESULT walkHr = S_OK;
};

std::string hex(unsigned long long v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", v);
    return b;
}

}  // namespace

class ErrorTracker : public CallbackBase {
public:
    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[errortracker] ICorProfilerInfo3 unavailable (0x%08x); disabled\n", (unsigned)hr);
            info_ = nullptr;
            return E_FAIL;
        }
        // Optional newer interfaces, only for better IL offsets.
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo9, reinterpret_cast<void**>(&info9_)))) info9_ = nullptr;

        hr = info_->SetEventMask(COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) {
            std::fprintf(stderr, "[errortracker] SetEventMask failed 0x%08x; disabled\n", (unsigned)hr);
            ReleaseAll();
            return hr;
        }
        ULONG lenOff = 0, bufOff = 0;
        if (succeeded(info_->GetStringLayout2(&lenOff, &bufOff))) {
            strLenOff_ = lenOff;
            strBufOff_ = bufOff;
            haveStringLayout_ = true;
        }
        std::fprintf(stderr, "[errortracker] initialized (string layout len@%u buf@%u, info9=%s)\n",
                     (unsigned)strLenOff_, (unsigned)strBufOff_, info9_ ? "yes" : "no");
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrown) override {
        if (!Active()) return S_OK;
        totalThrown_.fetch_add(1);

        ClassID cls = 0;
        if (thrown == 0 || failed(info_->GetClassFromObject(thrown, &cls))) cls = 0;
        std::string type = cls ? ClassName(cls) : std::string("<unknown type>");

        // Message: read from the object while it cannot move (we are inside the callback).
        std::string message;
        bool haveMessage = cls != 0 && ReadMessage(thrown, cls, message);

        // Throwing stack: synchronous walk of the current thread.
        WalkBuffer walk;
        walk.info = info_;
        HRESULT walkHr = info_->DoStackSnapshot(0, &ErrorTracker::SnapshotCallback, COR_PRF_SNAPSHOT_DEFAULT, &walk,
                                                nullptr, 0);

        std::vector<std::string> names;
        names.reserve(walk.count);
        std::string site;
        for (size_t i = 0; i < walk.count; ++i) {
            const RawFrame& f = walk.frames[i];
            if (f.fid == 0) {
                names.emplace_back("[native]");
                continue;
            }
            std::string n = FrameName(f);
            if (site.empty()) {
                site = n;
                long il = IlOffsetForIp(f.fid, f.ip, /*isReturnAddress=*/true);
                if (il >= 0) {
                    char b[24];
                    std::snprintf(b, sizeof b, " IL_%04lx", il);
                    site += b;
                }
            }
            names.push_back(std::move(n));
        }
        if (site.empty()) site = failed(walkHr) ? "<stack unavailable " + hex((unsigned)walkHr) + ">" : "<no managed frame>";

        std::string key = type + "|" + site;
        {
            std::lock_guard<std::mutex> g(lock_);
            Group& grp = groups_[key];
            if (grp.thrown == 0) {
                grp.type = type;
                grp.site = site;
                grp.sampleStack = names;
                grp.sampleStackTotal = walk.count + walk.dropped;
                grp.walkHr = walkHr;
            }
            grp.thrown++;
            if (haveMessage && !grp.haveMessage) {
                grp.sampleMessage = message;
                grp.haveMessage = true;
            }
        }
        if (failed(walkHr)) walkFailures_.fetch_add(1);

        auto& st = t_state.inflight;
        if (st.size() >= kMaxInFlight) st.erase(st.begin());  // bound stale nesting
        InFlight rec;
        rec.cls = cls;
        rec.key = std::move(key);
        st.push_back(std::move(rec));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionSearchFilterEnter(FunctionID) override {
        if (!Active() || t_state.inflight.empty()) return S_OK;
        t_state.inflight.back().filters++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionSearchCatcherFound(FunctionID fid) override {
        if (!Active() || t_state.inflight.empty()) return S_OK;
        t_state.inflight.back().searchCatcher = FunctionNameNoFrame(fid);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID) override {
        if (!Active() || t_state.inflight.empty()) return S_OK;
        t_state.inflight.back().unwoundFrames++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyEnter(FunctionID) override {
        if (!Active() || t_state.inflight.empty()) return S_OK;
        t_state.inflight.back().finallies++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID fid, ObjectID obj) override {
        if (!Active()) return S_OK;
        totalCatches_.fetch_add(1);
        // The object may have moved since ExceptionThrown: use the objectId handed in now.
        ClassID cls = 0;
        if (obj == 0 || failed(info_->GetClassFromObject(obj, &cls))) cls = 0;

        std::string catcher = FunctionNameNoFrame(fid);
        COR_PRF_EX_CLAUSE_INFO clause{};
        if (succeeded(info_->GetNotifiedExceptionClauseInfo(&clause)) && clause.programCounter != 0) {
            long il = IlOffsetForIp(fid, clause.programCounter, /*isReturnAddress=*/false);
            if (il >= 0) {
                char b[24];
                std::snprintf(b, sizeof b, " IL_%04lx", il);
                catcher += b;
            }
        }

        auto& st = t_state.inflight;
        // Innermost record of the same class; anything above it was caught by native/runtime code
        // (no ExceptionCatcherEnter) or superseded, and is dropped as "not seen caught".
        size_t match = st.size();
        for (size_t i = st.size(); i-- > 0;) {
            if (cls == 0 || st[i].cls == cls) {
                match = i;
                break;
            }
        }
        if (match == st.size()) {
            unmatchedCatches_.fetch_add(1);
            return S_OK;
        }
        InFlight rec = std::move(st[match]);
        st.erase(st.begin() + static_cast<std::ptrdiff_t>(match), st.end());
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = groups_.find(rec.key);
            if (it != groups_.end()) {
                Group& grp = it->second;
                grp.caught++;
                grp.catchers[catcher]++;
                grp.unwoundFrames += rec.unwoundFrames;
                grp.finallies += rec.finallies;
            }
        }
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(lock_);
        unsigned long caught = 0;
        for (auto& kv : groups_) caught += kv.second.caught;
        std::fprintf(stderr,
                     "[errortracker] summary: thrown=%lu caught=%lu not-seen-caught=%lu groups=%zu "
                     "catcher-callbacks=%lu unmatched-catches=%lu walk-failures=%lu message-reading=%s(_message@%u)\n",
                     totalThrown_.load(), caught, totalThrown_.load() - caught, groups_.size(), totalCatches_.load(),
                     unmatchedCatches_.load(), walkFailures_.load(),
                     messageDisabled_ ? "disabled" : (messageOffsetKnown_ ? "ok" : "not-resolved"),
                     (unsigned)messageOffset_);
        std::vector<const Group*> order;
        for (auto& kv : groups_) order.push_back(&kv.second);
        std::stable_sort(order.begin(), order.end(), [](const Group* a, const Group* b) { return a->thrown > b->thrown; });
        int idx = 0;
        for (const Group* grp : order) {
            ++idx;
            std::string catchers;
            for (auto& c : grp->catchers) {
                if (!catchers.empty()) catchers += ", ";
                catchers += c.first + " x" + std::to_string(c.second);
            }
            if (catchers.empty()) catchers = "-";
            std::fprintf(stderr, "[errortracker] #%d %s x%lu at %s | caught %lu (in: %s) | unwound-frames=%lu finallys=%lu\n",
                         idx, grp->type.c_str(), grp->thrown, grp->site.c_str(), grp->caught, catchers.c_str(),
                         grp->unwoundFrames, grp->finallies);
            std::fprintf(stderr, "[errortracker]    message: %s\n",
                         grp->haveMessage ? ("\"" + grp->sampleMessage + "\"").c_str() : "<none>");
            std::string stack;
            size_t shown = std::min<size_t>(grp->sampleStack.size(), 8);
            for (size_t i = 0; i < shown; ++i) {
                if (i) stack += " <- ";
                stack += grp->sampleStack[i];
            }
            if (grp->sampleStackTotal > shown) stack += " <- ... (" + std::to_string(grp->sampleStackTotal) + " frames)";
            if (failed(grp->walkHr)) stack += " [DoStackSnapshot " + hex((unsigned)grp->walkHr) + "]";
            std::fprintf(stderr, "[errortracker]    stack: %s\n", stack.c_str());
        }
        // Final Releases only (no ICorProfilerInfo method calls).
        for (auto& kv : metadata_)
            if (kv.second) kv.second->Release();
        metadata_.clear();
        ReleaseAll();
        return S_OK;
    }

private:
    bool Active() const { return info_ != nullptr && !shutdown_.load(std::memory_order_relaxed); }

    void ReleaseAll() {
        if (info9_) info9_->Release();
        if (info_) info_->Release();
        info9_ = nullptr;
        info_ = nullptr;
    }

    // StackSnapshotCallback: copy values; use frameInfo only here, as documented.
    static HRESULT SnapshotCallback(FunctionID fid, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32, BYTE*,
                                    void* clientData) {
        auto* w = static_cast<WalkBuffer*>(clientData);
        if (w->count >= kMaxFrames) {
            w->dropped++;
            return S_OK;
        }
        RawFrame& f = w->frames[w->count++];
        f.fid = fid;
        f.ip = ip;
        if (fid != 0) {
            ULONG32 n = 0;
            if (succeeded(w->info->GetFunctionInfo2(fid, frameInfo, &f.cls, &f.mod, &f.tok, kMaxTypeArgs, &n,
                                                    f.typeArgs)))
                f.nTypeArgs = std::min(n, kMaxTypeArgs);
            else
                f.cls = 0, f.mod = 0, f.tok = 0, f.nTypeArgs = 0;
        }
        return S_OK;
    }

    // -------------------------------- metadata helpers ------------------------------------
    IMetaDataImport* Metadata(ModuleID mod) {
        if (mod == 0) return nullptr;
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = metadata_.find(mod);
            if (it != metadata_.end()) return it->second;
        }
        IUnknown* unk = nullptr;
        HRESULT hr = info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk);
        IMetaDataImport* md = nullptr;
        if (hr == S_OK && unk != nullptr) {
            // The riid asked for IMetaDataImport, so the pointer is one; keep exactly one reference.
            md = reinterpret_cast<IMetaDataImport*>(unk);
        } else if (unk != nullptr) {
            unk->Release();
        }
        std::lock_guard<std::mutex> g(lock_);
        auto ins = metadata_.emplace(mod, md);
        if (!ins.second && md != nullptr) md->Release();  // another thread won the race
        return ins.first->second;
    }

    static std::string StripArity(std::string n) {
        auto p = n.find('`');
        if (p != std::string::npos) n.erase(p);
        return n;
    }

    std::string TypeDefName(IMetaDataImport* md, mdTypeDef td, int depth = 0) {
        if (md == nullptr || td == 0 || depth > 8) return "?";
        WCHAR buf[512];
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        if (failed(md->GetTypeDefProps(td, buf, 512, &len, &flags, &ext))) return "?";
        std::string name = to_utf8(buf, 512);
        mdTypeDef outer = 0;
        if (succeeded(md->GetNestedClassProps(td, &outer)) && outer != 0)
            name = TypeDefName(md, outer, depth + 1) + "+" + name;
        return name;
    }

    std::string ClassName(ClassID cls, int depth = 0) {
        if (cls == 0) return "?";
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = classNames_.find(cls);
            if (it != classNames_.end()) return it->second;
        }
        std::string name;
        CorElementType elem = 0;
        ClassID elemCls = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &elem, &elemCls, &rank) == S_OK) {
            name = (depth < 4 && elemCls ? ClassName(elemCls, depth + 1) : std::string("?")) + "[" +
                   std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
        } else {
            ModuleID mod = 0;
            mdTypeDef td = 0;
            ClassID parent = 0;
            ULONG32 nArgs = 0;
            HRESULT hr = info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr);
            if (failed(hr)) {
                name = "<class " + hex(cls) + ">";
            } else {
                name = StripArity(TypeDefName(Metadata(mod), td));
                if (nArgs > 0 && depth < 4) {
                    std::vector<ClassID> args(nArgs);
                    ULONG32 got = 0;
                    if (succeeded(info_->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data()))) {
                        name += "<";
                        for (ULONG32 i = 0; i < std::min(got, nArgs); ++i) {
                            if (i) name += ",";
                            name += ClassName(args[i], depth + 1);
                        }
                        name += ">";
                    }
                }
            }
        }
        std::lock_guard<std::mutex> g(lock_);
        classNames_.emplace(cls, name);
        return name;
    }

    std::string MethodName(ModuleID mod, mdToken tok, ClassID cls, const ClassID* typeArgs, ULONG32 nTypeArgs) {
        IMetaDataImport* md = Metadata(mod);
        if (md == nullptr || tok == 0) return "?";
        mdTypeDef owner = 0;
        WCHAR buf[512];
        ULONG len = 0;
        DWORD attr = 0, implFlags = 0;
        PCCOR_SIGNATURE sig = nullptr;
        ULONG sigLen = 0, rva = 0;
        if (failed(md->GetMethodProps(tok, &owner, buf, 512, &len, &attr, &sig, &sigLen, &rva, &implFlags))) return "?";
        std::string typeName = cls != 0 ? ClassName(cls) : StripArity(TypeDefName(md, owner));
        std::string name = typeName + "." + to_utf8(buf, 512);
        // GetFunctionInfo2's typeArgs are "the ID of a type argument of the function".
        if (typeArgs != nullptr && nTypeArgs > 0) {
            name += "<";
            for (ULONG32 i = 0; i < nTypeArgs; ++i) {
                if (i) name += ",";
                name += ClassName(typeArgs[i], 1);
            }
            name += ">";
        }
        return name;
    }

    std::string FrameName(const RawFrame& f) {
        if (f.mod != 0 && f.tok != 0) return MethodName(f.mod, f.tok, f.cls, f.typeArgs, f.nTypeArgs);
        return FunctionNameNoFrame(f.fid);
    }

    std::string FunctionNameNoFrame(FunctionID fid) {
        if (fid == 0) return "[native]";
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = funcNames_.find(fid);
            if (it != funcNames_.end()) return it->second;
        }
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        ULONG32 n = 0;
        std::string name;
        if (succeeded(info_->GetFunctionInfo2(fid, 0, &cls, &mod, &tok, 0, &n, nullptr)))
            name = MethodName(mod, tok, cls, nullptr, 0);
        else
            name = "<function " + hex(fid) + ">";
        std::lock_guard<std::mutex> g(lock_);
        funcNames_.emplace(fid, name);
        return name;
    }

    // Native ip -> IL offset; -1 when unknown.  For return addresses, ip-1 is looked up so that the
    // call instruction (not the following one) is attributed.  For a clause entry (catch handler
    // start, isReturnAddress=false) the first IL-mapped instruction at or after the entry is used,
    // since the entry itself is the handler's prolog.
    //
    // Only methods that do not trigger a garbage collection are used here, because this runs inside
    // ExceptionThrown / ExceptionCatcherEnter ("Garbage Collection Blocking in the Profiling API":
    // "garbage collection is disabled around that callback" for ExceptionCatcherEnter; ExceptionThrown:
    // "the stack may not be in a state that allows garbage collection").  GetFunctionFromIP2 is
    // avoided ("GetFunctionFromIP2 can trigger a garbage collection, whereas GetFunctionFromIP will
    // not"); the code body containing the ip is found from the IL-to-native maps themselves.
    long IlOffsetForIp(FunctionID fid, UINT_PTR ip, bool isReturnAddress) {
        if (fid == 0 || ip == 0) return -1;
        UINT_PTR lookup = isReturnAddress ? ip - 1 : ip;
        std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map;
        UINT_PTR codeStart = 0;
        bool gotMap = false;
        if (info9_ != nullptr) {
            // This profiler never requests ReJIT, so every native body belongs to ReJITID 0.
            ULONG32 nStarts = 0;
            if (succeeded(info9_->GetNativeCodeStartAddresses(fid, 0, 0, &nStarts, nullptr)) && nStarts > 0) {
                std::vector<UINT_PTR> starts(nStarts);
                ULONG32 got = 0;
                if (succeeded(info9_->GetNativeCodeStartAddresses(fid, 0, nStarts, &got, starts.data()))) {
                    for (ULONG32 i = 0; i < std::min(got, nStarts) && !gotMap; ++i) {
                        if (starts[i] == 0 || starts[i] > lookup) continue;
                        ULONG32 n = 0;
                        if (failed(info9_->GetILToNativeMapping3(starts[i], 0, &n, nullptr)) || n == 0) continue;
                        std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> m(n);
                        ULONG32 got2 = 0;
                        if (failed(info9_->GetILToNativeMapping3(starts[i], n, &got2, m.data()))) continue;
                        m.resize(std::min(got2, n));
                        ULONG32 maxEnd = 0;
                        for (const auto& e : m) maxEnd = std::max(maxEnd, e.nativeEndOffset);
                        if (lookup - starts[i] < maxEnd) {
                            codeStart = starts[i];
                            map = std::move(m);
                            gotMap = true;
                        }
                    }
                }
            }
        }
        if (!gotMap) {
            // Fallback for runtimes without ICorProfilerInfo9: the body GetCodeInfo2 reports.
            COR_PRF_CODE_INFO ci[4];
            ULONG32 nci = 0;
            if (failed(info_->GetCodeInfo2(fid, 4, &nci, ci)) || nci == 0) return -1;
            codeStart = ci[0].startAddress;
            if (lookup < codeStart) return -1;
            ULONG32 n = 0;
            if (failed(info_->GetILToNativeMapping(fid, 0, &n, nullptr)) || n == 0) return -1;
            map.resize(n);
            ULONG32 got = 0;
            if (failed(info_->GetILToNativeMapping(fid, n, &got, map.data()))) return -1;
            map.resize(std::min(got, n));
        }
        ULONG32 off = static_cast<ULONG32>(lookup - codeStart);
        long best = -1;
        ULONG32 bestStart = 0xFFFFFFFFu;
        for (const auto& e : map) {
            // Special values (NO_MAPPING/PROLOG/EPILOG) are "negative" ilOffsets.
            if (static_cast<std::int32_t>(e.ilOffset) < 0) continue;
            if (off >= e.nativeStartOffset && off < e.nativeEndOffset) return static_cast<long>(e.ilOffset);
            if (!isReturnAddress && e.nativeStartOffset > off && e.nativeStartOffset < bestStart) {
                bestStart = e.nativeStartOffset;
                best = static_cast<long>(e.ilOffset);
            }
        }
        return best;
    }

    // ------------------------------- Message reading --------------------------------------
    // Finds System.Exception up the parent chain of `cls`, then the "_message" field offset.
    bool ResolveMessageField(ClassID cls) {
        ClassID cur = cls;
        for (int guard = 0; cur != 0 && guard < 32; ++guard) {
            ModuleID mod = 0;
            mdTypeDef td = 0;
            ClassID parent = 0;
            ULONG32 n = 0;
            if (failed(info_->GetClassIDInfo2(cur, &mod, &td, &parent, 0, &n, nullptr))) return false;
            if (TypeDefName(Metadata(mod), td) == "System.Exception") {
                ULONG nFields = 0, classSize = 0;
                if (failed(info_->GetClassLayout(cur, nullptr, 0, &nFields, &classSize)) || nFields == 0) return false;
                std::vector<COR_FIELD_OFFSET> fields(nFields);
                ULONG got = 0;
                if (failed(info_->GetClassLayout(cur, fields.data(), nFields, &got, &classSize))) return false;
                IMetaDataImport* md = Metadata(mod);
                if (md == nullptr) return false;
                for (ULONG i = 0; i < std::min(got, nFields); ++i) {
                    WCHAR buf[128];
                    ULONG len = 0;
                    mdTypeDef owner = 0;
                    DWORD attr = 0, cplus = 0;
                    PCCOR_SIGNATURE sig = nullptr;
                    ULONG sigLen = 0, cch = 0;
                    const void* val = nullptr;
                    if (failed(md->GetFieldProps(fields[i].ridOfField, &owner, buf, 128, &len, &attr, &sig, &sigLen, &cplus,
                                                 &val, &cch)))
                        continue;
                    if (to_utf8(buf, 128) == "_message") {
                        std::lock_guard<std::mutex> g(lock_);
                        exceptionClass_ = cur;
                        messageOffset_ = fields[i].ulOffset;
                        exceptionClassSize_ = classSize;
                        messageOffsetKnown_ = true;
                        return true;
                    }
                }
                return false;
            }
            cur = parent;
        }
        return false;
    }

    // True when `cls` is System.Exception or derives from it (cached per ClassID).  Anything else
    // thrown (a non-CLS throw) has no _message field at that offset and is never read.
    bool DerivesFromException(ClassID cls) {
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = derivesFromException_.find(cls);
            if (it != derivesFromException_.end()) return it->second;
        }
        bool yes = false;
        ClassID cur = cls;
        for (int guard = 0; cur != 0 && guard < 32; ++guard) {
            if (cur == exceptionClass_) {
                yes = true;
                break;
            }
            ModuleID mod = 0;
            mdTypeDef td = 0;
            ClassID parent = 0;
            ULONG32 n = 0;
            if (failed(info_->GetClassIDInfo2(cur, &mod, &td, &parent, 0, &n, nullptr))) break;
            cur = parent;
        }
        std::lock_guard<std::mutex> g(lock_);
        derivesFromException_[cls] = yes;
        return yes;
    }

    bool ReadMessage(ObjectID obj, ClassID cls, std::string& out) {
        if (!haveStringLayout_ || messageDisabled_) return false;
        if (!messageOffsetKnown_ && !ResolveMessageField(cls)) return false;
        if (!DerivesFromException(cls)) return false;
        ObjectID str = *reinterpret_cast<const ObjectID*>(obj + messageOffset_);
        if (str == 0) {
            out = "<null>";
            return true;
        }
        if (!stringClassKnown_) {
            // First non-null read: confirm the offset interpretation (see AMBIGUITY in the header).
            ClassID sc = 0;
            if (failed(info_->GetClassFromObject(str, &sc)) || ClassName(sc) != "System.String") {
                messageDisabled_ = true;
                std::fprintf(stderr, "[errortracker] _message offset %u did not lead to a System.String; message "
                                     "reading disabled\n", (unsigned)messageOffset_);
                return false;
            }
            stringClass_ = sc;
            stringClassKnown_ = true;
        }
        DWORD len = *reinterpret_cast<const DWORD*>(str + strLenOff_);
        const WCHAR* chars = reinterpret_cast<const WCHAR*>(str + strBufOff_);
        size_t n = std::min<size_t>(len, kMaxMessageChars);
        out = to_utf8(chars, n);
        if (len > n) out += "...";
        return true;
    }

    // ------------------------------------ state -------------------------------------------
    ICorProfilerInfo3* info_ = nullptr;
    ICorProfilerInfo9* info9_ = nullptr;
    std::atomic<bool> shutdown_{false};

    std::mutex lock_;  // guards the maps below; never held across a call into the runtime
    std::unordered_map<ModuleID, IMetaDataImport*> metadata_;
    std::unordered_map<ClassID, std::string> classNames_;
    std::unordered_map<FunctionID, std::string> funcNames_;
    std::map<std::string, Group> groups_;

    bool haveStringLayout_ = false;
    ULONG strLenOff_ = 0, strBufOff_ = 0;
    std::atomic<bool> messageOffsetKnown_{false};
    ULONG messageOffset_ = 0;
    ULONG exceptionClassSize_ = 0;
    std::atomic<bool> messageDisabled_{false};
    std::atomic<bool> stringClassKnown_{false};
    ClassID stringClass_ = 0;
    ClassID exceptionClass_ = 0;
    std::unordered_map<ClassID, bool> derivesFromException_;

    std::atomic<unsigned long> totalThrown_{0};
    std::atomic<unsigned long> totalCatches_{0};
    std::atomic<unsigned long> unmatchedCatches_{0};
    std::atomic<unsigned long> walkFailures_{0};
};

DOCFIX_DEFINE_PROFILER(ErrorTracker)
