// The proxy's side of a workload's ground truth (issue 21, proxy.h): the marks the harness names in
// PROFHARNESS_PROXY_GROUND_TRUTH (comma-separated) are marked points; the managed thread that writes one is a
// marked thread. A DoStackSnapshot of a marked thread records the FunctionIDs the runtime delivered to the
// profiler's StackSnapshotCallback (its return record's "frameIds", innermost first, at most kMaxIds), and
// each FunctionID is named once from metadata ("Namespace.Type.Method", "" when it cannot be) in a
// proxy.functions mark, written at the next marked point and before the proxy.shutdown mark, on a thread of
// the proxy's own: never during the walk (the runtime may be suspended then, and metadata may take locks a
// suspended thread holds).
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generated.h"
#include "profharness/metadata.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

constexpr int kMaxMarked = 16;

std::atomic<std::uint64_t> g_marked[kMaxMarked];
std::atomic<int> g_marked_n{0};
std::mutex g_mu;
std::set<std::uint64_t>* g_pending = new std::set<std::uint64_t>();  // FunctionIDs delivered, not yet named
std::set<std::uint64_t>* g_named = new std::set<std::uint64_t>();

const std::set<std::string>& point_names() {
    static const std::set<std::string>* names = [] {
        auto* out = new std::set<std::string>();
        const char* v = std::getenv("PROFHARNESS_PROXY_GROUND_TRUTH");
        std::stringstream in(v ? v : "");
        std::string item;
        while (std::getline(in, item, ','))
            if (!item.empty()) out->insert(item);
        return out;
    }();
    return *names;
}

std::string function_name(ICorProfilerInfo* info, std::uint64_t fid) {
    ComHolder<IMetaDataImport> md;
    mdToken token = 0;
    if (function_metadata(info, static_cast<FunctionID>(fid), md, token) != S_OK || !md.get()) return "";
    MethodProps method = method_props(md.get(), token);
    if (failed(method.hr)) return "";
    TypeDefProps owner = type_def_props(md.get(), method.owner);
    return failed(owner.hr) ? method.name : owner.name + "." + method.name;
}

}  // namespace

bool truth_thread(std::uint64_t thread) {
    const int n = g_marked_n.load(std::memory_order_acquire);
    for (int k = 0; k < n && k < kMaxMarked; ++k)
        if (g_marked[k].load(std::memory_order_relaxed) == thread) return true;
    return false;
}

bool truth_any() { return g_marked_n.load(std::memory_order_acquire) > 0; }

void truth_delivered(const std::vector<std::uint64_t>& ids) {
    std::lock_guard<std::mutex> lock(g_mu);
    for (std::uint64_t id : ids)
        if (id && !g_named->count(id)) g_pending->insert(id);
}

void truth_name_pending() {
    auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
    std::vector<std::uint64_t> ids;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        ids.assign(g_pending->begin(), g_pending->end());
        g_pending->clear();
        g_named->insert(ids.begin(), ids.end());
    }
    if (ids.empty() || !info || !recording_enabled()) return;
    // named on a thread of the proxy's own: GetTokenAndMetaDataFromFunction refuses a managed thread outside
    // a callback (CORPROF_E_UNSUPPORTED_CALL_SEQUENCE), and a mark is a P/Invoke from managed code
    Json names = Json::object();
    std::thread([&] {
        for (std::uint64_t id : ids) names.set(std::to_string(id), Json(function_name(info, id)));
    }).join();
    Json rec = Json::object();
    rec.set("name", "proxy.functions").set("payload", Json()).set("functions", names);
    trace().write("mark", rec);
}

void truth_mark(const std::string& name) {
    if (!point_names().count(name)) return;
    auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
    ThreadID self = 0;
    if (info && info->GetCurrentThreadID(&self) == S_OK && self && !truth_thread(self)) {
        int k = g_marked_n.load();
        if (k < kMaxMarked) {
            g_marked[k].store(self, std::memory_order_relaxed);
            g_marked_n.store(k + 1, std::memory_order_release);
        }
    }
    truth_name_pending();
}

}  // namespace profharness::proxy
