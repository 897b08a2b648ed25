// rejit_probe_agent.cpp -- dynamic instrumentation by ReJIT: a counter prologue is put into the
// app's methods after startup, from the profiler's own thread, and later taken out again.
//
// What it does:
//   * Initialize: QueryInterface for ICorProfilerInfo4, SetEventMask(MODULE_LOADS | JIT_COMPILATION
//     | COR_PRF_ENABLE_REJIT), and start one std::thread of its own (the "control thread").
//   * ModuleLoadFinished (app.dll only): reads the module's metadata (IMetaDataImport) and picks
//     every method with an IL body (RVA != 0, IL code type) as a target.  Nothing is requested here.
//   * JITCompilationFinished: notes that a target has run (been compiled) -> wakes the thread.
//   * JITInlining: refuses to inline a target into a caller (RequestReJIT does not track inliners).
//   * Control thread: once a target has been compiled, RequestReJIT(all targets); waits until the
//     probes have fired 20 times or 300 ms have passed; reads GetReJITIDs for every FunctionID the
//     ReJIT callbacks reported; snapshots the probe count; RequestRevert(targets, status[]).
//   * GetReJITParameters: fetches the original IL (GetILFunctionBody) and hands the runtime, through
//     ICorProfilerFunctionControl::SetILFunctionBody, a body = fat header + 15-byte prologue
//     (ldc.i8 &counter; conv.i; dup; ldind.i4; ldc.i4.1; add; stind.i4) + original code + the
//     original EH clauses re-emitted in fat form with try/handler/filter offsets shifted by 15.
//   * ReJITCompilationStarted/Finished/ReJITError: counted; FunctionIDs recorded for GetReJITIDs.
//   * Shutdown: joins the control thread (so no Info call can follow Shutdown), prints the summary
//     "rejit_probe_agent: requested=<n> ..." to stderr, releases the info pointer.
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//   * ICorProfilerInfo4::RequestReJIT -- CORPROF_E_REJIT_NOT_ENABLED: "You must enable JIT
//     recompilation during initialization by using the ICorProfilerInfo::SetEventMask method to set
//     the COR_PRF_ENABLE_REJIT flag."  Remarks: "RequestReJIT typically suspends the runtime to
//     perform some of its work, which could potentially trigger a garbage collection. Therefore, the
//     profiler should call RequestReJIT from a thread it previously created, and not from a
//     CLR-created thread that is currently executing a profiler callback."  S_OK: "The profiler must
//     implement the ICorProfilerCallback4::ReJITError method to determine which methods were
//     successfully marked for JIT recompilation."  "This does not affect currently executing
//     functions, only future function invocations." (so Main of `long` never runs its probe).
//   * ICorProfilerInfo10::RequestReJITWithInliners -- "RequestReJIT doesn't track inlined methods.
//     The profiler is expected to either block inlining or track inlining" -> JITInlining blocks.
//   * ICorProfilerCallback4::GetReJITParameters -- "The GetReJITParameters callback is issued only
//     once per function; the parameters supplied by the profiler apply to all instances of that
//     function." (one counter per methodDef, shared by generic instantiations).
//   * ICorProfilerFunctionControl::SetILFunctionBody -- cbNewILMethodHeader is "The total size of the
//     new CIL, including the header and any structures that come after the body."  "The profiler
//     can free the memory used for its CIL body after SetILFunctionBody returns." (a std::vector).
//   * ICorProfilerInfo4::RequestRevert -- S_OK: "the returned status array must be checked to
//     determine which functions were successfully reverted."  Remarks: "The next time any of the
//     reverted function instances are called, the original versions of the functions will be run."
//   * ICorProfilerInfo4::GetReJITIDs -- "It follows the same usage pattern as other ICorProfilerInfo
//     functions that accept caller-allocated buffers." (ask, grow the buffer, ask again).
//   * ICorProfilerCallback4::ReJITCompilationStarted -- "It is possible to receive more than one
//     pair of ReJITCompilationStarted and ReJITCompilationFinished method calls for each function"
//     (FunctionIDs kept in a set, counts are of callbacks not of functions).
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
//   * ECMA-335 II.25.4: "The two least significant bits of the first byte of the method header
//     indicate what type of header is present."; extra data sections follow the code at the next
//     4-byte boundary; fat EH clauses are 24 bytes (flags, try off/len, handler off/len, token/filter).
//
// Ambiguities met:
//   * GetReJITParameters is "issued only once per function" but nothing says on which thread or how
//     late; it may run on an app thread after RequestRevert was requested for other methods.
//   * GetILFunctionBody's pcbMethodSize is "the size of the method"; whether that includes the EH
//     sections is not said.  The parser bounds-checks sections against it when it is large enough
//     and otherwise trusts the section headers.
//   * Whether RequestReJIT on a method that has never been compiled is allowed is not stated; the
//     S_OK text ("attempt ... to mark") and ReJITError suggest it is; targets are requested whether
//     or not they have run.
//   * The probe's increment is a plain load/add/store: concurrent callers may lose counts; the docs
//     give no way to emit an interlocked call without metadata emit, so the count is a lower bound.
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

class RejitProbeAgent : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[rejit_probe_agent] QueryInterface(ICorProfilerInfo4) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_ENABLE_REJIT);
        if (failed(hr)) {
            std::fprintf(stderr, "[rejit_probe_agent] SetEventMask failed 0x%08x\n", (unsigned)hr);
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
        std::lock_guard<std::mutex> lk(mu_);
        HCORENUM te = nullptr;
        mdTypeDef types[64];
        ULONG nt = 0;
        while (succeeded(md->EnumTypeDefs(&te, types, 64, &nt)) && nt > 0) {
            for (ULONG t = 0; t < nt; ++t) {
                HCORENUM me = nullptr;
                mdMethodDef methods[64];
                ULONG nm = 0;
                while (succeeded(md->EnumMethods(&me, types[t], methods, 64, &nm)) && nm > 0) {
                    for (ULONG m = 0; m < nm && targets_.size() < kMaxTargets; ++m) {
                        ULONG rva = 0;
                        DWORD attr = 0, impl = 0;
                        if (failed(md->GetMethodProps(methods[m], nullptr, nullptr, 0, nullptr, &attr, nullptr, nullptr, &rva, &impl))) continue;
                        if (rva == 0 || (impl & 0x3) != 0 /*miIL*/ || (attr & 0x0400) /*mdAbstract*/) continue;
                        targets_.push_back(methods[m]);
                    }
                }
                md->CloseEnum(me);
            }
        }
        md->CloseEnum(te);
        md->Release();
        appModule_.store(moduleId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load() || failed(hrStatus) || appModule_.load() == 0) return S_OK;
        if (TargetIndexOfFunction(functionId) >= 0 && !targetRan_.exchange(true)) cv_.notify_all();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID, FunctionID callee, BOOL* pfShouldInline) override {
        if (pfShouldInline == nullptr) return S_OK;
        *pfShouldInline = 1;
        if (!shutdown_.load() && appModule_.load() != 0 && TargetIndexOfFunction(callee) >= 0) {
            *pfShouldInline = 0;
            ++inliningBlocked_;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID moduleId, mdMethodDef methodId, ICorProfilerFunctionControl* pFunctionControl) override {
        if (shutdown_.load() || pFunctionControl == nullptr || moduleId != appModule_.load()) return S_OK;
        int idx = TargetIndexOfToken(methodId);
        if (idx < 0) return S_OK;
        LPCBYTE hdr = nullptr;
        ULONG size = 0;
        HRESULT hr = info_->GetILFunctionBody(moduleId, methodId, &hdr, &size);
        std::vector<BYTE> body;
        if (failed(hr) || !BuildProbedBody(hdr, size, &counters_[idx], body)) {
            ++bodiesSkipped_;
            return S_OK;  // no SetILFunctionBody: the rejitted version keeps the original IL
        }
        hr = pFunctionControl->SetILFunctionBody(static_cast<ULONG>(body.size()), body.data());
        if (succeeded(hr)) ++bodiesSet_; else ++bodiesSkipped_;
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
            std::fprintf(stderr, "[rejit_probe_agent] ReJITError method=0x%08x hr=0x%08x\n", (unsigned)methodId, (unsigned)hrStatus);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            shutdown_.store(true);
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
        long total = TotalHits();
        std::fprintf(stderr,
                     "rejit_probe_agent: requested=%u targets=%zu params_set=%u params_skipped=%u rejit_started=%u "
                     "rejit_finished=%u rejit_failed=%u rejit_errors=%u rejit_ids=%u reverted=%u revert_failed=%u "
                     "inlining_blocked=%u probe_hits_before_revert=%ld probe_hits_after_revert=%ld\n",
                     requested_, targets_.size(), bodiesSet_.load(), bodiesSkipped_.load(), rejitStarted_.load(),
                     rejitFinished_.load(), rejitFailed_.load(), rejitErrors_.load(), rejitIds_, reverted_, revertFailed_,
                     inliningBlocked_.load(), hitsAtRevert_, reverted_ ? total - hitsAtRevert_ : 0L);
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
    int TargetIndexOfFunction(FunctionID fid) {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        if (failed(info_->GetFunctionInfo(fid, &cls, &mod, &tok)) || mod != appModule_.load()) return -1;
        return TargetIndexOfToken(tok);
    }
    long TotalHits() {
        long sum = 0;
        for (ULONG i = 0; i < kMaxTargets; ++i) sum += __atomic_load_n(&counters_[i], __ATOMIC_RELAXED);
        return sum;
    }
    // Waits until pred() or shutdown or timeout; returns false if shutting down.
    template <class Pred>
    bool WaitFor(std::chrono::milliseconds timeout, Pred pred) {
        std::unique_lock<std::mutex> lk(mu_);
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!shutdown_.load() && !pred() && std::chrono::steady_clock::now() < deadline)
            cv_.wait_for(lk, std::chrono::milliseconds(5));
        return !shutdown_.load();
    }

    // The profiler's own thread: every RequestReJIT / GetReJITIDs / RequestRevert is made here.
    void ControlThread() {
        if (!WaitFor(std::chrono::seconds(10), [this] { return targetRan_.load(); })) return;
        std::vector<ModuleID> mods;
        std::vector<mdMethodDef> toks;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (shutdown_.load() || targets_.empty()) return;
            toks = targets_;
            mods.assign(toks.size(), appModule_.load());
        }
        ULONG n = static_cast<ULONG>(toks.size());
        HRESULT hr = info_->RequestReJIT(n, mods.data(), toks.data());
        if (failed(hr)) {
            std::fprintf(stderr, "[rejit_probe_agent] RequestReJIT failed 0x%08x\n", (unsigned)hr);
            return;
        }
        requested_ = n;
        // Let the instrumented versions run for a while.
        if (!WaitFor(std::chrono::milliseconds(300), [this] { return TotalHits() >= 20; })) return;

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
        hitsAtRevert_ = TotalHits();
        std::vector<HRESULT> status(n, E_FAIL);
        hr = info_->RequestRevert(n, mods.data(), toks.data(), status.data());
        if (failed(hr)) {
            std::fprintf(stderr, "[rejit_probe_agent] RequestRevert failed 0x%08x\n", (unsigned)hr);
            return;
        }
        for (HRESULT s : status) (succeeded(s) ? reverted_ : revertFailed_)++;
    }

    ICorProfilerInfo4* info_ = nullptr;
    std::thread worker_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<bool> shutdown_{false};
    std::atomic<bool> targetRan_{false};
    std::atomic<ModuleID> appModule_{0};
    std::vector<mdMethodDef> targets_;           // guarded by mu_
    std::set<FunctionID> rejittedFunctions_;     // guarded by mu_
    std::int32_t counters_[kMaxTargets] = {};    // written by the injected IL
    std::atomic<unsigned> bodiesSet_{0}, bodiesSkipped_{0}, rejitStarted_{0}, rejitFinished_{0}, rejitFailed_{0},
        rejitErrors_{0}, inliningBlocked_{0};
    // Written only by the control thread, read in Shutdown after join.
    unsigned requested_ = 0, rejitIds_ = 0, reverted_ = 0, revertFailed_ = 0;
    long hitsAtRevert_ = 0;
};

DOCFIX_DEFINE_PROFILER(RejitProbeAgent)
