// Experiments: FunctionEnter2 hooks (SetEnterLeaveFunctionHooks2, FunctionIDMapper).
// Rows of this area's table; see experiments.h.
//
// enter_leave_hooks (plan it at "Initialize", the only point where the runtime accepts hooks) installs a
// FunctionIDMapper(2) and FunctionEnter2/Leave2/Tailcall2 hooks. The mapper hooks only the functions of the
// scenario module (GetFunctionInfo + GetModuleInfo: its path ends with args.module) and returns
// funcId ^ args.xor as clientData; each hooked mapping is written as a `callback` record
// "FunctionIDMapper"/"FunctionIDMapper2". On x64 Unix the runtime calls the hooks as ordinary functions
// from its ProfileEnter/ProfileLeave helpers (proftoeeinterfaceimpl.cpp), after looking the clientData up
// in its funcId -> clientData cache; with COR_PRF_ENABLE_FRAME_INFO or _FUNCTION_ARGS set it takes the
// "slow path" and hands out a frame-info handle (and, with _FUNCTION_ARGS, the argument ranges).
//
// The enter hook never writes the trace (no lock, no allocation): it fills one slot of a fixed buffer
// (funcId, clientData, func, argumentInfo, the ranges and the first bytes of each argument, and the result
// of GetFunctionInfo2(funcId, func) called inside the hook). enter_leave_flush (plan it at a mark) writes
// the filled slots as `callback` "FunctionEnter2" records, each followed by its `call` "GetFunctionInfo2".
#include "experiments.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "profharness/hresults.h"
#include "profharness/metadata.h"

namespace profharness {

namespace {

constexpr std::size_t kMaxEnters = 4096;  // buffered hook invocations; more are counted as dropped
constexpr std::size_t kMaxRangesRead = 8;  // argument ranges copied per invocation
constexpr std::size_t kBytesPerRange = 8;  // leading bytes copied per argument range

struct EnterSlot {
    std::atomic<bool> ready{false};
    long os_tid = 0;
    FunctionID funcId = 0;
    UINT_PTR clientData = 0;
    COR_PRF_FRAME_INFO func = 0;
    UINT_PTR argumentInfo = 0;
    ULONG numRanges = 0;
    ULONG totalArgumentSize = 0;
    UINT_PTR start[kMaxRangesRead] = {};
    ULONG length[kMaxRangesRead] = {};
    unsigned char bytes[kMaxRangesRead][kBytesPerRange] = {};
    HRESULT gfi2_hr = 0;
    FunctionInfo gfi2;  // what GetFunctionInfo2 answered inside the hook
    ULONG32 cTypeArgs = 0;
};

struct HookState {
    HookedModule module;
    std::uint64_t xor_mask = 0;
    std::string planned_id;
    std::mutex modules_mu;  // mapper only (never taken in a hook)
    std::vector<std::pair<ModuleID, bool>> modules;
    std::atomic<std::uint64_t> mapper_calls{0};
    std::atomic<std::uint64_t> mapped_hooked{0};
    std::atomic<std::uint64_t> mapper_unresolved{0};
    std::size_t flushed = 0;  // under flush_mu
    std::mutex flush_mu;
};

HookState& hooks() {
    static HookState* h = new HookState();  // never destroyed: hooks may fire during process exit
    return *h;
}

// What the hooks themselves touch, at namespace level and constant-initialised (zero in .bss: no
// constructor runs, no destructor is registered), so that a hook reads no lazily created state: a function
// static's thread-safe initialisation calls __cxa_guard_acquire through the PLT, and hooks must not call
// out (FE2-12; the hook checker runs a hook alone, with the library's data as it was loaded).
struct HookBuffer {
    std::atomic<std::uint64_t> leaves{0};
    std::atomic<std::uint64_t> tailcalls{0};
    std::atomic<std::uint64_t> dropped{0};
    std::atomic<std::size_t> next{0};
    EnterSlot slots[kMaxEnters];
};
HookBuffer g_buffer;

// Whether the scenario module holds mod (cached per module; the mapper may run on any thread).
bool is_target_module(ModuleID mod) {
    HookState& h = hooks();
    {
        std::lock_guard<std::mutex> lock(h.modules_mu);
        for (const auto& m : h.modules)
            if (m.first == mod) return m.second;
    }
    bool target = h.module.holds(mod);
    std::lock_guard<std::mutex> lock(h.modules_mu);
    if (h.modules.size() < 4096) h.modules.emplace_back(mod, target);
    return target;
}

UINT_PTR map_function(const char* which, FunctionID funcId, void* mapperData, BOOL* pbHookFunction) {
    HookState& h = hooks();
    ProbeState& s = state();
    h.mapper_calls.fetch_add(1, std::memory_order_relaxed);
    UINT_PTR clientData = static_cast<UINT_PTR>(funcId ^ h.xor_mask);
    FunctionInfo fi;
    HRESULT hr = s.info ? function_info(s.info, funcId, fi) : E_FAIL;
    bool hook = !failed(hr) && fi.moduleId != 0 && is_target_module(fi.moduleId);
    if (failed(hr)) h.mapper_unresolved.fetch_add(1, std::memory_order_relaxed);
    if (pbHookFunction) *pbHookFunction = hook ? 1 : 0;
    if (hook) {
        h.mapped_hooked.fetch_add(1, std::memory_order_relaxed);
        Json f = Json::object();
        Json a = Json::object();
        a.set("funcId", Json(static_cast<std::uint64_t>(funcId)));
        a.set("mapperData", Json::pointer(mapperData));
        fi.set_in(a).set("pbHookFunction", Json(true));
        a.set("returned", Json(static_cast<std::uint64_t>(clientData)));
        f.set("name", which);
        f.set("args", a);
        f.set("hr", Json(static_cast<std::uint32_t>(0)));
        s.trace.write("callback", f);
    }
    return clientData;
}

UINT_PTR mapper1(FunctionID funcId, BOOL* pbHookFunction) {
    return map_function("FunctionIDMapper", funcId, nullptr, pbHookFunction);
}

UINT_PTR mapper2(FunctionID funcId, void* mapperData, BOOL* pbHookFunction) {
    return map_function("FunctionIDMapper2", funcId, mapperData, pbHookFunction);
}

// FunctionEnter2: one buffer slot, GetFunctionInfo2 with the hook's own frame info; no lock, no allocation.
void enter2(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func,
            COR_PRF_FUNCTION_ARGUMENT_INFO* argumentInfo) {
    HookBuffer& h = g_buffer;
    std::size_t i = h.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= kMaxEnters) {
        h.dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    EnterSlot& slot = h.slots[i];
    slot.os_tid = static_cast<long>(::syscall(SYS_gettid));
    slot.funcId = funcId;
    slot.clientData = clientData;
    slot.func = func;
    slot.argumentInfo = reinterpret_cast<UINT_PTR>(argumentInfo);
    if (argumentInfo) {
        slot.numRanges = argumentInfo->numRanges;
        slot.totalArgumentSize = argumentInfo->totalArgumentSize;
        for (ULONG r = 0; r < argumentInfo->numRanges && r < kMaxRangesRead; ++r) {
            const COR_PRF_FUNCTION_ARGUMENT_RANGE& range = argumentInfo->ranges[r];
            slot.start[r] = range.startAddress;
            slot.length[r] = range.length;
            std::size_t n = range.length < kBytesPerRange ? range.length : kBytesPerRange;
            if (range.startAddress && n)
                std::memcpy(slot.bytes[r], reinterpret_cast<const void*>(range.startAddress), n);
        }
    }
    ProbeState& s = state();
    if (auto* info2 = s.info_as<ICorProfilerInfo2>(2)) {
        ULONG32 cTypeArgs = 0;
        slot.gfi2_hr = info2->GetFunctionInfo2(funcId, func, &slot.gfi2.classId, &slot.gfi2.moduleId,
                                               &slot.gfi2.token, 0, &cTypeArgs, nullptr);
        slot.cTypeArgs = cTypeArgs;
    } else {
        slot.gfi2_hr = E_NOINTERFACE;
    }
    slot.ready.store(true, std::memory_order_release);
}

void leave2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, COR_PRF_FUNCTION_ARGUMENT_RANGE*) {
    g_buffer.leaves.fetch_add(1, std::memory_order_relaxed);
}

void tailcall2(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO) {
    g_buffer.tailcalls.fetch_add(1, std::memory_order_relaxed);
}

std::string hex_bytes(const unsigned char* p, std::size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < n; ++i) {
        out.push_back(digits[p[i] >> 4]);
        out.push_back(digits[p[i] & 15]);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------
// enter_leave_hooks

// enter_leave_hooks's hooks (install_hooks_once): the mapper args.mapper names, FunctionEnter2/Leave2/Tailcall2.
HRESULT install_enter_leave_hooks(ExperimentContext& ctx, ICorProfilerInfo2* info2) {
    ProbeState& s = state();
    HookState& h = hooks();
    const char* id = ctx.planned.id.c_str();
    h.xor_mask = static_cast<std::uint64_t>(ctx.int_arg("xor", 0x0FE2C0DE0000F2E2LL));
    h.planned_id = ctx.planned.id;
    const std::int64_t which = ctx.int_arg("mapper", 2);
    auto* info3 = s.info_as<ICorProfilerInfo3>(3);
    if (which == 2 && info3) {
        void* mapperData = &h;
        HRESULT hr = info3->SetFunctionIDMapper2(&mapper2, mapperData);
        Json a = Json::object();
        a.set("pFunc", Json::pointer(reinterpret_cast<void*>(&mapper2))).set("clientData", Json::pointer(mapperData));
        s.call("SetFunctionIDMapper2", id, a, Json::object(), hr);
    } else if (which == 1 || (which == 2 && !info3)) {
        HRESULT hr = s.info->SetFunctionIDMapper(&mapper1);
        Json a = Json::object();
        a.set("pFunc", Json::pointer(reinterpret_cast<void*>(&mapper1)));
        s.call("SetFunctionIDMapper", id, a, Json::object(), hr);
    }
    HRESULT hr = info2->SetEnterLeaveFunctionHooks2(&enter2, &leave2, &tailcall2);
    Json a = Json::object();
    a.set("pFuncEnter", Json::pointer(reinterpret_cast<void*>(&enter2)))
        .set("pFuncLeave", Json::pointer(reinterpret_cast<void*>(&leave2)))
        .set("pFuncTailcall", Json::pointer(reinterpret_cast<void*>(&tailcall2)));
    Json out = Json::object();
    out.set("module", h.module.suffix).set("xor", Json(h.xor_mask));
    s.call("SetEnterLeaveFunctionHooks2", id, a, out, hr);
    return hr;
}

void enter_leave_hooks(ExperimentContext& ctx) {
    install_hooks_once(ctx, "enter_leave_hooks", 2, hooks().module, &install_enter_leave_hooks);
}

// ---------------------------------------------------------------------------------------------------
// enter_leave_flush

void enter_leave_flush(ExperimentContext& ctx) {
    ProbeState& s = state();
    HookState& h = hooks();
    const char* id = ctx.planned.id.c_str();
    std::lock_guard<std::mutex> lock(h.flush_mu);
    std::size_t end = g_buffer.next.load(std::memory_order_acquire);
    if (end > kMaxEnters) end = kMaxEnters;
    std::size_t i = h.flushed;
    for (; i < end; ++i) {
        EnterSlot& slot = g_buffer.slots[i];
        if (!slot.ready.load(std::memory_order_acquire)) break;  // still being filled: next flush
        Json a = Json::object();
        a.set("funcId", Json(static_cast<std::uint64_t>(slot.funcId)));
        a.set("clientData", Json(static_cast<std::uint64_t>(slot.clientData)));
        a.set("func", Json(static_cast<std::uint64_t>(slot.func)));
        a.set("argumentInfo", Json(static_cast<std::uint64_t>(slot.argumentInfo)));
        a.set("hook_index", Json(static_cast<std::uint64_t>(i)));
        a.set("hook_os_tid", Json(static_cast<std::int64_t>(slot.os_tid)));
        if (slot.argumentInfo) {
            a.set("numRanges", Json(static_cast<std::uint64_t>(slot.numRanges)));
            a.set("totalArgumentSize", Json(static_cast<std::uint64_t>(slot.totalArgumentSize)));
            Json ranges = Json::array();
            for (ULONG r = 0; r < slot.numRanges && r < kMaxRangesRead; ++r) {
                Json range = Json::object();
                std::size_t n = slot.length[r] < kBytesPerRange ? slot.length[r] : kBytesPerRange;
                range.set("startAddress", Json(static_cast<std::uint64_t>(slot.start[r])))
                    .set("length", Json(static_cast<std::uint64_t>(slot.length[r])))
                    .set("bytes", hex_bytes(slot.bytes[r], slot.start[r] ? n : 0));
                ranges.push(range);
            }
            a.set("ranges", ranges);
        }
        Json f = Json::object();
        f.set("name", "FunctionEnter2").set("args", a).set("hr", Json(static_cast<std::uint32_t>(0)));
        s.trace.write("callback", f);

        Json ca = Json::object();
        ca.set("funcId", Json(static_cast<std::uint64_t>(slot.funcId)))
            .set("frameInfo", Json(static_cast<std::uint64_t>(slot.func)))
            .set("cTypeArgs", Json(static_cast<std::uint64_t>(0)))
            .set("inside_hook", Json(true))
            .set("hook_index", Json(static_cast<std::uint64_t>(i)));
        Json co = Json::object();
        slot.gfi2.set_in(co).set("pcTypeArgs", Json(static_cast<std::uint64_t>(slot.cTypeArgs)));
        s.call("GetFunctionInfo2", id, ca, co, slot.gfi2_hr);
    }
    h.flushed = i;
    Json out = Json::object();
    out.set("enters", Json(static_cast<std::uint64_t>(g_buffer.next.load())))
        .set("flushed", Json(static_cast<std::uint64_t>(h.flushed)))
        .set("dropped", Json(g_buffer.dropped.load()))
        .set("leaves", Json(g_buffer.leaves.load()))
        .set("tailcalls", Json(g_buffer.tailcalls.load()))
        .set("mapper_calls", Json(h.mapper_calls.load()))
        .set("mapper_hooked", Json(h.mapped_hooked.load()))
        .set("mapper_unresolved", Json(h.mapper_unresolved.load()));
    s.call("enter_leave_flush", id, Json::object(), out, S_OK);
}

const ExperimentEntry kRows[] = {
    {"enter_leave_hooks", &enter_leave_hooks,
     "at Initialize: SetFunctionIDMapper(2) + SetEnterLeaveFunctionHooks2; hooks only functions whose module "
     "path ends with args.module (default \"app.dll\"); clientData = funcId ^ args.xor (default "
     "0x0FE2C0DE0000F2E2); args.mapper 2 (SetFunctionIDMapper2 when ICorProfilerInfo3 is there), 1 "
     "(SetFunctionIDMapper) or 0 (no mapper: every function is hooked)"},
    {"enter_leave_flush", &enter_leave_flush,
     "at a mark: writes the buffered FunctionEnter2 invocations (callback FunctionEnter2 + call "
     "GetFunctionInfo2 each) and a call enter_leave_flush with the hook counters; no args"},
};

}  // namespace

const ExperimentTable kHookExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness
