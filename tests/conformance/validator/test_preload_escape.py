"""The signal-safety preload driven by small C programs (no runtime): a profiler library (``prof``) installs
its handler through the preload, the program (``main``) calls it and reads the preload's table
(``profharness_preload_shared``, the layout of profharness/preload.h) and ``profharness_preload_in_handler``.
The programs are built here with gcc and run with LD_PRELOAD of the preload and PROFHARNESS_PRELOAD_PROFILER
naming ``prof`` (as launch.py sets them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.core.paths import NATIVE_DIR
from conformance.validator.build import build_preload

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("g++") is None,
                                reason="needs gcc and g++")
INCLUDE = NATIVE_DIR / "include"

#: prints in_handler and every published site of the preload's table
DUMP_SITES = r"""
static void dump(void) {
  int (*inh)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "profharness_preload_in_handler");
  printf("in_handler=%d\n", inh ? inh() : -1);
  char* sh = ((char* (*)(void))dlsym(RTLD_DEFAULT, "profharness_preload_shared"))();
  struct Site { uint64_t key, count, via; long tid; int signo, published; uint64_t written; };
  struct Site* s = (void*)(sh + 16);
  for (int k = 0; k < 1024; k++)
    if (s[k].published) printf("site fn=%d count=%lu\n", (int)(s[k].key & 0xffff), (unsigned long)s[k].count);
}
"""

# ASYNC: a "safe read" SIGSEGV handler that leaves by siglongjmp (async-signal-safe, the usual pattern)
ESCAPE_PROF = r"""
#include <signal.h>
#include <setjmp.h>
#include <string.h>
static __thread sigjmp_buf jb;
static void on_segv(int s, siginfo_t* si, void* uc) { (void)s; (void)si; (void)uc; siglongjmp(jb, 1); }
void prof_init(void) {
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv; sa.sa_flags = SA_SIGINFO; sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, 0);
}
int prof_safe_read(const long* p, long* out) {
  if (sigsetjmp(jb, 1)) return 0;
  *out = *(volatile const long*)p; return 1;
}
"""

ESCAPE_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <stdint.h>
""" + DUMP_SITES + r"""
int main(int argc, char** argv) {
  (void)argc;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  ((void (*)(void))dlsym(h, "prof_init"))();
  long v;
  int ok = ((int (*)(const long*, long*))dlsym(h, "prof_safe_read"))((const long*)8, &v);
  for (int i = 0; i < 5; i++) free(malloc(100));  /* ordinary code: no handler runs */
  printf("safe_read=%d\n", ok);
  dump();
  return 0;
}
"""


def build(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(src), *flags], check=True, capture_output=True)
    return out


def run_preloaded(tmp_path: Path, prof: str, main: str, *, env: dict[str, str] | None = None) -> str:
    lib = build(tmp_path, "libprof.so", prof, "-shared", "-fPIC")
    exe = build(tmp_path, "main", main, "-ldl")
    full = {**os.environ, "LD_PRELOAD": str(build_preload()), "PROFHARNESS_PRELOAD_PROFILER": str(lib),
            **(env or {})}  # fmt: skip
    done = subprocess.run([str(exe), str(lib)], env=full, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ASYNC_01_a_handler_left_by_siglongjmp_leaves_no_depth_behind(tmp_path: Path) -> None:
    """A SIGSEGV handler that siglongjmps out never returns through the preload's wrapper: the thread's
    ordinary code after it (malloc/free, printf) is not "inside the handler", and no site is noted."""
    out = run_preloaded(tmp_path, ESCAPE_PROF, ESCAPE_MAIN)
    assert "safe_read=0" in out  # the handler ran (the read faulted) and jumped back
    assert "in_handler=0" in out, out
    assert "site fn=" not in out, out


# a handler on a sigaltstack that allocates: still found (the depth is live on the alternate stack)
ALTSTACK_PROF = r"""
#include <signal.h>
#include <stdlib.h>
#include <string.h>
static char alt[1 << 16];
static void on_usr1(int s) { (void)s; void* volatile p = malloc(32); free(p); }
void prof_init(void) {
  stack_t ss; ss.ss_sp = alt; ss.ss_size = sizeof alt; ss.ss_flags = 0; sigaltstack(&ss, 0);
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1; sa.sa_flags = SA_ONSTACK; sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, 0);
}
"""

ALTSTACK_MAIN = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <stdint.h>
""" + DUMP_SITES + r"""
int main(int argc, char** argv) {
  (void)argc;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  ((void (*)(void))dlsym(h, "prof_init"))();
  raise(SIGUSR1);
  dump();
  return 0;
}
"""


def test_ASYNC_01_an_allocating_handler_on_a_sigaltstack_is_still_found(tmp_path: Path) -> None:
    out = run_preloaded(tmp_path, ALTSTACK_PROF, ALTSTACK_MAIN)
    assert "in_handler=0" in out, out
    assert "site fn=0 count=1" in out, out  # malloc (kFunctionNames[0]) inside the handler


# ASYNC-07: a correct timer sampler that reads its context from si_value (set by timer_create's sigevent)
TIMER_PROF = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
struct ctx { volatile long samples; };
static struct ctx g_ctx;
static void on_prof(int s, siginfo_t* si, void* uc) {
  (void)s; (void)uc;
  struct ctx* c = (struct ctx*)si->si_value.sival_ptr;  /* the timer's own context: correct for SI_TIMER */
  c->samples++;
}
void prof_init(void) {
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_prof; sa.sa_flags = SA_SIGINFO | SA_RESTART; sigemptyset(&sa.sa_mask);
  sigaction(SIGPROF, &sa, 0);
  struct sigevent ev; memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID; ev.sigev_signo = SIGPROF; ev._sigev_un._tid = syscall(SYS_gettid);
  ev.sigev_value.sival_ptr = &g_ctx;
  timer_t t; timer_create(CLOCK_MONOTONIC, &ev, &t);
  struct itimerspec its = {{0, 2000000}, {0, 2000000}}; timer_settime(t, 0, &its, 0);
}
long prof_samples(void) { return g_ctx.samples; }
"""

TIMER_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <time.h>
#include "profharness/preload.h"
int main(int argc, char** argv) {
  (void)argc;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  ((void (*)(void))dlsym(h, "prof_init"))();
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    void* volatile keep = malloc(64);
    free(keep);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (t.tv_sec - t0.tv_sec < 1);
  auto* shared = reinterpret_cast<profharness::preload::Shared* (*)()>(
      dlsym(RTLD_DEFAULT, "profharness_preload_shared"))();
  printf("samples=%ld injection=%d\n", ((long (*)(void))dlsym(h, "prof_samples"))(),
         shared->injection.state.load());
  return 0;
}
"""


def test_ASYNC_07_the_injected_signal_carries_the_signals_real_siginfo(tmp_path: Path) -> None:
    """--inject-deadlock raises the profiler's signal with the last siginfo the kernel gave that signal (a
    timer's SI_TIMER and si_value), not tgkill's empty one: a correct sampler reading its context from
    si_value.sival_ptr survives the injection (state 3: delivered under the lock, returned)."""
    src = tmp_path / "main.cpp"
    src.write_text(TIMER_MAIN)
    exe = tmp_path / "main"
    subprocess.run(["g++", "-O1", "-std=c++17", f"-I{INCLUDE}", "-o", str(exe), str(src), "-ldl"], check=True,
                   capture_output=True)  # fmt: skip
    lib = build(tmp_path, "libprof.so", TIMER_PROF, "-shared", "-fPIC", "-lrt")
    env = {**os.environ, "LD_PRELOAD": str(build_preload()), "PROFHARNESS_PRELOAD_PROFILER": str(lib),
           "PROFHARNESS_PRELOAD_INJECT": "1"}  # fmt: skip
    done = subprocess.run([str(exe), str(lib)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "injection=3" in done.stdout, done.stdout


# counts stat(2) calls (preloaded after the preload, so the preload's own stat resolves to it)
STAT_COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/stat.h>
long stat_calls = 0;
int stat(const char* path, struct stat* st) {
  __atomic_add_fetch(&stat_calls, 1, __ATOMIC_RELAXED);
  int (*real)(const char*, struct stat*) = (int (*)(const char*, struct stat*))dlsym(RTLD_NEXT, "stat");
  return real(path, st);
}
"""

DISPOSITIONS_MAIN = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
static void on_usr2(int s) { (void)s; }
int main(void) {
  long* calls = (long*)dlsym(RTLD_DEFAULT, "stat_calls");
  long before = *calls;
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2; sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 200; i++) {
    signal(SIGUSR2, on_usr2);
    sigaction(SIGUSR2, &sa, 0);
  }
  printf("stat_calls=%ld\n", *calls - before);
  return 0;
}
"""


def test_ASYNC_signal_and_sigaction_decide_each_call_site_once(tmp_path: Path) -> None:
    """Whether a sigaction/signal call comes from the profiler (dladdr + stat, neither async-signal-safe) is
    decided once per call site and remembered: 400 calls from two sites of the app make at most 2 stats."""
    counter = build(tmp_path, "libcounter.so", STAT_COUNTER, "-shared", "-fPIC", "-ldl")
    exe = build(tmp_path, "main", DISPOSITIONS_MAIN, "-ldl")
    env = {**os.environ, "LD_PRELOAD": f"{build_preload()} {counter}",
           "PROFHARNESS_PRELOAD_PROFILER": str(counter)}  # fmt: skip
    done = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("stat_calls=")]
    assert int(line.split("=")[1]) <= 2, done.stdout


# a handler interrupting the harness's own quiet work (the proxy's drain inside its free(): the preload's
# operator delete runs it quietly) is still the profiler's handler
QUIET_PROF = r"""
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
int g_inside = -1;
static void on_usr1(int s) {
  (void)s;
  g_inside = ((int (*)(void))dlsym(RTLD_DEFAULT, "profharness_preload_in_handler"))();
  void* volatile p = malloc(32); free(p);
}
void prof_init(void) {
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1; sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, 0);
}
int prof_inside(void) { return g_inside; }
"""

QUIET_MAIN = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <stdint.h>
""" + DUMP_SITES + r"""
int main(int argc, char** argv) {
  (void)argc;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  ((void (*)(void))dlsym(h, "prof_init"))();
  int (*set_quiet)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "profharness_preload_set_quiet");
  int before = set_quiet(1);  /* the harness's own work from here, as the proxy's drain */
  raise(SIGUSR1);
  int after = set_quiet(before);
  printf("inside=%d quiet_after=%d\n", ((int (*)(void))dlsym(h, "prof_inside"))(), after);
  dump();
  return 0;
}
"""


def test_ASYNC_01_a_handler_interrupting_harness_quiet_work_is_still_the_profilers(tmp_path: Path) -> None:
    """A signal landing in the harness's quiet work (the proxy's drain was interrupted inside free() on
    .NET 8 and the profiler's handler then called DoStackSnapshot): inside the handler the preload says "in
    the handler" (so the proxy mutes the call: nothing allocated under the malloc lock the interrupted free
    holds; before, the proxy built its record and the process deadlocked), the handler's malloc is noted,
    and the interrupted work is quiet again after it."""
    out = run_preloaded(tmp_path, QUIET_PROF, QUIET_MAIN)
    assert "inside=1 quiet_after=1" in out, out
    assert "in_handler=0" in out, out
    assert "site fn=0 count=1" in out, out  # malloc (kFunctionNames[0]) inside the handler
