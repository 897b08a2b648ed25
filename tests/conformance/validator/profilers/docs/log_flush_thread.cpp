// log_flush_thread.cpp -- module-load logger built on a tiny buffered logging library of its own.
//
// What it does:
//   * A minimal logging library (BufferedLog): callers append lines to an in-memory buffer under a
//     mutex; a background std::thread, started in Initialize, swaps the buffer out every 20 ms and
//     writes it to the log file.  The thread is detached and runs until the process exits, as the
//     flusher threads of many logging libraries do.  It NEVER calls the profiling API: it only
//     touches its own buffer and the file.  The logger object is intentionally never destroyed so
//     the detached thread can never see it torn down during process exit.
//   * The profiler sets COR_PRF_MONITOR_MODULE_LOADS and, for each successful ModuleLoadFinished,
//     gets the module's file name with ICorProfilerInfo::GetModuleInfo using the double-pass
//     caller-allocated-buffer protocol, and logs it.
//   * Shutdown logs a last line, flushes synchronously, prints a one-line summary to stderr and
//     releases ICorProfilerInfo.  Believed CORRECT.
//   Log file: $DOCFIX_LOG if set, else /tmp/docfix_log_flush_thread.<pid>.log
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * Caller-Allocated Buffers in the Profiling API (spec/caller-allocated-buffers.md):
//     "Double-pass method: Alternatively, call the method two times. First call with a zero-length
//     InfoBuffer parameter to obtain the correct buffer size. Then set the buffer size to the value
//     returned in pcBufferMax and call the function again."  "If InfoBuffer is null,
//     cBufferSizeStart must be 0."
//   * ICorProfilerInfo::GetModuleInfo: "When GetModuleInfo returns, you must verify that the
//     szName buffer was large enough to contain the full file name of the module. To do this,
//     compare the value that pcchName points to with the value of the cchName parameter."
//     "Although the GetModuleInfo method may be called as soon as the module's ID exists, the ID
//     of the parent assembly will not be available until the profiler receives the
//     ICorProfilerCallback::ModuleAttachedToAssembly callback."  (The assembly ID is requested but
//     not relied upon.)
//   * ICorProfilerCallback::ModuleLoadFinished: "The value of moduleId is not valid for an
//     information request until the ModuleLoadFinished method is called."  "A failure HRESULT in
//     hrStatus indicates a failure."
//   * ICorProfilerCallback::Shutdown: "The profiler code cannot safely call methods of the
//     ICorProfilerInfo interface after the Shutdown method is called." -- the flusher thread never
//     calls them at all, so it may keep running after Shutdown; Shutdown itself only Releases.
//     "In general, the profiler must cope with unexpected shutdowns." -- hence the periodic flush.
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

using namespace docfix;

namespace logflush {

// ------------------------------------------------------------------ the logging "library"
class BufferedLog {
public:
    explicit BufferedLog(const std::string& path) : path_(path) { file_ = std::fopen(path.c_str(), "w"); }

    bool ok() const { return file_ != nullptr; }
    const std::string& path() const { return path_; }

    void Start(std::chrono::milliseconds period) {
        std::thread([this, period] {
            for (;;) {
                std::this_thread::sleep_for(period);
                FlushOnce();
            }
        }).detach();
    }

    void Line(const std::string& s) {
        std::lock_guard<std::mutex> g(mu_);
        pending_ += s;
        pending_ += '\n';
        ++lines_;
    }

    void FlushOnce() {
        std::string out;
        {
            std::lock_guard<std::mutex> g(mu_);
            out.swap(pending_);
        }
        std::lock_guard<std::mutex> g(fileMu_);
        if (file_ == nullptr || out.empty()) return;
        std::fwrite(out.data(), 1, out.size(), file_);
        std::fflush(file_);
        ++flushes_;
    }

    unsigned long lines() {
        std::lock_guard<std::mutex> g(mu_);
        return lines_;
    }
    unsigned long flushes() {
        std::lock_guard<std::mutex> g(fileMu_);
        return flushes_;
    }

private:
    std::string path_;
    std::FILE* file_ = nullptr;
    std::mutex mu_;      // guards pending_, lines_
    std::mutex fileMu_;  // guards file_ writes, flushes_
    std::string pending_;
    unsigned long lines_ = 0;
    unsigned long flushes_ = 0;
};

// ------------------------------------------------------------------ the profiler
class LogFlushProfiler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo, reinterpret_cast<void**>(&info_));
        if (failed(hr)) return hr;
        hr = info_->SetEventMask(COR_PRF_MONITOR_MODULE_LOADS);
        if (failed(hr)) {
            info_->Release();
            info_ = nullptr;
            return hr;
        }
        const char* env = std::getenv("DOCFIX_LOG");
        std::string path = env != nullptr ? env : "/tmp/docfix_log_flush_thread." + std::to_string(getpid()) + ".log";
        log_ = new BufferedLog(path);  // never deleted: the detached flusher may outlive everything
        log_->Line("log_flush_thread: profiler initialized, pid " + std::to_string(getpid()));
        log_->Start(std::chrono::milliseconds(20));
        std::fprintf(stderr, "[log_flush_thread] initialized, logging to %s%s\n", path.c_str(),
                     log_->ok() ? "" : " (open failed)");
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID moduleId, HRESULT hrStatus) override {
        if (shutdown_.load()) return S_OK;
        if (failed(hrStatus)) {
            log_->Line("module load failed");
            return S_OK;
        }
        // Double pass: size first, then the name.
        LPCBYTE base = nullptr;
        ULONG needed = 0;
        AssemblyID assembly = 0;
        HRESULT hr = info_->GetModuleInfo(moduleId, &base, 0, &needed, nullptr, &assembly);
        if (failed(hr) || needed == 0) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "module %#lx: GetModuleInfo(size) -> 0x%08x", (unsigned long)moduleId,
                          (unsigned)hr);
            log_->Line(buf);
            ++nameFailures_;
            return S_OK;
        }
        std::vector<WCHAR> name(needed);
        ULONG got = 0;
        hr = info_->GetModuleInfo(moduleId, &base, needed, &got, name.data(), &assembly);
        if (failed(hr) || got > needed) {
            ++nameFailures_;
            return S_OK;
        }
        ++modules_;
        log_->Line("module loaded: " + to_utf8(name.data(), got));
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_.store(true);
        log_->Line("log_flush_thread: shutdown, " + std::to_string(modules_.load()) + " modules");
        log_->FlushOnce();
        std::fprintf(stderr, "[log_flush_thread] summary: modules=%lu name_failures=%lu log_lines=%lu flushes=%lu file=%s\n",
                     modules_.load(), nameFailures_.load(), log_->lines(), log_->flushes(), log_->path().c_str());
        if (info_ != nullptr) {
            info_->Release();
            info_ = nullptr;
        }
        return S_OK;
    }

private:
    ICorProfilerInfo* info_ = nullptr;
    BufferedLog* log_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::atomic<unsigned long> modules_{0}, nameFailures_{0};
};

}  // namespace logflush

DOCFIX_DEFINE_PROFILER(logflush::LogFlushProfiler)
