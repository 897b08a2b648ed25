// A profiler's walks against ground truth (issue 24 part 4; walkq.cpp says how): the DoStackSnapshot wrapper's
// hooks. walkq_begin, walkq_frame and walkq_end are async-signal-safe (a walk made inside the profiler's
// signal handler comes through them); walkq_drain is the watchdog's and Shutdown's.
#pragma once

#include <cstdint>

namespace profharness::proxy {

struct WalkqSlot;

// PROFHARNESS_PROXY_WALK_QUALITY=1: preallocates the slots and opens the sidecar beside `trace_path` (the
// proxy's trace). Called once, when the proxy is created, before the profiler is loaded.
void walkq_init(const char* trace_path);
bool walkq_enabled();
// A DoStackSnapshot of `thread` (0: the calling thread) is about to be forwarded: when that thread is parked
// in the profiler's signal handler, its state is captured into a slot (returned; null: not captured).
WalkqSlot* walkq_begin(std::uint64_t thread, std::uint32_t info_flags, const unsigned char* context,
                       std::uint32_t context_size, const void* caller);
void walkq_frame(WalkqSlot* slot, std::uint64_t function, std::uint64_t ip);  // one StackSnapshotCallback
void walkq_end(WalkqSlot* slot, std::int32_t hr);                              // the walk returned hr
// Writes the finished captures (proxy.walkq.sample marks); `final`: also the map (proxy.walkq.map).
void walkq_drain(bool final);

}  // namespace profharness::proxy
