// dynamicmethods.cpp -- a code-inventory profiler: how much native code each kind of method produced.
//
// What it does
// ------------
// It accounts for every body of native code the runtime produces or adopts, by kind:
//   * JIT      -- ordinary methods with metadata compiled by the JIT (JITCompilationStarted/Finished;
//                 with tiered compilation one method can produce several bodies, each is counted once);
//   * R2R      -- precompiled (ReadyToRun) code the runtime found in an image
//                 (JITCachedFunctionSearchStarted/Finished);
//   * DYNAMIC  -- methods without metadata: IL stubs and LCG (DynamicMethod) methods
//                 (ICorProfilerCallback8::DynamicMethodJITCompilationStarted/Finished,
//                 ICorProfilerCallback9::DynamicMethodUnloaded), named with
//                 ICorProfilerInfo8::GetDynamicFunctionInfo and checked with IsFunctionDynamic.
// Code size is measured with ICorProfilerInfo9::GetNativeCodeStartAddresses + GetCodeInfo4 (every
// native body of a function), falling back to ICorProfilerInfo2::GetCodeInfo2 and, only if even
// ICorProfilerInfo2 is missing, to the obsolete ICorProfilerInfo::GetCodeInfo.  Every new body start is
// cross-checked with ICorProfilerInfo8::GetFunctionFromIP3, which must map it back to the same
// FunctionID.  In Shutdown it prints a summary (and nothing else calls into the runtime there).
//
// Interfaces: the newest ICorProfilerInfo it can get is used per method (Info, Info2, Info3, Info5,
// Info8, Info9 are queried separately; none but ICorProfilerInfo is required).  Everything needed is
// in the kit's headers except the COR_PRF_JIT_CACHE member values, declared below from the
// COR_PRF_JIT_CACHE documentation (FOUND = 0, NOT_FOUND = 1).
//
// Documentation followed (learn.microsoft.com, unmanaged profiling API), quoted:
//   * ICorProfilerCallback::Initialize -- the IUnknown is one "that the profiler must query for an
//     ICorProfilerInfo interface pointer"; "The Initialize call is the only opportunity to enable (or
//     disable) callbacks that are immutable."  The mask is set once, there.
//   * COR_PRF_HIGH_MONITOR -- "Provides flags in addition to those found in the COR_PRF_MONITOR
//     enumeration that the profiler can specify to the ICorProfilerInfo5::SetEventMask2 method when it
//     is loading."  COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS is set that way, for
//     DynamicMethodUnloaded ("Notifies the profiler whenever a dynamic method is garbage collected and
//     subsequently unloaded.").
//   * COR_PRF_MONITOR_JIT_COMPILATION (JITCompilation* callbacks) and COR_PRF_MONITOR_CACHE_SEARCHES
//     (JITCachedFunctionSearch* callbacks).  NOTE: no page says which flag gates
//     DynamicMethodJITCompilationStarted/Finished; the profiler relies on COR_PRF_MONITOR_JIT_COMPILATION
//     and reports what it saw.
//   * ICorProfilerCallback8::DynamicMethodJITCompilationStarted -- "This callback is triggered whenever a
//     dynamic method is JIT-compiled. This includes various IL stubs and LCG methods."; "functionId
//     values cannot be used to resolve to their metadata tokens, because dynamic methods have no
//     metadata." (no metadata API is ever called with a dynamic FunctionID); "The pILHeader pointer is
//     only valid during the callback." (the bytes are inspected inside the callback and never kept).
//   * ICorProfilerCallback8::DynamicMethodJITCompilationFinished -- hrStatus is "A value that indicates
//     whether the JIT compilation was successful." (only successful compilations are measured).
//   * ICorProfilerInfo8::GetDynamicFunctionInfo -- "Some methods like IL stubs or LCG do not have
//     associated metadata ... This API can be used to retrieve information about dynamic methods,
//     including the friendly name if available."
//   * ICorProfilerInfo8::IsFunctionDynamic -- "A function is considered dynamic if it has no metadata."
//   * ICorProfilerInfo8::GetFunctionFromIP3 -- "This method works for both dynamic and non-dynamic
//     methods."
//   * ICorProfilerInfo9::GetNativeCodeStartAddresses -- "When tiered compilation is enabled, a function
//     may have more than one native code body."  (reJitId 0: this profiler never requests ReJIT.)
//   * ICorProfilerInfo9::GetCodeInfo4 -- "Given the native code start address, returns the blocks of
//     virtual memory that store this code."; "GetCodeInfo4 can trigger a garbage collection." (no
//     profiler lock is held across any ICorProfilerInfo call).
//   * ICorProfilerInfo2::GetCodeInfo2 -- "After GetCodeInfo2 returns, you must verify that the codeInfos
//     buffer was large enough to contain all the COR_PRF_CODE_INFO structures." (single-pass with a
//     retry, as in "Caller-Allocated Buffers": "Be prepared to reallocate the buffer if it proves to be
//     too small."; a null buffer is only ever passed with size 0: "If InfoBuffer is null,
//     cBufferSizeStart must be 0.").
//   * ICorProfilerInfo::GetCodeInfo -- "This method is obsolete. Use the ICorProfilerInfo2::GetCodeInfo2
//     method instead." (used only when ICorProfilerInfo2 is unavailable).
//   * ICorProfilerCallback::JITCachedFunctionSearchStarted -- pbUseCachedFunction: "true if the execution
//     engine should use the cached version of a function (if available)" (always TRUE: this profiler
//     observes, it never forces JIT); "Profilers must support cases where multiple threads of a profiled
//     application are calling the same method simultaneously." (per-body de-duplication, atomics, a
//     mutex); "the profiler should use a lazy strategy for gathering function information." (the size
//     of a precompiled body is measured when the search finishes if it is already available, otherwise
//     the FunctionID is queued and measured lazily from a later JIT/cache callback).
//   * "Notification Threads in the Profiling API" -- "these callbacks are not serialized. Users must
//     protect their code by creating thread-safe data structures".
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."  Shutdown only prints and releases.
#include <algorithm>
#include <cinttypes>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// COR_PRF_JIT_CACHE (documented members, in order: COR_PRF_CACHED_FUNCTION_FOUND,
// COR_PRF_CACHED_FUNCTION_NOT_FOUND; "The value of COR_PRF_CACHED_FUNCTION_FOUND is zero").
constexpr COR_PRF_JIT_CACHE kCachedFunctionFound = 0;

constexpr const char* kTag = "[dynmethods]";

enum Kind { kJit = 0, kR2R = 1, kDynamic = 2, kKinds = 3 };

struct Body {
    UINT_PTR start;
    SIZE_T bytes;
    ULONG32 blocks;
};

struct DynRecord {
    std::string name;
    bool ilStub = false;
    bool confirmedDynamic = false;
    ULONG ilBytes = 0;
    ULONG sigBytes = 0;
    unsigned compiles = 0;
    unsigned long long codeBytes = 0;
    unsigned bodies = 0;
    bool unloaded = false;
};

}  // namespace

class DynamicMethodsProfiler : public CallbackBase {
public:
    // ------------------------------------------------------------------ startup
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "%s QueryInterface(ICorProfilerInfo) failed 0x%08x\n", kTag, (unsigned)hr);
            return failed(hr) ? hr : E_FAIL;
        }
        // Optional newer interfaces; each one is an independent reference released in Shutdown.
        Query(unk, IID_ICorProfilerInfo2, info2_);
        Query(unk, IID_ICorProfilerInfo3, info3_);
        Query(unk, IID_ICorProfilerInfo5, info5_);
        Query(unk, IID_ICorProfilerInfo8, info8_);
        Query(unk, IID_ICorProfilerInfo9, info9_);

        if (info3_ != nullptr) {
            WCHAR ver[64] = {};
            ULONG cch = 0;
            USHORT major = 0, minor = 0, build = 0, qfe = 0, clrId = 0;
            COR_PRF_RUNTIME_TYPE rt = 0;
            if (succeeded(info3_->GetRuntimeInformation(&clrId, &rt, &major, &minor, &build, &qfe,
                                                        sizeof(ver) / sizeof(ver[0]), &cch, ver))) {
                ver[sizeof(ver) / sizeof(ver[0]) - 1] = 0;
                std::snprintf(runtime_, sizeof(runtime_), "%s %u.%u.%u.%u", to_utf8(ver).c_str(), major, minor,
                              build, qfe);
            }
        }

        lowMask_ = COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES;
        highMask_ = COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS;
        if (info5_ != nullptr) {
            hr = info5_->SetEventMask2(lowMask_, highMask_);
            if (failed(hr)) {
                std::fprintf(stderr, "%s SetEventMask2(0x%08x, 0x%08x) failed 0x%08x; retrying without high flags\n",
                             kTag, lowMask_, highMask_, (unsigned)hr);
                highMask_ = 0;
                hr = info_->SetEventMask(lowMask_);
            }
        } else {
            highMask_ = 0;
            hr = info_->SetEventMask(lowMask_);
        }
        if (failed(hr)) {
            std::fprintf(stderr, "%s SetEventMask failed 0x%08x\n", kTag, (unsigned)hr);
            ReleaseAll();
            return hr;
        }
        std::fprintf(stderr, "%s initialized: runtime=%s info=%s mask=0x%08x high=0x%08x\n", kTag,
                     runtime_[0] ? runtime_ : "?", InfoLevel(), lowMask_, highMask_);
        return S_OK;
    }

    // ------------------------------------------------------------------ ordinary JIT
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID, BOOL) override {
        if (shutdown_.load()) return S_OK;
        ++jitStarted_;
        DrainPending();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load()) return S_OK;
        ++jitFinished_;
        if (failed(hrStatus)) {
            ++jitFailed_;
        } else {
            Attribute(fid, kJit, nullptr);
        }
        DrainPending();
        return S_OK;
    }

    // ------------------------------------------------------------------ precompiled (ReadyToRun) code
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchStarted(FunctionID, BOOL* pbUseCachedFunction) override {
        // Always let the runtime use the precompiled code: this profiler only observes.
        if (pbUseCachedFunction != nullptr) *pbUseCachedFunction = 1;
        if (shutdown_.load()) return S_OK;
        ++cacheSearches_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID fid, COR_PRF_JIT_CACHE result) override {
        if (shutdown_.load()) return S_OK;
        if (result == kCachedFunctionFound) {
            ++cacheFound_;
            // The body may not be published yet while the search is finishing; measure lazily then.
            if (Attribute(fid, kR2R, nullptr) == 0) {
                std::lock_guard<std::mutex> g(lock_);
                pending_.push_back(fid);
                ++pendingQueued_;
            }
        } else {
            ++cacheNotFound_;
        }
        DrainPending();
        return S_OK;
    }

    // ------------------------------------------------------------------ dynamic methods
    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationStarted(FunctionID fid, BOOL, LPCBYTE pILHeader,
                                                                 ULONG cbILHeader) override {
        if (shutdown_.load()) return S_OK;
        ++dynStarted_;

        // Everything about pILHeader is read here: "only valid during the callback".  The page calls it
        // "the method's IL header"; whether the bytes really start with a tiny/fat header whose size agrees
        // with cbILHeader is only counted (il_ptr_looks_like_header), never relied upon.
        bool headerConsistent = false;
        if (pILHeader != nullptr && cbILHeader > 0) {
            BYTE b0 = pILHeader[0];
            if ((b0 & 0x3) == 0x2) {  // CorILMethod_TinyFormat: size in the upper 6 bits
                headerConsistent = (1u + (b0 >> 2)) == cbILHeader;
            } else if ((b0 & 0x3) == 0x3 && cbILHeader >= 12) {  // CorILMethod_FatFormat
                ULONG code = (ULONG)pILHeader[4] | ((ULONG)pILHeader[5] << 8) | ((ULONG)pILHeader[6] << 16) |
                             ((ULONG)pILHeader[7] << 24);
                ULONG hdr = 4u * (pILHeader[1] >> 4);
                headerConsistent = hdr == 12 && code <= cbILHeader && code + hdr <= cbILHeader;
            }
        }
        if (headerConsistent) ++ilLooksLikeHeader_;
        ilBytesReported_ += cbILHeader;

        // Name (and module/signature) through the API made for functions without metadata.
        std::string name;
        ModuleID mod = 0;
        ULONG sigBytes = 0;
        bool named = false;
        if (info8_ != nullptr) {
            PCCOR_SIGNATURE sig = nullptr;
            WCHAR buf[256];
            ULONG cch = 0;
            HRESULT hr = info8_->GetDynamicFunctionInfo(fid, &mod, &sig, &sigBytes, 256, &cch, buf);
            if ((succeeded(hr) || hr == HRESULT_ERROR_INSUFFICIENT_BUFFER) && cch > 256) {
                std::vector<WCHAR> big(cch);
                ULONG cch2 = 0;
                hr = info8_->GetDynamicFunctionInfo(fid, &mod, &sig, &sigBytes, cch, &cch2, big.data());
                if (succeeded(hr)) name = to_utf8(big.data(), std::min<ULONG>(cch2, cch));
            } else if (succeeded(hr)) {
                name = to_utf8(buf, std::min<ULONG>(cch, 256));
            }
            if (succeeded(hr)) {
                named = true;
                ++dynNamed_;
            } else {
                ++dynNameFailed_;
                lastNameHr_ = hr;
            }
        }
        bool isDyn = false;
        if (info8_ != nullptr) {
            BOOL d = 0;
            if (succeeded(info8_->IsFunctionDynamic(fid, &d)) && d) {
                isDyn = true;
                ++dynConfirmed_;
            }
        }
        if (name.empty()) name = named ? "<unnamed>" : "<unknown>";

        std::lock_guard<std::mutex> g(lock_);
        DynRecord& r = dyn_[fid];
        if (r.name.empty() || r.name[0] == '<') r.name = name;
        r.ilStub = r.name.compare(0, 7, "IL_STUB") == 0;
        r.confirmedDynamic = r.confirmedDynamic || isDyn;
        r.ilBytes = cbILHeader;
        r.unloaded = false;
        if (named) r.sigBytes = sigBytes;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load()) return S_OK;
        ++dynFinished_;
        // The page declares hrStatus as BOOL but describes it as "A value that indicates whether the JIT
        // compilation was successful"; corprof.idl (and the kit's header) type it HRESULT, and it is read
        // as one (a BOOL reading would take S_OK == 0 for "failed").
        if (failed(hrStatus)) {
            ++dynFailed_;
            return S_OK;
        }
        std::vector<Body> fresh;
        unsigned long long bytes = Attribute(fid, kDynamic, &fresh);
        std::lock_guard<std::mutex> g(lock_);
        DynRecord& r = dyn_[fid];
        if (r.name.empty()) r.name = "<no-start-callback>";
        ++r.compiles;
        r.codeBytes += bytes;
        r.bodies += (unsigned)fresh.size();
        if (r.ilStub) {
            stubBytes_ += bytes;
            ++stubCompiles_;
        } else {
            lcgBytes_ += bytes;
            ++lcgCompiles_;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE DynamicMethodUnloaded(FunctionID fid) override {
        if (shutdown_.load()) return S_OK;
        ++dynUnloaded_;
        // The FunctionID is dead: forget its bodies (their addresses may be reused) and never pass
        // it to the runtime again.
        std::lock_guard<std::mutex> g(lock_);
        auto it = bodiesOf_.find(fid);
        if (it != bodiesOf_.end()) {
            for (UINT_PTR s : it->second) seen_.erase(s);
            bodiesOf_.erase(it);
        }
        auto d = dyn_.find(fid);
        if (d != dyn_.end()) d->second.unloaded = true;
        return S_OK;
    }

    // ------------------------------------------------------------------ shutdown
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(lock_);
        std::fprintf(stderr, "%s summary runtime=%s info=%s\n", kTag, runtime_[0] ? runtime_ : "?", InfoLevel());
        std::fprintf(stderr, "%s jit:     started=%u finished=%u failed=%u bodies=%u bytes=%llu\n", kTag,
                     jitStarted_.load(), jitFinished_.load(), jitFailed_.load(), bodies_[kJit], bytes_[kJit]);
        std::fprintf(stderr,
                     "%s r2r:     searches=%u found=%u notfound=%u bodies=%u bytes=%llu "
                     "(measured later=%u, no body reported=%u, still pending at shutdown=%zu)\n",
                     kTag, cacheSearches_.load(), cacheFound_.load(), cacheNotFound_.load(), bodies_[kR2R],
                     bytes_[kR2R], pendingQueued_, r2rNoBody_, pending_.size());
        std::fprintf(stderr,
                     "%s dynamic: started=%u finished=%u failed=%u unloaded=%u bodies=%u bytes=%llu "
                     "(il_stub: %u compiles %llu bytes; lcg/other: %u compiles %llu bytes)\n",
                     kTag, dynStarted_.load(), dynFinished_.load(), dynFailed_.load(), dynUnloaded_.load(),
                     bodies_[kDynamic], bytes_[kDynamic], stubCompiles_, stubBytes_, lcgCompiles_, lcgBytes_);
        std::fprintf(stderr,
                     "%s dynamic: distinct=%zu named=%u name_failed=%u(last 0x%08x) IsFunctionDynamic=%u "
                     "il_bytes_reported=%llu il_ptr_looks_like_header=%u\n",
                     kTag, dyn_.size(), dynNamed_.load(), dynNameFailed_.load(), (unsigned)lastNameHr_.load(),
                     dynConfirmed_.load(), ilBytesReported_.load(), ilLooksLikeHeader_.load());
        std::fprintf(stderr, "%s code:    measure_failed=%u ip_check ok=%u mismatch=%u unavailable=%u\n", kTag,
                     measureFailed_, ipOk_, ipMismatch_, ipUnavailable_);
        if (dynStarted_.load() == 0 && dynFinished_.load() == 0) {
            std::fprintf(stderr, "%s no dynamic method was JIT-compiled in this process\n", kTag);
        } else {
            std::vector<std::pair<unsigned long long, const DynRecord*>> top;
            for (auto& kv : dyn_) top.emplace_back(kv.second.codeBytes, &kv.second);
            std::sort(top.begin(), top.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
            for (size_t i = 0; i < top.size() && i < 5; ++i) {
                const DynRecord* r = top[i].second;
                std::fprintf(stderr, "%s   top%zu %-40s %6llu bytes %u body(ies) il=%u sig=%u%s%s\n", kTag,
                             i + 1, r->name.c_str(), r->codeBytes, r->bodies, r->ilBytes, r->sigBytes, r->confirmedDynamic ? "" : " (!dyn)",
                             r->unloaded ? " unloaded" : "");
            }
        }
        ReleaseAll();
        return S_OK;
    }

private:
    template <class T>
    static void Query(IUnknown* unk, REFIID iid, T*& out) {
        void* p = nullptr;
        if (succeeded(unk->QueryInterface(iid, &p)) && p != nullptr) out = static_cast<T*>(p);
    }

    const char* InfoLevel() const {
        if (info9_) return "ICorProfilerInfo9";
        if (info8_) return "ICorProfilerInfo8";
        if (info5_) return "ICorProfilerInfo5";
        if (info3_) return "ICorProfilerInfo3";
        if (info2_) return "ICorProfilerInfo2";
        return "ICorProfilerInfo";
    }

    void ReleaseAll() {
        if (info9_) info9_->Release();
        if (info8_) info8_->Release();
        if (info5_) info5_->Release();
        if (info3_) info3_->Release();
        if (info2_) info2_->Release();
        if (info_) info_->Release();
        info9_ = nullptr;
        info8_ = nullptr;
        info5_ = nullptr;
        info3_ = nullptr;
        info2_ = nullptr;
        info_ = nullptr;
    }

    // Size of one native body, given its start (ICorProfilerInfo9::GetCodeInfo4).
    bool SizeAt(UINT_PTR start, Body& out) {
        COR_PRF_CODE_INFO small[4];
        ULONG32 n = 0;
        HRESULT hr = info9_->GetCodeInfo4(start, 4, &n, small);
        if (failed(hr)) return false;
        const COR_PRF_CODE_INFO* ci = small;
        std::vector<COR_PRF_CODE_INFO> big;
        if (n > 4) {  // the buffer was too small: reallocate and ask again
            big.resize(n);
            ULONG32 n2 = 0;
            hr = info9_->GetCodeInfo4(start, n, &n2, big.data());
            if (failed(hr)) return false;
            n = std::min(n, n2);
            ci = big.data();
        }
        out.start = start;
        out.bytes = 0;
        out.blocks = n;
        for (ULONG32 i = 0; i < n; ++i) out.bytes += ci[i].size;
        return n > 0;
    }

    // All native bodies currently known for fid.  No profiler lock is held here.
    bool CollectBodies(FunctionID fid, std::vector<Body>& out) {
        out.clear();
        if (info9_ != nullptr) {
            UINT_PTR small[8];
            ULONG32 n = 0;
            HRESULT hr = info9_->GetNativeCodeStartAddresses(fid, 0, 8, &n, small);
            if (succeeded(hr)) {
                std::vector<UINT_PTR> addrs(small, small + std::min<ULONG32>(n, 8));
                if (n > 8) {
                    addrs.resize(n);
                    ULONG32 n2 = 0;
                    hr = info9_->GetNativeCodeStartAddresses(fid, 0, n, &n2, addrs.data());
                    if (failed(hr)) addrs.clear();
                    else addrs.resize(std::min(n, n2));
                }
                for (UINT_PTR a : addrs) {
                    Body b{};
                    if (a != 0 && SizeAt(a, b)) out.push_back(b);
                }
                if (!out.empty()) return true;
            }
        }
        if (info2_ != nullptr) {
            COR_PRF_CODE_INFO small[4];
            ULONG32 n = 0;
            HRESULT hr = info2_->GetCodeInfo2(fid, 4, &n, small);
            if (failed(hr) || n == 0) return false;
            const COR_PRF_CODE_INFO* ci = small;
            std::vector<COR_PRF_CODE_INFO> big;
            if (n > 4) {
                big.resize(n);
                ULONG32 n2 = 0;
                hr = info2_->GetCodeInfo2(fid, n, &n2, big.data());
                if (failed(hr)) return false;
                n = std::min(n, n2);
                ci = big.data();
            }
            Body b{ci[0].startAddress, 0, n};
            for (ULONG32 i = 0; i < n; ++i) b.bytes += ci[i].size;
            out.push_back(b);
            return true;
        }
        LPCBYTE start = nullptr;
        ULONG size = 0;
        if (succeeded(info_->GetCodeInfo(fid, &start, &size)) && start != nullptr) {  // obsolete fallback
            out.push_back(Body{reinterpret_cast<UINT_PTR>(start), size, 1});
            return true;
        }
        return false;
    }

    // Attributes every body of fid not seen before to `kind`; returns the bytes attributed.
    unsigned long long Attribute(FunctionID fid, Kind kind, std::vector<Body>* freshOut) {
        std::vector<Body> all;
        if (!CollectBodies(fid, all)) {
            std::lock_guard<std::mutex> g(lock_);
            if (kind != kR2R) ++measureFailed_;  // R2R bodies are retried lazily, not failures yet
            return 0;
        }
        std::vector<Body> fresh;
        {
            std::lock_guard<std::mutex> g(lock_);
            for (const Body& b : all) {
                if (seen_.insert(b.start).second) {
                    fresh.push_back(b);
                    bodiesOf_[fid].push_back(b.start);
                    bodies_[kind] += 1;
                    bytes_[kind] += b.bytes;
                }
            }
        }
        unsigned long long total = 0;
        for (const Body& b : fresh) {
            total += b.bytes;
            CheckIp(fid, b.start);
        }
        if (freshOut) *freshOut = fresh;
        return total;
    }

    void CheckIp(FunctionID fid, UINT_PTR start) {
        if (info8_ == nullptr) {
            std::lock_guard<std::mutex> g(lock_);
            ++ipUnavailable_;
            return;
        }
        FunctionID back = 0;
        ReJITID rejit = 0;
        HRESULT hr = info8_->GetFunctionFromIP3(reinterpret_cast<LPCBYTE>(start), &back, &rejit);
        std::lock_guard<std::mutex> g(lock_);
        if (failed(hr)) ++ipUnavailable_;
        else if (back == fid) ++ipOk_;
        else ++ipMismatch_;
    }

    // Lazy measurement of precompiled bodies whose code was not yet available when the search finished.
    void DrainPending() {
        FunctionID batch[16];
        size_t n = 0;
        {
            std::lock_guard<std::mutex> g(lock_);
            while (n < 16 && !pending_.empty()) {
                batch[n++] = pending_.front();
                pending_.pop_front();
            }
        }
        for (size_t i = 0; i < n; ++i) {
            std::vector<Body> all;
            if (!CollectBodies(batch[i], all)) {
                // Still not published: keep it for a later callback, but don't spin on it.
                std::lock_guard<std::mutex> g(lock_);
                // Observed: P/Invoke and InternalCall methods are "found" in the image but never get a
                // body the code-info methods report; after a few tries they are counted as body-less.
                if (++retries_[batch[i]] < 8) pending_.push_back(batch[i]);
                else {
                    retries_.erase(batch[i]);
                    ++r2rNoBody_;
                }
                continue;
            }
            Attribute(batch[i], kR2R, nullptr);
            std::lock_guard<std::mutex> g(lock_);
            retries_.erase(batch[i]);
        }
    }

    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo2* info2_ = nullptr;
    ICorProfilerInfo3* info3_ = nullptr;
    ICorProfilerInfo5* info5_ = nullptr;
    ICorProfilerInfo8* info8_ = nullptr;
    ICorProfilerInfo9* info9_ = nullptr;
    DWORD lowMask_ = 0, highMask_ = 0;
    char runtime_[96] = {};

    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> jitStarted_{0}, jitFinished_{0}, jitFailed_{0};
    std::atomic<unsigned> cacheSearches_{0}, cacheFound_{0}, cacheNotFound_{0};
    std::atomic<unsigned> dynStarted_{0}, dynFinished_{0}, dynFailed_{0}, dynUnloaded_{0};
    std::atomic<unsigned> dynNamed_{0}, dynNameFailed_{0}, dynConfirmed_{0}, ilLooksLikeHeader_{0};
    std::atomic<unsigned long long> ilBytesReported_{0};
    std::atomic<HRESULT> lastNameHr_{S_OK};

    std::mutex lock_;  // guards everything below
    std::unordered_set<UINT_PTR> seen_;
    std::unordered_map<FunctionID, std::vector<UINT_PTR>> bodiesOf_;
    std::unordered_map<FunctionID, DynRecord> dyn_;
    std::unordered_map<FunctionID, unsigned> retries_;
    std::deque<FunctionID> pending_;
    unsigned pendingQueued_ = 0, r2rNoBody_ = 0;
    unsigned bodies_[kKinds] = {};
    unsigned long long bytes_[kKinds] = {};
    unsigned stubCompiles_ = 0, lcgCompiles_ = 0;
    unsigned long long stubBytes_ = 0, lcgBytes_ = 0;
    unsigned measureFailed_ = 0, ipOk_ = 0, ipMismatch_ = 0, ipUnavailable_ = 0;
};

DOCFIX_DEFINE_PROFILER(DynamicMethodsProfiler)
