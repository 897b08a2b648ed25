// attach_only: a profiler that supports attach only, written the way on-demand diagnostic profilers are
// (attached to a running service by a trigger tool, e.g. through dotnet-trace or a vendor's agent). Its
// configuration comes in the trigger's client data ("modules", "threads" or both, comma-separated; empty:
// both), as ICorProfilerCallback3::InitializeForAttach hands it over. It asks only for events
// COR_PRF_ALLOWABLE_AFTER_ATTACH allows (module loads, threads, stack snapshots), counts modules and threads,
// and in ProfilerAttachComplete catches up on the threads that started before it came ("Called by the CLR to
// indicate that the profiler can now call the catch-up methods").
// Loaded at startup it declines: Initialize answers E_FAIL, since it has nothing to do without a trigger.
// No fault when attached.
#include <atomic>
#include <cstring>
#include <string>

#include "fixture.h"

using namespace fixture;

namespace {

class AttachOnly final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown*) override {
        std::fprintf(stderr, "attach_only: this profiler must be attached to a running process\n");
        return E_FAIL;  // attach-only
    }
    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown* unk, void* data, UINT cb) override {
        std::string config = data ? std::string(static_cast<const char*>(data), cb) : std::string();
        DWORD mask = COR_PRF_ENABLE_STACK_SNAPSHOT;
        if (config.empty() || config.find("modules") != std::string::npos) mask |= COR_PRF_MONITOR_MODULE_LOADS;
        if (config.empty() || config.find("threads") != std::string::npos) mask |= COR_PRF_MONITOR_THREADS;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info));
        if (hr != S_OK) return hr;
        return info->SetEventMask2(mask, 0);
    }
    HRESULT STDMETHODCALLTYPE ProfilerAttachComplete() override {
        ICorProfilerThreadEnum* threads = nullptr;  // the threads that started before the attach
        if (info->EnumThreads(&threads) == S_OK && threads) {
            ThreadID ids[16];
            ULONG fetched = 0;
            while (threads->Next(16, ids, &fetched) == S_OK && fetched > 0) threads_before_.fetch_add(fetched);
            threads->Release();
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT) override {
        modules_.fetch_add(1);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        threads_.fetch_add(1);
        return S_OK;
    }

 private:
    std::atomic<long> threads_before_{0}, modules_{0}, threads_{0};
};

}  // namespace

FIXTURE_EXPORT(AttachOnly)
