// profharness_capture_spin: native code a scenario P/Invokes to park its thread outside managed code (no
// calls, no system calls). One definition, compiled into the probe and into the proxy, which sits in the
// probe's seat under its file name: the probe's capture-sampling scenario and the validator's sampling
// workload spin in the same code (issue 24: their samples' places then agree).
#include <cstdint>

extern "C" __attribute__((visibility("default"), noinline)) std::int64_t profharness_capture_spin(
    std::int64_t iterations) {
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < iterations; ++i) {
        n += i ^ (n >> 3);
        asm volatile("" : "+r"(n));  // every iteration stays: the value depends on each
    }
    return n;
}
