// jit_code_map.cpp -- the JIT code map a sampling profiler keeps to turn instruction pointers into
// methods.
//
// What it does
//   * Initialize: QueryInterface for ICorProfilerInfo2 (required) and ICorProfilerInfo9 (optional, used
//     for methods with several native bodies), then SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION |
//     COR_PRF_MONITOR_CACHE_SEARCHES).
//   * JITCompilationFinished (successful hrStatus only) and JITCachedFunctionSearchFinished (result
//     COR_PRF_CACHED_FUNCTION_FOUND, i.e. precompiled code the profiler "learns about otherwise"):
//       - GetCodeInfo2 with the two-call pattern -> native code extents of the current body;
//       - GetILToNativeMapping with the two-call pattern -> IL-to-native map of that body;
//       - if ICorProfilerInfo9 is available: GetNativeCodeStartAddresses (two-call) -> every native body
//         of the method (tiered compilation), and for each body not seen yet GetCodeInfo4 and
//         GetILToNativeMapping3 (both two-call);
//       - once per FunctionID: GetFunctionInfo2 (frameInfo 0, type-argument buffer by the two-call
//         pattern) -> ClassID/ModuleID/token; GetModuleMetaData(ofRead, IID_IMetaDataImport) then
//         IMetaDataImport::GetMethodProps and GetTypeDefProps (name buffers by the two-call pattern)
//         -> "Type::Method".
//     Every extent goes into an ordered map start -> (end, FunctionID).  A method compiled again
//     (tier-0 -> tier-1, or OSR) gets its new body added next to the old one; an extent that overlaps
//     an older different extent evicts the older one (reused memory).  Methods compiled more than once
//     are queued and re-scanned a little later from a subsequent JIT callback, because the new body
//     may not be listed yet while the compilation that produced it is still being reported.
//   * Self-check while the runtime is running (from JIT callbacks, never from Shutdown): every 8th
//     callback takes up to 3 recorded IPs (middle of an extent recorded earlier), looks them up in our
//     own map and with ICorProfilerInfo::GetFunctionFromIP, and counts agreement.
//   * Shutdown: no ICorProfilerInfo call.  The IPs that were checked are looked up once more in our own
//     map and compared with the FunctionID the runtime gave for them, then one line starting with
//     "jit_code_map:" is printed to stderr and the interfaces are released.
//
// Documentation relied on (learn.microsoft.com/dotnet/.../unmanaged-api/profiling/...)
//   * ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer." ; "The Initialize call is
//     the only opportunity to enable (or disable) callbacks that are immutable."  (the whole event mask
//     is set there, once)
//   * Caller-Allocated Buffers: "Double-pass method: Alternatively, call the method two times. First
//     call with a zero-length InfoBuffer parameter to obtain the correct buffer size. Then set the
//     buffer size to the value returned in pcBufferMax and call the function again." ; "If InfoBuffer
//     is null, cBufferSizeStart must be 0." ; "you must verify that InfoBuffer was large enough ...
//     If pcBufferMax points to a value that is larger than cBufferSizeStart, allocate a larger
//     InfoBuffer buffer, update cBufferSizeStart with the new, larger size, and call the method
//     again."  (fetch_buffer below loops until the returned total fits)
//   * GetCodeInfo2: "Gets the extents of native code associated with the specified FunctionID." ;
//     "The extents are sorted in order of increasing common intermediate language (CIL) offset." ;
//     "After GetCodeInfo2 returns, you must verify that the codeInfos buffer was large enough to
//     contain all the COR_PRF_CODE_INFO structures."
//   * GetCodeInfo3: "GetCodeInfo3 can trigger a garbage collection, whereas GetCodeInfo2 will not."
//     -- GetCodeInfo3 is only "appropriate" for ReJIT versions; ReJIT is not enabled here, so it is not
//     used (GetCodeInfo2 for the current body, GetCodeInfo4 per tiered body instead).
//   * GetILToNativeMapping: "To convey that certain ranges of native instructions correspond to
//     special regions of code (for example, the prolog), an entry in the array can have its ilOffset
//     field set to a value of the CorDebugIlToNativeMappingTypes enumeration." ; "After
//     GetILToNativeMapping returns, you must verify that the map buffer was large enough".
//   * COR_PRF_MONITOR enumeration: COR_PRF_MONITOR_JIT_COMPILATION "Controls the JITCompilation*,
//     JITFunctionPitched, and JITInlining callbacks in the ICorProfilerCallback interface." ;
//     COR_PRF_MONITOR_CACHE_SEARCHES "Controls the JITCachedFunctionSearch* callbacks in the
//     ICorProfilerCallback interface." ; COR_PRF_ENABLE_JIT_MAPS "Deprecated. Allows the profiler to
//     obtain IL-to-native maps by using GetILToNativeMapping. Starting with the .NET Framework 2.0, the
//     runtime always tracks IL-to-native maps; therefore, this flag is always considered to be set."
//     -- so the deprecated flag is not set.
//   * JITCompilationFinished: hrStatus "A value indicating whether compilation was successful."
//     (failed compilations are counted and skipped)
//   * ICorProfilerInfo9::GetNativeCodeStartAddresses: "Given a functionId and rejitId, enumerates the
//     native code start address of all jitted versions of this code that currently exist." ; "When
//     tiered compilation is enabled, a function may have more than one native code body."
//   * ICorProfilerInfo9::GetILToNativeMapping3 / GetCodeInfo4: "Given the native code start address,
//     returns the native to IL mapping information for this jitted version of the code." / "returns
//     the blocks of virtual memory that store this code."
//   * GetFunctionInfo2: frameInfo 0 -- "Zero: The exact ClassID and type arguments cannot be
//     determined. That is, the ClassID might be null and some type arguments might come back as
//     Object." (so a 0 ClassID is accepted) ; "After GetFunctionInfo2 returns, you must verify that the
//     typeArgs buffer was large enough to contain all the ClassID values."
//   * GetFunctionInfo2 remarks: "The profiler code can call ICorProfilerInfo::GetModuleMetaData to
//     obtain a metadata interface for a given module. The metadata token that is returned to the
//     location referenced by pToken can then be used to access the metadata for the function."
//   * GetModuleMetaData: "Only the ofRead, ofWrite and ofNoTransform bits are valid." ; "Some modules
//     (such as resource modules) have no metadata. In those cases, GetModuleMetaData will return an
//     HRESULT value of S_FALSE, and a null in *ppOut."
//   * GetFunctionFromIP: "Maps a managed code instruction pointer to a FunctionID."
//   * CORPROF_E_UNSUPPORTED_CALL_SEQUENCE: GetFunctionFromIP, GetFunctionInfo2 and GetCodeInfo2 are in
//     the list of methods that "are safe and specifically support asynchronous calls"; the JIT
//     callbacks are not among the "Callback methods that forbid garbage collections", and none of the
//     methods called here is among the "Informational methods that trigger garbage collections".
//   * JITCompilationFinished fIsSafeToBlock: "Although a value of true will not harm the runtime, it
//     can skew the profiling results."  Our lock is held only for map updates, never across a runtime
//     call, so blocking is short either way.
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//     the Shutdown method is called." and "Certain immutable events may still occur after shutdown;
//     the profiler should take care to return immediately when this occurs."
//
// Ambiguities and the reading chosen
//   * Shutdown: "cannot safely call ... after the Shutdown method is called" vs "undefined behavior
//     after the Shutdown method returns".  Safe reading: no ICorProfilerInfo call inside Shutdown (other
//     than Release).  The brief's "at Shutdown look up a few IPs ... compare with GetFunctionFromIP" is
//     therefore split: GetFunctionFromIP is called during the run from JIT callbacks; at Shutdown the
//     same IPs are looked up through our own (final) map and compared with those runtime answers.
//   * Caller-allocated buffers: the pages do not say which HRESULT the size-probing first call (null
//     buffer, size 0) returns.  The reading used: a failing probe that still reports a non-zero total
//     is treated as a size answer; a failing probe with no total is a failure.
//   * GetCodeInfo2 on a method with several tiered bodies: the page does not say which body is
//     described.  It is treated as "one current body"; all bodies come from GetNativeCodeStartAddresses.
//     The first extent (lowest CIL offset) is taken as the body's start address (the key used to avoid
//     counting a body twice).
//   * JITCachedFunctionSearchFinished does not document whether the code is already queryable; a
//     failing GetCodeInfo2 there is tallied and the method is queued for a later retry.
//   * Dynamic methods (DynamicMethodJITCompilationFinished) are not mapped: they have no metadata
//     ("functionId values cannot be used to resolve to their metadata tokens") and their code can be
//     freed; tracking that needs the high event mask, which this profiler does not use.
//   * Code of collectible assemblies can be unloaded; this profiler does not track unloads, so a stale
//     extent would only show up as a disagreeing lookup (GetFunctionFromIP of such an IP is not
//     dereferenced by us).  Queued re-scans are bounded and happen soon after the compilation.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr COR_PRF_JIT_CACHE kCachedFunctionFound = 0;  // COR_PRF_JIT_CACHE: COR_PRF_CACHED_FUNCTION_FOUND
constexpr mdToken kTokenTypeMask = 0xFF000000u;
constexpr mdToken kMdtMethodDef = 0x06000000u;
constexpr mdToken kMdtTypeDef = 0x02000000u;

// Double-pass caller-allocated buffer: call(count, &total, buffer).
template <class T, class Call>
HRESULT fetch_buffer(Call call, std::vector<T>& out) {
    out.clear();
    ULONG32 total = 0;
    HRESULT hr = call(0, &total, nullptr);  // "If InfoBuffer is null, cBufferSizeStart must be 0."
    if (failed(hr) && total == 0) return hr;
    for (int attempt = 0; attempt < 6; ++attempt) {
        if (total == 0) return S_OK;
        out.resize(total);
        ULONG32 available = 0;
        hr = call(total, &available, out.data());
        if (failed(hr)) {
            out.clear();
            return hr;
        }
        if (available <= total) {  // everything fitted: keep exactly what was returned
            out.resize(available);
            return hr;
        }
        total = available;  // grew between the calls: reallocate and ask again
    }
    out.clear();
    return E_FAIL;
}

struct Body {
    UINT_PTR key = 0;                        // start address of the body
    std::vector<COR_PRF_CODE_INFO> extents;  // native code blocks
    size_t mapEntries = 0;                   // IL-to-native map entries
    size_t mapSpecial = 0;                   // entries whose ilOffset is a CorDebugIlToNativeMappingTypes value
};

struct Extent {
    UINT_PTR end = 0;
    FunctionID fid = 0;
};

struct MethodRec {
    std::string name;
    ClassID cls = 0;
    ModuleID module = 0;
    mdToken token = 0;
    ULONG32 typeArgs = 0;
    unsigned compiles = 0;
    unsigned bodies = 0;
    bool named = false;
    bool cached = false;
};

struct Verified {
    UINT_PTR ip = 0;
    FunctionID runtimeFid = 0;
};

}  // namespace

class JitCodeMapProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[jit_code_map] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_FAIL;
        }
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo9, reinterpret_cast<void**>(&info9_)))) info9_ = nullptr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES);
        if (failed(hr)) {
            std::fprintf(stderr, "[jit_code_map] SetEventMask failed 0x%08x\n", (unsigned)hr);
            if (info9_) info9_->Release();
            info9_ = nullptr;
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        if (failed(hrStatus)) {
            ++jitFailed_;
            return S_OK;
        }
        ++jitFinished_;
        record_function(functionId, /*cached=*/false, /*rescan=*/false);
        after_callback();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID functionId, COR_PRF_JIT_CACHE result) override {
        Scope scope(*this);
        if (!scope.active) return S_OK;
        if (result != kCachedFunctionFound) return S_OK;
        ++cachedFound_;
        record_function(functionId, /*cached=*/true, /*rescan=*/false);
        after_callback();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        bool drained = wait_for_inflight();

        std::lock_guard<std::mutex> lock(mutex_);
        // Re-check, through the final map only, the IPs the runtime answered for during the run.
        size_t finalAgree = 0;
        for (const Verified& v : verified_) {
            if (lookup_locked(v.ip) == v.runtimeFid) ++finalAgree;
        }
        size_t recompiled = 0, named = 0, multiBody = 0;
        for (const auto& kv : methods_) {
            if (kv.second.compiles > 1) ++recompiled;
            if (kv.second.named) ++named;
            if (kv.second.bodies > 1) ++multiBody;
        }
        std::string example = exampleName_.empty() ? "-" : exampleName_;
        std::fprintf(stderr,
                     "jit_code_map: methods=%zu named=%zu jit_finished=%u jit_failed=%u cached_found=%u "
                     "recompiled=%zu multi_body=%zu bodies=%zu ranges=%zu evicted=%u mappings=%llu "
                     "special_mappings=%llu code_info_unavailable=%u deferred=%u rescans=%u rescan_new_bodies=%u "
                     "lookups=%u agreeing=%u "
                     "mismatched=%u runtime_no_answer=%u final_map_agree=%zu/%zu info9=%s example%s=\"%s\"\n",
                     methods_.size(), named, jitFinished_.load(), jitFailed_.load(), cachedFound_.load(), recompiled,
                     multiBody, bodies_.size(), extents_.size(), evicted_, (unsigned long long)mappings_,
                     (unsigned long long)specialMappings_, codeInfoFailed_.load(), deferred_, rescans_.load(), rescanFound_, lookups_,
                     lookupsAgree_, lookupsMismatch_, runtimeNoAnswer_, finalAgree, verified_.size(),
                     info9_ ? "yes" : "no", exampleIsRecompiled_ ? "_recompiled" : "", example.c_str());

        if (drained) {
            if (info9_ != nullptr) info9_->Release();
            info9_ = nullptr;
            if (info_ != nullptr) info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // ------------------------------------------------------------------ runtime queries (no lock held)
    void collect_bodies(FunctionID fid, std::vector<Body>& bodies) {
        bodies.clear();
        // Current body via GetCodeInfo2 + GetILToNativeMapping.
        Body current;
        HRESULT hr = fetch_buffer<COR_PRF_CODE_INFO>(
            [&](ULONG32 n, ULONG32* total, COR_PRF_CODE_INFO* buf) { return info_->GetCodeInfo2(fid, n, total, buf); },
            current.extents);
        if (succeeded(hr) && !current.extents.empty()) {
            current.key = current.extents.front().startAddress;
            std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map;
            if (succeeded(fetch_buffer<COR_DEBUG_IL_TO_NATIVE_MAP>(
                    [&](ULONG32 n, ULONG32* total, COR_DEBUG_IL_TO_NATIVE_MAP* buf) {
                        return info_->GetILToNativeMapping(fid, n, total, buf);
                    },
                    map))) {
                count_map(map, current);
            }
            bodies.push_back(std::move(current));
        }
        // Every tiered body via ICorProfilerInfo9.
        if (info9_ == nullptr) return;
        std::vector<UINT_PTR> starts;
        hr = fetch_buffer<UINT_PTR>(
            [&](ULONG32 n, ULONG32* total, UINT_PTR* buf) {
                return info9_->GetNativeCodeStartAddresses(fid, 0, n, total, buf);
            },
            starts);
        if (failed(hr)) return;
        for (UINT_PTR start : starts) {
            if (start == 0) continue;
            bool have = false;
            for (const Body& b : bodies) have = have || b.key == start;
            if (have || known_body(start)) continue;
            Body b;
            b.key = start;
            if (failed(fetch_buffer<COR_PRF_CODE_INFO>(
                    [&](ULONG32 n, ULONG32* total, COR_PRF_CODE_INFO* buf) {
                        return info9_->GetCodeInfo4(start, n, total, buf);
                    },
                    b.extents)) ||
                b.extents.empty())
                continue;
            std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map;
            if (succeeded(fetch_buffer<COR_DEBUG_IL_TO_NATIVE_MAP>(
                    [&](ULONG32 n, ULONG32* total, COR_DEBUG_IL_TO_NATIVE_MAP* buf) {
                        return info9_->GetILToNativeMapping3(start, n, total, buf);
                    },
                    map))) {
                count_map(map, b);
            }
            bodies.push_back(std::move(b));
        }
    }

    static void count_map(const std::vector<COR_DEBUG_IL_TO_NATIVE_MAP>& map, Body& b) {
        b.mapEntries = map.size();
        // CorDebugIlToNativeMappingTypes: NO_MAPPING = -1, PROLOG = -2, EPILOG = -3 (as ULONG32).
        for (const auto& e : map)
            if (e.ilOffset >= 0xFFFFFFFDu) ++b.mapSpecial;
    }

    bool resolve_name(FunctionID fid, MethodRec& rec) {
        ClassID cls = 0;
        ModuleID module = 0;
        mdToken token = 0;
        ULONG32 nTypeArgs = 0;
        HRESULT hr = info_->GetFunctionInfo2(fid, 0, &cls, &module, &token, 0, &nTypeArgs, nullptr);
        if (failed(hr) && nTypeArgs == 0) return false;
        if (nTypeArgs > 0) {
            // Two-call pattern for the type-argument buffer (its contents are not needed beyond a count).
            std::vector<ClassID> args(nTypeArgs);
            ULONG32 total = 0;
            hr = info_->GetFunctionInfo2(fid, 0, &cls, &module, &token, nTypeArgs, &total, args.data());
            if (failed(hr)) return false;
            nTypeArgs = total;
        }
        rec.cls = cls;
        rec.module = module;
        rec.token = token;
        rec.typeArgs = nTypeArgs;
        if ((token & kTokenTypeMask) != kMdtMethodDef || module == 0) return false;

        IUnknown* unk = nullptr;
        hr = info_->GetModuleMetaData(module, ofRead, IID_IMetaDataImport, &unk);
        if (hr != S_OK || unk == nullptr) {  // S_FALSE: "a null in *ppOut" (no metadata)
            if (unk) unk->Release();
            return false;
        }
        IMetaDataImport* import = nullptr;
        hr = unk->QueryInterface(IID_IMetaDataImport, reinterpret_cast<void**>(&import));
        unk->Release();
        if (failed(hr) || import == nullptr) return false;

        std::string method, type;
        mdTypeDef owner = 0;
        ULONG needed = 0;
        hr = import->GetMethodProps(token, &owner, nullptr, 0, &needed, nullptr, nullptr, nullptr, nullptr, nullptr);
        if (succeeded(hr) && needed > 0) {
            std::vector<WCHAR> buf(needed);
            ULONG got = 0;
            hr = import->GetMethodProps(token, &owner, buf.data(), needed, &got, nullptr, nullptr, nullptr, nullptr,
                                        nullptr);
            if (succeeded(hr)) method = to_utf8(buf.data(), std::min<ULONG>(got, needed));
        }
        if ((owner & kTokenTypeMask) == kMdtTypeDef && (owner & 0x00FFFFFFu) != 0) {
            ULONG tneeded = 0;
            HRESULT thr = import->GetTypeDefProps(owner, nullptr, 0, &tneeded, nullptr, nullptr);
            if (succeeded(thr) && tneeded > 0) {
                std::vector<WCHAR> tbuf(tneeded);
                ULONG tgot = 0;
                thr = import->GetTypeDefProps(owner, tbuf.data(), tneeded, &tgot, nullptr, nullptr);
                if (succeeded(thr)) type = to_utf8(tbuf.data(), std::min<ULONG>(tgot, tneeded));
            }
        }
        import->Release();
        if (method.empty()) return false;
        rec.name = type.empty() ? method : type + "::" + method;
        return true;
    }

    // ------------------------------------------------------------------ map maintenance
    bool known_body(UINT_PTR key) {
        std::lock_guard<std::mutex> lock(mutex_);
        return bodies_.count(key) != 0;
    }

    FunctionID lookup_locked(UINT_PTR ip) const {
        auto it = extents_.upper_bound(ip);
        if (it == extents_.begin()) return 0;
        --it;
        return ip < it->second.end ? it->second.fid : 0;
    }

    void insert_extent_locked(UINT_PTR start, SIZE_T size, FunctionID fid) {
        if (size == 0) return;
        UINT_PTR end = start + size;
        // Evict older extents that overlap [start, end) (memory reused for other code).
        auto it = extents_.upper_bound(start);
        if (it != extents_.begin()) {
            auto prev = std::prev(it);
            if (prev->second.end > start) it = prev;
        }
        while (it != extents_.end() && it->first < end) {
            if (it->first == start && it->second.end == end && it->second.fid == fid) return;  // same extent
            it = extents_.erase(it);
            ++evicted_;
        }
        extents_.emplace(start, Extent{end, fid});
    }

    void record_function(FunctionID fid, bool cached, bool rescan) {
        std::vector<Body> bodies;
        collect_bodies(fid, bodies);

        bool needName = false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            MethodRec& rec = methods_[fid];
            if (!rescan) ++rec.compiles;
            rec.cached = rec.cached || cached;
            needName = !rec.named;
        }
        MethodRec resolved;
        bool gotName = needName && resolve_name(fid, resolved);

        std::lock_guard<std::mutex> lock(mutex_);
        MethodRec& rec = methods_[fid];
        if (gotName && !rec.named) {
            rec.name = std::move(resolved.name);
            rec.cls = resolved.cls;
            rec.module = resolved.module;
            rec.token = resolved.token;
            rec.typeArgs = resolved.typeArgs;
            rec.named = true;
        }
        // Keep one example name for the summary, preferring a method that was compiled more than once.
        if (rec.named && (exampleName_.empty() || (rec.compiles > 1 && !exampleIsRecompiled_))) {
            exampleName_ = rec.name;
            exampleIsRecompiled_ = rec.compiles > 1;
        }
        if (bodies.empty() && !rescan) {
            ++codeInfoFailed_;
            if (cached) {
                ++deferred_;
                pending_.push_back({fid, 3});
            }
        }
        for (Body& b : bodies) {
            if (!bodies_.insert(b.key).second) continue;  // body already mapped
            if (rescan) ++rescanFound_;
            ++rec.bodies;
            mappings_ += b.mapEntries;
            specialMappings_ += b.mapSpecial;
            for (const COR_PRF_CODE_INFO& ci : b.extents) insert_extent_locked(ci.startAddress, ci.size, fid);
            const COR_PRF_CODE_INFO& first = b.extents.front();
            if (first.size > 0 && samples_.size() < 4096) samples_.push_back(first.startAddress + first.size / 2);
        }
        // A method compiled again may get its new body listed only after this callback: re-scan later.
        if (!rescan && rec.compiles > 1 && info9_ != nullptr) pending_.push_back({fid, 2});
    }

    // Runs at the end of a JIT callback: bounded re-scans and the GetFunctionFromIP self-check.
    void after_callback() {
        unsigned n = ++callbacks_;
        // 1. at most two queued re-scans per callback
        for (int i = 0; i < 2; ++i) {
            Pending p{0, 0};
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (pending_.empty()) break;
                p = pending_.front();
                pending_.pop_front();
            }
            ++rescans_;
            size_t before;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                before = bodies_.size();
            }
            record_function(p.fid, false, /*rescan=*/true);
            std::lock_guard<std::mutex> lock(mutex_);
            if (bodies_.size() == before && p.retries > 1) pending_.push_back({p.fid, p.retries - 1});
        }
        // 2. every 8th callback: compare up to 3 earlier IPs with GetFunctionFromIP
        if (n % 8 != 0) return;
        std::vector<UINT_PTR> ips;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (int i = 0; i < 3 && !samples_.empty(); ++i) {
                ips.push_back(samples_[sampleCursor_ % samples_.size()]);
                sampleCursor_ += 7;  // stride through the sample list
            }
        }
        for (UINT_PTR ip : ips) {
            FunctionID runtimeFid = 0;
            HRESULT hr = info_->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(ip), &runtimeFid);
            std::lock_guard<std::mutex> lock(mutex_);
            ++lookups_;
            if (failed(hr) || runtimeFid == 0) {
                ++runtimeNoAnswer_;
                continue;
            }
            FunctionID mine = lookup_locked(ip);
            if (mine == runtimeFid) {
                ++lookupsAgree_;
            } else {
                ++lookupsMismatch_;
            }
            if (verified_.size() < 512) verified_.push_back({ip, runtimeFid});
        }
    }

    struct Scope {
        explicit Scope(JitCodeMapProfiler& p) : owner(p) {
            owner.inflight_.fetch_add(1);
            active = !owner.shutdown_.load() && owner.info_ != nullptr;
        }
        ~Scope() { owner.inflight_.fetch_sub(1); }
        JitCodeMapProfiler& owner;
        bool active = false;
    };

    bool wait_for_inflight() {
        for (int i = 0; i < 2000; ++i) {
            if (inflight_.load() == 0) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return inflight_.load() == 0;
    }

    struct Pending {
        FunctionID fid;
        int retries;
    };

    ICorProfilerInfo2* info_ = nullptr;
    ICorProfilerInfo9* info9_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<int> inflight_{0};

    std::atomic<unsigned> jitFinished_{0}, jitFailed_{0}, cachedFound_{0}, codeInfoFailed_{0}, rescans_{0};
    std::atomic<unsigned> callbacks_{0};

    // Everything below is guarded by mutex_.
    std::mutex mutex_;
    std::unordered_map<FunctionID, MethodRec> methods_;
    std::map<UINT_PTR, Extent> extents_;
    std::unordered_set<UINT_PTR> bodies_;
    std::deque<Pending> pending_;
    std::vector<UINT_PTR> samples_;
    size_t sampleCursor_ = 0;
    std::vector<Verified> verified_;
    unsigned long long mappings_ = 0, specialMappings_ = 0;
    unsigned deferred_ = 0, rescanFound_ = 0;
    unsigned evicted_ = 0, lookups_ = 0, lookupsAgree_ = 0, lookupsMismatch_ = 0, runtimeNoAnswer_ = 0;
    std::string exampleName_;
    bool exampleIsRecompiled_ = false;
};

DOCFIX_DEFINE_PROFILER(JitCodeMapProfiler)
