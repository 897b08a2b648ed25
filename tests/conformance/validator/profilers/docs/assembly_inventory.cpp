// assembly_inventory.cpp -- software-bill-of-materials agent: inventories every assembly the process
// loads (name, manifest module path, module flags, framework-or-application) and publishes one
// EventPipe event per assembly on its own provider "AssemblyInventory"; a profiler-owned EventPipe
// session listens to that provider and counts what comes back through EventPipeEventDelivered (the
// agent's exporter would hang off that callback).  Also records app domain creation and the runtime's
// identity.  Shutdown prints "assembly_inventory: assemblies=<n> ..." to stderr.
//
// THIS FILE CONTAINS ONE DELIBERATE BUG (marked "// BUG:"): to decide as early as possible whether an
// assembly is framework or application code, AssemblyLoadStarted asks GetAssemblyInfo about the
// assembly that is still being loaded.  The runtimes tried answer with the simple name and
// CORPROF_E_DATAINCOMPLETE, which the agent shrugs off -- the kind of early lookup shipped agents make.
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//  * ICorProfilerCallback::Initialize: "Pointer to an IUnknown interface that the profiler must
//    query for an ICorProfilerInfo interface pointer."  (newest used: 12, else 5, else 3, else 1)
//  * ICorProfilerInfo5::SetEventMask2: "Typically, you call the GetEventMask2 method to determine
//    which bits are set, perform a logical OR ... and then call the SetEventMask2 method."
//  * COR_PRF_HIGH_MONITOR: flags "the profiler can specify to the ICorProfilerInfo5::SetEventMask2
//    method when it is loading" -> mask set once, in Initialize.
//  * ICorProfilerInfo3::GetRuntimeInformation: "pcchVersionString cannot be null unless
//    szVersionString is also null."  Two passes: size, then string plus the numeric fields.
//  * GetAssemblyInfo / GetAppDomainInfo / GetModuleInfo2: "Alternatively, you can first call ...
//    with a zero-length szName buffer to obtain the correct buffer size."
//  * ICorProfilerCallback::ModuleLoadFinished: "The value of moduleId is not valid for an
//    information request until the ModuleLoadFinished method is called."; GetModuleInfo2: "the ID
//    of the parent assembly will not be available until the profiler receives the
//    ICorProfilerCallback::ModuleAttachedToAssembly callback" (the link is taken from that callback).
//  * ICorProfilerCallback::AssemblyLoadStarted: "The value of assemblyId is not valid for an
//    information request until the ICorProfilerCallback::AssemblyLoadFinished method is called."
//    (broken once, on purpose, see BUG).
//  * ICorProfilerInfo12::EventPipeCreateProvider / EventPipeDefineEvent / EventPipeWriteEvent /
//    EventPipeStartSession, COR_PRF_EVENTPIPE_PROVIDER_CONFIG / _PARAM_DESC / COR_PRF_EVENT_DATA
//    pages (layouts below); ICorProfilerCallback10::EventPipeEventDelivered.
//  * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//    ICorProfilerInfo interface after the Shutdown method is called." -> only the final Release.
//
// Left ambiguous by the documents: COR_PRF_HIGH_MONITOR_EVENT_PIPE is not on the COR_PRF_HIGH_MONITOR
// page (value from corprof.idl); the EventPipe pages say nothing about when/where their methods may
// be called or whether a session must be stopped before Shutdown (it is left running); whether the
// "zero-length" sizing pass may pass NULL and what it returns (S_OK on 8.0, ERROR_INSUFFICIENT_BUFFER
// on 3.1 for GetRuntimeInformation -- both accepted); whether a STRING payload's size counts the NUL.
#include "common.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace profharness {  // corprof.idl structs the kit only forward-declares
struct COR_PRF_EVENTPIPE_PROVIDER_CONFIG {
    const WCHAR* providerName;
    std::uint64_t keywords;
    std::uint32_t loggingLevel;
    const WCHAR* filterData;
};
struct COR_PRF_EVENTPIPE_PARAM_DESC {
    std::uint32_t type;
    std::uint32_t elementType;
    const WCHAR* name;
};
struct COR_PRF_EVENT_DATA {
    std::uint64_t ptr;
    std::uint32_t size;
    std::uint32_t reserved;
};
}  // namespace profharness

using namespace docfix;

namespace {
constexpr std::uint32_t kEpUInt32 = 10, kEpString = 18;  // COR_PRF_EVENTPIPE_PARAM_TYPE
constexpr std::uint32_t kEpVerbose = 5;                  // COR_PRF_EVENTPIPE_LEVEL
constexpr std::uint64_t kInventoryKeyword = 0x1;
const WCHAR kProviderName[] = u"AssemblyInventory";

bool size_pass_ok(HRESULT hr) { return succeeded(hr) || hr == HRESULT_ERROR_INSUFFICIENT_BUFFER; }

bool is_framework(const std::string& n) {
    return n.rfind("System.", 0) == 0 || n == "System" || n.rfind("Microsoft.", 0) == 0 || n == "netstandard" ||
           n == "mscorlib";
}
std::u16string widen(const std::string& s) { return std::u16string(s.begin(), s.end()); }  // paths here are ASCII
}  // namespace

class AssemblyInventory : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        // Newest first, falling back; every pointer is kept as the interface it was asked for.
        if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo12, reinterpret_cast<void**>(&info12_)))) {
            info5_ = info12_; info3_ = info12_; info_ = info12_; level_ = "12";
        } else if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo5, reinterpret_cast<void**>(&info5_)))) {
            info3_ = info5_; info_ = info5_; level_ = "5";
        } else if (succeeded(unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info3_)))) {
            info_ = info3_; level_ = "3";
        } else if (failed(unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_)))) {
            return E_NOINTERFACE;
        }
        runtime_identity();
        const DWORD low = COR_PRF_MONITOR_ASSEMBLY_LOADS | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_APPDOMAIN_LOADS;
        const DWORD high = info12_ ? COR_PRF_HIGH_MONITOR_EVENT_PIPE : COR_PRF_HIGH_MONITOR_NONE;
        HRESULT hr;
        if (info5_ != nullptr) {
            DWORD curLow = 0, curHigh = 0;
            if (failed(info5_->GetEventMask2(&curLow, &curHigh))) curLow = curHigh = 0;
            hr = info5_->SetEventMask2(curLow | low, curHigh | high);
        } else {
            hr = info_->SetEventMask(low);
        }
        std::fprintf(stderr, "[assembly_inventory] ICorProfilerInfo%s, mask low=0x%x high=0x%x hr=0x%08x\n",
                     level_.c_str(), low, high, (unsigned)hr);
        if (failed(hr)) return hr;
        if (info12_ != nullptr) setup_eventpipe();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AppDomainCreationFinished(AppDomainID id, HRESULT hrStatus) override {
        if (done_.load() || failed(hrStatus)) return S_OK;
        ULONG cch = 0;
        ProcessID pid = 0;
        HRESULT hr = info_->GetAppDomainInfo(id, 0, &cch, nullptr, nullptr);
        std::vector<WCHAR> name(cch + 1, 0);
        if (size_pass_ok(hr) && cch > 0) hr = info_->GetAppDomainInfo(id, cch, &cch, name.data(), &pid);
        ++appdomains_;
        std::fprintf(stderr, "[assembly_inventory] appdomain '%s' hr=0x%08x\n", to_utf8(name.data()).c_str(), (unsigned)hr);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AssemblyLoadStarted(AssemblyID id) override {
        if (done_.load()) return S_OK;
        // Classify early so that per-assembly state (sampling, filters) exists before any of its code runs.
        ULONG cch = 0;
        AppDomainID domain = 0;
        ModuleID manifest = 0;
        // BUG: "The value of assemblyId is not valid for an information request until the ICorProfilerCallback::AssemblyLoadFinished method is called." (ICorProfilerCallback::AssemblyLoadStarted)
        HRESULT hr = info_->GetAssemblyInfo(id, 0, &cch, nullptr, nullptr, nullptr);
        std::vector<WCHAR> name(cch + 1, 0);
        if (size_pass_ok(hr) && cch > 0) hr = info_->GetAssemblyInfo(id, cch, &cch, name.data(), &domain, &manifest);
        if (hr == CORPROF_E_DATAINCOMPLETE) ++early_incomplete_;  // "name is there, manifest comes later"
        std::string n = to_utf8(name.data());
        if (n.empty()) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        assemblies_[id] = Assembly{n, is_framework(n), 0};
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID id, HRESULT hrStatus) override {
        if (done_.load() || failed(hrStatus)) return S_OK;
        ULONG cch = 0;
        DWORD flags = 0;
        std::vector<WCHAR> path;
        HRESULT hr;
        if (info3_ != nullptr) {
            hr = info3_->GetModuleInfo2(id, nullptr, 0, &cch, nullptr, nullptr, nullptr);
            path.assign(cch + 1, 0);
            if (size_pass_ok(hr) && cch > 0) hr = info3_->GetModuleInfo2(id, nullptr, cch, &cch, path.data(), nullptr, &flags);
        } else {
            hr = info_->GetModuleInfo(id, nullptr, 0, &cch, nullptr, nullptr);
            path.assign(cch + 1, 0);
            if (size_pass_ok(hr) && cch > 0) hr = info_->GetModuleInfo(id, nullptr, cch, &cch, path.data(), nullptr);
        }
        ++modules_;
        std::lock_guard<std::mutex> g(lock_);
        modules_by_id_[id] = Module{to_utf8(path.data()), flags};
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleAttachedToAssembly(ModuleID module, AssemblyID assembly) override {
        if (done_.load()) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        auto it = assemblies_.find(assembly);
        if (it != assemblies_.end() && it->second.manifest == 0) it->second.manifest = module;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID id, HRESULT hrStatus) override {
        if (done_.load() || failed(hrStatus)) return S_OK;
        Assembly a;
        Module m;
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = assemblies_.find(id);
            if (it == assemblies_.end()) return S_OK;  // no early name, nothing to inventory
            a = it->second;
            auto mt = modules_by_id_.find(a.manifest);
            if (mt != modules_by_id_.end()) m = mt->second;
        }
        ++(a.framework ? framework_ : application_);
        std::fprintf(stderr, "[assembly_inventory] %-11s %s <- %s (flags=0x%x)\n", a.framework ? "framework" : "application",
                     a.name.c_str(), m.path.c_str(), m.flags);
        publish(a, m);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE EventPipeEventDelivered(EVENTPIPE_PROVIDER provider, DWORD eventId, DWORD, ULONG, LPCBYTE,
                                                      ULONG, LPCBYTE, LPCGUID, LPCGUID, ThreadID, ULONG,
                                                      UINT_PTR*) override {
        if (!done_.load() && provider == provider_.load() && eventId == 1) ++exported_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        done_.store(true);
        std::fprintf(stderr,
                     "assembly_inventory: assemblies=%u application=%u framework=%u early_lookup_incomplete=%u "
                     "modules=%u appdomains=%u ep_written=%u ep_exported=%u session=%s runtime=%s info=ICorProfilerInfo%s\n",
                     application_.load() + framework_.load(), application_.load(), framework_.load(),
                     early_incomplete_.load(), modules_.load(), appdomains_.load(), written_.load(), exported_.load(),
                     session_.c_str(), runtime_.c_str(), level_.c_str());
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

private:
    struct Assembly {
        std::string name;
        bool framework = false;
        ModuleID manifest = 0;
    };
    struct Module {
        std::string path;
        DWORD flags = 0;
    };

    void runtime_identity() {
        if (info3_ == nullptr) return;
        USHORT inst = 0, major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE type = 0;
        ULONG cch = 0;
        HRESULT hr = info3_->GetRuntimeInformation(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, &cch, nullptr);
        std::vector<WCHAR> ver(cch + 1, 0);
        if (size_pass_ok(hr))
            hr = info3_->GetRuntimeInformation(&inst, &type, &major, &minor, &build, &qfe, cch, &cch, cch ? ver.data() : nullptr);
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s-%u.%u.%u('%s')", type == COR_PRF_CORE_CLR ? "core" : "desktop", major, minor,
                      build, to_utf8(ver.data()).c_str());
        runtime_ = succeeded(hr) ? buf : "unknown";
    }

    void setup_eventpipe() {
        EVENTPIPE_PROVIDER provider = 0;
        HRESULT hr = info12_->EventPipeCreateProvider(kProviderName, &provider);
        if (failed(hr)) { session_ = "no-provider"; return; }
        provider_.store(provider);
        COR_PRF_EVENTPIPE_PARAM_DESC params[] = {{kEpString, 0, u"AssemblyName"},
                                                 {kEpString, 0, u"ManifestPath"},
                                                 {kEpUInt32, 0, u"ModuleFlags"},
                                                 {kEpUInt32, 0, u"IsFramework"}};
        UINT_PTR ev = 0;
        hr = info12_->EventPipeDefineEvent(provider, u"InventoryEntry", 1, kInventoryKeyword, 1, kEpVerbose, 0, 0, 4,
                                           params, &ev);
        if (failed(hr)) { session_ = "no-event"; return; }
        event_.store(ev);
        COR_PRF_EVENTPIPE_PROVIDER_CONFIG cfg = {kProviderName, kInventoryKeyword, kEpVerbose, nullptr};
        std::uint64_t id = 0;
        hr = info12_->EventPipeStartSession(1, &cfg, /*requestRundown*/ 0, &id);
        session_ = succeeded(hr) ? "started" : "start-failed";
    }

    void publish(const Assembly& a, const Module& m) {
        const UINT_PTR ev = event_.load();
        if (info12_ == nullptr || ev == 0) return;
        std::u16string name = widen(a.name), path = widen(m.path);
        std::uint32_t flags = m.flags, fw = a.framework ? 1 : 0;
        COR_PRF_EVENT_DATA data[4] = {
            {reinterpret_cast<std::uint64_t>(name.c_str()), static_cast<std::uint32_t>((name.size() + 1) * sizeof(WCHAR)), 0},
            {reinterpret_cast<std::uint64_t>(path.c_str()), static_cast<std::uint32_t>((path.size() + 1) * sizeof(WCHAR)), 0},
            {reinterpret_cast<std::uint64_t>(&flags), sizeof flags, 0},
            {reinterpret_cast<std::uint64_t>(&fw), sizeof fw, 0}};
        if (succeeded(info12_->EventPipeWriteEvent(ev, 4, data, nullptr, nullptr))) ++written_;
    }

    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo3* info3_ = nullptr;
    ICorProfilerInfo5* info5_ = nullptr;
    ICorProfilerInfo12* info12_ = nullptr;
    std::string level_ = "1", runtime_ = "unknown", session_ = "unavailable(no ICorProfilerInfo12)";
    std::mutex lock_;
    std::unordered_map<AssemblyID, Assembly> assemblies_;
    std::unordered_map<ModuleID, Module> modules_by_id_;
    std::atomic<EVENTPIPE_PROVIDER> provider_{0};
    std::atomic<UINT_PTR> event_{0};
    std::atomic<unsigned> application_{0}, framework_{0}, early_incomplete_{0}, modules_{0}, appdomains_{0};
    std::atomic<unsigned> written_{0}, exported_{0};
    std::atomic<bool> done_{false};
};

DOCFIX_DEFINE_PROFILER(AssemblyInventory)
