// il_rewrite_common.h -- the plumbing shared by the small IL rewriters il_branch_mid.cpp,
// il_maxstack_small.cpp, il_tiny_over63.cpp and il_eh_out_of_range.cpp (each builds its own new
// body and calls GetILFunctionBody / GetILFunctionBodyAllocator / SetILFunctionBody itself).
//
// What is here:
//   * A method-body reader for ECMA-335 II.25.4: tiny header (one byte, format 0x2, code size in
//     the upper six bits, max stack 8, no locals, no extra sections) and fat header (format 0x3,
//     flags in the low 12 bits of the first WORD and the header size in DWORDs in its upper four
//     bits, then MaxStack WORD, CodeSize DWORD, LocalVarSigTok DWORD), followed by the extra data
//     sections at the next 4-byte boundary after the code (II.25.4.5: Kind byte with EHTable 0x1,
//     FatFormat 0x40, MoreSects 0x80; small sections have a one-byte DataSize, fat ones three
//     bytes; II.25.4.6: small clauses are 12 bytes, fat clauses 24).
//   * RewriterBase: an ICorProfilerCallback with the usual rewriter set-up: Initialize asks for
//     ICorProfilerInfo3 and sets COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS |
//     COR_PRF_DISABLE_INLINING; ModuleLoadFinished remembers the application's own modules
//     (GetModuleInfo, double pass; modules under ".../shared/Microsoft.NETCore.App/" are
//     framework); FirstTime() says whether a (ModuleID, mdMethodDef) is seen for the first time,
//     so each method is rewritten once (the JITCompilationStarted page: "it may use the same CIL
//     block for both" events); Shutdown prints a summary.
// Documentation followed: the pages named in each rewriter's header, and ECMA-335 Partition II
// §25.4 for the body format.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"

namespace ilshape {

using namespace docfix;

constexpr BYTE kTiny = 0x2, kFat = 0x3, kFormatMask = 0x3;
constexpr std::uint16_t kMoreSects = 0x8, kInitLocals = 0x10;
constexpr BYTE kSectEH = 0x1, kSectFat = 0x40, kSectMore = 0x80;
constexpr std::uint32_t kFatHeaderSize = 12;

struct Clause {
    std::uint32_t flags, tryOffset, tryLength, handlerOffset, handlerLength, classOrFilter;
};

struct Body {
    bool fat = false;
    std::uint16_t flags = 0;
    std::uint16_t maxStack = 8;
    std::uint32_t codeSize = 0;
    std::uint32_t localSig = 0;
    const BYTE* code = nullptr;
    std::vector<Clause> clauses;
    bool otherSections = false;
};

inline std::uint16_t Get16(const BYTE* p) { return std::uint16_t(p[0] | (p[1] << 8)); }
inline std::uint32_t Get32(const BYTE* p) {
    return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
}
inline void Put16(BYTE* p, std::uint16_t v) {
    p[0] = BYTE(v);
    p[1] = BYTE(v >> 8);
}
inline void Put32(BYTE* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = BYTE(v >> (8 * i));
}

inline bool Read(const BYTE* h, ULONG size, Body* b) {
    if (h == nullptr || size == 0) return false;
    if ((h[0] & kFormatMask) == kTiny) {
        b->fat = false;
        b->codeSize = h[0] >> 2;
        b->code = h + 1;
        return b->codeSize + 1 <= size;
    }
    if ((h[0] & kFormatMask) != kFat || size < kFatHeaderSize) return false;
    std::uint16_t first = Get16(h);
    b->fat = true;
    b->flags = first & 0x0FFF;
    b->maxStack = Get16(h + 2);
    b->codeSize = Get32(h + 4);
    b->localSig = Get32(h + 8);
    b->code = h + 4 * (first >> 12);
    if ((b->flags & kMoreSects) == 0) return true;
    std::uintptr_t at = (reinterpret_cast<std::uintptr_t>(b->code + b->codeSize) + 3) & ~std::uintptr_t(3);
    for (;;) {
        const BYTE* s = reinterpret_cast<const BYTE*>(at);
        bool fatSect = (s[0] & kSectFat) != 0;
        std::uint32_t dataSize = fatSect ? (s[1] | (s[2] << 8) | (std::uint32_t(s[3]) << 16)) : s[1];
        if ((s[0] & kSectEH) == 0) {
            b->otherSections = true;
        } else if (fatSect) {
            for (std::uint32_t i = 0; i < (dataSize - 4) / 24; ++i) {
                const BYTE* c = s + 4 + 24 * i;
                b->clauses.push_back({Get32(c), Get32(c + 4), Get32(c + 8), Get32(c + 12), Get32(c + 16), Get32(c + 20)});
            }
        } else {
            for (std::uint32_t i = 0; i < (dataSize - 4) / 12; ++i) {
                const BYTE* c = s + 4 + 12 * i;
                b->clauses.push_back({Get16(c), Get16(c + 2), c[4], Get16(c + 5), c[7], Get32(c + 8)});
            }
        }
        if ((s[0] & kSectMore) == 0) break;
        at = (reinterpret_cast<std::uintptr_t>(s + dataSize) + 3) & ~std::uintptr_t(3);
    }
    return true;
}

// The size of a fat EH section holding the body's clauses (II.25.4.5: a 4-byte section header,
// then 24 bytes per fat clause).
inline std::uint32_t FatEHSectionSize(const Body& b) { return 4 + 24 * std::uint32_t(b.clauses.size()); }

class RewriterBase : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING);
        if (failed(hr)) {
            std::fprintf(stderr, "[%s] SetEventMask failed 0x%08x\n", name_, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (failed(hrStatus)) return S_OK;
        ULONG len = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        if (failed(info_->GetModuleInfo(moduleId, &base, 0, &len, nullptr, &assembly)) || len == 0) return S_OK;
        std::vector<WCHAR> name(len);
        if (failed(info_->GetModuleInfo(moduleId, &base, len, &len, name.data(), &assembly))) return S_OK;
        std::string path = to_utf8(name.data(), name.size());
        if (path.find("/shared/Microsoft.NETCore.App/") != std::string::npos) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        appModules_.insert(moduleId);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::fprintf(stderr, "[%s] summary: rewrites=%lu set_failures=%lu skipped=%lu\n", name_, rewrites_.load(),
                     setFailures_.load(), skipped_.load());
        if (info_ != nullptr) info_->Release();
        info_ = nullptr;
        return S_OK;
    }

protected:
    explicit RewriterBase(const char* name) : name_(name) {}

    // The function's (module, methodDef) when it belongs to an application module and is seen for
    // the first time.
    bool FirstTime(FunctionID functionId, ModuleID* module, mdToken* token) {
        ClassID cls = 0;
        if (failed(info_->GetFunctionInfo(functionId, &cls, module, token))) return false;
        std::lock_guard<std::mutex> g(mu_);
        if (appModules_.count(*module) == 0) return false;
        return done_.insert({*module, *token}).second;
    }

    void Rewritten(HRESULT hr, mdToken token, std::uint32_t oldSize, std::uint32_t newSize) {
        if (failed(hr)) {
            ++setFailures_;
        } else {
            ++rewrites_;
        }
        if (verbose_)
            std::fprintf(stderr, "[%s] method 0x%08x: code %u -> %u bytes, SetILFunctionBody 0x%08x\n", name_, token,
                         oldSize, newSize, (unsigned)hr);
    }

    ICorProfilerInfo3* info_ = nullptr;
    const char* name_;
    bool verbose_ = false;
    std::atomic<unsigned long> rewrites_{0}, setFailures_{0}, skipped_{0}, probes_{0};

private:
    std::mutex mu_;
    std::unordered_set<ModuleID> appModules_;
    std::set<std::pair<ModuleID, mdToken>> done_;
};

}  // namespace ilshape
