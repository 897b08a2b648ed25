// Experiments: same-thread DoStackSnapshot variants (seeds, contextSize, callback replies, flags) and
// GetFunctionFromIP. Rows of this area's table; see experiments.h. Walks go through walk.h.
//
// Also exports profharness_call_back(fn): calls a managed delegate (reverse P/Invoke) from native code, so a
// scenario can build a managed -> native -> managed stack (DSS-03 / DSS-15).
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "experiments.h"
#include "walk.h"

namespace profharness {

namespace {

// A native function of the probe whose address seeds a walk with an ip outside JIT/NGEN code.
extern "C" __attribute__((noinline, used)) int profharness_native_target(int x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}

std::uint64_t native_ip() {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&profharness_native_target)) + 4;
}

// A 64-byte aligned zeroed buffer of kContextBufferSize bytes (freed by the owner).
struct SeedBuffer {
    BYTE* data = nullptr;
    SeedBuffer() {
        void* p = nullptr;
        if (posix_memalign(&p, 64, kContextBufferSize) == 0) {
            data = static_cast<BYTE*>(p);
            std::memset(data, 0, kContextBufferSize);
        }
    }
    ~SeedBuffer() { std::free(data); }
    SeedBuffer(const SeedBuffer&) = delete;
    SeedBuffer& operator=(const SeedBuffer&) = delete;
};

void write_u64(BYTE* base, std::size_t offset, std::uint64_t v) { std::memcpy(base + offset, &v, sizeof v); }

WalkRequest common_request(ExperimentContext& ctx) {
    WalkRequest req;
    req.infoFlags = static_cast<ULONG32>(ctx.int_arg("infoFlags", 0));
    req.clientData = ctx.int_arg("clientData", kDefaultClientData);
    req.resolve = ctx.bool_arg("resolve", true);
    req.abortAtFrame = ctx.int_arg("abortAt", -1);
    req.abortReply = static_cast<HRESULT>(static_cast<std::uint32_t>(ctx.int_arg("abortReply", 0)));
    return req;
}

// stack_walk: one walk of the current thread with an optional callback reply at one frame.
void stack_walk(ExperimentContext& ctx) {
    WalkRequest req = common_request(ctx);
    Json extra = Json::object();
    extra.set("abortAt", Json(req.abortAtFrame))
        .set("abortReply", Json(static_cast<std::uint32_t>(req.abortReply)));
    req.extraArgs = extra;
    walk_and_record(ctx, req);
}

// stack_seeded: a REGISTER_CONTEXT capture walk (recorded, purpose "capture"), then a walk seeded with a
// CONTEXT built from it. The seed buffer is always kContextBufferSize bytes, whatever contextSize says.
void stack_seeded(ExperimentContext& ctx) {
    ProbeState& s = state();
    WalkRequest cap;
    cap.infoFlags = COR_PRF_SNAPSHOT_REGISTER_CONTEXT;
    cap.resolve = false;
    cap.captureAtFrame = kCaptureFirstManaged;
    Json capExtra = Json::object();
    capExtra.set("purpose", "capture");
    cap.extraArgs = capExtra;
    Walk capture(cap);
    walk_and_record(ctx, capture);
    if (capture.captured().empty() || capture.captured_index() < 0) {
        s.probe_error("stack_seeded: the capture walk gave no managed frame with a context", ctx.planned.id);
        return;
    }
    const std::size_t runtime_size = capture.frames()[static_cast<std::size_t>(capture.captured_index())].contextSize;

    SeedBuffer seed;
    if (!seed.data) {
        s.probe_error("stack_seeded: no memory for the seed", ctx.planned.id);
        return;
    }
    const std::string kind = ctx.string_arg("seed", "captured");
    std::memcpy(seed.data, capture.captured().data(),
                runtime_size < kContextBufferSize ? runtime_size : kContextBufferSize);
    if (kind == "native") {
        write_u64(seed.data, kContextRipOffset, native_ip());
    } else if (kind == "zero") {
        std::memset(seed.data, 0, kContextBufferSize);
    } else if (kind != "captured") {
        s.probe_error("stack_seeded: seed must be captured, native or zero", ctx.planned.id);
        return;
    }

    const std::string size_arg = ctx.string_arg("contextSize", "runtime");
    std::int64_t size = static_cast<std::int64_t>(runtime_size);
    if (size_arg == "runtime-1") size = static_cast<std::int64_t>(runtime_size) - 1;
    else if (size_arg == "zero") size = 0;
    else if (size_arg == "small") size = 16;
    else if (size_arg == "larger") size = static_cast<std::int64_t>(runtime_size) + 256;
    else if (size_arg != "runtime") {
        s.probe_error("stack_seeded: contextSize must be runtime, runtime-1, zero, small or larger", ctx.planned.id);
        return;
    }

    WalkRequest req = common_request(ctx);
    req.seed = seed.data;
    req.seedBytes = kContextBufferSize;
    req.contextSize = static_cast<ULONG32>(size);
    Json extra = Json::object();
    extra.set("seedKind", kind)
        .set("contextSizeArg", size_arg)
        .set("runtimeContextSize", Json(static_cast<std::uint64_t>(runtime_size)))
        .set("captureWalk", Json(capture.number()))
        .set("captureIndex", Json(capture.captured_index()))
        .set("nativeIp", Json(native_ip()));
    req.extraArgs = extra;
    walk_and_record(ctx, req);
}

// *pFunctionId is preset to this; out.functionId is null (and out.written false) when it is left unchanged.
constexpr std::uint64_t kFunctionIdSentinel = 0xDEADBEEFCAFEF00DULL;

void record_function_from_ip(ExperimentContext& ctx, std::uint64_t ip, const char* what) {
    ProbeState& s = state();
    const FunctionID sentinel = static_cast<FunctionID>(kFunctionIdSentinel);
    FunctionID fid = sentinel;  // tells whether the runtime wrote *pFunctionId
    HRESULT hr = s.info->GetFunctionFromIP(reinterpret_cast<LPCBYTE>(static_cast<std::uintptr_t>(ip)), &fid);
    Json a = Json::object();
    a.set("ip", Json(ip)).set("what", what);
    Json o = Json::object();
    o.set("functionId", fid == sentinel ? Json() : Json(static_cast<std::uint64_t>(fid)));
    o.set("written", Json(fid != sentinel));
    s.call("GetFunctionFromIP", ctx.planned.id.c_str(), a, o, hr);
}

// function_from_ip: a REGISTER_CONTEXT walk (recorded), then GetFunctionFromIP for the address of a probe
// function (args.what "native") and for every frame's ip ("frame").
void function_from_ip(ExperimentContext& ctx) {
    ProbeState& s = state();
    if (!s.info) return;
    WalkRequest req;
    req.infoFlags = COR_PRF_SNAPSHOT_REGISTER_CONTEXT;
    req.resolve = false;
    Walk walk(req);
    walk_and_record(ctx, walk);
    record_function_from_ip(ctx, native_ip(), "native");
    for (const FrameSlot& f : walk.frames()) record_function_from_ip(ctx, f.ip, "frame");
}

const ExperimentEntry kRows[] = {
    {"stack_walk", &stack_walk,
     "DoStackSnapshot on the current thread, NULL context. args: infoFlags int (passed unchanged, default 0), "
     "clientData int, resolve bool, abortAt int (index of the callback that returns abortReply; -1 never), "
     "abortReply int (an HRESULT as unsigned 32-bit)"},
    {"stack_seeded", &stack_seeded,
     "A REGISTER_CONTEXT capture walk, then a walk seeded from it. args: seed \"captured\" (the first managed "
     "frame's CONTEXT) | \"native\" (that CONTEXT with rip = a probe function) | \"zero\" (all zero), "
     "contextSize \"runtime\" | \"runtime-1\" | \"zero\" | \"small\" (16) | \"larger\" (runtime + 256), "
     "infoFlags, clientData, resolve, abortAt, abortReply as stack_walk"},
    {"function_from_ip", &function_from_ip,
     "A REGISTER_CONTEXT walk, then GetFunctionFromIP for a probe function's address (what \"native\") and "
     "each frame's ip (what \"frame\")"},
};

}  // namespace

const ExperimentTable kStackExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness

// Calls fn (a managed delegate marshalled as a function pointer) from native code: managed -> native ->
// managed. Returns 0, or -1 for a NULL fn.
extern "C" __attribute__((visibility("default"), noinline)) std::int32_t profharness_call_back(void (*fn)(void)) {
    if (!fn) return -1;
    fn();
    __asm__ volatile("" ::: "memory");  // keep this frame (no tail call)
    return 0;
}
