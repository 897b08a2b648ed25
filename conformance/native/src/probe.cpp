// The probe profiler: class factory, Initialize/Shutdown, detailed GC and exception callbacks, the
// experiment dispatcher, and the exports the scenario P/Invokes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <map>
#include <sys/uio.h>
#include <unistd.h>

#include "callback_base.h"
#include "events.h"
#include "experiments.h"
#include "state.h"

#define PROFHARNESS_EXPORT extern "C" __attribute__((visibility("default")))

namespace profharness {

namespace {

constexpr GUID kProbeClsid = {0x8C3B5D2E, 0x6F4A, 0x4B1C, {0x9E, 0x7D, 0x2A, 0x5F, 0x3C, 0x1B, 0x0D, 0x9E}};
constexpr std::size_t kMaxRanges = 256;  // default: ranges logged per MovedReferences* call
std::size_t g_max_ranges = kMaxRanges;   // plan "max_ranges" (0 = all)
// plan "replies": {callback name: HRESULT} the probe returns instead of S_OK
bool g_reply_set[kCallbackCountMax] = {};
HRESULT g_reply[kCallbackCountMax] = {};
constexpr int kCbCount = static_cast<int>(Cb::Count_);
static_assert(kCbCount <= kCallbackCountMax, "raise kCallbackCountMax");

// High-volume callbacks that "record": ["*"] leaves out (count them instead).
const char* const kHighVolume[] = {
    "ObjectReferences", "ObjectAllocated", "RootReferences", "RootReferences2", "ObjectsAllocatedByClass",
    "HandleCreated", "HandleDestroyed", "ConditionalWeakTableElementReferences", "FinalizeableObjectQueued",
    "EventPipeEventDelivered", "ManagedToUnmanagedTransition", "UnmanagedToManagedTransition",
    "ClassLoadStarted", "ClassLoadFinished", "JITCompilationStarted", "JITCompilationFinished",
    "JITCachedFunctionSearchStarted", "JITCachedFunctionSearchFinished", "JITInlining",
};

thread_local int t_experiment_depth = 0;

int callback_index(const std::string& name) {
    for (int i = 0; i < kCbCount; ++i)
        if (name == kCallbackNames[i]) return i;
    return -1;
}

bool is_high_volume(const char* name) {
    for (const char* h : kHighVolume)
        if (std::strcmp(h, name) == 0) return true;
    return false;
}

template <typename T>
Json range_array(const T* values, std::size_t n) {
    Json a = Json::array();
    for (std::size_t i = 0; i < n && values; ++i) a.push(Json(static_cast<std::uint64_t>(values[i])));
    return a;
}

std::string wide_name(const WCHAR* buf, ULONG n) {
    if (n == 0) return std::string();
    // pcch counts the terminating NUL when the API writes one.
    return utf16_to_utf8(buf, static_cast<long>(buf[n - 1] == 0 ? n - 1 : n));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// State

ProbeState& state() {
    static ProbeState* s = new ProbeState();  // never destroyed
    return *s;
}

Json ProbeState::current_managed_thread() const {
    if (!info || !initialized.load(std::memory_order_acquire)) return Json();
    ThreadID tid = 0;
    HRESULT hr = info->GetCurrentThreadID(&tid);
    if (failed(hr) || tid == 0) return Json();
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

std::string guid_string(const GUID& g) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%08X-%04X-%04X-%02X%02X-%02X%02X%02X%02X%02X%02X", g.Data1, g.Data2, g.Data3,
                  g.Data4[0], g.Data4[1], g.Data4[2], g.Data4[3], g.Data4[4], g.Data4[5], g.Data4[6], g.Data4[7]);
    return buf;
}

// ---------------------------------------------------------------------------------------------------
// Plan

namespace {

std::vector<std::string> string_list(const Json* j, const char* where) {
    std::vector<std::string> out;
    if (!j) return out;
    if (!j->is_array()) {
        state().probe_error(std::string("plan.") + where + " must be a list of callback names", "plan");
        return out;
    }
    for (const auto& item : j->items()) {
        if (item.is_string()) out.push_back(item.as_string());
        else state().probe_error(std::string("plan.") + where + " holds a non-string", "plan");
    }
    return out;
}

}  // namespace

void load_plan(const char* text) {
    ProbeState& s = state();
    Plan& plan = s.plan;
    if (text && *text) {
        std::string err;
        Json parsed;
        if (!Json::parse(text, parsed, err)) {
            s.probe_error("PROFHARNESS_PLAN is not JSON: " + err, "plan");
        } else if (!parsed.is_object()) {
            s.probe_error("PROFHARNESS_PLAN is not a JSON object", "plan");
        } else {
            plan.raw = parsed;
        }
    }
    const Json& raw = plan.raw;
    if (const Json* m = raw.get("event_mask")) {
        if (m->is_integer()) plan.event_mask = static_cast<std::uint32_t>(m->as_uint());
        else s.probe_error("plan.event_mask must be an integer", "plan");
    }
    if (const Json* m = raw.get("event_mask_hi")) {
        if (m->is_integer()) plan.event_mask_hi = static_cast<std::uint32_t>(m->as_uint());
        else s.probe_error("plan.event_mask_hi must be an integer", "plan");
    }
    if (const Json* m = raw.get("max_ranges")) {
        if (m->is_integer() && m->as_int() >= 0) {
            std::int64_t v = m->as_int();
            g_max_ranges = v == 0 ? static_cast<std::size_t>(-1) : static_cast<std::size_t>(v);
        } else {
            s.probe_error("plan.max_ranges must be an integer >= 0", "plan");
        }
    }
    if (const Json* r = raw.get("replies")) {
        if (!r->is_object()) s.probe_error("plan.replies must be an object {callback: HRESULT}", "plan");
        else
            for (const auto& kv : r->members()) {
                int idx = callback_index(kv.first);
                if (idx < 0) s.probe_error("plan.replies names unknown callback " + kv.first, "plan");
                else if (!kv.second.is_integer()) s.probe_error("plan.replies." + kv.first + " must be an integer", "plan");
                else {
                    g_reply_set[idx] = true;
                    g_reply[idx] = static_cast<HRESULT>(static_cast<std::uint32_t>(kv.second.as_uint()));
                }
            }
    }
    plan.record = string_list(raw.get("record"), "record");
    plan.count = string_list(raw.get("count"), "count");

    for (const auto& name : plan.record) {
        if (name == "*") {
            for (int i = 0; i < kCbCount; ++i)
                if (!is_high_volume(kCallbackNames[i])) s.record_flags[i] = true;
            continue;
        }
        int idx = callback_index(name);
        if (idx < 0) s.probe_error("plan.record names unknown callback " + name, "plan");
        else s.record_flags[idx] = true;
    }
    for (const auto& name : plan.count) {
        int idx = callback_index(name);
        if (idx < 0) s.probe_error("plan.count names unknown callback " + name, "plan");
        else s.record_flags[idx] = false;  // counted only
    }

    if (const Json* ex = raw.get("experiments")) {
        if (!ex->is_array()) {
            s.probe_error("plan.experiments must be a list", "plan");
        } else {
            int n = 0;
            for (const auto& e : ex->items()) {
                std::string where = "plan.experiments[" + std::to_string(n++) + "]";
                if (!e.is_object()) { s.probe_error("experiment is not an object", where); continue; }
                auto pe = std::make_unique<PlannedExperiment>();
                const Json* id = e.get("id");
                const Json* at = e.get("at");
                const Json* run = e.get("run");
                const Json* args = e.get("args");
                const Json* times = e.get("times");
                pe->id = id && id->is_string() ? id->as_string() : where;
                if (!at || !at->is_string() || !run || !run->is_string()) {
                    s.probe_error("experiment needs string `at` and `run`", where);
                    continue;
                }
                pe->at = at->as_string();
                pe->run = run->as_string();
                pe->args = args && args->is_object() ? *args : Json::object();
                if (times) {
                    if (times->is_integer() && times->as_int() >= 0) pe->times = times->as_int();
                    else s.probe_error("experiment `times` must be an integer >= 0", where);
                }
                if (!find_experiment(pe->run)) {
                    s.probe_error("unknown experiment " + pe->run, where);
                    continue;
                }
                if (pe->at.rfind("mark:", 0) != 0) {
                    int idx = callback_index(pe->at);
                    if (idx < 0) { s.probe_error("experiment at unknown callback " + pe->at, where); continue; }
                    s.experiment_flags[idx] = true;
                }
                plan.experiments.push_back(std::move(pe));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Dispatcher

void run_experiments_at(const std::string& point) {
    ProbeState& s = state();
    if (t_experiment_depth > 0) return;  // no experiments from inside an experiment
    for (auto& pe : s.plan.experiments) {
        if (pe->at != point) continue;
        if (pe->times > 0) {
            std::int64_t k = pe->fired.fetch_add(1);
            if (k >= pe->times) continue;
        } else {
            pe->fired.fetch_add(1);
        }
        const ExperimentEntry* entry = find_experiment(pe->run);
        if (!entry) {
            s.probe_error("unknown experiment " + pe->run, pe->id);
            continue;
        }
        ExperimentContext ctx{*pe, point};
        ++t_experiment_depth;
        entry->fn(ctx);
        --t_experiment_depth;
    }
}

// ---------------------------------------------------------------------------------------------------
// CallbackEvent

CallbackEvent::CallbackEvent(int id) : id_(id), recording_(false), args_(Json::object()) {
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

// ---------------------------------------------------------------------------------------------------
// The profiler object

class Probe final : public CallbackBase {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
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
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override { return --refs_; }  // static lifetime: never deleted

    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override;
    HRESULT STDMETHODCALLTYPE Shutdown() override;
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID thrownObjectId) override;
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int cGenerations, BOOL* generationCollected,
                                                       COR_PRF_GC_REASON reason) override;
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override;
    HRESULT STDMETHODCALLTYPE MovedReferences(ULONG cMovedObjectIDRanges, ObjectID* oldObjectIDRangeStart,
                                              ObjectID* newObjectIDRangeStart,
                                              ULONG* cObjectIDRangeLength) override;
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG cMovedObjectIDRanges, ObjectID* oldObjectIDRangeStart,
                                               ObjectID* newObjectIDRangeStart,
                                               SIZE_T* cObjectIDRangeLength) override;
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG cSurvivingObjectIDRanges, ObjectID* objectIDRangeStart,
                                                   SIZE_T* cObjectIDRangeLength) override;

 private:
    std::atomic<ULONG> refs_{1};
};

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
        ev.arg("pICorProfilerInfoUnk", unk);
        ev.args().set("info_level", Json(static_cast<std::int64_t>(s.info_level)));
    }
    return ev.finish();
}

HRESULT Probe::Shutdown() {
    ProbeState& s = state();
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

namespace {

// The exception's class name through GetClassFromObject / GetClassIDInfo / GetModuleMetaData.
Json class_name_of(ObjectID obj) {
    ProbeState& s = state();
    if (!s.info) return Json();
    ClassID cls = 0;
    if (failed(s.info->GetClassFromObject(obj, &cls)) || !cls) return Json();
    ModuleID mod = 0;
    mdTypeDef td = 0;
    if (failed(s.info->GetClassIDInfo(cls, &mod, &td)) || !mod || !td) return Json();
    IUnknown* unk = nullptr;
    if (s.info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || !unk) return Json();
    auto* md = static_cast<IMetaDataImport*>(unk);
    WCHAR name[512];
    ULONG n = 0;
    DWORD flags = 0;
    mdToken ext = 0;
    Json result;
    if (!failed(md->GetTypeDefProps(td, name, 512, &n, &flags, &ext))) result = Json(wide_name(name, n));
    md->Release();
    return result;
}

}  // namespace

HRESULT Probe::ExceptionThrown(ObjectID thrownObjectId) {
    CallbackEvent ev(static_cast<int>(Cb::ExceptionThrown));
    if (ev.recording()) {
        ev.arg("thrownObjectId", thrownObjectId);
        ev.args().set("className", class_name_of(thrownObjectId));
    }
    return ev.finish();
}

HRESULT Probe::GarbageCollectionStarted(int cGenerations, BOOL* generationCollected, COR_PRF_GC_REASON reason) {
    CallbackEvent ev(static_cast<int>(Cb::GarbageCollectionStarted));
    if (ev.recording()) {
        ev.arg("cGenerations", cGenerations);
        Json gens = Json::array();
        for (int i = 0; i < cGenerations && generationCollected; ++i) gens.push(Json(generationCollected[i] != 0));
        ev.args().set("generationCollected", gens);
        ev.arg("reason", reason);
    }
    return ev.finish();
}

HRESULT Probe::GarbageCollectionFinished() {
    HRESULT hr;
    {
        CallbackEvent ev(static_cast<int>(Cb::GarbageCollectionFinished));
        hr = ev.finish();
    }
    state().counts_record();
    return hr;
}

namespace {

template <typename Len>
void moved_args(CallbackEvent& ev, ULONG n, const ObjectID* olds, const ObjectID* news, const Len* lens) {
    std::size_t shown = n < g_max_ranges ? n : g_max_ranges;
    ev.arg("cMovedObjectIDRanges", n);
    ev.args().set("old", range_array(olds, shown));
    ev.args().set("new", range_array(news, shown));
    ev.args().set("len", range_array(lens, shown));
    ev.args().set("truncated", Json(shown < n));
}

}  // namespace

HRESULT Probe::MovedReferences(ULONG n, ObjectID* olds, ObjectID* news, ULONG* lens) {
    CallbackEvent ev(static_cast<int>(Cb::MovedReferences));
    if (ev.recording()) moved_args(ev, n, olds, news, lens);
    return ev.finish();
}

HRESULT Probe::MovedReferences2(ULONG n, ObjectID* olds, ObjectID* news, SIZE_T* lens) {
    CallbackEvent ev(static_cast<int>(Cb::MovedReferences2));
    if (ev.recording()) moved_args(ev, n, olds, news, lens);
    return ev.finish();
}

HRESULT Probe::SurvivingReferences2(ULONG n, ObjectID* starts, SIZE_T* lens) {
    CallbackEvent ev(static_cast<int>(Cb::SurvivingReferences2));
    if (ev.recording()) {
        std::size_t shown = n < g_max_ranges ? n : g_max_ranges;
        ev.arg("cSurvivingObjectIDRanges", n);
        ev.args().set("start", range_array(starts, shown));
        ev.args().set("len", range_array(lens, shown));
        ev.args().set("truncated", Json(shown < n));
    }
    return ev.finish();
}

// ---------------------------------------------------------------------------------------------------
// Class factory

class ClassFactory final : public IClassFactory {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        if (riid == IID_IUnknown || riid == IID_IClassFactory) {
            *ppv = static_cast<IClassFactory*>(this);
            return S_OK;
        }
        *ppv = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return 2; }
    ULONG STDMETHODCALLTYPE Release() override { return 1; }
    HRESULT STDMETHODCALLTYPE CreateInstance(IUnknown* outer, REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        if (outer) return CLASS_E_NOAGGREGATION;
        static Probe* probe = new Probe();  // never destroyed
        return probe->QueryInterface(riid, ppv);
    }
    HRESULT STDMETHODCALLTYPE LockServer(BOOL) override { return S_OK; }
};

}  // namespace profharness

using namespace profharness;

PROFHARNESS_EXPORT HRESULT DllGetClassObject(REFCLSID rclsid, REFIID riid, void** ppv) {
    if (!ppv) return E_POINTER;
    *ppv = nullptr;
    if (!(rclsid == kProbeClsid)) return CLASS_E_CLASSNOTAVAILABLE;
    static ClassFactory* factory = new ClassFactory();
    return factory->QueryInterface(riid, ppv);
}

PROFHARNESS_EXPORT std::int32_t profharness_mark(const char16_t* name, const char16_t* payload) {
    ProbeState& s = state();
    if (!s.initialized.load(std::memory_order_acquire)) return -1;
    std::string n = utf16_to_utf8(name);
    Json f = Json::object();
    f.set("name", n);
    f.set("payload", payload ? Json(utf16_to_utf8(payload)) : Json());
    s.trace.write("mark", f);
    run_experiments_at("mark:" + n);
    return 0;
}

PROFHARNESS_EXPORT std::int64_t profharness_record_count(void) { return state().trace.count(); }

namespace {

// Reads n bytes at addr of this process without faulting (false when unmapped).
bool read_own(std::uint64_t addr, void* out, std::size_t n) {
    struct iovec local{out, n};
    struct iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr)), n};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

}  // namespace

PROFHARNESS_EXPORT std::int32_t profharness_mark_ids(const char16_t* name, const std::int64_t* ids, std::int32_t count) {
    ProbeState& s = state();
    if (!s.initialized.load(std::memory_order_acquire)) return -1;
    std::string n = utf16_to_utf8(name);
    Json id_list = Json::array(), classes = Json::array(), words = Json::array(), names = Json::object();
    std::map<ClassID, bool> named;
    HRESULT first_failure = S_OK, name_failure = S_OK;
    for (std::int32_t i = 0; i < count && ids && i < (1 << 24); ++i) {
        std::uint64_t id = static_cast<std::uint64_t>(ids[i]);
        id_list.push(Json(id));
        std::uint64_t w[3] = {0, 0, 0};  // method table, first two 8-byte fields
        bool readable = id != 0 && read_own(id, w, sizeof w);
        ClassID cls = 0;
        if (readable && w[0] && s.info) {
            HRESULT hr = s.info->GetClassFromObject(static_cast<ObjectID>(id), &cls);
            if (failed(hr)) {
                cls = 0;
                if (!failed(first_failure)) first_failure = hr;
                // Outside a callback the runtime refuses GetClassFromObject (0x80131363, unsupported call sequence);
                // a non-array object's ClassID is its method table pointer (TypeHandle), the first word.
                std::uint64_t probe_word = 0;
                if (read_own(w[0], &probe_word, sizeof probe_word)) cls = static_cast<ClassID>(w[0]);
            }
        }
        classes.push(Json(static_cast<std::uint64_t>(cls)));
        Json pair = Json::array();
        if (readable) {
            pair.push(Json(static_cast<std::int64_t>(w[1]))).push(Json(static_cast<std::int64_t>(w[2])));
        }
        words.push(readable ? std::move(pair) : Json());
        if (cls && named.emplace(cls, true).second) {
            ModuleID mod = 0;
            mdTypeDef td = 0;
            Json nm;
            HRESULT ih = s.info->GetClassIDInfo(cls, &mod, &td);
            if (failed(ih) && !failed(name_failure)) name_failure = ih;
            if (!failed(ih) && mod && td) {
                IUnknown* unk = nullptr;
                HRESULT mh = s.info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk);
                if (failed(mh) && !failed(name_failure)) name_failure = mh;
                if (mh == S_OK && unk) {
                    auto* md = static_cast<IMetaDataImport*>(unk);
                    WCHAR buf[512];
                    ULONG len = 0;
                    DWORD flags = 0;
                    mdToken ext = 0;
                    if (!failed(md->GetTypeDefProps(td, buf, 512, &len, &flags, &ext))) nm = Json(wide_name(buf, len));
                    md->Release();
                }
            }
            names.set(std::to_string(static_cast<std::uint64_t>(cls)), nm);
        }
    }
    Json f = Json::object();
    f.set("name", n);
    f.set("payload", Json());
    f.set("ids", std::move(id_list));
    f.set("class_ids", std::move(classes));
    f.set("words", std::move(words));
    f.set("class_names", std::move(names));
    f.set("class_hr", Json(static_cast<std::uint32_t>(first_failure)));
    f.set("class_name_hr", Json(static_cast<std::uint32_t>(name_failure)));
    f.set("class_source", failed(first_failure) ? "method_table" : "GetClassFromObject");
    s.trace.write("mark", f);
    run_experiments_at("mark:" + n);
    return 0;
}
