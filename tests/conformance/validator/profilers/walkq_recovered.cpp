// walkq_recovered: the same SIGPROF sampler (walkq_sampler.h), seeding DoStackSnapshot from the first managed
// frame instead of the interrupted registers (issue 24's recovered seed; DSS-19: the seed must be in
// JIT-compiled code), written from docs/seeding.md's method as a profiler author would follow it. From the
// interrupted registers, in the handler, frame by frame until the IP is managed code:
//   0. an interrupted instant only (not a return address): the bytes at the IP are pops then ret (an epilogue's tail, which libcoreclr
//      3.1's FDEs leave out): run them forward.
//   1. the IP (a caller frame's: IP - 1) in a loaded object with an unwind table (libcoreclr, libclrjit, libc,
//      ...): one step by its .eh_frame CFI (walkq_cfi.h: the .eh_frame_hdr's binary search table, the CIE's
//      and FDE's CFA instructions run up to the IP; the caller's RSP is the CFA, its RIP and callee-saved
//      registers come from their slots). The runtime's assembly helpers (3.1's write barrier, the allocation
//      helpers, the GC's) carry CFI too, so a frameless helper no longer costs its caller.
//   2. else, the IP managed code (GetFunctionFromIP): seed with the registers as recovered (RIP, RSP, RBP and
//      the callee-saved RBX, R12-R15).
//   3. else (runtime stubs in anonymous memory, or a CFI row given by a DWARF expression): the stub rules, in
//      this order: leaf (the word at RSP is a return address: it follows a call instruction, into managed
//      code or an object with CFI; caller RIP = it, RSP + 8), scan (the first such word within 1 KiB above
//      RSP), frame pointer ([RBP + 8] such a return address: RSP = RBP + 16, RBP = [RBP]).
//   4. a signal frame (the IP is the sigreturn trampoline): the registers from the ucontext at RSP.
//   5. stop (no seed: the fixture walks unseeded) at IP 0, an RSP that does not grow or runs 8 MiB past the
//      interrupted one, or 64 frames.
// Stack words are read with process_vm_readv (a bad pointer costs a failed read, never a fault). The unwind
// tables are found outside the handler: in Initialize and then every 20 ms on the fixture's own thread, rebuilt
// when the loader's dlpi_adds/dlpi_subs moved (libclrjit is loaded after Initialize).
// One deviation from docs/seeding.md, deliberate: "is this IP managed code" is asked of the runtime
// (GetFunctionFromIP, in the handler) instead of a code map of the fixture's own, for IPs outside the loaded
// objects only; the page warns that it takes the code manager's reader lock, which the interrupted thread may
// hold as a writer (a hang risk, which the bench's bounded run would show; not observed).
// (Earlier versions without step 1 lost the caller of 3.1's frameless write barrier: 97.2% complete walks
// there, measured by `validate --walk-quality`.)
#include <cstring>

#include "walkq_cfi.h"
#include "walkq_sampler.h"

namespace {

using walkq_cfi::Regs;

std::atomic<bool> g_refresh_stop{false};

// Whether the bytes before `ret` end with a call instruction (e8 rel32; ff /2 with a register, memory or
// rip-relative operand, with or without a REX prefix: `41 ff 13` is .NET 8's `call [r11]`).
bool after_call(std::uint64_t ret) {
    std::uint64_t w = 0, w2 = 0;
    const std::uint64_t base = (ret - 8) & ~std::uint64_t{7};
    if (!walkq::read_word(base, w)) return false;
    walkq::read_word(base + 8, w2);
    unsigned char b[16];
    std::memcpy(b, &w, 8);
    std::memcpy(b + 8, &w2, 8);
    const std::size_t end = 8 + (ret & 7);  // index of ret in b
    if (end >= 5 && b[end - 5] == 0xE8) return true;
    if (end >= 2 && b[end - 2] == 0xFF && ((b[end - 1] >> 3) & 7) == 2) return true;  // call reg / [reg]
    if (end >= 3 && b[end - 3] == 0xFF && ((b[end - 2] >> 3) & 7) == 2) return true;  // call [reg + d8]
    if (end >= 6 && b[end - 6] == 0xFF && ((b[end - 5] >> 3) & 7) == 2) return true;  // call [rip + d32], [reg + d32]
    if (end >= 7 && b[end - 7] == 0xFF && ((b[end - 6] >> 3) & 7) == 2) return true;  // call [reg + sib + d32]
    if (end >= 4 && b[end - 4] == 0xFF && ((b[end - 3] >> 3) & 7) == 2) return true;  // call [reg + sib + d8]
    return false;
}

// A return address the walk can go on from: after a call, into managed code or an object with CFI.
bool continuable(std::uint64_t ret) {
    if (ret < 4096 || !after_call(ret)) return false;
    const walkq_cfi::Module* m = walkq_cfi::module_of(ret - 1);
    return m ? m->hdr != nullptr : walkq::managed(ret - 1);
}

// The stub rules (docs/seeding.md step 3): a stub keeps the callee-saved registers, so only RIP/RSP (and
// RBP for the frame-pointer rule) change.
bool stub_step(Regs& regs) {
    const std::uint64_t rsp = regs.r[walkq_cfi::kRsp], rbp = regs.r[walkq_cfi::kRbp];
    for (std::uint64_t at = rsp; at < rsp + 1024; at += 8) {  // leaf ([rsp]) first, then the scan
        std::uint64_t word = 0;
        if (!walkq::read_word(at, word)) break;
        if (continuable(word)) {
            regs.r[walkq_cfi::kRa] = word;
            regs.r[walkq_cfi::kRsp] = at + 8;
            return true;
        }
    }
    std::uint64_t ret = 0, next = 0;
    if (rbp > rsp && walkq::read_word(rbp + 8, ret) && walkq::read_word(rbp, next) && continuable(ret)) {
        regs.r[walkq_cfi::kRa] = ret;
        regs.r[walkq_cfi::kRsp] = rbp + 16;
        regs.r[walkq_cfi::kRbp] = next;
        return true;
    }
    return false;
}

bool read_stack(std::uint64_t addr, std::uint64_t& out) { return walkq::read_word(addr, out); }

// Step 0: `pop r64` (58+r, or 41 58+r) instructions then `ret` (c3) at the IP, run forward: each pop loads its
// register from [RSP] and moves RSP up a word, the ret loads the IP.
bool epilogue_step(Regs& regs) {
    static constexpr int kPop[8] = {walkq_cfi::kRax, walkq_cfi::kRcx, walkq_cfi::kRdx, walkq_cfi::kRbx, -1,
                                    walkq_cfi::kRbp, walkq_cfi::kRsi, walkq_cfi::kRdi};
    std::uint64_t words[2] = {};
    if (!walkq::read_word(regs.r[walkq_cfi::kRa], words[0]) || !walkq::read_word(regs.r[walkq_cfi::kRa] + 8, words[1]))
        return false;
    unsigned char code[16];
    std::memcpy(code, words, sizeof code);
    Regs out = regs;
    std::uint64_t sp = regs.r[walkq_cfi::kRsp];
    for (std::size_t i = 0; i < sizeof code; ++i) {
        const bool rex_b = code[i] == 0x41;
        if (rex_b && ++i >= sizeof code) return false;
        if (!rex_b && code[i] == 0xC3) {
            if (!walkq::read_word(sp, out.r[walkq_cfi::kRa])) return false;
            out.r[walkq_cfi::kRsp] = sp + 8;
            regs = out;
            return true;
        }
        if (code[i] < 0x58 || code[i] > 0x5F) return false;
        const int reg = rex_b ? walkq_cfi::kR8 + (code[i] - 0x58) : kPop[code[i] - 0x58];
        if (reg < 0 || !walkq::read_word(sp, out.r[reg])) return false;
        sp += 8;
    }
    return false;
}

// A signal frame: the IP is the kernel's sigreturn trampoline (`mov $15, %rax; syscall`, rt_sigreturn, where a
// handler returns to; its CFI is a DWARF expression). The interrupted thread's registers are in the ucontext the
// kernel put at RSP (the x86-64 rt_sigframe after the handler's `ret` popped its return address). Seen: a
// SIGPROF landing in the runtime's own activation handler (GC suspension), which had interrupted managed code.
bool signal_step(Regs& regs, const int* greg_of) {
    static const unsigned char kSigreturn[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    const std::uint64_t ip = regs.r[walkq_cfi::kRa];
    std::uint64_t w0 = 0, w1 = 0;
    const std::uint64_t base = ip & ~std::uint64_t{7};
    if (!walkq::read_word(base, w0) || !walkq::read_word(base + 8, w1)) return false;
    unsigned char b[16];
    std::memcpy(b, &w0, 8);
    std::memcpy(b + 8, &w1, 8);
    if ((ip & 7) + sizeof kSigreturn > sizeof b || std::memcmp(b + (ip & 7), kSigreturn, sizeof kSigreturn) != 0)
        return false;
    const std::uint64_t gregs = regs.r[walkq_cfi::kRsp] + offsetof(ucontext_t, uc_mcontext.gregs);
    Regs next;
    for (int k = 0; k < walkq_cfi::kRegs; ++k)
        if (!walkq::read_word(gregs + 8 * static_cast<std::uint64_t>(greg_of[k]), next.r[k])) return false;
    regs = next;
    return true;
}

struct Slot {
    std::size_t offset;
    int reg;  // walkq_cfi register number
};
const Slot kSlots[] = {{offsetof(profharness::AMD64Context, Rax), walkq_cfi::kRax},
                       {offsetof(profharness::AMD64Context, Rdx), walkq_cfi::kRdx},
                       {offsetof(profharness::AMD64Context, Rcx), walkq_cfi::kRcx},
                       {offsetof(profharness::AMD64Context, Rbx), walkq_cfi::kRbx},
                       {offsetof(profharness::AMD64Context, Rsi), walkq_cfi::kRsi},
                       {offsetof(profharness::AMD64Context, Rdi), walkq_cfi::kRdi},
                       {offsetof(profharness::AMD64Context, Rbp), walkq_cfi::kRbp},
                       {offsetof(profharness::AMD64Context, Rsp), walkq_cfi::kRsp},
                       {offsetof(profharness::AMD64Context, R8), walkq_cfi::kR8},
                       {offsetof(profharness::AMD64Context, R9), walkq_cfi::kR9},
                       {offsetof(profharness::AMD64Context, R10), walkq_cfi::kR10},
                       {offsetof(profharness::AMD64Context, R11), walkq_cfi::kR11},
                       {offsetof(profharness::AMD64Context, R12), walkq_cfi::kR12},
                       {offsetof(profharness::AMD64Context, R13), walkq_cfi::kR13},
                       {offsetof(profharness::AMD64Context, R14), walkq_cfi::kR14},
                       {offsetof(profharness::AMD64Context, R15), walkq_cfi::kR15},
                       {offsetof(profharness::AMD64Context, Rip), walkq_cfi::kRa}};

struct RecoveredSeed {
    static constexpr const char* kName = "walkq_recovered";
    static bool seed(const ucontext_t* uc, profharness::BYTE* ctx) {
        walkq::context_of(uc, ctx);
        const greg_t* g = uc->uc_mcontext.gregs;
        const int greg_of[walkq_cfi::kRegs] = {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI,
                                               REG_RBP, REG_RSP, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                               REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
        Regs regs;
        for (int k = 0; k < walkq_cfi::kRegs; ++k) regs.r[k] = static_cast<std::uint64_t>(g[greg_of[k]]);
        const std::uint64_t rsp0 = regs.r[walkq_cfi::kRsp];
        bool exact = true;  // the IP is where the thread was interrupted (not a return address)
        for (int frame = 0; frame < 64; ++frame) {
            const std::uint64_t ip = regs.r[walkq_cfi::kRa];
            if (ip < 4096) return false;
            const std::uint64_t look = exact ? ip : ip - 1;
            const std::uint64_t rsp = regs.r[walkq_cfi::kRsp];
            if (signal_step(regs, greg_of)) {
                exact = true;
                if (regs.r[walkq_cfi::kRsp] <= rsp) return false;
                continue;
            }
            const walkq_cfi::Module* m = walkq_cfi::module_of(look);
            if (!m && walkq::managed(look)) {
                for (const Slot& s : kSlots) walkq::put(ctx, s.offset, regs.r[s.reg]);
                return true;
            }
            bool stepped = exact && epilogue_step(regs);
            if (!stepped && m) {
                const walkq_cfi::Step st = walkq_cfi::step(regs, !exact, &read_stack);
                if (st == walkq_cfi::Step::kEnd) return false;
                stepped = st == walkq_cfi::Step::kOk;
            }
            if (!stepped && !stub_step(regs)) return false;
            exact = false;
            const std::uint64_t now = regs.r[walkq_cfi::kRsp];
            if (now <= rsp || now - rsp0 > (std::uint64_t{8} << 20)) return false;
        }
        return false;
    }
};

class Recovered final : public walkq::SignalWalker<RecoveredSeed> {
 public:
    profharness::HRESULT STDMETHODCALLTYPE Initialize(profharness::IUnknown* unk) override {
        walkq_cfi::refresh();  // the runtime is loaded before its profiler; the JIT later (the thread below)
        refresher_ = std::thread([] {
            sigset_t block;
            sigemptyset(&block);
            sigaddset(&block, SIGPROF);
            pthread_sigmask(SIG_BLOCK, &block, nullptr);
            while (!g_refresh_stop.load()) {
                walkq_cfi::refresh();
                ::usleep(20000);
            }
        });
        return walkq::SignalWalker<RecoveredSeed>::Initialize(unk);
    }
    profharness::HRESULT STDMETHODCALLTYPE Shutdown() override {
        const profharness::HRESULT hr = walkq::SignalWalker<RecoveredSeed>::Shutdown();
        g_refresh_stop.store(true);
        if (refresher_.joinable()) refresher_.join();
        return hr;
    }

 private:
    std::thread refresher_;
};

}  // namespace

FIXTURE_EXPORT(Recovered)
