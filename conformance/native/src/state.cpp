// The process-wide probe state (state.h) and the records every part of the probe writes through it.
#include "state.h"

#include "callback_table.h"
#include "profharness/hresults.h"

namespace profharness {

ProbeState& state() {
    static ProbeState* s = new ProbeState();  // never destroyed
    return *s;
}

Json managed_thread_of_caller() { return state().current_managed_thread(); }

Json ProbeState::current_managed_thread() const {
    thread_local ThreadID last = 0;  // what GetCurrentThreadID last answered on this thread
    if (!info || !initialized.load(std::memory_order_acquire)) return Json();
    if (shutdown_called.load(std::memory_order_acquire))
        return last ? Json(static_cast<std::uint64_t>(last)) : Json();
    ThreadID tid = 0;
    HRESULT hr = info->GetCurrentThreadID(&tid);
    if (failed(hr) || tid == 0) return Json();
    last = tid;
    return Json(static_cast<std::uint64_t>(tid));
}

void ProbeState::probe_error(const std::string& what, const std::string& where) {
    Json f = Json::object();
    f.set("what", what).set("where", where);
    trace.write("probe_error", f);
}

void ProbeState::call(const char* name, const char* experiment, Json args, Json out, HRESULT hr) {
    Json f = Json::object();
    f.set("name", name);
    f.set("experiment", experiment ? Json(experiment) : Json());
    f.set("args", std::move(args));
    f.set("out", std::move(out));
    f.set("hr", Json(static_cast<std::uint32_t>(hr)));
    trace.write("call", f);
}

void ProbeState::counts_record() {
    Json c = Json::object();
    for (int i = 0; i < kCbCount; ++i) {
        std::uint64_t n = counts[i].load(std::memory_order_relaxed);
        if (n) c.set(kCallbackNames[i], Json(n));
    }
    for (const auto& name : plan.count)
        if (!c.get(name)) c.set(name, Json(static_cast<std::uint64_t>(0)));
    Json f = Json::object();
    f.set("counts", std::move(c));
    trace.write("counts", f);
}

}  // namespace profharness
