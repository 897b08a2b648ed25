// walkq_naive: a SIGPROF sampler walking the interrupted thread from its handler (walkq_sampler.h), seeded
// with the interrupted registers as they are (the ucontext as a CONTEXT), whatever code the thread was in:
// the naive seed of dotnet/coreclr#25676. Issue 24 part 4's fixture for `validate --walk-quality`.
#include "walkq_sampler.h"

namespace {

struct NaiveSeed {
    static constexpr const char* kName = "walkq_naive";
    static bool seed(const ucontext_t* uc, profharness::BYTE* ctx) {
        walkq::context_of(uc, ctx);
        return true;
    }
};

}  // namespace

FIXTURE_EXPORT(walkq::SignalWalker<NaiveSeed>)
