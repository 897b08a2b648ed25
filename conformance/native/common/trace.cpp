// The trace writer of profharness_common (include/profharness/trace.h).
#include "profharness/trace.h"

#include <cmath>
#include <cstdio>

#include "profharness/frames.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace profharness {

namespace {

// The calling thread's OS thread id, asked of the kernel once per thread (a gettid(2) per record was ~0.2 us
// of every record's cost on the calling thread). A fork's child is a new process whose one thread inherited
// its parent thread's cache: the fork handler moves the generation on, so that thread asks again.
std::atomic<unsigned> g_tid_generation{1};
struct TidCache {
    unsigned generation = 0;
    long tid = 0;
};
thread_local TidCache tl_tid;

long current_tid() {
    const unsigned generation = g_tid_generation.load(std::memory_order_relaxed);
    if (tl_tid.generation != generation) {
        static const bool registered = [] {
            return pthread_atfork(nullptr, nullptr,
                                  [] { g_tid_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
        }();
        (void)registered;
        tl_tid.tid = static_cast<long>(::syscall(SYS_gettid));
        tl_tid.generation = g_tid_generation.load(std::memory_order_relaxed);
    }
    return tl_tid.tid;
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


// --- the binary trace (trace.h "Format") ------------------------------------------------------------------

constexpr std::uint16_t kFrameInfo = 1, kFrameString = 2, kFrameShape = 3, kFrameThread = 4, kFrameRecord = 5;
const std::string kBinaryTraceVersion = "profharness-trace 1";

void put_u16(std::string& out, std::uint16_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& out, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}
void put_zigzag(std::string& out, std::int64_t v) {
    put_varint(out, (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
}
// One frame (frames.h layout) appended to out.
void append_frame(std::string& out, std::uint16_t type, const std::string& payload) {
    put_u32(out, static_cast<std::uint32_t>(payload.size()));
    put_u32(out, frames_crc32(payload.data(), payload.size()));
    put_u16(out, type);
    put_u16(out, 0);
    out += payload;
}
// A double as JSON prints it ("%.17g"): an integer there reads back as an int.
bool double_is_json_int(double d, std::int64_t& as_int) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    for (const char* c = buf; *c; ++c)
        if (*c == '.' || *c == 'e' || *c == 'n' || *c == 'i') return false;
    as_int = std::strtoll(buf, nullptr, 10);
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
    fault_record_ = -1;  // no fault unless PROFHARNESS_FAULT names one
    fault_signal_ = 0;
    parse_fault(std::getenv("PROFHARNESS_FAULT"), "record", fault_record_, fault_signal_);
    const char* format_text = std::getenv("PROFHARNESS_TRACE_FORMAT");
    const std::string format_name = format_text ? format_text : "";
    if (format_name.empty() || format_name == "jsonl") {
        binary_ = false;
    } else if (format_name == "binary") {
        binary_ = true;
        strings_ = Interned();
        last_seq_ = -1;
        shapes_ = Interned();
        threads_ = Interned();
        std::string head(kFramesMagic, sizeof kFramesMagic);
        put_u16(head, kFramesVersion);
        put_u16(head, kTraceFramesFlag);
        put_u32(head, 0);
        append_frame(head, kFrameInfo, kBinaryTraceVersion);
        write_all(head.data(), head.size());
    } else {
        error = "PROFHARNESS_TRACE_FORMAT=" + format_name + " is not jsonl or binary";
        ::close(fd_);
        fd_ = -1;
        return false;
    }
    return true;
}

void TraceWriter::line_head(std::int64_t seq, const char* kind, long os_tid, const Json& tid, std::string& out) {
    out += "{\"seq\":";
    out += std::to_string(seq);
    out += ",\"kind\":";
    json_escape(kind, out);
    out += ",\"os_tid\":";
    out += std::to_string(os_tid);
    out += ",\"tid\":";
    tid.dump(out);
}

std::string TraceWriter::line(std::int64_t seq, const char* kind, const std::string& tail, long os_tid,
                              const Json& tid) const {
    std::string head;
    head.reserve(tail.size() + 96);
    line_head(seq, kind, os_tid, tid, head);
    finish_record_line(head, tail);
    return head;
}

std::uint32_t TraceWriter::intern(Interned& table, std::uint16_t frame_type, const std::string& key,
                                  std::string& out, const std::string& payload_tail) {
    auto found = table.ids.find(key);
    if (found != table.ids.end()) return found->second;
    const auto id = static_cast<std::uint32_t>(table.order.size());
    auto placed = table.ids.emplace(key, id).first;
    table.order.push_back(&placed->first);
    std::string payload;
    put_varint(payload, id);
    payload += payload_tail;
    append_frame(out, frame_type, payload);
    return id;
}

std::uint32_t TraceWriter::string_id(const std::string& s, std::string& out) {
    return intern(strings_, kFrameString, s, out, s);
}

// The type of v (trace.h "Format"); an object's keys interned (their frames onto defs).
void TraceWriter::describe(const Json& v, std::string& desc, std::string& defs) {
    switch (v.kind()) {
        case Json::Kind::Null: desc.push_back('n'); break;
        case Json::Kind::Bool: desc.push_back(v.as_bool() ? 't' : 'f'); break;
        case Json::Kind::Int: desc.push_back('i'); break;
        case Json::Kind::UInt: desc.push_back('u'); break;
        case Json::Kind::Double: {
            std::int64_t i = 0;
            desc.push_back(!std::isfinite(v.as_double()) ? 'n' : double_is_json_int(v.as_double(), i) ? 'i' : 'd');
            break;
        }
        case Json::Kind::String: desc.push_back('s'); break;
        case Json::Kind::Array:
        case Json::Kind::UInts: desc.push_back('a'); break;
        case Json::Kind::Object:
            desc.push_back('o');
            put_varint(desc, v.members().size());
            for (const auto& m : v.members()) {
                put_varint(desc, string_id(m.first, defs));
                describe(m.second, desc, defs);
            }
            break;
    }
}

// The values of v in its type's order (strings interned: their frames onto defs).
void TraceWriter::values(const Json& v, std::string& out, std::string& defs) {
    switch (v.kind()) {
        case Json::Kind::Null:
        case Json::Kind::Bool: break;
        case Json::Kind::Int: put_zigzag(out, v.as_int()); break;
        case Json::Kind::UInt: put_varint(out, v.as_uint()); break;
        case Json::Kind::Double: {
            const double d = v.as_double();
            std::int64_t i = 0;
            if (!std::isfinite(d)) break;
            if (double_is_json_int(d, i)) {
                put_zigzag(out, i);
            } else {
                std::uint64_t bits = 0;
                std::memcpy(&bits, &d, sizeof bits);
                for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((bits >> (8 * k)) & 0xff));
            }
            break;
        }
        case Json::Kind::String: put_varint(out, string_id(v.as_string(), defs)); break;
        case Json::Kind::Array:
            put_varint(out, v.items().size());
            for (const Json& item : v.items()) {
                describe(item, out, defs);
                values(item, out, defs);
            }
            break;
        case Json::Kind::UInts:  // as an array of UInt elements
            put_varint(out, v.uint_count());
            for (std::size_t k = 0, n = v.uint_count(); k < n; ++k) {
                out.push_back('u');
                put_varint(out, v.uint_at(k));
            }
            break;
        case Json::Kind::Object:
            for (const auto& m : v.members()) values(m.second, out, defs);
            break;
    }
}

void TraceWriter::encode(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid,
                         std::string& out) {
    std::string defs;  // the frames of what this record interns, before it
    std::string shape;
    put_varint(shape, string_id(kind, defs));
    describe(fields.is_object() ? fields : Json::object(), shape, defs);
    const std::uint32_t shape_id = intern(shapes_, kFrameShape, shape, defs, shape);
    std::string thread;
    put_zigzag(thread, os_tid);
    describe(tid, thread, defs);
    values(tid, thread, defs);
    const std::uint32_t thread_id = intern(threads_, kFrameThread, thread, defs, thread);
    std::string payload;
    put_varint(payload, shape_id);
    put_zigzag(payload, seq - (last_seq_ + 1));  // 0 for the next seq: one byte
    last_seq_ = seq;
    put_varint(payload, thread_id);
    if (fields.is_object()) values(fields, payload, defs);
    out += defs;
    append_frame(out, kFrameRecord, payload);
}

void TraceWriter::rollback(const Mark& m) {
    last_seq_ = m.last_seq;
    for (auto* table : {&strings_, &shapes_, &threads_}) {
        const std::size_t keep = table == &strings_ ? m.strings : table == &shapes_ ? m.shapes : m.threads;
        while (table->order.size() > keep) {
            const std::string key = *table->order.back();
            table->order.pop_back();
            table->ids.erase(key);
        }
    }
}

void TraceWriter::format_onto(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid,
                              std::string& out) {
    if (binary_) {
        encode(seq, kind, fields, os_tid, tid, out);
        return;
    }
    // line()'s bytes, the fields dumped in place (a MovedReferences2 batch's record is tens of KB: no copy
    // of it through a string of its own)
    line_head(seq, kind, os_tid, tid, out);
    const std::size_t at = out.size();
    fields.dump(out);
    if (out.size() - at > 2) {
        out[at] = ',';  // the fields' "{" continues the head's object
    } else {
        out.resize(at);
        out.push_back('}');
    }
    out.push_back('\n');
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

bool parse_fault(const char* text, const char* what, std::int64_t& n, int& sig) {
    const std::size_t len = std::strlen(what);
    if (text == nullptr || std::strncmp(text, what, len) != 0 || text[len] != ':') return false;
    const char* number = text + len + 1;
    char* end = nullptr;
    const long long at = std::strtoll(number, &end, 10);
    if (end == number || *end != ':' || at < 0) return false;
    const std::string name(end + 1);
    const int s = name == "KILL" ? SIGKILL : name == "SEGV" ? SIGSEGV : name == "ABRT" ? SIGABRT : 0;
    if (s == 0) return false;
    n = at;
    sig = s;
    return true;
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
    return emit(p.seq, p.kind, p.fields, p.os_tid, p.tid, out);
}

bool TraceWriter::emit(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid,
                       std::string& out) {
    const Mark before = mark();
    const std::size_t from = out.size();
    format_onto(seq, kind, fields, os_tid, tid, out);  // this record: out from `from` on
    if (bytes_ + out.size() > max_bytes_) {
        out.resize(from);
        rollback(before);  // its definitions are not written
        // The size cap: one notice in place of this record, then nothing more.
        const std::uint64_t at = bytes_ + out.size();
        Json notice = Json::object();
        notice.set("what", "trace size cap reached: " + path_ + " stops at " + std::to_string(at) +
                               " bytes, the cap is " + std::to_string(max_bytes_) +
                               " (PROFHARNESS_TRACE_MAX_BYTES); later records are not written");
        notice.set("where", "trace");
        notice.set("cap", Json(max_bytes_));
        notice.set("bytes", Json(at));
        format_onto(seq, "probe_error", notice, os_tid, tid, out);
        capped_.store(true);
        return false;
    }
    if (seq == fault_record_) {
        write_all(out.data(), from);
        const char* q = out.data() + from;
        std::size_t left = (out.size() - from) / 2;  // die in the middle of this record (PROFHARNESS_FAULT)
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
    return true;
}

void TraceWriter::write_emitted(const char* kind, const Json& fields, long os_tid, const Json& tid) {
    std::string out;
    emit(next_seq_, kind, fields, os_tid, tid, out);
    if (write_all(out.data(), out.size())) {
        ++next_seq_;
        written_.fetch_add(1);
    }
}

void TraceWriter::write(const char* kind, const Json& fields) {
    if (fd_ < 0 || capped_.load(std::memory_order_relaxed)) return;
    if (buffered_.load(std::memory_order_relaxed)) {
        enqueue(kind, Json(fields), nullptr);
        return;
    }
    const long os_tid = current_tid();
    Json tid = managed_thread_ ? managed_thread_() : Json();
    if (binary_) {  // the interned tables: encoded under the lock
        std::lock_guard<std::timed_mutex> lock(mu_);
        if (capped_.load(std::memory_order_relaxed)) return;
        write_emitted(kind, fields, os_tid, tid);
        return;
    }
    std::string tail;
    fields.dump(tail);  // "{...}", outside the lock
    std::lock_guard<std::timed_mutex> lock(mu_);
    if (capped_.load(std::memory_order_relaxed)) return;
    const std::string head = line(next_seq_, kind, tail, os_tid, tid);
    if (bytes_ + head.size() > max_bytes_ || next_seq_ == fault_record_) {  // the cap's notice, or the fault
        write_emitted(kind, fields, os_tid, tid);
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
    const long os_tid = current_tid();
    Json tid = managed_thread_ ? managed_thread_() : Json();
    ThreadBuffer& b = my_buffer();
    {
        std::lock_guard<std::mutex> lock(b.mu);
        const std::int64_t seq = taken_.fetch_add(1);
        b.items.push_back(Pending{seq, kind, os_tid, std::move(tid), std::move(fields), std::move(make)});
    }
    written_.fetch_add(1);
    const std::size_t queued = queued_.fetch_add(1) + 1;
    if (queued == kWakeRecords) wake_.notify_one();
    if (queued >= kMaxQueued && writer_tid_.load() != current_tid()) {
        // the writer is behind: wait for it (bounded memory), never on the writer thread itself
        wake_.notify_one();
        for (int waited = 0; queued_.load(std::memory_order_relaxed) >= kMaxQueued / 2 && waited < 10000; ++waited)
            std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
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
    // Signals are for the owner's threads: a process-directed one (a profiler's SIGPROF timer) never runs its
    // handler on the writer, in the middle of the writer's malloc. The synchronous faults stay deliverable.
    sigset_t all;
    sigfillset(&all);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) sigdelset(&all, sig);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    writer_tid_.store(current_tid());
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(wake_mu_);
            wake_.wait_for(lock, std::chrono::milliseconds(kWriterPeriodMs),
                           [this] { return queued_.load(std::memory_order_relaxed) >= kWakeRecords; });
        }
        std::lock_guard<std::timed_mutex> lock(mu_);
        drain_locked(false);
    }
}

void TraceWriter::flush() {
    if (!buffered_.load() || fd_ < 0) return;
    if (writer_tid_.load() == current_tid()) return;
    // a crash handler must not wait forever for a writer that died holding the lock
    if (!mu_.try_lock_for(std::chrono::seconds(10))) return;
    drain_locked(true);
    mu_.unlock();
}

void TraceWriter::start_writer() {
    if (fd_ < 0 || buffered_.exchange(true)) return;
    {
        std::lock_guard<std::timed_mutex> lock(mu_);
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
