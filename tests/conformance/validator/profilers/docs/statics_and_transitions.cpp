// statics_and_transitions.cpp -- two features of a diagnostics agent.
//  (a) Static-field reader: modules that do not sit beside System.Private.CoreLib are the app's. Each
//      app class is noted at ClassLoadFinished and its static fields listed from metadata (EnumFields,
//      GetFieldProps). Later, on a managed thread making a transition, GetStaticFieldInfo gives each
//      field's kind, the matching Get*StaticAddress gives its address, and primitives are read at once.
//  (b) Managed/unmanaged transitions counted per target (COR_PRF_MONITOR_CODE_TRANSITIONS); a target
//      FunctionID is named once via GetTokenAndMetaDataFromFunction (+ its P/Invoke map).
//  Shutdown prints "statics_and_transitions: classes=<n> ..." and the details to stderr.
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//  * ClassLoadFinished: "The value of classId is not valid for an information request until the
//    ClassLoadFinished method is called." and "Some parts of loading the class might continue after
//    the ClassLoadFinished callback." -> only GetClassIDInfo + metadata there; static queries later.
//  * GetStaticFieldInfo: "This information can be used to determine which function to call to get the
//    address of the static field." / "Static literals (that is, constants) exist only in the metadata
//    and do not have an address." -> fdLiteral fields are never asked for an address.
//  * Get{AppDomain,Thread,RVA,Context}StaticAddress(2): "Before a class's class constructor is
//    completed, ... will return CORPROF_E_DATAINCOMPLETE for all its static fields" -> retried later;
//    "These addresses may become invalid after garbage collection, so after garbage collection,
//    profilers should not assume that they are valid." -> an address is never kept; it is read at once
//    and the read discarded if a GC began meanwhile (GarbageCollectionStarted/Finished bump a counter).
//  * GetCurrentThreadID: "If the current thread is an internal runtime thread or other unmanaged thread,
//    GetCurrentThreadID returns CORPROF_E_NOT_MANAGED_THREAD" -> reads run on managed threads only;
//    thread statics are read for the current thread.
//  * GetAppDomainsContainingModule: "The method uses caller allocated buffers." + Caller-Allocated
//    Buffers: "First call with a zero-length InfoBuffer parameter to obtain the correct buffer size."
//    -> two passes there and for GetModuleInfo and every metadata name.
//  * ManagedToUnmanagedTransition: "If the unmanaged function was called by using implicit platform
//    invoke (PInvoke), the runtime cannot determine the destination of the call and the value of
//    functionId will be null." -> null is its own target and is never passed to the runtime.
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//    Shutdown method is called." -> Shutdown prints and Releases the info pointer, nothing else.
// Ambiguous in the documents: no callback says a class constructor has completed (we retry at later
// transitions: values are "as of the last transition"); whether a primitive static can be in the GC
// heap (the GC bracket covers it); which AppDomainID GetThreadStaticAddress2 wants (the thread's own);
// kinds "can be combined" (our order: RVA, thread, context, app-domain); whether
// GetAppDomainsContainingModule is complete at ModuleLoadFinished (so it is asked lazily, at reads).
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {
constexpr COR_PRF_STATIC_TYPE kNotStatic = 0x0, kAppDomain = 0x1, kThread = 0x2, kContext = 0x4, kRva = 0x8;
constexpr DWORD fdStatic = 0x0010, fdLiteral = 0x0040;

// Two-pass call of a (cch, pcch, buffer) getter: size first, then fill; retried if it grew.
template <class F> std::string two_pass(F call) {
    ULONG need = 0;
    if (failed(call(0, &need, nullptr)) || need == 0) return {};
    for (int attempt = 0; attempt < 2; ++attempt) {
        std::vector<WCHAR> buf(need + 1, 0);
        ULONG got = 0;
        if (failed(call(need, &got, buf.data()))) return {};
        if (got <= need) return to_utf8(buf.data(), got);
        need = got;
    }
    return {};
}

size_t primitive_size(BYTE et) {  // ELEMENT_TYPE_BOOLEAN..R8, I, U
    static const unsigned char sz[0x1a] = {0, 0, 1, 2, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 8};
    return et < 0x1a ? sz[et] : 0;
}

std::string format_primitive(BYTE et, const void* p) {  // little-endian, as the runtime stores them
    std::uint64_t u = 0;
    size_t n = primitive_size(et);
    if (n == 0) return "?";
    std::memcpy(&u, p, n);
    char b[64];
    bool sgn = et == 0x04 || et == 0x06 || et == 0x08 || et == 0x0a || et == 0x18;
    if (sgn && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ULL << (8 * n);  // sign-extend
    if (et == 0x02) return u ? "true" : "false";
    float f;
    double d;
    if (et == 0x0c) std::memcpy(&f, p, 4), std::snprintf(b, sizeof b, "%g", f);
    else if (et == 0x0d) std::memcpy(&d, p, 8), std::snprintf(b, sizeof b, "%g", d);
    else if (sgn) std::snprintf(b, sizeof b, "%lld", (long long)u);
    else std::snprintf(b, sizeof b, et == 0x03 ? "'\\u%04llx'" : "%llu", (unsigned long long)u);
    return b;
}

std::string type_name(IMetaDataImport* md, mdTypeDef td) {  // Outer+Inner for nested types
    if ((td & 0x00FFFFFF) == 0) return "<global>";
    std::string n = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return md->GetTypeDefProps(td, b, c, pc, nullptr, nullptr); });
    mdTypeDef outer = 0;
    if (md->GetNestedClassProps(td, &outer) == S_OK && outer != td && (outer & 0x00FFFFFF)) n = type_name(md, outer) + "+" + n;
    return n;
}

// Field signature: FIELD calling convention, custom modifiers (CMOD_REQD/OPT + coded token), type.
BYTE field_element_type(PCCOR_SIGNATURE sig, ULONG n) {
    ULONG i = 0;
    if (sig == nullptr || n < 2 || (sig[i++] & 0x0F) != 0x06) return 0;
    while (i + 1 < n && (sig[i] == 0x1F || sig[i] == 0x20)) i += 1 + ((sig[i + 1] & 0x80) == 0 ? 1 : (sig[i + 1] & 0xC0) == 0x80 ? 2 : 4);
    return i < n ? sig[i] : 0;
}

struct Field {
    ClassID cls = 0; ModuleID mod = 0; mdFieldDef tok = 0;
    std::string name, value;             // "Class.field"; last value read (primitives) or a note
    BYTE et = 0; bool literal = false;   // ELEMENT_TYPE of the field; fdLiteral
    COR_PRF_STATIC_TYPE kind = -1;       // -1: not asked yet
    HRESULT last_hr = S_OK;
    unsigned reads = 0, addressed = 0, incomplete = 0;  // value reads, address-only answers, DATAINCOMPLETE
};

struct Target {
    std::string name;
    unsigned long long n[4] = {0, 0, 0, 0};  // m2u call, m2u return, u2m call, u2m return
    unsigned long long total() const { return n[0] + n[1] + n[2] + n[3]; }
};

const char* kind_name(COR_PRF_STATIC_TYPE k) {
    return k < 0 ? "unknown" : (k & kRva) ? "rva" : (k & kThread) ? "thread" : (k & kContext) ? "context"
                 : (k & kAppDomain) ? "appdomain" : "not-static";
}
}  // namespace

class StaticsAndTransitions : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        const DWORD low = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_CODE_TRANSITIONS;
        hr = info_->SetEventMask2(low, COR_PRF_HIGH_BASIC_GC);
        if (failed(hr)) hr = info_->SetEventMask(low | COR_PRF_MONITOR_GC);  // older runtimes: full GC events
        if (failed(hr)) info_->Release(), info_ = nullptr;
        return hr;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;  // (not yet available before ModuleAttachedToAssembly; unused)
        std::string path = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return info_->GetModuleInfo(mod, &base, c, pc, b, &asmId); });
        size_t slash = path.find_last_of('/');
        std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash);
        std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
        if (std::lock_guard<std::mutex> g(data_mu_); file == "System.Private.CoreLib.dll") return framework_dir_ = dir, S_OK;
        else if (path.empty() || framework_dir_.empty() || dir == framework_dir_) return S_OK;  // not the app's
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return S_OK;
        std::lock_guard<std::mutex> g(data_mu_);
        app_modules_[mod] = static_cast<IMetaDataImport*>(unk);  // kept for the process lifetime
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ModuleID mod = 0;
        mdTypeDef td = 0;  // classId is valid for information requests from this callback on
        if (failed(info_->GetClassIDInfo(cls, &mod, &td)) || mod == 0) return S_OK;
        IMetaDataImport* md = nullptr;
        if (std::lock_guard<std::mutex> g(data_mu_); app_modules_.count(mod)) md = app_modules_[mod];
        if (md == nullptr) return S_OK;  // not one of the app's classes
        std::string cname = type_name(md, td);
        std::vector<Field> found;
        HCORENUM e = nullptr;
        mdFieldDef toks[64];
        ULONG n = 0;
        while (succeeded(md->EnumFields(&e, td, toks, 64, &n)) && n > 0) {
            for (ULONG i = 0; i < n; ++i) {
                DWORD attr = 0, cplus = 0;
                ULONG cbSig = 0, cchVal = 0;
                PCCOR_SIGNATURE sig = nullptr;
                const void* val = nullptr;
                std::string fname = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) {
                    return md->GetFieldProps(toks[i], nullptr, b, c, pc, &attr, &sig, &cbSig, &cplus, &val, &cchVal);
                });
                if (!(attr & fdStatic)) continue;
                Field f;
                f.cls = cls, f.mod = mod, f.tok = toks[i], f.name = cname + "." + fname;
                f.et = field_element_type(sig, cbSig), f.literal = (attr & fdLiteral) != 0;
                if (f.literal && val && primitive_size(static_cast<BYTE>(cplus)))  // a constant: metadata only, no address
                    f.value = format_primitive(static_cast<BYTE>(cplus), val);
                found.push_back(f);
            }
        }
        if (e) md->CloseEnum(e);
        std::lock_guard<std::mutex> g(data_mu_);
        ++classes_;
        for (auto& f : found) pending_.push_back(std::move(f));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override { ++gc_seq_; return S_OK; }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override { ++gc_seq_; return S_OK; }

    HRESULT STDMETHODCALLTYPE ManagedToUnmanagedTransition(FunctionID fid, COR_PRF_TRANSITION_REASON r) override {
        return OnTransition(fid, r == 0 ? 0 : 1);
    }
    HRESULT STDMETHODCALLTYPE UnmanagedToManagedTransition(FunctionID fid, COR_PRF_TRANSITION_REASON r) override {
        return OnTransition(fid, r == 0 ? 2 : 3);
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);  // later callbacks return at once
        std::unique_lock<std::timed_mutex> s(snap_mu_, std::chrono::seconds(1));  // a reader may be mid-read
        std::lock_guard<std::mutex> g(data_mu_);
        std::vector<Field> none;  // fields_ stays untouched if a reader could not be waited for
        std::vector<Field>& fl = s.owns_lock() ? fields_ : none;
        for (auto& f : pending_) fl.push_back(std::move(f));
        pending_.clear();
        unsigned statics = 0, literals = 0, read = 0, addressed = 0, incomplete = 0;
        unsigned long long total = 0;
        for (auto& f : fl) (f.literal ? literals : statics)++, read += f.reads > 0, addressed += f.addressed > 0, incomplete += f.incomplete;
        std::vector<const Target*> order;  // busiest targets first
        for (auto& t : targets_) order.push_back(&t.second), total += t.second.total();
        std::fprintf(stderr, "statics_and_transitions: classes=%u static_fields=%u literals=%u values_read=%u address_only=%u "
                     "incomplete_retries=%u snapshots=%u gc_discards=%u transitions=%llu targets=%zu\n",
                     classes_, statics, literals, read, addressed, incomplete, snapshots_, gc_discards_, total, targets_.size());
        for (auto& f : fl)
            std::fprintf(stderr, "  static %s kind=%s et=0x%02x value=%s reads=%u last_hr=0x%08x\n", f.name.c_str(),
                         f.literal ? "literal" : kind_name(f.kind), f.et, f.value.empty() ? "-" : f.value.c_str(),
                         f.reads + f.addressed, (unsigned)f.last_hr);
        std::sort(order.begin(), order.end(), [](const Target* a, const Target* b) { return a->total() > b->total(); });
        for (size_t i = 0; i < order.size() && i < 12; ++i)
            std::fprintf(stderr, "  transition %s m2u_call=%llu m2u_ret=%llu u2m_call=%llu u2m_ret=%llu\n",
                         order[i]->name.c_str(), order[i]->n[0], order[i]->n[1], order[i]->n[2], order[i]->n[3]);
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    HRESULT OnTransition(FunctionID fid, int slot) {
        if (shutdown_.load()) return S_OK;
        bool known = false;
        {
            std::lock_guard<std::mutex> g(data_mu_);
            auto it = targets_.find(fid);
            if ((known = it != targets_.end())) ++it->second.n[slot];
        }
        if (!known) {  // name it outside the lock (runtime calls), then count
            std::string name = NameFunction(fid);
            std::lock_guard<std::mutex> g(data_mu_);
            Target& t = targets_[fid];
            t.name = t.name.empty() ? name : t.name, ++t.n[slot];
        }
        Snapshot();
        return S_OK;
    }

    std::string NameFunction(FunctionID fid) {
        if (fid == 0) return "<implicit P/Invoke: null FunctionID>";
        IUnknown* unk = nullptr;
        mdToken tok = 0;
        if (failed(info_->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok)) || unk == nullptr)
            return "<unnamed FunctionID>";
        auto* md = static_cast<IMetaDataImport*>(unk);
        mdTypeDef td = 0;
        std::string m = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) {
            return md->GetMethodProps(tok, &td, b, c, pc, nullptr, nullptr, nullptr, nullptr, nullptr);
        });
        std::string name = type_name(md, td) + "::" + m;
        DWORD flags = 0;
        mdToken dll = 0;
        std::string entry = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return md->GetPinvokeMap(tok, &flags, b, c, pc, &dll); });
        if (!entry.empty()) {
            std::string lib = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return md->GetModuleRefProps(dll, b, c, pc); });
            name += " [" + lib + "!" + entry + "]";
        }
        md->Release();
        return name;
    }

    // Runs on the managed thread that is making a transition; one thread at a time, throttled.
    void Snapshot() {
        std::unique_lock<std::timed_mutex> s(snap_mu_, std::try_to_lock);
        if (!s.owns_lock() || shutdown_.load()) return;
        auto now = std::chrono::steady_clock::now();
        if (now - last_snapshot_ < std::chrono::milliseconds(2)) return;
        last_snapshot_ = now;
        {
            std::lock_guard<std::mutex> g(data_mu_);
            for (auto& f : pending_) fields_.push_back(std::move(f));
            pending_.clear();
        }
        ThreadID tid = 0;  // the current (managed) thread: the only one ever passed below
        AppDomainID threadDomain = 0;
        if (failed(info_->GetCurrentThreadID(&tid)) || tid == 0 || failed(info_->GetThreadAppDomain(tid, &threadDomain))) return;
        ++snapshots_;
        for (auto& f : fields_) {
            if (f.literal || shutdown_.load()) continue;
            COR_PRF_STATIC_TYPE k = kNotStatic;  // asked once, at the first read (not during class load)
            if (f.kind < 0 && succeeded(f.last_hr = info_->GetStaticFieldInfo(f.cls, f.tok, &k))) f.kind = k;
            if (f.kind < 0) continue;
            if (f.kind == kNotStatic) continue;
            // App-domain statics: every domain holding the module. Others: the current thread's domain.
            auto domains = (f.kind & (kRva | kThread | kContext)) ? std::vector<AppDomainID>{threadDomain} : ModuleDomains(f.mod);
            if (domains.empty()) continue;
            std::string joined;
            bool complete = true;
            for (AppDomainID ad : domains) {
                unsigned seq = gc_seq_.load();
                if (seq & 1) return;  // a GC is under way: try again at a later transition
                void* addr = nullptr;
                HRESULT hr = AddressOf(f, ad, tid, &addr);
                f.last_hr = hr;
                if (hr == CORPROF_E_DATAINCOMPLETE) { ++f.incomplete; complete = false; break; }
                if (failed(hr) || addr == nullptr) { complete = false; break; }
                size_t sz = primitive_size(f.et);
                if (sz == 0) { joined = "(not primitive: address only)"; continue; }  // never dereferenced
                std::uint64_t raw = 0;
                std::memcpy(&raw, addr, sz);
                if (gc_seq_.load() != seq) { ++gc_discards_; complete = false; break; }  // address may be stale
                joined += (joined.empty() ? "" : ",") + format_primitive(f.et, &raw);
            }
            if (complete) { f.value = joined; primitive_size(f.et) ? ++f.reads : ++f.addressed; }
        }
    }

    HRESULT AddressOf(const Field& f, AppDomainID ad, ThreadID tid, void** addr) {  // the call the kind names
        if (f.kind & kRva) return info_->GetRVAStaticAddress(f.cls, f.tok, addr);
        if (f.kind & kThread) return info_->GetThreadStaticAddress2(f.cls, f.tok, ad, tid, addr);
        if (f.kind & kContext) {
            ContextID ctx = 0;
            HRESULT hr = info_->GetThreadContext(tid, &ctx);
            return failed(hr) ? hr : info_->GetContextStaticAddress(f.cls, f.tok, ctx, addr);
        }
        return info_->GetAppDomainStaticAddress(f.cls, f.tok, ad, addr);
    }

    std::vector<AppDomainID> ModuleDomains(ModuleID mod) {
        auto it = domains_.find(mod);
        if (it != domains_.end()) return it->second;
        ULONG32 need = 0, got = 0;  // pass 1: count only; pass 2: fill
        if (failed(info_->GetAppDomainsContainingModule(mod, 0, &need, nullptr)) || need == 0) return {};
        std::vector<AppDomainID> v(need);
        if (failed(info_->GetAppDomainsContainingModule(mod, need, &got, v.data()))) return {};
        v.resize(std::min(got, need));  // a domain appearing between the calls is picked up next time
        if (!v.empty() && got <= need) domains_[mod] = v;
        return v;
    }

    ICorProfilerInfo5* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> gc_seq_{0};
    std::mutex data_mu_;  // guards: framework_dir_, app_modules_, classes_, pending_, targets_
    std::string framework_dir_;
    std::map<ModuleID, IMetaDataImport*> app_modules_;
    unsigned classes_ = 0;
    std::vector<Field> pending_, fields_;  // fields_: guarded by snap_mu_
    std::map<FunctionID, Target> targets_;
    std::timed_mutex snap_mu_;  // guards: fields_, domains_, last_snapshot_, counters below
    std::map<ModuleID, std::vector<AppDomainID>> domains_;
    std::chrono::steady_clock::time_point last_snapshot_{};
    unsigned snapshots_ = 0, gc_discards_ = 0;
};

DOCFIX_DEFINE_PROFILER(StaticsAndTransitions)
