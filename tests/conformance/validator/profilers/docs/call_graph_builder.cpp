// call_graph_builder.cpp -- static call graph of the app's own module, annotated at run time with
// the JIT's inlining decisions and with the FunctionIDs the JIT produced for each graph node.
//
// What it does:
//   * ModuleLoadFinished (app.dll only): GetModuleMetaData(ofRead, IID_IMetaDataImport), walks every
//     TypeDef (EnumTypeDefs) and its MethodDefs (EnumMethods), closing each enumeration; names each
//     method "Type::Method" (GetTypeDefProps / GetMethodProps, two-pass); reads its body with
//     GetILFunctionBody and decodes the CIL stream (ECMA-335 II.25.4 headers, Partition III opcode
//     table) to collect call / callvirt / newobj targets.  Targets are MethodDef, MemberRef or
//     MethodSpec tokens; MemberRef names come from GetMemberRefProps + GetTypeRefProps /
//     GetTypeDefProps / GetTypeSpecFromToken (GENERICINST decoded to its generic type), MethodSpec
//     parents from IMetaDataImport2::GetMethodSpecProps when the runtime hands that interface out.
//   * JITCompilationFinished: GetFunctionInfo maps each FunctionID back to (module, MethodDef) and
//     so to a graph node (several FunctionIDs can share one node: generic instantiations).
//   * JITInlining: records caller->callee pairs where the caller is an app method; the callee is
//     named through GetFunctionInfo (app) or GetTokenAndMetaDataFromFunction (other modules).  The
//     decision itself is never changed (*pfShouldInline = TRUE).
//   * Shutdown prints "call_graph_builder: methods=<n> ..." and the edges, using stored data only.
//
// Documentation followed (learn.microsoft.com, unmanaged-api/profiling and metadata):
//   * ModuleLoadFinished: "The value of moduleId is not valid for an information request until the
//     ModuleLoadFinished method is called." and "A failure HRESULT in hrStatus indicates a failure."
//   * GetModuleMetaData: "Some modules (such as resource modules) have no metadata. In those cases,
//     GetModuleMetaData will return an HRESULT value of S_FALSE, and a null in *ppOut."
//   * EnumTypeDefs/EnumMethods: phEnum "must be NULL for the first call of this method"; S_FALSE:
//     "There are no MethodDef tokens to enumerate. In that case, pcTokens is zero."  CloseEnum:
//     "The handle specified by hEnum is obtained from a previous EnumName call".
//   * GetMethodProps: pchMethod is "the size in wide characters of szMethod, or in the case of
//     truncation, the actual number of wide characters in the method name" (so: ask size, then fill).
//   * GetILFunctionBody: "GetILFunctionBody can return a CORPROF_E_FUNCTION_NOT_IL HRESULT if the
//     methodId points to a method without any MSIL code (such as an abstract method, or a platform
//     invoke (PInvoke) method)."
//   * COR_PRF_MONITOR_JIT_COMPILATION "Controls the JITCompilation, JITFunctionPitched, and
//     JITInlining callbacks."  JITInlining: "The profiler can set pfShouldInline to false to prevent
//     the calleeId function from being inserted into the callerId function."
//   * GetFunctionInfo: "The metadata token that is returned to the location referenced by pToken can
//     then be used to access the metadata for the function."  GetFunctionFromTokenAndTypeArgs: "If
//     profilers are interested in events for a particular function, they should store the ModuleID
//     and mdMethodDef of that function and use ... GetFunctionInfo2 to check whether a given
//     FunctionID is that of the desired function." (hence no token->FunctionID lookups here).
//   * ModuleUnloadStarted: moduleId "is not valid for an information request after the
//     ModuleUnloadStarted method returns."  Shutdown: "The profiler code cannot safely call methods
//     of the ICorProfilerInfo interface after the Shutdown method is called."
//
// Ambiguities in the documents:
//   * GetILFunctionBody's pcbMethodSize "specifies the size of the method": whether it covers the
//     extra (EH) sections is not said; the decoder trusts the header's code size, clamped to it.
//   * JITInlining does not say what *pfShouldInline holds on entry (set explicitly here), nor
//     whether an allowed request always ends in an inline: "[inlined]" means "asked and allowed".
//   * That ModuleLoadFinished is early enough for GetILFunctionBody is implied ("designed to give a
//     tool access to the MSIL code before it has been loaded") but not stated for this callback.
//   * IMetaDataImport2 is documented, but not that GetModuleMetaData's object implements it; it is
//     obtained with QueryInterface and MethodSpec targets stay unnamed if that fails.
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

// {FCE5EFA0-8BBA-4F8E-A036-8F2022B08466}; methods after IMetaDataImport's, in cor.h order.
constexpr GUID IID_IMetaDataImport2 = {0xFCE5EFA0, 0x8BBA, 0x4F8E, {0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66}};
struct IMetaDataImport2 : public IMetaDataImport {
    virtual HRESULT STDMETHODCALLTYPE EnumGenericParams(HCORENUM*, mdToken, mdToken*, ULONG, ULONG*) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetGenericParamProps(mdToken, ULONG*, DWORD*, mdToken*, DWORD*, WCHAR*, ULONG, ULONG*) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetMethodSpecProps(mdToken, mdToken*, PCCOR_SIGNATURE*, ULONG*) = 0;
};

constexpr mdToken kTypeRef = 0x01000000, kTypeDef = 0x02000000, kMethodDef = 0x06000000, kMemberRef = 0x0A000000,
                  kTypeSpec = 0x1B000000, kMethodSpec = 0x2B000000;
inline mdToken token_type(mdToken t) { return t & 0xFF000000u; }

// Two-pass string getter: first call asks for the length, second fills a buffer of that size.
template <class F>
std::string two_pass(F call) {
    ULONG n = 0;
    if (!succeeded(call(nullptr, 0, &n)) || n == 0) return {};
    std::u16string buf(n, u'\0');
    if (!succeeded(call(buf.data(), n, &n))) return {};
    return to_utf8(buf.data(), buf.size());
}

// ECMA-335 II.23.2: compressed unsigned integer.
bool read_compressed(PCCOR_SIGNATURE& p, PCCOR_SIGNATURE end, ULONG& v) {
    if (p >= end) return false;
    if ((p[0] & 0x80) == 0) { v = p[0]; p += 1; return true; }
    if ((p[0] & 0xC0) == 0x80 && p + 1 < end) { v = ((p[0] & 0x3Fu) << 8) | p[1]; p += 2; return true; }
    if ((p[0] & 0xE0) != 0xC0 || p + 3 >= end) return false;
    v = ((p[0] & 0x1Fu) << 24) | (ULONG(p[1]) << 16) | (ULONG(p[2]) << 8) | p[3];
    p += 4;
    return true;
}

std::string type_name(IMetaDataImport* md, mdToken tk, int depth = 0) {
    if (token_type(tk) == kTypeDef) return two_pass([&](WCHAR* b, ULONG c, ULONG* n) { return md->GetTypeDefProps(tk, b, c, n, nullptr, nullptr); });
    if (token_type(tk) == kTypeRef) return two_pass([&](WCHAR* b, ULONG c, ULONG* n) { return md->GetTypeRefProps(tk, nullptr, b, c, n); });
    if (token_type(tk) == kTypeSpec && depth == 0) {
        PCCOR_SIGNATURE sig = nullptr; ULONG cb = 0, coded = 0;
        if (succeeded(md->GetTypeSpecFromToken(tk, &sig, &cb)) && cb > 2 && sig[0] == 0x15 /*GENERICINST*/ &&
            (sig[1] == 0x12 || sig[1] == 0x11)) {
            PCCOR_SIGNATURE p = sig + 2;
            static const mdToken tags[3] = {kTypeDef, kTypeRef, kTypeSpec};  // TypeDefOrRefEncoded
            if (read_compressed(p, sig + cb, coded) && (coded & 3) < 3)
                return type_name(md, tags[coded & 3] | (coded >> 2), depth + 1);
        }
    }
    return "<type?>";
}

std::string method_def_key(IMetaDataImport* md, mdToken mb) {
    mdToken cls = 0;
    std::string name = two_pass([&](WCHAR* b, ULONG c, ULONG* n) {
        return md->GetMethodProps(mb, &cls, b, c, n, nullptr, nullptr, nullptr, nullptr, nullptr);
    });
    return (token_type(cls) == kTypeDef ? type_name(md, cls) : std::string("<global>")) + "::" + name;
}

std::string callee_key(IMetaDataImport* md, IMetaDataImport2* md2, mdToken tk) {
    if (token_type(tk) == kMethodSpec) {
        mdToken parent = 0; PCCOR_SIGNATURE sig = nullptr; ULONG cb = 0;
        if (md2 == nullptr || !succeeded(md2->GetMethodSpecProps(tk, &parent, &sig, &cb))) return "<methodspec?>";
        tk = parent;  // MethodDef or MemberRef
    }
    if (token_type(tk) == kMethodDef) return method_def_key(md, tk);
    if (token_type(tk) == kMemberRef) {
        mdToken parent = 0; std::string name = two_pass([&](WCHAR* b, ULONG c, ULONG* n) {
            return md->GetMemberRefProps(tk, &parent, b, c, n, nullptr, nullptr);
        });
        if (token_type(parent) == kMethodDef) return method_def_key(md, parent);  // vararg call site
        return type_name(md, parent) + "::" + name;
    }
    return "<token?>";
}

// Operand size of a CIL instruction (ECMA-335 Partition III), -1 for switch (variable).
int operand_size(bool two_byte, BYTE op) {
    if (two_byte) {
        if (op == 0x06 || op == 0x07 || op == 0x15 || op == 0x16 || op == 0x1C) return 4;  // ldftn ldvirtftn initobj constrained. sizeof
        if (op >= 0x09 && op <= 0x0E) return 2;                                             // ldarg .. stloc (uint16)
        if (op == 0x12 || op == 0x19) return 1;                                             // unaligned. no.
        return 0;
    }
    if ((op >= 0x0E && op <= 0x13) || op == 0x1F || (op >= 0x2B && op <= 0x37) || op == 0xDE) return 1;
    if (op == 0x21 || op == 0x23) return 8;  // ldc.i8 ldc.r8
    if (op == 0x45) return -1;               // switch
    if (op == 0x20 || op == 0x22 || (op >= 0x27 && op <= 0x29) || (op >= 0x38 && op <= 0x44) ||
        (op >= 0x6F && op <= 0x75) || op == 0x79 || (op >= 0x7B && op <= 0x81) || op == 0x8C || op == 0x8D ||
        op == 0x8F || (op >= 0xA3 && op <= 0xA5) || op == 0xC2 || op == 0xC6 || op == 0xD0 || op == 0xDD)
        return 4;
    return 0;
}

ULONG32 rd32(const BYTE* p) { ULONG32 v; std::memcpy(&v, p, 4); return v; }

// Calls 'site(token)' for each call/callvirt/newobj.  Returns the code size, 0 if malformed.
template <class F>
ULONG decode_il(const BYTE* hdr, ULONG total, F site) {
    if (hdr == nullptr || total == 0) return 0;
    const BYTE* code; ULONG size;
    if ((hdr[0] & 3) == 2) {  // CorILMethod_TinyFormat: size in the upper 6 bits
        code = hdr + 1;
        size = hdr[0] >> 2;
    } else if ((hdr[0] & 3) == 3 && total >= 12) {  // fat: flags:12, size:4 (in DWORDs)
        ULONG hsize = ((hdr[1] >> 4) & 0xF) * 4u;
        if (hsize < 12) return 0;
        code = hdr + hsize;
        size = rd32(hdr + 4);
    } else {
        return 0;
    }
    if (code - hdr + size > total) size = total - ULONG(code - hdr);
    for (ULONG i = 0; i < size;) {
        bool two = code[i] == 0xFE;
        if (two && i + 1 >= size) break;
        BYTE op = two ? code[i + 1] : code[i];
        i += two ? 2 : 1;
        int n = operand_size(two, op);
        if (n < 0) {  // switch: uint32 count then count int32 targets
            if (i + 4 > size) break;
            n = 4 + 4 * int(rd32(code + i));
        }
        if (i + ULONG(n) > size) break;
        if (!two && (op == 0x28 || op == 0x6F || op == 0x73)) site(rd32(code + i));
        i += ULONG(n);
    }
    return size;
}

}  // namespace

class CallGraphBuilder : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_MONITOR_JIT_COMPILATION);
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
        IMetaDataImport* md = nullptr; IMetaDataImport2* md2 = nullptr;
        unk->QueryInterface(IID_IMetaDataImport, reinterpret_cast<void**>(&md));
        unk->QueryInterface(IID_IMetaDataImport2, reinterpret_cast<void**>(&md2));
        unk->Release();
        if (md != nullptr) { Analyze(mod, md, md2); md->Release(); }
        if (md2 != nullptr) md2->Release();
        app_.store(mod);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleUnloadStarted(ModuleID mod) override {
        ModuleID expected = mod;  // its ModuleID must not be matched any more
        app_.compare_exchange_strong(expected, 0);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        mdToken tok = 0;
        if (!AppToken(fid, &tok)) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++compilations_;
        auto it = nodes_.find(tok);
        if (it != nodes_.end() && fids_.insert(fid).second) ++it->second.fids;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID caller, FunctionID callee, BOOL* pfShouldInline) override {
        if (pfShouldInline != nullptr) *pfShouldInline = 1;  // observe only
        if (shutdown_.load()) return S_OK;
        mdToken ctok = 0, etok = 0;
        if (!AppToken(caller, &ctok)) return S_OK;
        std::string calleeKey;
        if (AppToken(callee, &etok)) {
            std::lock_guard<std::mutex> g(mu_);
            auto it = nodes_.find(etok);
            if (it != nodes_.end()) calleeKey = it->second.key;
        } else {
            IUnknown* unk = nullptr;
            if (succeeded(info_->GetTokenAndMetaDataFromFunction(callee, IID_IMetaDataImport, &unk, &etok)) && unk) {
                IMetaDataImport* md = nullptr;
                if (succeeded(unk->QueryInterface(IID_IMetaDataImport, reinterpret_cast<void**>(&md))) && md) {
                    calleeKey = method_def_key(md, etok);
                    md->Release();
                }
                unk->Release();
            }
        }
        std::lock_guard<std::mutex> g(mu_);
        ++inlineEvents_;
        auto it = nodes_.find(ctok);
        if (it != nodes_.end() && !calleeKey.empty()) inlined_.insert({it->second.key, calleeKey});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::lock_guard<std::mutex> g(mu_);
        std::set<std::string> keys;
        unsigned withIL = 0, jittedNodes = 0;
        for (auto& kv : nodes_) { keys.insert(kv.second.key); withIL += kv.second.hasIL; jittedNodes += kv.second.fids > 0; }
        unsigned internal = 0, inlinedEdges = 0;
        for (auto& e : edges_) {
            internal += keys.count(e.second) > 0;
            inlinedEdges += inlined_.count({nodes_[e.first].key, e.second}) > 0;
        }
        std::fprintf(stderr,
                     "call_graph_builder: methods=%zu il_bodies=%u call_sites=%u (def=%u ref=%u spec=%u) edges=%zu "
                     "internal_edges=%u jitted_fids=%zu jitted_methods=%u compilations=%u inline_events=%u "
                     "inlined_pairs=%zu inlined_edges=%u\n",
                     nodes_.size(), withIL, sites_[0] + sites_[1] + sites_[2], sites_[0], sites_[1], sites_[2],
                     edges_.size(), internal, fids_.size(), jittedNodes, compilations_, inlineEvents_, inlined_.size(),
                     inlinedEdges);
        unsigned shown = 0;
        for (auto& e : edges_) {
            if (++shown > 60) { std::fprintf(stderr, "  ... %zu more edges\n", edges_.size() - 60); break; }
            const Node& n = nodes_[e.first];
            std::fprintf(stderr, "  %s -> %s%s%s\n", n.key.c_str(), e.second.c_str(), keys.count(e.second) ? " [app]" : "",
                         inlined_.count({n.key, e.second}) ? " [inlined]" : "");
        }
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    struct Node {
        std::string key;
        bool hasIL = false;
        ULONG ilSize = 0;
        unsigned fids = 0;
    };

    bool AppToken(FunctionID fid, mdToken* tok) {
        ModuleID app = app_.load(), mod = 0; ClassID cls = 0;
        return app != 0 && succeeded(info_->GetFunctionInfo(fid, &cls, &mod, tok)) && mod == app;
    }

    void Analyze(ModuleID mod, IMetaDataImport* md, IMetaDataImport2* md2) {
        std::vector<mdToken> types, methods;
        mdToken buf[64]; ULONG got = 0;
        HCORENUM e = nullptr;
        while (succeeded(md->EnumTypeDefs(&e, buf, 64, &got)) && got > 0) types.insert(types.end(), buf, buf + got);
        md->CloseEnum(e);
        for (mdToken td : types) {
            e = nullptr;
            while (succeeded(md->EnumMethods(&e, td, buf, 64, &got)) && got > 0) methods.insert(methods.end(), buf, buf + got);
            md->CloseEnum(e);
        }
        std::lock_guard<std::mutex> g(mu_);
        for (mdToken mb : methods) {
            Node& n = nodes_[mb];
            n.key = method_def_key(md, mb);
            LPCBYTE hdr = nullptr; ULONG cb = 0;
            if (info_->GetILFunctionBody(mod, mb, &hdr, &cb) != S_OK) continue;  // e.g. CORPROF_E_FUNCTION_NOT_IL
            n.hasIL = true;
            n.ilSize = decode_il(hdr, cb, [&](mdToken target) {
                mdToken kind = token_type(target);
                if (kind != kMethodDef && kind != kMemberRef && kind != kMethodSpec) return;
                ++sites_[kind == kMethodDef ? 0 : kind == kMemberRef ? 1 : 2];
                edges_.insert({mb, callee_key(md, md2, target)});
            });
        }
    }

    ICorProfilerInfo* info_ = nullptr;
    std::atomic<ModuleID> app_{0};
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::map<mdToken, Node> nodes_;
    std::set<std::pair<mdToken, std::string>> edges_;
    std::set<std::pair<std::string, std::string>> inlined_;
    std::set<FunctionID> fids_;
    unsigned sites_[3] = {0, 0, 0};
    unsigned compilations_ = 0, inlineEvents_ = 0;
};

DOCFIX_DEFINE_PROFILER(CallGraphBuilder)
