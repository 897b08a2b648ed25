// companion: not a profiler: the library needs_companion.cpp needs preloaded (--preload).
extern "C" __attribute__((visibility("default"))) int fixture_companion_answer() { return 42; }
