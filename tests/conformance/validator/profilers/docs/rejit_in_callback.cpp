// rejit_in_callback.cpp -- the ReJIT instrumentation engine of rejit_rewriter.cpp, made simpler: no
// thread of its own; it asks for the recompilation right where it learns of a method, inside
// JITCompilationFinished.
//
// What it does:
//   * Initialize: QueryInterface for ICorProfilerInfo4, SetEventMask(COR_PRF_ENABLE_REJIT |
//     COR_PRF_DISABLE_ALL_NGEN_IMAGES | COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS).
//   * ModuleLoadFinished: remembers the modules that are not the shared framework's.
//   * JITCompilationFinished: GetFunctionInfo -> (module, methodDef); for the first kMethods distinct
//     methods of the app's modules, RequestReJIT(1, &module, &methodDef) at once, on the runtime's
//     thread that is delivering the callback.
//   * GetReJITParameters: the original IL with a probe prologue, through the function control
//     (rejit_body.h), as rejit_rewriter.cpp does.
//   believed: faulty (deliberately): RequestReJIT's page asks for the opposite ("the profiler should
//   call RequestReJIT from a thread it previously created, and not from a CLR-created thread that is
//   currently executing a profiler callback"; RequestReJIT "typically suspends the runtime in order to
//   do some of its work, and can potentially trigger a garbage collection").  DataDog/dd-trace-dotnet
//   #1203: a RequestReJIT made inside ModuleLoadFinished deadlocked.
//
// Documentation followed: as rejit_rewriter.cpp (COR_PRF_ENABLE_REJIT, RequestReJIT,
// GetReJITParameters, ICorProfilerFunctionControl::SetILFunctionBody), but for the thread.
#include <atomic>

#include "rejit_body.h"

using namespace rejitfix;

namespace {

class ReJITInCallback : public CallbackBase {
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
        }
        return hr;
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
        {
            std::lock_guard<std::mutex> g(mu_);
            if (picked_.size() >= kMethods || !picked_.insert({module, token}).second) return S_OK;
        }
        mdMethodDef method = token;
        HRESULT hr = info_->RequestReJIT(1, &module, &method);
        if (succeeded(hr)) ++requested_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID module, mdMethodDef method,
                                                 ICorProfilerFunctionControl* control) override {
        if (failed(give_rewritten_body(info_, module, method, control, 0x7E100000u | ++bodies_))) ++bodyFailures_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITError(ModuleID, mdMethodDef, FunctionID, HRESULT) override {
        ++errors_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_.store(true);
        std::fprintf(stderr, "[rejit_in_callback] requested=%lu bodies=%lu body_failures=%lu rejit_errors=%lu\n",
                     requested_.load(), bodies_.load(), bodyFailures_.load(), errors_.load());
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    static constexpr size_t kMethods = 6;

    ICorProfilerInfo4* info_ = nullptr;
    AppModules modules_;
    std::mutex mu_;
    std::set<std::pair<ModuleID, mdMethodDef>> picked_;
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> requested_{0}, bodies_{0}, bodyFailures_{0}, errors_{0};
};

}  // namespace

DOCFIX_DEFINE_PROFILER(ReJITInCallback)
