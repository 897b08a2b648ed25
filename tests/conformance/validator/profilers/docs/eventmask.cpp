// eventmask.cpp -- an "on-demand" profiler: features are switched on and off while the app runs,
// the way an APM agent reacts to a remote-configuration change.
//
// What it does
//   * Initialize: QueryInterfaces for ICorProfilerInfo5 (falls back to ICorProfilerInfo and the
//     low 32 bits only if Info5 is missing), then sets, once, everything that can only be set at
//     startup, plus the features of the first window:
//       - COR_PRF_MONITOR_MODULE_LOADS (baseline, always on: module inventory),
//       - COR_PRF_ENABLE_OBJECT_ALLOCATED (immutable; pre-authorises the on-demand "alloc" feature,
//         i.e. COR_PRF_MONITOR_OBJECT_ALLOCATED, which is then toggled like the others). Turned off
//         with PROFILER_EVENTMASK_ALLOC=0, in which case "alloc" is never switched on.
//   * A controller thread of its own (a plain native thread) walks a schedule of feature sets
//     ("config revisions"), one per window (PROFILER_EVENTMASK_WINDOW_MS, default 400 ms;
//     schedule PROFILER_EVENTMASK_SCHEDULE, default below).  At each window boundary it closes the
//     window (prints what was counted) and switches features with a read-modify-write of the mask:
//     GetEventMask2 -> clear/set only the on-demand bits -> SetEventMask2 -> GetEventMask2 to verify.
//     Features being switched off are removed in one call; features being switched on are added one
//     at a time, so that a runtime refusal (e.g. COR_PRF_MONITOR_GC while a GC is in progress) is
//     attributed to that feature only.  Transient refusals are retried; a feature the runtime keeps
//     refusing is dropped.  Immutable bits are never part of a change.
//   * Features (bit -> callbacks counted):
//       gc         COR_PRF_HIGH_BASIC_GC (high word)   GarbageCollectionStarted/Finished (gen2 noted)
//       heap       COR_PRF_MONITOR_GC                   MovedReferences2, SurvivingReferences2,
//                                                        RootReferences2, FinalizeableObjectQueued,
//                                                        HandleCreated/Destroyed (+ GC start/finish)
//       exceptions COR_PRF_MONITOR_EXCEPTIONS           ExceptionThrown, ExceptionCatcherEnter
//       threads    COR_PRF_MONITOR_THREADS              ThreadCreated/Destroyed/NameChanged
//       classes    COR_PRF_MONITOR_CLASS_LOADS          ClassLoadFinished (ok), ClassUnloadFinished
//       jit        COR_PRF_MONITOR_JIT_COMPILATION      JITCompilationFinished (ok)
//       alloc      COR_PRF_MONITOR_OBJECT_ALLOCATED     ObjectAllocated
//     "heap" (COR_PRF_MONITOR_GC) can only be switched on later if it was on at startup (schedule
//     entry 0): "Garbage Collection in the Profiling API" says "Note that when the COR_PRF_MONITOR_GC
//     flag is enabled, concurrent garbage collection is turned off.", and both runtimes refuse to
//     turn it on after a startup without it (0x80131376); the controller then drops the feature.
//     A callback whose feature is not active in the profiler's own view (one already in flight
//     when the bit was cleared) is counted as "late" instead of being attributed to the window.
//   * Shutdown: stops the controller WITHOUT any further ICorProfilerInfo call (the controller
//     makes every Info call while holding a mutex that Shutdown takes before setting the stop flag,
//     so no call can start after Shutdown was entered), joins it, prints the last window and the
//     totals, and releases the info pointer.  Callbacks after Shutdown return immediately.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize: "The Initialize call is the only opportunity to enable (or
//     disable) callbacks that are immutable. Once a callback is enabled by the Initialize call, it
//     cannot be disabled later using ICorProfilerInfo::SetEventMask. The COR_PRF_MONITOR_IMMUTABLE
//     value of the COR_PRF_MONITOR enumeration indicates which events are immutable."
//     -> COR_PRF_ENABLE_OBJECT_ALLOCATED (part of COR_PRF_MONITOR_IMMUTABLE) is set only there; the
//        controller's changes are masked so that no bit of COR_PRF_MONITOR_IMMUTABLE /
//        COR_PRF_HIGH_MONITOR_IMMUTABLE ever changes after Initialize.
//   * COR_PRF_HIGH_MONITOR enumeration: "COR_PRF_HIGH_MONITOR_IMMUTABLE =
//     COR_PRF_HIGH_DISABLE_TIERED_COMPILATION"; "COR_PRF_HIGH_ALLOWABLE_AFTER_ATTACH =
//     COR_PRF_HIGH_IN_MEMORY_SYMBOLS_UPDATED | COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS |
//     COR_PRF_HIGH_BASIC_GC | COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS |
//     COR_PRF_HIGH_MONITOR_LARGEOBJECT_ALLOCATED"; COR_PRF_HIGH_BASIC_GC: ".NET Core 3.0 and later
//     versions only: Provides a lightweight GC profiling option compared to COR_PRF_MONITOR_GC."
//     -> the only high bit toggled is COR_PRF_HIGH_BASIC_GC, a non-immutable one.
//   * ICorProfilerInfo5::SetEventMask2: "Typically, you call the GetEventMask2 method to determine
//     which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh values and any
//     new bits you want to set, and then call the SetEventMask2 method." and "This method is the
//     recommended alternative to the SetEventMask method."
//   * ICorProfilerInfo5::GetEventMask2: "The GetEventMask2 method is used to determine which
//     callbacks the profiler has subscribed to."
//   * ICorProfilerInfo::SetEventMask: "You should call the SetEventMask2 method instead of this
//     method." (SetEventMask/GetEventMask are used only when ICorProfilerInfo5 is unavailable.)
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." and "Certain immutable
//     events may still occur after shutdown; the profiler should take care to return immediately
//     when this occurs."
//   * Notification threads: "these callbacks are not serialized. Users must protect their code by
//     creating thread-safe data structures" -> every counter is atomic.
//   * ICorProfilerCallback2::GarbageCollectionStarted: generationCollected is "An array of Boolean
//     values, which are true if the generation that corresponds to the array index is being
//     collected" with cGenerations "The total number of entries in the generationCollected array"
//     -> index 2 is read only when cGenerations > 2.
//   * ICorProfilerCallback::ObjectAllocated: "The ObjectedAllocated method is not called for
//     allocations from either the stack or unmanaged memory." (only a count is kept).
//
// Interfaces/constants not in the kit headers, declared here from corprof.idl facts:
//   COR_PRF_MONITOR_IMMUTABLE (0xEEF8CC00) and COR_PRF_HIGH_MONITOR_IMMUTABLE
//   (= COR_PRF_HIGH_DISABLE_TIERED_COMPILATION).
//
// Environment: PROFILER_EVENTMASK_WINDOW_MS (50..60000, default 400),
//   PROFILER_EVENTMASK_SCHEDULE (";"-separated windows of ","-separated feature names, "-" or empty
//   = nothing on-demand; cycled), PROFILER_EVENTMASK_ALLOC (0 disables the alloc pre-authorisation).
#include "common.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using namespace docfix;

namespace {

// corprof.idl: COR_PRF_MONITOR_IMMUTABLE = COR_PRF_MONITOR_CODE_TRANSITIONS |
// COR_PRF_MONITOR_REMOTING | COR_PRF_MONITOR_REMOTING_COOKIE | COR_PRF_MONITOR_REMOTING_ASYNC |
// COR_PRF_ENABLE_INPROC_DEBUGGING | COR_PRF_ENABLE_JIT_MAPS | COR_PRF_DISABLE_OPTIMIZATIONS |
// COR_PRF_DISABLE_INLINING | COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_ENABLE_FUNCTION_ARGS |
// COR_PRF_ENABLE_FUNCTION_RETVAL | COR_PRF_ENABLE_FRAME_INFO | COR_PRF_USE_PROFILE_IMAGES |
// COR_PRF_DISABLE_TRANSPARENCY_CHECKS_UNDER_FULL_TRUST | COR_PRF_DISABLE_ALL_NGEN_IMAGES
constexpr DWORD kMonitorImmutable = 0xEEF8CC00u;
constexpr DWORD kHighMonitorImmutable = COR_PRF_HIGH_DISABLE_TIERED_COMPILATION;
// corerror.h: CORPROF_E_CONCURRENT_GC_NOT_PROFILABLE (not in the kit's hresults.h).  What both
// runtimes answer when COR_PRF_MONITOR_GC is switched on after a startup that did not set it.
constexpr HRESULT kConcurrentGcNotProfilable = static_cast<HRESULT>(0x80131376u);

enum Feature : int { F_GC, F_HEAP, F_EXC, F_THREADS, F_CLASSES, F_JIT, F_ALLOC, F_COUNT };

struct FeatureDef {
    const char* name;
    DWORD low;
    DWORD high;
};

constexpr FeatureDef kFeatures[F_COUNT] = {
    {"gc", 0, COR_PRF_HIGH_BASIC_GC},
    {"heap", COR_PRF_MONITOR_GC, 0},
    {"exceptions", COR_PRF_MONITOR_EXCEPTIONS, 0},
    {"threads", COR_PRF_MONITOR_THREADS, 0},
    {"classes", COR_PRF_MONITOR_CLASS_LOADS, 0},
    {"jit", COR_PRF_MONITOR_JIT_COMPILATION, 0},
    {"alloc", COR_PRF_MONITOR_OBJECT_ALLOCATED, 0},
};

constexpr DWORD onDemandLow() {
    DWORD m = 0;
    for (const auto& f : kFeatures) m |= f.low;
    return m;
}
constexpr DWORD onDemandHigh() {
    DWORD m = 0;
    for (const auto& f : kFeatures) m |= f.high;
    return m;
}
constexpr DWORD kOnDemandLow = onDemandLow();
constexpr DWORD kOnDemandHigh = onDemandHigh();
static_assert((kOnDemandLow & kMonitorImmutable) == 0, "an on-demand bit is immutable");
static_assert((kOnDemandHigh & kHighMonitorImmutable) == 0, "an on-demand high bit is immutable");

constexpr DWORD kBaselineLow = COR_PRF_MONITOR_MODULE_LOADS;

const char* kDefaultSchedule = "gc,threads,classes;jit,exceptions;heap;alloc,gc;-;classes,jit,gc,heap";

using Clock = std::chrono::steady_clock;

std::string featureNames(unsigned set) {
    std::string s;
    for (int i = 0; i < F_COUNT; ++i)
        if (set & (1u << i)) {
            if (!s.empty()) s += ',';
            s += kFeatures[i].name;
        }
    return s.empty() ? std::string("-") : s;
}

// Counters of one kind of event.  "events" is what the window line shows for a feature.
struct Counters {
    std::atomic<unsigned long long> gcStarts{0}, gcFinishes{0}, gen2{0};
    std::atomic<unsigned long long> heapEvents{0};
    std::atomic<unsigned long long> thrown{0}, caught{0};
    std::atomic<unsigned long long> threadsCreated{0}, threadsDestroyed{0}, threadNames{0};
    std::atomic<unsigned long long> classes{0}, classUnloads{0};
    std::atomic<unsigned long long> jitted{0};
    std::atomic<unsigned long long> allocs{0};
    std::atomic<unsigned long long> late{0};
};

struct Snapshot {
    unsigned long long gcStarts, gcFinishes, gen2, heapEvents, thrown, caught, threadsCreated,
        threadsDestroyed, threadNames, classes, classUnloads, jitted, allocs, late;
    void addTo(Snapshot& t) const {
        t.gcStarts += gcStarts; t.gcFinishes += gcFinishes; t.gen2 += gen2; t.heapEvents += heapEvents;
        t.thrown += thrown; t.caught += caught; t.threadsCreated += threadsCreated;
        t.threadsDestroyed += threadsDestroyed; t.threadNames += threadNames; t.classes += classes;
        t.classUnloads += classUnloads; t.jitted += jitted; t.allocs += allocs; t.late += late;
    }
};

Snapshot takeAndReset(Counters& c) {
    Snapshot s{};
    s.gcStarts = c.gcStarts.exchange(0);
    s.gcFinishes = c.gcFinishes.exchange(0);
    s.gen2 = c.gen2.exchange(0);
    s.heapEvents = c.heapEvents.exchange(0);
    s.thrown = c.thrown.exchange(0);
    s.caught = c.caught.exchange(0);
    s.threadsCreated = c.threadsCreated.exchange(0);
    s.threadsDestroyed = c.threadsDestroyed.exchange(0);
    s.threadNames = c.threadNames.exchange(0);
    s.classes = c.classes.exchange(0);
    s.classUnloads = c.classUnloads.exchange(0);
    s.jitted = c.jitted.exchange(0);
    s.allocs = c.allocs.exchange(0);
    s.late = c.late.exchange(0);
    return s;
}

bool isTransient(HRESULT hr) {
    // GC in progress / runtime not started yet: the same request may succeed a moment later.
    return hr == CORPROF_E_UNSUPPORTED_CALL_SEQUENCE || hr == CORPROF_E_RUNTIME_UNINITIALIZED ||
           hr == CORPROF_E_NOT_YET_AVAILABLE;
}

}  // namespace

class OnDemandProfiler : public CallbackBase {
public:
    // ------------------------------------------------------------------------------------------
    // Startup
    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info5_));
        if (succeeded(hr) && info5_ != nullptr) {
            info_ = info5_;  // same object; released once, through info5_
        } else {
            info5_ = nullptr;
            hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
            if (failed(hr) || info_ == nullptr) {
                std::fprintf(stderr, "[eventmask] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
                info_ = nullptr;
                return E_FAIL;
            }
        }

        readConfig();

        // Everything that must be decided at startup, plus the first window's features.
        DWORD lo = 0, hi = 0;
        hr = getMask(&lo, &hi);
        if (failed(hr)) {
            std::fprintf(stderr, "[eventmask] GetEventMask failed 0x%08x\n", (unsigned)hr);
            releaseInfo();
            return E_FAIL;
        }
        lo |= kBaselineLow;
        if (allocPreauthorized_) lo |= COR_PRF_ENABLE_OBJECT_ALLOCATED;  // immutable: only here
        unsigned first = usable(schedule_.empty() ? 0u : schedule_[0]);
        for (int i = 0; i < F_COUNT; ++i)
            if (first & (1u << i)) {
                lo |= kFeatures[i].low;
                hi |= kFeatures[i].high;
            }
        active_.store(first);  // before the mask: a first callback must find its feature active
        hr = setMask(lo, hi);
        if (failed(hr) && allocPreauthorized_) {
            // Retry without the allocation pre-authorisation: the agent still works without it.
            std::fprintf(stderr, "[eventmask] startup mask 0x%08x/0x%08x refused (0x%08x); retrying without alloc\n",
                         (unsigned)lo, (unsigned)hi, (unsigned)hr);
            allocPreauthorized_ = false;
            first &= ~(1u << F_ALLOC);
            lo &= ~(COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_OBJECT_ALLOCATED);
            active_.store(first);
            hr = setMask(lo, hi);
        }
        if (failed(hr)) {
            std::fprintf(stderr, "[eventmask] SetEventMask failed 0x%08x\n", (unsigned)hr);
            active_.store(0);
            releaseInfo();
            return E_FAIL;
        }
        DWORD vlo = 0, vhi = 0;
        if (succeeded(getMask(&vlo, &vhi))) {
            lo = vlo;
            hi = vhi;
        }
        lastLo_ = lo;
        lastHi_ = hi;
        windowStart_ = Clock::now();
        std::fprintf(stderr,
                     "[eventmask] initialized (Info%s): startup mask 0x%08x/0x%08x, alloc %s, window %u ms, "
                     "%zu schedule entries, w0 on=%s\n",
                     info5_ ? "5" : "1", (unsigned)lo, (unsigned)hi,
                     allocPreauthorized_ ? "pre-authorised" : "off", windowMs_, schedule_.size(),
                     featureNames(first).c_str());

        try {
            controller_ = std::thread([this] { controllerMain(); });
            controllerStarted_ = true;
        } catch (...) {
            std::fprintf(stderr, "[eventmask] could not start the controller thread; features stay as they are\n");
        }
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    // Shutdown
    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            // Taking mu_ waits for an Info call the controller may have in flight; after stopping_
            // is set under mu_ the controller makes no further Info call.
            std::lock_guard<std::mutex> lk(mu_);
            stopping_ = true;
        }
        shutdown_.store(true);
        cv_.notify_all();
        if (controllerStarted_ && controller_.joinable()) controller_.join();

        // Last (partial) window: counted, not switched.  No ICorProfilerInfo call from here on.
        closeWindow("final");
        std::fprintf(stderr,
                     "[eventmask] shutdown: windows=%u switches=%u refused=%u dropped=%s modules=%llu | "
                     "gc=%llu/%llu(gen2 %llu) heap=%llu exc=%llu/%llu thr=+%llu/-%llu cls=%llu jit=%llu "
                     "alloc=%llu late=%llu\n",
                     windows_, switches_, refusals_, featureNames(dropped_).c_str(), modules_.load(),
                     total_.gcStarts, total_.gcFinishes, total_.gen2, total_.heapEvents, total_.thrown,
                     total_.caught, total_.threadsCreated, total_.threadsDestroyed, total_.classes,
                     total_.jitted, total_.allocs, total_.late);
        releaseInfo();
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    // Notifications (counted only; every one returns at once after Shutdown)
    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT hrStatus) override {
        if (!shutdown_.load(std::memory_order_relaxed) && succeeded(hrStatus)) ++modules_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON) override {
        if (!countGc()) return S_OK;
        ++c_.gcStarts;
        if (generationCollected != nullptr && cGenerations > 2 && generationCollected[2]) ++c_.gen2;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (countGc()) ++c_.gcFinishes;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG, ObjectID*, ObjectID*, SIZE_T*) override { return heap(); }
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG, ObjectID*, SIZE_T*) override { return heap(); }
    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG, ObjectID*, COR_PRF_GC_ROOT_KIND*, COR_PRF_GC_ROOT_FLAGS*,
                                              UINT_PTR*) override { return heap(); }
    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD, ObjectID) override { return heap(); }
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID, ObjectID) override { return heap(); }
    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID) override { return heap(); }

    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        if (count(F_EXC)) ++c_.thrown;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID, ObjectID) override {
        if (count(F_EXC)) ++c_.caught;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        if (count(F_THREADS)) ++c_.threadsCreated;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID) override {
        if (count(F_THREADS)) ++c_.threadsDestroyed;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID, ULONG, WCHAR*) override {
        if (count(F_THREADS)) ++c_.threadNames;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID, HRESULT hrStatus) override {
        if (count(F_CLASSES) && succeeded(hrStatus)) ++c_.classes;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ClassUnloadFinished(ClassID, HRESULT) override {
        if (count(F_CLASSES)) ++c_.classUnloads;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID, HRESULT hrStatus, BOOL) override {
        if (count(F_JIT) && succeeded(hrStatus)) ++c_.jitted;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID) override {
        if (count(F_ALLOC)) ++c_.allocs;
        return S_OK;
    }

private:
    // ---- mask access (Info5 when present, else the ICorProfilerInfo pair for the low word) ----
    HRESULT getMask(DWORD* lo, DWORD* hi) {
        if (info5_ != nullptr) return info5_->GetEventMask2(lo, hi);
        *hi = 0;
        return info_->GetEventMask(lo);
    }
    HRESULT setMask(DWORD lo, DWORD hi) {
        if (info5_ != nullptr) return info5_->SetEventMask2(lo, hi);
        if (hi != 0) return E_INVALIDARG;  // cannot express high bits without Info5
        return info_->SetEventMask(lo);
    }

    void releaseInfo() {
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        info5_ = nullptr;
    }

    // ---- counting helpers ----
    bool count(Feature f) {
        if (shutdown_.load(std::memory_order_relaxed)) return false;
        if (active_.load(std::memory_order_relaxed) & (1u << f)) return true;
        ++c_.late;
        return false;
    }
    bool countGc() {
        if (shutdown_.load(std::memory_order_relaxed)) return false;
        if (active_.load(std::memory_order_relaxed) & ((1u << F_GC) | (1u << F_HEAP))) return true;
        ++c_.late;
        return false;
    }
    HRESULT heap() {
        if (count(F_HEAP)) ++c_.heapEvents;
        return S_OK;
    }

    // Features the runtime can be asked for in this process.
    unsigned usable(unsigned set) const {
        if (!allocPreauthorized_) set &= ~(1u << F_ALLOC);
        if (info5_ == nullptr) set &= ~(1u << F_GC);  // high word needs SetEventMask2
        return set & ~dropped_;
    }

    // ---- configuration ----
    void readConfig() {
        if (const char* w = std::getenv("PROFILER_EVENTMASK_WINDOW_MS")) {
            long v = std::strtol(w, nullptr, 10);
            if (v >= 50 && v <= 60000) windowMs_ = static_cast<unsigned>(v);
        }
        if (const char* a = std::getenv("PROFILER_EVENTMASK_ALLOC")) allocPreauthorized_ = std::strcmp(a, "0") != 0;
        const char* s = std::getenv("PROFILER_EVENTMASK_SCHEDULE");
        std::string text = (s != nullptr && *s != 0) ? s : kDefaultSchedule;
        unsigned cur = 0;
        std::string word;
        auto flushWord = [&] {
            if (word.empty() || word == "-") {
                word.clear();
                return;
            }
            bool known = false;
            for (int i = 0; i < F_COUNT; ++i)
                if (word == kFeatures[i].name) {
                    cur |= 1u << i;
                    known = true;
                }
            if (!known) std::fprintf(stderr, "[eventmask] unknown feature '%s' ignored\n", word.c_str());
            word.clear();
        };
        for (char ch : text) {
            if (ch == ',') {
                flushWord();
            } else if (ch == ';') {
                flushWord();
                schedule_.push_back(cur);
                cur = 0;
            } else if (ch != ' ') {
                word += ch;
            }
        }
        flushWord();
        schedule_.push_back(cur);
    }

    // ---- controller thread ----
    void controllerMain() {
        std::unique_lock<std::mutex> lk(mu_);
        size_t next = 1;
        while (!stopping_) {
            cv_.wait_until(lk, windowStart_ + std::chrono::milliseconds(windowMs_), [this] { return stopping_; });
            if (stopping_) break;
            closeWindow(nullptr);
            unsigned want = usable(schedule_.empty() ? 0u : schedule_[next % schedule_.size()]);
            ++next;
            applyFeatures(lk, want);
            windowStart_ = Clock::now();
        }
    }

    // Prints the window that is ending.  Runs on the controller (under mu_) or in Shutdown after
    // the controller has been joined; touches no ICorProfilerInfo method.
    void closeWindow(const char* tag) {
        Snapshot s = takeAndReset(c_);
        s.addTo(total_);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - windowStart_).count();
        std::fprintf(stderr,
                     "[eventmask] w%u%s%s %lldms on=%s mask=0x%08x/0x%08x | gc=%llu/%llu heap=%llu exc=%llu "
                     "thr=+%llu/-%llu cls=%llu jit=%llu alloc=%llu late=%llu\n",
                     windows_, tag ? " " : "", tag ? tag : "", (long long)ms, featureNames(active_.load()).c_str(),
                     (unsigned)lastLo_, (unsigned)lastHi_, s.gcStarts, s.gcFinishes, s.heapEvents, s.thrown,
                     s.threadsCreated, s.threadsDestroyed, s.classes, s.jitted, s.allocs, s.late);
        ++windows_;
    }

    // One read-modify-write of the on-demand bits.  Called with mu_ held; may wait (releasing mu_)
    // between retries.  Returns the HRESULT of SetEventMask2 (or of GetEventMask2 if that failed).
    HRESULT changeBits(unsigned keepSet, unsigned newSet) {
        DWORD lo = 0, hi = 0;
        HRESULT hr = getMask(&lo, &hi);
        if (failed(hr)) return hr;
        DWORD wantLo = 0, wantHi = 0;
        for (int i = 0; i < F_COUNT; ++i)
            if ((keepSet | newSet) & (1u << i)) {
                wantLo |= kFeatures[i].low;
                wantHi |= kFeatures[i].high;
            }
        DWORD newLo = (lo & ~kOnDemandLow) | wantLo;
        DWORD newHi = (hi & ~kOnDemandHigh) | wantHi;
        if (((newLo ^ lo) & kMonitorImmutable) != 0 || ((newHi ^ hi) & kHighMonitorImmutable) != 0) return E_UNEXPECTED;
        if (newLo == lo && newHi == hi) return S_FALSE;
        const unsigned before = active_.load();
        // Count a newly enabled feature from the first callback on; keep counting a disabled one
        // as "late" only after the runtime has accepted the change.
        if (newSet & ~keepSet) active_.fetch_or(newSet);
        hr = setMask(newLo, newHi);
        if (failed(hr)) {
            active_.store(before);
            return hr;
        }
        active_.store(keepSet | newSet);
        ++switches_;
        DWORD vlo = 0, vhi = 0;
        if (succeeded(getMask(&vlo, &vhi))) {
            lastLo_ = vlo;
            lastHi_ = vhi;
            if ((vlo & kOnDemandLow) != wantLo || (vhi & kOnDemandHigh) != wantHi)
                std::fprintf(stderr, "[eventmask] note: mask after set is 0x%08x/0x%08x, asked 0x%08x/0x%08x\n",
                             (unsigned)vlo, (unsigned)vhi, (unsigned)newLo, (unsigned)newHi);
        }
        return hr;
    }

    void applyFeatures(std::unique_lock<std::mutex>& lk, unsigned want) {
        unsigned have = active_.load();
        // 1) everything that goes off, in one call
        unsigned keep = have & want;
        if (keep != have) {
            HRESULT hr = changeBits(keep, 0);
            if (failed(hr)) {
                ++refusals_;
                std::fprintf(stderr, "[eventmask] switching off %s refused 0x%08x\n",
                             featureNames(have & ~want).c_str(), (unsigned)hr);
                return;  // keep the previous state; try again next window
            }
        }
        // 2) everything that goes on, one feature at a time
        for (int i = 0; i < F_COUNT && !stopping_; ++i) {
            unsigned bit = 1u << i;
            if (!(want & bit) || (active_.load() & bit)) continue;
            HRESULT hr = E_FAIL;
            for (int attempt = 0; attempt < 4 && !stopping_; ++attempt) {
                hr = changeBits(active_.load(), bit);
                if (succeeded(hr) || !isTransient(hr)) break;
                // e.g. a GC in progress: wait a little, letting Shutdown in if it comes
                cv_.wait_for(lk, std::chrono::milliseconds(25), [this] { return stopping_; });
            }
            if (failed(hr)) {
                ++refusals_;
                // Concurrent GC is on (COR_PRF_MONITOR_GC was not requested at startup): this will
                // not change while the process runs, so the feature is dropped at once.
                if (hr == kConcurrentGcNotProfilable) dropped_ |= bit;
                else if (!isTransient(hr) && ++failures_[i] >= 2) dropped_ |= bit;
                std::fprintf(stderr, "[eventmask] switching on %s refused 0x%08x%s%s\n", kFeatures[i].name,
                             (unsigned)hr, hr == kConcurrentGcNotProfilable ? " (concurrent GC is on)" : "",
                             (dropped_ & bit) ? " (dropped)" : "");
            }
        }
    }

    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo5* info5_ = nullptr;

    // configuration
    unsigned windowMs_ = 400;
    bool allocPreauthorized_ = true;
    std::vector<unsigned> schedule_;

    // controller state (mu_)
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    std::thread controller_;
    bool controllerStarted_ = false;
    Clock::time_point windowStart_{};
    unsigned windows_ = 0, switches_ = 0, refusals_ = 0;
    unsigned dropped_ = 0;
    unsigned failures_[F_COUNT] = {};
    DWORD lastLo_ = 0, lastHi_ = 0;
    Snapshot total_{};

    // shared with callbacks
    std::atomic<unsigned> active_{0};
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned long long> modules_{0};
    Counters c_;
};

DOCFIX_DEFINE_PROFILER(OnDemandProfiler)
