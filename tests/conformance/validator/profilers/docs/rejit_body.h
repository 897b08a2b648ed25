// rejit_body.h -- what the three ReJIT fixtures (rejit_rewriter.cpp, rejit_in_callback.cpp,
// rewrite_every_jit.cpp) share: the ICorProfilerFunctionControl interface, a method-body parser and
// the rewrite they make (a probe prologue prepended to a method's IL), and the list of the app's own
// modules.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerFunctionControl Interface: IUnknown, then SetCodegenFlags, SetILFunctionBody,
//     SetILInstrumentedCodeMap (corprof.idl order); "The profiler obtains an instance of this
//     interface through the ICorProfilerCallback4::GetReJITParameters callback."
//   * ICorProfilerFunctionControl::SetILFunctionBody(cbNewILMethodHeader, pbNewILMethodHeader):
//     cbNewILMethodHeader is "The total size of the new CIL, including the header and any structures
//     that come after the body"; "The profiler can free the memory used for its CIL body after
//     SetILFunctionBody returns." (so the body may live on the profiler's own heap).
//   * ICorProfilerInfo::GetILFunctionBody: "Gets a pointer to the body of a method in common
//     intermediate language (CIL) code, starting at its header."
//   * ECMA-335 II.25.4: the tiny header (code size in the upper six bits, at most 63 bytes, max
//     stack 8, no locals), the fat header (flags and size 3 in the first word, MaxStack, CodeSize,
//     LocalVarSigTok), the extra data sections after the code on a 4-byte boundary, EH clauses in
//     small (12-byte) or fat (24-byte) form.  A body of more than 63 bytes of code, or with a
//     larger stack, locals or EH clauses, needs a fat header.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common.h"

namespace rejitfix {

using namespace docfix;

// corprof.idl's ICorProfilerFunctionControl, declared here (the shared headers only forward-declare it).
struct FunctionControl : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE SetCodegenFlags(DWORD flags) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILFunctionBody(ULONG cbNewILMethodHeader, LPCBYTE pbNewILMethodHeader) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILInstrumentedCodeMap(ULONG cILMapEntries, COR_IL_MAP* rgILMapEntries) = 0;
};

inline FunctionControl* control_of(ICorProfilerFunctionControl* p) { return reinterpret_cast<FunctionControl*>(p); }

inline std::uint16_t rd16(const BYTE* p) { return std::uint16_t(p[0] | (p[1] << 8)); }
inline std::uint32_t rd32(const BYTE* p) {
    return std::uint32_t(p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24));
}
inline void wr16(BYTE* p, std::uint16_t v) { p[0] = BYTE(v); p[1] = BYTE(v >> 8); }
inline void wr32(BYTE* p, std::uint32_t v) { p[0] = BYTE(v); p[1] = BYTE(v >> 8); p[2] = BYTE(v >> 16); p[3] = BYTE(v >> 24); }

struct Clause {
    std::uint32_t flags, tryOffset, tryLength, handlerOffset, handlerLength, classOrFilter;
};

struct Body {
    bool fat = false;
    std::uint16_t flags = 0, maxStack = 8;
    std::uint32_t codeSize = 0, localSig = 0;
    const BYTE* code = nullptr;
    std::vector<Clause> clauses;
    bool otherSections = false;
};

// Parses the body GetILFunctionBody answered (pointer and size).
inline bool parse(const BYTE* h, ULONG size, Body* b) {
    if (h == nullptr || size < 1) return false;
    if ((h[0] & 3) == 2) {
        b->codeSize = h[0] >> 2;
        b->code = h + 1;
        return b->codeSize + 1 <= size;
    }
    if ((h[0] & 3) != 3 || size < 12) return false;
    std::uint16_t word = rd16(h);
    b->fat = true;
    b->flags = word & 0x0FFF;
    b->maxStack = rd16(h + 2);
    b->codeSize = rd32(h + 4);
    b->localSig = rd32(h + 8);
    b->code = h + 4 * (word >> 12);
    if ((b->flags & 0x8) == 0) return true;
    std::uint32_t at = (std::uint32_t(b->code - h) + b->codeSize + 3) & ~3u;
    for (;;) {
        if (at + 4 > size) return false;
        const BYTE* s = h + at;
        bool fatSect = (s[0] & 0x40) != 0;
        std::uint32_t len = fatSect ? (s[1] | (s[2] << 8) | (std::uint32_t(s[3]) << 16)) : s[1];
        if (s[0] & 0x1) {
            std::uint32_t n = fatSect ? (len - 4) / 24 : (len - 4) / 12;
            for (std::uint32_t i = 0; i < n; ++i) {
                const BYTE* c = s + 4 + i * (fatSect ? 24 : 12);
                if (fatSect)
                    b->clauses.push_back({rd32(c), rd32(c + 4), rd32(c + 8), rd32(c + 12), rd32(c + 16), rd32(c + 20)});
                else
                    b->clauses.push_back({rd16(c), rd16(c + 2), c[4], rd16(c + 5), c[7], rd32(c + 8)});
            }
        } else {
            b->otherSections = true;
        }
        if ((s[0] & 0x80) == 0) return true;
        at = (at + len + 3) & ~3u;
    }
}

// The probe: "ldc.i4 <id>; pop" -- where a product calls its enter hook; a no-op pair here, so the
// rewrite needs no metadata of its own.
constexpr std::uint32_t kProbe = 6;

// The rewritten body: always a fat header (the code grows by the probe, so a tiny body of 58 or more
// bytes would not fit a tiny header any more), max stack at least 1, locals and InitLocals kept, every
// EH clause moved by the probe's size and written in fat form.
inline std::vector<BYTE> rewrite(const Body& b, std::uint32_t probeId) {
    std::uint32_t size = 12 + kProbe + b.codeSize;
    std::uint32_t sect = (size + 3) & ~3u;
    if (!b.clauses.empty()) size = sect + 4 + 24 * std::uint32_t(b.clauses.size());
    std::vector<BYTE> out(size, 0);
    std::uint16_t flags = 0x3 | (b.fat ? (b.flags & 0x10) : 0) | (b.clauses.empty() ? 0 : 0x8);
    wr16(out.data(), std::uint16_t(flags | (3u << 12)));
    wr16(out.data() + 2, b.maxStack < 1 ? 1 : b.maxStack);
    wr32(out.data() + 4, kProbe + b.codeSize);
    wr32(out.data() + 8, b.fat ? b.localSig : 0);
    out[12] = 0x20;  // ldc.i4
    wr32(out.data() + 13, probeId);
    out[17] = 0x26;  // pop
    std::memcpy(out.data() + 12 + kProbe, b.code, b.codeSize);
    if (b.clauses.empty()) return out;
    BYTE* s = out.data() + sect;
    std::uint32_t len = 4 + 24 * std::uint32_t(b.clauses.size());
    s[0] = 0x41;  // EH table, fat
    s[1] = BYTE(len);
    s[2] = BYTE(len >> 8);
    s[3] = BYTE(len >> 16);
    for (size_t i = 0; i < b.clauses.size(); ++i) {
        const Clause& c = b.clauses[i];
        BYTE* d = s + 4 + 24 * i;
        wr32(d, c.flags);
        wr32(d + 4, c.tryOffset + kProbe);
        wr32(d + 8, c.tryLength);
        wr32(d + 12, c.handlerOffset + kProbe);
        wr32(d + 16, c.handlerLength);
        wr32(d + 20, (c.flags & 1) ? c.classOrFilter + kProbe : c.classOrFilter);  // a filter's offset moves too
    }
    return out;
}

// The app's own modules: every module whose file is not in the shared framework.
class AppModules {
public:
    void loaded(ICorProfilerInfo4* info, ModuleID module) {
        ULONG len = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        if (failed(info->GetModuleInfo(module, &base, 0, &len, nullptr, &assembly)) || len == 0) return;
        std::vector<WCHAR> name(len);
        if (failed(info->GetModuleInfo(module, &base, len, &len, name.data(), &assembly))) return;
        std::string path = to_utf8(name.data(), name.size());
        if (path.find("/shared/Microsoft.NETCore.App/") != std::string::npos) return;
        std::lock_guard<std::mutex> g(mu_);
        modules_.insert(module);
    }
    bool mine(ModuleID module) {
        std::lock_guard<std::mutex> g(mu_);
        return modules_.count(module) != 0;
    }

private:
    std::mutex mu_;
    std::set<ModuleID> modules_;
};

// GetReJITParameters' work, the same in the three fixtures: the original IL (GetILFunctionBody),
// rewritten, handed to the function control.  Returns the function control's HRESULT.
inline HRESULT give_rewritten_body(ICorProfilerInfo4* info, ModuleID module, mdMethodDef method,
                                   ICorProfilerFunctionControl* control, std::uint32_t probeId) {
    LPCBYTE header = nullptr;
    ULONG size = 0;
    HRESULT hr = info->GetILFunctionBody(module, method, &header, &size);
    if (failed(hr)) return hr;
    Body body;
    if (!parse(header, size, &body) || body.otherSections) return E_FAIL;
    std::vector<BYTE> il = rewrite(body, probeId);
    return control_of(control)->SetILFunctionBody(ULONG(il.size()), il.data());
}

}  // namespace rejitfix
