// thread_domain_census.cpp -- a per-thread / per-app-domain census for a diagnostics agent.
//  * Threads: ThreadCreated / ThreadAssignedToOSThread / ThreadNameChanged / ThreadDestroyed build one
//    record per managed thread (OS id, name, app domain, transitions made, whether it ended).
//  * App domains: AppDomainCreationFinished names each domain (GetAppDomainInfo, two passes); a thread's
//    domain is asked with GetThreadAppDomain on that thread itself, at its first transition.
//  * Transitions: every Managed<->Unmanaged transition is charged to the current thread (GetCurrentThreadID)
//    and to its domain.
//  * Class IDs from tokens: for each of the app's classes seen in ClassLoadFinished, GetClassIDInfo2
//    (two passes) gives module + typedef + type arguments; later, outside any loading callback, the agent
//    checks that GetClassFromTokenAndTypeArgs maps them back to the same ClassID (its "type key" cache).
//  Shutdown prints "thread_domain_census: threads=<n> ..." and one line per thread / domain to stderr.
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//  * ThreadCreated: "The threadId value is immediately valid."
//  * AppDomainCreationStarted: "The ID is not valid for any information request until the
//    ICorProfilerCallback::AppDomainCreationFinished method is called." -> names asked at Finished.
//  * GetAppDomainInfo / GetClassIDInfo2: "Alternatively, you can first call ... with a zero-length ...
//    buffer to obtain the correct buffer size." -> two passes, re-checked after the second.
//  * GetCurrentThreadID: "If the current thread is an internal runtime thread or other unmanaged thread,
//    GetCurrentThreadID returns CORPROF_E_NOT_MANAGED_THREAD" -> such callbacks are not charged.
//  * GetClassFromTokenAndTypeArgs: "calling this method during loading of modules or other types could
//    lead to an infinite loop" and "they should store the ModuleID and mdTypeDef of that type, and use
//    ICorProfilerInfo2::GetClassIDInfo2 to check whether a given ClassID is that of the desired type."
//    -> keys are taken with GetClassIDInfo2 in ClassLoadFinished; the reverse lookup only runs later, in
//    transition callbacks, and only for classes already reported loaded.
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//    Shutdown method is called." -> Shutdown prints and Releases.
// Ambiguous in the documents: ThreadNameChanged does not say whether `name` is null-terminated (cchName
// is trusted); whether every thread gets ThreadAssignedToOSThread before it runs managed code is not said
// (missing OS ids print as 0); the default domain's creation may precede profiler load (domains learned
// from threads are added by id).
//
// One deliberate defect (for the tool under test): the line marked BUG in ThreadDestroyed.
#include <map>
#include <mutex>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {
template <class F> std::string two_pass(F call) {  // (cch, pcch, buffer) getters
    ULONG need = 0;
    if (failed(call(0, &need, nullptr)) || need == 0) return {};
    std::vector<WCHAR> buf(need + 1, 0);
    ULONG got = 0;
    if (failed(call(need, &got, buf.data())) || got > need) return {};
    return to_utf8(buf.data(), got);
}

struct ThreadRec {
    DWORD os = 0;
    std::string name;
    AppDomainID domain = 0;
    AppDomainID domain_at_exit = 0;
    unsigned long long transitions = 0;
    bool ended = false;
};

struct TypeKey {  // what GetClassIDInfo2 said about a loaded ClassID
    ClassID cls = 0;
    ModuleID mod = 0;
    mdTypeDef td = 0;
    std::vector<ClassID> args;
};
}  // namespace

class ThreadDomainCensus : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_APPDOMAIN_LOADS | COR_PRF_MONITOR_MODULE_LOADS |
                                 COR_PRF_MONITOR_CLASS_LOADS | COR_PRF_MONITOR_CODE_TRANSITIONS);
        if (failed(hr)) info_->Release(), info_ = nullptr;
        return hr;
    }

    HRESULT STDMETHODCALLTYPE AppDomainCreationFinished(AppDomainID ad, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ProcessID pid = 0;
        std::string name = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return info_->GetAppDomainInfo(ad, c, pc, b, &pid); });
        std::lock_guard<std::mutex> g(mu_);
        domains_[ad].name = name;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        std::string path = two_pass([&](ULONG c, ULONG* pc, WCHAR* b) { return info_->GetModuleInfo(mod, &base, c, pc, b, &asmId); });
        size_t slash = path.find_last_of('/');
        std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash);
        std::lock_guard<std::mutex> g(mu_);
        if (path.size() >= 26 && path.compare(path.size() - 26, 26, "System.Private.CoreLib.dll") == 0) framework_dir_ = dir;
        else if (!path.empty() && !framework_dir_.empty() && dir != framework_dir_) app_modules_[mod] = path;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        TypeKey k;
        k.cls = cls;
        ClassID parent = 0;
        ULONG32 n = 0, got = 0;
        if (failed(info_->GetClassIDInfo2(cls, &k.mod, &k.td, &parent, 0, &n, nullptr))) return S_OK;  // pass 1
        {
            std::lock_guard<std::mutex> g(mu_);
            if (app_modules_.count(k.mod) == 0) return S_OK;
        }
        k.args.resize(n);
        if (n > 0 && (failed(info_->GetClassIDInfo2(cls, &k.mod, &k.td, &parent, n, &got, k.args.data())) || got > n))
            return S_OK;  // pass 2 failed or the count grew: not recorded
        std::lock_guard<std::mutex> g(mu_);
        ++app_classes_;
        to_check_.push_back(std::move(k));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID tid) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        auto it = threads_.find(tid);
        if (it != threads_.end() && it->second.ended) threads_.erase(it);  // a ThreadID may be reused
        Thread(tid);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID tid, DWORD os) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        Thread(tid).os = os;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID tid, ULONG cch, WCHAR* name) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        Thread(tid).name = name ? to_utf8(name, cch) : std::string();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID tid) override {
        if (shutdown_.load()) return S_OK;
        AppDomainID ad = 0;
        // Attribute the thread's end to the domain it was in (the domain census closes the thread there).
        HRESULT hr = info_->GetThreadAppDomain(tid, &ad);  // BUG: "The threadId value is no longer valid at the time of this call." (ICorProfilerCallback::ThreadDestroyed)
        std::lock_guard<std::mutex> g(mu_);
        ThreadRec& t = Thread(tid);
        t.ended = true;
        if (succeeded(hr)) t.domain_at_exit = ad;
        ++ended_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ManagedToUnmanagedTransition(FunctionID, COR_PRF_TRANSITION_REASON) override { return OnTransition(); }
    HRESULT STDMETHODCALLTYPE UnmanagedToManagedTransition(FunctionID, COR_PRF_TRANSITION_REASON) override { return OnTransition(); }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        unsigned named = 0;
        unsigned long long total = 0;
        for (auto& t : threads_) named += !t.second.name.empty(), total += t.second.transitions;
        std::fprintf(stderr, "thread_domain_census: threads=%zu ended=%u named=%u domains=%zu transitions=%llu unattributed=%llu "
                     "app_classes=%u token_roundtrip_ok=%u token_roundtrip_bad=%u unchecked=%zu\n",
                     threads_.size(), ended_, named, domains_.size(), total, unattributed_, app_classes_, roundtrip_ok_,
                     roundtrip_bad_, to_check_.size());
        for (ThreadID tid : order_) {
            const ThreadRec& t = threads_[tid];
            std::fprintf(stderr, "  thread os=%u name=%s domain=0x%llx exit_domain=0x%llx transitions=%llu%s\n", t.os,
                         t.name.empty() ? "-" : t.name.c_str(), (unsigned long long)t.domain,
                         (unsigned long long)t.domain_at_exit, t.transitions, t.ended ? " ended" : "");
        }
        for (auto& d : domains_)
            std::fprintf(stderr, "  domain 0x%llx name=%s transitions=%llu\n", (unsigned long long)d.first,
                         d.second.name.empty() ? "-" : d.second.name.c_str(), d.second.transitions);
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    struct DomainRec {
        std::string name;
        unsigned long long transitions = 0;
    };

    ThreadRec& Thread(ThreadID tid) {  // mu_ held
        auto it = threads_.find(tid);
        if (it == threads_.end()) order_.push_back(tid), it = threads_.emplace(tid, ThreadRec{}).first;
        return it->second;
    }

    HRESULT OnTransition() {
        if (shutdown_.load()) return S_OK;
        ThreadID tid = 0;
        if (failed(info_->GetCurrentThreadID(&tid)) || tid == 0) {
            std::lock_guard<std::mutex> g(mu_);
            ++unattributed_;
            return S_OK;
        }
        AppDomainID ad = 0;
        bool need_domain;
        {
            std::lock_guard<std::mutex> g(mu_);
            need_domain = Thread(tid).domain == 0;
        }
        if (need_domain && failed(info_->GetThreadAppDomain(tid, &ad))) ad = 0;  // the current thread: valid
        std::vector<TypeKey> batch;
        {
            std::lock_guard<std::mutex> g(mu_);
            ThreadRec& t = Thread(tid);
            if (ad != 0) t.domain = ad;
            ++t.transitions;
            if (t.domain != 0) ++domains_[t.domain].transitions;
            batch.swap(to_check_);
        }
        for (TypeKey& k : batch) {  // reverse lookups outside any loading callback, for loaded types only
            ClassID back = 0;
            HRESULT hr = info_->GetClassFromTokenAndTypeArgs(k.mod, k.td, static_cast<ULONG32>(k.args.size()),
                                                             k.args.empty() ? nullptr : k.args.data(), &back);
            std::lock_guard<std::mutex> g(mu_);
            (succeeded(hr) && back == k.cls) ? ++roundtrip_ok_ : ++roundtrip_bad_;
        }
        return S_OK;
    }

    ICorProfilerInfo3* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;  // guards everything below
    std::string framework_dir_;
    std::map<ModuleID, std::string> app_modules_;
    std::map<ThreadID, ThreadRec> threads_;
    std::vector<ThreadID> order_;
    std::map<AppDomainID, DomainRec> domains_;
    std::vector<TypeKey> to_check_;
    unsigned ended_ = 0, app_classes_ = 0, roundtrip_ok_ = 0, roundtrip_bad_ = 0;
    unsigned long long unattributed_ = 0;
};

DOCFIX_DEFINE_PROFILER(ThreadDomainCensus)
