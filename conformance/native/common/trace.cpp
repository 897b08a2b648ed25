// The trace writer of profharness_common (include/profharness/trace.h).
#include "profharness/trace.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

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

std::string TraceWriter::line(std::int64_t seq, const char* kind, const std::string& tail, long os_tid,
                              const Json& tid) const {
    std::string head;
    head.reserve(tail.size() + 96);
    head += "{\"seq\":";
    head += std::to_string(seq);
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

// Formats one record onto `out` (the caller writes `out`): the cap's notice in its place when it would take
// the file past the cap (false: stop), the fault (writes `out`, then half of this record, and dies).
bool TraceWriter::emit(Pending& p, std::string& out) {
    if (p.make) p.fields = p.make();
    std::string tail;
    p.fields.dump(tail);
    const std::string head = line(p.seq, p.kind, tail, p.os_tid, p.tid);
    if (bytes_ + out.size() + head.size() > max_bytes_) {
        // The size cap: one notice in place of this record, then nothing more.
        const std::uint64_t at = bytes_ + out.size();
        Json notice = Json::object();
        notice.set("what", "trace size cap reached: " + path_ + " stops at " + std::to_string(at) +
                               " bytes, the cap is " + std::to_string(max_bytes_) +
                               " (PROFHARNESS_TRACE_MAX_BYTES); later records are not written");
        notice.set("where", "trace");
        notice.set("cap", Json(max_bytes_));
        notice.set("bytes", Json(at));
        std::string notice_text;
        notice.dump(notice_text);
        out += line(p.seq, "probe_error", notice_text, p.os_tid, p.tid);
        capped_.store(true);
        return false;
    }
    if (p.seq == fault_record_) {
        write_all(out.data(), out.size());
        const char* q = head.data();
        std::size_t left = head.size() / 2;  // die in the middle of this record (PROFHARNESS_FAULT)
        while (left > 0) {
            const ssize_t n = ::write(fd_, q, left);
            if (n <= 0) break;
            q += n;
            left -= static_cast<std::size_t>(n);
        }
        ::signal(fault_signal_, SIG_DFL);
        ::raise(fault_signal_);
        ::_exit(128 + fault_signal_);
    }
    out += head;
    return true;
}

void TraceWriter::write(const char* kind, const Json& fields) {
    if (fd_ < 0 || capped_.load(std::memory_order_relaxed)) return;
    if (buffered_.load(std::memory_order_relaxed)) {
        enqueue(kind, Json(fields), nullptr);
        return;
    }
    const long os_tid = static_cast<long>(::syscall(SYS_gettid));
    Json tid = managed_thread_ ? managed_thread_() : Json();
    std::string tail;
    fields.dump(tail);  // "{...}", outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    if (capped_.load(std::memory_order_relaxed)) return;
    Pending p{next_seq_, kind, os_tid, std::move(tid), Json(), nullptr};
    // emit() formats p.fields: hand it the dumped tail's source instead of dumping twice
    std::string out;
    const std::string head = line(p.seq, kind, tail, os_tid, p.tid);
    if (bytes_ + head.size() > max_bytes_ || p.seq == fault_record_) {
        p.fields = fields;
        const bool go_on = emit(p, out);
        if (write_all(out.data(), out.size())) {
            ++next_seq_;
            written_.fetch_add(1);
        }
        (void)go_on;
        return;
    }
    if (!write_all(head.data(), head.size())) return;
    ++next_seq_;
    written_.fetch_add(1);
}

void TraceWriter::write(const char* kind, Json&& fields) {
    if (buffered_.load(std::memory_order_relaxed)) {
        if (fd_ < 0 || capped_.load(std::memory_order_relaxed)) return;
        enqueue(kind, std::move(fields), nullptr);
        return;
    }
    write(kind, static_cast<const Json&>(fields));
}

void TraceWriter::write_deferred(const char* kind, FieldsFn fields) {
    if (fd_ < 0 || capped_.load(std::memory_order_relaxed)) return;
    if (buffered_.load(std::memory_order_relaxed)) {
        enqueue(kind, Json(), std::move(fields));
        return;
    }
    write(kind, fields());
}

// --- buffered mode ------------------------------------------------------------------------------------------

namespace {
struct TlsBuffer {
    const void* owner = nullptr;
    void* buffer = nullptr;
};
thread_local TlsBuffer tl_buffer;

std::vector<TraceWriter*>& buffered_writers() {
    static auto* v = new std::vector<TraceWriter*>();
    return *v;
}
std::mutex& buffered_writers_mu() {
    static auto* m = new std::mutex();
    return *m;
}
}  // namespace

TraceWriter::ThreadBuffer& TraceWriter::my_buffer() {
    if (tl_buffer.owner == this) return *static_cast<ThreadBuffer*>(tl_buffer.buffer);
    auto* b = new ThreadBuffer();
    b->items.reserve(64);
    {
        std::lock_guard<std::mutex> lock(buffers_mu_);
        buffers_.push_back(b);
    }
    tl_buffer.owner = this;
    tl_buffer.buffer = b;
    return *b;
}

void TraceWriter::enqueue(const char* kind, Json&& fields, FieldsFn make) {
    const long os_tid = static_cast<long>(::syscall(SYS_gettid));
    Json tid = managed_thread_ ? managed_thread_() : Json();
    ThreadBuffer& b = my_buffer();
    {
        std::lock_guard<std::mutex> lock(b.mu);
        const std::int64_t seq = taken_.fetch_add(1);
        b.items.push_back(Pending{seq, kind, os_tid, std::move(tid), std::move(fields), std::move(make)});
    }
    written_.fetch_add(1);
    if (queued_.fetch_add(1) + 1 == kWakeRecords) wake_.notify_one();
}

void TraceWriter::drain_locked(bool final) {
    const std::int64_t want = final ? taken_.load() : 0;
    for (int round = 0;; ++round) {
        std::vector<ThreadBuffer*> buffers;
        {
            std::lock_guard<std::mutex> lock(buffers_mu_);
            buffers = buffers_;
        }
        for (ThreadBuffer* b : buffers) {
            std::vector<Pending> items;
            {
                std::lock_guard<std::mutex> lock(b->mu);
                if (b->items.empty()) continue;
                items.swap(b->items);
            }
            queued_.fetch_sub(items.size());
            for (Pending& p : items) pending_.push_back(std::move(p));
        }
        std::sort(pending_.begin(), pending_.end(),
                  [](const Pending& a, const Pending& b) { return a.seq < b.seq; });
        std::size_t k = 0;
        std::string out;
        bool go_on = !capped_.load();
        while (go_on && k < pending_.size() && pending_[k].seq == next_seq_) {
            go_on = emit(pending_[k], out);
            ++k;
            ++next_seq_;
            if (out.size() >= (1u << 20)) {
                write_all(out.data(), out.size());
                out.clear();
            }
        }
        if (!out.empty()) write_all(out.data(), out.size());
        if (!go_on) {  // capped: the rest is dropped
            written_.fetch_sub(static_cast<std::int64_t>(pending_.size() - k));
            pending_.clear();
            return;
        }
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(k));
        if (!final || next_seq_ >= want || round >= 1000) return;
        // a seq taken before the flush whose record is not queued yet (its thread between the two): wait
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void TraceWriter::writer_loop() {
    writer_tid_.store(static_cast<long>(::syscall(SYS_gettid)));
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(wake_mu_);
            wake_.wait_for(lock, std::chrono::milliseconds(kWriterPeriodMs),
                           [this] { return queued_.load(std::memory_order_relaxed) >= kWakeRecords; });
        }
        std::lock_guard<std::mutex> lock(mu_);
        drain_locked(false);
    }
}

void TraceWriter::flush() {
    if (!buffered_.load() || fd_ < 0) return;
    if (writer_tid_.load() == static_cast<long>(::syscall(SYS_gettid))) return;
    // a crash handler must not wait forever for a writer that died holding the lock
    for (int waited = 0; !mu_.try_lock(); ++waited) {
        if (waited >= 2000) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    drain_locked(true);
    mu_.unlock();
}

void TraceWriter::start_writer() {
    if (fd_ < 0 || buffered_.exchange(true)) return;
    {
        std::lock_guard<std::mutex> lock(mu_);
        taken_.store(next_seq_);
    }
    {
        std::lock_guard<std::mutex> lock(buffered_writers_mu());
        if (buffered_writers().empty())
            std::atexit([] {
                std::vector<TraceWriter*> all;
                {
                    std::lock_guard<std::mutex> lock(buffered_writers_mu());
                    all = buffered_writers();
                }
                for (TraceWriter* w : all) w->flush();
            });
        buffered_writers().push_back(this);
    }
    std::thread([this] { writer_loop(); }).detach();
}

}  // namespace profharness
