// rejit_rewriter.cpp -- a ReJIT instrumentation engine: after a few of the application's own
// methods have been JIT-compiled, it asks the runtime to recompile them (RequestReJIT, from a
// thread of its own) and, when the runtime asks for the recompilation's parameters, hands it the
// method's IL with a probe prologue prepended (ICorProfilerFunctionControl::SetILFunctionBody).
//
// What it does:
//   * Initialize: QueryInterface for ICorProfilerInfo4, SetEventMask(COR_PRF_ENABLE_REJIT |
//     COR_PRF_DISABLE_ALL_NGEN_IMAGES | COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS),
//     then (the Info pointer stored first) starts its request thread.
//   * ModuleLoadFinished: remembers the modules that are not the shared framework's.
//   * JITCompilationFinished: GetFunctionInfo -> (module, methodDef); the first kMethods distinct
//     methods of the app's modules are queued for the request thread.
//   * The request thread: RequestReJIT for what is queued, then waits for more; stopped and joined in
//     Shutdown.
//   * GetReJITParameters(module, methodDef, control): GetILFunctionBody (the original body) ->
//     rewritten (rejit_body.h: fat header, probe "ldc.i4 id; pop" prepended, EH clauses moved) ->
//     control->SetILFunctionBody(size, body); the body lives in a std::vector freed on return.
//   * ReJITError: counted (RequestReJIT's S_OK only says an attempt was made).
//   believed: correct.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * COR_PRF_MONITOR enumeration, COR_PRF_ENABLE_REJIT: "Enables calls to the RequestReJIT and
//     RequestRevert methods." "If the profiler specifies this flag, it must also specify
//     COR_PRF_DISABLE_ALL_NGEN_IMAGES." "The profiler must set this flag on startup."
//   * ICorProfilerInfo4::RequestReJIT: "the profiler should call RequestReJIT from a thread it
//     previously created, and not from a CLR-created thread that is currently executing a profiler
//     callback." "This does not affect currently executing functions, only future function
//     invocations." "The profiler must implement the ICorProfilerCallback4::ReJITError method".
//   * ICorProfilerCallback4::GetReJITParameters: "The GetReJITParameters callback is issued only once
//     per function; the parameters supplied by the profiler apply to all instances of that function."
//   * ICorProfilerFunctionControl::SetILFunctionBody: see rejit_body.h.
#include <atomic>
#include <condition_variable>
#include <thread>

#include "rejit_body.h"

using namespace rejitfix;

namespace {

class ReJITRewriter : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_ENABLE_REJIT | COR_PRF_DISABLE_ALL_NGEN_IMAGES |
                                 COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        worker_ = std::thread([this] { Requests(); });
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (!stop_.load() && succeeded(hrStatus)) modules_.loaded(info_, moduleId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL) override {
        if (stop_.load() || failed(hrStatus)) return S_OK;
        ClassID cls = 0;
        ModuleID module = 0;
        mdToken token = 0;
        if (failed(info_->GetFunctionInfo(functionId, &cls, &module, &token)) || !modules_.mine(module)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        if (picked_.size() >= kMethods || !picked_.insert({module, token}).second) return S_OK;
        queue_.push_back({module, token});
        cv_.notify_one();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID module, mdMethodDef method,
                                                 ICorProfilerFunctionControl* control) override {
        HRESULT hr = give_rewritten_body(info_, module, method, control, 0x7E000000u | ++bodies_);
        if (failed(hr)) ++bodyFailures_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITCompilationFinished(FunctionID, ReJITID, HRESULT hrStatus, BOOL) override {
        (succeeded(hrStatus) ? compiled_ : compileFailures_)++;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITError(ModuleID, mdMethodDef, FunctionID, HRESULT) override {
        ++errors_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_.store(true);
            cv_.notify_all();
        }
        if (worker_.joinable()) worker_.join();
        std::fprintf(stderr, "[rejit_rewriter] requested=%lu bodies=%lu body_failures=%lu compiled=%lu "
                     "compile_failures=%lu rejit_errors=%lu\n", requested_.load(), bodies_.load(),
                     bodyFailures_.load(), compiled_.load(), compileFailures_.load(), errors_.load());
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    static constexpr size_t kMethods = 6;

    void Requests() {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_.load() || !queue_.empty(); });
            if (stop_.load()) return;
            std::vector<std::pair<ModuleID, mdMethodDef>> batch;
            batch.swap(queue_);
            lock.unlock();
            std::vector<ModuleID> modules;
            std::vector<mdMethodDef> methods;
            for (auto& [m, t] : batch) {
                modules.push_back(m);
                methods.push_back(t);
            }
            HRESULT hr = info_->RequestReJIT(ULONG(batch.size()), modules.data(), methods.data());
            if (succeeded(hr)) requested_ += batch.size();
            lock.lock();
        }
    }

    ICorProfilerInfo4* info_ = nullptr;
    AppModules modules_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::pair<ModuleID, mdMethodDef>> queue_;
    std::set<std::pair<ModuleID, mdMethodDef>> picked_;
    std::thread worker_;
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> requested_{0}, bodies_{0}, bodyFailures_{0}, compiled_{0}, compileFailures_{0},
        errors_{0};
};

}  // namespace

DOCFIX_DEFINE_PROFILER(ReJITRewriter)
