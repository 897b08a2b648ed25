// rejit_failures: a ReJIT client that mishandles the failures the ReJIT pages report, one mistake chosen by
// PROFHARNESS_FIXTURE_MISTAKE:
//   * "error": it asks for the recompilation of each compiled method's class token as well as the method's
//     (an invalid methodDef token: a TypeDef), and its ReJITError names the failed function with
//     GetFunctionInfo(functionId) -- but the page says the functionId "may be NULL if the failure occurred
//     on a per-method basis instead of a per-instantiation basis (for example, if the profiler specified an
//     invalid metadata token for the method to be recompiled)" (REJIT-29);
//   * "revert": after each request it reverts what it asked for with RequestRevert(..., status = NULL) --
//     but "the returned status array must be checked to determine which functions were successfully
//     reverted" (REJIT-17).
// PROFHARNESS_FIXTURE_CHECKED=1 makes either correct: ReJITError tests functionId for NULL; RequestRevert
// gets a status array, read back.
// Requests are made from a thread of its own (RequestReJIT's page: "from a thread it previously created").
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "fixture.h"

using namespace fixture;

namespace {

using Key = std::pair<ModuleID, mdMethodDef>;

class ReJITFailures final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        const char* mistake = std::getenv("PROFHARNESS_FIXTURE_MISTAKE");
        revert_ = mistake != nullptr && std::strcmp(mistake, "revert") == 0;
        checked_ = std::getenv("PROFHARNESS_FIXTURE_CHECKED") != nullptr;
        const HRESULT hr = take_info(unk, COR_PRF_ENABLE_REJIT | COR_PRF_MONITOR_JIT_COMPILATION |
                                              COR_PRF_MONITOR_MODULE_LOADS);
        if (hr != S_OK) return hr;
        worker_ = std::thread([this] { requests(); });
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID fid, HRESULT status, BOOL) override {
        if (status < 0) return S_OK;
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        if (info->GetFunctionInfo(fid, &cls, &mod, &tok) != S_OK || tok == 0) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        if (stop_ || seen_.size() >= kMethods || !seen_.insert({mod, tok}).second) return S_OK;
        queue_.push_back({mod, tok});
        if (!revert_) {
            ModuleID class_module = 0;
            mdTypeDef type = 0;
            if (cls && info->GetClassIDInfo(cls, &class_module, &type) == S_OK && type) queue_.push_back({mod, type});
        }
        cv_.notify_one();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ReJITError(ModuleID, mdMethodDef, FunctionID functionId, HRESULT) override {
        if (checked_ && functionId == 0) {
            ++per_method_;  // a per-method failure: (moduleId, methodId) is all there is
            return S_OK;
        }
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        info->GetFunctionInfo(functionId, &cls, &mod, &tok);  // to name the function in its log
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
        return S_OK;
    }

 private:
    static constexpr std::size_t kMethods = 4;

    void requests() {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            std::vector<Key> batch;
            batch.swap(queue_);
            lock.unlock();
            std::vector<ModuleID> modules;
            std::vector<mdMethodDef> methods;
            for (const Key& k : batch) {
                modules.push_back(k.first);
                methods.push_back(k.second);
            }
            const auto n = static_cast<ULONG>(batch.size());
            if (info->RequestReJIT(n, modules.data(), methods.data()) == S_OK && revert_) {
                std::vector<HRESULT> statuses(n, S_OK);
                info->RequestRevert(n, modules.data(), methods.data(), checked_ ? statuses.data() : nullptr);
                for (HRESULT h : statuses) failed_reverts_ += h < 0 ? 1 : 0;
            }
            lock.lock();
        }
    }

    bool revert_ = false, checked_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Key> queue_;
    std::set<Key> seen_;
    bool stop_ = false;
    std::thread worker_;
    unsigned long per_method_ = 0, failed_reverts_ = 0;
};

}  // namespace

FIXTURE_EXPORT(ReJITFailures)
