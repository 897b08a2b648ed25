// The trace writer of profharness_common (include/profharness/trace.h).
#include "profharness/trace.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace profharness {

namespace {

// "record:<N>:<KILL|SEGV|ABRT>" -> (N, signal); anything else: no fault.
void parse_fault(const char* text, std::int64_t& record, int& sig) {
    record = -1;
    sig = 0;
    if (text == nullptr || std::strncmp(text, "record:", 7) != 0) return;
    char* end = nullptr;
    const long long n = std::strtoll(text + 7, &end, 10);
    if (end == text + 7 || *end != ':' || n < 0) return;
    const std::string name(end + 1);
    const int s = name == "KILL" ? SIGKILL : name == "SEGV" ? SIGSEGV : name == "ABRT" ? SIGABRT : 0;
    if (s == 0) return;
    record = n;
    sig = s;
}

// PROFHARNESS_TRACE_MAX_BYTES: unset or empty -> the default; a positive decimal -> it; else false.
bool parse_max_bytes(const char* text, std::uint64_t& out) {
    out = TraceWriter::kDefaultMaxBytes;
    if (text == nullptr || *text == '\0') return true;
    std::uint64_t value = 0;
    for (const char* c = text; *c; ++c) {
        if (*c < '0' || *c > '9') return false;
        const std::uint64_t digit = static_cast<std::uint64_t>(*c - '0');
        if (value > (UINT64_MAX - digit) / 10) return false;
        value = value * 10 + digit;
    }
    if (value == 0) return false;
    out = value;
    return true;
}

}  // namespace

bool TraceWriter::open(const char* path, std::string& error) {
    const char* max_text = std::getenv("PROFHARNESS_TRACE_MAX_BYTES");
    if (!parse_max_bytes(max_text, max_bytes_)) {
        error = std::string("PROFHARNESS_TRACE_MAX_BYTES=") + max_text + " is not a positive byte count";
        return false;
    }
    path_ = path;
    bytes_ = 0;
    capped_.store(false);
    const int previous = fd_;  // a profiler initialized again in one process (the fuzzer's reused child)
    fd_ = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (previous >= 0) ::close(previous);
    if (fd_ < 0) {
        error = std::string("cannot create trace ") + path + ": " + std::strerror(errno);
        return false;
    }
    parse_fault(std::getenv("PROFHARNESS_FAULT"), fault_record_, fault_signal_);
    return true;
}

std::string TraceWriter::line(const char* kind, const std::string& tail, long os_tid, const Json& tid) const {
    std::string head;
    head.reserve(tail.size() + 96);
    head += "{\"seq\":";
    head += std::to_string(next_seq_);
    head += ",\"kind\":";
    json_escape(kind, head);
    head += ",\"os_tid\":";
    head += std::to_string(os_tid);
    head += ",\"tid\":";
    tid.dump(head);
    finish_record_line(head, tail);
    return head;
}

void finish_record_line(std::string& head, const std::string& tail) {
    if (tail.size() > 2) {
        head.push_back(',');
        head.append(tail, 1, std::string::npos);
    } else {
        head.push_back('}');
    }
    head.push_back('\n');
}

bool TraceWriter::write_all(const char* p, std::size_t left) {
    while (left > 0) {
        const ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
        bytes_ += static_cast<std::uint64_t>(n);
    }
    return true;
}

void TraceWriter::write(const char* kind, const Json& fields) {
    if (fd_ < 0 || capped_.load(std::memory_order_relaxed)) return;
    const long os_tid = static_cast<long>(::syscall(SYS_gettid));
    Json tid = managed_thread_ ? managed_thread_() : Json();
    std::string tail;
    fields.dump(tail);  // "{...}", outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    if (capped_.load(std::memory_order_relaxed)) return;
    const std::string head = line(kind, tail, os_tid, tid);
    if (bytes_ + head.size() > max_bytes_) {
        // The size cap: one notice in place of this record, then nothing more.
        Json notice = Json::object();
        notice.set("what", "trace size cap reached: " + path_ + " stops at " + std::to_string(bytes_) +
                               " bytes, the cap is " + std::to_string(max_bytes_) +
                               " (PROFHARNESS_TRACE_MAX_BYTES); later records are not written");
        notice.set("where", "trace");
        notice.set("cap", Json(max_bytes_));
        notice.set("bytes", Json(bytes_));
        std::string notice_text;
        notice.dump(notice_text);
        const std::string text = line("probe_error", notice_text, os_tid, tid);
        capped_.store(true);
        if (write_all(text.data(), text.size())) {
            ++next_seq_;
            written_.fetch_add(1);
        }
        return;
    }
    if (next_seq_ == fault_record_) {
        const char* p = head.data();
        std::size_t left = head.size() / 2;  // die in the middle of this record (PROFHARNESS_FAULT)
        while (left > 0) {
            const ssize_t n = ::write(fd_, p, left);
            if (n <= 0) break;
            p += n;
            left -= static_cast<std::size_t>(n);
        }
        ::signal(fault_signal_, SIG_DFL);
        ::raise(fault_signal_);
        ::_exit(128 + fault_signal_);
    }
    if (!write_all(head.data(), head.size())) return;
    ++next_seq_;
    written_.fetch_add(1);
}

}  // namespace profharness
