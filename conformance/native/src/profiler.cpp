// The profiler object: QueryInterface, Initialize (trace, ICorProfilerInfo, header record, plan, event
// mask) and Shutdown (counts, end record).
#include "profiler.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "state.h"

namespace profharness {

Probe& the_probe() {
    static Probe* probe = new Probe();  // never destroyed
    return *probe;
}

HRESULT Probe::QueryInterface(REFIID riid, void** ppv) {
    if (!ppv) return E_POINTER;
    if (riid == IID_IUnknown || riid == IID_ICorProfilerCallback || riid == IID_ICorProfilerCallback2 ||
        riid == IID_ICorProfilerCallback3 || riid == IID_ICorProfilerCallback4 ||
        riid == IID_ICorProfilerCallback5 || riid == IID_ICorProfilerCallback6 ||
        riid == IID_ICorProfilerCallback7 || riid == IID_ICorProfilerCallback8 ||
        riid == IID_ICorProfilerCallback9 || riid == IID_ICorProfilerCallback10 ||
        riid == IID_ICorProfilerCallback11) {
        *ppv = static_cast<ICorProfilerCallback11*>(this);
        AddRef();
        return S_OK;
    }
    *ppv = nullptr;
    return E_NOINTERFACE;
}

HRESULT Probe::Initialize(IUnknown* unk) {
    ProbeState& s = state();
    const char* trace_path = std::getenv("PROFHARNESS_TRACE");
    if (!trace_path || !*trace_path) {
        std::fprintf(stderr, "profharness probe: PROFHARNESS_TRACE is not set; not profiling\n");
        return E_FAIL;
    }
    std::string err;
    if (!s.trace.open(trace_path, err)) {
        std::fprintf(stderr, "profharness probe: %s\n", err.c_str());
        return E_FAIL;
    }
    const GUID* iids[] = {&IID_ICorProfilerInfo10, &IID_ICorProfilerInfo9, &IID_ICorProfilerInfo8,
                          &IID_ICorProfilerInfo7,  &IID_ICorProfilerInfo6, &IID_ICorProfilerInfo5,
                          &IID_ICorProfilerInfo4,  &IID_ICorProfilerInfo3, &IID_ICorProfilerInfo2,
                          &IID_ICorProfilerInfo};
    for (int k = 0; k < 10 && unk; ++k) {
        void* p = nullptr;
        if (unk->QueryInterface(*iids[k], &p) == S_OK && p) {
            s.info = static_cast<ICorProfilerInfo*>(p);
            s.info_level = 10 - k;
            break;
        }
    }
    s.initialized.store(true, std::memory_order_release);  // from here records carry a managed tid

    Json runtime = Json();
    HRESULT rt_hr = E_NOINTERFACE;
    if (auto* info3 = s.info_as<ICorProfilerInfo3>(3)) {
        USHORT clr_id = 0, major = 0, minor = 0, build = 0, qfe = 0;
        COR_PRF_RUNTIME_TYPE type = 0;
        rt_hr = info3->GetRuntimeInformation(&clr_id, &type, &major, &minor, &build, &qfe, 0, nullptr, nullptr);
        if (!failed(rt_hr)) {
            runtime = Json::object();
            runtime.set("clr_type", Json(static_cast<std::int64_t>(type)))
                .set("major", Json(static_cast<std::int64_t>(major)))
                .set("minor", Json(static_cast<std::int64_t>(minor)))
                .set("build", Json(static_cast<std::int64_t>(build)))
                .set("qfe", Json(static_cast<std::int64_t>(qfe)));
        }
    }
    const char* plan_text = std::getenv("PROFHARNESS_PLAN");
    {
        // The header goes first; plan problems found while loading follow it as probe_error records.
        std::string perr;
        Json echoed = Json::object();
        if (plan_text && *plan_text) {
            Json parsed;
            if (Json::parse(plan_text, parsed, perr)) echoed = parsed;
        }
        Json h = Json::object();
        h.set("probe", kProbeVersion);
        h.set("pid", Json(static_cast<std::int64_t>(::getpid())));
        h.set("runtime", runtime);
        h.set("plan", echoed);
        h.set("context_size", Json(static_cast<std::uint64_t>(sizeof(AMD64Context))));
        s.trace.write("header", h);
    }
    if (!s.info) s.probe_error("the runtime offered no ICorProfilerInfo", "Initialize");
    if (failed(rt_hr)) s.probe_error("GetRuntimeInformation failed", "Initialize");
    load_plan(plan_text);

    if (s.info) {
        if (auto* info5 = s.info_as<ICorProfilerInfo5>(5)) {
            HRESULT hr = info5->SetEventMask2(s.plan.event_mask, s.plan.event_mask_hi);
            Json a = Json::object();
            a.set("dwEventsLow", Json(s.plan.event_mask)).set("dwEventsHigh", Json(s.plan.event_mask_hi));
            s.call("SetEventMask2", nullptr, a, Json::object(), hr);
        } else {
            HRESULT hr = s.info->SetEventMask(s.plan.event_mask);
            Json a = Json::object();
            a.set("dwEvents", Json(s.plan.event_mask));
            s.call("SetEventMask", nullptr, a, Json::object(), hr);
            if (s.plan.event_mask_hi) s.probe_error("event_mask_hi needs ICorProfilerInfo5", "Initialize");
        }
    }
    CallbackEvent ev(static_cast<int>(Cb::Initialize));
    if (ev.recording()) {
        InitializeArgs(ev, unk);
        ev.args().set("info_level", Json(static_cast<std::int64_t>(s.info_level)));
    }
    return ev.finish();
}

HRESULT Probe::Shutdown() {
    ProbeState& s = state();
    s.shutdown_called.store(true, std::memory_order_release);
    HRESULT hr;
    {
        CallbackEvent ev(static_cast<int>(Cb::Shutdown));
        hr = ev.finish();
    }
    s.counts_record();
    s.trace.write("end", Json::object());
    s.shut_down.store(true);
    return hr;
}

}  // namespace profharness
