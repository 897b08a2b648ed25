// RecordScope: the arguments and out-values of one call or callback as a trace record carries them
// (docs/design.md, "The trace"): by the API's parameter names; pointers as addresses, enums as integers,
// GUIDs as text, a FunctionIDOrClientID as its FunctionID; an out-value read back through its pointer after
// the call. The probe's CallbackEvent (src/events.h), the recording proxy's InfoScope (proxy/proxy.h) and the
// fake runtime's CallScope (fakeruntime/fakeruntime.h) build on it; the last two write their `call` records
// with call_record (and enter_record for a call recorded at entry and at return). Fields beside args/out
// (`caller`: the return address into the profiler; the proxy's `heap` and `inGc`) go on both records.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "profharness/json.h"
#include "profharness/types.h"

namespace profharness {

// "{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}", or without the braces.
std::string guid_text(const GUID& g, bool braces = true);

class RecordScope {
 public:
    RecordScope() = default;
    RecordScope(const RecordScope&) = delete;
    RecordScope& operator=(const RecordScope&) = delete;

    template <typename T>
    void arg(const char* name, T value) {
        if constexpr (std::is_pointer<T>::value) {
            args_.set(name, Json::pointer(reinterpret_cast<const void*>(value)));
        } else if constexpr (std::is_enum<T>::value) {
            args_.set(name, Json(static_cast<std::int64_t>(value)));
        } else {
            args_.set(name, Json(value));
        }
    }
    void arg(const char* name, const GUID& g) { args_.set(name, Json(guid_text(g))); }
    void arg(const char* name, FunctionIDOrClientID v) { args_.set(name, Json(v.functionID)); }
    template <typename T>
    void out(const char* name, T* p) {
        if (!p) return;
        if constexpr (std::is_pointer<T>::value) {
            out_.set(name, Json::pointer(reinterpret_cast<const void*>(*p)));
        } else {
            out_.set(name, Json(*p));
        }
    }
    void out_value(const char* name, Json v) { out_.set(name, std::move(v)); }
    Json& args() { return args_; }
    // The return address into the code that called the method (__builtin_return_address(0) taken in the
    // method the profiler called): the record's `caller`.
    void caller(const void* return_address) { field("caller", Json::pointer(return_address)); }
    // A field of the record itself (beside name, args, out, hr), on the enter and the return record.
    void field(const char* name, Json v) { fields_.set(name, std::move(v)); }

 protected:
    // The enter record of the call `name` (a call recorded at entry and at return): its arguments so far.
    Json enter_record(const char* name) const;
    // The record of the call `name` after it returned (a two-phase call's return record): its arguments and
    // out-values (moved out of the scope), its HRESULT, and whether it came after the profiler's Shutdown.
    Json call_record(const char* name, bool two_phase, HRESULT hr, bool after_shutdown);

    Json args_ = Json::object();
    Json out_ = Json::object();
    Json fields_ = Json::object();
};

}  // namespace profharness
