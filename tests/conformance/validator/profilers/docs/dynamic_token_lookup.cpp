// dynamic_token_lookup.cpp -- "JIT ledger": native code produced by the JIT, per module and per method,
// including IL stubs / LCG methods.  Contains exactly ONE deliberate misuse of the profiling API
// (marked by the one BUG comment below).
//
// What it does: it asks for every method to be JIT-compiled (COR_PRF_DISABLE_ALL_NGEN_IMAGES, so that
// no precompiled code hides methods from the ledger), records module names as modules load, and on
// every successful JITCompilationFinished / DynamicMethodJITCompilationFinished measures the body with
// ICorProfilerInfo2::GetCodeInfo2 and names the method through one shared helper, method_name(), which
// goes FunctionID -> (IMetaDataImport, token) -> IMetaDataImport::GetMethodProps.  Shutdown prints the
// totals, the three biggest modules, and the biggest dynamic method.
//
// Documentation it follows (quoted):
//   * ICorProfilerCallback::Initialize: "The Initialize call is the only opportunity to enable (or
//     disable) callbacks that are immutable."
//   * ICorProfilerInfo2::GetCodeInfo2: "After GetCodeInfo2 returns, you must verify that the codeInfos
//     buffer was large enough to contain all the COR_PRF_CODE_INFO structures." (retried when too small)
//   * ICorProfilerInfo::GetModuleInfo / caller-allocated buffers: "If pcBufferMax points to a value that
//     is larger than cBufferSizeStart, allocate a larger InfoBuffer buffer ... and call the method again."
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."
//
// The bug: method_name() is also used for dynamic methods (see the BUG comment in DynamicMethodJITCompilationFinished).  The documentation of
// ICorProfilerCallback8::DynamicMethodJITCompilationStarted/Finished says: "functionId values cannot be
// used to resolve to their metadata tokens, because dynamic methods have no metadata."  The right API
// for those FunctionIDs is ICorProfilerInfo8::GetDynamicFunctionInfo.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

using namespace docfix;

static const char* const TAG = "[jitledger]";

struct ModuleTotals {
    std::string name;
    unsigned methods = 0;
    unsigned long long bytes = 0;
};

class JitLedger : public CallbackBase {
    ICorProfilerInfo2* pi = nullptr;
    std::atomic<bool> down{false};
    std::mutex mu;
    std::map<ModuleID, ModuleTotals> modules;
    unsigned jitted = 0, dynamics = 0, sizeFailures = 0;
    unsigned long long jitBytes = 0, dynBytes = 0;
    // what the metadata path said for dynamic FunctionIDs
    unsigned dynLookupOk = 0, dynLookupFailed = 0, dynTokenInvalid = 0, dynNamed = 0;
    mdToken lastDynToken = 0;
    HRESULT lastDynHr = S_OK;
    std::string bigDynName;
    unsigned long long bigDynBytes = 0;

    // Native code size of fid's current body (caller-allocated buffer, single pass + retry).
    bool code_size(FunctionID fid, unsigned long long& bytes) {
        COR_PRF_CODE_INFO ci[8];
        ULONG32 n = 0;
        if (failed(pi->GetCodeInfo2(fid, 8, &n, ci))) return false;
        std::vector<COR_PRF_CODE_INFO> more;
        const COR_PRF_CODE_INFO* p = ci;
        if (n > 8) {
            more.resize(n);
            ULONG32 n2 = 0;
            if (failed(pi->GetCodeInfo2(fid, n, &n2, more.data()))) return false;
            if (n2 < n) n = n2;
            p = more.data();
        }
        bytes = 0;
        for (ULONG32 i = 0; i < n; ++i) bytes += p[i].size;
        return n != 0;
    }

    // FunctionID -> "Method" through the module's metadata.
    HRESULT method_name(FunctionID fid, std::string& out, mdToken& tok) {
        IUnknown* unk = nullptr;
        tok = 0;
        HRESULT hr = pi->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &tok);
        if (failed(hr)) return hr;
        auto* md = static_cast<IMetaDataImport*>(static_cast<void*>(unk));
        if (!md->IsValidToken(tok)) {
            md->Release();
            return S_FALSE;  // resolved, but to nothing usable
        }
        WCHAR buf[512];
        ULONG cch = 0;
        mdTypeDef owner = 0;
        hr = md->GetMethodProps(tok, &owner, buf, 512, &cch, nullptr, nullptr, nullptr, nullptr, nullptr);
        if (succeeded(hr)) out = to_utf8(buf, cch < 512 ? cch : 512);
        md->Release();
        return hr;
    }

public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (!unk) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&pi));
        if (failed(hr)) return hr;
        hr = pi->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS |
                              COR_PRF_DISABLE_ALL_NGEN_IMAGES);
        if (failed(hr)) {
            std::fprintf(stderr, "%s SetEventMask failed 0x%08x\n", TAG, (unsigned)hr);
            pi->Release();
            pi = nullptr;
            return hr;
        }
        std::fprintf(stderr, "%s ready\n", TAG);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID mid, HRESULT st) override {
        if (down || failed(st)) return S_OK;
        WCHAR small[260];
        ULONG cch = 0;
        LPCBYTE base = nullptr;
        AssemblyID asm_ = 0;
        std::string name;
        HRESULT hr = pi->GetModuleInfo(mid, &base, 260, &cch, small, &asm_);
        if (succeeded(hr) && cch > 260) {
            std::vector<WCHAR> big(cch);
            if (succeeded(pi->GetModuleInfo(mid, &base, cch, &cch, big.data(), &asm_))) name = to_utf8(big.data());
        } else if (succeeded(hr)) {
            name = to_utf8(small);
        }
        size_t slash = name.find_last_of('/');
        if (slash != std::string::npos) name = name.substr(slash + 1);
        std::lock_guard<std::mutex> g(mu);
        modules[mid].name = name.empty() ? "<module>" : name;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT st, BOOL) override {
        if (down || failed(st)) return S_OK;
        unsigned long long bytes = 0;
        bool sized = code_size(fid, bytes);
        ClassID cls = 0;
        ModuleID mid = 0;
        mdToken tok = 0;
        HRESULT hr = pi->GetFunctionInfo(fid, &cls, &mid, &tok);
        std::lock_guard<std::mutex> g(mu);
        if (!sized) {
            ++sizeFailures;
            return S_OK;
        }
        ++jitted;
        jitBytes += bytes;
        if (succeeded(hr)) {
            ModuleTotals& m = modules[mid];
            ++m.methods;
            m.bytes += bytes;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationFinished(FunctionID fid, HRESULT st, BOOL) override {
        if (down || failed(st)) return S_OK;
        unsigned long long bytes = 0;
        bool sized = code_size(fid, bytes);
        std::string name;
        mdToken tok = 0;
        // BUG: a dynamic method's FunctionID is resolved to a metadata token and an IMetaDataImport, the
        // same way as an ordinary method's.  ICorProfilerCallback8::DynamicMethodJITCompilationFinished
        // (and ...Started): "functionId values cannot be used to resolve to their metadata tokens, because
        // dynamic methods have no metadata."  (ICorProfilerInfo8::GetDynamicFunctionInfo is the API for it.)
        HRESULT hr = method_name(fid, name, tok);
        std::lock_guard<std::mutex> g(mu);
        if (failed(hr)) {
            ++dynLookupFailed;
        } else {
            ++dynLookupOk;
            if (hr == S_FALSE) ++dynTokenInvalid;
            else ++dynNamed;
        }
        lastDynHr = hr;
        lastDynToken = tok;
        if (!sized) {
            ++sizeFailures;
            return S_OK;
        }
        ++dynamics;
        dynBytes += bytes;
        if (bytes > bigDynBytes) {
            bigDynBytes = bytes;
            bigDynName = name.empty() ? "<dynamic>" : name;
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        down = true;
        std::lock_guard<std::mutex> g(mu);
        std::fprintf(stderr, "%s jitted=%u bytes=%llu dynamic=%u bytes=%llu size_failures=%u\n", TAG, jitted, jitBytes,
                     dynamics, dynBytes, sizeFailures);
        std::fprintf(stderr,
                     "%s dynamic names via metadata: lookups ok=%u (named=%u invalid_token=%u) failed=%u "
                     "last hr=0x%08x token=0x%08x; biggest dynamic: %s %llu bytes\n",
                     TAG, dynLookupOk, dynNamed, dynTokenInvalid, dynLookupFailed, (unsigned)lastDynHr, lastDynToken,
                     bigDynName.empty() ? "-" : bigDynName.c_str(), bigDynBytes);
        std::vector<const ModuleTotals*> order;
        for (auto& kv : modules)
            if (kv.second.methods) order.push_back(&kv.second);
        std::sort(order.begin(), order.end(), [](const ModuleTotals* a, const ModuleTotals* b) { return a->bytes > b->bytes; });
        for (size_t i = 0; i < order.size() && i < 3; ++i)
            std::fprintf(stderr, "%s   %-40s %5u methods %8llu bytes\n", TAG, order[i]->name.c_str(), order[i]->methods,
                         order[i]->bytes);
        if (pi) {
            pi->Release();
            pi = nullptr;
        }
        return S_OK;
    }
};

DOCFIX_DEFINE_PROFILER(JitLedger)
