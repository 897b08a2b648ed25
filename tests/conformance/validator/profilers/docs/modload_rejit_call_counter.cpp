// modload_rejit_call_counter.cpp -- a call counter that instruments the app's module the moment it
// loads, re-instruments it (with its inliners) once warm, reads the ReJIT IDs, and reverts.
//
// What it does (the shape of a "instrument on module load" APM agent):
//   * Initialize: QueryInterface for ICorProfilerInfo10, SetEventMask(MODULE_LOADS | JIT_COMPILATION
//     | COR_PRF_ENABLE_REJIT), start one std::thread of its own (the "control thread").
//   * ModuleLoadFinished (app.dll only): picks every method with an IL body as a target and, to catch
//     the very first calls, asks for wave 1 right there: RequestReJIT(targets).   <-- the BUG line
//   * Control thread: when wave 1 has counted 10 calls or 100 ms passed, asks for wave 2 with
//     RequestReJITWithInliners(COR_PRF_REJIT_BLOCK_INLINING, targets) so callers that had inlined a
//     target before wave 1 are recompiled too; after 10 more calls or 100 ms it reads GetReJITIDs for
//     every FunctionID the ReJIT callbacks reported and calls RequestRevert(targets, status[]).
//   * GetReJITParameters: original IL (GetILFunctionBody) + 15-byte counter prologue (ldc.i8 &counter;
//     conv.i; dup; ldind.i4; ldc.i4.1; add; stind.i4), written with a fat header, EH clauses re-emitted
//     in fat form with offsets shifted by 15; the counter is per wave and per method.
//   * ReJITCompilationStarted/Finished, ReJITError: counted; FunctionIDs kept for GetReJITIDs.
//   * Shutdown: joins the control thread, prints "modload_rejit_call_counter: requested=<n> ...".
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//   * ICorProfilerInfo4::RequestReJIT -- "You must enable JIT recompilation during initialization by
//     using the ICorProfilerInfo::SetEventMask method to set the COR_PRF_ENABLE_REJIT flag."; "If any
//     of the specified functions have already been JIT-recompiled, requesting recompilation is
//     equivalent to reverting and recompiling the function." (wave 2 simply replaces wave 1).
//   * ICorProfilerInfo10::RequestReJITWithInliners -- "RequestReJIT doesn't track inlined methods.
//     ... This method, RequestReJITWithInliners, can be called to guarantee that the full set of
//     inliners is ReJITted as well."; dwRejitFlags is "A bitmask of COR_PRF_REJIT_FLAGS."
//     COR_PRF_REJIT_BLOCK_INLINING: "ReJITted methods will be blocked from being inlined in other
//     methods."
//   * ICorProfilerCallback4::GetReJITParameters / ICorProfilerFunctionControl::SetILFunctionBody --
//     cbNewILMethodHeader is "The total size of the new CIL, including the header and any structures
//     that come after the body."; "The profiler can free the memory used for its CIL body after
//     SetILFunctionBody returns."
//   * ICorProfilerInfo4::RequestRevert -- "the returned status array must be checked to determine
//     which functions were successfully reverted."
//   * ICorProfilerInfo4::GetReJITIDs -- "It follows the same usage pattern as other ICorProfilerInfo
//     functions that accept caller-allocated buffers."
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." (thread joined first)
//   * ECMA-335 II.25.4 method header / EH section layout (tiny vs fat, sections at the next 4-byte
//     boundary after the code, 24-byte fat clauses).
//
// THE BUG (deliberate, one line, marked with the BUG comment below): the wave-1 RequestReJIT is made inside the
// ModuleLoadFinished callback, on the CLR-created thread that is loading the module, instead of being
// handed to the control thread.  Agents ship this because it "works" in testing and catches the first
// calls; the document says RequestReJIT may suspend the runtime and trigger a GC and must come from a
// thread the profiler created.  Everything else (IL, revert, IDs, thread joining) is done as in
// rejit_probe_agent.cpp.
//
// Ambiguities met:
//   * GetReJITParameters is "issued only once per function", yet wave 2 (a new request for an already
//     rejitted method) gets a second GetReJITParameters: "once" seems to mean once per request.
//   * The thread rule is written on RequestReJIT's page only; RequestReJITWithInliners (which also
//     recompiles, and more) and RequestRevert do not repeat it.  This profiler calls both of those
//     from its own thread anyway.
//   * Whether a module is "fully loaded" for ReJIT purposes inside ModuleLoadFinished (ReJITError's
//     CORPROF_E_DATAINCOMPLETE: "The module is not fully loaded yet") is not said.
//   * The probe's increment is not atomic; counts are lower bounds.
#include "common.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace docfix;

namespace {

constexpr ULONG kMaxTargets = 64;
constexpr ULONG kPrologueLen = 15;

std::uint32_t rd16(const BYTE* p) { return p[0] | (p[1] << 8); }
std::uint32_t rd32(const BYTE* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24); }
void put16(std::vector<BYTE>& v, std::uint32_t x) { v.push_back(BYTE(x)); v.push_back(BYTE(x >> 8)); }
void put32(std::vector<BYTE>& v, std::uint32_t x) { put16(v, x & 0xFFFF); put16(v, x >> 16); }

struct Clause { std::uint32_t flags, tryOff, tryLen, hOff, hLen, tokOrFilter; };

// Builds fat-header(+prologue) version of the method at hdr. Returns false if it cannot parse it.
bool BuildProbedBody(const BYTE* hdr, ULONG size, std::int32_t* counter, std::vector<BYTE>& out) {
    if (hdr == nullptr || size < 1) return false;
    std::uint32_t flags = 0, maxStack = 8, codeSize = 0, localTok = 0, hsize = 1;
    std::vector<Clause> clauses;
    if ((hdr[0] & 3) == 2) {  // tiny: size in the upper 6 bits, no locals, no sections
        codeSize = hdr[0] >> 2;
    } else if ((hdr[0] & 3) == 3) {  // fat
        if (size < 12) return false;
        std::uint32_t w = rd16(hdr);
        flags = w & 0x0FFF;
        hsize = (w >> 12) * 4;
        maxStack = rd16(hdr + 2);
        codeSize = rd32(hdr + 4);
        localTok = rd32(hdr + 8);
        if (hsize < 12) return false;
        if (flags & 0x8) {  // CorILMethod_MoreSects
            std::uint32_t pos = (hsize + codeSize + 3) & ~3u;
            for (;;) {
                if (size >= hsize + codeSize + 4 && pos + 4 > size) return false;
                const BYTE* s = hdr + pos;
                BYTE kind = s[0];
                bool fat = (kind & 0x40) != 0;
                std::uint32_t dataSize = fat ? (s[1] | (s[2] << 8) | (s[3] << 16)) : s[1];
                if (dataSize < 4) return false;
                if ((kind & 0x3F) == 1) {  // CorILMethod_Sect_EHTable
                    std::uint32_t n = (dataSize - 4) / (fat ? 24 : 12);
                    for (std::uint32_t i = 0; i < n; ++i) {
                        const BYTE* c = s + 4 + i * (fat ? 24 : 12);
                        Clause cl;
                        if (fat) {
                            cl = {rd32(c), rd32(c + 4), rd32(c + 8), rd32(c + 12), rd32(c + 16), rd32(c + 20)};
                        } else {
                            cl = {rd16(c), rd16(c + 2), c[4], rd16(c + 5), c[7], rd32(c + 8)};
                        }
                        clauses.push_back(cl);
                    }
                }
                if (!(kind & 0x80)) break;  // CorILMethod_Sect_MoreSects
                pos = (pos + dataSize + 3) & ~3u;
            }
        }
    } else {
        return false;
    }
    if (hsize + codeSize > size) return false;
    const BYTE* code = hdr + hsize;

    out.clear();
    std::uint32_t newFlags = (flags & 0x0FF0 & ~0x8u) | 0x3 | (clauses.empty() ? 0 : 0x8);
    put16(out, newFlags | (3u << 12));
    put16(out, maxStack < 3 ? 3 : maxStack);
    put32(out, codeSize + kPrologueLen);
    put32(out, localTok);
    // Prologue: *(int32*)counter += 1
    out.push_back(0x21);  // ldc.i8
    std::uint64_t addr = reinterpret_cast<std::uint64_t>(counter);
    for (int i = 0; i < 8; ++i) out.push_back(BYTE(addr >> (8 * i)));
    const BYTE tail[] = {0xD3 /*conv.i*/, 0x25 /*dup*/, 0x4A /*ldind.i4*/, 0x17 /*ldc.i4.1*/,
                         0x58 /*add*/, 0x54 /*stind.i4*/};
    out.insert(out.end(), tail, tail + sizeof tail);
    out.insert(out.end(), code, code + codeSize);
    if (!clauses.empty()) {
        while (out.size() % 4) out.push_back(0);
        std::uint32_t dataSize = 4 + 24 * std::uint32_t(clauses.size());
        out.push_back(0x01 | 0x40);  // EHTable | FatFormat, no more sections
        out.push_back(BYTE(dataSize)); out.push_back(BYTE(dataSize >> 8)); out.push_back(BYTE(dataSize >> 16));
        for (const Clause& c : clauses) {
            put32(out, c.flags);
            put32(out, c.tryOff + kPrologueLen);
            put32(out, c.tryLen);
            put32(out, c.hOff + kPrologueLen);
            put32(out, c.hLen);
            put32(out, (c.flags & 0x1) ? c.tokOrFilter + kPrologueLen : c.tokOrFilter);  // filter offset
        }
    }
    return true;
}

}  // namespace
// COR_PRF_REJIT_FLAGS (corprof.idl, "COR_PRF_REJIT_FLAGS enumeration"); not in the kit's headers.
constexpr DWORD kRejitBlockInlining = 0x1;  // COR_PRF_REJIT_BLOCK_INLINING

class ModloadRejitCallCounter : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[modload_rejit_call_counter] QueryInterface(ICorProfilerInfo10) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        // ReJITCompilationStarted/Finished are delivered under COR_PRF_MONITOR_JIT_COMPILATION.
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_ENABLE_REJIT);
        if (failed(hr)) {
            std::fprintf(stderr, "[modload_rejit_call_counter] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        worker_ = std::thread([this] { ControlThread(); });
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus) || appModule_.load() != 0) return S_OK;
        WCHAR name[512];
        ULONG len = 0;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        if (failed(info_->GetModuleInfo(moduleId, &base, 512, &len, name, &asmId))) return S_OK;
        std::string path = to_utf8(name, len);
        if (path.size() < 8 || path.compare(path.size() - 8, 8, "/app.dll") != 0) return S_OK;
        IMetaDataImport* md = nullptr;
        if (failed(info_->GetModuleMetaData(moduleId, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&md)))) return S_OK;
        std::vector<mdMethodDef> found;
        HCORENUM te = nullptr;
        mdTypeDef types[64];
        ULONG nt = 0;
        while (succeeded(md->EnumTypeDefs(&te, types, 64, &nt)) && nt > 0) {
            for (ULONG t = 0; t < nt; ++t) {
                HCORENUM me = nullptr;
                mdMethodDef methods[64];
                ULONG nm = 0;
                while (succeeded(md->EnumMethods(&me, types[t], methods, 64, &nm)) && nm > 0) {
                    for (ULONG m = 0; m < nm && found.size() < kMaxTargets; ++m) {
                        ULONG rva = 0;
                        DWORD attr = 0, impl = 0;
                        if (failed(md->GetMethodProps(methods[m], nullptr, nullptr, 0, nullptr, &attr, nullptr, nullptr, &rva, &impl))) continue;
                        if (rva == 0 || (impl & 0x3) != 0 /*miIL*/ || (attr & 0x0400) /*mdAbstract*/) continue;
                        found.push_back(methods[m]);
                    }
                }
                md->CloseEnum(me);
            }
        }
        md->CloseEnum(te);
        md->Release();
        if (found.empty()) return S_OK;
        {
            std::lock_guard<std::mutex> lk(mu_);
            targets_ = found;
        }
        appModule_.store(moduleId);
        wave_.store(1);
        std::vector<ModuleID> mods(found.size(), moduleId);
        // BUG: "the profiler should call RequestReJIT from a thread it previously created, and not from a CLR-created thread that is currently executing a profiler callback." -- this runs inside ModuleLoadFinished on the loader's thread.
        HRESULT hr = info_->RequestReJIT(static_cast<ULONG>(found.size()), mods.data(), found.data());
        if (succeeded(hr)) requested_.store(static_cast<unsigned>(found.size()));
        else std::fprintf(stderr, "[modload_rejit_call_counter] RequestReJIT failed 0x%08x\n", (unsigned)hr);
        cv_.notify_all();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID moduleId, mdMethodDef methodId, ICorProfilerFunctionControl* pFunctionControl) override {
        if (shutdown_.load() || pFunctionControl == nullptr || moduleId != appModule_.load()) return S_OK;
        int idx = TargetIndexOfToken(methodId);
        int wave = wave_.load();
        if (idx < 0 || wave < 1 || wave > 2) return S_OK;
        LPCBYTE hdr = nullptr;
        ULONG size = 0;
        HRESULT hr = info_->GetILFunctionBody(moduleId, methodId, &hdr, &size);
        std::vector<BYTE> body;
        if (failed(hr) || !BuildProbedBody(hdr, size, &counters_[wave - 1][idx], body)) {
            ++bodiesSkipped_;
            return S_OK;
        }
        hr = pFunctionControl->SetILFunctionBody(static_cast<ULONG>(body.size()), body.data());
        if (succeeded(hr)) ++bodiesSet_[wave - 1]; else ++bodiesSkipped_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITCompilationStarted(FunctionID functionId, ReJITID, BOOL) override {
        ++rejitStarted_;
        std::lock_guard<std::mutex> lk(mu_);
        rejittedFunctions_.insert(functionId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITCompilationFinished(FunctionID, ReJITID, HRESULT hrStatus, BOOL) override {
        if (succeeded(hrStatus)) ++rejitFinished_; else ++rejitFailed_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITError(ModuleID, mdMethodDef methodId, FunctionID, HRESULT hrStatus) override {
        if (rejitErrors_++ < 4)
            std::fprintf(stderr, "[modload_rejit_call_counter] ReJITError method=0x%08x hr=0x%08x\n", (unsigned)methodId, (unsigned)hrStatus);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            shutdown_.store(true);
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
        std::fprintf(stderr,
                     "modload_rejit_call_counter: requested=%u requested_with_inliners=%u targets=%zu params_set=%u/%u "
                     "params_skipped=%u rejit_started=%u rejit_finished=%u rejit_failed=%u rejit_errors=%u rejit_ids=%u "
                     "reverted=%u revert_failed=%u calls_wave1=%ld calls_wave2=%ld calls_after_revert=%ld\n",
                     requested_.load(), requestedInliners_, targets_.size(), bodiesSet_[0].load(), bodiesSet_[1].load(),
                     bodiesSkipped_.load(), rejitStarted_.load(), rejitFinished_.load(), rejitFailed_.load(),
                     rejitErrors_.load(), rejitIds_, reverted_, revertFailed_, Hits(0), Hits(1),
                     reverted_ ? Hits(0) + Hits(1) - hitsAtRevert_ : 0L);
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    int TargetIndexOfToken(mdMethodDef tok) {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t i = 0; i < targets_.size(); ++i)
            if (targets_[i] == tok) return static_cast<int>(i);
        return -1;
    }
    long Hits(int wave) {
        long sum = 0;
        for (ULONG i = 0; i < kMaxTargets; ++i) sum += __atomic_load_n(&counters_[wave][i], __ATOMIC_RELAXED);
        return sum;
    }
    template <class Pred>
    bool WaitFor(std::chrono::milliseconds timeout, Pred pred) {
        std::unique_lock<std::mutex> lk(mu_);
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!shutdown_.load() && !pred() && std::chrono::steady_clock::now() < deadline)
            cv_.wait_for(lk, std::chrono::milliseconds(5));
        return !shutdown_.load();
    }

    void ControlThread() {
        if (!WaitFor(std::chrono::seconds(10), [this] { return requested_.load() != 0; })) return;
        if (!WaitFor(std::chrono::milliseconds(100), [this] { return Hits(0) >= 10; })) return;
        std::vector<ModuleID> mods;
        std::vector<mdMethodDef> toks;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (shutdown_.load()) return;
            toks = targets_;
            mods.assign(toks.size(), appModule_.load());
        }
        ULONG n = static_cast<ULONG>(toks.size());
        wave_.store(2);
        HRESULT hr = info_->RequestReJITWithInliners(kRejitBlockInlining, n, mods.data(), toks.data());
        if (succeeded(hr)) requestedInliners_ = n;
        else std::fprintf(stderr, "[modload_rejit_call_counter] RequestReJITWithInliners failed 0x%08x\n", (unsigned)hr);
        if (!WaitFor(std::chrono::milliseconds(100), [this] { return Hits(1) >= 10; })) return;

        std::vector<FunctionID> fids;
        {
            std::lock_guard<std::mutex> lk(mu_);
            fids.assign(rejittedFunctions_.begin(), rejittedFunctions_.end());
        }
        for (FunctionID f : fids) {
            std::vector<ReJITID> ids(4);
            ULONG got = 0;
            hr = info_->GetReJITIDs(f, static_cast<ULONG>(ids.size()), &got, ids.data());
            if (succeeded(hr) && got > ids.size()) {
                ids.resize(got);
                hr = info_->GetReJITIDs(f, static_cast<ULONG>(ids.size()), &got, ids.data());
            }
            if (succeeded(hr)) rejitIds_ += got;
        }
        if (shutdown_.load()) return;
        hitsAtRevert_ = Hits(0) + Hits(1);
        wave_.store(3);
        std::vector<HRESULT> status(n, E_FAIL);
        hr = info_->RequestRevert(n, mods.data(), toks.data(), status.data());
        if (failed(hr)) {
            std::fprintf(stderr, "[modload_rejit_call_counter] RequestRevert failed 0x%08x\n", (unsigned)hr);
            return;
        }
        for (HRESULT s : status) (succeeded(s) ? reverted_ : revertFailed_)++;
    }

    ICorProfilerInfo10* info_ = nullptr;
    std::thread worker_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<bool> shutdown_{false};
    std::atomic<ModuleID> appModule_{0};
    std::atomic<int> wave_{0};                       // 1: module-load wave, 2: with-inliners wave, 3: reverted
    std::atomic<unsigned> requested_{0};
    std::vector<mdMethodDef> targets_;               // guarded by mu_
    std::set<FunctionID> rejittedFunctions_;         // guarded by mu_
    std::int32_t counters_[2][kMaxTargets] = {};     // written by the injected IL
    std::atomic<unsigned> bodiesSet_[2] = {{0}, {0}};
    std::atomic<unsigned> bodiesSkipped_{0}, rejitStarted_{0}, rejitFinished_{0}, rejitFailed_{0}, rejitErrors_{0};
    unsigned requestedInliners_ = 0, rejitIds_ = 0, reverted_ = 0, revertFailed_ = 0;  // control thread only
    long hitsAtRevert_ = 0;
};

DOCFIX_DEFINE_PROFILER(ModloadRejitCallCounter)
