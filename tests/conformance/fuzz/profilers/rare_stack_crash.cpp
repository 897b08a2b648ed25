// rare_stack_crash: walks its own stack at every ExceptionThrown and crashes (a NULL write) on one shape
// only: exactly 7 frames with a run of native code (FunctionID 0) as the 4th.
#include "fixture.h"

using namespace fixture;

namespace {

struct Shape {
    int frames = 0;
    bool native_4th = false;
};

HRESULT on_frame(FunctionID f, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
    auto* s = static_cast<Shape*>(data);
    if (s->frames == 3 && f == 0) s->native_4th = true;
    ++s->frames;
    return S_OK;
}

class RareStackCrash final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS | COR_PRF_ENABLE_STACK_SNAPSHOT);
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        Shape s;
        info->DoStackSnapshot(0, &on_frame, COR_PRF_SNAPSHOT_DEFAULT, &s, nullptr, 0);
        if (s.frames == 7 && s.native_4th) *static_cast<volatile int*>(nullptr) = 1;
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(RareStackCrash)
