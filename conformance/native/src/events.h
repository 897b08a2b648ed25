// CallbackEvent: what every ICorProfilerCallback* method does: count itself, record a `callback`
// record when the plan asks, run the experiments planned at this callback, return the HRESULT.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "profharness/json.h"
#include "profharness/hresults.h"
#include "profharness/types.h"

namespace profharness {

std::string guid_string(const GUID& g);

class CallbackEvent {
 public:
    explicit CallbackEvent(int id);
    CallbackEvent(const CallbackEvent&) = delete;
    CallbackEvent& operator=(const CallbackEvent&) = delete;

    bool recording() const { return recording_; }
    Json& args() { return args_; }

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
    void arg(const char* name, const GUID& g) { args_.set(name, Json(guid_string(g))); }

    // Writes the callback record (if recording), runs experiments planned here, returns hr.
    HRESULT finish(HRESULT hr = S_OK);

 private:
    int id_;
    bool recording_;
    Json args_;
};

}  // namespace profharness
