// startupconfig.cpp -- the startup-configuration stage of an APM-style agent for CoreCLR.
//
// What it does (everything that matters happens inside ICorProfilerCallback::Initialize):
//   1. Interface negotiation.  It QueryInterfaces the IUnknown it is given for every
//      ICorProfilerInfo version from 14 down to 1, keeps the newest one it gets and records which
//      ones the runtime answers, so every later call is made only through an interface the runtime
//      actually returned ("degrade on older runtimes").  It also records the newest
//      ICorProfilerCallbackN the runtime asked our object for (overridden QueryInterface).
//   2. Runtime identification with ICorProfilerInfo3::GetRuntimeInformation (two-pass for the
//      version string: size query with a null buffer, then a buffer of the reported size).
//   3. Agent configuration from the environment: STARTUPCFG_* variables are read with
//      ICorProfilerInfo11::GetEnvironmentVariable when the runtime offers Info11, with getenv
//      otherwise (before any managed code has run the two views are the same).
//        STARTUPCFG_ENABLED=0                 passive mode (event mask NONE)
//        STARTUPCFG_FEATURES=a,b,...          subset of modules,assemblies,jit,threads,
//                                             exceptions,gc,rejit,dynamic  (default: all but dynamic)
//        STARTUPCFG_TIERED_COMPILATION=0      ask for COR_PRF_HIGH_DISABLE_TIERED_COMPILATION
//        STARTUPCFG_INLINING=0                ask for COR_PRF_DISABLE_INLINING
//        STARTUPCFG_PRECOMPILED=default|none|profile
//                                             none    -> COR_PRF_DISABLE_ALL_NGEN_IMAGES
//                                             profile -> COR_PRF_USE_PROFILE_IMAGES
//        STARTUPCFG_SET_ENV=N1=V1;N2=V2       variables to put into the application's environment
//        STARTUPCFG_VERBOSE=1                 log every step
//   4. Environment adjustment through ICorProfilerInfo11::SetEnvironmentVariable (only when Info11
//      exists; on Linux a plain setenv would not be seen by managed code): it publishes
//      STARTUPCFG_AGENT_STATE="info=N;features=..." for the application and applies
//      STARTUPCFG_SET_ENV, reading every value back with GetEnvironmentVariable to verify it.
//   5. Event mask.  The desired low (COR_PRF_MONITOR) and high (COR_PRF_HIGH_MONITOR) words are
//      computed from the configuration, including the startup-only (immutable) flags, and set ONCE
//      from Initialize with ICorProfilerInfo5::SetEventMask2 after reading the current mask with
//      GetEventMask2.  If the runtime refuses the combination, optional bits are dropped one at a
//      time (high flags first, COR_PRF_HIGH_BASIC_GC falls back to COR_PRF_MONITOR_GC) until it
//      accepts; without Info5 only the low word is set with ICorProfilerInfo::SetEventMask.  The
//      mask is read back and compared.  No mask is ever changed after Initialize.
//   6. Light callbacks prove that the features are live: module/assembly loads, JIT compilations
//      (and how many FunctionIDs were JIT-compiled more than once, the tier-up signature that
//      disappears when tiered compilation is disabled), threads, exceptions, GCs.
//   7. Shutdown prints a short report to stderr (runtime, interfaces, mask, per-feature status,
//      environment results, counters) and releases the info pointer.  It never fails the app:
//      every failing call is logged and degraded, Initialize returns S_OK unless no ICorProfilerInfo
//      at all can be obtained.
//
// Documentation followed (learn.microsoft.com, unmanaged profiling API):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."
//     "The Initialize call is the only opportunity to enable (or disable) callbacks that are
//     immutable. Once a callback is enabled by the Initialize call, it cannot be disabled later
//     using ICorProfilerInfo::SetEventMask. The COR_PRF_MONITOR_IMMUTABLE value of the
//     COR_PRF_MONITOR enumeration indicates which events are immutable."
//   * ICorProfilerInfo5::SetEventMask2 -- "Typically, you call the GetEventMask2 method to
//     determine which bits are set, perform a logical OR of its pdwEventsLow and pdwEventsHigh
//     values and any new bits you want to set, and then call the SetEventMask2 method."
//     "This method is the recommended alternative to the SetEventMask method."
//   * ICorProfilerInfo::SetEventMask -- "You should call the SetEventMask2 method instead of this
//     method." (used only when the runtime has no ICorProfilerInfo5)
//   * COR_PRF_HIGH_MONITOR enumeration -- "COR_PRF_HIGH_DISABLE_TIERED_COMPILATION ... .NET Core
//     3.0 and later versions only: Disables tiered compilation for profilers."; "COR_PRF_HIGH_BASIC_GC
//     ... .NET Core 3.0 and later versions only: Provides a lightweight GC profiling option compared
//     to COR_PRF_MONITOR_GC"; COR_PRF_HIGH_MONITOR_IMMUTABLE = COR_PRF_HIGH_DISABLE_TIERED_COMPILATION;
//     COR_PRF_HIGH_REQUIRE_PROFILE_IMAGE = 0 (no high flag needs profile images, so
//     COR_PRF_USE_PROFILE_IMAGES is only set when the configuration asks for it).
//   * ICorProfilerInfo4::RequestReJIT -- "You must enable JIT recompilation during initialization by
//     using the ICorProfilerInfo::SetEventMask method to set the COR_PRF_ENABLE_REJIT flag." (the
//     rejit capability is therefore decided here, in Initialize, even though nothing is rejitted)
//   * ICorProfilerInfo3::GetRuntimeInformation -- "pcchVersionString [out] The length, in
//     characters, of szVersionString."; Remarks (read on the zh-cn rendering of the page, here
//     translated): null may be passed for any parameter, but pcchVersionString cannot be null
//     unless szVersionString is also null.
//   * Caller-Allocated Buffers in the Profiling API -- "If InfoBuffer is null, cBufferSizeStart must
//     be 0."; double-pass: "First call with a zero-length InfoBuffer parameter to obtain the correct
//     buffer size. Then set the buffer size to the value returned in pcBufferMax and call the
//     function again."
//   * ICorProfilerInfo11::GetEnvironmentVariable -- "On non-Windows platforms the runtime keeps an
//     internal cache of environment variables to ensure thread safety. This means that calling getenv
//     will not read any new or updated environment variables set by managed code running in the
//     process after startup."; "cchValue [in] The length, in characters, of szValue."; "pcchValue
//     [out] A pointer to the total character length of szValue."
//   * ICorProfilerInfo11::SetEnvironmentVariable -- "Sets an environment variable in the process. On
//     non-Windows platforms the runtime keeps an internal cache of environment variables ... This
//     means that if the profiler calls setenv the new environment variable will not be picked up by
//     managed code running in the process."  (hence SetEnvironmentVariable, never setenv)
//   * ICorProfilerInfo11 interface -- ".NET Versions: Available since .NET Core 3.1".
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." (Shutdown only prints what
//     was gathered and releases the pointer; the final mask was read back in Initialize.)
#include "common.h"

#include <cstdarg>
#include <mutex>
#include <unordered_set>
#include <vector>

using namespace docfix;

namespace {

const char* const kTag = "[startupconfig]";

std::u16string to_u16(const std::string& s) {
    std::u16string out;  // configuration names/values are ASCII; anything else is passed through as-is
    for (unsigned char c : s) out += static_cast<char16_t>(c);
    return out;
}

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t");
    size_t e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t p = s.find(sep, start);
        if (p == std::string::npos) p = s.size();
        std::string item = trim(s.substr(start, p - start));
        if (!item.empty()) out.push_back(item);
        start = p + 1;
    }
    return out;
}

enum Feature : unsigned {
    F_MODULES = 0,
    F_ASSEMBLIES,
    F_JIT,
    F_THREADS,
    F_EXCEPTIONS,
    F_GC,
    F_REJIT,
    F_DYNAMIC,
    F_NO_TIERING,
    F_NO_INLINING,
    F_NO_PRECOMPILED,
    F_PROFILE_IMAGES,
    F_COUNT
};
const char* const kFeatureNames[F_COUNT] = {"modules",    "assemblies", "jit",          "threads",
                                            "exceptions", "gc",         "rejit",        "dynamic",
                                            "no-tiering", "no-inlining", "no-precompiled", "profile-images"};

enum class FeatureState { Off, Requested, Enabled, Dropped, Unsupported };
const char* state_name(FeatureState s) {
    switch (s) {
        case FeatureState::Off: return "off";
        case FeatureState::Requested: return "requested";
        case FeatureState::Enabled: return "on";
        case FeatureState::Dropped: return "refused";
        case FeatureState::Unsupported: return "unsupported";
    }
    return "?";
}

}  // namespace

class StartupConfigProfiler : public CallbackBase {
public:
    // Record which callback interfaces the runtime asks for (it QIs for the newest it knows).
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        static const GUID* const kCallbacks[] = {
            &IID_ICorProfilerCallback,  &IID_ICorProfilerCallback2, &IID_ICorProfilerCallback3,
            &IID_ICorProfilerCallback4, &IID_ICorProfilerCallback5, &IID_ICorProfilerCallback6,
            &IID_ICorProfilerCallback7, &IID_ICorProfilerCallback8, &IID_ICorProfilerCallback9,
            &IID_ICorProfilerCallback10, &IID_ICorProfilerCallback11};
        for (int i = 0; i < 11; ++i) {
            if (riid == *kCallbacks[i]) {
                int v = i + 1;
                int cur = maxCallbackAsked_.load();
                while (v > cur && !maxCallbackAsked_.compare_exchange_weak(cur, v)) {
                }
                break;
            }
        }
        return CallbackBase::QueryInterface(riid, ppv);
    }

    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        negotiateInterfaces(unk);
        if (info_ == nullptr) {
            std::fprintf(stderr, "%s no ICorProfilerInfo interface: profiler stays unloaded\n", kTag);
            return E_NOINTERFACE;
        }
        verboseOn_ = envFlag("STARTUPCFG_VERBOSE", false);
        verbose("interfaces answered: %s; using ICorProfilerInfo%d", interfaceList_.c_str(), infoLevel_);
        identifyRuntime();
        readConfiguration();
        adjustEnvironment();
        applyEventMask();
        std::fprintf(stderr, "%s initialized: info=%d runtime=%s mask=0x%08x/0x%08x\n", kTag, infoLevel_,
                     runtimeText_.c_str(), (unsigned)finalLow_, (unsigned)finalHigh_);
        return S_OK;
    }

    // ---- feature callbacks (counters only; nothing here calls back into the runtime) ----
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT hr) override {
        if (succeeded(hr)) ++modules_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID, HRESULT hr) override {
        if (succeeded(hr)) ++assemblies_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        ++jitStarted_;
        std::lock_guard<std::mutex> g(jitLock_);
        if (!jitted_.insert(fid).second) ++jitAgain_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override {
        ++threads_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override {
        ++exceptions_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        ++gcs_;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE DynamicMethodUnloaded(FunctionID) override {
        ++dynamicUnloads_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::fprintf(stderr, "%s summary: runtime=%s clrInstance=%u info=ICorProfilerInfo%d callback=ICorProfilerCallback%d\n",
                     kTag, runtimeText_.c_str(), (unsigned)clrInstance_, infoLevel_, maxCallbackAsked_.load());
        std::fprintf(stderr, "%s summary: interfaces=%s config=%s envApi=%s envSet=%d/%d\n", kTag,
                     interfaceList_.c_str(), configSource_.c_str(), envApiState_.c_str(), envSetOk_, envSetTried_);
        std::string feats;
        for (unsigned f = 0; f < F_COUNT; ++f) {
            if (state_[f] == FeatureState::Off) continue;
            if (!feats.empty()) feats += ' ';
            feats += std::string(kFeatureNames[f]) + "=" + state_name(state_[f]);
        }
        std::fprintf(stderr, "%s summary: mask=0x%08x high=0x%08x (setBy=%s attempts=%d readback=%s) features: %s\n", kTag,
                     (unsigned)finalLow_, (unsigned)finalHigh_, maskApi_.c_str(), maskAttempts_,
                     readbackOk_ ? "match" : "MISMATCH", feats.empty() ? "none" : feats.c_str());
        std::fprintf(stderr,
                     "%s summary: modules=%u assemblies=%u jit=%u jit-again=%u threads=%u exceptions=%u gcs=%u dyn-unloads=%u\n",
                     kTag, modules_.load(), assemblies_.load(), jitStarted_.load(), jitAgain_.load(), threads_.load(),
                     exceptions_.load(), gcs_.load(), dynamicUnloads_.load());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    // ------------------------------------------------------------------------------------------
    void negotiateInterfaces(IUnknown* unk) {
        static const GUID* const kInfos[] = {
            &IID_ICorProfilerInfo,   &IID_ICorProfilerInfo2,  &IID_ICorProfilerInfo3,  &IID_ICorProfilerInfo4,
            &IID_ICorProfilerInfo5,  &IID_ICorProfilerInfo6,  &IID_ICorProfilerInfo7,  &IID_ICorProfilerInfo8,
            &IID_ICorProfilerInfo9,  &IID_ICorProfilerInfo10, &IID_ICorProfilerInfo11, &IID_ICorProfilerInfo12,
            &IID_ICorProfilerInfo13, &IID_ICorProfilerInfo14};
        // Probe every version so the report says exactly what this runtime implements.
        for (int v = 1; v <= 14; ++v) {
            IUnknown* p = nullptr;
            if (succeeded(unk->QueryInterface(*kInfos[v - 1], reinterpret_cast<void**>(&p))) && p != nullptr) {
                if (!interfaceList_.empty()) interfaceList_ += ',';
                interfaceList_ += std::to_string(v);
                p->Release();
            }
        }
        // Keep the newest one: each ICorProfilerInfoN derives from N-1, so one pointer serves every
        // lower level through an ordinary upcast.
        for (int v = 14; v >= 1; --v) {
            void* p = nullptr;
            if (succeeded(unk->QueryInterface(*kInfos[v - 1], &p)) && p != nullptr) {
                infoLevel_ = v;
                switch (v) {
                    case 14: info_ = static_cast<ICorProfilerInfo14*>(p); break;
                    case 13: info_ = static_cast<ICorProfilerInfo13*>(p); break;
                    case 12: info_ = static_cast<ICorProfilerInfo12*>(p); break;
                    case 11: info_ = static_cast<ICorProfilerInfo11*>(p); break;
                    case 10: info_ = static_cast<ICorProfilerInfo10*>(p); break;
                    case 9: info_ = static_cast<ICorProfilerInfo9*>(p); break;
                    case 8: info_ = static_cast<ICorProfilerInfo8*>(p); break;
                    case 7: info_ = static_cast<ICorProfilerInfo7*>(p); break;
                    case 6: info_ = static_cast<ICorProfilerInfo6*>(p); break;
                    case 5: info_ = static_cast<ICorProfilerInfo5*>(p); break;
                    case 4: info_ = static_cast<ICorProfilerInfo4*>(p); break;
                    case 3: info_ = static_cast<ICorProfilerInfo3*>(p); break;
                    case 2: info_ = static_cast<ICorProfilerInfo2*>(p); break;
                    default: info_ = static_cast<ICorProfilerInfo*>(p); break;
                }
                break;
            }
        }
        if (info_ == nullptr) return;
        // Typed views of the one pointer, valid only up to the level actually obtained.
        if (infoLevel_ >= 3) info3_ = static_cast<ICorProfilerInfo3*>(info_);
        if (infoLevel_ >= 5) info5_ = static_cast<ICorProfilerInfo5*>(info_);
        if (infoLevel_ >= 11) info11_ = static_cast<ICorProfilerInfo11*>(info_);
    }

    // ------------------------------------------------------------------------------------------
    void identifyRuntime() {
        if (info3_ == nullptr) {
            runtimeText_ = "unknown(no-Info3)";
            return;
        }
        COR_PRF_RUNTIME_TYPE type = 0;
        USHORT major = 0, minor = 0, build = 0, qfe = 0;
        ULONG needed = 0;
        // Pass 1: size of the version string only (null buffer, size 0).  A runtime may answer this
        // with ERROR_INSUFFICIENT_BUFFER while still reporting the size, so both are accepted here
        // and every value is asked for again in pass 2.
        HRESULT hr = info3_->GetRuntimeInformation(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, &needed, nullptr);
        verbose("GetRuntimeInformation size pass: hr=0x%08x needed=%u", (unsigned)hr, (unsigned)needed);
        if (failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) needed = 0;
        std::vector<WCHAR> buf(needed + 1, 0);  // +1: the page does not say whether the count includes the NUL
        ULONG got = 0;
        // Pass 2: everything, with a buffer of the reported size.
        hr = info3_->GetRuntimeInformation(&clrInstance_, &type, &major, &minor, &build, &qfe,
                                           needed > 0 ? static_cast<ULONG>(buf.size()) : 0, &got,
                                           needed > 0 ? buf.data() : nullptr);
        verbose("GetRuntimeInformation fill pass: hr=0x%08x got=%u", (unsigned)hr, (unsigned)got);
        if (failed(hr)) {
            std::fprintf(stderr, "%s GetRuntimeInformation failed 0x%08x\n", kTag, (unsigned)hr);
            runtimeText_ = "unknown";
            return;
        }
        std::string version = to_utf8(buf.data(), buf.size());
        const char* kind = type == COR_PRF_CORE_CLR ? "CoreCLR" : type == COR_PRF_DESKTOP_CLR ? "DesktopCLR" : "other";
        char text[160];
        std::snprintf(text, sizeof text, "%s-%u.%u.%u.%u(%s)", kind, major, minor, build, qfe, version.c_str());
        runtimeText_ = text;
        isCoreClr_ = type == COR_PRF_CORE_CLR;
    }

    // ------------------------------------------------------------------------------------------
    // Reads one variable; returns false when it is not set.  Single-pass with a stack buffer,
    // then a second pass with the size the runtime reported when the value did not fit.
    bool readEnv(const char* name, std::string& value) {
        if (info11_ == nullptr) {
            const char* v = std::getenv(name);
            if (v == nullptr) return false;
            value = v;
            return true;
        }
        std::u16string wname = to_u16(name);
        WCHAR small[128];
        ULONG needed = 0;
        HRESULT hr = info11_->GetEnvironmentVariable(wname.c_str(), 128, &needed, small);
        if (succeeded(hr) || needed > 0) verbose("GetEnvironmentVariable(%s) pass 1: hr=0x%08x size=%u", name, (unsigned)hr, (unsigned)needed);
        if (succeeded(hr) && needed <= 128) {
            value = to_utf8(small, 128);
            return true;
        }
        if (needed > 128) {  // did not fit: ask again with what the runtime says it needs
            std::vector<WCHAR> big(needed + 1, 0);
            ULONG got = 0;
            hr = info11_->GetEnvironmentVariable(wname.c_str(), static_cast<ULONG>(big.size()), &got, big.data());
            if (succeeded(hr)) {
                value = to_utf8(big.data(), big.size());
                return true;
            }
        }
        verbose("GetEnvironmentVariable(%s): not set (hr=0x%08x)", name, (unsigned)hr);
        return false;
    }

    bool envFlag(const char* name, bool dflt) {
        std::string v;
        if (!readEnv(name, v)) return dflt;
        v = trim(v);
        if (v == "0" || v == "false" || v == "False" || v == "no" || v == "off") return false;
        if (v == "1" || v == "true" || v == "True" || v == "yes" || v == "on") return true;
        return dflt;
    }

    void readConfiguration() {
        configSource_ = info11_ != nullptr ? "Info11" : "getenv";
        enabled_ = envFlag("STARTUPCFG_ENABLED", true);
        if (!enabled_) return;
        std::string list;
        std::vector<std::string> feats = readEnv("STARTUPCFG_FEATURES", list)
                                             ? split(list, ',')
                                             : std::vector<std::string>{"modules", "assemblies", "jit", "threads",
                                                                        "exceptions", "gc", "rejit"};
        for (const auto& f : feats) {
            bool known = false;
            for (unsigned i = 0; i <= F_DYNAMIC; ++i) {
                if (f == kFeatureNames[i]) {
                    state_[i] = FeatureState::Requested;
                    known = true;
                }
            }
            if (!known) std::fprintf(stderr, "%s ignoring unknown feature '%s'\n", kTag, f.c_str());
        }
        if (!envFlag("STARTUPCFG_TIERED_COMPILATION", true)) state_[F_NO_TIERING] = FeatureState::Requested;
        if (!envFlag("STARTUPCFG_INLINING", true)) state_[F_NO_INLINING] = FeatureState::Requested;
        std::string pre;
        if (readEnv("STARTUPCFG_PRECOMPILED", pre)) {
            pre = trim(pre);
            if (pre == "none") state_[F_NO_PRECOMPILED] = FeatureState::Requested;
            else if (pre == "profile") state_[F_PROFILE_IMAGES] = FeatureState::Requested;
        }
        readEnv("STARTUPCFG_SET_ENV", setEnvSpec_);
    }

    // ------------------------------------------------------------------------------------------
    bool setAndVerify(const std::string& name, const std::string& value) {
        ++envSetTried_;
        std::u16string wn = to_u16(name), wv = to_u16(value);
        HRESULT hr = info11_->SetEnvironmentVariable(wn.c_str(), wv.c_str());
        if (failed(hr)) {
            std::fprintf(stderr, "%s SetEnvironmentVariable(%s) failed 0x%08x\n", kTag, name.c_str(), (unsigned)hr);
            return false;
        }
        std::string back;
        bool ok = readEnv(name.c_str(), back) && back == value;
        if (!ok) std::fprintf(stderr, "%s %s read back as '%s', expected '%s'\n", kTag, name.c_str(), back.c_str(), value.c_str());
        else ++envSetOk_;
        verbose("environment: %s=%s %s", name.c_str(), value.c_str(), ok ? "verified" : "NOT verified");
        return ok;
    }

    void adjustEnvironment() {
        if (info11_ == nullptr) {
            envApiState_ = "unavailable(no-Info11)";
            if (!setEnvSpec_.empty())
                std::fprintf(stderr, "%s STARTUPCFG_SET_ENV ignored: needs ICorProfilerInfo11 (setenv would not reach managed code)\n", kTag);
            return;
        }
        envApiState_ = "Info11";
        if (!enabled_) return;
        for (const auto& item : split(setEnvSpec_, ';')) {
            size_t eq = item.find('=');
            if (eq == std::string::npos || eq == 0) {
                std::fprintf(stderr, "%s STARTUPCFG_SET_ENV entry '%s' ignored (want NAME=VALUE)\n", kTag, item.c_str());
                continue;
            }
            setAndVerify(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
        }
    }

    // ------------------------------------------------------------------------------------------
    struct Bit {
        Feature feature;
        bool high;
        DWORD bits;
    };

    void applyEventMask() {
        DWORD low = COR_PRF_MONITOR_NONE, high = COR_PRF_HIGH_MONITOR_NONE;
        // Order = priority when the runtime refuses the combination: later entries are dropped first.
        std::vector<Bit> wanted;
        auto want = [&](Feature f, bool isHigh, DWORD bits) {
            if (state_[f] == FeatureState::Requested) wanted.push_back({f, isHigh, bits});
        };
        if (enabled_) {
            want(F_MODULES, false, COR_PRF_MONITOR_MODULE_LOADS);
            want(F_ASSEMBLIES, false, COR_PRF_MONITOR_ASSEMBLY_LOADS);
            want(F_JIT, false, COR_PRF_MONITOR_JIT_COMPILATION);
            want(F_THREADS, false, COR_PRF_MONITOR_THREADS);
            want(F_EXCEPTIONS, false, COR_PRF_MONITOR_EXCEPTIONS);
            // Startup-only capabilities: they can be decided only now.
            want(F_REJIT, false, COR_PRF_ENABLE_REJIT);
            want(F_NO_INLINING, false, COR_PRF_DISABLE_INLINING);
            want(F_NO_PRECOMPILED, false, COR_PRF_DISABLE_ALL_NGEN_IMAGES);
            want(F_PROFILE_IMAGES, false, COR_PRF_USE_PROFILE_IMAGES);
            if (info5_ != nullptr && isCoreClr_) {
                want(F_NO_TIERING, true, COR_PRF_HIGH_DISABLE_TIERED_COMPILATION);
                want(F_GC, true, COR_PRF_HIGH_BASIC_GC);
                want(F_DYNAMIC, true, COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS);
            } else {
                // High flags need SetEventMask2 (Info5) and, for these, .NET Core 3.0+.
                if (state_[F_NO_TIERING] == FeatureState::Requested) state_[F_NO_TIERING] = FeatureState::Unsupported;
                if (state_[F_DYNAMIC] == FeatureState::Requested) state_[F_DYNAMIC] = FeatureState::Unsupported;
                want(F_GC, false, COR_PRF_MONITOR_GC);
            }
        }
        for (const auto& b : wanted) (b.high ? high : low) |= b.bits;

        if (info5_ != nullptr) {
            maskApi_ = "SetEventMask2";
            DWORD curLow = 0, curHigh = 0;
            HRESULT hr = info5_->GetEventMask2(&curLow, &curHigh);
            if (failed(hr)) curLow = curHigh = 0;
            verbose("GetEventMask2 before: 0x%08x/0x%08x hr=0x%08x", (unsigned)curLow, (unsigned)curHigh, (unsigned)hr);
            low |= curLow;
            high |= curHigh;
        } else {
            maskApi_ = "SetEventMask";
        }

        // Try the full set; on refusal drop the lowest-priority remaining bit and retry.
        HRESULT hr = E_FAIL;
        for (;;) {
            ++maskAttempts_;
            hr = info5_ != nullptr ? info5_->SetEventMask2(low, high) : info_->SetEventMask(low);
            verbose("%s(0x%08x, 0x%08x) -> 0x%08x", maskApi_.c_str(), (unsigned)low, (unsigned)high, (unsigned)hr);
            if (succeeded(hr) || wanted.empty()) break;
            Bit drop = wanted.back();
            wanted.pop_back();
            (drop.high ? high : low) &= ~drop.bits;
            state_[drop.feature] = FeatureState::Dropped;
            std::fprintf(stderr, "%s runtime refused mask (0x%08x); dropping %s\n", kTag, (unsigned)hr, kFeatureNames[drop.feature]);
            if (drop.feature == F_GC && drop.high) {
                // COR_PRF_HIGH_BASIC_GC refused: try the classic GC flag instead (it is the first
                // thing dropped if the runtime still refuses).
                wanted.push_back(Bit{F_GC, false, COR_PRF_MONITOR_GC});
                low |= COR_PRF_MONITOR_GC;
                state_[F_GC] = FeatureState::Requested;
            }
        }
        if (failed(hr)) {
            std::fprintf(stderr, "%s could not set any event mask (0x%08x): running passive\n", kTag, (unsigned)hr);
            low = high = 0;
        }
        for (const auto& b : wanted)
            if (state_[b.feature] == FeatureState::Requested) state_[b.feature] = FeatureState::Enabled;

        // Read back what the runtime holds now.
        DWORD rbLow = 0, rbHigh = 0;
        HRESULT rhr = info5_ != nullptr ? info5_->GetEventMask2(&rbLow, &rbHigh) : info_->GetEventMask(&rbLow);
        finalLow_ = succeeded(rhr) ? rbLow : low;
        finalHigh_ = succeeded(rhr) ? rbHigh : high;
        readbackOk_ = succeeded(rhr) && rbLow == low && (info5_ == nullptr || rbHigh == high);
        if (!readbackOk_)
            std::fprintf(stderr, "%s mask read back 0x%08x/0x%08x, set 0x%08x/0x%08x (hr=0x%08x)\n", kTag, (unsigned)rbLow,
                         (unsigned)rbHigh, (unsigned)low, (unsigned)high, (unsigned)rhr);

        // Tell the application (and anything it starts) what the agent could switch on.
        if (info11_ != nullptr) {
            std::string feats;
            for (unsigned f = 0; f < F_COUNT; ++f)
                if (state_[f] == FeatureState::Enabled) feats += (feats.empty() ? "" : ",") + std::string(kFeatureNames[f]);
            setAndVerify("STARTUPCFG_AGENT_STATE",
                         std::string(enabled_ ? "active" : "passive") + ";info=" + std::to_string(infoLevel_) +
                             ";features=" + (feats.empty() ? "none" : feats));
        }
    }

    void verbose(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        if (!verboseOn_) return;
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        std::fprintf(stderr, "%s %s\n", kTag, buf);
    }

    // interfaces
    ICorProfilerInfo* info_ = nullptr;  // newest interface obtained (AddRef'd once)
    ICorProfilerInfo3* info3_ = nullptr;
    ICorProfilerInfo5* info5_ = nullptr;
    ICorProfilerInfo11* info11_ = nullptr;
    int infoLevel_ = 0;
    std::atomic<int> maxCallbackAsked_{0};
    std::string interfaceList_;

    // runtime
    USHORT clrInstance_ = 0;
    std::string runtimeText_ = "unknown";
    bool isCoreClr_ = false;

    // configuration / results
    bool verboseOn_ = false;
    bool enabled_ = true;
    FeatureState state_[F_COUNT] = {};
    std::string setEnvSpec_;
    std::string configSource_, envApiState_ = "unavailable", maskApi_ = "none";
    int envSetTried_ = 0, envSetOk_ = 0, maskAttempts_ = 0;
    DWORD finalLow_ = 0, finalHigh_ = 0;
    bool readbackOk_ = false;

    // counters
    std::atomic<unsigned> modules_{0}, assemblies_{0}, jitStarted_{0}, jitAgain_{0}, threads_{0}, exceptions_{0}, gcs_{0},
        dynamicUnloads_{0};
    std::mutex jitLock_;
    std::unordered_set<FunctionID> jitted_;
};

DOCFIX_DEFINE_PROFILER(StartupConfigProfiler)
