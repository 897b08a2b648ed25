// rejit_control_body: a ReJIT rewriter (issue 25 part 5, the proxy's function-control side). The app's own
// methods are queued in JITCompilationStarted; a thread the profiler starts in Initialize asks RequestReJIT for
// them every 20 ms (the documented way: not from a callback); GetReJITParameters hands each method its body
// with "ldc.i4 <id>; pop" put before the code, through ICorProfilerFunctionControl::SetILFunctionBody, in a
// heap block (the runtime copies it). Bodies with extra sections are left alone (the original is recompiled).
// With REJIT_CONTROL_BAD=1 its prologue is a guard whose brfalse.s skips 3 bytes, into the middle of the next
// ldc.i4's operand: IL-BRANCH-MID-INSTRUCTION at its SetILFunctionBody call.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fixture.h"
#include "profharness/interfaces.h"

using namespace fixture;

namespace {

class RejitControlBody final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        const char* bad = std::getenv("REJIT_CONTROL_BAD");
        bad_ = bad && std::strcmp(bad, "1") == 0;
        HRESULT hr = take_info(unk, COR_PRF_ENABLE_REJIT | COR_PRF_MONITOR_JIT_COMPILATION);
        if (hr != S_OK) return hr;
        std::thread([this] { Requester(); }).detach();
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE Shutdown() override {
        stop_.store(true);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID f, BOOL) override {
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken token = 0;
        if (info->GetFunctionInfo(f, &cls, &mod, &token) != S_OK || !is_app(mod)) return S_OK;
        std::lock_guard<std::mutex> lock(mu_);
        if (seen_.insert({mod, token}).second) pending_.push_back({mod, token});
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID mod, mdMethodDef method,
                                                 ICorProfilerFunctionControl* control) override {
        LPCBYTE body = nullptr;
        ULONG size = 0;
        if (info->GetILFunctionBody(mod, method, &body, &size) != S_OK || !body || !size) return S_OK;
        std::vector<unsigned char> fresh;
        if (!WithPrologue(body, size, fresh)) return S_OK;
        auto* block = new unsigned char[fresh.size()];  // the runtime copies it; kept anyway
        std::memcpy(block, fresh.data(), fresh.size());
        control->SetILFunctionBody(static_cast<ULONG>(fresh.size()), block);
        return S_OK;
    }

 private:
    void Requester() {
        while (!stop_.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            std::vector<std::pair<ModuleID, mdToken>> batch;
            {
                std::lock_guard<std::mutex> lock(mu_);
                batch.swap(pending_);
            }
            if (batch.empty()) continue;
            std::vector<ModuleID> mods;
            std::vector<mdMethodDef> tokens;
            for (auto& [m, t] : batch) {
                mods.push_back(m);
                tokens.push_back(t);
            }
            info->RequestReJIT(static_cast<ULONG>(mods.size()), mods.data(), tokens.data());
        }
    }

    // A fat body: the prologue, then the original code (tiny or fat without extra sections).
    bool WithPrologue(const unsigned char* h, ULONG size, std::vector<unsigned char>& out) {
        std::uint32_t code_size = 0, local_sig = 0, max_stack = 8;
        std::uint16_t flags = 0;
        const unsigned char* code = nullptr;
        if ((h[0] & 3) == 2) {
            code_size = h[0] >> 2;
            code = h + 1;
        } else {
            if (size < 12) return false;
            flags = static_cast<std::uint16_t>((h[0] | (h[1] << 8)) & 0x0FFF);
            if (flags & 0x8) return false;  // extra sections: left alone
            max_stack = static_cast<std::uint32_t>(h[2] | (h[3] << 8));
            std::memcpy(&code_size, h + 4, 4);
            std::memcpy(&local_sig, h + 8, 4);
            code = h + 4 * (h[1] >> 4);
        }
        const std::uint32_t id = 0x7E570000u | (++probes_ & 0xFFFFu);
        std::vector<unsigned char> prologue = {0x20, 0, 0, 0, 0, 0x26};  // ldc.i4 id; pop
        std::memcpy(prologue.data() + 1, &id, 4);
        if (bad_) {  // ldc.i4 1; brfalse.s +3 (stale: the skip of an ldc.i4.s prologue); ldc.i4 id; pop
            prologue = {0x20, 1, 0, 0, 0, 0x2C, 3, 0x20, 0, 0, 0, 0, 0x26};
            std::memcpy(prologue.data() + 8, &id, 4);
        }
        const std::uint32_t new_size = code_size + static_cast<std::uint32_t>(prologue.size());
        out.assign(12, 0);
        const std::uint16_t first = static_cast<std::uint16_t>(0x3003 | (flags & 0x10));
        std::memcpy(out.data(), &first, 2);
        const std::uint16_t stack = static_cast<std::uint16_t>(max_stack < 1 ? 1 : max_stack);
        std::memcpy(out.data() + 2, &stack, 2);
        std::memcpy(out.data() + 4, &new_size, 4);
        std::memcpy(out.data() + 8, &local_sig, 4);
        out.insert(out.end(), prologue.begin(), prologue.end());
        out.insert(out.end(), code, code + code_size);
        return true;
    }

    bool is_app(ModuleID mod) {
        WCHAR name[512];
        ULONG n = 0;
        LPCBYTE base = nullptr;
        AssemblyID assembly = 0;
        if (info->GetModuleInfo(mod, &base, 512, &n, name, &assembly) != S_OK || n == 0) return false;
        std::u16string path(reinterpret_cast<const char16_t*>(name), n - 1);
        return path.size() >= 8 && path.compare(path.size() - 8, 8, u"/app.dll") == 0;
    }

    std::mutex mu_;
    std::set<std::pair<ModuleID, mdToken>> seen_;
    std::vector<std::pair<ModuleID, mdToken>> pending_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint32_t> probes_{0};
    bool bad_ = false;
};

}  // namespace

FIXTURE_EXPORT(RejitControlBody)
