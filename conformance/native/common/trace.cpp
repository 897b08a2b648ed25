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

}  // namespace

bool TraceWriter::open(const char* path, std::string& error) {
    fd_ = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        error = std::string("cannot create trace ") + path + ": " + std::strerror(errno);
        return false;
    }
    parse_fault(std::getenv("PROFHARNESS_FAULT"), fault_record_, fault_signal_);
    return true;
}

void TraceWriter::write(const char* kind, const Json& fields) {
    if (fd_ < 0) return;
    const long os_tid = static_cast<long>(::syscall(SYS_gettid));
    Json tid = managed_thread_ ? managed_thread_() : Json();
    std::string tail;
    fields.dump(tail);  // "{...}"
    std::string head;
    head.reserve(tail.size() + 96);
    std::lock_guard<std::mutex> lock(mu_);
    head += "{\"seq\":";
    head += std::to_string(next_seq_);
    head += ",\"kind\":";
    json_escape(kind, head);
    head += ",\"os_tid\":";
    head += std::to_string(os_tid);
    head += ",\"tid\":";
    tid.dump(head);
    if (tail.size() > 2) {
        head.push_back(',');
        head.append(tail, 1, std::string::npos);
    } else {
        head.push_back('}');
    }
    head.push_back('\n');
    const char* p = head.data();
    std::size_t left = head.size();
    if (next_seq_ == fault_record_) {
        left /= 2;  // die in the middle of this record (PROFHARNESS_FAULT)
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
    while (left > 0) {
        ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    ++next_seq_;
    written_.fetch_add(1);
}

}  // namespace profharness
