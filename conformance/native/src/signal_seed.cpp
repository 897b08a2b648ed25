// See signal_seed.h.
#include "signal_seed.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace profharness {

void naive_seed(const ucontext_t* uc, BYTE* out) {
    const greg_t* g = uc->uc_mcontext.gregs;
    std::memset(out, 0, sizeof(AMD64Context));
    const DWORD flags = kContextControl | kContextInteger;
    std::memcpy(out + offsetof(AMD64Context, ContextFlags), &flags, sizeof flags);
    const std::uint16_t cs = static_cast<std::uint16_t>(g[REG_CSGSFS] & 0xFFFF);
    std::memcpy(out + offsetof(AMD64Context, SegCs), &cs, sizeof cs);
    const DWORD eflags = static_cast<DWORD>(g[REG_EFL]);
    std::memcpy(out + offsetof(AMD64Context, EFlags), &eflags, sizeof eflags);
    const struct {
        std::size_t offset;
        int reg;
    } map[] = {{offsetof(AMD64Context, Rax), REG_RAX}, {offsetof(AMD64Context, Rcx), REG_RCX},
               {offsetof(AMD64Context, Rdx), REG_RDX}, {offsetof(AMD64Context, Rbx), REG_RBX},
               {offsetof(AMD64Context, Rsp), REG_RSP}, {offsetof(AMD64Context, Rbp), REG_RBP},
               {offsetof(AMD64Context, Rsi), REG_RSI}, {offsetof(AMD64Context, Rdi), REG_RDI},
               {offsetof(AMD64Context, R8), REG_R8},   {offsetof(AMD64Context, R9), REG_R9},
               {offsetof(AMD64Context, R10), REG_R10}, {offsetof(AMD64Context, R11), REG_R11},
               {offsetof(AMD64Context, R12), REG_R12}, {offsetof(AMD64Context, R13), REG_R13},
               {offsetof(AMD64Context, R14), REG_R14}, {offsetof(AMD64Context, R15), REG_R15},
               {offsetof(AMD64Context, Rip), REG_RIP}};
    for (const auto& m : map) {
        const std::uint64_t v = static_cast<std::uint64_t>(g[m.reg]);
        std::memcpy(out + m.offset, &v, sizeof v);
    }
}

int install_signal_handler(int sig, void (*handler)(int, siginfo_t*, void*), struct sigaction* previous) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, previous) == 0 ? 0 : errno;
}

void chain_signal(const struct sigaction& previous, int sig, siginfo_t* info, void* uc) {
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) previous.sa_sigaction(sig, info, uc);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler) {
        previous.sa_handler(sig);
    }
}

bool OnceHandler::claim(std::atomic<int>& state, long target_os_tid, int sig, siginfo_t* info, void* uc) const {
    const int saved_errno = errno;
    int expected = kRequested;
    if (static_cast<long>(::syscall(SYS_gettid)) == target_os_tid &&
        state.compare_exchange_strong(expected, kInHandler, std::memory_order_acq_rel))
        return true;
    chain_signal(previous_, sig, info, uc);
    errno = saved_errno;
    return false;
}

}  // namespace profharness
