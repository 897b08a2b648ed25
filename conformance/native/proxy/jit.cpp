// The proxy's compilation tally (proxy.h): every JITCompilationStarted the runtime makes, whether or not the
// profiler asked for it (mask.cpp adds COR_PRF_MONITOR_JIT_COMPILATION to its mask and hides the callbacks it
// did not ask for), counted per FunctionID. The runtime makes JITCompilationStarted for every native code
// version it compiles of a method without a ReJIT id (prestub.cpp, JitCompileCodeLockedEventWrapper): the
// first compilation, a tier-up (tier 1) and an on-stack-replacement version (jithelpers.cpp,
// JitPatchpointWorker: PrepareCode on an OptimizationTier1OSR version, on the thread running the method's
// tier-0 code, from its patchpoint). So a start for a FunctionID already started is a recompilation; one made
// while the method itself is on the compiling thread's stack (its tier-0 frame is the caller of the runtime's
// patchpoint helper) is an OSR transition. Tier-1 versions are compiled by the runtime's background worker,
// never with the method on the stack. The stack is read with backtrace(): libcoreclr's frames carry unwind
// information up to the first managed return address, which GetFunctionFromIP names.
#include <execinfo.h>

#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "generated.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

std::mutex g_mu;
// FunctionID -> its compilations so far and the method it names: a FunctionID is a MethodDesc's address, which
// a method of a collectible assembly loaded after another was unloaded can have again (a first compilation,
// not a recompilation)
struct Starts {
    std::uint32_t count = 0;
    std::uint32_t succeeded = 0;  // JITCompilationFinished with a success hrStatus (jit_finished)
    std::uint64_t module = 0;
    std::uint32_t token = 0;
};
std::unordered_map<std::uint64_t, Starts>* g_starts = new std::unordered_map<std::uint64_t, Starts>();
// (module, methodDef) -> the first FunctionID naming it whose compilation succeeded: its IL has been compiled
// (every instantiation of a generic method shares the methodDef's IL)
struct MethodKey {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint32_t>& k) const {
        return std::hash<std::uint64_t>()(k.first * 31 + k.second);
    }
};
auto* g_compiled_methods = new std::unordered_map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t, MethodKey>();

// The (module, methodDef) a FunctionID names now (0, 0 when the runtime cannot say).
std::pair<std::uint64_t, std::uint32_t> method_of(std::uint64_t function) {
    auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
    ClassID cls = 0;
    ModuleID module = 0;
    mdToken token = 0;
    if (!info || info->GetFunctionInfo(function, &cls, &module, &token) != S_OK) return {0, 0};
    return {module, token};
}
std::atomic<std::int64_t> g_compilations{0}, g_recompilations{0}, g_osr{0}, g_functions{0};

// Whether `function` is on this thread's stack: a return address it holds names it.
bool on_my_stack(std::uint64_t function) {
    auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
    if (!info) return false;
    void* ips[64];
    const int n = ::backtrace(ips, 64);
    for (int k = 1; k < n; ++k) {
        FunctionID f = 0;
        // a return address is one past its call: look up the call's last byte
        const auto* ip = static_cast<const unsigned char*>(ips[k]) - 1;
        if (info->GetFunctionFromIP(ip, &f) == S_OK && f == function) return true;
    }
    return false;
}

}  // namespace

std::uint32_t jit_compiled(std::uint64_t function) {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = g_starts->find(function);
    return it == g_starts->end() ? 0 : it->second.succeeded;
}

void jit_finished(std::uint64_t function, HRESULT status) {
    if (status < 0) return;  // a failure HRESULT: halted (a class constructor ran first) or failed: nothing was compiled
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = g_starts->find(function);
    if (it == g_starts->end()) return;
    ++it->second.succeeded;
    if (it->second.module) g_compiled_methods->emplace(std::make_pair(it->second.module, it->second.token), function);
}

std::uint64_t jit_method_compiled(std::uint64_t module, std::uint32_t token) {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = g_compiled_methods->find({module, token});
    if (it == g_compiled_methods->end()) return 0;
    const auto starts = g_starts->find(it->second);  // the FunctionID may name another method by now
    if (starts == g_starts->end() || starts->second.module != module || starts->second.token != token) return 0;
    return it->second;
}

std::uint32_t jit_started(std::uint64_t function) {
    g_compilations.fetch_add(1, std::memory_order_relaxed);
    const auto method = method_of(function);
    std::uint32_t before;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        Starts& starts = (*g_starts)[function];
        if (starts.count && (starts.module != method.first || starts.token != method.second))
            starts.count = starts.succeeded = 0;  // the FunctionID names another method now
        starts.module = method.first;
        starts.token = method.second;
        before = starts.count++;
    }
    if (before == 0) {
        g_functions.fetch_add(1, std::memory_order_relaxed);
        return 0;
    }
    g_recompilations.fetch_add(1, std::memory_order_relaxed);
    if (on_my_stack(function)) {
        g_osr.fetch_add(1, std::memory_order_relaxed);
        if (recording_enabled()) {
            Json rec = Json::object();
            rec.set("name", "proxy.osr").set("payload", Json());
            rec.set("functionId", Json(function)).set("compilation", Json(static_cast<std::uint64_t>(before) + 1));
            trace().write("mark", rec);
        }
    }
    return before;
}

Json jit_json() {
    Json j = Json::object();
    j.set("monitored", mask().jit_monitored.load());
    j.set("compilations", Json(g_compilations.load())).set("functions", Json(g_functions.load()));
    j.set("recompilations", Json(g_recompilations.load())).set("osr", Json(g_osr.load()));
    return j;
}

}  // namespace profharness::proxy
