// The perturbation schedule (issue 21, `validate --perturb SEED`): which points of a run the recording proxy
// delays, and for how long, decided by the seed alone. No clock and no unseeded randomness: the delay of the
// index-th occurrence of a point kind is a function of (seed, kind, index), so a seed replays its schedule
// for the same sequence of points. perturb.cpp applies it (budgets, counts, the trace's marks);
// conformance/validator/perturb.py holds a Python reference of this function, kept equal to it by a test
// (tests/conformance/validator/test_perturb.py, through a small driver built from this header alone).
#pragma once

#include <cstdint>

namespace profharness::perturb {

// The points the proxy may delay.
enum class Point : int {
    InitializeCall,    // a call the profiler makes through the wrapper while its Initialize runs (on that thread)
    InitializeReturn,  // the profiler's Initialize returned; before the proxy returns to the runtime
    CallbackEnter,     // a callback's entry, before it is forwarded (Initialize, Shutdown and the thread
                       // callbacks have their own kinds)
    CallbackReturn,    // the profiler's callback returned; before the proxy returns to the runtime
    ThreadCreated,     // ThreadCreated's entry
    ThreadDestroyed,   // ThreadDestroyed's entry
    Shutdown,          // Shutdown's entry
    Count_
};

inline constexpr const char* kPointNames[] = {
    "initialize-call", "initialize-return", "callback-enter", "callback-return",
    "thread-created",  "thread-destroyed",  "shutdown",
};

// Per kind: the chance a point is delayed (out of 256), the delay's range (microseconds, inclusive) and the
// kind's budget per run (milliseconds: a delay that would exceed it is not applied).
struct Rule {
    std::uint32_t chance;
    std::uint32_t min_us;
    std::uint32_t max_us;
    std::uint32_t budget_ms;
};

// Every call made during Initialize is delayed: that is the window in which a thread the profiler started
// races the instance being stored.
inline constexpr Rule kRules[] = {
    {256, 20000, 50000, 300},  // initialize-call
    {128, 1000, 50000, 50},    // initialize-return
    {16, 100, 10000, 250},     // callback-enter
    {16, 100, 10000, 250},     // callback-return
    {64, 1000, 20000, 100},    // thread-created
    {64, 1000, 20000, 100},    // thread-destroyed
    {128, 1000, 50000, 50},    // shutdown
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == static_cast<int>(Point::Count_));
static_assert(sizeof(kPointNames) / sizeof(kPointNames[0]) == static_cast<int>(Point::Count_));

// splitmix64's output function (Steele, Lea, Flood 2014) on a state advanced once.
inline std::uint64_t mix(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The schedule's draw for the index-th occurrence (from 0) of `point` under `seed`.
inline std::uint64_t draw(std::uint64_t seed, int point, std::uint64_t index) {
    return mix(mix(mix(seed) ^ static_cast<std::uint64_t>(point)) ^ index);
}

// The delay (microseconds; 0: none) the schedule gives that occurrence, before budgets and the hang limit.
inline std::uint32_t delay_us(std::uint64_t seed, int point, std::uint64_t index) {
    const std::uint64_t r = draw(seed, point, index);
    const Rule& rule = kRules[point];
    if ((r & 0xFF) >= rule.chance) return 0;
    return rule.min_us + static_cast<std::uint32_t>((r >> 8) % (rule.max_us - rule.min_us + 1));
}

}  // namespace profharness::perturb
