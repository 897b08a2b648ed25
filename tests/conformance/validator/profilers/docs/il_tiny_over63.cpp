// il_tiny_over63.cpp -- IL instrumentation engine: prepends a probe prologue to every method of
// the application's own modules, once per method, in JITCompilationStarted, keeping each method's
// header format.
//
// What it does:
//   * Set-up (il_rewrite_common.h): ICorProfilerInfo3, mask COR_PRF_MONITOR_JIT_COMPILATION |
//     COR_PRF_MONITOR_MODULE_LOADS | COR_PRF_DISABLE_INLINING; only non-framework modules; each
//     (ModuleID, mdMethodDef) rewritten the first time its JITCompilationStarted comes.
//   * JITCompilationStarted: GetILFunctionBody -> read the header (tiny or fat) and the EH
//     clauses; build the new body in the original's format:
//         fat:  [fat header][prologue: ldc.i4 <probe id>; pop][original IL][pad][fat EH section]
//         tiny: [tiny header][prologue][original IL]   (a tiny body has no locals and no EH, and the
//               prologue's one stack slot fits the implied max stack of 8)
//     allocated with GetILFunctionBodyAllocator(module)->Alloc, installed with SetILFunctionBody.
//   believed: faulty (deliberately): a tiny header holds the code size in six bits (ECMA-335
//   II.25.4.2: "The tiny format is used when ... the method is less than 64 bytes"; the code size
//   is the header byte's upper 6 bits).  The author keeps the tiny format whatever the new size,
//   and a tiny method of 58..63 bytes of code becomes 64..69 bytes: the size byte wraps, and the
//   header announces a few bytes of code while the rest of the body is never read.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::JITCompilationStarted: "If the profiler is going to replace common
//     intermediate language (CIL) code for method A by calling the ICorProfilerInfo::SetILFunctionBody
//     method, it must do so for both JITCompilationStarted events, but it may use the same CIL block
//     for both."
//   * ICorProfilerInfo::GetILFunctionBody: "Gets a pointer to the body of a method in common
//     intermediate language (CIL) code, starting at its header."
//   * ICorProfilerInfo::GetILFunctionBodyAllocator / IMethodMalloc::Alloc: the new body is
//     allocated with the module's allocator ("ensures that memory is allocated within that range").
//   * ICorProfilerInfo::SetILFunctionBody: "replaces the relative virtual address of the function in
//     the metadata so that it points to the new function body".
//   * ECMA-335 II.25.4 (method headers, EH sections).
#include "il_rewrite_common.h"

using namespace docfix;
using namespace ilshape;

namespace {

constexpr BYTE kLdcI4 = 0x20, kPop = 0x26;
// ldc.i4 <id> (5) + pop (1)
constexpr std::uint32_t kPrologueSize = 6;
// stack slots the prologue needs
constexpr std::uint16_t kPrologueStack = 1;

class KeepFormatRewriter : public RewriterBase {
public:
    KeepFormatRewriter() : RewriterBase("il_tiny_over63") {}

    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID functionId, BOOL) override {
        ModuleID module = 0;
        mdToken token = 0;
        if (FirstTime(functionId, &module, &token)) Rewrite(module, token);
        return S_OK;
    }

private:
    void Rewrite(ModuleID module, mdToken token) {
        LPCBYTE header = nullptr;
        ULONG size = 0;
        if (failed(info_->GetILFunctionBody(module, token, &header, &size))) return;
        Body old;
        if (!Read(header, size, &old) || old.otherSections) {
            ++skipped_;
            return;
        }
        std::uint32_t codeSize = kPrologueSize + old.codeSize;
        if (!old.fat) {
            RewriteTiny(module, token, old, codeSize);
            return;
        }
        std::uint32_t total = kFatHeaderSize + codeSize;
        std::uint32_t ehAt = (total + 3) & ~3u;
        if (!old.clauses.empty()) total = ehAt + FatEHSectionSize(old);

        IMethodMalloc* malloc = nullptr;
        if (failed(info_->GetILFunctionBodyAllocator(module, &malloc)) || malloc == nullptr) return;
        auto* body = static_cast<BYTE*>(malloc->Alloc(total));
        malloc->Release();
        if (body == nullptr) return;
        std::memset(body, 0, total);

        std::uint16_t flags = kFat | (old.flags & kInitLocals) | (old.clauses.empty() ? 0 : kMoreSects);
        Put16(body, std::uint16_t(flags | (3u << 12)));
        Put16(body + 2, old.maxStack < kPrologueStack ? kPrologueStack : old.maxStack);
        Put32(body + 4, codeSize);
        Put32(body + 8, old.localSig);
        BYTE* prologue = body + kFatHeaderSize;
        prologue[0] = kLdcI4;
        Put32(prologue + 1, 0x7E570000u | (std::uint32_t(++probes_) & 0xFFFFu));
        prologue[5] = kPop;
        std::memcpy(prologue + kPrologueSize, old.code, old.codeSize);
        if (!old.clauses.empty()) {
            BYTE* sect = body + ehAt;
            std::uint32_t dataSize = FatEHSectionSize(old);
            sect[0] = kSectEH | kSectFat;
            sect[1] = BYTE(dataSize);
            sect[2] = BYTE(dataSize >> 8);
            sect[3] = BYTE(dataSize >> 16);
            for (size_t i = 0; i < old.clauses.size(); ++i) {
                const Clause& c = old.clauses[i];
                BYTE* d = sect + 4 + 24 * i;
                Put32(d, c.flags);
                Put32(d + 4, c.tryOffset + kPrologueSize);
                Put32(d + 8, c.tryLength);
                Put32(d + 12, c.handlerOffset + kPrologueSize);
                Put32(d + 16, c.handlerLength);
                Put32(d + 20, (c.flags & 0x1) ? c.classOrFilter + kPrologueSize : c.classOrFilter);
            }
        }
        HRESULT hr = info_->SetILFunctionBody(module, token, body);
        Rewritten(hr, token, old.codeSize, codeSize);
    }

    // A tiny method stays tiny: no locals, no EH, and the prologue's one slot is within the tiny
    // format's implied max stack of 8, so only the size byte changes.
    void RewriteTiny(ModuleID module, mdToken token, const Body& old, std::uint32_t codeSize) {
        IMethodMalloc* malloc = nullptr;
        if (failed(info_->GetILFunctionBodyAllocator(module, &malloc)) || malloc == nullptr) return;
        auto* body = static_cast<BYTE*>(malloc->Alloc(1 + codeSize));
        malloc->Release();
        if (body == nullptr) return;
        body[0] = BYTE((codeSize << 2) | kTiny);
        BYTE* prologue = body + 1;
        prologue[0] = kLdcI4;
        Put32(prologue + 1, 0x7E570000u | (std::uint32_t(++probes_) & 0xFFFFu));
        prologue[5] = kPop;
        std::memcpy(prologue + kPrologueSize, old.code, old.codeSize);
        HRESULT hr = info_->SetILFunctionBody(module, token, body);
        Rewritten(hr, token, old.codeSize, codeSize);
    }
};

}  // namespace

DOCFIX_DEFINE_PROFILER(KeepFormatRewriter)
