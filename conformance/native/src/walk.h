// One DoStackSnapshot walk as a reusable unit (used by experiments.cpp, experiments_stack.cpp,
// experiments_async.cpp).
//
// A walk has three phases, so that asynchronous callers (a signal handler on the target thread, a walk of
// another thread while the runtime is suspended) can keep the restricted part free of allocation and locks:
//
//   Walk w(req);                 // 1. prepare: allocates the frame buffer (kMaxFrames slots) and, when
//                                //    asked, the capture buffer. Takes the next walk number.
//   HRESULT hr = w.run(info2);   // 2. DoStackSnapshot. The StackSnapshotCallback only copies into the
//                                //    reserved buffer: no allocation, no lock, no trace write. Async-
//                                //    signal-safe apart from whatever the runtime itself does.
//   w.record(experiment, at);    // 3. writes one `frame` record per delivered callback (delivery order),
//                                //    resolves managed frames (GetFunctionInfo, ... as `call` records)
//                                //    when req.resolve, then the DoStackSnapshot `call` record.
//
// walk_and_record(ctx, req) does all three on the calling thread (the common same-thread case).
//
// Records (docs/design.md "The trace"):
//   frame: walk, index, funcId, ip, frameInfo, clientData, contextSize, context ({rip,rsp,rbp} or null),
//          hr (what the callback returned for this frame), plus
//          cbOsTid  gettid() of the thread the runtime called the callback on (the frame record itself is
//                   written by the thread that calls record()),
//          inCall   true when the callback ran while the walking thread was inside DoStackSnapshot
//                   (thread-local flag set around the call; false = delivered after return or elsewhere),
//          cbOrder  global delivery counter value (monotonic across all walks of the process).
//   call DoStackSnapshot: args {thread, infoFlags, clientData, contextSize, context ({rip,rsp,rbp} of the
//          seed or null), walk, at, + req.extraArgs}, out {frameCount, returnOrder, frames? (when
//          resolve), captured? ({index, size, rip, rsp, rbp} when a context was captured)}, hr.
//          out.returnOrder is the delivery counter value read right after DoStackSnapshot returned, so
//          every frame with cbOrder < returnOrder was delivered before the return (DSS-14).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments.h"
#include "profharness/json.h"
#include "profharness/flags.h"
#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/types.h"

namespace profharness {

inline constexpr std::int64_t kDefaultClientData = 0x5EED5EED;
inline constexpr std::size_t kMaxFrames = 4096;

struct WalkRequest {
    ThreadID thread = 0;                      // 0 = NULL = the current thread
    ULONG32 infoFlags = 0;                    // COR_PRF_SNAPSHOT_INFO bits, passed unchanged (even invalid ones)
    std::int64_t clientData = kDefaultClientData;
    const BYTE* seed = nullptr;               // the `context` argument (NULL = no seed); must stay valid
                                              // until run() returns
    ULONG32 contextSize = 0;                  // the `contextSize` argument, passed unchanged
    std::size_t seedBytes = 0;                // bytes readable at seed, for recording its registers
                                              // (0 = contextSize); the call record shows {} when the
                                              // seed is too short to read rip/rsp/rbp from
    bool resolve = true;                      // resolve managed frames to names in record()
    std::int64_t abortAtFrame = -1;           // index of the callback that returns abortReply (-1: never);
                                              // every other callback returns S_OK
    HRESULT abortReply = S_OK;
    // Capture the full CONTEXT bytes the runtime passes with one callback (REGISTER_CONTEXT walks), for use
    // as a later seed: captureAtFrame = that callback's index, or kCaptureFirstManaged for the first callback
    // with funcId != 0 and a context. -1 = no capture.
    std::int64_t captureAtFrame = -1;
    Json extraArgs;                           // object or null: merged into the call record's args
};

inline constexpr std::int64_t kCaptureFirstManaged = -2;

struct FrameSlot {
    FunctionID funcId;
    UINT_PTR ip;
    COR_PRF_FRAME_INFO frameInfo;
    ULONG32 contextSize;
    bool hasContext;
    bool inCall;
    std::uint64_t rip, rsp, rbp;
    void* clientData;
    HRESULT reply;
    long cbOsTid;
    std::int64_t cbOrder;
};

class Walk {
 public:
    explicit Walk(const WalkRequest& req);
    Walk(const Walk&) = delete;
    Walk& operator=(const Walk&) = delete;

    // DoStackSnapshot with the request's arguments; returns its HRESULT (also kept for record()).
    HRESULT run(ICorProfilerInfo2* info2);
    // Writes the frame records, the resolution calls and the DoStackSnapshot call record.
    void record(const char* experiment, const std::string& at);

    std::int64_t number() const { return walk_; }
    HRESULT hr() const { return hr_; }
    std::size_t delivered() const { return delivered_; }
    const std::vector<FrameSlot>& frames() const { return frames_; }
    const WalkRequest& request() const { return req_; }

    // The captured CONTEXT bytes (empty when nothing was captured); captured_index() is its callback index.
    const std::vector<BYTE>& captured() const { return captured_; }
    std::int64_t captured_index() const { return captured_index_; }

 private:
    friend HRESULT walk_snapshot_callback(FunctionID, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void*);
    void on_frame(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32 contextSize,
                  const BYTE* context, void* clientData, HRESULT reply);

    WalkRequest req_;
    std::int64_t walk_;
    HRESULT hr_ = S_OK;
    bool ran_ = false;
    std::int64_t return_order_ = -1;
    long run_tid_ = 0;                // gettid() of the thread in run() (FrameSlot::cbOsTid of inCall frames)
    std::vector<FrameSlot> frames_;   // capacity reserved in the constructor: the callback never allocates
    std::size_t delivered_ = 0;       // callbacks seen, including those beyond kMaxFrames
    std::vector<BYTE> captured_;      // resized only in the constructor; captured_size_ says what is valid
    std::size_t captured_size_ = 0;
    std::int64_t captured_index_ = -1;
};

// The StackSnapshotCallback every Walk uses (clientData is passed through to the runtime unchanged; the
// walk in progress on this thread is found through a thread-local pointer). Exposed for checks only.
HRESULT walk_snapshot_callback(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32 contextSize,
                               BYTE context[], void* clientData);

// Prepare + run + record on the calling thread. Returns DoStackSnapshot's HRESULT, or E_NOINTERFACE
// (with a probe_error) when ICorProfilerInfo2 is unavailable.
HRESULT walk_and_record(ExperimentContext& ctx, const WalkRequest& req);
// Same, when the caller needs the walk afterwards (frames, captured context). Returns nullptr-free result.
HRESULT walk_and_record(ExperimentContext& ctx, Walk& walk);

// The seed's {rip, rsp, rbp}, or null when seed is NULL or shorter than Rip's offset + 8.
Json seed_registers(const BYTE* seed, std::size_t size);

// Resolves FunctionIDs to {token, module, type, method} through GetFunctionInfo, GetModuleInfo,
// GetTokenAndMetaDataFromFunction, GetMethodProps, GetTypeDefProps; every call is a `call` record.
struct Resolved {
    Json token, module, type, method;
};
Resolved resolve_function(const char* experiment, FunctionID fid);

}  // namespace profharness
