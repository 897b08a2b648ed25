// module_inventory.cpp -- a module / assembly / application-domain / class inventory, the way an
// APM agent keeps one.
//
// What it does
//   * Initialize: QueryInterface the IUnknown for ICorProfilerInfo3 (GetModuleInfo2 lives there; the
//     Info2 methods GetClassIDInfo2 come with it) and SetEventMask with exactly the three
//     notification groups it handles: MODULE_LOADS, ASSEMBLY_LOADS, CLASS_LOADS.
//   * ModuleLoadFinished (success only): GetModuleInfo2, two-pass on the file name; the parent
//     assembly is NOT asked for here (pAssemblyId is passed as null) -- see "Documentation followed".
//   * ModuleAttachedToAssembly: GetModuleInfo2 again, two-pass, now also asking for the parent
//     assembly ID; if that assembly has already had AssemblyLoadFinished, GetAssemblyInfo (two-pass)
//     and GetAppDomainInfo (two-pass) are asked right there; otherwise they are asked when
//     AssemblyLoadFinished arrives for it.
//   * AssemblyLoadFinished (success only): GetAssemblyInfo + GetAppDomainInfo, both two-pass.
//   * ClassLoadFinished (success only): GetClassIDInfo2, two-pass on the type-argument array; then
//     GetModuleMetaData(ofRead, IID_IMetaDataImport) and IMetaDataImport::GetTypeDefProps, two-pass
//     on the type name; the metadata interface is released right after.  If the class's module has
//     not had a successful ModuleLoadFinished yet, the naming is deferred to that ModuleLoadFinished
//     (GetModuleMetaData is an information request on the moduleId).
//   * Everything is kept in std::maps guarded by one mutex.  The mutex is never held while calling
//     into the runtime: results are gathered first, then stored under the lock.
//   * Shutdown: print one summary line starting with "module_inventory:" to stderr (after a few
//     "[module_inventory]" detail lines) and Release the info pointer.  No ICorProfilerInfo method is
//     called in or after Shutdown.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
//   * ICorProfilerCallback::Initialize / minimal.cpp: the IUnknown is "Pointer to an IUnknown
//     interface that the profiler must query for an ICorProfilerInfo interface pointer."; the event
//     mask is set there.  COR_PRF_MONITOR_MODULE_LOADS "Controls the ModuleLoad*, ModuleUnload*, and
//     ModuleAttachedToAssembly callbacks"; ASSEMBLY_LOADS and CLASS_LOADS likewise control the
//     AssemblyLoad*/ClassLoad* callbacks.  Nothing else is requested.
//   * ICorProfilerCallback::ModuleLoadFinished: "The value of moduleId is not valid for an
//     information request until the ModuleLoadFinished method is called." and "A failure HRESULT in
//     hrStatus indicates a failure." -> module information is asked only from ModuleLoadFinished on,
//     and only for successful loads.
//   * ICorProfilerInfo3::GetModuleInfo2: "Although the GetModuleInfo2 method may be called as soon
//     as the module's ID exists, the ID of the parent assembly will not be available until the
//     profiler receives the ICorProfilerCallback::ModuleAttachedToAssembly callback." -> in
//     ModuleLoadFinished pAssemblyId is null; it is requested in ModuleAttachedToAssembly.
//   * Optional Output Parameters in the Profiling API: "all output parameters (specified by [out] in
//     the method syntax) are optional, unless a method has only one output parameter. A profiler
//     passes null for any output parameters it is not interested in."
//   * ICorProfilerCallback::ModuleAttachedToAssembly: "The ModuleAttachedToAssembly method is called
//     when the module is attached to its parent assembly and its parent assembly ID can be
//     obtained."
//   * ICorProfilerCallback::AssemblyLoadStarted: "The value of assemblyId is not valid for an
//     information request until the ICorProfilerCallback::AssemblyLoadFinished method is called."
//     -> GetAssemblyInfo is only asked for an assembly whose AssemblyLoadFinished (success) was seen.
//   * Caller-Allocated Buffers (spec/caller-allocated-buffers.md), "Double-pass method": "First call
//     with a zero-length InfoBuffer parameter to obtain the correct buffer size. Then set the buffer
//     size to the value returned in pcBufferMax and call the function again."; "If InfoBuffer is
//     null, cBufferSizeStart must be 0."; and "If pcBufferMax points to a value that is larger than
//     cBufferSizeStart, allocate a larger InfoBuffer buffer, update cBufferSizeStart with the new,
//     larger size, and call the method again."  The GetModuleInfo2 / GetAssemblyInfo /
//     GetAppDomainInfo / GetClassIDInfo2 pages repeat the same recipe for szName / typeArgs.
//   * ICorProfilerCallback::ClassLoadFinished: "The value of classId is not valid for an information
//     request until the ClassLoadFinished method is called." -> nothing is asked in ClassLoadStarted
//     (this profiler does not implement it).
//   * ICorProfilerInfo2::GetClassIDInfo2: "The profiler code can call
//     ICorProfilerInfo::GetModuleMetaData to obtain a metadata interface for a given module. The
//     metadata token that is returned to the location referenced by pTypeDefToken can then be used
//     to access the metadata for the class."
//   * ICorProfilerInfo::GetModuleMetaData: "Some modules (such as resource modules) have no
//     metadata. In those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a null
//     in *ppOut." -> S_FALSE/null is handled as "no name", not as an error.
//   * Notification Threads in the Profiling API: "Note that these callbacks are not serialized. Users
//     must protect their code by creating thread-safe data structures and by locking the profiler
//     code where necessary to prevent parallel access from multiple threads." -> one mutex.
//   * DoStackSnapshot (spec): "Do not hold a lock while your profiler calls into a CLR function that
//     can trigger a garbage collection." -> the mutex is never held across a runtime call.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." and "Certain immutable events
//     may still occur after shutdown; the profiler should take care to return immediately when this
//     occurs." -> every callback returns at once after Shutdown.
//
// What the documents leave ambiguous (and what this file does)
//   1. Whether an AssemblyID handed over by ModuleAttachedToAssembly is already "valid for an
//      information request": the ModuleAttachedToAssembly page says the ID "can be obtained", the
//      AssemblyLoadStarted page says it is not valid until AssemblyLoadFinished.  This file takes the
//      stricter reading: GetAssemblyInfo waits for AssemblyLoadFinished (so ASSEMBLY_LOADS is
//      subscribed), and is asked from ModuleAttachedToAssembly only when that already happened.
//   2. The AppDomainID comes out of GetAssemblyInfo for a loaded assembly.  AppDomainCreationStarted
//      says the ID is not valid until AppDomainCreationFinished, but the default domain may be created
//      before the profiler is even loaded, so that event cannot be waited for; a domain that holds a
//      fully loaded assembly is taken to be created.  APPDOMAIN_LOADS is therefore not subscribed.
//   3. What the sizing pass returns: the buffer page only says "If any elements are returned, the
//      method returns S_OK".  A success code or HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER) with
//      the size filled in are both accepted on the zero-length pass; any other failure ends the query.
//   4. Whether pcchName counts the terminating null.  The buffer is sized exactly to the returned
//      value, as the pages say, and the string is read up to the first null or that count.
//   5. The metadata pages (GetTypeDefProps) do not describe a zero-length first call; the same
//      two-pass pattern is used (null szTypeDef, cchTypeDef 0), with every other [out] pointer valid
//      because the "optional [out]" rule is stated for the profiling API, not for metadata.
//   6. GetModuleInfo2 / GetClassIDInfo2 outputs other than the buffer are asked on both passes; the
//      pages do not say whether they are filled on the sizing pass, so the values from the final
//      (successful) pass are the ones kept.
//   7. Whether a module's classes can finish loading before the module's own ModuleLoadFinished
//      (e.g. during the core library's load) is not stated; naming is deferred in that case, see
//      ClassLoadFinished.  ModuleAttachedToAssembly for a module whose load was not seen to succeed
//      records the attachment but asks nothing.
//   8. Unloads are not tracked (not needed for the summary); an ID reused after an unload simply
//      overwrites the old entry.
#include "common.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace docfix;

namespace {

constexpr int kMaxBufferRetries = 4;

// The zero-length pass may report the size with a success code or with ERROR_INSUFFICIENT_BUFFER
// (ambiguity 3 in the header).
inline bool sizing_pass_ok(HRESULT hr) { return succeeded(hr) || hr == HRESULT_ERROR_INSUFFICIENT_BUFFER; }

// Double-pass query of a WCHAR name.  call(cch, pcch, buffer) wraps one API call.
template <class Call>
HRESULT two_pass_string(Call&& call, std::string& out) {
    out.clear();
    ULONG needed = 0;
    HRESULT hr = call(0, &needed, nullptr);  // "If InfoBuffer is null, cBufferSizeStart must be 0."
    if (!sizing_pass_ok(hr)) return hr;
    if (needed == 0) return S_OK;  // nothing to fetch
    for (int attempt = 0; attempt < kMaxBufferRetries; ++attempt) {
        std::vector<WCHAR> buffer(needed, 0);
        ULONG available = 0;
        hr = call(needed, &available, buffer.data());
        if (failed(hr)) return hr;
        if (available <= needed) {
            out = to_utf8(buffer.data(), available);
            return hr;
        }
        needed = available;  // grew between the two calls: allocate a larger buffer, call again
    }
    return E_FAIL;
}

// Double-pass query of an element array.  call(count, pcount, buffer) wraps one API call.
template <class T, class Call>
HRESULT two_pass_array(Call&& call, std::vector<T>& out) {
    out.clear();
    ULONG needed = 0;
    HRESULT hr = call(0, &needed, nullptr);
    if (!sizing_pass_ok(hr)) return hr;
    if (needed == 0) return succeeded(hr) ? hr : S_OK;
    for (int attempt = 0; attempt < kMaxBufferRetries; ++attempt) {
        std::vector<T> buffer(needed);
        ULONG available = 0;
        hr = call(needed, &available, buffer.data());
        if (failed(hr)) return hr;
        if (available <= needed) {
            buffer.resize(available);
            out.swap(buffer);
            return hr;
        }
        needed = available;
    }
    return E_FAIL;
}

struct ModuleRec {
    std::string name;
    UINT_PTR base = 0;
    DWORD flags = 0;
    AssemblyID assembly = 0;
    bool named = false;
};

struct AssemblyRec {
    std::string name;
    AppDomainID appDomain = 0;
    ModuleID manifestModule = 0;
    bool described = false;
};

struct ClassRec {
    std::string name;
    ModuleID module = 0;
    mdTypeDef typeDef = 0;
    ClassID parent = 0;
    std::vector<ClassID> typeArgs;
};

}  // namespace

class ModuleInventory : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[module_inventory] QueryInterface(ICorProfilerInfo3) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        const DWORD mask = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_ASSEMBLY_LOADS | COR_PRF_MONITOR_CLASS_LOADS;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[module_inventory] SetEventMask(0x%08x) failed 0x%08x\n", (unsigned)mask, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[module_inventory] initialized, mask=0x%08x\n", (unsigned)mask);
        return S_OK;
    }

    // ---------------------------------------------------------------------------------- modules
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (stopped()) return S_OK;
        if (failed(hrStatus)) {
            std::lock_guard<std::mutex> lock(mu_);
            ++failedLoads_;
            return S_OK;
        }
        // The parent assembly is not available yet (GetModuleInfo2 remarks): pAssemblyId = null.
        ModuleRec rec;
        HRESULT hr = QueryModule(moduleId, nullptr, rec);
        std::vector<ClassID> pending;
        {
            std::lock_guard<std::mutex> lock(mu_);
            ModuleRec& m = modules_[moduleId];
            if (succeeded(hr)) {
                MergeModule(m, rec);
            } else {
                ++queryFailures_;
                LogFailure("GetModuleInfo2 (ModuleLoadFinished)", hr);
            }
            loadedModules_.insert(moduleId);
            auto it = pendingNames_.find(moduleId);
            if (it != pendingNames_.end()) {
                pending.swap(it->second);
                pendingNames_.erase(it);
            }
        }
        // Classes of this module that finished loading before the module did: their metadata can be
        // asked for now that moduleId is valid for information requests.
        for (ClassID classId : pending) NameClass(classId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleAttachedToAssembly(ModuleID moduleId, AssemblyID assemblyId) override {
        if (stopped()) return S_OK;
        bool moduleLoaded = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            moduleLoaded = loadedModules_.count(moduleId) != 0;
        }
        // Now the parent assembly ID "can be obtained": ask GetModuleInfo2 again, including it --
        // only for a module whose ModuleLoadFinished succeeded (moduleId valid for requests).
        ModuleRec rec;
        AssemblyID reported = 0;
        HRESULT hr = moduleLoaded ? QueryModule(moduleId, &reported, rec) : S_FALSE;
        bool describeNow = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            ModuleRec& m = modules_[moduleId];
            if (!moduleLoaded) {
                // nothing asked; the attachment is still recorded
            } else if (succeeded(hr)) {
                MergeModule(m, rec);
                if (reported != 0 && reported != assemblyId) ++assemblyMismatches_;
            } else {
                ++queryFailures_;
                LogFailure("GetModuleInfo2 (ModuleAttachedToAssembly)", hr);
            }
            m.assembly = assemblyId;
            AssemblyRec& a = assemblies_[assemblyId];
            // Only an assembly whose AssemblyLoadFinished was seen is valid for information requests.
            describeNow = loadedAssemblies_.count(assemblyId) != 0 && !a.described;
        }
        if (describeNow) DescribeAssembly(assemblyId);
        return S_OK;
    }

    // ------------------------------------------------------------------------------- assemblies
    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID assemblyId, HRESULT hrStatus) override {
        if (stopped()) return S_OK;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (failed(hrStatus)) {
                ++failedLoads_;
                return S_OK;
            }
            loadedAssemblies_.insert(assemblyId);
            if (assemblies_[assemblyId].described) return S_OK;
        }
        DescribeAssembly(assemblyId);
        return S_OK;
    }

    // ---------------------------------------------------------------------------------- classes
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID classId, HRESULT hrStatus) override {
        if (stopped()) return S_OK;
        if (failed(hrStatus)) {
            std::lock_guard<std::mutex> lock(mu_);
            ++failedLoads_;
            return S_OK;
        }
        ClassRec rec;
        ModuleID moduleId = 0;
        mdTypeDef typeDef = 0;
        ClassID parent = 0;
        HRESULT hr = two_pass_array<ClassID>(
            [&](ULONG count, ULONG* pcount, ClassID* typeArgs) {
                return info_->GetClassIDInfo2(classId, &moduleId, &typeDef, &parent, count, pcount, typeArgs);
            },
            rec.typeArgs);
        if (failed(hr)) {
            std::lock_guard<std::mutex> lock(mu_);
            ++queryFailures_;
            LogFailure("GetClassIDInfo2", hr);
            return S_OK;
        }
        rec.module = moduleId;
        rec.typeDef = typeDef;
        rec.parent = parent;

        bool nameNow = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            classes_[classId] = std::move(rec);
            if (moduleId == 0 || typeDef == 0) return S_OK;
            // GetModuleMetaData is an information request on moduleId: only once that module's
            // ModuleLoadFinished succeeded; otherwise it is done from that ModuleLoadFinished.
            nameNow = loadedModules_.count(moduleId) != 0;
            if (!nameNow) pendingNames_[moduleId].push_back(classId);
        }
        if (nameNow) NameClass(classId);
        return S_OK;
    }

    // --------------------------------------------------------------------------------- shutdown
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        size_t modules = 0, modulesNamed = 0, modulesAttached = 0;
        size_t assemblies = 0, assembliesNamed = 0, domains = 0;
        size_t classes = 0, classesNamed = 0, generic = 0;
        unsigned failures = 0, failedLoads = 0, mismatches = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            modules = modules_.size();
            for (const auto& kv : modules_) {
                if (kv.second.named) ++modulesNamed;
                if (kv.second.assembly != 0) ++modulesAttached;
            }
            for (const auto& kv : assemblies_) {
                if (!kv.second.described) continue;
                ++assemblies;
                if (!kv.second.name.empty()) ++assembliesNamed;
            }
            domains = appDomains_.size();
            classes = classes_.size();
            for (const auto& kv : classes_) {
                if (!kv.second.name.empty()) ++classesNamed;
                if (!kv.second.typeArgs.empty()) ++generic;
            }
            failures = queryFailures_;
            failedLoads = failedLoads_;
            mismatches = assemblyMismatches_;

            for (const auto& kv : appDomains_)
                std::fprintf(stderr, "[module_inventory] appdomain 0x%llx \"%s\"\n", (unsigned long long)kv.first,
                             kv.second.c_str());
            int shown = 0;
            for (const auto& kv : assemblies_) {
                if (!kv.second.described || shown++ >= 64) continue;
                size_t mods = 0;
                for (const auto& m : modules_)
                    if (m.second.assembly == kv.first) ++mods;
                std::fprintf(stderr, "[module_inventory] assembly \"%s\" domain=0x%llx modules=%zu\n",
                             kv.second.name.c_str(), (unsigned long long)kv.second.appDomain, mods);
            }
        }
        std::fprintf(stderr,
                     "module_inventory: modules=%zu modules_named=%zu modules_attached=%zu assemblies=%zu "
                     "assemblies_named=%zu appdomains=%zu classes=%zu classes_named=%zu generic_instances=%zu "
                     "failed_loads=%u query_failures=%u assembly_mismatches=%u\n",
                     modules, modulesNamed, modulesAttached, assemblies, assembliesNamed, domains, classes,
                     classesNamed, generic, failedLoads, failures, mismatches);
        if (info_ != nullptr) {
            info_->Release();  // the only thing done with the info pointer in Shutdown
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    bool stopped() const { return shutdown_.load() || info_ == nullptr; }

    // GetModuleInfo2, two-pass on szName.  pAssembly may be null (optional [out]).
    HRESULT QueryModule(ModuleID moduleId, AssemblyID* pAssembly, ModuleRec& rec) {
        LPCBYTE base = nullptr;
        DWORD flags = 0;
        HRESULT hr = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* name) {
                return info_->GetModuleInfo2(moduleId, &base, cch, pcch, name, pAssembly, &flags);
            },
            rec.name);
        if (succeeded(hr)) {
            rec.base = reinterpret_cast<UINT_PTR>(base);
            rec.flags = flags;
            rec.named = !rec.name.empty();
        }
        return hr;
    }

    static void MergeModule(ModuleRec& into, const ModuleRec& from) {
        into.name = from.name;
        into.base = from.base;
        into.flags = from.flags;
        into.named = from.named;
    }

    // GetAssemblyInfo (two-pass) and, for a domain not seen yet, GetAppDomainInfo (two-pass).
    // Called only for an assembly whose AssemblyLoadFinished succeeded.  No lock held while calling.
    void DescribeAssembly(AssemblyID assemblyId) {
        std::string name;
        AppDomainID appDomain = 0;
        ModuleID manifest = 0;
        HRESULT hr = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                return info_->GetAssemblyInfo(assemblyId, cch, pcch, buf, &appDomain, &manifest);
            },
            name);
        bool needDomain = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (failed(hr)) {
                ++queryFailures_;
                LogFailure("GetAssemblyInfo", hr);
                return;
            }
            AssemblyRec& a = assemblies_[assemblyId];
            a.name = name;
            a.appDomain = appDomain;
            a.manifestModule = manifest;
            a.described = true;
            needDomain = appDomain != 0 && appDomains_.count(appDomain) == 0;
        }
        if (!needDomain) return;

        std::string domainName;
        ProcessID pid = 0;
        hr = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* buf) { return info_->GetAppDomainInfo(appDomain, cch, pcch, buf, &pid); },
            domainName);
        std::lock_guard<std::mutex> lock(mu_);
        if (failed(hr)) {
            ++queryFailures_;
            LogFailure("GetAppDomainInfo", hr);
            return;
        }
        appDomains_[appDomain] = domainName;
    }

    // Names one recorded class (module + typedef were stored by ClassLoadFinished).  No lock held
    // while calling into the runtime.
    void NameClass(ClassID classId) {
        ModuleID moduleId = 0;
        mdTypeDef typeDef = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = classes_.find(classId);
            if (it == classes_.end()) return;
            moduleId = it->second.module;
            typeDef = it->second.typeDef;
        }
        std::string name;
        HRESULT hr = TypeName(moduleId, typeDef, name);
        std::lock_guard<std::mutex> lock(mu_);
        if (failed(hr)) {
            ++queryFailures_;
            LogFailure("GetModuleMetaData/GetTypeDefProps", hr);
            return;
        }
        auto it = classes_.find(classId);
        if (it != classes_.end() && it->second.module == moduleId && it->second.typeDef == typeDef) it->second.name = name;
    }

    // GetModuleMetaData -> IMetaDataImport::GetTypeDefProps, two-pass on the name.
    HRESULT TypeName(ModuleID moduleId, mdTypeDef typeDef, std::string& name) {
        IUnknown* unk = nullptr;
        HRESULT hr = info_->GetModuleMetaData(moduleId, ofRead, IID_IMetaDataImport, &unk);
        if (failed(hr)) return hr;
        if (unk == nullptr) return S_FALSE;  // module without metadata (S_FALSE, null *ppOut)
        IMetaDataImport* import = static_cast<IMetaDataImport*>(unk);
        DWORD typeFlags = 0;
        mdToken extends = 0;
        hr = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                return import->GetTypeDefProps(typeDef, buf, cch, pcch, &typeFlags, &extends);
            },
            name);
        import->Release();
        return hr;
    }

    // Caller holds mu_.  Logs the first few failures only.
    void LogFailure(const char* what, HRESULT hr) {
        if (loggedFailures_ >= 16) return;
        ++loggedFailures_;
        std::fprintf(stderr, "[module_inventory] %s failed 0x%08x\n", what, (unsigned)hr);
    }

    ICorProfilerInfo3* info_ = nullptr;
    std::atomic<bool> shutdown_{false};

    std::mutex mu_;  // guards everything below
    std::map<ModuleID, ModuleRec> modules_;
    std::set<ModuleID> loadedModules_;                        // ModuleLoadFinished succeeded
    std::map<ModuleID, std::vector<ClassID>> pendingNames_;   // classes waiting for their module
    std::map<AssemblyID, AssemblyRec> assemblies_;
    std::set<AssemblyID> loadedAssemblies_;
    std::map<AppDomainID, std::string> appDomains_;
    std::map<ClassID, ClassRec> classes_;
    unsigned queryFailures_ = 0;
    unsigned failedLoads_ = 0;
    unsigned assemblyMismatches_ = 0;
    unsigned loggedFailures_ = 0;
};

DOCFIX_DEFINE_PROFILER(ModuleInventory)
