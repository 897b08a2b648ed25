// walkq_recovered: the same SIGPROF sampler (walkq_sampler.h), seeding DoStackSnapshot from the first managed
// frame instead of the interrupted registers (issue 24's recovered seed; DSS-19: the seed must be in
// JIT-compiled code). From the interrupted (rip, rsp, rbp), in the handler, reading the thread's own stack
// with process_vm_readv (a bad pointer costs a failed read, never a fault):
//   1. rip is managed code (GetFunctionFromIP): the registers as they are.
//   2. a leaf without a frame (stubs: write barrier, precode, dispatch stubs, allocation fast paths; they
//      push at most a few words and never set up rbp): the first of [rsp] .. [rsp + 24] that is managed code
//      right after a call instruction; seed rip = it, rsp = its slot + 8, rbp unchanged (the stub did not
//      touch it). (A first version read [rsp] alone; `validate --walk-quality` showed the walks of samples
//      in a dispatch stub that had pushed one word missing their dispatching method.)
//   3. frame pointers (the runtime's native code and the JIT's frames keep rbp chains on System V x64): from
//      rbp, each frame's return address at [fp + 8], the caller's rbp at [fp], the caller's rsp fp + 16; the
//      first managed return address seeds (rip = it, rsp = fp + 16, rbp = [fp]).
//   4. a bounded scan (4 KiB above rsp) for a managed return address after a call instruction: rip = it,
//      rsp = its slot + 8, rbp = the interrupted rbp.
// Stub-looking code (step 2) is tried before the frame chain only when the IP is outside the runtime's own
// modules' text (found once, in Initialize, with dl_iterate_phdr); inside them the chain comes first. Known
// limit (`validate --walk-quality` shows it): the runtime's frameless assembly helpers called from managed
// code (.NET Core 3.1's write barrier in libcoreclr) leave rbp to their caller, so the chain skips that
// caller; trying [rsp] first inside the runtime was worse (C++ frames' stale words), the cure is the modules'
// unwind tables (.eh_frame), which this fixture does not read.
#include <link.h>

#include "walkq_sampler.h"

namespace {

struct Range {
    std::uint64_t lo = 0, hi = 0;
};
Range g_runtime[8];
int g_runtime_n = 0;

int note_module(struct dl_phdr_info* info, size_t, void*) {
    const char* name = info->dlpi_name ? info->dlpi_name : "";
    if (!std::strstr(name, "libcoreclr") && !std::strstr(name, "libclrjit")) return 0;
    for (int k = 0; k < info->dlpi_phnum && g_runtime_n < 8; ++k) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[k];
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
        g_runtime[g_runtime_n].lo = info->dlpi_addr + ph.p_vaddr;
        g_runtime[g_runtime_n].hi = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
        ++g_runtime_n;
    }
    return 0;
}

bool in_runtime(std::uint64_t ip) {
    for (int k = 0; k < g_runtime_n; ++k)
        if (ip >= g_runtime[k].lo && ip < g_runtime[k].hi) return true;
    return false;
}

// Whether the bytes before `ret` end with a call instruction (e8 rel32; ff /2 with a register, memory or
// rip-relative operand).
bool after_call(std::uint64_t ret) {
    std::uint64_t w = 0;
    if (!walkq::read_word((ret - 8) & ~std::uint64_t{7}, w)) return false;
    std::uint64_t w2 = 0;
    walkq::read_word(((ret - 8) & ~std::uint64_t{7}) + 8, w2);
    unsigned char b[16];
    std::memcpy(b, &w, 8);
    std::memcpy(b + 8, &w2, 8);
    const std::size_t end = 8 + (ret & 7);  // index of ret in b
    if (end >= 5 && b[end - 5] == 0xE8) return true;
    if (end >= 2 && b[end - 2] == 0xFF && ((b[end - 1] >> 3) & 7) == 2) return true;  // call reg / [reg]
    if (end >= 3 && b[end - 3] == 0xFF && ((b[end - 2] >> 3) & 7) == 2) return true;  // call [reg + d8]
    if (end >= 6 && b[end - 6] == 0xFF && ((b[end - 5] >> 3) & 7) == 2) return true;  // call [rip + d32]
    return false;
}

constexpr int kStubPushes = 4;  // the words a frameless stub may have pushed above its return address

bool managed_return(std::uint64_t ret) { return walkq::managed(ret) && after_call(ret); }

void seed_at(profharness::BYTE* ctx, std::uint64_t rip, std::uint64_t rsp, std::uint64_t rbp) {
    walkq::put(ctx, offsetof(profharness::AMD64Context, Rip), rip);
    walkq::put(ctx, offsetof(profharness::AMD64Context, Rsp), rsp);
    walkq::put(ctx, offsetof(profharness::AMD64Context, Rbp), rbp);
}

bool leaf(std::uint64_t rsp, std::uint64_t rbp, profharness::BYTE* ctx, int words = kStubPushes) {
    for (std::uint64_t at = rsp; at < rsp + 8 * static_cast<std::uint64_t>(words); at += 8) {
        std::uint64_t ret = 0;
        if (!walkq::read_word(at, ret)) return false;
        if (managed_return(ret)) {
            seed_at(ctx, ret, at + 8, rbp);
            return true;
        }
    }
    return false;
}

bool chain(std::uint64_t rsp, std::uint64_t rbp, profharness::BYTE* ctx) {
    std::uint64_t fp = rbp;
    for (int step = 0; step < 64; ++step) {
        if (fp < rsp || fp - rsp > (std::uint64_t{8} << 20)) return false;
        std::uint64_t ret = 0, next = 0;
        if (!walkq::read_word(fp + 8, ret) || !walkq::read_word(fp, next)) return false;
        if (walkq::managed(ret)) {
            seed_at(ctx, ret, fp + 16, next);
            return true;
        }
        if (next <= fp) return false;
        fp = next;
    }
    return false;
}

bool scan(std::uint64_t rsp, std::uint64_t rbp, profharness::BYTE* ctx) {
    for (std::uint64_t at = rsp; at < rsp + 4096; at += 8) {
        std::uint64_t word = 0;
        if (!walkq::read_word(at, word)) return false;
        if (managed_return(word)) {
            seed_at(ctx, word, at + 8, rbp);
            return true;
        }
    }
    return false;
}

struct RecoveredSeed {
    static constexpr const char* kName = "walkq_recovered";
    static bool seed(const ucontext_t* uc, profharness::BYTE* ctx) {
        walkq::context_of(uc, ctx);
        const greg_t* g = uc->uc_mcontext.gregs;
        const auto rip = static_cast<std::uint64_t>(g[REG_RIP]);
        const auto rsp = static_cast<std::uint64_t>(g[REG_RSP]);
        const auto rbp = static_cast<std::uint64_t>(g[REG_RBP]);
        if (walkq::managed(rip)) return true;
        if (in_runtime(rip)) return chain(rsp, rbp, ctx) || leaf(rsp, rbp, ctx) || scan(rsp, rbp, ctx);
        return leaf(rsp, rbp, ctx) || chain(rsp, rbp, ctx) || scan(rsp, rbp, ctx);
    }
};

class Recovered final : public walkq::SignalWalker<RecoveredSeed> {
 public:
    profharness::HRESULT STDMETHODCALLTYPE Initialize(profharness::IUnknown* unk) override {
        dl_iterate_phdr(&note_module, nullptr);  // the runtime is loaded before its profiler
        return walkq::SignalWalker<RecoveredSeed>::Initialize(unk);
    }
};

}  // namespace

FIXTURE_EXPORT(Recovered)
