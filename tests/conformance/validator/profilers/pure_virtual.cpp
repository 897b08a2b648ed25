// pure_virtual: one fault: the first GarbageCollectionFinished calls a pure virtual function, what g++ makes
// of a call through an interface it has devirtualized to a class no object implements (an IMetaDataImport
// extension declared in an anonymous namespace): __cxa_pure_virtual, whose last call, to std::terminate,
// never returns (SIGABRT; "pure virtual method called").
#include "fixture.h"

extern "C" void __cxa_pure_virtual();  // the C++ ABI's (libstdc++)

using namespace fixture;

namespace {

class PureVirtual final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_GC); }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        __cxa_pure_virtual();  // the fault
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(PureVirtual)
