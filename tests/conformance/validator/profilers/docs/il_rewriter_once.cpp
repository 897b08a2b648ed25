// il_rewriter_once.cpp -- IL instrumentation engine: prepends a probe prologue to every method of
// the application's own modules, exactly once per method.
//
// What it does:
//   * Same engine as il_rewriter_every_jit.cpp (mask COR_PRF_MONITOR_JIT_COMPILATION |
//     COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING; framework modules skipped unless
//     DOCFIX_IL_ALL=1; tiny/fat headers, EH sections rewritten in fat form with shifted offsets;
//     body allocated with GetILFunctionBodyAllocator; installed with SetILFunctionBody; prologue
//     "ldc.i4 <probe id>; pop").
//   * The difference: JITCompilationStarted rewrites a method only the FIRST time it is seen.  A
//     method is identified by (ModuleID, mdMethodDef), not by FunctionID: every instantiation of
//     a generic method shares one IL body, and keying by FunctionID would rewrite that shared body
//     once per instantiation.  The key is inserted under a mutex before the rewrite, so two
//     threads JIT-compiling the same method concurrently cannot both rewrite it.  Later
//     JITCompilationStarted callbacks for an already rewritten method (tier-1 re-JIT, OSR versions
//     on 8.0, the class-constructor case of the JITCompilationStarted page) do nothing: the body
//     installed by SetILFunctionBody stays installed for the method, so every later compilation
//     sees the same instrumented IL ("it may use the same CIL block for both").
//   believed: correct.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::JITCompilationStarted: "It is possible to receive more than one pair of
//     JITCompilationStarted and ICorProfilerCallback::JITCompilationFinished calls for each
//     function ... If the profiler is going to replace common intermediate language (CIL) code for
//     method A by calling the ICorProfilerInfo::SetILFunctionBody method, it must do so for both
//     JITCompilationStarted events, but it may use the same CIL block for both."
//   * ICorProfilerInfo::GetILFunctionBody: "Gets a pointer to the body of a method in common
//     intermediate language (CIL) code, starting at its header."
//   * ICorProfilerInfo::GetILFunctionBodyAllocator / IMethodMalloc::Alloc: the body must be
//     allocated with the module's allocator ("ensures that memory is allocated within that range");
//     "It allows you to allocate memory, but not to free it."
//   * ICorProfilerInfo::SetILFunctionBody: "replaces the relative virtual address of the function
//     in the metadata so that it points to the new function body"; "can be called on only those
//     functions that have never been compiled by a just-in-time (JIT) compiler."
//   * COR_PRF_MONITOR enumeration: COR_PRF_MONITOR_JIT_COMPILATION controls the JITCompilation*
//     callbacks; COR_PRF_DISABLE_INLINING "Disables all inlining." (immutable: set in Initialize).
//   * ECMA-335 II.25.4 (method header, tiny/fat formats, II.25.4.5 extra data sections / EH
//     clauses, II.25.4.6 clause layout) for the body format.
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

// IMethodMalloc (corprof.idl: IUnknown + PVOID Alloc(ULONG cb)) comes from profharness/interfaces.h.

using namespace docfix;

namespace ilrw {

// ---------------------------------------------------------------------- IL body handling
constexpr BYTE kTinyFormat = 0x2, kFatFormat = 0x3, kFormatMask = 0x3;
constexpr std::uint16_t kMoreSects = 0x8, kInitLocals = 0x10;
constexpr BYTE kSectEHTable = 0x1, kSectFatFormat = 0x40, kSectMoreSects = 0x80;

struct Clause {
    std::uint32_t flags, tryOffset, tryLength, handlerOffset, handlerLength, classTokenOrFilter;
};

struct ParsedBody {
    bool fat = false;
    std::uint16_t flags = 0;  // fat flags (without size nibble)
    std::uint16_t maxStack = 8;
    std::uint32_t codeSize = 0;
    std::uint32_t localSig = 0;
    const BYTE* code = nullptr;
    std::vector<Clause> clauses;
    bool otherSections = false;  // non-EH extra data sections (not supported -> skip method)
};

inline std::uint16_t rd16(const BYTE* p) { return std::uint16_t(p[0] | (p[1] << 8)); }
inline std::uint32_t rd32(const BYTE* p) { return std::uint32_t(p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24)); }
inline void wr16(BYTE* p, std::uint16_t v) { p[0] = BYTE(v); p[1] = BYTE(v >> 8); }
inline void wr32(BYTE* p, std::uint32_t v) { p[0] = BYTE(v); p[1] = BYTE(v >> 8); p[2] = BYTE(v >> 16); p[3] = BYTE(v >> 24); }

bool ParseBody(const BYTE* hdr, ULONG size, ParsedBody* out) {
    if (hdr == nullptr || size < 1) return false;
    if ((hdr[0] & kFormatMask) == kTinyFormat) {
        out->fat = false;
        out->codeSize = hdr[0] >> 2;
        out->maxStack = 8;
        out->code = hdr + 1;
        return out->codeSize + 1 <= size;
    }
    if ((hdr[0] & kFormatMask) != kFatFormat || size < 12) return false;
    std::uint16_t fl = rd16(hdr);
    unsigned headerDwords = fl >> 12;
    out->fat = true;
    out->flags = fl & 0x0FFF;
    out->maxStack = rd16(hdr + 2);
    out->codeSize = rd32(hdr + 4);
    out->localSig = rd32(hdr + 8);
    out->code = hdr + headerDwords * 4;
    if (!(out->flags & kMoreSects)) return true;
    // extra data sections start at the next 4-byte boundary after the code
    std::uintptr_t p = reinterpret_cast<std::uintptr_t>(out->code + out->codeSize);
    p = (p + 3) & ~std::uintptr_t(3);
    const BYTE* sect = reinterpret_cast<const BYTE*>(p);
    for (;;) {
        BYTE kind = sect[0];
        bool fatSect = (kind & kSectFatFormat) != 0;
        std::uint32_t dataSize = fatSect ? (sect[1] | (sect[2] << 8) | (std::uint32_t(sect[3]) << 16)) : sect[1];
        if (kind & kSectEHTable) {
            if (fatSect) {
                std::uint32_t n = (dataSize - 4) / 24;
                for (std::uint32_t i = 0; i < n; ++i) {
                    const BYTE* c = sect + 4 + i * 24;
                    out->clauses.push_back({rd32(c), rd32(c + 4), rd32(c + 8), rd32(c + 12), rd32(c + 16), rd32(c + 20)});
                }
            } else {
                std::uint32_t n = (dataSize - 4) / 12;
                for (std::uint32_t i = 0; i < n; ++i) {
                    const BYTE* c = sect + 4 + i * 12;
                    out->clauses.push_back({rd16(c), rd16(c + 2), c[4], rd16(c + 5), c[7], rd32(c + 8)});
                }
            }
        } else {
            out->otherSections = true;
        }
        if (!(kind & kSectMoreSects)) break;
        std::uintptr_t q = reinterpret_cast<std::uintptr_t>(sect + dataSize);
        sect = reinterpret_cast<const BYTE*>((q + 3) & ~std::uintptr_t(3));
    }
    return true;
}

// Prologue: ldc.i4 <probe id> ; pop
constexpr std::uint32_t kPrologueSize = 6;
inline void WritePrologue(BYTE* p, std::uint32_t probeId) {
    p[0] = 0x20;  // ldc.i4
    wr32(p + 1, probeId);
    p[5] = 0x26;  // pop
}
// Size of the new fat body.
std::uint32_t NewBodySize(const ParsedBody& b) {
    std::uint32_t size = 12 + kPrologueSize + b.codeSize;
    if (!b.clauses.empty()) {
        size = (size + 3) & ~3u;
        size += 4 + 24 * std::uint32_t(b.clauses.size());
    }
    return size;
}

void BuildBody(const ParsedBody& b, std::uint32_t probeId, BYTE* out) {
    std::uint16_t flags = kFatFormat;
    if (b.fat) flags |= (b.flags & kInitLocals);
    if (!b.clauses.empty()) flags |= kMoreSects;
    wr16(out, std::uint16_t(flags | (3u << 12)));
    wr16(out + 2, b.maxStack < 1 ? 1 : b.maxStack);
    wr32(out + 4, kPrologueSize + b.codeSize);
    wr32(out + 8, b.fat ? b.localSig : 0);
    WritePrologue(out + 12, probeId);
    std::memcpy(out + 12 + kPrologueSize, b.code, b.codeSize);
    if (b.clauses.empty()) return;
    std::uint32_t off = 12 + kPrologueSize + b.codeSize;
    while (off & 3) out[off++] = 0;
    BYTE* sect = out + off;
    std::uint32_t dataSize = 4 + 24 * std::uint32_t(b.clauses.size());
    sect[0] = kSectEHTable | kSectFatFormat;
    sect[1] = BYTE(dataSize);
    sect[2] = BYTE(dataSize >> 8);
    sect[3] = BYTE(dataSize >> 16);
    for (size_t i = 0; i < b.clauses.size(); ++i) {
        const Clause& c = b.clauses[i];
        BYTE* d = sect + 4 + i * 24;
        wr32(d, c.flags);
        wr32(d + 4, c.tryOffset + kPrologueSize);
        wr32(d + 8, c.tryLength);
        wr32(d + 12, c.handlerOffset + kPrologueSize);
        wr32(d + 16, c.handlerLength);
        wr32(d + 20, (c.flags & 0x1) ? c.classTokenOrFilter + kPrologueSize : c.classTokenOrFilter);  // filter offset
    }
}

// ---------------------------------------------------------------------- profiler
class OnceRewriter : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING);
        if (failed(hr)) {
            std::fprintf(stderr, "[%s] SetEventMask failed 0x%08x\n", kName, (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        all_ = std::getenv("DOCFIX_IL_ALL") != nullptr;
        verbose_ = std::getenv("DOCFIX_VERBOSE") != nullptr;
        std::fprintf(stderr, "[%s] initialized: instrumenting %s\n", kName, all_ ? "all modules" : "non-framework modules");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (shutdown_.load() || failed(hrStatus)) return S_OK;
        ULONG len = 0;
        LPCBYTE base = nullptr;
        AssemblyID asmId = 0;
        if (failed(info_->GetModuleInfo(moduleId, &base, 0, &len, nullptr, &asmId)) || len == 0) return S_OK;
        std::vector<WCHAR> name(len);
        if (failed(info_->GetModuleInfo(moduleId, &base, len, &len, name.data(), &asmId))) return S_OK;
        std::string path = to_utf8(name.data(), name.size());
        bool framework = path.find("/shared/Microsoft.NETCore.App/") != std::string::npos;
        if (all_ || !framework) {
            std::lock_guard<std::mutex> g(mu_);
            modules_.insert(moduleId);
            if (verbose_) std::fprintf(stderr, "[%s] instrumenting module %s\n", kName, path.c_str());
        }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID functionId, BOOL) override {
        if (shutdown_.load()) return S_OK;
        ++jitStarted_;
        ClassID cls = 0;
        ModuleID module = 0;
        mdToken token = 0;
        if (failed(info_->GetFunctionInfo(functionId, &cls, &module, &token))) return S_OK;
        {
            std::lock_guard<std::mutex> g(mu_);
            if (modules_.count(module) == 0) return S_OK;
            if (++seen_[functionId] > 1) ++repeatCallbacks_;
            // one rewrite per method (module, methodDef): later JITs reuse the installed body
            if (!done_.insert(MethodKey{module, token}).second) {
                ++alreadyDone_;
                return S_OK;
            }
        }
        Rewrite(functionId, module, token);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::fprintf(stderr,
                     "[%s] summary: jit_started=%lu instrumented_functions=%zu repeat_jit_callbacks=%lu rewrites=%lu "
                     "rewrites_of_already_instrumented_il=%lu max_prologues_in_one_body=%lu set_failures=%lu "
                     "last_set_hr=0x%08x get_failures=%lu alloc_failures=%lu skipped_unparsable=%lu eh_clauses_shifted=%lu "
                     "tiny=%lu fat=%lu methods_rewritten_once=%zu later_jits_left_alone=%lu\n",
                     kName, jitStarted_.load(), seen_.size(), repeatCallbacks_, rewrites_.load(), stacked_.load(),
                     maxStack_.load(), setFailures_.load(), (unsigned)lastSetHr_.load(), getFailures_.load(),
                     allocFailures_.load(), skipped_.load(), clausesShifted_.load(), tiny_.load(), fat_.load(),
                     done_.size(), alreadyDone_);
        if (info_ != nullptr) info_->Release();
        return S_OK;
    }

private:
    static constexpr const char* kName = "il_rewriter_once";

    void Rewrite(FunctionID functionId, ModuleID module, mdToken token) {
        LPCBYTE hdr = nullptr;
        ULONG size = 0;
        HRESULT hr = info_->GetILFunctionBody(module, token, &hdr, &size);
        if (failed(hr) || hdr == nullptr) {
            ++getFailures_;
            return;
        }
        ParsedBody body;
        if (!ParseBody(hdr, size, &body) || body.otherSections) {
            ++skipped_;
            return;
        }
        // how many of our prologues are already at the top of this body?
        unsigned long depth = 0;
        for (std::uint32_t off = 0; off + kPrologueSize <= body.codeSize; off += kPrologueSize) {
            const BYTE* c = body.code + off;
            if (c[0] == 0x20 && c[5] == 0x26 && (rd32(c + 1) & 0xFFFF0000u) == 0x7E570000u)
                ++depth;
            else
                break;
        }
        if (depth > 0) ++stacked_;
        IMethodMalloc* alloc = nullptr;
        if (failed(info_->GetILFunctionBodyAllocator(module, &alloc)) || alloc == nullptr) {
            ++allocFailures_;
            return;
        }
        std::uint32_t newSize = NewBodySize(body);
        auto* buf = static_cast<BYTE*>(alloc->Alloc(newSize));
        alloc->Release();
        if (buf == nullptr) {
            ++allocFailures_;
            return;
        }
        std::uint32_t probeId = 0x7E570000u | (std::uint32_t(++probeCounter_) & 0xFFFFu);
        BuildBody(body, probeId, buf);
        hr = info_->SetILFunctionBody(module, token, buf);
        if (failed(hr)) {
            ++setFailures_;
            lastSetHr_.store(hr);
            return;
        }
        ++rewrites_;
        (body.fat ? fat_ : tiny_)++;
        clausesShifted_ += body.clauses.size();
        unsigned long now = depth + 1, prev = maxStack_.load();
        while (now > prev && !maxStack_.compare_exchange_weak(prev, now)) {
        }
        if (verbose_)
            std::fprintf(stderr, "[%s] rewrote func=0x%lx token=0x%08x code %u -> %u bytes (prologues now %lu)\n", kName,
                         (unsigned long)functionId, token, body.codeSize, body.codeSize + kPrologueSize, now);
    }

    ICorProfilerInfo3* info_ = nullptr;
    bool all_ = false, verbose_ = false;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::unordered_set<ModuleID> modules_;
    std::unordered_map<FunctionID, unsigned long> seen_;
    struct MethodKey {
        ModuleID module;
        mdMethodDef token;
        bool operator==(const MethodKey& o) const { return module == o.module && token == o.token; }
    };
    struct MethodKeyHash {
        size_t operator()(const MethodKey& k) const { return std::hash<ModuleID>()(k.module) * 31 + k.token; }
    };
    std::unordered_set<MethodKey, MethodKeyHash> done_;
    unsigned long alreadyDone_ = 0;
    unsigned long repeatCallbacks_ = 0;
    std::atomic<unsigned long> jitStarted_{0}, rewrites_{0}, stacked_{0}, maxStack_{0}, setFailures_{0}, getFailures_{0},
        allocFailures_{0}, skipped_{0}, clausesShifted_{0}, tiny_{0}, fat_{0}, probeCounter_{0};
    std::atomic<HRESULT> lastSetHr_{S_OK};
};

}  // namespace ilrw

DOCFIX_DEFINE_PROFILER(ilrw::OnceRewriter)
