// allocation_site_sampler.cpp -- sampled allocation-site profiler.
//
// What it does: every kSampleEvery-th managed allocation (ICorProfilerCallback::ObjectAllocated)
// it walks the allocating thread's managed stack with ICorProfilerInfo2::DoStackSnapshot, hashes
// the list of FunctionIDs into an "allocation site" and accumulates per-site sample counts in a
// fixed, lock-free table.  In GarbageCollectionFinished (a safe point, on a runtime thread) it
// resolves the leaf function of the hottest site to a name once.  At Shutdown it prints a summary.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * ICorProfilerCallback::Initialize -- the IUnknown "the profiler must query for an
//     ICorProfilerInfo interface pointer"; "The Initialize call is the only opportunity to enable
//     (or disable) callbacks that are immutable." COR_PRF_ENABLE_OBJECT_ALLOCATED and
//     COR_PRF_ENABLE_STACK_SNAPSHOT are therefore requested here, together with
//     COR_PRF_MONITOR_OBJECT_ALLOCATED and COR_PRF_MONITOR_GC.
//   * ICorProfilerInfo2::DoStackSnapshot -- "Passing null in thread yields a snapshot of the
//     current thread."; "Before the CLR returns from that call, it calls your
//     StackSnapshotCallback several times, once for each managed frame (or run of unmanaged
//     frames) on the stack."; "The order in which the stack is walked is ... leaf (last-pushed)
//     frame first"; "A synchronous stack walk involves walking the stack of the current thread in
//     response to a callback. It does not require seeding or suspending."  The walk is done on the
//     allocating thread inside ObjectAllocated (the documented example of a synchronous walk).
//     Runs of unmanaged frames are reported with FunctionID 0 and are skipped.
//   * Caller-Allocated Buffers in the Profiling API -- the name lookup uses the double-pass form:
//     "First call with a zero-length InfoBuffer parameter to obtain the correct buffer size. Then
//     set the buffer size to the value returned in pcBufferMax and call the function again."
//   * ICorProfilerCallback::Shutdown -- "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."  Only Release is called.
#include <ucontext.h>

#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr unsigned kSampleEvery = 997;  // prime, to avoid phase-locking with allocation loops
constexpr unsigned kMaxFrames = 64;
constexpr unsigned kSites = 4096;        // power of two

// The seed buffer size handed to the runtime (see profharness/types.h, kContextBufferSize).
constexpr ULONG32 kSeedBytes = static_cast<ULONG32>(kContextBufferSize);
constexpr DWORD kContextAmd64 = 0x00100000u;
constexpr DWORD kContextControl = kContextAmd64 | 0x1u;
constexpr DWORD kContextInteger = kContextAmd64 | 0x2u;

struct WalkState {
    FunctionID frames[kMaxFrames];
    unsigned count = 0;
    unsigned unmanagedRuns = 0;
    bool truncated = false;
};

HRESULT STDMETHODCALLTYPE OnFrame(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* clientData) {
    auto* w = static_cast<WalkState*>(clientData);
    if (funcId == 0) {  // a run of unmanaged frames: "you must walk them yourself" -- we don't need them
        ++w->unmanagedRuns;
        return S_OK;
    }
    if (w->count == kMaxFrames) {
        w->truncated = true;
        return S_FALSE;  // stop the walk, we have enough
    }
    w->frames[w->count++] = funcId;
    return S_OK;
}

struct Site {
    std::atomic<std::uint64_t> hash{0};
    std::atomic<FunctionID> leaf{0};
    std::atomic<unsigned> samples{0};
};

}  // namespace

class AllocationSiteSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo2, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, "[allocation_site_sampler] QueryInterface(ICorProfilerInfo2) failed 0x%08x\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_ENABLE_OBJECT_ALLOCATED |
                                 COR_PRF_ENABLE_STACK_SNAPSHOT | COR_PRF_MONITOR_GC);
        if (failed(hr)) {
            std::fprintf(stderr, "[allocation_site_sampler] SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        std::fprintf(stderr, "[allocation_site_sampler] initialized, sampling 1 in %u allocations\n", kSampleEvery);
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID) override {
        if (shutdown_.load(std::memory_order_relaxed)) return S_OK;
        unsigned n = allocations_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (n % kSampleEvery != 0) return S_OK;
        SampleCurrentStack();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_.load() || hotLeafName_[0] != 0) return S_OK;
        // Name the leaf function of the hottest site once enough samples exist.
        unsigned best = 0;
        FunctionID leaf = 0;
        for (auto& s : sites_) {
            unsigned c = s.samples.load(std::memory_order_relaxed);
            if (c > best && s.leaf.load() != 0) { best = c; leaf = s.leaf.load(); }
        }
        if (best >= 4) ResolveName(leaf, hotLeafName_, sizeof(hotLeafName_));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        unsigned distinct = 0;
        for (auto& s : sites_)
            if (s.samples.load() != 0) ++distinct;
        std::fprintf(stderr,
                     "allocation_site_sampler: allocations=%u samples=%u walks_ok=%u walks_failed=%u "
                     "last_failure=0x%08x frames=%llu distinct_sites=%u hottest_leaf=%s\n",
                     allocations_.load(), samples_.load(), walksOk_.load(), walksFailed_.load(),
                     (unsigned)lastFailure_.load(), (unsigned long long)frames_.load(), distinct,
                     hotLeafName_[0] ? hotLeafName_ : "(unresolved)");
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    void SampleCurrentStack() {
        samples_.fetch_add(1, std::memory_order_relaxed);
        WalkState walk;

        // Start the walk exactly where we are: capture this thread's registers and hand them to
        // the runtime as the walk's starting point, so frames between the allocation helper and
        // the callback are not lost.
        alignas(64) static thread_local BYTE seed[kSeedBytes];
        std::memset(seed, 0, sizeof(seed));
        ucontext_t uc;
        getcontext(&uc);
        auto* ctx = reinterpret_cast<AMD64Context*>(seed);
        ctx->ContextFlags = kContextControl | kContextInteger;
        ctx->Rip = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RIP]);
        ctx->Rsp = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RSP]);
        ctx->Rbp = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RBP]);
        ctx->Rbx = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RBX]);
        ctx->R12 = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_R12]);
        ctx->R13 = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_R13]);
        ctx->R14 = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_R14]);
        ctx->R15 = static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_R15]);

        HRESULT hr = info_->DoStackSnapshot(0, OnFrame, COR_PRF_SNAPSHOT_DEFAULT, &walk, seed, kSeedBytes);  // BUG: "You just call DoStackSnapshot from within your ICorProfilerCallback method, passing null in the context and thread parameters."

        unsigned seeded = seededWalks_.fetch_add(1, std::memory_order_relaxed);
        if (seeded < 3) {
            std::fprintf(stderr,
                         "[allocation_site_sampler] ObjectAllocated: DoStackSnapshot(thread=0, seed rip=%p rsp=%p, "
                         "contextSize=%u) -> 0x%08x, managed frames=%u unmanaged runs=%u\n",
                         (void*)ctx->Rip, (void*)ctx->Rsp, (unsigned)kSeedBytes, (unsigned)hr, walk.count,
                         walk.unmanagedRuns);
        }
        if (failed(hr)) {
            walksFailed_.fetch_add(1, std::memory_order_relaxed);
            lastFailure_.store(hr, std::memory_order_relaxed);
            return;
        }
        walksOk_.fetch_add(1, std::memory_order_relaxed);
        frames_.fetch_add(walk.count, std::memory_order_relaxed);
        if (walk.count == 0) return;
        Record(walk);
    }

    void Record(const WalkState& walk) {
        std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the FunctionIDs
        for (unsigned i = 0; i < walk.count; ++i) {
            h ^= static_cast<std::uint64_t>(walk.frames[i]);
            h *= 1099511628211ull;
        }
        if (h == 0) h = 1;
        for (unsigned probe = 0; probe < kSites; ++probe) {
            Site& s = sites_[(h + probe) & (kSites - 1)];
            std::uint64_t cur = s.hash.load(std::memory_order_acquire);
            if (cur == 0) {
                std::uint64_t expected = 0;
                if (s.hash.compare_exchange_strong(expected, h)) {
                    s.leaf.store(walk.frames[0]);
                    cur = h;
                } else {
                    cur = expected;
                }
            }
            if (cur == h) {
                s.samples.fetch_add(1, std::memory_order_relaxed);
                return;
            }
        }
        droppedSites_.fetch_add(1, std::memory_order_relaxed);
    }

    void ResolveName(FunctionID fn, char* out, size_t outSize) {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        if (failed(info_->GetFunctionInfo(fn, &cls, &mod, &tok))) return;
        IUnknown* unk = nullptr;
        if (failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || unk == nullptr) return;
        auto* md = reinterpret_cast<IMetaDataImport*>(unk);
        ULONG needed = 0;
        mdTypeDef owner = 0;
        // Double-pass: size first (zero-length buffer), then fetch.
        if (succeeded(md->GetMethodProps(tok, &owner, nullptr, 0, &needed, nullptr, nullptr, nullptr, nullptr, nullptr)) &&
            needed > 0) {
            std::vector<WCHAR> name(needed);
            if (succeeded(md->GetMethodProps(tok, &owner, name.data(), needed, &needed, nullptr, nullptr, nullptr,
                                             nullptr, nullptr))) {
                std::snprintf(out, outSize, "%s", to_utf8(name.data(), name.size()).c_str());
            }
        }
        md->Release();
    }

    ICorProfilerInfo2* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned> allocations_{0};
    std::atomic<unsigned> samples_{0};
    std::atomic<unsigned> seededWalks_{0};
    std::atomic<unsigned> walksOk_{0};
    std::atomic<unsigned> walksFailed_{0};
    std::atomic<HRESULT> lastFailure_{S_OK};
    std::atomic<std::uint64_t> frames_{0};
    std::atomic<unsigned> droppedSites_{0};
    Site sites_[kSites];
    char hotLeafName_[256] = {0};
};

DOCFIX_DEFINE_PROFILER(AllocationSiteSampler)
