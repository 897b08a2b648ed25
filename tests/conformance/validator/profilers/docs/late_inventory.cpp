// late_inventory.cpp -- a "late inventory" profiler: from a thread of its own, it periodically takes
// an inventory of what the runtime has loaded and compiled, using the profiling API's enumerators
// instead of load/JIT notifications, names what it finds, and prints a summary at Shutdown.
//
// What it does
//   * Initialize: QueryInterface for ICorProfilerInfo4 (falls back to ICorProfilerInfo3, which has
//     EnumModules and EnumJITedFunctions but no EnumThreads), reads GetRuntimeInformation, sets an
//     event mask of COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_MODULE_LOADS (used only to keep the
//     IDs the inventory thread is looking at valid, see below), and starts the inventory thread. The
//     thread calls ICorProfilerInfo4::InitializeCurrentThread first; Initialize waits (bounded) for
//     that, so the per-thread initialization happens before any managed code (hence any suspension)
//     exists.
//   * Periodically (first after 10 ms, then doubling up to LATE_INVENTORY_PERIOD_MS, default 1000)
//     the thread takes one inventory:
//       - modules: ICorProfilerInfo3::EnumModules -> ICorProfilerModuleEnum::GetCount, Clone (a
//         restart checkpoint), Next in batches until S_FALSE; each new module is named with
//         ICorProfilerInfo3::GetModuleInfo2 (file/metadata name, base address, COR_PRF_MODULE_FLAGS,
//         parent assembly) and ICorProfilerInfo::GetAssemblyInfo, both with the caller-allocated
//         buffer protocol (retry with the size reported in pcchName).
//       - JIT-compiled code: ICorProfilerInfo4::EnumJITedFunctions2 (EnumJITedFunctions on Info3)
//         -> GetCount; Skip(count-k) + Next(k) to sample the tail of the enumeration for the report,
//         Reset, then Next in batches; each new FunctionID is named with GetFunctionInfo ->
//         GetModuleMetaData(IMetaDataImport) -> GetMethodProps/GetTypeDefProps/GetNestedClassProps,
//         and its native code size is read with GetCodeInfo2.
//       - threads: ICorProfilerInfo4::EnumThreads -> GetCount, Next in batches; each ThreadID is
//         named with GetThreadInfo (OS thread id) and GetThreadAppDomain/GetAppDomainInfo; the
//         managed thread name comes from ICorProfilerCallback2::ThreadNameChanged.
//     Every enumerator (and clone) is released with IUnknown::Release as soon as it is consumed.
//   * Shutdown: tells the thread to stop, waits for it (bounded) so no ICorProfilerInfo call is made
//     once Shutdown has begun, then prints the summary from the data already collected and
//     releases the info pointer. Nothing in Shutdown calls ICorProfilerInfo except the final Release.
//
// Documentation followed (learn.microsoft.com, .NET unmanaged profiling API reference):
//   * ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface
//     that the profiler must query for an ICorProfilerInfo interface pointer."
//   * ICorProfilerInfo3::EnumModules: "Returns an enumerator that provides methods to sequentially
//     iterate through a collection of managed modules that are loaded into the application."
//   * ICorProfilerInfo4::EnumJITedFunctions2: "Returns an enumerator for all functions that were
//     previously JIT-compiled and JIT-recompiled. This method replaces the
//     ICorProfilerInfo3::EnumJITedFunctions method, which does not enumerate JIT-recompiled IDs."
//     "Note that the ICorProfilerInfo4::EnumJITedFunctions2 method can trigger a garbage
//     collection, whereas ICorProfilerInfo3::EnumJITedFunctions method will not." -> it is called
//     only from this profiler's own thread, never from inside a callback, and never while holding
//     a lock that a callback could wait for (ICorProfilerInfo2::DoStackSnapshot guideline: "Do not
//     hold a lock while your profiler calls into a CLR function that can trigger a garbage
//     collection.").
//   * ICorProfilerInfo3::EnumJITedFunctions: "The returned enumeration includes only "0" for the
//     value of the COR_PRF_FUNCTION::reJitId field." (the Info3 fallback counts versions as 1)
//   * ICorProfilerInfo4::EnumThreads: "Returns an enumerator that provides methods to sequentially
//     iterate through the collection of all managed threads in the profiled process."
//   * ICorProfiler{Module,Function,Thread}Enum::Next: "S_OK: celt elements were returned.
//     S_FALSE: Fewer than celt elements were returned, which indicates that the enumeration is
//     complete." and pceltFetched is "A pointer to the number of elements actually returned in the
//     ids array." -> the ids array always holds celt elements, and the loop ends on S_FALSE.
//   * ...Enum::Skip: "The new position of this enumerator's cursor is (current position) + celt."
//     "S_FALSE: Fewer than celt elements were skipped, which indicates that there are no more
//     elements." ...Enum::Reset: "Moves the enumerator's cursor to the starting position of the
//     sequence." ...Enum::Clone: "The copy of the enumerator maintains its own enumeration state
//     separately from this enumerator. However, the copy's initial cursor position is the same as
//     this enumerator's current cursor position." ...Enum::GetCount: "Gets the number of managed
//     modules that were loaded into the application." / "...threads that are used by the
//     application." / "...functions that were loaded by the application or forcibly loaded by the
//     profiler."
//   * ICorProfilerInfo3::GetModuleInfo2: "When GetModuleInfo2 returns, you must verify that the
//     szName buffer was large enough to contain the full file name of the module. To do this,
//     compare the value that pcchName points to with the value of the cchName parameter. If
//     pcchName points to a value that is larger than cchName, allocate a larger szName buffer,
//     update cchName with the new, larger size, and call GetModuleInfo2 again." (same protocol for
//     GetAssemblyInfo, GetAppDomainInfo, IMetaDataImport::GetMethodProps/GetTypeDefProps; see
//     "Caller-Allocated Buffers in the Profiling API"). "For dynamic modules, the szName parameter
//     is the metadata name of the module, and the base address is 0 (zero)." "...the ID of the
//     parent assembly will not be available until the profiler receives the
//     ICorProfilerCallback::ModuleAttachedToAssembly callback." (a module whose assembly is not yet
//     known is named again in a later round).
//   * ICorProfilerInfo::GetFunctionInfo: "The profiler code can call
//     ICorProfilerInfo::GetModuleMetaData to obtain a metadata interface for a given module. The
//     metadata token that is returned to the location referenced by pToken can then be used to
//     access the metadata for the function." "The ClassID of a function on a generic class might
//     not be obtainable ... In this case, pClassId will be 0." (the name comes from metadata, not
//     from the ClassID).
//   * ICorProfilerCallback::ThreadDestroyed: "The threadId value is no longer valid at the time of
//     this call." + DoStackSnapshot: "Always block in your ICorProfilerCallback::ThreadDestroyed
//     callback until that thread's stack walk is complete." -> a ThreadID obtained from EnumThreads
//     is queried only under threads_mu_ after checking it was not destroyed, and ThreadDestroyed
//     takes threads_mu_ (so it waits for an in-flight GetThreadInfo). ModuleUnloadStarted does the
//     same for ModuleIDs. Neither GetThreadInfo nor GetModuleInfo2 is documented as triggering a GC.
//     ThreadCreated: "The threadId value is immediately valid." (clears a reused ThreadID).
//   * ICorProfilerInfo4::InitializeCurrentThread: "We recommend that you call
//     InitializeCurrentThread on any thread that will call a profiler API while there are suspended
//     threads." "Call InitializeCurrentThread only when there are no suspended threads." (the
//     runtime suspends managed threads for every GC; the inventory thread calls the API during the
//     application's GCs).
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." "Certain immutable events
//     may still occur after shutdown; the profiler should take care to return immediately when
//     this occurs."
//
// Declared here because the kit's headers lack them (facts from corprof.idl): COR_PRF_FUNCTION
// {FunctionID functionId; ReJITID reJitId;}, ICorProfilerFunctionEnum (IID
// {FF71301A-B994-429D-A10B-B345A65280EF}; IUnknown, then Skip, Reset, Clone, GetCount, Next -- the
// same order as the kit's ICorProfilerModuleEnum/ThreadEnum), and COR_PRF_MODULE_FLAGS values.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

namespace profharness {
struct COR_PRF_FUNCTION {
    FunctionID functionId;
    ReJITID reJitId;
};
struct ICorProfilerFunctionEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerFunctionEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, COR_PRF_FUNCTION ids[], ULONG* pceltFetched) = 0;
};
inline constexpr GUID IID_ICorProfilerFunctionEnum = {
    0xFF71301A, 0xB994, 0x429D, {0xA1, 0x0B, 0xB3, 0x45, 0xA6, 0x52, 0x80, 0xEF}};
// COR_PRF_MODULE_FLAGS
inline constexpr DWORD COR_PRF_MODULE_DISK = 0x1;
inline constexpr DWORD COR_PRF_MODULE_NGEN = 0x2;
inline constexpr DWORD COR_PRF_MODULE_DYNAMIC = 0x4;
inline constexpr DWORD COR_PRF_MODULE_COLLECTIBLE = 0x8;
inline constexpr DWORD COR_PRF_MODULE_RESOURCE = 0x10;
}  // namespace profharness

using namespace docfix;

namespace {

constexpr const char* kTag = "[late-inventory]";
constexpr ULONG kModuleBatch = 16;
constexpr ULONG kFunctionBatch = 256;
constexpr ULONG kThreadBatch = 32;
constexpr ULONG kTailSample = 4;
constexpr ULONG kInlineName = 260;

// Caller-allocated buffer protocol: call once with a stack buffer; if *pcch says the name did not
// fit, allocate pcch characters and call again.
template <class Call>
HRESULT QueryName(Call call, std::string& out) {
    WCHAR small[kInlineName];
    ULONG needed = 0;
    HRESULT hr = call(kInlineName, &needed, small);
    if (failed(hr)) return hr;
    if (needed <= kInlineName) {
        out = to_utf8(small, needed);
        return hr;
    }
    std::vector<WCHAR> big(needed);
    ULONG again = 0;
    hr = call(needed, &again, big.data());
    if (failed(hr)) return hr;
    out = to_utf8(big.data(), std::min(again, needed));
    return hr;
}

std::string BaseName(const std::string& path) {
    size_t slash = path.find_last_of("/\\");
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct ModuleRecord {
    std::string name;        // file name, or metadata name for dynamic modules
    std::string assembly;    // assembly name ("" until ModuleAttachedToAssembly has happened)
    DWORD flags = 0;
    bool complete = false;   // name and assembly known
    unsigned jitted = 0;     // JIT-compiled functions whose module this is
    unsigned firstRound = 0;
};

struct ThreadRecord {
    DWORD osThreadId = 0;
    std::string appDomain;
    unsigned rounds = 0;
};

}  // namespace

class LateInventoryProfiler : public CallbackBase {
public:
    // ----------------------------------------------------------------------------------------
    // Startup
    // ----------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info4_)))) {
            info3_ = info4_;  // ICorProfilerInfo4 derives from ICorProfilerInfo3: same object, one reference
        } else if (failed(unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info3_)))) {
            std::fprintf(stderr, "%s ICorProfilerInfo3 not available; inventory disabled\n", kTag);
            return E_FAIL;
        }

        USHORT major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE rtType = 0;
        USHORT clrInstance = 0;
        std::string version;
        if (succeeded(QueryName(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                    return info3_->GetRuntimeInformation(&clrInstance, &rtType, &major, &minor, &build, &qfe, cch,
                                                         pcch, buf);
                },
                version))) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%s %u.%u.%u \"%s\"", rtType == COR_PRF_CORE_CLR ? "CoreCLR" : "CLR",
                          major, minor, build, version.c_str());
            runtime_ = buf;
        }

        // Threads: ThreadCreated/ThreadDestroyed/ThreadNameChanged keep EnumThreads' IDs safe to use
        // and give names. Module loads: ModuleUnloadStarted keeps EnumModules' IDs safe to use.
        HRESULT hr = info3_->SetEventMask(COR_PRF_MONITOR_THREADS | COR_PRF_MONITOR_MODULE_LOADS);
        if (failed(hr)) {
            std::fprintf(stderr, "%s SetEventMask failed 0x%08x\n", kTag, (unsigned)hr);
            info3_->Release();
            info3_ = nullptr;
            info4_ = nullptr;
            return hr;
        }

        // Inventory schedule: the first round 10 ms after startup, then the interval doubles up
        // to LATE_INVENTORY_PERIOD_MS (default 1000 ms), so startup is captured in detail and a
        // long-running process pays for one inventory per period.
        if (const char* p = std::getenv("LATE_INVENTORY_PERIOD_MS")) {
            long v = std::strtol(p, nullptr, 10);
            if (v >= 10 && v <= 600000) periodMs_ = static_cast<unsigned>(v);
        }

        try {
            worker_ = std::thread([this] { WorkerMain(); });
        } catch (...) {
            std::fprintf(stderr, "%s could not start the inventory thread\n", kTag);
            return S_OK;  // the profiler stays loaded but passive
        }
        {
            // Let the worker run InitializeCurrentThread now, while no managed code (hence no
            // suspension) exists yet. Bounded, in case the runtime serializes that call behind
            // Initialize.
            std::unique_lock<std::mutex> lk(ctl_mu_);
            ctl_cv_.wait_for(lk, std::chrono::milliseconds(1000), [this] { return workerReady_; });
        }
        std::fprintf(stderr, "%s initialized (%s, period %u ms, %s)\n", kTag, runtime_.c_str(), periodMs_,
                     info4_ ? "ICorProfilerInfo4" : "ICorProfilerInfo3 only");
        return S_OK;
    }

    // ----------------------------------------------------------------------------------------
    // Notifications that keep enumerated IDs valid while the inventory thread uses them
    // ----------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID tid) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lk(threads_mu_);
        destroyed_.erase(tid);  // a ThreadID value can be reused once its thread was destroyed
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID tid) override {
        if (shutdown_.load()) return S_OK;
        // Taking threads_mu_ blocks until an in-flight GetThreadInfo(tid) on the inventory thread is done.
        std::lock_guard<std::mutex> lk(threads_mu_);
        destroyed_.insert(tid);
        ++threadsDestroyed_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID tid, ULONG cchName, WCHAR* name) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lk(threads_mu_);
        threadNames_[tid] = to_utf8(name, cchName);  // "The name is not null-terminated."
        ++nameChanges_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ModuleUnloadStarted(ModuleID mid) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lk(modules_mu_);  // waits for an in-flight GetModuleInfo2(mid)
        unloading_.insert(mid);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mid, HRESULT) override {
        if (shutdown_.load()) return S_OK;
        std::lock_guard<std::mutex> lk(modules_mu_);
        unloading_.erase(mid);  // a ModuleID value may be reused after an unload
        return S_OK;
    }

    // ----------------------------------------------------------------------------------------
    // Shutdown: stop the thread first, then report from collected data only.
    // ----------------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        if (shutdown_.exchange(true)) return S_OK;
        bool exited = true;
        if (worker_.joinable()) {
            std::unique_lock<std::mutex> lk(ctl_mu_);
            stop_ = true;
            ctl_cv_.notify_all();
            // The worker checks stop_ before every profiling API call; the bounded wait only
            // covers one in-flight call.
            exited = ctl_cv_.wait_for(lk, std::chrono::seconds(5), [this] { return workerExited_; });
            lk.unlock();
            if (exited)
                worker_.join();
            else
                worker_.detach();
        }
        PrintSummary(exited);
        if (exited && info3_ != nullptr) {
            info3_->Release();  // IUnknown::Release is the only call made on the info pointer here
            info3_ = nullptr;
            info4_ = nullptr;
        }
        return S_OK;
    }

private:
    // ----------------------------------------------------------------------------------------
    // Inventory thread
    // ----------------------------------------------------------------------------------------
    bool Stopping() {
        std::lock_guard<std::mutex> lk(ctl_mu_);
        return stop_;
    }

    void WorkerMain() {
        if (info4_ != nullptr) {
            HRESULT hr = info4_->InitializeCurrentThread();
            if (failed(hr)) std::fprintf(stderr, "%s InitializeCurrentThread failed 0x%08x\n", kTag, (unsigned)hr);
        }
        {
            std::lock_guard<std::mutex> lk(ctl_mu_);
            workerReady_ = true;
        }
        ctl_cv_.notify_all();

        unsigned delayMs = std::min(10u, periodMs_);
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(ctl_mu_);
                if (ctl_cv_.wait_for(lk, std::chrono::milliseconds(delayMs), [this] { return stop_; })) break;
            }
            TakeInventory();
            delayMs = std::min(delayMs * 2, periodMs_);
        }

        // Release the metadata interfaces obtained with GetModuleMetaData while the runtime is
        // still fully alive (before Shutdown proceeds).
        for (auto& kv : metadata_)
            if (kv.second != nullptr) kv.second->Release();
        metadata_.clear();

        {
            std::lock_guard<std::mutex> lk(ctl_mu_);
            workerExited_ = true;
        }
        ctl_cv_.notify_all();
    }

    void TakeInventory() {
        ++rounds_;
        if (!Stopping()) InventoryModules();
        if (!Stopping()) InventoryFunctions();
        if (!Stopping() && info4_ != nullptr) InventoryThreads();
    }

    // Reads the whole sequence from the enumerator's current position with Next(batch) until
    // S_FALSE. Returns the failing HRESULT if Next fails.
    template <class Enum, class Elem>
    HRESULT Drain(Enum* e, ULONG batch, std::vector<Elem>& out) {
        std::vector<Elem> buf(batch);
        for (;;) {
            if (Stopping()) return E_ABORT;
            ULONG fetched = 0;
            HRESULT hr = e->Next(batch, buf.data(), &fetched);
            if (failed(hr)) return hr;
            fetched = std::min(fetched, batch);
            out.insert(out.end(), buf.begin(), buf.begin() + fetched);
            if (hr == S_FALSE || fetched < batch) return S_OK;
        }
    }

    // ---- modules ----------------------------------------------------------------------------
    void InventoryModules() {
        ICorProfilerModuleEnum* e = nullptr;
        HRESULT hr = info3_->EnumModules(&e);
        if (failed(hr) || e == nullptr) {
            NoteError("EnumModules", hr);
            return;
        }
        ULONG count = 0;
        if (failed(hr = e->GetCount(&count))) NoteError("ModuleEnum::GetCount", hr);

        // A checkpoint at the start of the sequence: if Next fails part-way, the walk restarts
        // from the copy instead of asking the runtime for a new snapshot.
        ICorProfilerModuleEnum* checkpoint = nullptr;
        if (failed(hr = e->Clone(&checkpoint))) {
            NoteError("ModuleEnum::Clone", hr);
            checkpoint = nullptr;
        }

        std::vector<ModuleID> ids;
        ids.reserve(count);
        hr = Drain(e, kModuleBatch, ids);
        if (failed(hr) && hr != E_ABORT && checkpoint != nullptr) {
            NoteError("ModuleEnum::Next", hr);
            ids.clear();
            hr = Drain(checkpoint, kModuleBatch, ids);
        }
        if (checkpoint != nullptr) checkpoint->Release();
        e->Release();
        if (failed(hr)) {
            if (hr != E_ABORT) NoteError("ModuleEnum::Next", hr);
            return;
        }
        if (ids.size() != count) ++countMismatches_;
        peakModules_ = std::max<size_t>(peakModules_, ids.size());

        for (ModuleID mid : ids) {
            if (Stopping()) return;
            ModuleRecord& rec = modules_[mid];
            if (rec.firstRound == 0) rec.firstRound = rounds_;
            if (!rec.complete) NameModule(mid, rec);
        }
    }

    void NameModule(ModuleID mid, ModuleRecord& rec) {
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        DWORD flags = 0;
        std::string name;
        HRESULT hr;
        {
            std::lock_guard<std::mutex> lk(modules_mu_);
            if (unloading_.count(mid) != 0) return;
            hr = QueryName(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                    return info3_->GetModuleInfo2(mid, &base, cch, pcch, buf, &asmId, &flags);
                },
                name);
        }
        if (failed(hr)) {
            if (hr != CORPROF_E_DATAINCOMPLETE) NoteError("GetModuleInfo2", hr);
            return;  // still loading: try again next round
        }
        rec.name = (flags & COR_PRF_MODULE_DYNAMIC) != 0 ? name : BaseName(name);
        rec.flags = flags;
        if (asmId == 0) return;  // not attached to its assembly yet: try again next round
        std::string asmName;
        AppDomainID ad = 0;
        ModuleID manifest = 0;
        hr = QueryName(
            [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                return info3_->GetAssemblyInfo(asmId, cch, pcch, buf, &ad, &manifest);
            },
            asmName);
        if (failed(hr)) {
            if (hr != CORPROF_E_DATAINCOMPLETE) NoteError("GetAssemblyInfo", hr);
            return;
        }
        rec.assembly = asmName;
        rec.complete = true;
    }

    // ---- JIT-compiled functions -------------------------------------------------------------
    void InventoryFunctions() {
        ICorProfilerFunctionEnum* e = nullptr;
        HRESULT hr = info4_ != nullptr ? info4_->EnumJITedFunctions2(&e) : info3_->EnumJITedFunctions(&e);
        if (failed(hr) || e == nullptr) {
            NoteError(info4_ != nullptr ? "EnumJITedFunctions2" : "EnumJITedFunctions", hr);
            return;
        }
        ULONG count = 0;
        if (failed(hr = e->GetCount(&count))) {
            NoteError("FunctionEnum::GetCount", hr);
            count = 0;
        }

        // Tail sample for the report: position the cursor k elements before the end, read them,
        // then go back to the start for the full walk.
        if (count > 0) {
            ULONG k = std::min(count, kTailSample);
            COR_PRF_FUNCTION tail[kTailSample];
            ULONG got = 0;
            hr = e->Skip(count - k);
            if (hr == S_OK) hr = e->Next(k, tail, &got);
            if (succeeded(hr)) {
                tail_.assign(tail, tail + std::min(got, k));
            } else {
                NoteError("FunctionEnum::Skip/Next", hr);
            }
            if (failed(hr = e->Reset())) {
                NoteError("FunctionEnum::Reset", hr);
                e->Release();
                return;
            }
        }

        std::vector<COR_PRF_FUNCTION> all;
        all.reserve(count);
        hr = Drain(e, kFunctionBatch, all);
        e->Release();
        if (failed(hr)) {
            if (hr != E_ABORT) NoteError("FunctionEnum::Next", hr);
            return;
        }
        if (all.size() != count) ++countMismatches_;
        lastFunctionCount_ = all.size();
        {
            std::set<std::pair<FunctionID, ReJITID>> distinct;
            for (const COR_PRF_FUNCTION& f : all) distinct.insert({f.functionId, f.reJitId});
            lastRepeated_ = all.size() - distinct.size();  // same (functionId, reJitId) listed more than once
        }

        for (const COR_PRF_FUNCTION& f : all) {
            if (Stopping()) return;
            versions_.insert({f.functionId, f.reJitId});
            if (functions_.count(f.functionId) != 0) continue;
            functions_.insert(f.functionId);
            NameFunction(f.functionId);
        }
    }

    IMetaDataImport* MetadataFor(ModuleID mid) {
        auto it = metadata_.find(mid);
        if (it != metadata_.end()) return it->second;
        IUnknown* unk = nullptr;
        IMetaDataImport* md = nullptr;
        HRESULT hr = info3_->GetModuleMetaData(mid, ofRead, IID_IMetaDataImport, &unk);
        if (succeeded(hr) && unk != nullptr) {
            if (failed(unk->QueryInterface(IID_IMetaDataImport, reinterpret_cast<void**>(&md)))) md = nullptr;
            unk->Release();
        } else {
            NoteError("GetModuleMetaData", hr);
        }
        metadata_[mid] = md;  // cache failures too
        return md;
    }

    std::string TypeName(IMetaDataImport* md, mdTypeDef td, int depth = 0) {
        std::string name;
        DWORD tdFlags = 0;
        mdToken extends = 0;
        if (failed(QueryName(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                    return md->GetTypeDefProps(td, buf, cch, pcch, &tdFlags, &extends);
                },
                name)))
            return "?";
        mdTypeDef outer = 0;
        if (depth < 8 && succeeded(md->GetNestedClassProps(td, &outer)) && outer != 0)
            return TypeName(md, outer, depth + 1) + "+" + name;
        return name;
    }

    void NameFunction(FunctionID fid) {
        ClassID cls = 0;
        ModuleID mid = 0;
        mdToken tok = 0;
        HRESULT hr = info3_->GetFunctionInfo(fid, &cls, &mid, &tok);
        if (failed(hr)) {
            NoteError("GetFunctionInfo", hr);
            return;
        }
        auto mod = modules_.find(mid);
        if (mod != modules_.end()) ++mod->second.jitted;

        ULONG32 nCode = 0;
        if (succeeded(info3_->GetCodeInfo2(fid, 0, &nCode, nullptr)) && nCode > 0) {
            std::vector<COR_PRF_CODE_INFO> code(nCode);
            ULONG32 got = 0;
            if (succeeded(info3_->GetCodeInfo2(fid, nCode, &got, code.data())))
                for (ULONG32 i = 0; i < std::min(got, nCode); ++i) codeBytes_ += code[i].size;
        }

        IMetaDataImport* md = MetadataFor(mid);
        if (md == nullptr) return;
        std::string method;
        mdTypeDef owner = 0;
        DWORD attr = 0, implFlags = 0;
        PCCOR_SIGNATURE sig = nullptr;
        ULONG sigLen = 0, rva = 0;
        if (failed(QueryName(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                    return md->GetMethodProps(tok, &owner, buf, cch, pcch, &attr, &sig, &sigLen, &rva, &implFlags);
                },
                method)))
            return;
        ++namedFunctions_;
        names_[fid] = (owner != 0 ? TypeName(md, owner) + "::" : std::string()) + method;
    }

    // ---- threads ----------------------------------------------------------------------------
    void InventoryThreads() {
        ICorProfilerThreadEnum* e = nullptr;
        HRESULT hr = info4_->EnumThreads(&e);
        if (failed(hr) || e == nullptr) {
            NoteError("EnumThreads", hr);
            return;
        }
        ULONG count = 0;
        if (failed(hr = e->GetCount(&count))) NoteError("ThreadEnum::GetCount", hr);
        std::vector<ThreadID> ids;
        ids.reserve(count);
        hr = Drain(e, kThreadBatch, ids);
        e->Release();
        if (failed(hr)) {
            if (hr != E_ABORT) NoteError("ThreadEnum::Next", hr);
            return;
        }
        if (ids.size() != count) ++countMismatches_;
        peakThreads_ = std::max<size_t>(peakThreads_, ids.size());

        for (ThreadID tid : ids) {
            if (Stopping()) return;
            DWORD os = 0;
            AppDomainID ad = 0;
            {
                std::lock_guard<std::mutex> lk(threads_mu_);
                if (destroyed_.count(tid) != 0) continue;  // destroyed since the snapshot was taken
                hr = info4_->GetThreadInfo(tid, &os);
                if (succeeded(hr) && failed(info4_->GetThreadAppDomain(tid, &ad))) ad = 0;
            }
            if (failed(hr)) {
                NoteError("GetThreadInfo", hr);
                continue;
            }
            ThreadRecord& rec = threads_[{tid, os}];
            rec.osThreadId = os;
            ++rec.rounds;
            if (ad != 0 && rec.appDomain.empty()) rec.appDomain = AppDomainName(ad);
        }
    }

    std::string AppDomainName(AppDomainID ad) {
        auto it = appDomains_.find(ad);
        if (it != appDomains_.end()) return it->second;
        std::string name;
        ProcessID pid = 0;
        if (failed(QueryName(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) { return info3_->GetAppDomainInfo(ad, cch, pcch, buf, &pid); },
                name)))
            name = "?";
        appDomains_[ad] = name;
        return name;
    }

    void NoteError(const char* what, HRESULT hr) {
        ++errors_;
        if (errors_ <= 5) std::fprintf(stderr, "%s %s failed 0x%08x\n", kTag, what, (unsigned)hr);
    }

    // ----------------------------------------------------------------------------------------
    // Report (Shutdown, after the worker has stopped; no profiling API calls)
    // ----------------------------------------------------------------------------------------
    void PrintSummary(bool workerStopped) {
        if (!workerStopped) {
            std::fprintf(stderr, "%s summary skipped: inventory thread did not stop in time\n", kTag);
            return;
        }
        unsigned disk = 0, dynamic = 0, named = 0;
        std::set<std::string> assemblies;
        std::vector<const ModuleRecord*> byJit;
        for (auto& kv : modules_) {
            const ModuleRecord& m = kv.second;
            if (m.flags & COR_PRF_MODULE_DISK) ++disk;
            if (m.flags & COR_PRF_MODULE_DYNAMIC) ++dynamic;
            if (m.complete) {
                ++named;
                assemblies.insert(m.assembly);
            }
            byJit.push_back(&m);
        }
        std::sort(byJit.begin(), byJit.end(),
                  [](const ModuleRecord* a, const ModuleRecord* b) { return a->jitted > b->jitted; });

        std::fprintf(stderr,
                     "%s summary (%s): rounds=%u modules=%zu (named=%u disk=%u dynamic=%u, peak/round=%zu) "
                     "assemblies=%zu\n",
                     kTag, runtime_.c_str(), rounds_, modules_.size(), named, disk, dynamic, peakModules_,
                     assemblies.size());
        std::fprintf(stderr,
                     "%s   jitted functions=%zu (versions=%zu, named=%u, native code=%llu bytes; last enumeration: "
                     "%zu entries, %zu repeated)\n",
                     kTag, functions_.size(), versions_.size(), namedFunctions_, (unsigned long long)codeBytes_,
                     lastFunctionCount_, lastRepeated_);
        std::string top;
        for (size_t i = 0; i < byJit.size() && i < 3 && byJit[i]->jitted > 0; ++i) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "=%u", byJit[i]->jitted);
            top += (i ? ", " : "") + byJit[i]->name + buf;
        }
        std::fprintf(stderr, "%s   top modules by JIT count: %s\n", kTag, top.empty() ? "-" : top.c_str());

        std::string sample;
        for (const COR_PRF_FUNCTION& f : tail_) {
            auto it = names_.find(f.functionId);
            sample += (sample.empty() ? "" : ", ") + (it != names_.end() ? it->second : std::string("?"));
        }
        std::fprintf(stderr, "%s   tail of last JIT enumeration: %s\n", kTag, sample.empty() ? "-" : sample.c_str());

        if (info4_ != nullptr) {
            std::lock_guard<std::mutex> lk(threads_mu_);
            std::string named_threads;
            unsigned withName = 0;
            for (auto& kv : threads_) {
                auto n = threadNames_.find(kv.first.first);
                if (n == threadNames_.end()) continue;
                ++withName;
                if (withName <= 6) {
                    char buf[64];
                    std::snprintf(buf, sizeof buf, "(os %u)", (unsigned)kv.second.osThreadId);
                    named_threads += (named_threads.empty() ? "" : ", ") + n->second + buf;
                }
            }
            std::string domain = threads_.empty() ? "-" : threads_.begin()->second.appDomain;
            std::fprintf(stderr,
                         "%s   threads seen=%zu (peak/round=%zu, destroyed=%u, renamed=%u, domain=%s) named: %s\n",
                         kTag, threads_.size(), peakThreads_, threadsDestroyed_, nameChanges_, domain.c_str(),
                         named_threads.empty() ? "-" : named_threads.c_str());
        }
        std::fprintf(stderr, "%s   api errors=%u count/Next mismatches=%u\n", kTag, errors_, countMismatches_);
    }

    // Profiling API
    ICorProfilerInfo3* info3_ = nullptr;
    ICorProfilerInfo4* info4_ = nullptr;  // same object as info3_ when available
    std::string runtime_ = "unknown runtime";
    unsigned periodMs_ = 1000;

    // Worker control
    std::thread worker_;
    std::mutex ctl_mu_;
    std::condition_variable ctl_cv_;
    bool stop_ = false;
    bool workerReady_ = false;
    bool workerExited_ = false;
    std::atomic<bool> shutdown_{false};

    // Guarded by threads_mu_ (shared with thread callbacks)
    std::mutex threads_mu_;
    std::unordered_set<ThreadID> destroyed_;
    std::unordered_map<ThreadID, std::string> threadNames_;
    unsigned threadsDestroyed_ = 0;
    unsigned nameChanges_ = 0;
    std::map<std::pair<ThreadID, DWORD>, ThreadRecord> threads_;  // worker-only; read in Shutdown after it exited

    // Guarded by modules_mu_ (shared with ModuleUnloadStarted/ModuleLoadFinished)
    std::mutex modules_mu_;
    std::unordered_set<ModuleID> unloading_;

    // Worker-only data (read by Shutdown after the worker has exited)
    unsigned rounds_ = 0;
    unsigned errors_ = 0;
    unsigned countMismatches_ = 0;
    std::unordered_map<ModuleID, ModuleRecord> modules_;
    size_t peakModules_ = 0;
    std::unordered_set<FunctionID> functions_;
    std::set<std::pair<FunctionID, ReJITID>> versions_;
    std::unordered_map<FunctionID, std::string> names_;
    std::unordered_map<ModuleID, IMetaDataImport*> metadata_;
    std::unordered_map<AppDomainID, std::string> appDomains_;
    std::vector<COR_PRF_FUNCTION> tail_;
    unsigned namedFunctions_ = 0;
    size_t lastFunctionCount_ = 0;
    size_t lastRepeated_ = 0;
    unsigned long long codeBytes_ = 0;
    size_t peakThreads_ = 0;
};

DOCFIX_DEFINE_PROFILER(LateInventoryProfiler)
