// What the probe's two signal handlers share (experiments_async.cpp: signal-handler walks;
// experiments_capture.cpp: sampling captures): installing the handler, passing on a signal that is not
// theirs, and the naive seed built from the interrupted thread's ucontext. All async-signal-safe except
// install_signal_handler, which runs once, outside any handler.
#pragma once

#include <signal.h>
#include <ucontext.h>

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

}  // namespace profharness
