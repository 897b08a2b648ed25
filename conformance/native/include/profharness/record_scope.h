// RecordScope: the arguments and out-values of one call or callback as a trace record carries them
// (docs/design.md, "The trace"): by the API's parameter names; pointers as addresses, enums as integers,
// GUIDs as text, a FunctionIDOrClientID as its FunctionID; an out-value read back through its pointer after
// the call. The probe's CallbackEvent (src/events.h), the recording proxy's InfoScope (proxy/proxy.h) and the
// fake runtime's CallScope (fakeruntime/fakeruntime.h) build on it; the last two write their `call` records
// with call_record (and enter_record for a call recorded at entry and at return). Fields beside args/out
// (`caller`: the return address into the profiler; the proxy's `heap` and `inGc`) go on both records.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "profharness/json.h"
#include "profharness/types.h"

namespace profharness {

// "{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}", or without the braces.
std::string guid_text(const GUID& g, bool braces = true);
// The GUID that text (32 hex digits; braces and dashes anywhere are passed over) names; false for other text.
bool parse_guid(const char* text, GUID& g);

class RecordScope {
 public:
    RecordScope() = default;
    RecordScope(const RecordScope&) = delete;
    RecordScope& operator=(const RecordScope&) = delete;

    template <typename T>
    void arg(const char* name, T value) {
        if (muted_) return;
        if constexpr (std::is_pointer<T>::value) {
            args_.set(name, Json::pointer(reinterpret_cast<const void*>(value)));
        } else if constexpr (std::is_enum<T>::value) {
            args_.set(name, Json(static_cast<std::int64_t>(value)));
        } else {
            args_.set(name, Json(value));
        }
    }
    void arg(const char* name, const GUID& g) {
        if (!muted_) args_.set(name, Json(guid_text(g)));
    }
    void arg(const char* name, FunctionIDOrClientID v) {
        if (!muted_) args_.set(name, Json(v.functionID));
    }
    template <typename T>
    void out(const char* name, T* p) {
        if (!p || muted_) return;
        if constexpr (std::is_pointer<T>::value) {
            out_.set(name, Json::pointer(reinterpret_cast<const void*>(*p)));
        } else {
            out_.set(name, Json(*p));
        }
    }
    void out_value(const char* name, Json v) {
        if (!muted_) out_.set(name, std::move(v));
    }
    Json& args() { return args_; }
    // DoStackSnapshot's arguments; with a seed context, args.seed: its rip, rsp and rbp, and the FunctionID
    // and HRESULT function_from_ip(rip, &functionId) gives for that rip.
    template <typename FunctionFromIp>
    void snapshot_args(ThreadID thread, StackSnapshotCallback* callback, ULONG32 infoFlags, void* clientData,
                       BYTE* context, ULONG32 contextSize, FunctionFromIp function_from_ip) {
        if (muted_) return;
        arg("thread", thread);
        arg("callback", callback);
        arg("infoFlags", infoFlags);
        arg("clientData", clientData);
        arg("context", context);
        arg("contextSize", contextSize);
        if (!context || contextSize < kContextRipOffset + 8) return;
        std::uint64_t rip, rsp, rbp;
        std::memcpy(&rip, context + kContextRipOffset, 8);
        std::memcpy(&rsp, context + kContextRspOffset, 8);
        std::memcpy(&rbp, context + kContextRbpOffset, 8);
        FunctionID seed_fn = 0;
        HRESULT seed_hr = function_from_ip(rip, &seed_fn);
        args_.set("seed", Json::object().set("rip", Json(rip)).set("rsp", Json(rsp)).set("rbp", Json(rbp))
                              .set("functionId", Json(static_cast<std::uint64_t>(seed_fn)))
                              .set("hr", Json(static_cast<std::uint32_t>(seed_hr))));
    }
    // The return address into the code that called the method (__builtin_return_address(0) taken in the
    // method the profiler called): the record's `caller`.
    void caller(const void* return_address) {
        if (!muted_) field("caller", Json::pointer(return_address));
    }
    // A field of the record itself (beside name, args, out, hr), on the enter and the return record.
    void field(const char* name, Json v) {
        if (!muted_) fields_.set(name, std::move(v));
    }
    // Muted (a call made inside the profiler's signal handler): nothing is built (no allocation, no lock).
    bool muted() const { return muted_; }

 protected:
    // The enter record of the call `name` (a call recorded at entry and at return): its arguments so far.
    Json enter_record(const char* name) const;
    // The record of the call `name` after it returned (a two-phase call's return record): its arguments and
    // out-values (moved out of the scope), its HRESULT, and whether it came after the profiler's Shutdown.
    Json call_record(const char* name, bool two_phase, HRESULT hr, bool after_shutdown);

    Json args_ = Json::object();
    Json out_ = Json::object();
    Json fields_ = Json::object();
    bool muted_ = false;
};

}  // namespace profharness
