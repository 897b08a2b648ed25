// ilmap.cpp -- line-level (IL-offset) sampling profiler for CoreCLR (3.1 / 8.0), Linux x86_64.
//
// WHAT IT DOES
//   * Code-map side (synchronous, inside runtime callbacks):
//       - JITCompilationFinished / DynamicMethodJITCompilationFinished (successful hrStatus only) and
//         JITCachedFunctionSearchFinished (COR_PRF_CACHED_FUNCTION_FOUND only: ReadyToRun/NGen code
//         that the runtime uses instead of jitting) record, for every native code body of the function:
//           . the body's native start address(es) -- ICorProfilerInfo9::GetNativeCodeStartAddresses
//             (a function can own several bodies under tiered compilation: tier0, tier1, OSR ...),
//           . its code regions -- ICorProfilerInfo9::GetCodeInfo4(start) (fallback:
//             ICorProfilerInfo2::GetCodeInfo2(functionId) when Info9 is absent or gives nothing),
//           . its IL-to-native map -- ICorProfilerInfo9::GetILToNativeMapping3(start) (fallback:
//             ICorProfilerInfo::GetILToNativeMapping(functionId)),
//         every buffer obtained with the documented two-call (double-pass) pattern, with the
//         "was the buffer large enough?" re-check after the second call.
//       - Observed on both runtimes: when JITCachedFunctionSearchFinished(FOUND) arrives, the
//         ReadyToRun code is not yet published (3.1: GetNativeCodeStartAddresses gives one address
//         0; 8.0: none; GetCodeInfo2 fails too).  Such functions go to a pending queue that is
//         retried at the start of later synchronous callbacks (JITCachedFunctionSearchStarted/
//         Finished, JITCompilationFinished, ThreadCreated), up to 64 times.  A sampled stack with a
//         frame not yet in the map is kept raw and re-mapped at Shutdown from the profiler's own
//         tables (no ICorProfilerInfo call), so those samples are not lost.
//       - The method's display name (Type::Method) is resolved once, in the same callback, through
//         GetTokenAndMetaDataFromFunction + IMetaDataImport (never later on the sampling thread).
//       - ReJIT is not requested (COR_PRF_ENABLE_REJIT is not set), so the ReJIT callbacks never
//         fire; if a body ever carries a non-zero ReJITID it is still covered, because
//         GetNativeCodeStartAddresses is asked per ReJITID 0 and GetCodeInfo4 / GetILToNativeMapping3
//         work per native start address, whatever version produced it.
//   * Sampling side (asynchronous, a native thread the profiler creates; it never runs managed code):
//       every ILMAP_INTERVAL_MS (default 5) ms it calls ICorProfilerInfo10::SuspendRuntime, walks every
//       known managed thread with ICorProfilerInfo2::DoStackSnapshot (no seed context, default flags),
//       then ICorProfilerInfo10::ResumeRuntime.  The StackSnapshotCallback only copies (FunctionID,
//       ip) pairs into a preallocated array -- no allocation, no lock -- and all mapping is done after
//       the runtime has been resumed, against the profiler's own code map (no ICorProfilerInfo call).
//       IP -> (code body, logical native offset) -> IL offset. Sampled ips are mostly return
//       addresses (the frame's call instruction), so the byte before the ip is mapped, without ever
//       leaving the code region that contains the ip.
//   * Threads are tracked with ThreadCreated / ThreadDestroyed under one mutex; the sampler holds that
//     mutex while it walks, so ThreadDestroyed blocks until any walk of that thread is complete.
//   * Shutdown: stops and joins the sampler before returning (so no ICorProfilerInfo call can happen
//     after Shutdown), then prints to stderr the hottest (method, IL offset) pairs, "self" (top
//     managed frame) and "inclusive" (any frame of the stack), and a one-line summary.
//
// DOCUMENTATION FOLLOWED (learn.microsoft.com, unmanaged profiling API; the four pages in
// /work/shared/spec):
//   * ICorProfilerInfo::GetILToNativeMapping: "After GetILToNativeMapping returns, you must verify that
//     the map buffer was large enough to contain all the COR_DEBUG_IL_TO_NATIVE_MAP structures."
//     "Alternatively, you can first call GetILToNativeMapping with a zero-length map buffer to obtain
//     the correct buffer size. You can then set the buffer size to the value returned in pcMap and
//     call GetILToNativeMapping again."  "...an entry in the array can have its ilOffset field set to a
//     value of the CorDebugIlToNativeMappingTypes enumeration." (NO_MAPPING = -1, PROLOG = -2,
//     EPILOG = -3, reported as such).
//   * Caller-Allocated Buffers: "If InfoBuffer is null, cBufferSizeStart must be 0." "pcBufferMax is
//     set to the maximum number of elements that could have been returned" (counts are ELEMENTS).
//   * ICorProfilerInfo9::GetNativeCodeStartAddresses: "When tiered compilation is enabled, a function
//     may have more than one native code body."  GetILToNativeMapping3: "Given the native code start
//     address, returns the native to IL mapping information for this jitted version of the code."
//     GetCodeInfo4: "Given the native code start address, returns the blocks of virtual memory that
//     store this code." "GetCodeInfo4 can trigger a garbage collection." -> called only from
//     JIT callbacks (synchronous), never from the sampler or from a stack-snapshot callback.
//   * ICorProfilerInfo2::GetCodeInfo2 (fallback): "Gets the extents of native code associated with the
//     specified FunctionID." + the same two-call pattern.
//   * ICorProfilerCallback::JITCachedFunctionSearchFinished / COR_PRF_JIT_CACHE:
//     "COR_PRF_CACHED_FUNCTION_FOUND has a value of zero, so COR_PRF_JIT_CACHE cannot be used as a
//     Boolean surrogate." (compared explicitly).
//   * ICorProfilerInfo2::DoStackSnapshot (spec page): "Snapshots can be taken of other threads only if
//     the target thread is suspended at the time." (-> ICorProfilerInfo10::SuspendRuntime "Suspends
//     the runtime without performing a GC." before walking, ResumeRuntime after);
//     "Always block in your ICorProfilerCallback::ThreadDestroyed callback until that thread's stack
//     walk is complete."; "Do not hold a lock while your profiler calls into a CLR function that can
//     trigger a garbage collection." (the only lock held across a CLR call is the thread-set mutex,
//     across DoStackSnapshot, while the runtime is suspended; no call that "can trigger a garbage
//     collection" -- GetCodeInfo3/4, GetFunctionFromIP2 -- is ever made by the sampler);
//     "only a thread that has never run managed code can suspend another thread" (the sampler is a
//     plain std::thread).
//   * ICorProfilerInfo4::InitializeCurrentThread: "By calling InitializeCurrentThread once when the
//     profiler first creates the sampling thread, profilers can ensure that lazy per-thread
//     initialization ... can now occur safely when no other threads are suspended."  "Call
//     InitializeCurrentThread only when there are no suspended threads." -> first thing the sampler
//     does, before its first SuspendRuntime.
//   * StackSnapshotCallback: "You must limit the complexity of work done in StackSnapshotCallback. For
//     example, when using ICorProfilerInfo2::DoStackSnapshot in an asynchronous manner, the target
//     thread may be holding locks." -> the callback only stores into preallocated memory.
//     frameInfo "is valid for use only during this callback" -> not kept.
//   * ICorProfilerCallback::ThreadDestroyed: "The threadId value is no longer valid at the time of this
//     call." -> removed from the walk set (after any walk in progress ended) and never used again.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."; "Certain immutable events may
//     still occur after shutdown; the profiler should take care to return immediately when this
//     occurs." -> the sampler is stopped and joined first; later callbacks return at once.
//   * COR_PRF_MONITOR: COR_PRF_MONITOR_JIT_COMPILATION, COR_PRF_MONITOR_CACHE_SEARCHES,
//     COR_PRF_ENABLE_JIT_MAPS ("Enables JIT maps to be tracked"), COR_PRF_ENABLE_STACK_SNAPSHOT
//     (needed for DoStackSnapshot), COR_PRF_MONITOR_THREADS; set once in Initialize (JIT_MAPS is
//     immutable).
//
// Nothing had to be declared locally: every interface, IID, struct and flag used is in the kit's
// profharness headers (ICorProfilerInfo2/4/9/10, IMetaDataImport, COR_DEBUG_IL_TO_NATIVE_MAP,
// COR_PRF_CODE_INFO). The CorDebugIlToNativeMappingTypes values below are from the documented enum.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using namespace docfix;

namespace {

// CorDebugIlToNativeMappingTypes (documented values, compared as ULONG32)
constexpr ULONG32 kNoMapping = static_cast<ULONG32>(-1);
constexpr ULONG32 kProlog = static_cast<ULONG32>(-2);
constexpr ULONG32 kEpilog = static_cast<ULONG32>(-3);

constexpr COR_PRF_JIT_CACHE kCachedFunctionFound = 0;  // COR_PRF_CACHED_FUNCTION_FOUND

constexpr int kMaxPendingAttempts = 64;
constexpr size_t kMaxDeferredFrames = 1u << 20;

struct Pending {
    FunctionID fid;
    const char* origin;
    int attempts;
};

constexpr size_t kMaxFramesPerWalk = 32;     // managed frames kept per thread per sample
constexpr size_t kMaxRawFrames = 32 * 1024;  // preallocated per sampling pass

const char* ilOffsetName(ULONG32 il, char* buf, size_t n) {
    if (il == kNoMapping) return "NO_MAPPING";
    if (il == kProlog) return "PROLOG";
    if (il == kEpilog) return "EPILOG";
    std::snprintf(buf, n, "IL_%04X", il);
    return buf;
}

struct CodeBody {
    FunctionID function = 0;
    UINT_PTR start = 0;
    std::vector<COR_PRF_CODE_INFO> regions;
    std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map;
    const char* origin = "";  // "jit", "r2r", "dyn"
};

struct RegionRef {
    UINT_PTR end;       // exclusive
    size_t body;        // index into bodies_
    SIZE_T logicalBase; // sum of the sizes of the regions before this one in the body
};

// One raw frame copied out by the StackSnapshotCallback.
struct RawFrame {
    FunctionID function;
    UINT_PTR ip;
    std::uint32_t walk;   // walk number within the pass (to group frames of one stack)
    std::uint16_t depth;  // 0 = top managed frame of that walk
};

struct WalkContext {
    RawFrame* out;
    size_t* used;
    size_t capacity;
    std::uint32_t walk;
    std::uint32_t framesSeen;  // callbacks so far (managed + unmanaged runs)
    std::uint16_t managedKept;
};

struct Key {
    FunctionID function;
    ULONG32 il;
    bool operator==(const Key& o) const { return function == o.function && il == o.il; }
};
struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<UINT_PTR>()(k.function) * 31u + k.il; }
};

class IlMapProfiler : public CallbackBase {
public:
    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[ilmap] ICorProfilerInfo4 not available (0x%08x); profiler disabled\n", (unsigned)hr);
            return hr;
        }
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo9, reinterpret_cast<void**>(&info9_)))) info9_ = nullptr;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info10_)))) info10_ = nullptr;

        DWORD mask = COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES | COR_PRF_ENABLE_JIT_MAPS |
                     COR_PRF_MONITOR_THREADS | COR_PRF_ENABLE_STACK_SNAPSHOT;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[ilmap] SetEventMask(0x%08x) failed 0x%08x; profiler disabled\n", mask, (unsigned)hr);
            releaseInfo();
            return hr;
        }
        if (const char* s = std::getenv("ILMAP_INTERVAL_MS")) {
            int v = std::atoi(s);
            if (v >= 1 && v <= 1000) intervalMs_ = v;
        }
        try {
            raw_.resize(kMaxRawFrames);
        } catch (...) {
            releaseInfo();
            return E_OUTOFMEMORY;
        }
        if (info10_ != nullptr) {
            try {
                sampler_ = std::thread([this] { samplerMain(); });
            } catch (...) {
                std::fprintf(stderr, "[ilmap] could not start the sampling thread; code maps only\n");
            }
        } else {
            std::fprintf(stderr, "[ilmap] ICorProfilerInfo10 (SuspendRuntime) not available: no sampling\n");
        }
        std::fprintf(stderr, "[ilmap] initialized (info9=%s info10=%s interval=%dms)\n", info9_ ? "yes" : "no",
                     info10_ ? "yes" : "no", intervalMs_);
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    // Code-map callbacks
    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        if (failed(hrStatus)) { ++jitFailed_; return S_OK; }
        ++jitEvents_;
        drainPending();
        recordOrQueue(fid, "jit");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID fid, COR_PRF_JIT_CACHE result) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        drainPending();
        if (result != kCachedFunctionFound) return S_OK;
        ++cacheEvents_;
        recordOrQueue(fid, "r2r");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchStarted(FunctionID, BOOL* pbUseCachedFunction) override {
        if (pbUseCachedFunction) *pbUseCachedFunction = 1;  // use the precompiled code
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        drainPending();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        if (failed(hrStatus)) return S_OK;
        ++dynEvents_;
        drainPending();
        recordOrQueue(fid, "dyn");
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    // Threads
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID tid) override {
        if (shutdown_.load()) return S_OK;
        if (info_ != nullptr) drainPending();
        std::lock_guard<std::mutex> g(threadsMu_);
        try { threads_.insert(tid); } catch (...) {}
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID tid) override {
        // Blocks while the sampler is walking (it holds threadsMu_ for the whole pass).
        std::lock_guard<std::mutex> g(threadsMu_);
        threads_.erase(tid);
        return S_OK;
    }

    // ------------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        if (shutdown_.exchange(true)) return S_OK;
        {
            std::lock_guard<std::mutex> g(stopMu_);
            stop_ = true;
        }
        stopCv_.notify_all();
        if (sampler_.joinable()) sampler_.join();  // no ICorProfilerInfo call can follow this point
        report();
        releaseInfo();
        return S_OK;
    }

private:
    // ==========================================================================================
    // Code map
    // ==========================================================================================
    template <class T, class Fn>
    static HRESULT twoCall(std::vector<T>& out, Fn call) {
        // Double-pass caller-allocated-buffer pattern: size query with a null, zero-length buffer,
        // then fetch; re-check that the buffer was large enough and retry if it was not.
        out.clear();
        ULONG32 needed = 0;
        HRESULT hr = call(0u, &needed, static_cast<T*>(nullptr));
        if (failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) return hr;
        for (int attempt = 0; attempt < 4; ++attempt) {
            if (needed == 0) return S_OK;
            try { out.resize(needed); } catch (...) { out.clear(); return E_OUTOFMEMORY; }
            ULONG32 got = 0;
            hr = call(needed, &got, out.data());
            if (failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) { out.clear(); return hr; }
            if (got <= needed) { out.resize(got); return S_OK; }
            needed = got;  // buffer was too small (the data grew between the calls): again
        }
        out.clear();
        return E_FAIL;
    }

    // Returns false when the function has no native code yet (then it is queued for a later retry).
    bool recordFunction(FunctionID fid, const char* origin) {
        try {
            std::vector<UINT_PTR> starts;
            bool viaStarts = false;
            if (info9_ != nullptr) {
                HRESULT hr = twoCall<UINT_PTR>(starts, [&](ULONG32 c, ULONG32* pc, UINT_PTR* b) {
                    return info9_->GetNativeCodeStartAddresses(fid, 0, c, pc, b);
                });
                starts.erase(std::remove(starts.begin(), starts.end(), (UINT_PTR)0), starts.end());
                viaStarts = succeeded(hr) && !starts.empty();
                if (!viaStarts) ++startAddrMisses_;
            }
            std::vector<CodeBody> fresh;
            bool noCode = false;
            if (viaStarts) {
                for (UINT_PTR start : starts) {
                    if (start == 0 || knownStart(start)) continue;
                    CodeBody b;
                    b.function = fid;
                    b.start = start;
                    b.origin = origin;
                    HRESULT hr = twoCall<COR_PRF_CODE_INFO>(b.regions, [&](ULONG32 c, ULONG32* pc, COR_PRF_CODE_INFO* x) {
                        return info9_->GetCodeInfo4(start, c, pc, x);
                    });
                    if (failed(hr) || b.regions.empty()) { ++codeInfoFailures_; continue; }
                    hr = twoCall<COR_DEBUG_IL_TO_NATIVE_MAP>(b.map, [&](ULONG32 c, ULONG32* pc, COR_DEBUG_IL_TO_NATIVE_MAP* x) {
                        return info9_->GetILToNativeMapping3(start, c, pc, x);
                    });
                    if (failed(hr)) { ++mapFailures_; b.map.clear(); }
                    fresh.push_back(std::move(b));
                }
            } else {
                CodeBody b;
                b.function = fid;
                b.origin = origin;
                HRESULT hr = twoCall<COR_PRF_CODE_INFO>(b.regions, [&](ULONG32 c, ULONG32* pc, COR_PRF_CODE_INFO* x) {
                    return info_->GetCodeInfo2(fid, c, pc, x);
                });
                if (failed(hr) || b.regions.empty()) {
                    ++codeInfoFailures_;
                    noCode = true;
                } else {
                    b.start = b.regions[0].startAddress;
                    if (!knownStart(b.start)) {
                        hr = twoCall<COR_DEBUG_IL_TO_NATIVE_MAP>(b.map, [&](ULONG32 c, ULONG32* pc, COR_DEBUG_IL_TO_NATIVE_MAP* x) {
                            return info_->GetILToNativeMapping(fid, c, pc, x);
                        });
                        if (failed(hr)) { ++mapFailures_; b.map.clear(); }
                        fresh.push_back(std::move(b));
                        ++fallbackBodies_;
                    }
                }
            }
            std::string name;
            bool needName;
            {
                std::lock_guard<std::mutex> g(mapMu_);
                needName = names_.find(fid) == names_.end();
            }
            if (needName) name = resolveName(fid, origin);

            std::lock_guard<std::mutex> g(mapMu_);
            if (needName && names_.find(fid) == names_.end()) names_.emplace(fid, std::move(name));
            for (CodeBody& b : fresh) {
                if (starts_.count(b.start)) continue;  // recorded concurrently by another thread
                std::sort(b.map.begin(), b.map.end(), [](const COR_DEBUG_IL_TO_NATIVE_MAP& a, const COR_DEBUG_IL_TO_NATIVE_MAP& c) {
                    return a.nativeStartOffset < c.nativeStartOffset;
                });
                size_t idx = bodies_.size();
                SIZE_T base = 0;
                for (const COR_PRF_CODE_INFO& r : b.regions) {
                    if (r.size == 0) continue;
                    ranges_[r.startAddress] = RegionRef{r.startAddress + r.size, idx, base};
                    base += r.size;
                }
                mapEntries_ += b.map.size();
                starts_.insert(b.start);
                bodies_.push_back(std::move(b));
            }
            return !noCode;
        } catch (...) {
            ++oom_;
            return true;
        }
    }

    // A function whose code was not yet published when its callback arrived (observed for
    // ReadyToRun code found by a cache search) is retried from later synchronous callbacks.
    void recordOrQueue(FunctionID fid, const char* origin) {
        if (recordFunction(fid, origin)) return;
        std::lock_guard<std::mutex> g(pendingMu_);
        try { pending_.push_back(Pending{fid, origin, 0}); } catch (...) {}
    }

    void drainPending() {
        std::vector<Pending> work;
        {
            std::lock_guard<std::mutex> g(pendingMu_);
            if (pending_.empty()) return;
            work.swap(pending_);
        }
        std::vector<Pending> again;
        for (Pending& p : work) {
            if (recordFunction(p.fid, p.origin)) { ++pendingResolved_; continue; }
            if (++p.attempts < kMaxPendingAttempts) {
                try { again.push_back(p); } catch (...) {}
            } else {
                ++pendingDropped_;
            }
        }
        if (!again.empty()) {
            std::lock_guard<std::mutex> g(pendingMu_);
            try { pending_.insert(pending_.end(), again.begin(), again.end()); } catch (...) {}
        }
    }

    bool knownStart(UINT_PTR start) {
        std::lock_guard<std::mutex> g(mapMu_);
        return starts_.count(start) != 0;
    }

    std::string resolveName(FunctionID fid, const char* origin) {
        if (std::strcmp(origin, "dyn") == 0) return "(dynamic method)";
        IUnknown* unk = nullptr;
        mdToken token = 0;
        HRESULT hr = info_->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &token);
        if (failed(hr) || unk == nullptr) {
            char b[64];
            std::snprintf(b, sizeof b, "(fid 0x%llx)", (unsigned long long)fid);
            return b;
        }
        IMetaDataImport* md = static_cast<IMetaDataImport*>(unk);
        std::string method = "?", type;
        mdTypeDef td = 0;
        std::vector<WCHAR> buf(256);
        for (int attempt = 0; attempt < 2; ++attempt) {
            ULONG len = 0;
            hr = md->GetMethodProps(token, &td, buf.data(), (ULONG)buf.size(), &len, nullptr, nullptr, nullptr, nullptr, nullptr);
            if (failed(hr)) break;
            if (len <= buf.size()) { method = to_utf8(buf.data(), len); break; }
            buf.resize(len);  // truncated: grow and ask again
        }
        // Enclosing types (nested classes) from the inside out.
        for (int depth = 0; td != 0 && depth < 8; ++depth) {
            std::string t;
            for (int attempt = 0; attempt < 2; ++attempt) {
                ULONG len = 0;
                hr = md->GetTypeDefProps(td, buf.data(), (ULONG)buf.size(), &len, nullptr, nullptr);
                if (failed(hr)) break;
                if (len <= buf.size()) { t = to_utf8(buf.data(), len); break; }
                buf.resize(len);
            }
            type = type.empty() ? t : t + "+" + type;
            mdTypeDef outer = 0;
            if (failed(md->GetNestedClassProps(td, &outer))) break;
            td = outer;
        }
        md->Release();
        return type.empty() ? method : type + "::" + method;
    }

    // ==========================================================================================
    // Sampler
    // ==========================================================================================
    static HRESULT snapshotCallback(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* clientData) {
        // Keep this minimal: the target thread may hold locks (no allocation, no locks, no CLR call).
        WalkContext* ctx = static_cast<WalkContext*>(clientData);
        ++ctx->framesSeen;
        if (funcId == 0) return S_OK;  // a run of unmanaged frames
        if (ctx->managedKept >= kMaxFramesPerWalk || *ctx->used >= ctx->capacity) return S_OK;
        RawFrame& f = ctx->out[(*ctx->used)++];
        f.function = funcId;
        f.ip = ip;
        f.walk = ctx->walk;
        f.depth = ctx->managedKept++;
        return S_OK;
    }

    bool waitInterval() {
        std::unique_lock<std::mutex> lk(stopMu_);
        stopCv_.wait_for(lk, std::chrono::milliseconds(intervalMs_), [this] { return stop_; });
        return !stop_;
    }

    bool stopping() {
        std::lock_guard<std::mutex> lk(stopMu_);
        return stop_;
    }

    void samplerMain() {
        // Done once, before this thread ever suspends anything.
        if (stopping()) return;
        HRESULT hr = info_->InitializeCurrentThread();
        if (failed(hr)) std::fprintf(stderr, "[ilmap] InitializeCurrentThread failed 0x%08x (continuing)\n", (unsigned)hr);

        while (waitInterval()) {
            if (stopping()) break;
            hr = info10_->SuspendRuntime();
            if (failed(hr)) { ++suspendFailures_; lastSuspendHr_ = hr; continue; }
            size_t used = 0;
            std::uint32_t walks = 0;
            {
                std::lock_guard<std::mutex> g(threadsMu_);  // ThreadDestroyed waits for this pass
                for (ThreadID tid : threads_) {
                    WalkContext ctx{raw_.data(), &used, raw_.size(), walks, 0, 0};
                    hr = info_->DoStackSnapshot(tid, &IlMapProfiler::snapshotCallback, COR_PRF_SNAPSHOT_DEFAULT, &ctx, nullptr, 0);
                    ++walks;
                    if (succeeded(hr)) ++walksOk_;
                    else { ++walksFailed_; lastWalkHr_ = hr; }
                }
            }
            hr = info10_->ResumeRuntime();
            if (failed(hr)) { ++resumeFailures_; std::fprintf(stderr, "[ilmap] ResumeRuntime failed 0x%08x; sampling stops\n", (unsigned)hr); break; }
            ++passes_;
            aggregate(used);
        }
    }

    // Map one ip to (body, IL offset). Returns false if the ip is not in any recorded body.
    bool mapIp(UINT_PTR ip, FunctionID expected, FunctionID* fid, ULONG32* il) {
        auto it = ranges_.upper_bound(ip);
        if (it == ranges_.begin()) return false;
        --it;
        if (ip >= it->second.end) return false;
        const CodeBody& b = bodies_[it->second.body];
        if (expected != 0 && b.function != expected) ++fidMismatch_;
        *fid = b.function;
        SIZE_T off = it->second.logicalBase + (ip - it->first);
        // A sampled ip is either a return address (every frame below the top one, and the top one
        // too when the thread is stopped in native code under it) or an interrupted instruction.
        // Mapping the byte before it attributes a return address to its call instruction and is at
        // most one instruction early for an interrupted ip; never step out of the region.
        if (ip > it->first) --off;
        // Most specific entry containing the offset: largest start with start <= off < end.
        const COR_DEBUG_IL_TO_NATIVE_MAP* best = nullptr;
        for (const COR_DEBUG_IL_TO_NATIVE_MAP& e : b.map) {
            if (e.nativeStartOffset > off) break;
            if (off < e.nativeEndOffset || (e.nativeEndOffset == 0 && e.nativeStartOffset <= off)) best = &e;
        }
        *il = best ? best->ilOffset : kNoMapping;
        return true;
    }

    // Counts one walk (frames [b, e) of `frames`, all with the same walk number). If a frame is not
    // in the code map yet and `canDefer`, the whole walk is kept for re-mapping at report time
    // (its function's code may be recorded by a later callback). Caller holds mapMu_.
    void countWalk(const RawFrame* b, const RawFrame* e, bool canDefer) {
        struct Mapped { Key k; bool ok; };
        Mapped m[kMaxFramesPerWalk];
        size_t n = 0;
        bool allMapped = true;
        for (const RawFrame* f = b; f != e && n < kMaxFramesPerWalk; ++f, ++n) {
            UINT_PTR ip = f->ip;
            FunctionID fid = 0;
            ULONG32 il = kNoMapping;
            m[n].ok = mapIp(ip, f->function, &fid, &il);
            m[n].k = m[n].ok ? Key{fid, il} : Key{f->function, kNoMapping};
            allMapped = allMapped && m[n].ok;
        }
        if (!allMapped && canDefer) {
            if (deferred_.size() + n <= kMaxDeferredFrames) {
                std::uint32_t serial = deferredWalkSerial_++;
                for (const RawFrame* f = b; f != e; ++f) {
                    deferred_.push_back(*f);
                    deferred_.back().walk = serial;
                }
                return;
            }
            ++deferredDropped_;  // counted now, with what is known
        }
        ++threadSamples_;
        for (size_t i = 0; i < n; ++i) {
            if (m[i].ok) ++framesMapped_;
            else { ++framesUnmapped_; unmappedFns_.insert(m[i].k.function); }
            if (i == 0) ++self_[m[i].k];
            bool dup = false;  // count each (method, IL offset) once per stack
            for (size_t j = 0; j < i && !dup; ++j) dup = m[j].k == m[i].k;
            if (!dup) ++incl_[m[i].k];
        }
    }

    void countFrames(const RawFrame* frames, size_t used, bool canDefer) {
        size_t i = 0;
        while (i < used) {
            size_t j = i + 1;
            while (j < used && frames[j].walk == frames[i].walk) ++j;
            countWalk(frames + i, frames + j, canDefer);
            i = j;
        }
    }

    void aggregate(size_t used) {
        try {
            std::lock_guard<std::mutex> g(mapMu_);
            countFrames(raw_.data(), used, true);
        } catch (...) {
            ++oom_;
        }
    }

    // ==========================================================================================
    void printTop(const char* title, const std::unordered_map<Key, std::uint64_t, KeyHash>& counts, std::uint64_t total, size_t n) {
        std::vector<std::pair<Key, std::uint64_t>> v(counts.begin(), counts.end());
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
            if (a.second != b.second) return a.second > b.second;
            if (a.first.function != b.first.function) return a.first.function < b.first.function;
            return a.first.il < b.first.il;
        });
        std::fprintf(stderr, "[ilmap] %s (of %llu):\n", title, (unsigned long long)total);
        for (size_t i = 0; i < v.size() && i < n; ++i) {
            auto nit = names_.find(v[i].first.function);
            char ilb[32];
            std::fprintf(stderr, "[ilmap]   %6llu %5.1f%%  %-10s %s\n", (unsigned long long)v[i].second,
                         total ? 100.0 * (double)v[i].second / (double)total : 0.0,
                         ilOffsetName(v[i].first.il, ilb, sizeof ilb),
                         nit != names_.end() ? nit->second.c_str() : "(unknown function)");
        }
    }

    void report() {
        std::lock_guard<std::mutex> g(mapMu_);
        try {
            std::vector<RawFrame> late;
            late.swap(deferred_);
            countFrames(late.data(), late.size(), false);  // only the profiler's own data: no CLR call
        } catch (...) {
            ++oom_;
        }
        std::uint64_t selfTotal = 0;
        for (const auto& kv : self_) selfTotal += kv.second;
        printTop("hottest (method, IL offset), self = top managed frame", self_, selfTotal, 15);
        printTop("hottest (method, IL offset), inclusive = anywhere on the stack", incl_, threadSamples_, 10);
        std::fprintf(stderr,
                     "[ilmap] summary: jit=%llu r2r=%llu dyn=%llu functions=%zu bodies=%zu (fallback %llu) ilmap_entries=%llu "
                     "code_not_ready=%llu map_fail=%llu startaddr_empty=%llu | passes=%llu walks_ok=%llu walks_failed=%llu "
                     "(last 0x%08x) suspend_fail=%llu (last 0x%08x) thread_samples=%llu frames_mapped=%llu frames_unmapped=%llu "
                     "(unmapped functions %zu) fid_mismatch=%llu pending_resolved=%llu pending_dropped=%llu\n",
                     (unsigned long long)jitEvents_.load(), (unsigned long long)cacheEvents_.load(),
                     (unsigned long long)dynEvents_.load(), names_.size(), bodies_.size(),
                     (unsigned long long)fallbackBodies_.load(), (unsigned long long)mapEntries_,
                     (unsigned long long)codeInfoFailures_.load(), (unsigned long long)mapFailures_.load(),
                     (unsigned long long)startAddrMisses_.load(), (unsigned long long)passes_, (unsigned long long)walksOk_,
                     (unsigned long long)walksFailed_, (unsigned)lastWalkHr_, (unsigned long long)suspendFailures_, (unsigned)lastSuspendHr_,
                     (unsigned long long)threadSamples_, (unsigned long long)framesMapped_,
                     (unsigned long long)framesUnmapped_, unmappedFns_.size(), (unsigned long long)fidMismatch_,
                     (unsigned long long)pendingResolved_.load(), (unsigned long long)pendingDropped_.load());
    }

    void releaseInfo() {
        if (info10_) { info10_->Release(); info10_ = nullptr; }
        if (info9_) { info9_->Release(); info9_ = nullptr; }
        if (info_) { info_->Release(); info_ = nullptr; }
    }

    ICorProfilerInfo4* info_ = nullptr;
    ICorProfilerInfo9* info9_ = nullptr;
    ICorProfilerInfo10* info10_ = nullptr;
    int intervalMs_ = 5;


    std::atomic<bool> shutdown_{false};

    // code map (mapMu_)
    std::mutex mapMu_;
    std::vector<CodeBody> bodies_;
    std::map<UINT_PTR, RegionRef> ranges_;
    std::unordered_set<UINT_PTR> starts_;
    std::unordered_map<FunctionID, std::string> names_;
    std::uint64_t mapEntries_ = 0;
    // aggregated samples (mapMu_)
    std::unordered_map<Key, std::uint64_t, KeyHash> self_, incl_;
    std::unordered_set<FunctionID> unmappedFns_;
    std::uint64_t threadSamples_ = 0, framesMapped_ = 0, framesUnmapped_ = 0, fidMismatch_ = 0;

    // functions waiting for their code (pendingMu_)
    std::mutex pendingMu_;
    std::vector<Pending> pending_;
    std::atomic<std::uint64_t> pendingResolved_{0}, pendingDropped_{0};
    // whole walks containing an unmapped frame, re-mapped at report time (mapMu_)
    std::vector<RawFrame> deferred_;
    std::uint32_t deferredWalkSerial_ = 0;
    std::uint64_t deferredDropped_ = 0;

    // threads (threadsMu_)
    std::mutex threadsMu_;
    std::unordered_set<ThreadID> threads_;

    // sampler
    std::thread sampler_;
    std::mutex stopMu_;
    std::condition_variable stopCv_;
    bool stop_ = false;
    std::vector<RawFrame> raw_;
    std::uint64_t passes_ = 0, walksOk_ = 0, walksFailed_ = 0, suspendFailures_ = 0, resumeFailures_ = 0;
    HRESULT lastWalkHr_ = S_OK, lastSuspendHr_ = S_OK;

    std::atomic<std::uint64_t> jitEvents_{0}, jitFailed_{0}, cacheEvents_{0}, dynEvents_{0};
    std::atomic<std::uint64_t> codeInfoFailures_{0}, mapFailures_{0}, startAddrMisses_{0}, fallbackBodies_{0}, oom_{0};
};

}  // namespace

DOCFIX_DEFINE_PROFILER(IlMapProfiler)
