// rewrite_each_jit: an IL rewriter (issue 21, part 5) that replaces the IL of every method of the app's own
// module in JITCompilationStarted (an identity rewrite: the body copied into the runtime's allocator and set
// with SetILFunctionBody). Its fault: it keeps the original body of a method until its first rewrite and
// frees it there, assuming JITCompilationStarted comes once per FunctionID; a recompilation (tier-up, OSR:
// the runtime starts another JIT compilation for the same FunctionID) finds the freed slot and dereferences
// it: a crash inside the profiler's JITCompilationStarted, on a workload whose methods are recompiled only.
// With REWRITE_EACH_JIT_KEEP=1 in its environment it keeps the originals: the correct rewriter.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fixture.h"

using namespace fixture;

namespace {

// IMethodMalloc (corprof.idl): IUnknown, then Alloc.
struct MethodMalloc : IUnknown {
    virtual void* STDMETHODCALLTYPE Alloc(ULONG cb) = 0;
};

struct Original {
    unsigned char* bytes;  // freed (nullptr) once the method was rewritten
    ULONG size;
};

class RewriteEachJit final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        const char* keep = std::getenv("REWRITE_EACH_JIT_KEEP");
        keep_ = keep && std::strcmp(keep, "1") == 0;
        return take_info(unk, COR_PRF_MONITOR_JIT_COMPILATION);
    }
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID f, BOOL) override {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken token = 0;
        if (info->GetFunctionInfo(f, &cls, &mod, &token) != S_OK || !is_app(mod)) return S_OK;
        LPCBYTE body = nullptr;
        ULONG size = 0;
        if (info->GetILFunctionBody(mod, token, &body, &size) != S_OK || !body || !size) return S_OK;
        Original* original = nullptr;
        {
            std::lock_guard<std::mutex> lock(mu_);  // never held across a call into the runtime
            auto found = originals_.find(f);
            if (found == originals_.end()) {  // first compilation: keep the original body
                auto* copy = new unsigned char[size];
                std::memcpy(copy, body, size);
                found = originals_.emplace(f, Original{copy, size}).first;
            }
            original = &found->second;  // unordered_map nodes stay put
        }
        IUnknown* unk = nullptr;
        if (info->GetILFunctionBodyAllocator(mod, reinterpret_cast<IMethodMalloc**>(&unk)) != S_OK || !unk)
            return S_OK;
        auto* malloc = static_cast<MethodMalloc*>(unk);
        auto* fresh = static_cast<unsigned char*>(malloc->Alloc(original->size));
        if (fresh) {
            std::memcpy(fresh, original->bytes, original->size);  // the fault: null the second time
            info->SetILFunctionBody(mod, token, fresh);
        }
        malloc->Release();
        if (!keep_) {
            std::lock_guard<std::mutex> lock(mu_);
            delete[] original->bytes;  // "rewritten once: the original is not needed any more"
            original->bytes = nullptr;
        }
        return S_OK;
    }

 private:
    bool is_app(ModuleID mod) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto known = app_.find(mod);
            if (known != app_.end()) return known->second;
        }
        WCHAR name[512];
        ULONG n = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        bool app = false;
        if (info->GetModuleInfo(mod, &base, 512, &n, name, &assembly) == S_OK && n > 0) {
            std::u16string path(reinterpret_cast<const char16_t*>(name), n - 1);
            app = path.size() >= 8 && path.compare(path.size() - 8, 8, u"/app.dll") == 0;
        }
        std::lock_guard<std::mutex> lock(mu_);
        app_[mod] = app;
        return app;
    }

    std::mutex mu_;  // JITCompilationStarted comes on any thread
    std::unordered_map<FunctionID, Original> originals_;
    std::unordered_map<ModuleID, bool> app_;
    bool keep_ = false;
};

}  // namespace

FIXTURE_EXPORT(RewriteEachJit)
