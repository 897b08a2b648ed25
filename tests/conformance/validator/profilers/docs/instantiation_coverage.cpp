// instantiation_coverage.cpp -- entry coverage per JIT-compiled instantiation, with an
// IL-to-native expansion report.
//
// What it does: coverage tools that count per method hide which generic instantiations ran
// (Echo<int> versus Echo<string>).  This profiler gives every FunctionID of the application module
// (file name INSTCOV_MODULE, default "app.dll") its own int32 counter: in JITCompilationStarted it
// reads the IL body, prefixes
//     ldc.i8 &counter ; conv.i ; dup ; ldind.i4 ; ldc.i4.1 ; add ; stind.i4
// re-emits the header (tiny when the original was tiny and the code still fits, else fat with
// MaxStack >= 3, EH clauses shifted and re-emitted as one fat table), copies it into the module's
// IMethodMalloc memory, installs it with SetILFunctionBody and passes the old->new offset map to
// SetILInstrumentedCodeMap.  JITInlining keeps application methods out of line.  In
// JITCompilationFinished it reads GetILToNativeMapping (two passes) and sums, per instantiation,
// the native bytes that map to IL, to prolog/epilog and to nothing.  Shutdown prints
// "instantiation_coverage: instantiations=<n> ran=<m> ..." and a line per instantiation.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * JITCompilationStarted: "If the profiler is going to replace common intermediate language (CIL)
//    code for method A by calling the ICorProfilerInfo::SetILFunctionBody method, it must do so for
//    both JITCompilationStarted events, but it may use the same CIL block for both."
//  * SetILFunctionBody: "Use the ICorProfilerInfo::GetILFunctionBodyAllocator method to allocate
//    space for the new method to ensure that the buffer is compatible."  IMethodMalloc: "It allows
//    you to allocate memory, but not to free it."
//  * GetILFunctionBody "can return a CORPROF_E_FUNCTION_NOT_IL HRESULT if the methodId points to a
//    method without any CIL code".
//  * SetILInstrumentedCodeMap: "Set fStartJit to true in the first call to SetILInstrumentedCodeMap
//    for a given FunctionID, and to false thereafter."; "The map should be sorted in increasing
//    order."; "The map does not interpolate missing entries." -> one ascending entry per original
//    instruction, (0 old, 0 new) first so that the probe belongs to the first instruction.
//  * GetILToNativeMapping: "an entry in the array can have its ilOffset field set to a value of the
//    CorDebugIlToNativeMappingTypes enumeration" (NO_MAPPING -1, PROLOG -2, EPILOG -3);
//    "Alternatively, you can first call GetILToNativeMapping with a zero-length map buffer to obtain
//    the correct buffer size."  Caller-Allocated Buffers: "If InfoBuffer is null, cBufferSizeStart
//    must be 0."  GetModuleInfo and IMetaDataImport names are read the same two-pass way.
//  * JITInlining: "The profiler can set pfShouldInline to false to prevent the calleeId function
//    from being inserted into the callerId function."
//  * COR_PRF_MONITOR_JIT_COMPILATION "Controls the JITCompilation*, JITFunctionPitched, and
//    JITInlining callbacks"; COR_PRF_ENABLE_JIT_MAPS (immutable) is set in Initialize.
//  * ECMA-335 II.25.4 method headers and EH sections; Partition III opcode encodings.
//
// Ambiguities met: the SetILInstrumentedCodeMap page states rgILMapEntries ownership only for
// .NET Framework 3.5 and earlier (the maps are never freed here); COR_PRF_ENABLE_JIT_MAPS is
// "Deprecated" yet immutable (set anyway); GetILToNativeMapping's remark multiplies pcMap by the
// structure size before comparing it with cMap (cMap is used as an element count); whether
// GetILFunctionBody returns the original or the replaced body after SetILFunctionBody is not
// stated; IMethodMalloc::Alloc's alignment is not stated (the header is put on a 4-byte boundary).
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
alignas(64) std::int32_t g_counts[kMaxSlots];  // one per instrumented FunctionID
constexpr std::uint32_t kProbe = 15;

std::uint16_t rd16(const BYTE* p) { return std::uint16_t(p[0] | (p[1] << 8)); }
std::uint32_t rd32(const BYTE* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24); }
void put16(std::vector<BYTE>& v, std::uint32_t x) { v.push_back(BYTE(x)); v.push_back(BYTE(x >> 8)); }
void put32(std::vector<BYTE>& v, std::uint32_t x) { put16(v, x & 0xFFFF); put16(v, x >> 16); }
const BYTE* align4(const BYTE* q) {
    return reinterpret_cast<const BYTE*>((reinterpret_cast<std::uintptr_t>(q) + 3) & ~std::uintptr_t(3));
}

struct EhClause { std::uint32_t flags, tryOff, tryLen, hOff, hLen, extra; };
struct IlBody {
    bool fat = false;
    std::uint16_t flags = 0;
    unsigned maxStack = 8;
    std::uint32_t localSig = 0, codeSize = 0;
    const BYTE* code = nullptr;
    std::vector<EhClause> eh;
};

bool read_body(const BYTE* p, ULONG total, IlBody& b) {
    if (p == nullptr || total == 0) return false;
    if ((p[0] & 3) == 2) { b.codeSize = p[0] >> 2; b.code = p + 1; return 1u + b.codeSize <= total; }
    if ((p[0] & 3) != 3 || total < 12 || (rd16(p) >> 12) < 3) return false;
    std::uint16_t w = rd16(p);
    b.fat = true, b.flags = w & 0x0FFF, b.maxStack = rd16(p + 2), b.codeSize = rd32(p + 4), b.localSig = rd32(p + 8);
    b.code = p + (w >> 12) * 4;
    const BYTE* end = p + total;
    if (b.code + b.codeSize > end) return false;
    bool more = w & 0x8;  // CorILMethod_MoreSects
    for (const BYTE* s = align4(b.code + b.codeSize); more; s = align4(s)) {
        if (s + 4 > end || (s[0] & 0x3F) != 0x1) return false;  // EH tables only
        bool fat = s[0] & 0x40;
        more = s[0] & 0x80;
        std::uint32_t size = fat ? (s[1] | (s[2] << 8) | (s[3] << 16)) : s[1], step = fat ? 24 : 12;
        if (size < 4 || size > std::uint64_t(end - s)) return false;
        for (const BYTE* c = s + 4; c + step <= s + size; c += step)
            b.eh.push_back(fat ? EhClause{rd32(c), rd32(c + 4), rd32(c + 8), rd32(c + 12), rd32(c + 16), rd32(c + 20)}
                               : EhClause{rd16(c), rd16(c + 2), c[4], rd16(c + 5), c[7], rd32(c + 8)});
        s += size;
    }
    return true;
}

// Instruction length (ECMA-335 Partition III), 0 when invalid or truncated.
std::uint32_t op_len(const BYTE* c, std::uint32_t pos, std::uint32_t size) {
    BYTE op = c[pos];
    int n = -1;
    if (op == 0xFE) {
        if (pos + 1 >= size) return 0;
        switch (c[pos + 1]) {
            case 0x00: case 0x01: case 0x02: case 0x03: case 0x04: case 0x05: case 0x0F: case 0x11: case 0x13:
            case 0x14: case 0x17: case 0x18: case 0x1A: case 0x1D: case 0x1E: n = 0; break;
            case 0x12: case 0x19: n = 1; break;
            case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x0E: n = 2; break;
            case 0x06: case 0x07: case 0x15: case 0x16: case 0x1C: n = 4; break;
            default: return 0;
        }
        return pos + 2 + n <= size ? 2 + n : 0;
    }
    if (op == 0x45) {  // switch
        if (pos + 5 > size) return 0;
        std::uint64_t len = 5 + 4ull * rd32(c + pos + 1);
        return pos + len <= size ? std::uint32_t(len) : 0;
    }
    if ((op >= 0x0E && op <= 0x13) || op == 0x1F || (op >= 0x2B && op <= 0x37) || op == 0xDE) n = 1;
    else if (op == 0x21 || op == 0x23) n = 8;
    else if (op == 0x20 || op == 0x22 || (op >= 0x27 && op <= 0x29) || (op >= 0x38 && op <= 0x44) ||
             (op >= 0x6F && op <= 0x75) || op == 0x79 || (op >= 0x7B && op <= 0x81) || op == 0x8C || op == 0x8D ||
             op == 0x8F || (op >= 0xA3 && op <= 0xA5) || op == 0xC2 || op == 0xC6 || op == 0xD0 || op == 0xDD) n = 4;
    else if (op <= 0x0D || (op >= 0x14 && op <= 0x1E) || op == 0x25 || op == 0x26 || op == 0x2A ||
             (op >= 0x46 && op <= 0x6E) || op == 0x76 || op == 0x7A || (op >= 0x82 && op <= 0x8B) || op == 0x8E ||
             (op >= 0x90 && op <= 0xA2) || (op >= 0xB3 && op <= 0xBA) || op == 0xC3 ||
             (op >= 0xD1 && op <= 0xDC) || op == 0xDF || op == 0xE0) n = 0;
    return n >= 0 && pos + 1 + n <= size ? 1 + n : 0;
}

std::vector<BYTE> emit_body(const IlBody& b, const BYTE (&probe)[kProbe]) {
    std::vector<BYTE> out;
    std::uint32_t size = kProbe + b.codeSize;
    if (!b.fat && size < 64) {
        out.push_back(BYTE((size << 2) | 0x2));  // CorILMethod_TinyFormat
    } else {
        put16(out, 0x3003 | (b.flags & 0x10) | (b.eh.empty() ? 0 : 0x8));  // FatFormat, size 3, InitLocals, MoreSects
        put16(out, std::max(b.maxStack, 3u));
        put32(out, size);
        put32(out, b.localSig);
    }
    out.insert(out.end(), probe, probe + kProbe);
    out.insert(out.end(), b.code, b.code + b.codeSize);
    if (b.eh.empty()) return out;
    while (out.size() % 4) out.push_back(0);
    put32(out, 0x41 | ((4 + 24 * std::uint32_t(b.eh.size())) << 8));  // EHTable | FatFormat, DataSize
    for (const EhClause& e : b.eh) {
        put32(out, e.flags), put32(out, e.tryOff + kProbe), put32(out, e.tryLen);
        put32(out, e.hOff + kProbe), put32(out, e.hLen);
        put32(out, (e.flags & 0x1) ? e.extra + kProbe : e.extra);  // filter offset moves too
    }
    return out;
}

struct Inst {
    mdMethodDef token = 0;
    unsigned slot = 0;
    const BYTE* body = nullptr;
    std::vector<COR_IL_MAP> map;
    std::uint32_t ilBytes = 0;
    std::uint64_t nativeIl = 0, nativeOther = 0;
    bool pending = true, finished = false;
    std::string name;
};

std::string module_file(ICorProfilerInfo* info, ModuleID mod) {
    ULONG n = 0;
    LPCBYTE base = nullptr;
    AssemblyID a = 0;
    HRESULT hr = info->GetModuleInfo(mod, &base, 0, &n, nullptr, &a);
    if ((failed(hr) && hr != HRESULT_ERROR_INSUFFICIENT_BUFFER) || n == 0) return {};
    std::vector<WCHAR> w(n + 1);
    if (failed(info->GetModuleInfo(mod, &base, n, &n, w.data(), &a))) return {};
    std::string s = to_utf8(w.data(), n);
    size_t cut = s.find_last_of("/\\");
    return cut == std::string::npos ? s : s.substr(cut + 1);
}

std::string qualified_name(IMetaDataImport* md, mdMethodDef tok) {
    mdTypeDef td = 0;
    ULONG n = 0, tn = 0;
    if (md == nullptr || failed(md->GetMethodProps(tok, &td, nullptr, 0, &n, nullptr, nullptr, nullptr, nullptr, nullptr)))
        return "?";
    std::vector<WCHAR> m(n + 1);
    md->GetMethodProps(tok, &td, m.data(), n, &n, nullptr, nullptr, nullptr, nullptr, nullptr);
    std::string type = "?";
    if (succeeded(md->GetTypeDefProps(td, nullptr, 0, &tn, nullptr, nullptr))) {
        std::vector<WCHAR> t(tn + 1);
        if (succeeded(md->GetTypeDefProps(td, t.data(), tn, &tn, nullptr, nullptr))) type = to_utf8(t.data(), tn);
    }
    return type + "::" + to_utf8(m.data(), n);
}

}  // namespace

class InstantiationCoverage : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        const char* m = std::getenv("INSTCOV_MODULE");
        module_ = (m && *m) ? m : "app.dll";
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_ENABLE_JIT_MAPS);
        if (failed(hr)) { note("SetEventMask", hr, "init"); info_->Release(); info_ = nullptr; }
        return hr;
    }

    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID, FunctionID callee, BOOL* pfShouldInline) override {
        ClassID c; ModuleID mod; mdToken t;  // an inlined copy of an instrumented method is not counted
        if (pfShouldInline != nullptr)
            *pfShouldInline = !(!done_ && succeeded(info_->GetFunctionInfo(callee, &c, &mod, &t)) && in_scope(mod));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID fid, BOOL) override {
        if (done_) return S_OK;
        ClassID cls; ModuleID mod; mdToken tok;
        if (failed(info_->GetFunctionInfo(fid, &cls, &mod, &tok)) || !in_scope(mod)) return S_OK;
        std::lock_guard<std::mutex> g(lock_);
        auto it = insts_.find(fid);
        if (it != insts_.end()) {
            Inst* in = it->second.get();
            // Restarted before it finished (class-constructor case): the same block again.
            if (in != nullptr && in->pending && !in->finished) {
                HRESULT hr = info_->SetILFunctionBody(mod, tok, in->body);
                if (failed(hr)) note("SetILFunctionBody", hr, in->name);
                hr = info_->SetILInstrumentedCodeMap(fid, 0, ULONG(in->map.size()), in->map.data());
                if (failed(hr)) note("SetILInstrumentedCodeMap", hr, in->name);
            }
            if (in != nullptr) in->pending = true;
            return S_OK;
        }
        std::unique_ptr<Inst> in = instrument(mod, tok);
        Inst* raw = in.get();
        insts_.emplace(fid, std::move(in));
        if (raw == nullptr) return S_OK;
        if (++perDef_[{mod, tok}] > 1) ++extraInstantiations_;
        // BUG: "The SetILFunctionBody method can be called on only those functions that have never been compiled by a just-in-time (JIT) compiler."
        //      (bodies are keyed by FunctionID: a later instantiation of a generic method replaces the body of a methodDef already compiled for an earlier one)
        HRESULT hr = info_->SetILFunctionBody(mod, tok, raw->body);
        if (failed(hr)) { note("SetILFunctionBody", hr, raw->name); ++failures_; }
        hr = info_->SetILInstrumentedCodeMap(fid, 1, ULONG(raw->map.size()), raw->map.data());
        if (failed(hr)) { note("SetILInstrumentedCodeMap", hr, raw->name); ++failures_; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT hrStatus, BOOL) override {
        if (done_) return S_OK;
        {
            std::lock_guard<std::mutex> g(lock_);
            auto it = insts_.find(fid);
            if (it == insts_.end() || it->second == nullptr) return S_OK;
            it->second->pending = false;
            if (failed(hrStatus) || it->second->finished) return S_OK;  // one native report per instantiation
            it->second->finished = true;
        }
        ULONG32 need = 0;
        HRESULT hr = info_->GetILToNativeMapping(fid, 0, &need, nullptr);  // size query
        if (failed(hr) || need == 0) { if (failed(hr)) ++failures_; return S_OK; }
        std::vector<COR_DEBUG_IL_TO_NATIVE_MAP> map(need);
        ULONG32 got = 0;
        if (failed(hr = info_->GetILToNativeMapping(fid, need, &got, map.data()))) { ++failures_; return S_OK; }
        std::uint64_t il = 0, other = 0;
        for (ULONG32 i = 0; i < std::min(got, need); ++i) {
            std::uint64_t len = map[i].nativeEndOffset > map[i].nativeStartOffset
                                    ? map[i].nativeEndOffset - map[i].nativeStartOffset : 0;
            (map[i].ilOffset >= 0xFFFFFFFDu ? other : il) += len;  // NO_MAPPING / PROLOG / EPILOG
        }
        std::lock_guard<std::mutex> g(lock_);
        Inst* in = insts_[fid].get();
        in->nativeIl = il, in->nativeOther = other;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        done_ = true;
        std::lock_guard<std::mutex> g(lock_);
        std::vector<const Inst*> all;
        for (auto& kv : insts_) if (kv.second) all.push_back(kv.second.get());
        std::sort(all.begin(), all.end(), [](const Inst* a, const Inst* b) { return a->slot < b->slot; });
        unsigned ran = 0;
        std::uint64_t il = 0, nIl = 0, nOther = 0;
        for (const Inst* in : all) {
            if (*static_cast<volatile std::int32_t*>(&g_counts[in->slot]) > 0) ++ran;
            il += in->ilBytes, nIl += in->nativeIl, nOther += in->nativeOther;
        }
        std::fprintf(stderr,
                     "instantiation_coverage: instantiations=%zu ran=%u methods=%zu extra_instantiations=%u il_bytes=%llu "
                     "native_bytes=%llu prolog_epilog_bytes=%llu expansion=%.2f failures=%u\n",
                     all.size(), ran, perDef_.size(), extraInstantiations_, (unsigned long long)il, (unsigned long long)nIl,
                     (unsigned long long)nOther, il ? double(nIl) / double(il) : 0.0, failures_.load());
        for (const Inst* in : all)
            std::fprintf(stderr, "  %7d  %-28s il=%u native=%llu\n", g_counts[in->slot], in->name.c_str(), in->ilBytes,
                         (unsigned long long)in->nativeIl);
        for (auto& kv : md_) if (kv.second) kv.second->Release();
        md_.clear();
        info_->Release();  // last use of the info pointer
        return S_OK;
    }

private:
    void note(const char* what, HRESULT hr, const std::string& who) {
        std::fprintf(stderr, "[instantiation_coverage] %s failed 0x%08x (%s)\n", what, (unsigned)hr, who.c_str());
    }

    bool in_scope(ModuleID mod) {
        std::lock_guard<std::mutex> g(lock_);
        auto it = scope_.find(mod);
        return it != scope_.end() ? it->second : (scope_[mod] = module_file(info_, mod) == module_);
    }

    std::unique_ptr<Inst> instrument(ModuleID mod, mdMethodDef tok) {
        IMetaDataImport*& md = md_[mod];
        if (md == nullptr) info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&md));
        auto in = std::make_unique<Inst>();
        in->token = tok;
        in->name = qualified_name(md, tok);
        LPCBYTE hdr = nullptr;
        ULONG size = 0;
        HRESULT hr = info_->GetILFunctionBody(mod, tok, &hdr, &size);
        IlBody b;
        if (failed(hr) || !read_body(hdr, size, b) || next_ >= kMaxSlots) {
            if (hr != CORPROF_E_FUNCTION_NOT_IL) note("GetILFunctionBody/parse", hr, in->name);
            return nullptr;
        }
        in->map.push_back(COR_IL_MAP{0, 0, 1});
        for (std::uint32_t pos = 0, len; pos < b.codeSize; pos += len) {
            if ((len = op_len(b.code, pos, b.codeSize)) == 0) { note("decode", E_FAIL, in->name); return nullptr; }
            if (pos > 0) in->map.push_back(COR_IL_MAP{pos, pos + kProbe, 1});
        }
        in->slot = next_++;
        in->ilBytes = b.codeSize;
        BYTE probe[kProbe] = {0x21};  // ldc.i8 &g_counts[slot]; conv.i dup ldind.i4 ldc.i4.1 add stind.i4
        std::uint64_t addr = reinterpret_cast<std::uintptr_t>(&g_counts[in->slot]);
        std::memcpy(probe + 1, &addr, 8);
        const BYTE rest[6] = {0xD3, 0x25, 0x4A, 0x17, 0x58, 0x54};
        std::memcpy(probe + 9, rest, 6);
        std::vector<BYTE> bytes = emit_body(b, probe);
        IMethodMalloc* malloc_ = nullptr;
        if (failed(hr = info_->GetILFunctionBodyAllocator(mod, &malloc_)) || malloc_ == nullptr) {
            note("GetILFunctionBodyAllocator", hr, in->name);
            return nullptr;
        }
        BYTE* mem = static_cast<BYTE*>(malloc_->Alloc(ULONG(bytes.size() + 3)));
        malloc_->Release();
        if (mem == nullptr) { note("IMethodMalloc::Alloc", E_OUTOFMEMORY, in->name); return nullptr; }
        BYTE* at = const_cast<BYTE*>(align4(mem));
        in->body = static_cast<const BYTE*>(std::memcpy(at, bytes.data(), bytes.size()));
        return in;
    }

    ICorProfilerInfo* info_ = nullptr;
    std::string module_;
    std::mutex lock_;  // never held across in_scope()
    std::unordered_map<ModuleID, bool> scope_;
    std::unordered_map<ModuleID, IMetaDataImport*> md_;
    std::unordered_map<FunctionID, std::unique_ptr<Inst>> insts_;
    std::map<std::pair<ModuleID, mdMethodDef>, unsigned> perDef_;
    unsigned next_ = 0, extraInstantiations_ = 0;
    std::atomic<unsigned> failures_{0};
    std::atomic<bool> done_{false};
};

DOCFIX_DEFINE_PROFILER(InstantiationCoverage)
