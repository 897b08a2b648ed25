// census_in_shutdown.cpp -- "JIT census": a cheap periodic census of the runtime's enumerators
// from a pthread of its own, and a one-time, fully named census for the final report.
//
// What it does
//   * Initialize: QueryInterface for ICorProfilerInfo4, SetEventMask(COR_PRF_MONITOR_NONE) (no
//     callbacks are needed: everything comes from enumerators), starts a pthread and waits until
//     that thread has called ICorProfilerInfo4::InitializeCurrentThread.
//   * The census thread wakes every 250 ms and records only counts: EnumModules, EnumJITedFunctions
//     and EnumThreads, each followed by ICorProfiler*Enum::GetCount and Release. Counting is cheap,
//     so it can run often; no ID obtained from an enumerator is ever used by this thread.
//   * Shutdown: stops and joins the census thread, then takes one final census in which every
//     module and JIT-compiled function is named (GetModuleInfo, GetFunctionInfo) -- naming is the
//     expensive part, so it is done once, at the end -- and prints the report.
//
// Documentation followed (learn.microsoft.com, .NET unmanaged profiling API reference):
//   * ICorProfilerCallback::Initialize: "Pointer to an IUnknown interface that the profiler must
//     query for an ICorProfilerInfo interface pointer."
//   * ICorProfilerInfo3::EnumModules / ICorProfilerInfo3::EnumJITedFunctions /
//     ICorProfilerInfo4::EnumThreads return enumerators; ...Enum::GetCount "Gets the number of
//     managed modules that were loaded into the application." (and the function / thread variants).
//     EnumJITedFunctions (not ...2) is used: "ICorProfilerInfo4::EnumJITedFunctions2 method can
//     trigger a garbage collection, whereas ICorProfilerInfo3::EnumJITedFunctions method will not."
//   * ...Enum::Next: "S_FALSE: Fewer than celt elements were returned, which indicates that the
//     enumeration is complete."; ...Enum::Reset: "Moves the enumerator's cursor to the starting
//     position of the sequence."; ...Enum::Skip: "The new position of this enumerator's cursor is
//     (current position) + celt."; ...Enum::Clone: "the copy's initial cursor position is the same
//     as this enumerator's current cursor position."
//   * ICorProfilerInfo::GetModuleInfo: "When GetModuleInfo returns, you must verify that the szName
//     buffer was large enough to contain the full file name of the module. ... If pcchName points to
//     a value that is larger than cchName, allocate a larger szName buffer, update cchName with the
//     new, larger size, and call GetModuleInfo again."
//   * ICorProfilerInfo4::InitializeCurrentThread: "We recommend that you call
//     InitializeCurrentThread on any thread that will call a profiler API while there are suspended
//     threads." / "Call InitializeCurrentThread only when there are no suspended threads."
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called."   <-- broken once, see BUG.
//
// ICorProfilerFunctionEnum and COR_PRF_FUNCTION are declared below from corprof.idl (vtable:
// IUnknown, Skip, Reset, Clone, GetCount, Next; IID FF71301A-B994-429D-A10B-B345A65280EF); the
// kit's headers only forward-declare the interface.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <map>
#include <vector>

#include "common.h"

namespace profharness {
struct COR_PRF_FUNCTION {
    FunctionID functionId;
    ReJITID reJitId;
};
struct ICorProfilerFunctionEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerFunctionEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, COR_PRF_FUNCTION ids[], ULONG* pceltFetched) = 0;
};
}  // namespace profharness

using namespace docfix;

#define CENSUS "[jit-census]"

struct CensusSample {
    ULONG modules, functions, threads;
};

struct FinalCensus {
    unsigned modules = 0, functions = 0, threads = 0;
    std::map<std::string, unsigned> perModule;  // module file name -> JIT-compiled functions
    HRESULT firstError = S_OK;
};

static void sleep_ms(unsigned ms) {
    struct timespec ts = {static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000L)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static std::string module_file(ICorProfilerInfo4* info, ModuleID mid) {
    WCHAR name[128];
    ULONG len = 0;
    LPCBYTE base = nullptr;
    AssemblyID asmId = 0;
    if (failed(info->GetModuleInfo(mid, &base, 128, &len, name, &asmId))) return "?";
    std::string s;
    if (len > 128) {  // did not fit: ask again with the size the runtime reported
        std::vector<WCHAR> big(len);
        ULONG len2 = 0;
        if (failed(info->GetModuleInfo(mid, &base, len, &len2, big.data(), &asmId))) return "?";
        s = to_utf8(big.data(), std::min(len, len2));
    } else {
        s = to_utf8(name, len);
    }
    size_t slash = s.rfind('/');
    return slash == std::string::npos ? s : s.substr(slash + 1);
}

class JitCensusProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) {
            std::fprintf(stderr, CENSUS " ICorProfilerInfo4 unavailable (0x%08x)\n", (unsigned)hr);
            return hr;
        }
        hr = info_->SetEventMask(COR_PRF_MONITOR_NONE);
        if (failed(hr)) {
            std::fprintf(stderr, CENSUS " SetEventMask failed 0x%08x\n", (unsigned)hr);
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        pthread_mutex_init(&lock_, nullptr);
        pthread_cond_init(&ready_cv_, nullptr);
        if (pthread_create(&thread_, nullptr, &JitCensusProfiler::ThreadMain, this) == 0) {
            have_thread_ = true;
            pthread_mutex_lock(&lock_);
            while (!ready_) pthread_cond_wait(&ready_cv_, &lock_);
            pthread_mutex_unlock(&lock_);
        }
        std::fprintf(stderr, CENSUS " started\n");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_.store(true);
        if (have_thread_) pthread_join(thread_, nullptr);  // the census thread makes no more calls

        FinalCensus fc;
        if (info_ != nullptr) {
            // The final, fully named census calls EnumModules/EnumJITedFunctions/EnumThreads, the
            // enumerators' GetCount/Next/Clone/Skip/Reset, GetModuleInfo and GetFunctionInfo from
            // inside Shutdown. ICorProfilerCallback::Shutdown: "The profiler code cannot safely call
            // methods of the ICorProfilerInfo interface after the Shutdown method is called."
            TakeFinalCensus(fc);  // BUG: ICorProfilerInfo calls made from inside Shutdown (see above)
        }
        Report(fc);
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    static void* ThreadMain(void* self) {
        static_cast<JitCensusProfiler*>(self)->Run();
        return nullptr;
    }

    void Run() {
        HRESULT hr = info_->InitializeCurrentThread();  // no managed code has run yet: nothing is suspended
        if (failed(hr)) std::fprintf(stderr, CENSUS " InitializeCurrentThread 0x%08x\n", (unsigned)hr);
        pthread_mutex_lock(&lock_);
        ready_ = true;
        pthread_cond_signal(&ready_cv_);
        pthread_mutex_unlock(&lock_);

        while (!stop_.load()) {
            for (int slice = 0; slice < 25 && !stop_.load(); ++slice) sleep_ms(10);
            if (stop_.load()) break;
            CensusSample s{0, 0, 0};
            if (!CountModules(&s.modules) || stop_.load()) break;
            if (!CountFunctions(&s.functions) || stop_.load()) break;
            if (!CountThreads(&s.threads)) break;
            samples_.push_back(s);
        }
    }

    bool CountModules(ULONG* n) {
        ICorProfilerModuleEnum* e = nullptr;
        if (failed(info_->EnumModules(&e)) || e == nullptr) return false;
        HRESULT hr = e->GetCount(n);
        e->Release();
        return succeeded(hr);
    }
    bool CountFunctions(ULONG* n) {
        ICorProfilerFunctionEnum* e = nullptr;
        if (failed(info_->EnumJITedFunctions(&e)) || e == nullptr) return false;
        HRESULT hr = e->GetCount(n);
        e->Release();
        return succeeded(hr);
    }
    bool CountThreads(ULONG* n) {
        ICorProfilerThreadEnum* e = nullptr;
        if (failed(info_->EnumThreads(&e)) || e == nullptr) return false;
        HRESULT hr = e->GetCount(n);
        e->Release();
        return succeeded(hr);
    }

    void Note(FinalCensus& fc, HRESULT hr) {
        if (failed(hr) && succeeded(fc.firstError)) fc.firstError = hr;
    }

    void TakeFinalCensus(FinalCensus& fc) {
        // Modules: name each one once; keep a ModuleID -> file name map for the functions below.
        std::map<ModuleID, std::string> files;
        ICorProfilerModuleEnum* me = nullptr;
        HRESULT hr = info_->EnumModules(&me);
        Note(fc, hr);
        if (succeeded(hr) && me != nullptr) {
            ModuleID ids[8];
            ULONG got = 0;
            do {
                hr = me->Next(8, ids, &got);
                Note(fc, hr);
                for (ULONG i = 0; i < got && i < 8; ++i) {
                    files[ids[i]] = module_file(info_, ids[i]);
                    ++fc.modules;
                }
            } while (hr == S_OK);
            me->Release();
        }

        // Functions: walk a clone from the start (the original is used to check the count).
        ICorProfilerFunctionEnum* fe = nullptr;
        hr = info_->EnumJITedFunctions(&fe);
        Note(fc, hr);
        if (succeeded(hr) && fe != nullptr) {
            ULONG total = 0;
            Note(fc, fe->GetCount(&total));
            ICorProfilerFunctionEnum* walk = nullptr;
            hr = fe->Clone(&walk);
            Note(fc, hr);
            if (succeeded(hr) && walk != nullptr) {
                COR_PRF_FUNCTION fns[64];
                ULONG got = 0;
                do {
                    hr = walk->Next(64, fns, &got);
                    Note(fc, hr);
                    for (ULONG i = 0; i < got && i < 64; ++i) {
                        ClassID cls = 0;
                        ModuleID mid = 0;
                        mdToken tok = 0;
                        if (succeeded(info_->GetFunctionInfo(fns[i].functionId, &cls, &mid, &tok))) {
                            auto f = files.find(mid);
                            ++fc.perModule[f != files.end() ? f->second : std::string("?")];
                        }
                        ++fc.functions;
                    }
                } while (hr == S_OK);
                walk->Release();
            }
            // Cross-check the end of the sequence on the original enumerator: skipping exactly
            // GetCount elements must leave nothing to read.
            COR_PRF_FUNCTION extra;
            ULONG more = 0;
            if (fe->Skip(total) == S_OK && fe->Next(1, &extra, &more) == S_FALSE && more == 0) {
                Note(fc, fe->Reset());
            }
            fe->Release();
        }

        // Threads: count what is still alive at the end.
        ULONG threads = 0;
        if (CountThreads(&threads)) fc.threads = threads;
    }

    void Report(const FinalCensus& fc) {
        ULONG peakM = 0, peakF = 0, peakT = 0;
        for (const CensusSample& s : samples_) {
            peakM = std::max(peakM, s.modules);
            peakF = std::max(peakF, s.functions);
            peakT = std::max(peakT, s.threads);
        }
        std::fprintf(stderr, CENSUS " periodic samples=%zu peak modules=%u functions=%u threads=%u\n",
                     samples_.size(), (unsigned)peakM, (unsigned)peakF, (unsigned)peakT);
        std::vector<std::pair<unsigned, std::string>> top;
        for (auto& kv : fc.perModule) top.push_back({kv.second, kv.first});
        std::sort(top.rbegin(), top.rend());
        std::string tops;
        for (size_t i = 0; i < top.size() && i < 3; ++i)
            tops += (i ? ", " : "") + top[i].second + "=" + std::to_string(top[i].first);
        std::fprintf(stderr, CENSUS " final census: modules=%u jit entries=%u threads=%u (first error 0x%08x) top: %s\n",
                     fc.modules, fc.functions, fc.threads, (unsigned)fc.firstError, tops.empty() ? "-" : tops.c_str());
    }

    ICorProfilerInfo4* info_ = nullptr;
    pthread_t thread_{};
    bool have_thread_ = false;
    pthread_mutex_t lock_;
    pthread_cond_t ready_cv_;
    bool ready_ = false;
    std::atomic<bool> stop_{false};
    std::vector<CensusSample> samples_;  // census thread only; read after pthread_join
};

DOCFIX_DEFINE_PROFILER(JitCensusProfiler)
