// callee_prebinder.cpp -- pre-binds FunctionIDs for the app module's methods so that JIT and
// inlining events can be attributed with one hash lookup, and reports which small methods (the
// usual inlining candidates, CIL code size <= 16 bytes) the JIT actually asked to inline.
//
// What it does:
//   * ModuleLoadFinished (app.dll only): GetModuleMetaData(ofRead) -> IMetaDataImport (+ QI for
//     IMetaDataImport2); EnumTypeDefs / EnumMethods (every enumeration closed) build a table
//     TypeDef -> [MethodDef, name, generic-arity (EnumGenericParams), CIL code size
//     (GetILFunctionBody + ECMA-335 II.25.4 header)].
//   * ClassLoadFinished: GetClassIDInfo gives (ModuleID, TypeDef) of the new ClassID; for an app
//     type, every non-generic method is bound with ICorProfilerInfo2::GetFunctionFromTokenAndTypeArgs
//     and the FunctionID -> MethodDef pair is stored ("pre-binding").
//   * JITCompilationStarted: FunctionID looked up in the pre-bound table; a miss falls back to
//     GetFunctionInfo (counted separately).
//   * JITInlining: the callee is looked up the same way; small pre-bound callees are counted.  The
//     decision is never changed (*pfShouldInline = TRUE).
//   * Shutdown prints "callee_prebinder: ..." from stored data only and releases the info pointer.
//
// Documentation followed:
//   * ModuleLoadFinished: "The value of moduleId is not valid for an information request until the
//     ModuleLoadFinished method is called."  ClassLoadFinished: "The value of classId is not valid
//     for an information request until the ClassLoadFinished method is called."
//   * GetModuleMetaData: may "return an HRESULT value of S_FALSE, and a null in *ppOut."
//   * EnumTypeDefs/EnumMethods/EnumGenericParams: phEnum "must be NULL for the first call of this
//     method"; every handle goes back through CloseEnum.
//   * GetTypeDefProps/GetMethodProps/GetModuleInfo: asked for the length first, then filled.
//   * GetILFunctionBody "can return a CORPROF_E_FUNCTION_NOT_IL HRESULT if the methodId points to a
//     method without any MSIL code".
//   * GetFunctionFromTokenAndTypeArgs: cTypeArgs "must be zero for non-generic functions"; "The
//     value of typeArgs can be NULL if cTypeArgs is set to zero."
//   * COR_PRF_MONITOR_JIT_COMPILATION controls JITCompilation* and JITInlining; CLASS_LOADS controls
//     ClassLoad*.  Shutdown: no ICorProfilerInfo calls after it except the final Release.
//
// THE DELIBERATE BUG (marked "// BUG:" below): the pre-binding call is made from inside
// ClassLoadFinished, i.e. while the runtime is still loading types ("Some parts of loading the
// class might continue after the ClassLoadFinished callback."), which the
// GetFunctionFromTokenAndTypeArgs page warns against.  The documented design is to store
// (ModuleID, mdMethodDef) and compare with GetFunctionInfo when a FunctionID shows up.
//
// Ambiguities in the documents:
//   * Whether ClassLoadFinished counts as "during loading of ... types" is not spelled out; the
//     ClassLoadFinished page says loading may continue after it, so this file treats it as such.
//   * FunctionIDs of shared generic code (e.g. Box<__Canon>) are not the ones GetFunctionFrom-
//     TokenAndTypeArgs returns for an exact instantiation; the documents do not say how they relate.
//   * JITInlining does not say what *pfShouldInline holds on entry; it is set explicitly.
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// {FCE5EFA0-8BBA-4F8E-A036-8F2022B08466}; first methods after IMetaDataImport's, in cor.h order.
constexpr GUID IID_IMetaDataImport2 = {0xFCE5EFA0, 0x8BBA, 0x4F8E, {0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66}};
struct IMetaDataImport2 : public IMetaDataImport {
    virtual HRESULT STDMETHODCALLTYPE EnumGenericParams(HCORENUM*, mdToken, mdToken*, ULONG, ULONG*) = 0;
};

template <class F>
std::string two_pass(F call) {
    ULONG n = 0;
    if (!succeeded(call(nullptr, 0, &n)) || n == 0) return {};
    std::u16string buf(n, u'\0');
    if (!succeeded(call(buf.data(), n, &n))) return {};
    return to_utf8(buf.data(), buf.size());
}

// CIL code size from a method header (tiny: upper 6 bits; fat: DWORD at offset 4).
ULONG il_code_size(LPCBYTE hdr, ULONG total) {
    if (hdr == nullptr || total == 0) return 0;
    if ((hdr[0] & 3) == 2) return hdr[0] >> 2;
    if ((hdr[0] & 3) == 3 && total >= 12) {
        ULONG32 v;
        std::memcpy(&v, hdr + 4, 4);
        return v;
    }
    return 0;
}

}  // namespace

class CalleePrebinder : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_CLASS_LOADS |
                                 COR_PRF_MONITOR_JIT_COMPILATION);
        if (failed(hr)) { info_->Release(); info_ = nullptr; return hr; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mod, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus) || app_.load() != 0) return S_OK;
        std::string path = two_pass([&](WCHAR* b, ULONG c, ULONG* n) { return info_->GetModuleInfo(mod, nullptr, c, n, b, nullptr); });
        size_t slash = path.find_last_of('/');
        if (path.substr(slash == std::string::npos ? 0 : slash + 1) != "app.dll") return S_OK;
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return S_OK;
        IMetaDataImport* md = nullptr;
        IMetaDataImport2* md2 = nullptr;
        unk->QueryInterface(IID_IMetaDataImport, reinterpret_cast<void**>(&md));
        unk->QueryInterface(IID_IMetaDataImport2, reinterpret_cast<void**>(&md2));
        unk->Release();
        if (md != nullptr) { BuildTable(mod, md, md2); md->Release(); }
        if (md2 != nullptr) md2->Release();
        app_.store(mod);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleUnloadStarted(ModuleID mod) override {
        ModuleID expected = mod;
        app_.compare_exchange_strong(expected, 0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT hrStatus) override {
        ModuleID app = app_.load();
        if (shutdown_.load() || failed(hrStatus) || app == 0) return S_OK;
        ModuleID mod = 0;
        mdToken td = 0;
        if (failed(info_->GetClassIDInfo(cls, &mod, &td)) || mod != app) return S_OK;
        std::vector<mdToken> todo;
        {
            std::lock_guard<std::mutex> g(mu_);
            ++appClasses_;
            auto it = byType_.find(td);
            if (it == byType_.end()) return S_OK;
            for (mdToken mb : it->second)
                if (methods_[mb].genericArity == 0) todo.push_back(mb);
        }
        for (mdToken mb : todo) {
            FunctionID fid = 0;
            // BUG: "If the function is not already loaded, calling GetFunctionFromTokenAndTypeArgs will cause loading to occur, which is a dangerous operation in many contexts. For example, calling this method during loading of modules or types could lead to an infinite loop as the runtime attempts to circularly load things."
            HRESULT hr = info_->GetFunctionFromTokenAndTypeArgs(mod, mb, cls, 0, nullptr, &fid);
            std::lock_guard<std::mutex> g(mu_);
            if (succeeded(hr) && fid != 0) {
                if (prebound_.emplace(fid, mb).second) ++prebindCalls_;
            } else {
                ++prebindFailures_;
            }
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        if (shutdown_.load()) return S_OK;
        {
            std::lock_guard<std::mutex> g(mu_);
            if (prebound_.count(fid)) { ++hits_; ++jitApp_; return S_OK; }
        }
        mdToken tok = 0;
        if (!AppToken(fid, &tok)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++fallback_;
        ++jitApp_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID caller, FunctionID callee, BOOL* pfShouldInline) override {
        if (pfShouldInline != nullptr) *pfShouldInline = 1;
        if (shutdown_.load()) return S_OK;
        mdToken tok = 0;
        bool known;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = prebound_.find(callee);
            known = it != prebound_.end();
            if (known) tok = it->second;
        }
        if (!known && !AppToken(callee, &tok)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++inlinedApp_;
        auto m = methods_.find(tok);
        if (m != methods_.end() && m->second.ilSize <= 16) ++inlinedSmall_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        unsigned small = 0, generic = 0;
        for (auto& kv : methods_) {
            small += kv.second.hasIL && kv.second.ilSize <= 16;
            generic += kv.second.genericArity > 0;
        }
        std::fprintf(stderr,
                     "callee_prebinder: methods=%zu generic_methods=%u small_methods=%u app_classes=%u prebound=%u "
                     "prebind_failures=%u jit_app=%u prebound_hits=%u fallback_lookups=%u inlined_app_callees=%u "
                     "inlined_small=%u\n",
                     methods_.size(), generic, small, appClasses_, prebindCalls_, prebindFailures_, jitApp_, hits_,
                     fallback_, inlinedApp_, inlinedSmall_);
        for (auto& kv : methods_)
            std::fprintf(stderr, "  %-28s il=%-4u%s\n", kv.second.name.c_str(), kv.second.ilSize,
                         kv.second.genericArity ? " generic" : "");
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    struct Method {
        std::string name;
        ULONG ilSize = 0;
        ULONG genericArity = 0;
        bool hasIL = false;
    };

    bool AppToken(FunctionID fid, mdToken* tok) {
        ModuleID app = app_.load(), mod = 0;
        ClassID cls = 0;
        return app != 0 && succeeded(info_->GetFunctionInfo(fid, &cls, &mod, tok)) && mod == app;
    }

    void BuildTable(ModuleID mod, IMetaDataImport* md, IMetaDataImport2* md2) {
        mdToken buf[64];
        ULONG got = 0;
        std::vector<mdToken> types;
        HCORENUM e = nullptr;
        while (succeeded(md->EnumTypeDefs(&e, buf, 64, &got)) && got > 0) types.insert(types.end(), buf, buf + got);
        md->CloseEnum(e);
        std::lock_guard<std::mutex> g(mu_);
        for (mdToken td : types) {
            std::string tname = two_pass([&](WCHAR* b, ULONG c, ULONG* n) { return md->GetTypeDefProps(td, b, c, n, nullptr, nullptr); });
            std::vector<mdToken>& list = byType_[td];
            e = nullptr;
            while (succeeded(md->EnumMethods(&e, td, buf, 64, &got)) && got > 0) list.insert(list.end(), buf, buf + got);
            md->CloseEnum(e);
            for (mdToken mb : list) {
                Method& m = methods_[mb];
                m.name = tname + "::" + two_pass([&](WCHAR* b, ULONG c, ULONG* n) {
                             return md->GetMethodProps(mb, nullptr, b, c, n, nullptr, nullptr, nullptr, nullptr, nullptr);
                         });
                if (md2 != nullptr) {
                    mdToken gp[8];
                    ULONG ngp = 0;
                    HCORENUM ge = nullptr;
                    while (succeeded(md2->EnumGenericParams(&ge, mb, gp, 8, &ngp)) && ngp > 0) m.genericArity += ngp;
                    md2->CloseEnum(ge);
                }
                LPCBYTE hdr = nullptr;
                ULONG cb = 0;
                if (info_->GetILFunctionBody(mod, mb, &hdr, &cb) == S_OK) {
                    m.hasIL = true;
                    m.ilSize = il_code_size(hdr, cb);
                }
            }
        }
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<ModuleID> app_{0};
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::map<mdToken, Method> methods_;
    std::map<mdToken, std::vector<mdToken>> byType_;
    std::unordered_map<FunctionID, mdToken> prebound_;
    unsigned appClasses_ = 0, prebindCalls_ = 0, prebindFailures_ = 0, jitApp_ = 0, hits_ = 0, fallback_ = 0;
    unsigned inlinedApp_ = 0, inlinedSmall_ = 0;
};

DOCFIX_DEFINE_PROFILER(CalleePrebinder)
