// The plumbing every fixture profiler shares: COM identity (QueryInterface up to the callback level the
// fixture's base class implements), the ICorProfilerInfo10 it keeps, and the class factory export (the
// harness's own ClassFactory, profharness/class_factory.h: boilerplate, not what the fixtures test).
// A fixture derives from fixture::Profiler<CallbacksN> (callbacks.h: every callback a do-nothing S_OK) and
// overrides only what its one fault needs. Written for the validator's tests; not the probe's code.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "callbacks.h"
#include "profharness/class_factory.h"
#include "profharness/flags.h"
#include "profharness/hresults.h"

namespace fixture {

using namespace profharness;

// tests/conformance/validator/fixtures.py FIXTURE_CLSID
inline constexpr GUID kFixtureClsid = {0x6D1B2C3A, 0x4E5F, 0x4A6B, {0x8C, 0x7D, 0x9E, 0x0F, 0x1A, 0x2B, 0x3C, 0x4D}};

inline const GUID* callback_iids[] = {nullptr, &IID_ICorProfilerCallback, &IID_ICorProfilerCallback2,
                                      &IID_ICorProfilerCallback3, &IID_ICorProfilerCallback4,
                                      &IID_ICorProfilerCallback5, &IID_ICorProfilerCallback6,
                                      &IID_ICorProfilerCallback7, &IID_ICorProfilerCallback8,
                                      &IID_ICorProfilerCallback9, &IID_ICorProfilerCallback10,
                                      &IID_ICorProfilerCallback11};

template <typename Base, int Level>
class Profiler : public Base {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        bool ok = riid == IID_IUnknown;
        for (int k = 1; k <= Level && !ok; ++k) ok = riid == *callback_iids[k];
        if (!ok) return E_NOINTERFACE;
        *ppv = static_cast<Base*>(this);
        AddRef();
        return S_OK;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override { return --refs_; }  // fixtures live as long as the process

 protected:
    // QueryInterface for ICorProfilerInfo10 (both bundled runtimes have it) and set the event mask.
    HRESULT take_info(IUnknown* unk, DWORD mask, DWORD high = 0) {
        unk_ = unk;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info));
        if (hr != S_OK) return hr;
        return info->SetEventMask2(mask, high);
    }
    ICorProfilerInfo10* info = nullptr;
    IUnknown* unk_ = nullptr;

 private:
    std::atomic<ULONG> refs_{0};
};

// The samplers' clock: `handler` installed for SIGPROF (SA_SIGINFO | SA_RESTART) and a POSIX timer that sends
// SIGPROF to the calling thread (SIGEV_THREAD_ID) every `interval_ns` of wall-clock time (CLOCK_MONOTONIC);
// nullptr when the timer could not be made.
inline timer_t sample_this_thread(void (*handler)(int, siginfo_t*, void*), long interval_ns) {
    struct sigaction sa = {};
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, nullptr);
    struct sigevent sev = {};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    timer_t timer = nullptr;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) return nullptr;
    const struct timespec every = {interval_ns / 1000000000L, interval_ns % 1000000000L};
    const struct itimerspec spec = {every, every};
    timer_settime(timer, 0, &spec, nullptr);
    return timer;
}

// The sampling's end (Shutdown): the timer deleted, SIGPROF ignored from then on.
inline void stop_sampling(timer_t timer) {
    if (timer) timer_delete(timer);
    signal(SIGPROF, SIG_IGN);
}

// A new fixture object for the runtime, made by the class factory (profharness/class_factory.h).
template <typename P>
HRESULT create(REFIID riid, void** ppv) {
    return (new P())->QueryInterface(riid, ppv);
}

}  // namespace fixture

#define FIXTURE_EXPORT(P)                                                                              \
    extern "C" __attribute__((visibility("default"))) profharness::HRESULT DllGetClassObject(           \
        const profharness::GUID& clsid, const profharness::GUID& riid, void** ppv) {                  \
        return profharness::class_object<fixture::create<P>>(&fixture::kFixtureClsid, clsid, riid, ppv); \
    }
