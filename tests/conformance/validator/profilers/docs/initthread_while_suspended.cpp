// initthread_while_suspended.cpp -- "lineheat": a per-method line-heat sampler (IL offsets) for
// CoreCLR on Linux x86_64.  Contains exactly ONE deliberate profiling-API misuse (see the BUG comment in sampleLoop).
//
// How it works
//   * Every method runs jitted code: JITCachedFunctionSearchStarted always answers FALSE (same answer
//     for every duplicate callback), so ReadyToRun code is not used and every body goes through
//     JITCompilationFinished, where the profiler reads
//       - the code extents with ICorProfilerInfo2::GetCodeInfo2 and
//       - the IL map with ICorProfilerInfo::GetILToNativeMapping,
//     both with the single-pass caller-allocated-buffer method (fixed first buffer, reallocate and
//     call again when *pcXxx says it was too small), and the method name through GetFunctionInfo +
//     GetModuleMetaData + IMetaDataImport.  A tier-1 recompilation of the same FunctionID adds a new
//     code block (deduplicated by start address).
//   * A native sampling thread, every LINEHEAT_PERIOD_MS (default 4) ms: ICorProfilerInfo10::
//     SuspendRuntime, ICorProfilerInfo4::EnumThreads, DoStackSnapshot of each enumerated thread that
//     has not been reported destroyed (the walk set is guarded by a mutex that ThreadDestroyed also
//     takes, so it blocks until the walk in progress is complete), ResumeRuntime.  The snapshot
//     callback only appends raw instruction pointers to a preallocated array; they are resolved after
//     ResumeRuntime against the profiler's own sorted block table (no ICorProfilerInfo call).
//   * Shutdown joins the sampler first, then prints, per hottest method, its hottest IL offsets.
//
// Documentation followed (besides the BUG line): ICorProfilerInfo::GetILToNativeMapping ("you must
// verify that the map buffer was large enough ... compare the value of cMap with the value of the
// pcMap parameter ... allocate a larger map buffer, update cMap with the new, larger size, and call
// GetILToNativeMapping again"), ICorProfilerInfo2::GetCodeInfo2 (same single-pass rule),
// Caller-Allocated Buffers (counts are elements), JITCachedFunctionSearchStarted ("If the value is
// false, the execution engine JIT-compiles the function"; "it must set the value referenced by
// pbUseCachedFunction to the same value for all duplicate callbacks"), DoStackSnapshot ("Snapshots
// can be taken of other threads only if the target thread is suspended at the time."; "Always block
// in your ICorProfilerCallback::ThreadDestroyed callback until that thread's stack walk is
// complete."), StackSnapshotCallback ("You must limit the complexity of work done in
// StackSnapshotCallback"), ThreadDestroyed ("The threadId value is no longer valid at the time of
// this call."), Shutdown ("The profiler code cannot safely call methods of the ICorProfilerInfo
// interface after the Shutdown method is called.").
//
// All interfaces/IIDs/structs come from the kit headers; nothing is declared locally.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using namespace docfix;

namespace {

constexpr ULONG32 IL_NONE = 0xFFFFFFFFu;     // NO_MAPPING
constexpr ULONG32 IL_PROLOG = 0xFFFFFFFEu;   // PROLOG
constexpr ULONG32 IL_EPILOG = 0xFFFFFFFDu;   // EPILOG

struct Block {
    UINT_PTR lo, hi;                 // [lo, hi)
    SIZE_T preceding;                // bytes of the function's earlier code regions
    FunctionID fn;
    std::shared_ptr<const std::vector<COR_DEBUG_IL_TO_NATIVE_MAP>> map;
};

struct Hit {
    UINT_PTR ip;
    std::uint32_t stack;   // which walk
    std::uint8_t top;      // 1 for the first managed frame of the walk
};

struct Cursor {
    Hit* hits;
    std::size_t* n;
    std::size_t cap;
    std::uint32_t stack;
    bool sawManaged;
};

class LineHeat : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (!unk) return E_INVALIDARG;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&p4_)))) return E_NOINTERFACE;
        if (failed(unk->QueryInterface(IID_ICorProfilerInfo10, reinterpret_cast<void**>(&p10_)))) p10_ = nullptr;
        HRESULT hr = p4_->SetEventMask(COR_PRF_MONITOR_JIT_COMPILATION | COR_PRF_MONITOR_CACHE_SEARCHES |
                                       COR_PRF_ENABLE_JIT_MAPS | COR_PRF_ENABLE_STACK_SNAPSHOT | COR_PRF_MONITOR_THREADS);
        if (failed(hr)) {
            std::fprintf(stderr, "[lineheat] SetEventMask failed 0x%08x\n", (unsigned)hr);
            p4_->Release();
            p4_ = nullptr;
            return hr;
        }
        if (const char* e = std::getenv("LINEHEAT_PERIOD_MS")) {
            int v = std::atoi(e);
            if (v > 0 && v <= 1000) periodMs_ = v;
        }
        hits_.resize(1 << 15);
        if (p10_) {
            running_ = true;
            worker_ = std::thread(&LineHeat::sampleLoop, this);
        }
        std::fprintf(stderr, "[lineheat] up, period %d ms, sampler %s\n", periodMs_, p10_ ? "on" : "off (no Info10)");
        return S_OK;
    }

    // --- code blocks ----------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchStarted(FunctionID, BOOL* useCached) override {
        if (useCached) *useCached = 0;  // always the same answer: jit everything, get exact maps
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fn, HRESULT status, BOOL) override {
        if (done_.load() || !p4_ || failed(status)) return S_OK;
        try {
            capture(fn);
        } catch (...) {
        }
        return S_OK;
    }

    // --- threads ----------------------------------------------------------------------------------
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID t) override {
        std::lock_guard<std::mutex> l(walkMu_);
        dead_.erase(t);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID t) override {
        std::lock_guard<std::mutex> l(walkMu_);  // waits for a walk in progress
        try { dead_.insert(t); } catch (...) {}
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        if (done_.exchange(true)) return S_OK;
        running_ = false;
        if (worker_.joinable()) worker_.join();
        print();
        if (p10_) { p10_->Release(); p10_ = nullptr; }
        if (p4_) { p4_->Release(); p4_ = nullptr; }
        return S_OK;
    }

private:
    void capture(FunctionID fn) {
        // Extents: single pass with a small buffer, grow when too small.
        COR_PRF_CODE_INFO small[4];
        std::vector<COR_PRF_CODE_INFO> big;
        COR_PRF_CODE_INFO* ci = small;
        ULONG32 nci = 0;
        HRESULT hr = p4_->GetCodeInfo2(fn, 4, &nci, small);
        if (succeeded(hr) && nci > 4) {
            big.resize(nci);
            ULONG32 again = 0;
            hr = p4_->GetCodeInfo2(fn, nci, &again, big.data());
            nci = std::min(nci, again);
            ci = big.data();
        }
        if (failed(hr) || nci == 0) { ++noCode_; return; }

        {
            std::lock_guard<std::mutex> l(blocksMu_);
            if (starts_.count(ci[0].startAddress)) return;  // this body is known already
        }

        // IL map: single pass, 128 entries first.
        auto map = std::make_shared<std::vector<COR_DEBUG_IL_TO_NATIVE_MAP>>(128);
        ULONG32 nmap = 0;
        hr = p4_->GetILToNativeMapping(fn, (ULONG32)map->size(), &nmap, map->data());
        if (succeeded(hr) && nmap > map->size()) {
            map->resize(nmap);
            ULONG32 again = 0;
            hr = p4_->GetILToNativeMapping(fn, nmap, &again, map->data());
            nmap = std::min(nmap, again);
        }
        if (failed(hr)) { ++noMap_; nmap = 0; }
        map->resize(nmap);
        std::sort(map->begin(), map->end(),
                  [](const COR_DEBUG_IL_TO_NATIVE_MAP& a, const COR_DEBUG_IL_TO_NATIVE_MAP& b) { return a.nativeStartOffset < b.nativeStartOffset; });

        std::string name = nameOf(fn);

        std::lock_guard<std::mutex> l(blocksMu_);
        if (!starts_.insert(ci[0].startAddress).second) return;
        SIZE_T before = 0;
        for (ULONG32 i = 0; i < nci; ++i) {
            if (ci[i].size == 0) continue;
            blocks_.push_back(Block{ci[i].startAddress, ci[i].startAddress + ci[i].size, before, fn, map});
            before += ci[i].size;
        }
        blocksSorted_ = false;
        names_.emplace(fn, std::move(name));
        ++bodies_;
    }

    std::string nameOf(FunctionID fn) {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        if (failed(p4_->GetFunctionInfo(fn, &cls, &mod, &tok))) return "?";
        IUnknown* unk = nullptr;
        if (failed(p4_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk)) || !unk) return "?";
        auto* md = static_cast<IMetaDataImport*>(unk);
        WCHAR m[512], t[512];
        ULONG mlen = 0, tlen = 0;
        mdTypeDef td = 0;
        std::string out = "?";
        if (succeeded(md->GetMethodProps(tok, &td, m, 512, &mlen, nullptr, nullptr, nullptr, nullptr, nullptr))) {
            out = to_utf8(m, std::min<ULONG>(mlen, 512));
            if (td != 0 && succeeded(md->GetTypeDefProps(td, t, 512, &tlen, nullptr, nullptr)))
                out = to_utf8(t, std::min<ULONG>(tlen, 512)) + "." + out;
        }
        md->Release();
        return out;
    }

    // --- sampler -----------------------------------------------------------------------------------
    static HRESULT onFrame(FunctionID fn, UINT_PTR ip, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* data) {
        Cursor* c = static_cast<Cursor*>(data);
        if (fn == 0 || *c->n >= c->cap) return S_OK;
        c->hits[(*c->n)++] = Hit{ip, c->stack, static_cast<std::uint8_t>(c->sawManaged ? 0 : 1)};
        c->sawManaged = true;
        return S_OK;
    }

    void sampleLoop() {
        bool threadReady = false;
        std::uint32_t stackNo = 0;
        ThreadID ids[256];
        while (running_) {
            std::this_thread::sleep_for(std::chrono::milliseconds(periodMs_));
            if (!running_) break;
            if (failed(p10_->SuspendRuntime())) { ++suspendFail_; continue; }

            if (!threadReady) {
                // BUG: InitializeCurrentThread is called after SuspendRuntime, i.e. while every
                // managed thread is suspended. ICorProfilerInfo4::InitializeCurrentThread says:
                // "InitializeCurrentThread does the initialization in advance to finish tasks that
                // take locks, and may deadlock. Call InitializeCurrentThread only when there are no
                // suspended threads."
                initHr_ = p4_->InitializeCurrentThread();  // BUG: runtime is suspended here
                threadReady = true;
            }

            std::size_t n = 0;
            ICorProfilerThreadEnum* en = nullptr;
            {
                std::lock_guard<std::mutex> l(walkMu_);
                if (succeeded(p4_->EnumThreads(&en)) && en) {
                    ULONG got = 0;
                    while (succeeded(en->Next(256, ids, &got)) && got > 0) {
                        for (ULONG i = 0; i < got; ++i) {
                            if (dead_.count(ids[i])) continue;
                            Cursor c{hits_.data(), &n, hits_.size(), stackNo++, false};
                            if (succeeded(p4_->DoStackSnapshot(ids[i], &LineHeat::onFrame, COR_PRF_SNAPSHOT_DEFAULT, &c, nullptr, 0)))
                                ++walks_;
                            else
                                ++walkFail_;
                        }
                        if (got < 256) break;
                    }
                }
            }
            p10_->ResumeRuntime();
            if (en) en->Release();
            ++rounds_;
            fold(n);
        }
    }

    const Block* find(UINT_PTR ip) {
        if (!blocksSorted_) {
            std::sort(blocks_.begin(), blocks_.end(), [](const Block& a, const Block& b) { return a.lo < b.lo; });
            blocksSorted_ = true;
        }
        auto it = std::upper_bound(blocks_.begin(), blocks_.end(), ip, [](UINT_PTR v, const Block& b) { return v < b.lo; });
        if (it == blocks_.begin()) return nullptr;
        --it;
        return ip < it->hi ? &*it : nullptr;
    }

    void fold(std::size_t n) {
        std::lock_guard<std::mutex> l(blocksMu_);
        try {
            for (std::size_t i = 0; i < n; ++i) {
                const Hit& h = hits_[i];
                if (!h.top) continue;  // line heat = where each sampled thread is (its top managed frame)
                ++samples_;
                const Block* b = find(h.ip);
                if (!b) { ++unresolved_; continue; }
                SIZE_T off = b->preceding + (h.ip - b->lo);
                if (h.ip > b->lo) --off;  // ips are mostly return addresses: use the call instruction
                ULONG32 il = IL_NONE;
                for (const auto& e : *b->map) {
                    if (e.nativeStartOffset > off) break;
                    if (off < e.nativeEndOffset) il = e.ilOffset;
                }
                ++heat_[b->fn][il];
            }
        } catch (...) {
        }
    }

    void print() {
        std::lock_guard<std::mutex> l(blocksMu_);
        std::vector<std::pair<std::uint64_t, FunctionID>> fns;
        for (const auto& kv : heat_) {
            std::uint64_t s = 0;
            for (const auto& x : kv.second) s += x.second;
            fns.emplace_back(s, kv.first);
        }
        std::sort(fns.rbegin(), fns.rend());
        std::fprintf(stderr, "[lineheat] hottest methods and their hottest IL offsets (%llu samples):\n", (unsigned long long)samples_);
        for (std::size_t i = 0; i < fns.size() && i < 8; ++i) {
            auto nm = names_.find(fns[i].second);
            std::fprintf(stderr, "[lineheat]  %5llu  %s\n", (unsigned long long)fns[i].first, nm != names_.end() ? nm->second.c_str() : "?");
            std::vector<std::pair<std::uint64_t, ULONG32>> lines;
            for (const auto& x : heat_[fns[i].second]) lines.emplace_back(x.second, x.first);
            std::sort(lines.rbegin(), lines.rend());
            for (std::size_t j = 0; j < lines.size() && j < 3; ++j) {
                char where[24];
                ULONG32 il = lines[j].second;
                if (il == IL_NONE) std::snprintf(where, sizeof where, "no-map");
                else if (il == IL_PROLOG) std::snprintf(where, sizeof where, "prolog");
                else if (il == IL_EPILOG) std::snprintf(where, sizeof where, "epilog");
                else std::snprintf(where, sizeof where, "IL+0x%x", il);
                std::fprintf(stderr, "[lineheat]         %5llu  %s\n", (unsigned long long)lines[j].first, where);
            }
        }
        std::fprintf(stderr,
                     "[lineheat] summary: bodies=%llu no_code=%llu no_map=%llu rounds=%llu walks=%llu walk_fail=%llu "
                     "suspend_fail=%llu samples=%llu unresolved=%llu init_thread_hr=0x%08x\n",
                     (unsigned long long)bodies_, (unsigned long long)noCode_.load(), (unsigned long long)noMap_.load(),
                     (unsigned long long)rounds_, (unsigned long long)walks_, (unsigned long long)walkFail_,
                     (unsigned long long)suspendFail_, (unsigned long long)samples_, (unsigned long long)unresolved_,
                     (unsigned)initHr_);
    }

    ICorProfilerInfo4* p4_ = nullptr;
    ICorProfilerInfo10* p10_ = nullptr;
    int periodMs_ = 4;
    std::atomic<bool> done_{false};
    std::atomic<bool> running_{false};
    std::thread worker_;

    std::mutex blocksMu_;
    std::vector<Block> blocks_;
    bool blocksSorted_ = true;
    std::unordered_set<UINT_PTR> starts_;
    std::unordered_map<FunctionID, std::string> names_;
    std::unordered_map<FunctionID, std::unordered_map<ULONG32, std::uint64_t>> heat_;
    std::uint64_t bodies_ = 0, samples_ = 0, unresolved_ = 0;
    std::atomic<std::uint64_t> noCode_{0}, noMap_{0};

    std::mutex walkMu_;
    std::unordered_set<ThreadID> dead_;
    std::vector<Hit> hits_;
    std::uint64_t rounds_ = 0, walks_ = 0, walkFail_ = 0, suspendFail_ = 0;
    HRESULT initHr_ = S_FALSE;  // S_FALSE = never called
};

}  // namespace

DOCFIX_DEFINE_PROFILER(LineHeat)
