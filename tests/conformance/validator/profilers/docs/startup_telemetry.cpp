// startup_telemetry.cpp -- the startup part of an APM agent.
//
// What it does: Initialize asks for the newest ICorProfilerInfo the runtime offers (14 down to 1),
// reads the runtime's identity with GetRuntimeInformation (two passes), ORs its needs into the
// current mask (GetEventMask2 + SetEventMask2: module, assembly and appdomain loads; high flag
// COR_PRF_HIGH_MONITOR_EVENT_PIPE only when ICorProfilerInfo12 exists).  With ICorProfilerInfo12 it
// creates its own EventPipe provider "StartupTelemetry-Agent" with one event "AssemblyLoad"
// (name, AssemblyID, AppDomainID, ModuleID) and starts one EventPipe session listening to
// Microsoft-Windows-DotNETRuntime (Loader keyword) and to its own provider.  Each successful
// ModuleLoadFinished / AssemblyLoadFinished / AppDomainCreationFinished is named with a two-pass
// Get*Info call and logged; each loaded assembly is written as one EventPipe event.
// EventPipeEventDelivered callbacks are counted (own provider vs. runtime).  Shutdown prints
// "startup_telemetry: modules=<n> ..." to stderr and only Releases the info pointer.
//
// Documentation followed (learn.microsoft.com .../unmanaged-api/profiling/...):
//  * ICorProfilerCallback::Initialize: "Pointer to an IUnknown interface that the profiler must
//    query for an ICorProfilerInfo interface pointer."; "The Initialize call is the only opportunity
//    to enable (or disable) callbacks that are immutable."
//  * ICorProfilerInfo3::GetRuntimeInformation: "You can pass null for any parameter. However,
//    pcchVersionString cannot be null unless szVersionString is also null."
//  * ICorProfilerInfo5::SetEventMask2: "Typically, you call the GetEventMask2 method to determine
//    which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh values and any
//    new bits you want to set, and then call the SetEventMask2 method."
//  * COR_PRF_HIGH_MONITOR: flags "that the profiler can specify to the
//    ICorProfilerInfo5::SetEventMask2 method when it is loading" (so: set in Initialize).
//  * ICorProfilerCallback::ModuleLoadFinished: "The value of moduleId is not valid for an
//    information request until the ModuleLoadFinished method is called."  (Same sentence for
//    assemblyId / AssemblyLoadFinished; AppDomainCreationFinished: "The application ID is not valid
//    for any information request until the AppDomainCreationFinished method is called.")
//  * ICorProfilerInfo3::GetModuleInfo2, ICorProfilerInfo::GetAssemblyInfo / GetAppDomainInfo:
//    "Alternatively, you can first call ... with a zero-length szName buffer to obtain the correct
//    buffer size." and "the ID of the parent assembly will not be available until the profiler
//    receives the ICorProfilerCallback::ModuleAttachedToAssembly callback" (so the module's
//    AssemblyID is not used; ModuleAttachedToAssembly is counted instead).
//  * ICorProfilerInfo12::EventPipeCreateProvider / EventPipeDefineEvent / EventPipeWriteEvent /
//    EventPipeStartSession and the COR_PRF_EVENTPIPE_* / COR_PRF_EVENT_DATA pages (struct layouts
//    and enum values below are copied from those pages; the kit headers do not declare them).
//  * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//    ICorProfilerInfo interface after the Shutdown method is called."  -> no Info call in or after
//    Shutdown except the final IUnknown::Release; the session is therefore never stopped by us.
//
// Left ambiguous by the documents:
//  * COR_PRF_HIGH_MONITOR_EVENT_PIPE (0x80) is missing from the COR_PRF_HIGH_MONITOR page; no page
//    says which flag gates EventPipeEventDelivered.  Value and meaning taken from corprof.idl.  On
//    runtimes without ICorProfilerInfo12 the bit is not requested at all.
//  * The EventPipe pages have no Remarks: nothing says from which callbacks or threads the methods
//    may be called, whether Initialize is a valid moment, or whether a session must be stopped
//    before Shutdown (EventPipeStopSession inside Shutdown would contradict the Shutdown sentence).
//  * "zero-length szName buffer": whether NULL is accepted and which HRESULT the sizing pass returns
//    is unstated; NULL is passed and S_OK or ERROR_INSUFFICIENT_BUFFER are both accepted.  Whether
//    pcch* counts the terminating NUL is unstated; buffers are sized to it and terminated anyway.
//  * GetRuntimeInformation: nothing says whether the other outputs are filled when the string buffer
//    is too small (3.1 returns ERROR_INSUFFICIENT_BUFFER and fills nothing; 8.0 returns S_OK and
//    fills all), nor what .NET Core reports as "major version of the CLR" (3.1: 4.0.30319).
//  * COR_PRF_EVENT_DATA.size for a STRING parameter: whether the NUL is included is unstated (it is
//    included here, as the string type is described as "null terminated").
#include "common.h"

#include <mutex>
#include <type_traits>
#include <vector>

namespace profharness {  // corprof.idl structs the kit only forward-declares (pages quoted above)
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
constexpr std::uint32_t kEpUInt64 = 12, kEpString = 18;  // COR_PRF_EVENTPIPE_PARAM_TYPE
constexpr std::uint32_t kEpInformational = 4;            // COR_PRF_EVENTPIPE_LEVEL
constexpr std::uint64_t kRuntimeLoaderKeyword = 0x8;     // Microsoft-Windows-DotNETRuntime Loader
constexpr std::uint64_t kOwnKeyword = 0x1;
const WCHAR kOwnProvider[] = u"StartupTelemetry-Agent";

const GUID* const kInfoIids[] = {&IID_ICorProfilerInfo14, &IID_ICorProfilerInfo13, &IID_ICorProfilerInfo12,
                                 &IID_ICorProfilerInfo11, &IID_ICorProfilerInfo10, &IID_ICorProfilerInfo9,
                                 &IID_ICorProfilerInfo8,  &IID_ICorProfilerInfo7,  &IID_ICorProfilerInfo6,
                                 &IID_ICorProfilerInfo5,  &IID_ICorProfilerInfo4,  &IID_ICorProfilerInfo3,
                                 &IID_ICorProfilerInfo2,  &IID_ICorProfilerInfo};

std::string module_flags(DWORD f) {
    static const char* const names[] = {"DISK", "NGEN", "DYNAMIC", "COLLECTIBLE", "RESOURCE", "FLAT_LAYOUT", "WINRT"};
    std::string s;
    for (int i = 0; i < 7; ++i)
        if (f & (1u << i)) s += (s.empty() ? "" : "|") + std::string(names[i]);
    return s.empty() ? "none" : s;
}
bool sizing_ok(HRESULT hr) { return succeeded(hr) || hr == HRESULT_ERROR_INSUFFICIENT_BUFFER; }
}  // namespace

class StartupTelemetry : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        if (!acquire_newest_info(unk)) {
            std::fprintf(stderr, "[startup_telemetry] no ICorProfilerInfo interface offered\n");
            return E_NOINTERFACE;
        }
        std::fprintf(stderr, "[startup_telemetry] newest interface: ICorProfilerInfo%d\n", info_version_);
        read_runtime_identity();
        HRESULT hr = set_mask();
        if (failed(hr)) return hr;
        if (info12_ != nullptr) {
            setup_own_provider();
            start_runtime_session();
        } else {
            session_status_ = "unavailable(ICorProfilerInfo12 not offered, newest is ICorProfilerInfo" +
                              std::to_string(info_version_) + ")";
        }
        std::fprintf(stderr, "[startup_telemetry] initialized; eventpipe session: %s\n", session_status_.c_str());
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AppDomainCreationFinished(AppDomainID id, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ULONG cch = 0;
        ProcessID pid = 0;
        HRESULT hr = info_->GetAppDomainInfo(id, 0, &cch, nullptr, nullptr);  // pass 1: size
        std::vector<WCHAR> name(cch + 1, 0);
        if (sizing_ok(hr) && cch > 0) hr = info_->GetAppDomainInfo(id, cch, &cch, name.data(), &pid);
        ++appdomains_;
        std::fprintf(stderr, "[startup_telemetry] appdomain 0x%zx '%s' pid=%zu hr=0x%08x\n", (size_t)id,
                     to_utf8(name.data()).c_str(), (size_t)pid, (unsigned)hr);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID id, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ULONG cch = 0;
        LPCBYTE base = nullptr;
        AssemblyID ignored = 0;  // not yet valid: see ModuleAttachedToAssembly sentence above
        DWORD flags = 0;
        HRESULT hr;
        std::vector<WCHAR> name;
        if (info3_ != nullptr) {
            hr = info3_->GetModuleInfo2(id, nullptr, 0, &cch, nullptr, nullptr, nullptr);  // pass 1
            name.assign(cch + 1, 0);
            if (sizing_ok(hr) && cch > 0)
                hr = info3_->GetModuleInfo2(id, &base, cch, &cch, name.data(), &ignored, &flags);
        } else {
            hr = info_->GetModuleInfo(id, nullptr, 0, &cch, nullptr, nullptr);
            name.assign(cch + 1, 0);
            if (sizing_ok(hr) && cch > 0) hr = info_->GetModuleInfo(id, &base, cch, &cch, name.data(), &ignored);
        }
        ++modules_;
        std::fprintf(stderr, "[startup_telemetry] module 0x%zx flags=%s base=%p '%s' hr=0x%08x\n", (size_t)id,
                     module_flags(flags).c_str(), (const void*)base, to_utf8(name.data()).c_str(), (unsigned)hr);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleAttachedToAssembly(ModuleID, AssemblyID) override {
        if (!shutdown_.load()) ++attached_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID id, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ULONG cch = 0;
        AppDomainID domain = 0;
        ModuleID manifest = 0;
        HRESULT hr = info_->GetAssemblyInfo(id, 0, &cch, nullptr, nullptr, nullptr);  // pass 1: size
        std::vector<WCHAR> name(cch + 1, 0);
        if (sizing_ok(hr) && cch > 0) hr = info_->GetAssemblyInfo(id, cch, &cch, name.data(), &domain, &manifest);
        ++assemblies_;
        std::fprintf(stderr, "[startup_telemetry] assembly 0x%zx '%s' domain=0x%zx manifest=0x%zx hr=0x%08x\n",
                     (size_t)id, to_utf8(name.data()).c_str(), (size_t)domain, (size_t)manifest, (unsigned)hr);
        if (succeeded(hr)) write_assembly_event(name, id, domain, manifest);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE EventPipeEventDelivered(EVENTPIPE_PROVIDER provider, DWORD, DWORD, ULONG, LPCBYTE, ULONG,
                                                      LPCBYTE, LPCGUID, LPCGUID, ThreadID, ULONG,
                                                      UINT_PTR*) override {
        if (shutdown_.load()) return S_OK;  // "Certain immutable events may still occur after shutdown"
        if (provider != 0 && provider == own_provider_.load())
            ++delivered_own_;
        else
            ++delivered_runtime_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::fprintf(stderr,
                     "startup_telemetry: modules=%u assemblies=%u appdomains=%u attached=%u info=ICorProfilerInfo%d "
                     "runtime=%s ep_provider=%s ep_written=%u ep_write_failed=%u ep_delivered=%u (own=%u runtime=%u) "
                     "session=%s\n",
                     modules_.load(), assemblies_.load(), appdomains_.load(), attached_.load(), info_version_,
                     runtime_.c_str(), provider_status_.c_str(), written_.load(), write_failed_.load(),
                     delivered_own_.load() + delivered_runtime_.load(), delivered_own_.load(),
                     delivered_runtime_.load(), session_status_.c_str());
        if (info_ != nullptr) info_->Release();  // the only thing done with the pointer here
        info_ = nullptr;
        return S_OK;
    }

private:
    template <class T>
    void bind(void* raw) {
        T* p = static_cast<T*>(raw);
        info_ = p;
        if constexpr (std::is_base_of_v<ICorProfilerInfo3, T>) info3_ = p;
        if constexpr (std::is_base_of_v<ICorProfilerInfo5, T>) info5_ = p;
        if constexpr (std::is_base_of_v<ICorProfilerInfo12, T>) info12_ = p;
    }

    bool acquire_newest_info(IUnknown* unk) {
        for (size_t i = 0; i < sizeof(kInfoIids) / sizeof(kInfoIids[0]); ++i) {
            void* raw = nullptr;
            if (failed(unk->QueryInterface(*kInfoIids[i], &raw)) || raw == nullptr) continue;
            info_version_ = 14 - static_cast<int>(i);
            switch (info_version_) {
                case 14: bind<ICorProfilerInfo14>(raw); break;
                case 13: bind<ICorProfilerInfo13>(raw); break;
                case 12: bind<ICorProfilerInfo12>(raw); break;
                case 11: bind<ICorProfilerInfo11>(raw); break;
                case 10: bind<ICorProfilerInfo10>(raw); break;
                case 9: bind<ICorProfilerInfo9>(raw); break;
                case 8: bind<ICorProfilerInfo8>(raw); break;
                case 7: bind<ICorProfilerInfo7>(raw); break;
                case 6: bind<ICorProfilerInfo6>(raw); break;
                case 5: bind<ICorProfilerInfo5>(raw); break;
                case 4: bind<ICorProfilerInfo4>(raw); break;
                case 3: bind<ICorProfilerInfo3>(raw); break;
                case 2: bind<ICorProfilerInfo2>(raw); break;
                default: bind<ICorProfilerInfo>(raw); break;
            }
            return true;
        }
        return false;
    }

    void read_runtime_identity() {
        if (info3_ == nullptr) {
            runtime_ = "unknown(no ICorProfilerInfo3)";
            return;
        }
        USHORT inst = 0, major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE type = 0;
        ULONG cch = 0;
        // Pass 1: size only (szVersionString NULL, so pcchVersionString may be non-NULL).  3.1 answers
        // ERROR_INSUFFICIENT_BUFFER and then leaves the numeric outputs untouched, so pass 2 asks for all.
        HRESULT hr = info3_->GetRuntimeInformation(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, &cch, nullptr);
        std::vector<WCHAR> ver(cch + 1, 0);
        if (sizing_ok(hr))
            hr = info3_->GetRuntimeInformation(&inst, &type, &major, &minor, &build, &qfe, cch, &cch,
                                               cch > 0 ? ver.data() : nullptr);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s/%u.%u.%u.%u/'%s'", type == COR_PRF_CORE_CLR ? "CoreCLR" : "DesktopCLR",
                      major, minor, build, qfe, to_utf8(ver.data()).c_str());
        runtime_ = buf;
        std::fprintf(stderr, "[startup_telemetry] runtime %s clrInstanceId=%u hr=0x%08x\n", buf, inst, (unsigned)hr);
    }

    HRESULT set_mask() {
        const DWORD low = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_ASSEMBLY_LOADS | COR_PRF_MONITOR_APPDOMAIN_LOADS;
        if (info5_ == nullptr) {
            HRESULT hr = info_->SetEventMask(low);
            std::fprintf(stderr, "[startup_telemetry] SetEventMask(0x%x) hr=0x%08x\n", low, (unsigned)hr);
            return hr;
        }
        DWORD curLow = 0, curHigh = 0;
        HRESULT hr = info5_->GetEventMask2(&curLow, &curHigh);
        if (failed(hr)) curLow = curHigh = 0;
        const DWORD high = info12_ != nullptr ? COR_PRF_HIGH_MONITOR_EVENT_PIPE : COR_PRF_HIGH_MONITOR_NONE;
        hr = info5_->SetEventMask2(curLow | low, curHigh | high);
        std::fprintf(stderr, "[startup_telemetry] SetEventMask2(low=0x%x, high=0x%x) hr=0x%08x\n", curLow | low,
                     curHigh | high, (unsigned)hr);
        if (failed(hr) && high != 0) {  // graceful fallback: loads without EventPipe delivery
            hr = info5_->SetEventMask2(curLow | low, curHigh);
            if (succeeded(hr)) info12_ = nullptr;
        }
        return hr;
    }

    void setup_own_provider() {
        EVENTPIPE_PROVIDER provider = 0;
        HRESULT hr = info12_->EventPipeCreateProvider(kOwnProvider, &provider);
        if (failed(hr)) {
            provider_status_ = "CreateProvider-failed";
            return;
        }
        own_provider_.store(provider);
        COR_PRF_EVENTPIPE_PARAM_DESC params[] = {{kEpString, 0, u"AssemblyName"},
                                                 {kEpUInt64, 0, u"AssemblyID"},
                                                 {kEpUInt64, 0, u"AppDomainID"},
                                                 {kEpUInt64, 0, u"ModuleID"}};
        UINT_PTR ev = 0;
        hr = info12_->EventPipeDefineEvent(provider, u"AssemblyLoad", 1, kOwnKeyword, 1, kEpInformational, 0,
                                           /*needStack*/ 0, 4, params, &ev);
        provider_status_ = succeeded(hr) ? "ok" : "DefineEvent-failed";
        if (succeeded(hr)) event_.store(ev);
    }

    void start_runtime_session() {
        COR_PRF_EVENTPIPE_PROVIDER_CONFIG cfg[] = {
            {u"Microsoft-Windows-DotNETRuntime", kRuntimeLoaderKeyword, kEpInformational, nullptr},
            {kOwnProvider, kOwnKeyword, kEpInformational, nullptr}};
        std::uint64_t session = 0;
        HRESULT hr = info12_->EventPipeStartSession(2, cfg, /*requestRundown*/ 0, &session);
        char buf[96];
        std::snprintf(buf, sizeof buf, succeeded(hr) ? "started(id=0x%llx)" : "failed(hr=0x%08llx)",
                      succeeded(hr) ? (unsigned long long)session : (unsigned long long)(unsigned)hr);
        session_status_ = buf;
    }

    void write_assembly_event(const std::vector<WCHAR>& name, AssemblyID id, AppDomainID domain, ModuleID manifest) {
        const UINT_PTR ev = event_.load();
        if (info12_ == nullptr || ev == 0) return;
        std::uint64_t a = id, d = domain, m = manifest;
        size_t chars = 0;
        while (chars < name.size() && name[chars] != 0) ++chars;
        COR_PRF_EVENT_DATA data[4] = {
            {reinterpret_cast<std::uint64_t>(name.data()), static_cast<std::uint32_t>((chars + 1) * sizeof(WCHAR)), 0},
            {reinterpret_cast<std::uint64_t>(&a), sizeof a, 0},
            {reinterpret_cast<std::uint64_t>(&d), sizeof d, 0},
            {reinterpret_cast<std::uint64_t>(&m), sizeof m, 0}};
        HRESULT hr = info12_->EventPipeWriteEvent(ev, 4, data, nullptr, nullptr);
        if (succeeded(hr)) ++written_; else ++write_failed_;
    }

    ICorProfilerInfo* info_ = nullptr;
    ICorProfilerInfo3* info3_ = nullptr;
    ICorProfilerInfo5* info5_ = nullptr;
    ICorProfilerInfo12* info12_ = nullptr;
    int info_version_ = 0;
    std::string runtime_ = "unknown", provider_status_ = "none", session_status_ = "none";
    std::atomic<EVENTPIPE_PROVIDER> own_provider_{0};
    std::atomic<UINT_PTR> event_{0};
    std::atomic<unsigned> modules_{0}, assemblies_{0}, appdomains_{0}, attached_{0};
    std::atomic<unsigned> written_{0}, write_failed_{0}, delivered_own_{0}, delivered_runtime_{0};
    std::atomic<bool> shutdown_{false};
};

DOCFIX_DEFINE_PROFILER(StartupTelemetry)
