// jit_cost_attributor.cpp -- attributes JIT cost (compile time, native code bytes, inlining) to the
// managed caller whose call triggered each compilation, and reports how much precompiled code was
// reused and how long the runtime was suspended meanwhile.
//
// What it does: mask COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES |
// COR_PRF_MONITOR_SUSPENDS | COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT.
// JITCompilationStarted walks the current thread synchronously (DoStackSnapshot, null thread and
// context) and keeps the first managed frame -- the caller that needed the method -- with its ip and
// frameInfo; after the walk the caller's exact class is read with GetFunctionInfo2 and its ip is
// checked with GetFunctionFromIP.  JITCompilationFinished measures the compile time, reads the native
// extents with GetCodeInfo2 (two-pass) and charges time and bytes to the caller; JITInlining counts
// inlinees per inliner (always allowing them); JITCachedFunctionSearchStarted/Finished count
// precompiled (ReadyToRun/NGen) hits.  If GetFunctionInfo2 fails, GetFunctionInfo is the fallback.
// Suspension callbacks give GC pause time and suspended-thread counts.  Names come from
// IMetaDataImport (two-pass) in JITCompilationFinished.
// Shutdown prints "jit_cost_attributor: jitted=<n> ..." and the top callers to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * DoStackSnapshot: "You just call DoStackSnapshot from within your ICorProfilerCallback method,
//    passing null in the context and thread parameters."  "It does not require seeding or suspending."
//    StackSnapshotCallback: "You must limit the complexity of work done in StackSnapshotCallback."
//    (the callback only copies the first managed frame; lookups run after the walk)
//  * JITCachedFunctionSearchStarted: "When the profiler receives duplicate callbacks, it must set the
//    value referenced by pbUseCachedFunction to the same value for all the duplicate callbacks."
//    (always TRUE)  JITInlining: pfShouldInline "true to allow the insertion to occur" (always TRUE).
//  * GetCodeInfo2: "Alternatively, you can first call GetCodeInfo2 with a zero-length codeInfos buffer
//    to obtain the correct buffer size."  Caller-allocated buffers: "If InfoBuffer is null,
//    cBufferSizeStart must be 0."
//  * RuntimeSuspendFinished: "The RuntimeSuspendFinished callback is guaranteed to occur on the same
//    thread as the ICorProfilerCallback::RuntimeSuspendStarted callback."  RuntimeResumeFinished: "it
//    is guaranteed to occur on the same thread as the ICorProfilerCallback::RuntimeResumeStarted
//    callback."  (pause = SuspendStarted -> ResumeFinished, kept under one lock)
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called."
//
// Ambiguities: GetCodeInfo2's remarks compare cCodeInfos "with the value of the cchName parameter"
// (there is none) and divide it "by the size of a COR_PRF_CODE_INFO structure" although the IDL sizes
// the array in elements; elements are used.  JITCachedFunctionSearch* are described for NGen images
// only; whether ReadyToRun code raises them is not stated.  Nothing says which frame is "first" in a
// synchronous walk from JITCompilationStarted (runtime stubs are unmanaged and skipped).
// This file carries ONE deliberate contract violation, marked "BUG:" below.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace docfix;

namespace {
using Clock = std::chrono::steady_clock;
using Key = std::pair<ModuleID, mdToken>;

// What the synchronous walk keeps of the first managed frame.
struct TriggerFrame {
    FunctionID func = 0;
    UINT_PTR ip = 0;
    COR_PRF_FRAME_INFO frameInfo = 0;
    unsigned managed = 0;
};

HRESULT STDMETHODCALLTYPE OnFrame(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32, BYTE*, void* data) {
    auto* t = static_cast<TriggerFrame*>(data);
    if (funcId == 0) return S_OK;
    if (t->managed++ == 0) {
        t->func = funcId;
        t->ip = ip;
        t->frameInfo = frameInfo;  // kept so the (slower) GetFunctionInfo2 can run after the walk
    }
    return S_OK;
}

// One JIT compilation in flight on this thread (compilations can nest through class constructors).
struct InFlight { FunctionID func; Clock::time_point start; Key caller; };
thread_local std::vector<InFlight> t_inflight;

struct CallerStats { unsigned jits = 0; double ms = 0; unsigned long long bytes = 0; };
}  // namespace

class JitCostAttributor : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES | COR_PRF_MONITOR_SUSPENDS |
                                 COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT);
        if (failed(hr)) std::fprintf(stderr, "[jit_cost_attributor] SetEventMask failed 0x%08x\n", (unsigned)hr);
        return hr;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID func, BOOL) override {
        if (shutdown_.load()) return S_OK;
        Key caller{0, 0};
        TriggerFrame tf;
        HRESULT hr = info_->DoStackSnapshot(0, &OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &tf, nullptr, 0);
        bool ipOk = false, exact = false, fallback = false;
        if (succeeded(hr) && tf.func != 0) {
            ClassID cls = 0;
            ULONG32 nTypeArgs = 0;
            // BUG: StackSnapshotCallback, frameInfo: "This value is valid for use only during this callback."
            HRESULT fi = info_->GetFunctionInfo2(tf.func, tf.frameInfo, &cls, &caller.first, &caller.second, 0, &nTypeArgs, nullptr);
            exact = succeeded(fi);
            if (failed(fi)) fallback = succeeded(info_->GetFunctionInfo(tf.func, &cls, &caller.first, &caller.second));
            FunctionID byIp = 0;
            ipOk = succeeded(info_->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(tf.ip), &byIp)) && byIp == tf.func;
        }
        t_inflight.push_back({func, Clock::now(), caller});
        std::lock_guard<std::mutex> g(mu_);
        ++started_;
        if (failed(hr)) ++walk_failed_;
        else if (tf.func == 0) ++no_managed_caller_;
        if (exact) ++exact_class_;
        if (fallback) ++fallback_info_;
        if (ipOk) ++ip_consistent_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID func, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load()) return S_OK;
        auto it = std::find_if(t_inflight.rbegin(), t_inflight.rend(), [func](const InFlight& f) { return f.func == func; });
        if (it == t_inflight.rend()) return S_OK;
        InFlight f = *it;
        t_inflight.erase(std::next(it).base());
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - f.start).count();
        unsigned long long bytes = succeeded(hrStatus) ? CodeBytes(func) : 0;
        std::string name = f.caller.first != 0 ? NameOf(f.caller) : std::string("(no managed caller)");
        std::lock_guard<std::mutex> g(mu_);
        ++finished_;
        if (failed(hrStatus)) ++jit_failed_;
        jit_bytes_ += bytes;
        jit_ms_ += ms;
        CallerStats& c = callers_[name];
        c.jits++, c.ms += ms, c.bytes += bytes;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID caller, FunctionID, BOOL* pfShouldInline) override {
        if (pfShouldInline != nullptr) *pfShouldInline = 1;
        std::lock_guard<std::mutex> g(mu_);
        ++inlines_;
        ++inlines_by_func_[caller];
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchStarted(FunctionID, BOOL* pbUseCachedFunction) override {
        if (pbUseCachedFunction != nullptr) *pbUseCachedFunction = 1;  // same answer for every duplicate
        std::lock_guard<std::mutex> g(mu_);
        ++cache_searches_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID, COR_PRF_JIT_CACHE result) override {
        if (result != 0 /*COR_PRF_CACHED_FUNCTION_FOUND*/) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        return ++cache_hits_, S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override { return ++threads_, S_OK; }

    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON reason) override {
        std::lock_guard<std::mutex> g(mu_);
        susp_reason_ = reason;
        susp_start_ = Clock::now();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID) override { return ++threads_suspended_, S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override { return ++susp_aborted_, S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override {
        std::lock_guard<std::mutex> g(mu_);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - susp_start_).count();
        ++suspensions_;
        if (susp_reason_ == 1 || susp_reason_ == 7) ++gc_suspensions_, gc_pause_ms_ += ms;
        else other_pause_ms_ += ms;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr,
                     "jit_cost_attributor: jitted=%u finished=%u failed=%u jit_ms=%.2f jit_bytes=%llu inlines=%u "
                     "cache_searches=%u cache_hits=%u\n",
                     started_, finished_, jit_failed_, jit_ms_, jit_bytes_, inlines_, cache_searches_, cache_hits_);
        std::fprintf(stderr,
                     "jit_cost_attributor:   walks: failed=%u no_managed_caller=%u exact_class=%u fallback_info=%u ip_consistent=%u\n",
                     walk_failed_, no_managed_caller_, exact_class_, fallback_info_, ip_consistent_);
        std::fprintf(stderr,
                     "jit_cost_attributor:   suspensions=%u gc=%u aborted=%u gc_pause_ms=%.2f other_pause_ms=%.2f "
                     "threads_suspended=%u threads=%u inliners=%zu\n",
                     suspensions_, gc_suspensions_, susp_aborted_.load(), gc_pause_ms_, other_pause_ms_,
                     threads_suspended_.load(), threads_.load(), inlines_by_func_.size());
        std::vector<std::pair<std::string, CallerStats>> v(callers_.begin(), callers_.end());
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
        for (size_t i = 0; i < v.size() && i < 5; ++i)
            std::fprintf(stderr, "jit_cost_attributor:   caller %s: jits=%u ms=%.2f bytes=%llu\n", v[i].first.c_str(),
                         v[i].second.jits, v[i].second.ms, v[i].second.bytes);
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    // Native code size of a function: GetCodeInfo2, zero-length call first, then the sized buffer.
    unsigned long long CodeBytes(FunctionID func) {
        ULONG32 n = 0;
        if (failed(info_->GetCodeInfo2(func, 0, &n, nullptr)) || n == 0) return 0;
        std::vector<COR_PRF_CODE_INFO> ranges(n);
        ULONG32 got = 0;
        if (failed(info_->GetCodeInfo2(func, n, &got, ranges.data()))) return 0;
        unsigned long long total = 0;
        for (ULONG32 i = 0; i < std::min(n, got); ++i) total += ranges[i].size;
        return total;
    }

    // "Type.Method" from metadata, cached; two-pass name reads.
    std::string NameOf(const Key& k) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = names_.find(k);
            if (it != names_.end()) return it->second;
        }
        char tok[32];
        std::snprintf(tok, sizeof tok, "token 0x%08x", (unsigned)k.second);
        std::string out = tok;
        IUnknown* unk = nullptr;
        if (succeeded(info_->GetModuleMetaData(k.first, ofRead, IID_IMetaDataImport, &unk)) && unk != nullptr) {
            auto* md = reinterpret_cast<IMetaDataImport*>(unk);
            mdTypeDef td = 0;
            ULONG n = 0, tn = 0;
            std::vector<WCHAR> m, t;
            if (succeeded(md->GetMethodProps(k.second, &td, nullptr, 0, &n, nullptr, nullptr, nullptr, nullptr, nullptr)) && n > 0)
                m.resize(n);
            if (!m.empty() && failed(md->GetMethodProps(k.second, &td, m.data(), n, &n, nullptr, nullptr, nullptr, nullptr, nullptr))) m.clear();
            if (!m.empty() && succeeded(md->GetTypeDefProps(td, nullptr, 0, &tn, nullptr, nullptr)) && tn > 0) t.resize(tn);
            if (!t.empty() && failed(md->GetTypeDefProps(td, t.data(), tn, &tn, nullptr, nullptr))) t.clear();
            if (!m.empty()) out = (t.empty() ? std::string("?") : to_utf8(t.data(), t.size())) + "." + to_utf8(m.data(), m.size());
            md->Release();
        }
        std::lock_guard<std::mutex> g(mu_);
        names_[k] = out;
        return out;
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> threads_{0}, threads_suspended_{0}, susp_aborted_{0};

    std::mutex mu_;  // guards the rest; never held across an ICorProfilerInfo call
    unsigned started_ = 0, finished_ = 0, jit_failed_ = 0, inlines_ = 0, cache_searches_ = 0, cache_hits_ = 0;
    unsigned walk_failed_ = 0, no_managed_caller_ = 0, exact_class_ = 0, fallback_info_ = 0, ip_consistent_ = 0;
    unsigned suspensions_ = 0, gc_suspensions_ = 0;
    unsigned long long jit_bytes_ = 0;
    double jit_ms_ = 0, gc_pause_ms_ = 0, other_pause_ms_ = 0;
    int susp_reason_ = 0;
    Clock::time_point susp_start_;
    std::map<FunctionID, unsigned> inlines_by_func_;
    std::map<std::string, CallerStats> callers_;
    std::map<Key, std::string> names_;
};

DOCFIX_DEFINE_PROFILER(JitCostAttributor)
