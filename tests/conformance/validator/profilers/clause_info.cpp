// clause_info: one fault, EXC-01: GetNotifiedExceptionClauseInfo in ExceptionThrown, before any exception
// clause's Enter callback. No fault: the same call in ExceptionCatcherEnter and ExceptionCatcherLeave, in
// ExceptionUnwindFinallyEnter and ExceptionUnwindFinallyLeave (the clause about to run, or just run).
#include "fixture.h"

using namespace fixture;

namespace {

class ClauseInfo final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_EXCEPTIONS); }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        COR_PRF_EX_CLAUSE_INFO clause{};
        info->GetNotifiedExceptionClauseInfo(&clause);  // the fault
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID, ObjectID) override { return ask(); }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherLeave() override { return ask(); }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyEnter(FunctionID) override { return ask(); }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyLeave() override { return ask(); }

 private:
    HRESULT ask() {
        COR_PRF_EX_CLAUSE_INFO clause{};
        info->GetNotifiedExceptionClauseInfo(&clause);
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(ClauseInfo)
