// call_counter.cpp -- counts managed calls per method with the ELT v3 fast path.
//
// What it does
//   * Initialize: QueryInterface the IUnknown for ICorProfilerInfo3, SetEventMask(COR_PRF_MONITOR_ENTERLEAVE),
//     SetEnterLeaveFunctionHooks3(OnEnter3, OnLeave3, OnTailcall3), SetFunctionIDMapper2(MapFunctionId, this).
//   * FunctionIDMapper2: called once per function; assigns the function a slot in a fixed table the profiler owns
//     and returns (slot index + 1) as the client ID (never null, since the function is hooked).  The method name is
//     resolved here, once per function: GetFunctionInfo2 (class/module/token) + GetTokenAndMetaDataFromFunction
//     (IMetaDataImport) + IMetaDataImport::GetMethodProps / GetTypeDefProps, each with the two-pass buffer pattern.
//   * FunctionEnter3 / FunctionLeave3 / FunctionTailcall3: plain C functions that only do relaxed atomic increments
//     on the slot named by the client ID (no locks, no allocation, no calls into the runtime).
//   * Shutdown: prints one stderr line "call_counter: ..." with totals and the top 5 methods, then releases the info
//     pointer.  No ICorProfilerInfo method is called in or after Shutdown.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...)
//   * ICorProfilerCallback::Initialize: pICorProfilerInfoUnk is a "Pointer to an IUnknown interface that the profiler
//     must query for an ICorProfilerInfo interface pointer."  ICorProfilerInfo3 is asked for because both
//     SetEnterLeaveFunctionHooks3 and SetFunctionIDMapper2 live on it.
//   * ICorProfilerInfo3::SetEnterLeaveFunctionHooks3: "The SetEnterLeaveFunctionHooks3 method can be called only from
//     the profiler's ICorProfilerCallback::Initialize callback."  and "FunctionEnter3, FunctionLeave3, and
//     FunctionTailcall3 hooks do not provide stack frame and argument inspection." (so no COR_PRF_ENABLE_FUNCTION_ARGS /
//     _RETVAL / _FRAME_INFO flags are set; only COR_PRF_MONITOR_ENTERLEAVE).
//   * ICorProfilerInfo3::SetFunctionIDMapper2: "The FunctionIDMapper2 method can be set only once; we recommend that
//     you set it in the ICorProfilerCallback::Initialize callback."  -- set exactly once, in Initialize.
//     clientData is "A pointer that is passed to every FunctionIDMapper2 function call made by the current runtime."
//     -- we pass `this` and the mapper uses it to find the profiler object.
//   * FunctionIDMapper2: "The profiler returns a value that the execution engine uses as an alternative function
//     identifier. The return value cannot be null unless false is returned in pbHookFunction."  -- client IDs are
//     slot+1 (never 0); if the table is full the function is not hooked (*pbHookFunction = FALSE).
//   * FunctionEnter2 (the hooks' shared contract, /work/shared/spec/FunctionEnter2.md): "The implementation of
//     FunctionEnter2 should not block because it will delay garbage collection." and "the FunctionEnter2 function
//     must not call into managed code or in any way cause a managed memory allocation."  -- the v3 hooks only do
//     atomic increments.
//   * Caller-Allocated Buffers in the Profiling API: "Double-pass method: ... First call with a zero-length
//     InfoBuffer parameter to obtain the correct buffer size. Then set the buffer size to the value returned in
//     pcBufferMax and call the function again." and "If InfoBuffer is null, cBufferSizeStart must be 0." -- used for
//     GetFunctionInfo2's type-argument array (we pass 0/null: we only want the count) and for the metadata names.
//   * DoStackSnapshot page, asynchronous-walk guidelines: "Do not hold a lock while your profiler calls into a CLR
//     function that can trigger a garbage collection." -- the mapper resolves the name with no lock held and only
//     then takes the table mutex to publish the slot.
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface
//     after the Shutdown method is called."  -- Shutdown only reads the profiler's own table.
//
// Ambiguities met
//   * The FunctionEnter3 page says "The implementation must use the __declspec(naked) storage-class attribute" and
//     "The execution engine does not save any registers before calling this function."  That text is written for
//     Windows x86; on Linux x64 the runtime's ELT stub is documented nowhere.  Following the brief (and the SysV
//     platform the headers describe), the hooks are ordinary C functions taking FunctionIDOrClientID by value.
//   * Which ICorProfilerInfo calls are allowed from inside FunctionIDMapper2, and on which thread it runs, is not
//     stated.  Nothing forbids GetFunctionInfo2 / GetTokenAndMetaDataFromFunction there, and it is the only place that
//     is reached for every hooked function (JITCompilationFinished is not raised for precompiled code), so names are
//     resolved there.  Failures are tolerated: the slot then prints as the raw FunctionID.
//   * The order of SetEventMask vs. SetEnterLeaveFunctionHooks3 vs. SetFunctionIDMapper2 inside Initialize is not
//     specified; the mask is set first so that the hooks are registered for an ENTERLEAVE-enabled profiler.
//   * Whether the mapper can be called more than once for the same FunctionID (e.g. concurrently on two threads) is
//     not stated; the table deduplicates by FunctionID so both calls get the same client ID.
//   * GetFunctionInfo2 with frameInfo 0 is used for the class/module/token; the page does not say whether a null
//     frame is acceptable for shared generic code (the ClassID may be unavailable, CORPROF_E_DATAINCOMPLETE style
//     failures), so the token path through GetTokenAndMetaDataFromFunction does not depend on it.
#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {

constexpr size_t kMaxSlots = 1u << 16;

struct Slot {
    std::atomic<std::uint64_t> enters{0};
    std::atomic<std::uint64_t> leaves{0};
    std::atomic<std::uint64_t> tailcalls{0};
};

// Fixed-size table: the hooks index it without any lock; it is never reallocated.
Slot g_slots[kMaxSlots];
std::atomic<std::uint64_t> g_bad_client_ids{0};

inline Slot* slot_from_client_id(UINT_PTR clientId) {
    if (clientId == 0 || clientId > kMaxSlots) {
        g_bad_client_ids.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return &g_slots[clientId - 1];
}

}  // namespace

// ELT v3 hooks: ordinary C functions (see "Ambiguities").  Only atomic increments.
extern "C" void OnEnter3(FunctionIDOrClientID id) {
    if (Slot* s = slot_from_client_id(id.clientID)) s->enters.fetch_add(1, std::memory_order_relaxed);
}
extern "C" void OnLeave3(FunctionIDOrClientID id) {
    if (Slot* s = slot_from_client_id(id.clientID)) s->leaves.fetch_add(1, std::memory_order_relaxed);
}
extern "C" void OnTailcall3(FunctionIDOrClientID id) {
    if (Slot* s = slot_from_client_id(id.clientID)) s->tailcalls.fetch_add(1, std::memory_order_relaxed);
}

class CallCounterProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo3, reinterpret_cast<void**>(&info_));
        if (failed(hr) || info_ == nullptr) {
            std::fprintf(stderr, "[call_counter] QueryInterface(ICorProfilerInfo3) failed 0x%08x\n", (unsigned)hr);
            info_ = nullptr;
            return failed(hr) ? hr : E_NOINTERFACE;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_ENTERLEAVE);
        if (failed(hr)) return fail_init("SetEventMask", hr);
        hr = info_->SetEnterLeaveFunctionHooks3(&OnEnter3, &OnLeave3, &OnTailcall3);
        if (failed(hr)) return fail_init("SetEnterLeaveFunctionHooks3", hr);
        hr = info_->SetFunctionIDMapper2(&CallCounterProfiler::MapFunctionId, this);
        if (failed(hr)) return fail_init("SetFunctionIDMapper2", hr);
        std::fprintf(stderr, "[call_counter] initialized\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        std::vector<std::pair<std::uint64_t, size_t>> order;
        std::uint64_t enters = 0, leaves = 0, tails = 0;
        size_t used;
        {
            std::lock_guard<std::mutex> lock(mu_);
            used = names_.size();
        }
        order.reserve(used);
        for (size_t i = 0; i < used; ++i) {
            std::uint64_t e = g_slots[i].enters.load(std::memory_order_relaxed);
            enters += e;
            leaves += g_slots[i].leaves.load(std::memory_order_relaxed);
            tails += g_slots[i].tailcalls.load(std::memory_order_relaxed);
            if (e != 0) order.emplace_back(e, i);
        }
        std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        std::string top;
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (size_t k = 0; k < order.size() && k < 5; ++k) {
                if (!top.empty()) top += ", ";
                top += names_[order[k].second] + "=" + std::to_string(order[k].first);
            }
        }
        std::fprintf(stderr,
                     "call_counter: functions=%zu enters=%llu leaves=%llu tailcalls=%llu unhooked=%llu "
                     "name_failures=%llu bad_ids=%llu top=[%s]\n",
                     used, (unsigned long long)enters, (unsigned long long)leaves, (unsigned long long)tails,
                     (unsigned long long)unhooked_.load(), (unsigned long long)name_failures_.load(),
                     (unsigned long long)g_bad_client_ids.load(), top.c_str());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    HRESULT fail_init(const char* what, HRESULT hr) {
        std::fprintf(stderr, "[call_counter] %s failed 0x%08x\n", what, (unsigned)hr);
        info_->Release();
        info_ = nullptr;
        return hr;
    }

    static UINT_PTR MapFunctionId(FunctionID funcId, void* clientData, BOOL* pbHookFunction) {
        auto* self = static_cast<CallCounterProfiler*>(clientData);
        if (pbHookFunction != nullptr) *pbHookFunction = 0;
        if (self == nullptr || pbHookFunction == nullptr || self->shutdown_.load()) return funcId;
        return self->map(funcId, pbHookFunction);
    }

    UINT_PTR map(FunctionID funcId, BOOL* pbHookFunction) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = slot_of_.find(funcId);
            if (it != slot_of_.end()) {
                *pbHookFunction = 1;
                return it->second + 1;
            }
            if (names_.size() >= kMaxSlots) {
                ++unhooked_;
                return funcId;  // not hooked: *pbHookFunction stays FALSE
            }
        }
        // Resolve the name with no lock held (it calls into the runtime).
        std::string name = resolve_name(funcId);
        std::lock_guard<std::mutex> lock(mu_);
        auto it = slot_of_.find(funcId);  // another thread may have mapped it meanwhile
        if (it != slot_of_.end()) {
            *pbHookFunction = 1;
            return it->second + 1;
        }
        if (names_.size() >= kMaxSlots) {
            ++unhooked_;
            return funcId;
        }
        size_t slot = names_.size();
        names_.push_back(std::move(name));
        slot_of_.emplace(funcId, slot);
        *pbHookFunction = 1;
        return slot + 1;
    }

    std::string resolve_name(FunctionID funcId) {
        char fallback[40];
        std::snprintf(fallback, sizeof fallback, "fid:0x%llx", (unsigned long long)funcId);
        if (info_ == nullptr) return fallback;

        ClassID classId = 0;
        ModuleID moduleId = 0;
        mdToken token = 0;
        ULONG32 typeArgs = 0;
        // Only the generic-argument count is wanted: null buffer, size 0 (caller-allocated buffer rule).
        HRESULT hr = info_->GetFunctionInfo2(funcId, 0, &classId, &moduleId, &token, 0, &typeArgs, nullptr);
        if (failed(hr)) typeArgs = 0;  // not fatal: the token comes from GetTokenAndMetaDataFromFunction below

        IUnknown* unk = nullptr;
        mdToken methodDef = 0;
        hr = info_->GetTokenAndMetaDataFromFunction(funcId, IID_IMetaDataImport, &unk, &methodDef);
        if (failed(hr) || unk == nullptr) {
            ++name_failures_;
            return fallback;
        }
        auto* import = reinterpret_cast<IMetaDataImport*>(unk);
        std::string result = fallback;

        // Pass 1: length of the method name.
        mdTypeDef owner = 0;
        ULONG cch = 0;
        hr = import->GetMethodProps(methodDef, &owner, nullptr, 0, &cch, nullptr, nullptr, nullptr, nullptr, nullptr);
        if (succeeded(hr) && cch > 0) {
            // Pass 2: the name itself.
            std::vector<WCHAR> buf(cch + 1, 0);
            ULONG got = 0;
            hr = import->GetMethodProps(methodDef, &owner, buf.data(), cch, &got, nullptr, nullptr, nullptr, nullptr,
                                        nullptr);
            if (succeeded(hr)) {
                std::string method = to_utf8(buf.data(), std::min<ULONG>(got, cch));
                std::string type = type_name(import, owner);
                result = type.empty() ? method : type + "::" + method;
                if (typeArgs > 0) result += "<" + std::to_string(typeArgs) + ">";
            } else {
                ++name_failures_;
            }
        } else {
            ++name_failures_;
        }
        import->Release();
        return result;
    }

    static std::string type_name(IMetaDataImport* import, mdTypeDef td) {
        if (td == 0) return std::string();
        ULONG cch = 0;
        HRESULT hr = import->GetTypeDefProps(td, nullptr, 0, &cch, nullptr, nullptr);
        if (failed(hr) || cch == 0) return std::string();
        std::vector<WCHAR> buf(cch + 1, 0);
        ULONG got = 0;
        hr = import->GetTypeDefProps(td, buf.data(), cch, &got, nullptr, nullptr);
        if (failed(hr)) return std::string();
        return to_utf8(buf.data(), std::min<ULONG>(got, cch));
    }

    ICorProfilerInfo3* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::unordered_map<FunctionID, size_t> slot_of_;  // guarded by mu_
    std::vector<std::string> names_;                  // guarded by mu_; index == slot
    std::atomic<std::uint64_t> unhooked_{0};
    std::atomic<std::uint64_t> name_failures_{0};
};

DOCFIX_DEFINE_PROFILER(CallCounterProfiler)
