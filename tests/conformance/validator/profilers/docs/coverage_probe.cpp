// coverage_probe.cpp -- method coverage by IL rewriting (entry probe on a native counter).
//
// What it does: for each method of the application module (file name COVERAGE_PROBE_MODULE,
// default "app.dll") whose JIT compilation starts, it reads the IL body once and prefixes it with
//     ldc.i8 &counter ; conv.i ; dup ; ldind.i4 ; ldc.i4.1 ; add ; stind.i4
// (15 bytes, depth 3, stack empty before and after), incrementing an int32 the profiler owns.  The
// header is re-emitted (tiny if the original was tiny and the code still fits in 63 bytes, else fat
// with MaxStack = max(original, 3)); EH clauses are shifted by 15 and re-emitted as one fat table.
// The body goes into the module's IMethodMalloc memory, is installed with SetILFunctionBody and the
// old->new offset map is given to SetILInstrumentedCodeMap.  JITCompilationFinished reads the
// IL-to-native map (two passes) and checks its IL offsets are original ones.  JITInlining refuses
// to inline application methods (an inlined copy would carry no probe).  Shutdown prints
// "coverage_probe: methods=<rewritten methods whose counter is non-zero> ..." and a line per method.
// The increment is not atomic: a count can be low under races but is never 0 for a method that ran.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * JITCompilationStarted: "If the profiler is going to replace common intermediate language (CIL)
//    code for method A by calling the ICorProfilerInfo::SetILFunctionBody method, it must do so for
//    both JITCompilationStarted events, but it may use the same CIL block for both." -> one body per
//    (module, methodDef), set again if the same FunctionID starts again before any JIT finished.
//  * SetILFunctionBody: "The SetILFunctionBody method can be called on only those functions that
//    have never been compiled by a just-in-time (JIT) compiler." -> never set after a successful
//    JITCompilationFinished of any FunctionID of the methodDef (instantiations share its body);
//    "Use the ICorProfilerInfo::GetILFunctionBodyAllocator method to allocate space for the new
//    method to ensure that the buffer is compatible."  IMethodMalloc: "It allows you to allocate
//    memory, but not to free it."
//  * GetILFunctionBody "can return a CORPROF_E_FUNCTION_NOT_IL HRESULT if the methodId points to a
//    method without any CIL code" -> such methods are skipped.
//  * SetILInstrumentedCodeMap: "Set fStartJit to true in the first call to SetILInstrumentedCodeMap
//    for a given FunctionID, and to false thereafter."; "The map should be sorted in increasing
//    order."; "Do not reorder instrumented CIL code." "Do not remove the original CIL code."; "The
//    map does not interpolate missing entries." -> one ascending entry per original instruction (a
//    superset of the PDB sequence points); (0 old, 0 new) attributes the probe to the first one.
//  * GetILToNativeMapping: "A profiler can use the ICorProfilerInfo::GetILToNativeMapping method to
//    get the original CIL offset for a given native offset."; "Alternatively, you can first call
//    GetILToNativeMapping with a zero-length map buffer to obtain the correct buffer size."
//    Caller-Allocated Buffers: "If InfoBuffer is null, cBufferSizeStart must be 0." (GetModuleInfo
//    and the IMetaDataImport names are read the same two-pass way.)
//  * JITInlining: "Functions inserted inline do not raise events for entering or leaving." and "The
//    profiler can set pfShouldInline to false to prevent the calleeId function from being inserted".
//  * COR_PRF_MONITOR_JIT_COMPILATION "Controls the JITCompilation*, JITFunctionPitched, and
//    JITInlining callbacks"; COR_PRF_ENABLE_JIT_MAPS is immutable, so it is set in Initialize.
//    Shutdown: no ICorProfilerInfo call once it has started.
//  * ECMA-335 II.25.4 (tiny: 1 byte, size<<2|2, code < 64 bytes, MaxStack 8, no locals or EH; fat:
//    12 bytes, 4-byte aligned, Flags|3<<12, MaxStack, CodeSize, LocalVarSigTok; data sections at
//    the next 4-byte boundary; EH clauses 12 (small) or 24 (fat) bytes) and Partition III encodings.
//
// Ambiguities: (1) "functions ... never been compiled" does not say whether a generic
// instantiation is another function; SetILFunctionBody takes a methodDef, so the methodDef is the
// function here.  (2) JITCompilationStarted asks for the body on "both events" while
// SetILFunctionBody forbids it after compilation; only a same-FunctionID restart before any
// finished compilation is treated as "both events" (tier-1 recompiles are not).  (3) Ownership of
// rgILMapEntries is stated only for .NET Framework 3.5 and earlier (CoTaskMemAlloc, runtime owns
// it); the arrays here are kept alive and never freed.  (4) COR_PRF_ENABLE_JIT_MAPS is
// "Deprecated ... always considered to be set"; set anyway.  (5) Whether pcbMethodSize covers the
// extra data sections is not stated (it does on both runtimes); parsing is bounded by it.
// (6) IMethodMalloc::Alloc's alignment is not documented; 3 spare bytes are requested and the
// header is put on a 4-byte boundary.  (7) GetILToNativeMapping compares "pcMap ... multiplied by
// the size of a COR_DEBUG_IL_TO_NATIVE_MAP structure" with cMap, mixing bytes and elements; cMap
// is used as an element count.
#include "common.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {

constexpr unsigned kMaxSlots = 8192;
alignas(64) std::int32_t g_hits[kMaxSlots];  // written by instrumented IL, read at Shutdown

constexpr std::uint32_t kProbeLen = 15;
constexpr unsigned kProbeStack = 3;

std::uint16_t rd16(const BYTE* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t rd32(const BYTE* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24); }
void wr16(std::vector<BYTE>& v, std::uint32_t x) { v.push_back(BYTE(x)); v.push_back(BYTE(x >> 8)); }
void wr32(std::vector<BYTE>& v, std::uint32_t x) { wr16(v, x & 0xFFFF); wr16(v, x >> 16); }

struct Clause { std::uint32_t flags, tryOff, tryLen, hOff, hLen, extra; };  // extra: class token / filter
struct Body {
    bool fat = false;
    std::uint16_t flags = 0;                   // fat header flags (InitLocals is carried over)
    unsigned maxStack = 8;                     // tiny bodies: 8
    std::uint32_t localSig = 0, codeSize = 0;  // tiny bodies: no locals
    const BYTE* code = nullptr;
    std::vector<Clause> eh;
};

// ECMA-335 II.25.4: returns false for anything this tool does not rewrite.
bool parse_body(const BYTE* p, ULONG total, Body& b) {
    if (p == nullptr || total < 1) return false;
    if ((p[0] & 3) == 2) {  // tiny
        b.codeSize = p[0] >> 2;
        b.code = p + 1;
        return 1 + b.codeSize <= total;
    }
    if ((p[0] & 3) != 3 || total < 12) return false;
    std::uint16_t w = rd16(p);
    unsigned hdr = (w >> 12) * 4;
    if (hdr < 12) return false;
    b.fat = true, b.flags = w & 0x0FFF, b.maxStack = rd16(p + 2), b.codeSize = rd32(p + 4), b.localSig = rd32(p + 8);
    b.code = p + hdr;
    if (hdr + std::uint64_t(b.codeSize) > total) return false;
    if (!(w & 0x8)) return true;  // CorILMethod_MoreSects
    auto align4 = [](const BYTE* q) {
        return reinterpret_cast<const BYTE*>((reinterpret_cast<std::uintptr_t>(q) + 3) & ~std::uintptr_t(3));
    };
    const BYTE* s = align4(b.code + b.codeSize);
    const BYTE* end = p + total;
    for (;;) {
        if (s + 4 > end) return false;
        BYTE kind = s[0];
        if ((kind & 0x3F) != 0x1) return false;  // only CorILMethod_Sect_EHTable is understood
        bool fatSect = kind & 0x40;
        std::uint32_t size = fatSect ? (s[1] | (s[2] << 8) | (s[3] << 16)) : s[1], step = fatSect ? 24 : 12;
        if (size < 4 || size > std::uint64_t(end - s)) return false;
        for (const BYTE* c = s + 4; c + step <= s + size; c += step)
            b.eh.push_back(fatSect ? Clause{rd32(c), rd32(c + 4), rd32(c + 8), rd32(c + 12), rd32(c + 16), rd32(c + 20)}
                                   : Clause{rd16(c), rd16(c + 2), c[4], rd16(c + 5), c[7], rd32(c + 8)});
        s += size;
        if (!(kind & 0x80)) break;  // CorILMethod_Sect_MoreSects
        s = align4(s);
    }
    return true;
}

// Length of the instruction at pos (ECMA-335 Partition III), or 0 if it is not a valid one.
std::uint32_t insn_len(const BYTE* c, std::uint32_t pos, std::uint32_t size) {
    BYTE op = c[pos];
    int n;
    if (op == 0xFE) {
        if (pos + 1 >= size) return 0;
        BYTE o2 = c[pos + 1];
        if (o2 <= 0x05 || o2 == 0x0F || o2 == 0x11 || o2 == 0x13 || o2 == 0x14 || o2 == 0x17 || o2 == 0x18 ||
            o2 == 0x1A || o2 == 0x1D || o2 == 0x1E) n = 0;
        else if (o2 == 0x12 || o2 == 0x19) n = 1;
        else if (o2 >= 0x09 && o2 <= 0x0E) n = 2;
        else if (o2 == 0x06 || o2 == 0x07 || o2 == 0x15 || o2 == 0x16 || o2 == 0x1C) n = 4;
        else return 0;
        return pos + 2 + n <= size ? 2 + n : 0;
    }
    if (op == 0x45) {  // switch: uint32 N, then N int32 targets
        if (pos + 5 > size) return 0;
        std::uint64_t len = 5 + 4ull * rd32(c + pos + 1);
        return pos + len <= size ? std::uint32_t(len) : 0;
    }
    if (op <= 0x0D || (op >= 0x14 && op <= 0x1E) || op == 0x25 || op == 0x26 || op == 0x2A ||
        (op >= 0x46 && op <= 0x6E) || op == 0x76 || op == 0x7A || (op >= 0x82 && op <= 0x8B) || op == 0x8E ||
        (op >= 0x90 && op <= 0xA2) || (op >= 0xB3 && op <= 0xBA) || op == 0xC3 || (op >= 0xD1 && op <= 0xDC) ||
        op == 0xDF || op == 0xE0) n = 0;
    else if ((op >= 0x0E && op <= 0x13) || op == 0x1F || (op >= 0x2B && op <= 0x37) || op == 0xDE) n = 1;
    else if (op == 0x21 || op == 0x23) n = 8;
    else if (op == 0x20 || op == 0x22 || (op >= 0x27 && op <= 0x29) || (op >= 0x38 && op <= 0x44) ||
             (op >= 0x6F && op <= 0x75) || op == 0x79 || (op >= 0x7B && op <= 0x81) || op == 0x8C || op == 0x8D ||
             op == 0x8F || (op >= 0xA3 && op <= 0xA5) || op == 0xC2 || op == 0xC6 || op == 0xD0 || op == 0xDD) n = 4;
    else return 0;
    return pos + 1 + n <= size ? 1 + n : 0;
}

// Serializes probe + original code with a header the new size needs (header assumed 4-aligned).
std::vector<BYTE> build_body(const Body& b, const BYTE* probe) {
    std::vector<BYTE> out;
    std::uint32_t size = kProbeLen + b.codeSize;
    if (!b.fat && size < 64) {
        out.push_back(BYTE((size << 2) | 0x2));
    } else {
        wr16(out, 0x3003 | (b.fat ? (b.flags & 0x10) : 0) | (b.eh.empty() ? 0 : 0x8));  // Fat|InitLocals|MoreSects
        wr16(out, std::max(b.maxStack, kProbeStack));
        wr32(out, size);
        wr32(out, b.localSig);
    }
    out.insert(out.end(), probe, probe + kProbeLen);
    out.insert(out.end(), b.code, b.code + b.codeSize);
    if (!b.eh.empty()) {
        while (out.size() % 4) out.push_back(0);
        std::uint32_t dataSize = 4 + 24 * std::uint32_t(b.eh.size());
        out.push_back(0x41);  // CorILMethod_Sect_EHTable | CorILMethod_Sect_FatFormat
        out.push_back(BYTE(dataSize)); out.push_back(BYTE(dataSize >> 8)); out.push_back(BYTE(dataSize >> 16));
        for (const Clause& c : b.eh) {
            wr32(out, c.flags);
            wr32(out, c.tryOff + kProbeLen); wr32(out, c.tryLen);
            wr32(out, c.hOff + kProbeLen); wr32(out, c.hLen);
            wr32(out, (c.flags & 0x1) ? c.extra + kProbeLen : c.extra);  // COR_ILEXCEPTION_CLAUSE_FILTER
        }
    }
    return out;
}

struct Method {
    unsigned slot = 0;
    const BYTE* body = nullptr;    // in IMethodMalloc memory, never freed
    std::vector<COR_IL_MAP> map;   // kept alive for the life of the process
    std::uint32_t origCodeSize = 0;
    bool compiled = false;         // a JITCompilationFinished succeeded for one of its FunctionIDs
    std::string name;
};
struct Func { Method* m; bool pending; };

std::string module_file(ICorProfilerInfo* info, ModuleID mod) {
    ULONG n = 0;
    LPCBYTE base = nullptr;
    AssemblyID asm_ = 0;
    HRESULT hr = info->GetModuleInfo(mod, &base, 0, &n, nullptr, &asm_);
    if ((failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) || n == 0) return {};
    std::vector<WCHAR> buf(n + 1);
    if (failed(info->GetModuleInfo(mod, &base, n, &n, buf.data(), &asm_))) return {};
    std::string s = to_utf8(buf.data(), n);
    size_t slash = s.find_last_of("/\\");
    return slash == std::string::npos ? s : s.substr(slash + 1);
}

std::string method_name(IMetaDataImport* md, mdMethodDef tok) {
    if (md == nullptr) return "?";
    mdTypeDef td = 0;
    ULONG n = 0;
    if (failed(md->GetMethodProps(tok, &td, nullptr, 0, &n, nullptr, nullptr, nullptr, nullptr, nullptr))) return "?";
    std::vector<WCHAR> m(n + 1);
    md->GetMethodProps(tok, &td, m.data(), n, &n, nullptr, nullptr, nullptr, nullptr, nullptr);
    ULONG tn = 0;
    std::string type = "?";
    if (succeeded(md->GetTypeDefProps(td, nullptr, 0, &tn, nullptr, nullptr))) {
        std::vector<WCHAR> t(tn + 1);
        if (succeeded(md->GetTypeDefProps(td, t.data(), tn, &tn, nullptr, nullptr))) type = to_utf8(t.data(), tn);
    }
    return type + "::" + to_utf8(m.data(), n);
}

}  // namespace

class CoverageProbe : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        const char* m = std::getenv("COVERAGE_PROBE_MODULE");
        target_ = (m && *m) ? m : "app.dll";
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_ENABLE_JIT_MAPS);
        if (failed(hr)) { log("SetEventMask", hr, "initialization"); info_->Release(); info_ = nullptr; }
        return hr;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID, FunctionID callee, BOOL* pfShouldInline) override {
        ClassID cls; ModuleID mod; mdToken tok;  // an inlined copy would not carry (or count) the probe
        if (pfShouldInline != nullptr)
            *pfShouldInline = !(!shutdown_ && succeeded(info_->GetFunctionInfo(callee, &cls, &mod, &tok)) && is_app(mod));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        if (shutdown_) return S_OK;
        ClassID cls; ModuleID mod; mdToken tok;
        if (failed(info_->GetFunctionInfo(fid, &cls, &mod, &tok)) || !is_app(mod)) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        auto it = methods_.find({mod, tok});
        bool fresh = it == methods_.end();
        if (fresh) it = methods_.emplace(std::make_pair(mod, tok), rewrite(mod, tok)).first;
        Method* m = it->second.get();
        if (m == nullptr) return S_OK;  // not rewritable, already reported
        auto fit = funcs_.find(fid);
        bool firstForFunc = fit == funcs_.end();
        // Same FunctionID again before any compilation of this methodDef finished: the documented
        // class-constructor case; the same block is set again.  Otherwise the body is already the
        // methodDef's (set once, shared by all instantiations) and must not be set after a JIT.
        bool setBody = fresh || (!firstForFunc && fit->second.pending && !m->compiled);
        if (setBody) {
            HRESULT hr = info_->SetILFunctionBody(mod, tok, m->body);
            if (failed(hr)) { ++failures_; log("SetILFunctionBody", hr, m->name); }
            else ++bodiesSet_;
        }
        if (firstForFunc || setBody) {
            HRESULT hr = info_->SetILInstrumentedCodeMap(fid, firstForFunc ? 1 : 0, ULONG(m->map.size()), m->map.data());
            if (failed(hr)) { ++failures_; log("SetILInstrumentedCodeMap", hr, m->name); }
            else ++mapsSet_;
        }
        funcs_[fid] = Func{m, true};
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (shutdown_) return S_OK;
        std::uint32_t origSize;
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = funcs_.find(fid);
            if (it == funcs_.end()) return S_OK;
            it->second.pending = false;
            if (failed(hrStatus)) return S_OK;
            it->second.m->compiled = true;
            origSize = it->second.m->origCodeSize;
        }
        ULONG32 n = 0;
        HRESULT hr = info_->GetILToNativeMapping(fid, 0, &n, nullptr);  // pass 1: size only
        if (failed(hr)) ++nativeMapFailures_;
        if (failed(hr) || n == 0) return S_OK;
        std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map(n);
        ULONG32 got = 0;
        hr = info_->GetILToNativeMapping(fid, n, &got, map.data());  // pass 2
        if (failed(hr)) { ++nativeMapFailures_; return S_OK; }
        got = std::min(got, n), ++nativeMaps_, nativeEntries_ += got;
        for (ULONG32 i = 0; i < got; ++i)  // special values (NO_MAPPING, PROLOG, EPILOG) are "negative"
            if (map[i].ilOffset < 0xFFFFFF00u && map[i].ilOffset >= origSize) ++offsetsBeyondOriginal_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_ = true;
        std::lock_guard<std::mutex> g(lock_);
        std::vector<const Method*> rewritten;
        for (auto& kv : methods_) if (kv.second) rewritten.push_back(kv.second.get());
        std::sort(rewritten.begin(), rewritten.end(), [](const Method* a, const Method* b) { return a->slot < b->slot; });
        unsigned ran = 0;
        for (const Method* m : rewritten) if (*static_cast<volatile std::int32_t*>(&g_hits[m->slot]) > 0) ++ran;
        std::fprintf(stderr,
                     "coverage_probe: methods=%u rewritten=%zu skipped=%u bodies_set=%u il_maps=%u native_maps=%u "
                     "native_entries=%u offsets_beyond_original=%u failures=%u\n",
                     ran, rewritten.size(), skipped_, bodiesSet_, mapsSet_, nativeMaps_.load(), nativeEntries_.load(),
                     offsetsBeyondOriginal_.load(), failures_ + nativeMapFailures_.load());
        for (const Method* m : rewritten)
            std::fprintf(stderr, "  %-8s %6d  %s\n", g_hits[m->slot] > 0 ? "covered" : "missed", g_hits[m->slot],
                         m->name.c_str());
        for (auto& kv : metadata_) if (kv.second) kv.second->Release();
        metadata_.clear();
        info_->Release();  // the last use of the info pointer
        return S_OK;
    }

private:
    bool is_app(ModuleID mod) {
        std::lock_guard<std::mutex> g(lock_);
        auto it = appModules_.find(mod);
        return it != appModules_.end() ? it->second : (appModules_[mod] = module_file(info_, mod) == target_);
    }

    void log(const char* what, HRESULT hr, const std::string& who) {
        std::fprintf(stderr, "[coverage_probe] %s failed 0x%08x for %s\n", what, (unsigned)hr, who.c_str());
    }

    // Builds the instrumented body of (mod, tok) once; nullptr when the method is left alone.
    std::unique_ptr<Method> rewrite(ModuleID mod, mdMethodDef tok) {
        auto m = std::make_unique<Method>();
        IMetaDataImport*& md = metadata_[mod];
        if (md == nullptr)
            info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&md));
        m->name = method_name(md, tok);
        LPCBYTE header = nullptr;
        ULONG size = 0;
        HRESULT hr = info_->GetILFunctionBody(mod, tok, &header, &size);
        Body b;
        if (failed(hr) || !parse_body(header, size, b)) {
            if (hr != CORPROF_E_FUNCTION_NOT_IL) log("GetILFunctionBody/parse", hr, m->name);
            ++skipped_;
            return nullptr;
        }
        // One map entry per original instruction; the probe maps to old offset 0.
        m->map.push_back(COR_IL_MAP{0, 0, 1});
        for (std::uint32_t pos = 0; pos < b.codeSize;) {
            std::uint32_t len = insn_len(b.code, pos, b.codeSize);
            if (len == 0 || nextSlot_ >= kMaxSlots) { log("decode/slot", E_FAIL, m->name); ++skipped_; return nullptr; }
            if (pos > 0) m->map.push_back(COR_IL_MAP{pos, pos + kProbeLen, 1});
            pos += len;
        }
        m->slot = nextSlot_++;
        m->origCodeSize = b.codeSize;
        BYTE probe[kProbeLen] = {0x21};  // ldc.i8 <address of the counter>
        std::uint64_t addr = reinterpret_cast<std::uintptr_t>(&g_hits[m->slot]);
        std::memcpy(probe + 1, &addr, 8);
        const BYTE tail[] = {0xD3, 0x25, 0x4A, 0x17, 0x58, 0x54};  // conv.i dup ldind.i4 ldc.i4.1 add stind.i4
        std::memcpy(probe + 9, tail, sizeof tail);
        std::vector<BYTE> bytes = build_body(b, probe);
        IMethodMalloc* alloc = nullptr;
        hr = info_->GetILFunctionBodyAllocator(mod, &alloc);
        if (failed(hr) || alloc == nullptr) { log("GetILFunctionBodyAllocator", hr, m->name); ++failures_; return nullptr; }
        BYTE* mem = static_cast<BYTE*>(alloc->Alloc(ULONG(bytes.size() + 3)));
        alloc->Release();
        if (mem == nullptr) { ++failures_; return nullptr; }
        BYTE* aligned = reinterpret_cast<BYTE*>((reinterpret_cast<std::uintptr_t>(mem) + 3) & ~std::uintptr_t(3));
        m->body = static_cast<const BYTE*>(std::memcpy(aligned, bytes.data(), bytes.size()));
        return m;
    }

    ICorProfilerInfo* info_ = nullptr;
    std::string target_;
    std::mutex lock_;  // recursive use is avoided: is_app is never called with lock_ held
    std::unordered_map<ModuleID, bool> appModules_;
    std::unordered_map<ModuleID, IMetaDataImport*> metadata_;
    std::map<std::pair<ModuleID, mdMethodDef>, std::unique_ptr<Method>> methods_;
    std::unordered_map<FunctionID, Func> funcs_;
    unsigned nextSlot_ = 0, skipped_ = 0, failures_ = 0, bodiesSet_ = 0, mapsSet_ = 0;
    std::atomic<unsigned> nativeMaps_{0}, nativeEntries_{0}, offsetsBeyondOriginal_{0}, nativeMapFailures_{0};
    std::atomic<bool> shutdown_{false};
};

DOCFIX_DEFINE_PROFILER(CoverageProbe)
