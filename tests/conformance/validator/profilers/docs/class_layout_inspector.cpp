// class_layout_inspector.cpp -- field layout of the application's own classes.
//
// What it does
//   * Initialize: QueryInterface for ICorProfilerInfo3 (GetModuleInfo2; GetClassIDInfo2 and
//     GetClassLayout come with it from ICorProfilerInfo2) and SetEventMask with MODULE_LOADS (to
//     learn which module is the application's) and CLASS_LOADS (the class notifications).
//   * ModuleLoadFinished (success only): GetModuleInfo2, two-pass on the file name, parent assembly
//     not requested.  A module is "the app's" when it is not dynamic (base address 0) and its file
//     name does not start with System. / Microsoft. (nor is netstandard.dll / mscorlib.dll /
//     WindowsBase.dll).
//   * ClassLoadStarted: starts a load-time stopwatch for app classes (see the BUG comment there).
//   * ClassLoadFinished (success only): GetClassIDInfo2 (module + typedef; type arguments not
//     wanted, so a zero-length array is passed) -> only classes of an app module go on:
//     GetClassLayout two-pass for the COR_FIELD_OFFSET array, then GetModuleMetaData(ofRead,
//     IID_IMetaDataImport), IMetaDataImport::GetTypeDefProps (two-pass) for the class name and
//     IMetaDataImport::GetFieldProps (two-pass) for each field's name.
//   * State lives in maps under one mutex that is never held across a runtime call.
//   * Shutdown: detail lines "[class_layout_inspector] ..." and one summary line starting with
//     "class_layout_inspector:", then the info pointer is Released; nothing else is asked.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/...)
//   * ICorProfilerCallback::Initialize / minimal.cpp: the IUnknown "the profiler must query for an
//     ICorProfilerInfo interface pointer"; the mask is set in Initialize with SetEventMask.
//     COR_PRF_MONITOR_MODULE_LOADS "Controls the ModuleLoad*, ModuleUnload*, and
//     ModuleAttachedToAssembly callbacks"; COR_PRF_MONITOR_CLASS_LOADS controls the ClassLoad*
//     callbacks.  Nothing else is requested.
//   * ICorProfilerCallback::ModuleLoadFinished: "The value of moduleId is not valid for an
//     information request until the ModuleLoadFinished method is called."; "A failure HRESULT in
//     hrStatus indicates a failure."
//   * ICorProfilerInfo3::GetModuleInfo2: "For dynamic modules, the szName parameter is the metadata
//     name of the module, and the base address is 0 (zero)." (used to skip dynamic modules) and
//     "the ID of the parent assembly will not be available until the profiler receives the
//     ICorProfilerCallback::ModuleAttachedToAssembly callback" (pAssemblyId is passed as null, as
//     "Optional Output Parameters in the Profiling API" allows: "A profiler passes null for any
//     output parameters it is not interested in.").
//   * ICorProfilerCallback::ClassLoadFinished: "The value of classId is not valid for an information
//     request until the ClassLoadFinished method is called."; "A failure HRESULT in hrStatus
//     indicates a failure."
//   * ICorProfilerInfo2::GetClassLayout: "pcFieldOffset [out] A pointer to the total number of
//     available elements. If cFieldOffset is 0, this value indicates the number of elements
//     needed."; "Alternatively, you can first call GetClassLayout with a zero-length rFieldOffset
//     buffer to obtain the correct buffer size. You can then set the buffer size to the value returned
//     in pcFieldOffset and call GetClassLayout again."; "The GetClassLayout method returns only the
//     fields defined by the class itself." (parents are not walked: only the class's own fields are
//     reported); "GetClassLayout will also fail when called with an array class." (app module
//     classes only; any failure HRESULT is counted, not fatal).
//   * Caller-Allocated Buffers (spec): "If InfoBuffer is null, cBufferSizeStart must be 0." and "If
//     pcBufferMax points to a value that is larger than cBufferSizeStart, allocate a larger
//     InfoBuffer buffer, update cBufferSizeStart with the new, larger size, and call the method
//     again."
//   * ICorProfilerInfo2::GetClassIDInfo2: the metadata token "can then be used to access the
//     metadata for the class" through ICorProfilerInfo::GetModuleMetaData.
//   * ICorProfilerInfo::GetModuleMetaData: "Some modules (such as resource modules) have no
//     metadata. In those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a null
//     in *ppOut."
//   * IMetaDataImport::GetFieldProps: "cchField [in] The size in wide characters of the buffer for
//     szField." / "pchField [out] The actual size of the returned buffer."
//   * Notification Threads in the Profiling API: "Note that these callbacks are not serialized."
//     -> one mutex; DoStackSnapshot (spec): "Do not hold a lock while your profiler calls into a CLR
//     function that can trigger a garbage collection." -> never held across a runtime call.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." / "Certain immutable events
//     may still occur after shutdown; the profiler should take care to return immediately".
//
// What the documents leave ambiguous (and what this file does)
//   1. profharness/interfaces.h declared IMetaDataImport only up to GetMethodProps; this file re-declared
//      the cor.h slots that follow it so that GetFieldProps lands in vtable slot 57 (counting
//      QueryInterface as 0). [profharness: the header now declares the whole interface, and that
//      re-declaration, which would now put GetFieldProps past its end, is gone.]
//   2. The metadata pages do not describe a zero-length sizing call for GetTypeDefProps /
//      GetFieldProps, nor whether pchField counts the terminating null; the same two-pass pattern
//      as for the profiling API is used, with every other [out] pointer valid (the "optional [out]"
//      rule is only stated for the profiling API).
//   3. What a sizing pass returns: a success code or HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER)
//      with the count filled in are both accepted; any other failure ends the query.
//   4. ClassLoadFinished: "a success HRESULT in hrStatus indicates only that the first part of
//      loading the class has succeeded."  The pages do not say whether GetClassLayout is already
//      answerable then; a failing GetClassLayout is counted, not retried.
//   5. The GetClassLayout page has changed over time about string classes ("will not fail, but the
//      data it returns will not be correct" vs "will fail with error code E_INVALIDARG"); String is
//      not an app class, so this profiler never asks for it.
//   6. "The app's module" is not a runtime notion; the heuristic above (file-name prefixes; a
//      directory test would misfire on self-contained apps) is this profiler's own choice.  Classes whose module has not been classified yet
//      are treated as not the app's.
#include "common.h"

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace docfix;

namespace {

// (IMetaDataImport as profharness/interfaces.h declares it: the whole cor.h interface, GetFieldProps at slot
// 57; see ambiguity 1.)

constexpr int kMaxBufferRetries = 4;

inline bool sizing_pass_ok(HRESULT hr) { return succeeded(hr) || hr == HRESULT_ERROR_INSUFFICIENT_BUFFER; }

template <class Call>
HRESULT two_pass_string(Call&& call, std::string& out) {
    out.clear();
    ULONG needed = 0;
    HRESULT hr = call(0, &needed, nullptr);  // "If InfoBuffer is null, cBufferSizeStart must be 0."
    if (!sizing_pass_ok(hr)) return hr;
    if (needed == 0) return S_OK;
    for (int attempt = 0; attempt < kMaxBufferRetries; ++attempt) {
        std::vector<WCHAR> buffer(needed, 0);
        ULONG available = 0;
        hr = call(needed, &available, buffer.data());
        if (failed(hr)) return hr;
        if (available <= needed) {
            out = to_utf8(buffer.data(), available);
            return hr;
        }
        needed = available;
    }
    return E_FAIL;
}

std::string base_name(const std::string& path) {
    size_t p = path.find_last_of("/\\");
    return p == std::string::npos ? path : path.substr(p + 1);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool framework_file_name(const std::string& file) {
    return starts_with(file, "System.") || starts_with(file, "Microsoft.") || file == "netstandard.dll" ||
           file == "mscorlib.dll" || file == "WindowsBase.dll";
}

struct FieldRec {
    std::string name;
    mdFieldDef token = 0;
    ULONG offset = 0;
};

struct LayoutRec {
    std::string name;
    ULONG size = 0;
    std::vector<FieldRec> fields;
    long long loadMicros = -1;
};

}  // namespace

class ClassLayoutInspector : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[class_layout_inspector] QueryInterface(ICorProfilerInfo3) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        const DWORD mask = COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_CLASS_LOADS;
        hr = info_->SetEventMask(mask);
        if (failed(hr)) {
            std::fprintf(stderr, "[class_layout_inspector] SetEventMask(0x%08x) failed 0x%08x\n", (unsigned)mask, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[class_layout_inspector] initialized, mask=0x%08x\n", (unsigned)mask);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (stopped() || failed(hrStatus)) return S_OK;
        std::string path;
        LPCBYTE base = nullptr;
        HRESULT hr = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* name) {
                return info_->GetModuleInfo2(moduleId, &base, cch, pcch, name, nullptr, nullptr);
            },
            path);
        std::lock_guard<std::mutex> lock(mu_);
        if (failed(hr)) {
            ++queryFailures_;
            LogFailure("GetModuleInfo2", hr);
            return S_OK;
        }
        const std::string file = base_name(path);
        const bool isApp = base != nullptr && !path.empty() && !framework_file_name(file);
        appModules_[moduleId] = isApp;
        if (isApp) appModuleNames_[moduleId] = file;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadStarted(ClassID classId) override {
        if (stopped()) return S_OK;
        // Time how long the runtime takes to load each of the app's own types; filter here so the
        // stopwatch map only ever holds app classes.
        ModuleID moduleId = 0;
        mdTypeDef typeDef = 0;
        // BUG: ICorProfilerCallback::ClassLoadStarted -- "The value of classId is not valid for an information request until the ICorProfilerCallback::ClassLoadFinished method is called."
        HRESULT hr = info_->GetClassIDInfo(classId, &moduleId, &typeDef);
        std::lock_guard<std::mutex> lock(mu_);
        if (failed(hr)) {
            ++earlyLookupFailures_;
            return S_OK;
        }
        if (!IsAppModuleLocked(moduleId)) return S_OK;
        loadStarted_[classId] = std::chrono::steady_clock::now();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID classId, HRESULT hrStatus) override {
        if (stopped()) return S_OK;
        const auto finishedAt = std::chrono::steady_clock::now();
        long long loadMicros = -1;
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = loadStarted_.find(classId);
            if (it != loadStarted_.end()) {
                loadMicros = std::chrono::duration_cast<std::chrono::microseconds>(finishedAt - it->second).count();
                loadStarted_.erase(it);
            }
        }
        if (failed(hrStatus)) return S_OK;

        // Which module / typedef?  Type arguments are not wanted: zero-length array, null buffer.
        ModuleID moduleId = 0;
        mdTypeDef typeDef = 0;
        ULONG32 typeArgCount = 0;
        HRESULT hr = info_->GetClassIDInfo2(classId, &moduleId, &typeDef, nullptr, 0, &typeArgCount, nullptr);
        if (failed(hr)) {
            std::lock_guard<std::mutex> lock(mu_);
            ++queryFailures_;
            LogFailure("GetClassIDInfo2", hr);
            return S_OK;
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!IsAppModuleLocked(moduleId)) return S_OK;
            ++appClasses_;
        }

        // GetClassLayout, double-pass on the COR_FIELD_OFFSET array.
        LayoutRec rec;
        rec.loadMicros = loadMicros;
        std::vector<COR_FIELD_OFFSET> offsets;
        hr = ClassLayout(classId, offsets, rec.size);
        if (failed(hr)) {
            std::lock_guard<std::mutex> lock(mu_);
            ++layoutFailures_;
            LogFailure("GetClassLayout", hr);
            return S_OK;
        }

        // Names through the module's metadata.
        unsigned namedFields = 0;
        hr = NameFields(moduleId, typeDef, offsets, rec, namedFields);

        std::lock_guard<std::mutex> lock(mu_);
        if (failed(hr)) {
            ++queryFailures_;
            LogFailure("metadata naming", hr);
        }
        fieldsNamed_ += namedFields;
        layouts_[classId] = std::move(rec);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        size_t laidOut = 0, totalFields = 0, timed = 0, appModules = 0;
        unsigned appClasses = 0, fieldsNamed = 0, layoutFailures = 0, queryFailures = 0, early = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            laidOut = layouts_.size();
            appModules = appModuleNames_.size();
            appClasses = appClasses_;
            fieldsNamed = fieldsNamed_;
            layoutFailures = layoutFailures_;
            queryFailures = queryFailures_;
            early = earlyLookupFailures_;
            for (const auto& kv : appModuleNames_)
                std::fprintf(stderr, "[class_layout_inspector] app module %s\n", kv.second.c_str());
            int shown = 0;
            for (const auto& kv : layouts_) {
                const LayoutRec& r = kv.second;
                totalFields += r.fields.size();
                if (r.loadMicros >= 0) ++timed;
                if (shown++ >= 200) continue;
                std::string line;
                for (const FieldRec& f : r.fields) {
                    line += ' ';
                    line += f.name.empty() ? std::string("?") : f.name;
                    line += '@';
                    line += std::to_string(f.offset);
                }
                std::fprintf(stderr, "[class_layout_inspector] %s size=%u load_us=%lld fields=%zu:%s\n",
                             r.name.empty() ? "?" : r.name.c_str(), (unsigned)r.size, r.loadMicros, r.fields.size(),
                             line.c_str());
            }
        }
        std::fprintf(stderr,
                     "class_layout_inspector: app_modules=%zu app_classes=%u laid_out=%zu fields=%zu fields_named=%u "
                     "timed=%zu layout_failures=%u query_failures=%u early_lookup_failures=%u\n",
                     appModules, appClasses, laidOut, totalFields, fieldsNamed, timed, layoutFailures, queryFailures,
                     early);
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    bool stopped() const { return shutdown_.load() || info_ == nullptr; }

    // Caller holds mu_.
    bool IsAppModuleLocked(ModuleID moduleId) const {
        auto it = appModules_.find(moduleId);
        return it != appModules_.end() && it->second;
    }

    HRESULT ClassLayout(ClassID classId, std::vector<COR_FIELD_OFFSET>& out, ULONG& classSize) {
        out.clear();
        ULONG needed = 0;
        // Pass 1: zero-length buffer -> number of elements needed.
        HRESULT hr = info_->GetClassLayout(classId, nullptr, 0, &needed, &classSize);
        if (!sizing_pass_ok(hr)) return hr;
        if (needed == 0) return S_OK;  // no instance fields of its own
        for (int attempt = 0; attempt < kMaxBufferRetries; ++attempt) {
            std::vector<COR_FIELD_OFFSET> buffer(needed);
            ULONG available = 0;
            // Pass 2: buffer sized to the value returned in pcFieldOffset.
            hr = info_->GetClassLayout(classId, buffer.data(), needed, &available, &classSize);
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

    HRESULT NameFields(ModuleID moduleId, mdTypeDef typeDef, const std::vector<COR_FIELD_OFFSET>& offsets,
                       LayoutRec& rec, unsigned& namedFields) {
        IUnknown* unk = nullptr;
        HRESULT hr = info_->GetModuleMetaData(moduleId, ofRead, IID_IMetaDataImport, &unk);
        if (failed(hr)) return hr;
        if (unk == nullptr) {  // no metadata: keep offsets, no names
            for (const COR_FIELD_OFFSET& o : offsets) rec.fields.push_back({std::string(), o.ridOfField, o.ulOffset});
            return S_FALSE;
        }
        IMetaDataImport* import = static_cast<IMetaDataImport*>(unk);

        DWORD typeFlags = 0;
        mdToken extends = 0;
        HRESULT result = two_pass_string(
            [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                return import->GetTypeDefProps(typeDef, buf, cch, pcch, &typeFlags, &extends);
            },
            rec.name);

        for (const COR_FIELD_OFFSET& o : offsets) {
            FieldRec f;
            f.token = o.ridOfField;
            f.offset = o.ulOffset;
            mdTypeDef owner = 0;
            DWORD attrs = 0, cplusType = 0;
            PCCOR_SIGNATURE sig = nullptr;
            ULONG sigLen = 0, valueLen = 0;
            const void* value = nullptr;
            HRESULT fhr = two_pass_string(
                [&](ULONG cch, ULONG* pcch, WCHAR* buf) {
                    return import->GetFieldProps(o.ridOfField, &owner, buf, cch, pcch, &attrs, &sig, &sigLen,
                                                 &cplusType, &value, &valueLen);
                },
                f.name);
            if (succeeded(fhr) && !f.name.empty()) ++namedFields;
            if (failed(fhr) && succeeded(result)) result = fhr;
            rec.fields.push_back(std::move(f));
        }
        import->Release();
        return result;
    }

    // Caller holds mu_.
    void LogFailure(const char* what, HRESULT hr) {
        if (loggedFailures_ >= 16) return;
        ++loggedFailures_;
        std::fprintf(stderr, "[class_layout_inspector] %s failed 0x%08x\n", what, (unsigned)hr);
    }

    ICorProfilerInfo3* info_ = nullptr;
    std::atomic<bool> shutdown_{false};

    std::mutex mu_;  // guards everything below
    std::map<ModuleID, bool> appModules_;
    std::map<ModuleID, std::string> appModuleNames_;
    std::map<ClassID, std::chrono::steady_clock::time_point> loadStarted_;
    std::map<ClassID, LayoutRec> layouts_;
    unsigned appClasses_ = 0;
    unsigned fieldsNamed_ = 0;
    unsigned layoutFailures_ = 0;
    unsigned queryFailures_ = 0;
    unsigned earlyLookupFailures_ = 0;
    unsigned loggedFailures_ = 0;
};

DOCFIX_DEFINE_PROFILER(ClassLayoutInspector)
