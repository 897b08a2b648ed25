// ctor_race: one fault (seen in public profilers): the profiler's constructor starts its sampling thread
// before it stores the instance the thread uses; the thread reads the instance pointer (still NULL) and
// calls through it: a segfault outside any callback.
#include <atomic>
#include <chrono>
#include <thread>

#include "fixture.h"

using namespace fixture;

namespace {

class CtorRace;
CtorRace* volatile g_instance = nullptr;
std::atomic<bool> g_started{false};

class CtorRace final : public Profiler<Callbacks11, 11> {
 public:
    CtorRace() {
        std::thread([] {
            g_started.store(true);
            g_instance->sample();  // the fault: g_instance is stored at the end of the constructor
        }).detach();
        // the rest of the construction (it takes longer than the thread needs to start)
        for (int k = 0; k < 1000 && !g_started.load(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        g_instance = this;
    }
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override { return take_info(unk, COR_PRF_MONITOR_THREADS); }
    __attribute__((noinline)) void sample() { samples_.fetch_add(1); }

 private:
    std::atomic<unsigned long> samples_{0};
};

}  // namespace

FIXTURE_EXPORT(CtorRace)
