// stale_walk_frame: one fault, SSC-01: in ExceptionThrown it walks its own thread (DoStackSnapshot, thread 0)
// and keeps the first managed frame's frameInfo; after the walk returns it passes that frameInfo to
// GetFunctionInfo2. No fault: inside each StackSnapshotCallback it asks GetFunctionInfo2 with the frameInfo that
// callback was given (valid while it runs), and after the walk with 0 as the frame info.
#include "fixture.h"

using namespace fixture;

namespace {

struct Kept {
    ICorProfilerInfo2* info;
    FunctionID function = 0;
    COR_PRF_FRAME_INFO frame = 0;
};

HRESULT on_frame(FunctionID f, UINT_PTR, COR_PRF_FRAME_INFO fi, ULONG32, BYTE[], void* data) {
    auto* kept = static_cast<Kept*>(data);
    if (f == 0) return S_OK;
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken token = 0;
    ULONG32 n = 0;
    kept->info->GetFunctionInfo2(f, fi, &cls, &mod, &token, 0, &n, nullptr);  // valid: inside the callback
    if (!kept->function) {
        kept->function = f;
        kept->frame = fi;
    }
    return S_OK;
}

class StaleWalkFrame final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        Kept kept{info};
        info->DoStackSnapshot(0, &on_frame, COR_PRF_SNAPSHOT_DEFAULT, &kept, nullptr, 0);
        if (!kept.function) return S_OK;
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken token = 0;
        ULONG32 n = 0;
        info->GetFunctionInfo2(kept.function, 0, &cls, &mod, &token, 0, &n, nullptr);
        info->GetFunctionInfo2(kept.function, kept.frame, &cls, &mod, &token, 0, &n, nullptr);  // the fault
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(StaleWalkFrame)
