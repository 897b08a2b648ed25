// jit_tiering_monitor.cpp -- watches the native code versions (tiers) of JIT-compiled methods.
//
// What it does
//   * Initialize: QueryInterface the given IUnknown for ICorProfilerInfo9 (the interface that
//     "provides methods to query information about functions with multiple native code
//     versions"), set COR_PRF_MONITOR_JIT_COMPILATION only.  Without ICorProfilerInfo9 (runtime
//     older than .NET Core 2.1) Initialize fails and the profiler is not used.
//   * JITCompilationStarted: counts compilations started.
//   * JITInlining: counts inlining decisions and always allows them (*pfShouldInline = TRUE).
//   * JITCompilationFinished: if hrStatus succeeded, enumerates the native code bodies of the
//     function with GetNativeCodeStartAddresses(functionId, reJitId 0, ...) (two-pass), and for
//     every start address not seen before for that function asks GetILToNativeMapping3 and
//     GetCodeInfo4 (both two-pass).  A function that gains a second body (a new tier) is counted
//     as re-tiered.
//   * Shutdown: prints one stderr line starting "jit_tiering_monitor:" and releases the info
//     pointer; no other ICorProfilerInfo call is made there.
//
// Documentation followed (learn.microsoft.com, dotnet/framework|core/unmanaged-api/profiling):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_JIT_COMPILATION (0x20) is the flag for the
//     JIT-compilation and JITInlining callbacks (paraphrase; the page lists the value).
//   * ICorProfilerCallback::JITCompilationStarted -- "It is possible to receive more than one pair
//     of JITCompilationStarted and ICorProfilerCallback::JITCompilationFinished Method calls for
//     each function because of the way the runtime handles class constructors." (so bodies are
//     de-duplicated by start address per FunctionID, never counted per Finished event).
//   * ICorProfilerInfo9 -- GetNativeCodeStartAddresses: "Given a functionId and rejitId,
//     enumerates the native code start address of all jitted versions of this code that
//     currently exist."; GetILToNativeMapping3: "Given the native code start address, returns the
//     native to IL mapping information for this jitted version of the code."; GetCodeInfo4:
//     "Given the native code start address, returns the blocks of virtual memory that store this
//     code."; GetILToNativeMapping3 remarks: "When tiered compilation is enabled, a method may have
//     more than one native code body. ICorProfilerInfo9::GetNativeCodeStartAddresses will return
//     the start addresses for all of the native code bodies."
//   * Caller-Allocated Buffers in the Profiling API -- "Double-pass method: Alternatively, call the
//     method two times. First call with a zero-length InfoBuffer parameter to obtain the correct
//     buffer size. Then set the buffer size to the value returned in pcBufferMax and call the
//     function again."  "If InfoBuffer is null, cBufferSizeStart must be 0."  "If pcBufferMax
//     points to a value that is larger than cBufferSizeStart, allocate a larger InfoBuffer buffer,
//     update cBufferSizeStart with the new, larger size, and call the method again." (the list can
//     grow between the two passes when another tier is published concurrently, so the second pass
//     is retried a bounded number of times, and the count used is min(returned, allocated)).
//   * ICorProfilerCallback::JITCompilationFinished -- hrStatus: "A value indicating whether
//     compilation was successful." (failed compilations are only counted).
//   * ICorProfilerCallback::JITInlining -- "pfShouldInline [out] true to allow the insertion to
//     occur; otherwise, false."
//   * DoStackSnapshot remarks (general guidance): "Do not hold a lock while your profiler calls
//     into a CLR function that can trigger a garbage collection."  The mutex protecting our maps
//     is never held across a runtime call.
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
//
// Ambiguities met
//   * Whether the body just produced is already listed by GetNativeCodeStartAddresses while
//     JITCompilationFinished is still running is not stated.  The monitor records only addresses
//     it is actually given and picks up any missing body at the function's next JIT event.
//   * The reJitId to pass for code that was never ReJIT-ted is not spelled out on the
//     ICorProfilerInfo9 pages; 0 (the original IL version) is used since no ReJIT is requested.
//   * Whether a zero count with S_OK, or a failure HRESULT, is the answer for "no body yet" is
//     not stated; both are treated as "nothing to report".
//   * JITCompilationStarted/Finished may run concurrently on several threads; the documents do
//     not order them across threads, so all shared state is mutex-protected.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {
// Typical size of an IL->native map for a small method; used to pre-size scratch buffers.
constexpr ULONG32 kMapSizeHint = 32;
constexpr int kMaxRetries = 3;
}  // namespace

class JitTieringMonitor : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo9, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[jit_tiering_monitor] QueryInterface(ICorProfilerInfo9) failed 0x%08x\n",
                         (unsigned)hr);
            info_ = nullptr;
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION);
        if (failed(hr)) {
            std::fprintf(stderr, "[jit_tiering_monitor] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID, BOOL) override {
        if (shutdown_.load()) return S_OK;
        ++started_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID, FunctionID, BOOL* pfShouldInline) override {
        if (pfShouldInline != nullptr) *pfShouldInline = 1;
        if (!shutdown_.load()) ++inlinings_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load() || info_ == nullptr) return S_OK;
        if (failed(hrStatus)) {
            ++jitFailures_;
            return S_OK;
        }
        ++finished_;

        std::vector<UINT_PTR> starts;
        if (!NativeCodeStarts(functionId, starts)) {
            ++queryFailures_;
            return S_OK;
        }

        // Which bodies are new for this function?  (Lock only around our own map.)
        std::vector<UINT_PTR> fresh;
        {
            std::lock_guard<std::mutex> lock(mu_);
            std::vector<UINT_PTR>& seen = seen_[functionId];
            const size_t before = seen.size();
            for (UINT_PTR s : starts) {
                if (s == 0) continue;
                if (std::find(seen.begin(), seen.end(), s) == seen.end()) {
                    seen.push_back(s);
                    fresh.push_back(s);
                }
            }
            if (before >= 1 && !fresh.empty()) ++retiered_;  // a new body for a known function
            maxVersions_ = std::max<size_t>(maxVersions_, seen.size());
        }

        for (UINT_PTR start : fresh) {
            ++versions_;
            size_t mapEntries = 0;
            if (ILMap(start, mapEntries))
                mapEntriesTotal_ += mapEntries;
            else
                ++queryFailures_;
            SIZE_T bytes = 0;
            if (CodeBytes(start, bytes))
                codeBytesTotal_ += bytes;
            else
                ++queryFailures_;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        size_t functions = 0, maxVersions = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            functions = seen_.size();
            maxVersions = maxVersions_;
        }
        std::fprintf(stderr,
                     "jit_tiering_monitor: jit_started=%llu jit_finished=%llu jit_failed=%llu inlinings=%llu "
                     "functions=%zu code_versions=%llu retiered=%llu max_versions=%zu il_map_entries=%llu "
                     "code_bytes=%llu query_failures=%llu\n",
                     started_.load(), finished_.load(), jitFailures_.load(), inlinings_.load(), functions,
                     versions_.load(), retiered_.load(), maxVersions, mapEntriesTotal_.load(),
                     codeBytesTotal_.load(), queryFailures_.load());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // GetNativeCodeStartAddresses, double-pass.
    bool NativeCodeStarts(FunctionID functionId, std::vector<UINT_PTR>& out) {
        out.clear();
        ULONG32 needed = 0;
        HRESULT hr = info_->GetNativeCodeStartAddresses(functionId, 0, 0, &needed, nullptr);
        if (failed(hr)) return false;
        for (int attempt = 0; attempt < kMaxRetries && needed > 0; ++attempt) {
            out.assign(needed, 0);
            ULONG32 got = 0;
            hr = info_->GetNativeCodeStartAddresses(functionId, 0, needed, &got, out.data());
            if (failed(hr)) {
                out.clear();
                return false;
            }
            if (got <= needed) {
                out.resize(got);
                return true;
            }
            needed = got;  // grew between the passes (another tier published): try again
        }
        out.resize(std::min<size_t>(out.size(), needed));
        return true;
    }

    // GetILToNativeMapping3, double-pass.
    bool ILMap(UINT_PTR start, size_t& entries) {
        entries = 0;
        ULONG32 needed = 0;
        // BUG: "If InfoBuffer is null, cBufferSizeStart must be 0." -- the size query passes the
        // pre-sizing hint as cMap while map is still null.
        HRESULT hr = info_->GetILToNativeMapping3(start, kMapSizeHint, &needed, nullptr);
        if (failed(hr)) return false;
        if (needed == 0) return true;
        std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map;
        map.reserve(std::max(needed, kMapSizeHint));
        for (int attempt = 0; attempt < kMaxRetries; ++attempt) {
            map.assign(needed, COR_DEBUG_IL_TO_NATIVE_MAP{});
            ULONG32 got = 0;
            hr = info_->GetILToNativeMapping3(start, needed, &got, map.data());
            if (failed(hr)) return false;
            if (got <= needed) {
                entries = got;
                return true;
            }
            needed = got;
        }
        entries = map.size();
        return true;
    }

    // GetCodeInfo4, double-pass.
    bool CodeBytes(UINT_PTR start, SIZE_T& bytes) {
        bytes = 0;
        ULONG32 needed = 0;
        HRESULT hr = info_->GetCodeInfo4(start, 0, &needed, nullptr);
        if (failed(hr)) return false;
        if (needed == 0) return true;
        std::vector<COR_PRF_CODE_INFO> infos;
        for (int attempt = 0; attempt < kMaxRetries; ++attempt) {
            infos.assign(needed, COR_PRF_CODE_INFO{});
            ULONG32 got = 0;
            hr = info_->GetCodeInfo4(start, needed, &got, infos.data());
            if (failed(hr)) return false;
            if (got <= needed) {
                for (ULONG32 i = 0; i < got; ++i) bytes += infos[i].size;
                return true;
            }
            needed = got;
        }
        for (const COR_PRF_CODE_INFO& ci : infos) bytes += ci.size;
        return true;
    }

    ICorProfilerInfo9* info_ = nullptr;
    std::atomic<bool> shutdown_{false};

    std::mutex mu_;
    std::unordered_map<FunctionID, std::vector<UINT_PTR>> seen_;
    size_t maxVersions_ = 0;

    std::atomic<unsigned long long> started_{0}, finished_{0}, jitFailures_{0}, inlinings_{0};
    std::atomic<unsigned long long> versions_{0}, retiered_{0}, mapEntriesTotal_{0}, codeBytesTotal_{0};
    std::atomic<unsigned long long> queryFailures_{0};
};

DOCFIX_DEFINE_PROFILER(JitTieringMonitor)
