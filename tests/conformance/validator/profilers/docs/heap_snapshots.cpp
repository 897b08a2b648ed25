// heap_snapshots.cpp -- memory profiler that takes periodic heap snapshots: it forces a collection and,
// during it, counts the live objects and references the runtime's heap walk reports.
//
// What it does:
//   * Initialize QueryInterfaces for ICorProfilerInfo, asks for COR_PRF_MONITOR_GC |
//     COR_PRF_MONITOR_MODULE_LOADS, and starts one native snapshot thread (std::thread: it has never run
//     managed code and never has a profiler callback on its stack).  Every kPeriodMs that thread marks a
//     snapshot as requested and calls ICorProfilerInfo::ForceGC, with no lock held.
//   * GarbageCollectionStarted / ObjectReferences / GarbageCollectionFinished: per collection, counts the
//     objects and outgoing references of the heap walk; a collection that a snapshot requested is recorded as
//     a snapshot (count, largest object count).  ObjectReferences only counts; the ObjectIDs are not used.
//   * ModuleLoadFinished: reads the module's path (GetModuleInfo, buffer in characters, grown and retried)
//     to recognise the application's own assembly -- the first module outside the shared framework.  When it
//     loads, a "baseline" snapshot is taken so the app's later growth can be compared with the heap before
//     any application code ran.
//   * Shutdown: stops and joins the snapshot thread (no ICorProfilerInfo call is made after Shutdown
//     begins), prints one summary line, releases the info pointer.
//
// THE BUG: the baseline snapshot calls ICorProfilerInfo::ForceGC directly from inside the
// ModuleLoadFinished callback (the line marked `// BUG:`) instead of signalling the snapshot thread and
// letting it do the call -- "we want the baseline before Main runs, so do it synchronously".  The calling
// thread is the runtime thread that is loading the application's assembly: it has run managed code and has a
// profiler callback (ModuleLoadFinished) on its stack.  (The runtime refuses the call with
// CORPROF_E_UNSUPPORTED_CALL_SEQUENCE, 0x80131363, observed on 3.1.23 and 8.0.4; the profiler logs that and
// carries on without a baseline.)
//
// Documentation sentence it breaks:
//   * ICorProfilerInfo::ForceGC -- "The ForceGC method must be called only from a thread that has never run
//     managed code and does not have any profiler callbacks on its stack. The most convenient implementation
//     is to create a separate thread within the profiler that calls ForceGC when signaled."
//
// Documentation otherwise followed:
//   * The periodic snapshots follow exactly that advice (a profiler-created native thread).
//   * Asynchronous stack walk guidelines (DoStackSnapshot page): "Do not hold a lock while your profiler
//     calls into a CLR function that can trigger a garbage collection." -> the snapshot thread calls ForceGC
//     with no lock held; the census mutex is taken only inside the GC callbacks.
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_GC controls GarbageCollectionStarted/Finished and
//     ObjectReferences; COR_PRF_MONITOR_MODULE_LOADS controls ModuleLoadFinished.
//   * ICorProfilerCallback::ModuleLoadFinished -- "A failure HRESULT in hrStatus indicates a failure."
//   * GetModuleInfo -- cchName "The length, in characters, of the szName return buffer."; grown and retried
//     when *pcchName is larger ("Caller-Allocated Buffers").
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." -> the thread is stopped and joined.
//
// App that exercises it: long (any app does: the baseline fires once, when the app's assembly loads; long
// also gives the snapshot thread time for several correct snapshots to contrast with it).
// A careful checker should report: ICorProfilerInfo::ForceGC called on a thread that is inside the
// ModuleLoadFinished callback (a profiler callback on its stack, and a thread that has run managed code).
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr int kPeriodMs = 2000;

bool is_framework_path(const std::string& p) {
    if (p.empty()) return true;  // dynamic module: not the app's assembly
    if (p.find("Microsoft.NETCore.App") != std::string::npos) return true;
    size_t slash = p.find_last_of("/\\");
    std::string file = slash == std::string::npos ? p : p.substr(slash + 1);
    return file.rfind("System.", 0) == 0 || file.rfind("Microsoft.", 0) == 0 || file == "netstandard.dll" ||
           file == "mscorlib.dll";
}

}  // namespace

class HeapSnapshots : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[heap_snapshots] QueryInterface(ICorProfilerInfo) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_GC | COR_PRF_MONITOR_MODULE_LOADS);
        if (failed(hr)) {
            std::fprintf(stderr, "[heap_snapshots] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        worker_ = std::thread([this] { snapshot_loop(); });
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        ICorProfilerInfo* info = live_info();
        if (info == nullptr || failed(hrStatus) || baseline_done_.load()) return S_OK;
        std::string path;
        if (!module_path(info, moduleId, path) || is_framework_path(path)) return S_OK;
        if (baseline_done_.exchange(true)) return S_OK;

        // The application's own assembly has loaded: take the baseline snapshot now, before Main runs.
        snapshot_requested_.store(true);
        HRESULT hr = info->ForceGC();  // BUG: ForceGC from inside a profiler callback, on a thread that ran managed code
        baseline_hr_.store(hr);
        if (failed(hr)) {
            snapshot_requested_.store(false);
            std::fprintf(stderr, "[heap_snapshots] baseline snapshot failed 0x%08x\n", (unsigned)hr);
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(census_mu_);
        cur_objects_ = 0;
        cur_refs_ = 0;
        ++gcs_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID, ClassID, ULONG cObjectRefs, ObjectID*) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> g(census_mu_);
        ++cur_objects_;
        cur_refs_ += cObjectRefs;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load()) return S_OK;
        bool snapshot = snapshot_requested_.exchange(false);
        std::lock_guard<std::mutex> g(census_mu_);
        if (snapshot) {
            ++snapshots_;
            last_snapshot_objects_ = cur_objects_;
            last_snapshot_refs_ = cur_refs_;
            if (cur_objects_ > max_snapshot_objects_) max_snapshot_objects_ = cur_objects_;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        {
            std::lock_guard<std::mutex> g(thread_mu_);
            stop_ = true;
        }
        thread_cv_.notify_all();
        if (worker_.joinable()) worker_.join();  // no ForceGC can be in flight after this
        ICorProfilerInfo* info = info_.exchange(nullptr);

        std::lock_guard<std::mutex> g(census_mu_);
        std::fprintf(stderr,
                     "[heap_snapshots] shutdown: gcs=%" PRIu64 " snapshots=%" PRIu64 " forcegc_calls=%" PRIu64
                     " forcegc_failures=%" PRIu64 " baseline=%s(0x%08x) last_snapshot objects=%" PRIu64 " refs=%" PRIu64
                     " max_objects=%" PRIu64 "\n",
                     gcs_, snapshots_, forcegc_calls_.load(), forcegc_failures_.load(),
                     baseline_done_.load() ? "attempted" : "none", (unsigned)baseline_hr_.load(), last_snapshot_objects_,
                     last_snapshot_refs_, max_snapshot_objects_);
        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    ICorProfilerInfo* live_info() const {
        if (shutdown_.load()) return nullptr;
        return info_.load();
    }

    // The snapshot thread: a native thread created by the profiler, calling ForceGC with no lock held.
    void snapshot_loop() {
        std::unique_lock<std::mutex> lk(thread_mu_);
        for (;;) {
            thread_cv_.wait_for(lk, std::chrono::milliseconds(kPeriodMs), [this] { return stop_; });
            if (stop_) return;
            ICorProfilerInfo* info = live_info();
            if (info == nullptr) return;
            lk.unlock();
            snapshot_requested_.store(true);
            HRESULT hr = info->ForceGC();
            forcegc_calls_.fetch_add(1, std::memory_order_relaxed);
            if (failed(hr)) {
                snapshot_requested_.store(false);
                forcegc_failures_.fetch_add(1, std::memory_order_relaxed);
            }
            lk.lock();
        }
    }

    static bool module_path(ICorProfilerInfo* info, ModuleID mod, std::string& out) {
        std::vector<WCHAR> buf(256, 0);
        for (int attempt = 0; attempt < 3; ++attempt) {
            LPCBYTE base = nullptr;
            ULONG cch = 0;
            AssemblyID parent = 0;
            HRESULT hr = info->GetModuleInfo(mod, &base, static_cast<ULONG>(buf.size()), &cch, buf.data(), &parent);
            if (failed(hr) && !(hr == HRESULT_ERROR_INSUFFICIENT_BUFFER && cch > buf.size())) return false;
            if (succeeded(hr) && cch <= buf.size()) {
                out = to_utf8(buf.data(), buf.size());
                return true;
            }
            buf.assign(cch, 0);
        }
        return false;
    }

    std::atomic<ICorProfilerInfo*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> baseline_done_{false};
    std::atomic<HRESULT> baseline_hr_{S_OK};
    std::atomic<bool> snapshot_requested_{false};
    std::atomic<std::uint64_t> forcegc_calls_{0};
    std::atomic<std::uint64_t> forcegc_failures_{0};

    std::thread worker_;
    std::mutex thread_mu_;  // guards stop_
    std::condition_variable thread_cv_;
    bool stop_ = false;

    std::mutex census_mu_;  // guards everything below; taken only inside callbacks
    std::uint64_t gcs_ = 0;
    std::uint64_t cur_objects_ = 0;
    std::uint64_t cur_refs_ = 0;
    std::uint64_t snapshots_ = 0;
    std::uint64_t last_snapshot_objects_ = 0;
    std::uint64_t last_snapshot_refs_ = 0;
    std::uint64_t max_snapshot_objects_ = 0;
};

DOCFIX_DEFINE_PROFILER(HeapSnapshots)
