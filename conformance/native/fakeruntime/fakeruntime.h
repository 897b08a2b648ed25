// The fake runtime (issue 11): a process that loads a profiler .so, hands it an ICorProfilerInfo answered
// from a world state the Python fuzzer sends (conformance/fuzz), makes the callbacks it is told to make on
// the fake threads it is told to use, and records everything in the recording proxy's trace format
// (callback records with "phase" enter/return, call records with args/out/hr), so that
// conformance.validator.recording reads it and conformance.validator.rules judges it unchanged.
//
// Protocol (stdin/stdout, one JSON object per line, or a JSON array of them: one parse for a whole example,
// carried out as if each were on a line of its own, its replies written together when the line is done;
// only "start", "end" and "sync" are answered). The
// commands between "start" and "end" are kept and carried out, in order, at "end" (or "sync"): a run of
// events on one fake thread, with the world state sent between them, is one job for that thread's worker
// (one hand-over per run, not per event); the state commands are recorded as the command loop's.
//   {"op":"start","trace":PATH}            a new profiler instance, Initialize; reply {"op":"started",...}
//   {"op":"module"|"class"|"function",...}  world state (see fakeruntime.cpp: apply_state)
//   {"op":"thread","id":T} / {"op":"thread_gone","id":T}
//   {"op":"heap","objects":[[id,class,size],...]}   the live objects (replaced whole)
//   {"op":"stack","thread":T,"frames":[[functionId,ip],...]}   leaf first
//   {"op":"event","thread":T,"name":CALLBACK,"args":{...}}   a callback on fake thread T (0: the main one)
//   {"op":"end"}                           Shutdown, release; reply {"op":"ended","errors":[...]}
//   {"op":"sync"}                          reply {"op":"synced"}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profharness/flags.h"
#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/json.h"
#include "profharness/record_scope.h"
#include "profharness/types.h"

namespace profharness {

// An ICorProfilerInfo12 struct passed by value (clr_model/api/interfaces.txt names it by elaborated type;
// the proxy declares it the same way).
struct COR_PRF_EVENTPIPE_PROVIDER_CONFIG {
    const WCHAR* providerName;
    std::uint64_t keywords;
    std::uint32_t loggingLevel;
    const WCHAR* filterData;
};

}  // namespace profharness

namespace profharness::fake {

// A JSON member as an integer parameter of type T (0 when absent).
template <typename T>
inline T arg_of(const Json& args, const char* name) {
    const Json* v = args.get(name);
    if (!v || !v->is_integer()) return T{};
    if (v->kind() == Json::Kind::Int) return static_cast<T>(v->as_int());
    return static_cast<T>(v->as_uint());
}

// The trace: JSON Lines, one write(2) per record, seq from 0 per example (docs/design.md).
void record(const char* kind, const Json& fields);
bool recording();
bool shutdown_returned();

// Callback frames open on the calling thread (lazy ones are written only when the profiler calls the
// runtime inside them, as the proxy does).
void push_callback(const char* name, Json args, bool lazy);
void pop_callback(HRESULT hr);
void flush_callbacks();

// One ICorProfilerInfo call: its arguments, out-values (RecordScope) and HRESULT, recorded as the proxy
// records them.
class CallScope : public RecordScope {
 public:
    CallScope(const char* name, bool two_phase) : name_(name), two_phase_(two_phase) {}

    void begin();
    HRESULT finish(HRESULT hr);

 private:
    const char* name_;
    bool two_phase_;
};

}  // namespace profharness::fake
