// sampler_callback_lock: an allocation and CPU profiler in one. ObjectAllocated counts allocations per class;
// a wall-clock sampler of the startup thread (SIGPROF every 250 us from a POSIX timer, SIGEV_THREAD_ID)
// charges each sample to the class allocated last on it. One fault, the classic one: the handler and the
// ObjectAllocated callback share one std::mutex (the callback updates the class table under it; the handler
// updates it under it too). A signal that arrives while the callback holds the lock runs the handler on that
// same thread, whose lock call then waits for a lock its own thread holds: a self-deadlock (signal-safety(7):
// ASYNC-03; the deadlock itself ASYNC-08).
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <mutex>

#include "fixture.h"

using namespace fixture;

namespace {

std::mutex g_table_mu;
// per class: allocations and samples (open addressing; the apps it runs on load far fewer classes)
struct PerClass {
    ClassID id = 0;
    std::uint64_t allocations = 0;
    std::uint64_t samples = 0;
};
std::array<PerClass, 1 << 14> g_classes;
ClassID g_last = 0;  // the class allocated last, the samples' attribution

PerClass& slot_of(ClassID id) {
    std::size_t k = (id >> 3) % g_classes.size();
    while (g_classes[k].id != 0 && g_classes[k].id != id) k = (k + 1) % g_classes.size();
    g_classes[k].id = id;
    return g_classes[k];
}

void on_sigprof(int, siginfo_t*, void*) {
    std::lock_guard<std::mutex> lock(g_table_mu);  // the fault: ObjectAllocated holds it too
    if (g_last != 0) ++slot_of(g_last).samples;
}

class SamplerCallbackLock final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        timer_ = sample_this_thread(&on_sigprof, 250'000L);
        return take_info(unk, COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED);
    }
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID classId) override {
        std::lock_guard<std::mutex> lock(g_table_mu);
        ++slot_of(classId).allocations;
        g_last = classId;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_sampling(timer_);
        return S_OK;
    }

 private:
    timer_t timer_ = nullptr;
};

}  // namespace

FIXTURE_EXPORT(SamplerCallbackLock)
