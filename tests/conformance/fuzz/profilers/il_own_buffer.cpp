// il_own_buffer: a JITCompilationStarted rewriter that hands SetILFunctionBody a body of its own heap (a
// std::vector kept alive), not one from the module's method allocator (REJIT-37: "Use the
// ICorProfilerInfo::GetILFunctionBodyAllocator method to allocate space for the new method to ensure that
// the buffer is compatible."). The body itself is the original one, copied: valid IL.
// PROFHARNESS_FIXTURE_ALLOCATOR=1 in the environment makes it allocate with the allocator (correct).
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "fixture.h"

using namespace fixture;

namespace {

struct MethodMalloc : public IUnknown {
    virtual void* STDMETHODCALLTYPE Alloc(ULONG cb) = 0;
};

class OwnBuffer final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        allocator_ = std::getenv("PROFHARNESS_FIXTURE_ALLOCATOR") != nullptr;
        return take_info(unk, COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS);
    }
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        if (info->GetFunctionInfo(fid, &cls, &mod, &tok) != S_OK) return S_OK;
        LPCBYTE body = nullptr;
        ULONG size = 0;
        if (info->GetILFunctionBody(mod, tok, &body, &size) != S_OK || !body || !size) return S_OK;
        BYTE* copy = nullptr;
        if (allocator_) {
            IMethodMalloc* handed = nullptr;
            if (info->GetILFunctionBodyAllocator(mod, &handed) != S_OK || !handed) return S_OK;
            auto* m = reinterpret_cast<MethodMalloc*>(handed);
            copy = static_cast<BYTE*>(m->Alloc(size));
            m->Release();
        } else {
            kept_.emplace_back(size);
            copy = kept_.back().data();
        }
        if (!copy) return S_OK;
        std::memcpy(copy, body, size);
        info->SetILFunctionBody(mod, tok, copy);
        return S_OK;
    }

 private:
    bool allocator_ = false;
    std::deque<std::vector<BYTE>> kept_;
};

}  // namespace

FIXTURE_EXPORT(OwnBuffer)
