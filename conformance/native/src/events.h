// CallbackEvent: what every ICorProfilerCallback* method does: count itself, record a `callback`
// record when the plan asks, run the experiments planned at this callback, return the HRESULT.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "profharness/hresults.h"
#include "profharness/json.h"
#include "profharness/record_scope.h"
#include "profharness/types.h"

namespace profharness {

// The callback's arguments are a RecordScope's (the probe writes GUIDs without braces).
class CallbackEvent : public RecordScope {
 public:
    explicit CallbackEvent(int id);

    bool recording() const { return recording_; }

    using RecordScope::arg;
    void arg(const char* name, const GUID& g) { args_.set(name, Json(guid_text(g, false))); }

    // Writes the callback record (if recording), runs experiments planned here, returns hr.
    HRESULT finish(HRESULT hr = S_OK);

 private:
    int id_;
    bool recording_;
};

}  // namespace profharness
