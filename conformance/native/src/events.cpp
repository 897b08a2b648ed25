// CallbackEvent (events.h): what every ICorProfilerCallback* method does.
#include "events.h"

#include <cstdio>

#include "callback_table.h"
#include "state.h"

namespace profharness {

int callback_index(const std::string& name) {
    for (int i = 0; i < kCbCount; ++i)
        if (name == kCallbackNames[i]) return i;
    return -1;
}

CallbackEvent::CallbackEvent(int id) : id_(id), recording_(false) {
    ProbeState& s = state();
    s.counts[id].fetch_add(1, std::memory_order_relaxed);
    recording_ = s.initialized.load(std::memory_order_acquire) && s.record_flags[id];
}

HRESULT CallbackEvent::finish(HRESULT hr) {
    ProbeState& s = state();
    if (g_reply_set[id_]) hr = g_reply[id_];  // plan "replies"
    if (recording_) {
        Json f = Json::object();
        f.set("name", kCallbackNames[id_]);
        f.set("args", std::move(args_));
        f.set("hr", Json(static_cast<std::uint32_t>(hr)));
        s.trace.write("callback", f);
    }
    if (s.experiment_flags[id_] && s.initialized.load(std::memory_order_acquire))
        run_experiments_at(kCallbackNames[id_]);
    return hr;
}

}  // namespace profharness
