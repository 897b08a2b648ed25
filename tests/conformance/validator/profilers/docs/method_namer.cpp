// method_namer.cpp -- inventory of JIT-compiled methods: names each FunctionID the first time it is
// compiled, counts every further compilation of the same FunctionID (for example a tiered
// recompilation), and prints the ten most compiled methods at Shutdown.
//
// What it does:
//   * Initialize QueryInterfaces the IUnknown it is given for ICorProfilerInfo2 (GetFunctionInfo2 and
//     GetClassIDInfo2 are ICorProfilerInfo2 methods), asks for COR_PRF_MONITOR_JIT_COMPILATION only, and
//     fails Initialize with the failing HRESULT (releasing what it had obtained).
//   * JITCompilationFinished with a success hrStatus: if the FunctionID is already in the table its count
//     goes up; otherwise it is named as Namespace.Type::Method --
//       GetFunctionInfo2(functionId, frameInfo 0, ...) two-pass for the method's type arguments,
//       the owning class from pClassId when it is not null (IsArrayClass / GetClassIDInfo2 two-pass for
//       the class's own type arguments, GetModuleMetaData + GetTypeDefProps for its name), otherwise the
//       TypeDef that GetMethodProps reports as the method's owner,
//       GetModuleMetaData(moduleId) for IMetaDataImport and GetMethodProps(token) for the method name --
//     and inserted with count 1.  A failure hrStatus is only counted.
//   * Shutdown: prints totals and the ten FunctionIDs compiled most often, then releases the
//     ICorProfilerInfo2 pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/... and
// .../metadata/...):
//   * ICorProfilerCallback::Initialize -- pICorProfilerInfoUnk is a "Pointer to an IUnknown interface that
//     the profiler must query for an ICorProfilerInfo interface pointer."
//   * COR_PRF_MONITOR enumeration -- COR_PRF_MONITOR_JIT_COMPILATION "Controls the JITCompilation*,
//     JITFunctionPitched, and JITInlining callbacks".  No other flag is needed.
//   * ICorProfilerCallback::JITCompilationFinished -- hrStatus is "A value indicating whether compilation
//     was successful" (only successful compilations are named and counted as compilations).
//   * Profiling Overview, "Notification Threads" -- "these callbacks are not serialized. Users must protect
//     their code by creating thread-safe data structures" and the example of one function's
//     JITCompilationStarted/Finished racing on two threads: the table is behind a mutex, the runtime is
//     called with the mutex released, and a name computed twice by racing threads is harmless (the first
//     one inserted wins, both compilations are counted).
//   * ICorProfilerInfo2::GetFunctionInfo2 -- with a frameInfo that did not come from FunctionEnter2 (here
//     0) "The exact ClassID and type arguments cannot be determined. That is, the ClassID might be null and
//     some type arguments might come back as System.Object."  So a null pClassId falls back to the
//     metadata owner.  Buffer: "you can first call GetFunctionInfo2 with a zero-length pcTypeArgs buffer to
//     obtain the correct buffer size ... and call GetFunctionInfo2 again", and "After GetFunctionInfo2
//     returns, you must verify that the typeArgs buffer was large enough".  cTypeArgs is passed as an
//     element count ("The size of the typeArgs array"; "Caller-Allocated Buffers": "The cBufferSizeStart
//     parameter specifies the number of elements allocated in the buffer").
//   * ICorProfilerInfo2::GetClassIDInfo2 -- same two-pass convention for typeArgs; ICorProfilerInfo::
//     IsArrayClass -- S_OK for arrays, S_FALSE otherwise (arrays have no TypeDef of their own).
//   * ICorProfilerInfo::GetModuleMetaData -- "Some modules (such as resource modules) have no metadata. In
//     those cases, GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."  Only
//     S_OK with a non-null pointer is used; every interface obtained is Released.
//   * IMetaDataImport::GetMethodProps -- pchMethod is "the size in wide characters of szMethod, or in the
//     case of truncation, the actual number of wide characters in the method name"; GetTypeDefProps --
//     cchTypeDef is "The size in wide characters of szTypeDef".  A heap buffer is grown to *pch + 1 and
//     the call repeated when the name did not fit.
//   * The metadata pages do not say which [out] parameters of GetTypeDefProps / GetMethodProps may be null,
//     so every [out] parameter is given a real location (only the name is used).
//   * ICorProfilerCallback::Shutdown -- no ICorProfilerInfo call from Shutdown on; callbacks after
//     Shutdown return at once.
#include <algorithm>
#include <cinttypes>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

template <class Call>
bool read_md_name(Call call, std::string& name) {
    std::vector<WCHAR> buf(128, 0);
    for (int attempt = 0; attempt < 4; ++attempt) {
        ULONG pch = 0;
        HRESULT hr = call(buf.data(), static_cast<ULONG>(buf.size()), &pch);
        if (failed(hr)) return false;
        if (pch < buf.size()) {
            name = to_utf8(buf.data(), buf.size());
            return true;
        }
        buf.assign(static_cast<size_t>(pch) + 1, 0);
    }
    return false;
}

template <class T>
struct Released {
    T* p = nullptr;
    Released() = default;
    Released(const Released&) = delete;
    Released& operator=(const Released&) = delete;
    ~Released() {
        if (p != nullptr) p->Release();
    }
};

std::string hex_id(const char* what, UINT_PTR id) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "<%s 0x%" PRIxPTR ">", what, static_cast<std::uintptr_t>(id));
    return buf;
}

const char* element_type_name(CorElementType t) {
    switch (t) {
        case 0x02: return "System.Boolean";
        case 0x03: return "System.Char";
        case 0x04: return "System.SByte";
        case 0x05: return "System.Byte";
        case 0x06: return "System.Int16";
        case 0x07: return "System.UInt16";
        case 0x08: return "System.Int32";
        case 0x09: return "System.UInt32";
        case 0x0a: return "System.Int64";
        case 0x0b: return "System.UInt64";
        case 0x0c: return "System.Single";
        case 0x0d: return "System.Double";
        case 0x0e: return "System.String";
        case 0x18: return "System.IntPtr";
        case 0x19: return "System.UIntPtr";
        case 0x1c: return "System.Object";
        default: return nullptr;
    }
}

// IMetaDataImport for a module: only S_OK with a non-null pointer counts (S_FALSE + null = no metadata).
bool module_import(ICorProfilerInfo* info, ModuleID mod, Released<IUnknown>& unk) {
    HRESULT hr = info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk.p);
    return hr == S_OK && unk.p != nullptr;
}

bool typedef_name(IMetaDataImport* md, mdTypeDef td, std::string& name) {
    return read_md_name(
        [&](WCHAR* b, ULONG cch, ULONG* pch) {
            DWORD flags = 0;
            mdToken extends = 0;
            return md->GetTypeDefProps(td, b, cch, pch, &flags, &extends);
        },
        name);
}

std::string class_name(ICorProfilerInfo2* info, ClassID cls, int depth = 0) {
    if (cls == 0) return "<unknown class>";
    if (depth > 4) return "...";

    CorElementType elem = 0;
    ClassID elemClass = 0;
    ULONG rank = 0;
    if (info->IsArrayClass(cls, &elem, &elemClass, &rank) == S_OK) {
        std::string base;
        if (elemClass != 0) {
            base = class_name(info, elemClass, depth + 1);
        } else if (const char* n = element_type_name(elem)) {
            base = n;
        } else {
            base = hex_id("element type", elem);
        }
        std::string dims = "[";
        for (ULONG i = 1; i < rank; ++i) dims += ',';
        return base + dims + "]";
    }

    ModuleID mod = 0;
    mdTypeDef td = 0;
    ClassID parent = 0;
    ULONG32 nArgs = 0;
    std::vector<ClassID> args;
    HRESULT hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr);
    if (succeeded(hr) && nArgs > 0) {
        args.resize(nArgs);
        ULONG32 got = 0;
        hr = info->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data());
        if (succeeded(hr)) args.resize(std::min<ULONG32>(got, nArgs));
    }
    if (failed(hr)) {
        args.clear();
        hr = info->GetClassIDInfo(cls, &mod, &td);
        if (failed(hr)) return hex_id("class", cls);
    }

    std::string name;
    Released<IUnknown> unk;
    if (td == 0 || !module_import(info, mod, unk) || !typedef_name(static_cast<IMetaDataImport*>(unk.p), td, name)) {
        return hex_id("class", cls);
    }
    if (!args.empty()) {
        name += '<';
        for (size_t i = 0; i < args.size(); ++i) {
            if (i) name += ',';
            name += class_name(info, args[i], depth + 1);
        }
        name += '>';
    }
    return name;
}

// Namespace.Type::Method[<TypeArgs>] for a FunctionID.
std::string function_name(ICorProfilerInfo2* info, FunctionID fid) {
    ClassID cls = 0;
    ModuleID mod = 0;
    mdToken token = 0;
    ULONG32 nArgs = 0;
    std::vector<ClassID> methodArgs;
    HRESULT hr = info->GetFunctionInfo2(fid, 0, &cls, &mod, &token, 0, &nArgs, nullptr);
    if (succeeded(hr) && nArgs > 0) {
        methodArgs.resize(nArgs);
        ULONG32 got = 0;
        hr = info->GetFunctionInfo2(fid, 0, &cls, &mod, &token, nArgs, &got, methodArgs.data());
        if (succeeded(hr)) methodArgs.resize(std::min<ULONG32>(got, nArgs));
    }
    if (failed(hr)) {
        methodArgs.clear();
        hr = info->GetFunctionInfo(fid, &cls, &mod, &token);
        if (failed(hr)) return hex_id("function", fid);
    }

    Released<IUnknown> unk;
    if (!module_import(info, mod, unk)) return hex_id("function", fid);
    auto* md = static_cast<IMetaDataImport*>(unk.p);

    mdTypeDef owner = 0;
    std::string method;
    if (!read_md_name(
            [&](WCHAR* b, ULONG cch, ULONG* pch) {
                DWORD attr = 0, impl = 0;
                PCCOR_SIGNATURE sig = nullptr;
                ULONG cbSig = 0, rva = 0;
                return md->GetMethodProps(token, &owner, b, cch, pch, &attr, &sig, &cbSig, &rva, &impl);
            },
            method)) {
        return hex_id("function", fid);
    }

    std::string type;
    if (cls != 0) {
        type = class_name(info, cls);  // exact instantiation when the runtime knows it
    } else if (owner == 0 || !typedef_name(md, owner, type)) {
        type = "<module>";
    }

    std::string name = type + "::" + method;
    if (!methodArgs.empty()) {
        name += '<';
        for (size_t i = 0; i < methodArgs.size(); ++i) {
            if (i) name += ',';
            name += class_name(info, methodArgs[i]);
        }
        name += '>';
    }
    return name;
}

struct Compiled {
    std::string name;
    std::uint64_t count = 0;
};

}  // namespace

class MethodNamer : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        ICorProfilerInfo2* info = nullptr;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info));
        if (failed(hr) || info == nullptr) {
            std::fprintf(stderr, "[method_namer] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION);
        if (failed(hr)) {
            std::fprintf(stderr, "[method_namer] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info->Release();
            return hr;
        }
        info_.store(info);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID functionId, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load()) return S_OK;
        if (failed(hrStatus)) {
            failed_.fetch_add(1, std::memory_order_relaxed);
            return S_OK;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = table_.find(functionId);
            if (it != table_.end()) {
                ++it->second.count;
                ++compilations_;
                return S_OK;
            }
        }
        ICorProfilerInfo2* info = info_.load();
        if (info == nullptr || shutdown_.load()) return S_OK;
        std::string name = function_name(info, functionId);  // no lock held while calling the runtime

        std::lock_guard<std::mutex> g(mu_);
        Compiled& c = table_[functionId];
        if (c.count == 0) c.name = std::move(name);
        ++c.count;
        ++compilations_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        ICorProfilerInfo2* info = info_.exchange(nullptr);

        std::lock_guard<std::mutex> g(mu_);
        std::vector<const std::pair<const FunctionID, Compiled>*> rows;
        rows.reserve(table_.size());
        std::uint64_t recompiled = 0;
        for (const auto& kv : table_) {
            rows.push_back(&kv);
            if (kv.second.count > 1) ++recompiled;
        }
        std::sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) {
            if (a->second.count != b->second.count) return a->second.count > b->second.count;
            if (a->second.name != b->second.name) return a->second.name < b->second.name;
            return a->first < b->first;
        });
        std::fprintf(stderr,
                     "[method_namer] shutdown: functions=%zu compilations=%" PRIu64 " recompiled-functions=%" PRIu64
                     " failed-compilations=%" PRIu64 "\n",
                     table_.size(), compilations_, recompiled, failed_.load());
        for (size_t i = 0; i < rows.size() && i < 10; ++i) {
            std::fprintf(stderr, "[method_namer]   %2zu. %" PRIu64 "x  %s  (FunctionID 0x%" PRIxPTR ")\n", i + 1,
                         rows[i]->second.count, rows[i]->second.name.c_str(), static_cast<std::uintptr_t>(rows[i]->first));
        }

        if (info != nullptr) info->Release();
        return S_OK;
    }

private:
    std::atomic<ICorProfilerInfo2*> info_{nullptr};
    std::atomic<bool> shutdown_{false};
    std::atomic<std::uint64_t> failed_{0};

    std::mutex mu_;  // guards the two members below
    std::uint64_t compilations_ = 0;
    std::unordered_map<FunctionID, Compiled> table_;
};

DOCFIX_DEFINE_PROFILER(MethodNamer)
