// late_tiering_switch.cpp -- an APM agent's bootstrap with a per-application JIT policy.
//
// What it does:
//   * Initialize: takes the newest ICorProfilerInfo between 11 and 5 it can get (it needs
//     SetEventMask2), identifies the runtime with GetRuntimeInformation (single-pass: a 64-char
//     buffer, re-asked with the reported size if that was too small), reads its settings
//     (LATECFG_PRECISE_JIT, default on; LATECFG_USER_PREFIX, default empty = any non-framework
//     assembly) with ICorProfilerInfo11::GetEnvironmentVariable when available and getenv
//     otherwise, publishes LATECFG_AGENT=<runtime> to the application with
//     SetEnvironmentVariable, and sets its event mask (assembly and module loads, JIT compilation,
//     COR_PRF_HIGH_BASIC_GC) after reading the current one with GetEventMask2.
//   * "Precise JIT" policy: the agent wants every method of a *user* application compiled once,
//     fully optimized (no tier-0 code, no tier-up recompilation) so its JIT timings are
//     comparable, but it does not want to penalize framework tools.  It does not know what kind of
//     process it is in until the first non-framework assembly has loaded, so it applies the policy
//     from AssemblyLoadFinished: it resolves the assembly name with GetAssemblyInfo and, for the
//     first user assembly, ORs COR_PRF_HIGH_DISABLE_TIERED_COMPILATION into the high event mask.
//   * Counters: assemblies, modules, JIT compilations and FunctionIDs compiled more than once
//     (tier-up), GCs.  Shutdown prints a summary to stderr and releases the info pointer.
//
// Documentation followed (learn.microsoft.com, unmanaged profiling API):
//   * ICorProfilerCallback::Initialize -- "Pointer to an IUnknown interface that the profiler must
//     query for an ICorProfilerInfo interface pointer."
//   * ICorProfilerInfo3::GetRuntimeInformation -- "cchVersionString [in] The length, in characters,
//     of the buffer that szVersionString points to."; Remarks (translated from the zh-cn page):
//     pcchVersionString cannot be null unless szVersionString is also null.
//   * Caller-Allocated Buffers -- single-pass method: "Allocate a buffer that you expect will be
//     large enough ... Be prepared to reallocate the buffer if it proves to be too small."
//   * ICorProfilerInfo11::GetEnvironmentVariable / SetEnvironmentVariable -- "cchValue [in] The
//     length, in characters, of szValue."; "if the profiler calls setenv the new environment
//     variable will not be picked up by managed code running in the process."
//   * ICorProfilerInfo5::SetEventMask2 -- "Typically, you call the GetEventMask2 method to determine
//     which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh values and any
//     new bits you want to set, and then call the SetEventMask2 method."
//   * COR_PRF_HIGH_MONITOR -- "COR_PRF_HIGH_BASIC_GC ... .NET Core 3.0 and later versions only:
//     Provides a lightweight GC profiling option compared to COR_PRF_MONITOR_GC";
//     "COR_PRF_HIGH_DISABLE_TIERED_COMPILATION ... Disables tiered compilation for profilers."
//   * ICorProfilerInfo::GetAssemblyInfo + caller-allocated buffers (name buffer of 512 chars, the
//     reported length checked against it).
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call after Shutdown; only Release.
//
// It contains exactly ONE deliberate misuse of the profiling API, flagged by the BUG comment below.
#include "common.h"

#include <mutex>
#include <unordered_set>

using namespace docfix;

namespace {

struct AgentState {
    ICorProfilerInfo5* info = nullptr;       // valid for Info5 methods
    ICorProfilerInfo11* info11 = nullptr;    // non-null only when the runtime gave Info11
    int infoVersion = 0;
    char runtime[96] = "?";
    bool preciseJit = true;
    std::string userPrefix;
    HRESULT initMaskHr = E_FAIL;
    std::atomic<bool> policyDecided{false};
    std::string policyAssembly = "-";
    HRESULT policyHr = S_FALSE;              // S_FALSE = never attempted
    DWORD maskLowAfter = 0, maskHighAfter = 0;
    std::atomic<unsigned> assemblies{0}, modules{0}, jits{0}, jitAgain{0}, gcs{0};
    std::mutex lock;
    std::unordered_set<FunctionID> seen;
};

AgentState g;

void log(const char* what) { std::fprintf(stderr, "[latecfg] %s\n", what); }

bool read_setting(const char* name, std::string& out) {
    if (g.info11 == nullptr) {
        const char* v = std::getenv(name);
        if (v) out = v;
        return v != nullptr;
    }
    std::u16string wname(name, name + std::strlen(name));
    WCHAR value[256];
    ULONG len = 0;
    HRESULT hr = g.info11->GetEnvironmentVariable(wname.c_str(), sizeof(value) / sizeof(value[0]), &len, value);
    if (failed(hr)) return false;  // not set, or longer than we accept for a setting
    out = to_utf8(value, sizeof(value) / sizeof(value[0]));
    return true;
}

void identify_runtime() {
    auto* info3 = static_cast<ICorProfilerInfo3*>(g.info);
    COR_PRF_RUNTIME_TYPE kind = 0;
    USHORT major = 0, minor = 0, build = 0, qfe = 0;
    WCHAR ver[64] = {};
    ULONG verLen = 0;
    HRESULT hr = info3->GetRuntimeInformation(nullptr, &kind, &major, &minor, &build, &qfe, 64, &verLen, ver);
    std::string v;
    if (succeeded(hr)) {
        v = to_utf8(ver, 64);
    } else if (verLen > 64) {  // did not fit: one more time with the reported size
        std::u16string big(verLen, u'\0');
        if (succeeded(info3->GetRuntimeInformation(nullptr, &kind, &major, &minor, &build, &qfe, verLen, &verLen, &big[0])))
            v = to_utf8(big.data(), big.size());
    }
    std::snprintf(g.runtime, sizeof g.runtime, "%s %u.%u.%u (%s)", kind == COR_PRF_CORE_CLR ? "coreclr" : "clr", major,
                  minor, build, v.c_str());
}

bool is_framework_assembly(const std::string& name) {
    return name.rfind("System", 0) == 0 || name.rfind("Microsoft", 0) == 0 || name == "mscorlib" ||
           name == "netstandard";
}

}  // namespace

class LateTieringSwitch : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        static const struct { const GUID* iid; int v; } ladder[] = {
            {&IID_ICorProfilerInfo11, 11}, {&IID_ICorProfilerInfo10, 10}, {&IID_ICorProfilerInfo9, 9},
            {&IID_ICorProfilerInfo8, 8},   {&IID_ICorProfilerInfo7, 7},   {&IID_ICorProfilerInfo6, 6},
            {&IID_ICorProfilerInfo5, 5}};
        for (const auto& step : ladder) {
            void* p = nullptr;
            if (succeeded(unk->QueryInterface(*step.iid, &p)) && p != nullptr) {
                g.infoVersion = step.v;
                if (step.v == 11) {
                    g.info11 = static_cast<ICorProfilerInfo11*>(p);
                    g.info = g.info11;
                } else {
                    // every InfoN (N>=5) starts with the Info5 vtable
                    g.info = static_cast<ICorProfilerInfo5*>(p);
                }
                break;
            }
        }
        if (g.info == nullptr) {
            log("runtime older than ICorProfilerInfo5: agent disabled");
            return E_NOINTERFACE;
        }
        identify_runtime();

        std::string s;
        if (read_setting("LATECFG_PRECISE_JIT", s)) g.preciseJit = !(s == "0" || s == "false");
        read_setting("LATECFG_USER_PREFIX", g.userPrefix);

        if (g.info11 != nullptr) {
            std::u16string name = u"LATECFG_AGENT";
            std::string r = g.runtime;
            std::u16string value(r.begin(), r.end());
            HRESULT hr = g.info11->SetEnvironmentVariable(name.c_str(), value.c_str());
            if (failed(hr)) std::fprintf(stderr, "[latecfg] SetEnvironmentVariable failed 0x%08x\n", (unsigned)hr);
        }

        DWORD low = 0, high = 0;
        if (failed(g.info->GetEventMask2(&low, &high))) low = high = 0;
        low |= COR_PRF_MONITOR_ASSEMBLY_LOADS | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_JIT_COMPILATION;
        high |= COR_PRF_HIGH_BASIC_GC;
        g.initMaskHr = g.info->SetEventMask2(low, high);
        if (failed(g.initMaskHr)) {
            std::fprintf(stderr, "[latecfg] SetEventMask2 failed 0x%08x: agent disabled\n", (unsigned)g.initMaskHr);
            return S_OK;  // stay loaded but passive
        }
        std::fprintf(stderr, "[latecfg] agent up: Info%d, %s, precise-jit=%s\n", g.infoVersion, g.runtime,
                     g.preciseJit ? "on" : "off");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID assembly, HRESULT status) override {
        if (failed(status)) return S_OK;
        ++g.assemblies;
        if (!g.preciseJit || g.policyDecided.load()) return S_OK;

        WCHAR name[512];
        ULONG nameLen = 0;
        AppDomainID domain = 0;
        ModuleID module = 0;
        HRESULT hr = g.info->GetAssemblyInfo(assembly, 512, &nameLen, name, &domain, &module);
        if (failed(hr) || nameLen > 512) return S_OK;  // name unknown or truncated: decide on a later assembly
        std::string asmName = to_utf8(name, 512);
        if (is_framework_assembly(asmName)) return S_OK;
        if (!g.userPrefix.empty() && asmName.rfind(g.userPrefix, 0) != 0) return S_OK;

        bool expected = false;
        if (!g.policyDecided.compare_exchange_strong(expected, true)) return S_OK;  // another thread decided

        // First user assembly: switch the process to "precise JIT" -- no tier-0, no tier-up.
        DWORD low = 0, high = 0;
        hr = g.info->GetEventMask2(&low, &high);
        if (failed(hr)) return S_OK;
        // BUG: COR_PRF_HIGH_DISABLE_TIERED_COMPILATION is an immutable (startup-only) flag
        // (COR_PRF_HIGH_MONITOR_IMMUTABLE = COR_PRF_HIGH_DISABLE_TIERED_COMPILATION), and this call is made from
        // AssemblyLoadFinished, long after Initialize returned.  ICorProfilerCallback::Initialize: "The Initialize
        // call is the only opportunity to enable (or disable) callbacks that are immutable."
        g.policyHr = g.info->SetEventMask2(low, high | COR_PRF_HIGH_DISABLE_TIERED_COMPILATION);  // BUG: immutable flag, not in Initialize
        g.policyAssembly = asmName;
        g.info->GetEventMask2(&g.maskLowAfter, &g.maskHighAfter);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT status) override {
        if (succeeded(status)) ++g.modules;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        ++g.jits;
        std::lock_guard<std::mutex> hold(g.lock);
        if (!g.seen.insert(fid).second) ++g.jitAgain;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        ++g.gcs;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::fprintf(stderr,
                     "[latecfg] summary: %s Info%d precise-jit policy on '%s' -> hr=0x%08x mask after=0x%08x/0x%08x; "
                     "assemblies=%u modules=%u jit=%u jit-again=%u gcs=%u\n",
                     g.runtime, g.infoVersion, g.policyAssembly.c_str(), (unsigned)g.policyHr, (unsigned)g.maskLowAfter,
                     (unsigned)g.maskHighAfter, g.assemblies.load(), g.modules.load(), g.jits.load(), g.jitAgain.load(),
                     g.gcs.load());
        if (g.info != nullptr) {
            g.info->Release();
            g.info = nullptr;
            g.info11 = nullptr;
        }
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(LateTieringSwitch)
