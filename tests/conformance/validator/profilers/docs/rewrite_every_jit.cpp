// rewrite_every_jit.cpp -- a ReJIT instrumentation engine that keeps its methods instrumented: every
// time the JIT compiles one of the application's own methods (JITCompilationStarted: the first
// compilation, and each later one -- a tier-1 version, an on-stack-replacement version), it asks for
// the method to be recompiled with its probe again, from a thread of its own.
//
// What it does:
//   * Initialize: QueryInterface for ICorProfilerInfo4, SetEventMask(COR_PRF_ENABLE_REJIT |
//     COR_PRF_DISABLE_ALL_NGEN_IMAGES | COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS),
//     then (the Info pointer stored first) starts its request thread.
//   * ModuleLoadFinished: remembers the modules that are not the shared framework's.
//   * JITCompilationStarted and ReJITCompilationStarted (every one: the instrumented versions are
//     compiled again at tier 1 too): GetFunctionInfo -> (module, methodDef); a method of the app's
//     modules is queued for the request thread, however often it was queued before.
//   * The request thread: RequestReJIT for what is queued; stopped and joined in Shutdown.
//   * GetReJITParameters: the original IL with a probe prologue, through the function control
//     (rejit_body.h), as rejit_rewriter.cpp does.
//   believed: allowed by the documents, and worth a look: the author read JITCompilationStarted's
//   "It is possible to receive more than one pair of JITCompilationStarted and
//   ICorProfilerCallback::JITCompilationFinished calls for each function" as "each compilation may
//   have lost the probe: request it again".  RequestReJIT's page: "If any of the specified functions
//   has previously been JIT-recompiled, requesting a recompilation is equivalent to reverting and
//   recompiling the function." -- so every tier-up or on-stack-replacement compilation of the
//   original version starts another revert-and-recompile of a method that is already instrumented.
//
// Documentation followed: as rejit_rewriter.cpp (COR_PRF_ENABLE_REJIT, RequestReJIT from a thread of
// its own, GetReJITParameters, ICorProfilerFunctionControl::SetILFunctionBody), and
// ICorProfilerCallback::JITCompilationStarted's remark above.
#include <atomic>
#include <condition_variable>
#include <thread>

#include "rejit_body.h"

using namespace rejitfix;

namespace {

class RewriteEveryJit : public CallbackBase {
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

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID functionId, BOOL) override {
        Queue(functionId);
        return S_OK;
    }

    // the recompiled versions' own compilations (a tier-1 or on-stack-replacement version of the
    // instrumented code) are JIT events too
    HRESULT STDMETHODCALLTYPE ReJITCompilationStarted(FunctionID functionId, ReJITID, BOOL) override {
        Queue(functionId);
        return S_OK;
    }

    void Queue(FunctionID functionId) {
        if (stop_.load()) return;
        ClassID cls = 0;
        ModuleID module = 0;
        mdToken token = 0;
        if (failed(info_->GetFunctionInfo(functionId, &cls, &module, &token)) || !modules_.mine(module)) return;
        std::lock_guard<std::mutex> g(mu_);
        queue_.push_back({module, token});
        cv_.notify_one();
    }

    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID module, mdMethodDef method,
                                                 ICorProfilerFunctionControl* control) override {
        if (failed(give_rewritten_body(info_, module, method, control, 0x7E200000u | ++bodies_))) ++bodyFailures_;
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
        std::fprintf(stderr, "[rewrite_every_jit] requested=%lu bodies=%lu body_failures=%lu rejit_errors=%lu\n",
                     requested_.load(), bodies_.load(), bodyFailures_.load(), errors_.load());
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
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
    std::thread worker_;
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> requested_{0}, bodies_{0}, bodyFailures_{0}, errors_{0};
};

}  // namespace

DOCFIX_DEFINE_PROFILER(RewriteEveryJit)
