// The trace writer of profharness_common (include/profharness/trace.h).
#include "profharness/trace.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace profharness {

bool TraceWriter::open(const char* path, std::string& error) {
    fd_ = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        error = std::string("cannot create trace ") + path + ": " + std::strerror(errno);
        return false;
    }
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
