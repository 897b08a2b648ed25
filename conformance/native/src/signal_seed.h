// What the probe's two signal handlers share (experiments_async.cpp: signal-handler walks;
// experiments_capture.cpp: sampling captures): installing the handler, the one request in flight and passing
// on a signal that is not theirs, and the naive seed built from the interrupted thread's ucontext. All
// async-signal-safe except installing, which runs once, outside any handler.
#pragma once

#include <signal.h>
#include <ucontext.h>

#include <atomic>
#include <mutex>

#include "profharness/types.h"

namespace profharness {

// CONTEXT_AMD64 | CONTEXT_CONTROL | CONTEXT_INTEGER (winnt.h; clr_model.context)
inline constexpr DWORD kContextAmd64 = 0x00100000;
inline constexpr DWORD kContextControl = kContextAmd64 | 0x1;
inline constexpr DWORD kContextInteger = kContextAmd64 | 0x2;

// The naive seed: `out` (at least sizeof(AMD64Context) bytes) becomes a CONTROL | INTEGER CONTEXT whose
// registers are the ucontext's as they are, every other byte of the CONTEXT zero.
void naive_seed(const ucontext_t* uc, BYTE* out);

// sigaction(sig) with SA_SIGINFO | SA_RESTART; the handler it replaces goes to `previous`. 0 or errno.
int install_signal_handler(int sig, void (*handler)(int, siginfo_t*, void*), struct sigaction* previous);

// Hands a signal that is not ours to the handler installed before us; SIG_DFL would end the process, so
// a stray signal with no handler of its own (or SIG_IGN) is ignored instead.
void chain_signal(const struct sigaction& previous, int sig, siginfo_t* info, void* uc);

// The states of the one request a handler serves at a time: the requesting thread sets kRequested (and gives
// up on it with kAbandoned), the handler moves it to kInHandler, then kDone; kIdle again once recorded.
enum SignalRequestState : int { kIdle = 0, kRequested = 1, kInHandler = 2, kDone = 3, kAbandoned = 4 };

// A handler for one signal, installed at the first install() (outside any handler).
class OnceHandler {
public:
    OnceHandler(int sig, void (*handler)(int, siginfo_t*, void*)) : sig_(sig), handler_(handler) {}
    // 0 once installed, else sigaction's errno: the same answer every time.
    int install() {
        std::call_once(once_, [this] { errno_ = install_signal_handler(sig_, handler_, &previous_); });
        return errno_;
    }

    // In the handler: true when the signal is the pending request `state` for the calling thread (gettid
    // `target_os_tid`), which moves it from kRequested to kInHandler; else the signal is handed on to the
    // handler installed before (chain_signal), errno kept, and the answer is false.
    bool claim(std::atomic<int>& state, long target_os_tid, int sig, siginfo_t* info, void* uc) const;

private:
    int sig_;
    void (*handler_)(int, siginfo_t*, void*);
    struct sigaction previous_ {};
    std::once_flag once_;
    int errno_ = 0;
};

}  // namespace profharness
