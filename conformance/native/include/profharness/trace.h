// The trace writer (docs/design.md "The trace"): JSON Lines, seq assigned in call order, os_tid and managed
// tid on every record. Part of profharness_common: the probe and a recording proxy write the same records.
//
// Two modes. Synchronous (the default; the probe): one write(2) per record on an O_APPEND descriptor, made
// by the calling thread, so every record a thread finished writing is in the file whatever kills the process
// next. Buffered (start_writer(); the recording proxy, issue 23): the calling thread only takes a seq and
// moves the record's fields (a Json tree, or a function that builds it) into its own per-thread buffer; a
// writer thread drains every buffer each kWriterPeriodMs (sooner when kWakeRecords are queued), puts the
// records in seq order and formats and writes them (one write(2) per batch, each batch whole records). The
// file is the same, record for record. What a death can lose: the records still queued, those taken in
// the last kWriterPeriodMs at most (more only while the writer is behind, up to kMaxQueued records), and a
// SIGKILL in the middle of a batch's write(2) leaves at most one torn record at the end, which the reader
// sets aside as before. flush() writes the queue now: the owner calls it on its crash paths (a fatal
// signal's handler, the hang report, before it ends the process) and at the end of the run; an atexit
// handler flushes at process exit. The writer thread blocks every signal but the synchronous faults (a
// profiler's process-directed SIGPROF never runs its handler there).
//
// Fault injection (issue 13, tests/robustness): PROFHARNESS_FAULT=record:<N>:<KILL|SEGV|ABRT> makes the
// writer write the first half of record N, then raise that signal in the writing thread (buffered: the
// writer thread, after every earlier record is written): a process dying in the middle of a record, on
// purpose, so the tests can check that every earlier record survives.
//
// Format (issue 23): PROFHARNESS_TRACE_FORMAT=jsonl (the default) or binary. The binary trace is a frames v1
// file (profharness/frames.h: "PHFRAMES" header, then frames of u32 length, u32 CRC-32, u16 type, u16 0),
// flags kTraceFramesFlag, whose frames are (varints are LEB128, ints zigzag):
//   1 info    "profharness-trace 1" (the encoding's version; the first frame)
//   2 string  varint id, the UTF-8 bytes (every string a record holds, keys and values, interned once)
//   3 shape   varint id, varint kind (a string id), the fields' type (below): a record's layout, once
//   4 thread  varint id, zigzag os_tid, a value (type and bytes): the (os_tid, tid) pair, once
//   5 record  varint shape, zigzag (seq - the previous record's seq - 1), varint thread, the fields' values
//             in the shape's order
// A type is one byte: n null, t true, f false, i int (zigzag varint), u uint (varint), d double (8 bytes;
// a double that JSON would print as an integer is an int), s string (varint id), a array (varint count, then
// each element's type and value), o object (varint member count, then per member a key's string id and
// the member's type). A frame's definitions precede it in the file, so every complete record frame reads
// back (conformance/core/binary_trace.py) as exactly the JSON line the writer would have written.
//
// Size cap (issue 13): PROFHARNESS_TRACE_MAX_BYTES (a positive decimal byte count; default 1 GiB) bounds
// the file. The record that would take it past the cap is not written; in its place goes one final
// `probe_error` record (where "trace", what names the file and the cap; fields `cap` and `bytes`), and
// every later record is dropped. That notice may take the file past the cap by its own length (about
// 300 bytes and the trace's path). A value that is not a positive byte count makes open() fail, saying so.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "profharness/json.h"

namespace profharness {

class TraceWriter {
 public:
    // The managed ThreadID of the calling thread as JSON (null when it has none). The writer's owner
    // supplies it (the probe asks ICorProfilerInfo::GetCurrentThreadID); without one every tid is null.
    using ManagedThreadFn = Json (*)();
    // Builds a record's fields (a JSON object) on the writer thread (buffered) or at once (synchronous).
    using FieldsFn = std::function<Json()>;

    explicit TraceWriter(ManagedThreadFn managed_thread = nullptr) : managed_thread_(managed_thread) {}
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    // Creates (truncates) the file. Returns false with a one-line reason.
    bool open(const char* path, std::string& error);
    bool is_open() const { return fd_ >= 0; }
    // Buffered mode from here on (after open(); once): per-thread buffers drained by a writer thread.
    void start_writer();
    // Writes one record: {"seq", "kind", "os_tid", "tid", ...fields}. fields must be an object.
    void write(const char* kind, const Json& fields);
    void write(const char* kind, Json&& fields);
    // The same with the fields built later (buffered: on the writer thread; the function owns its data).
    void write_deferred(const char* kind, FieldsFn fields);
    // Buffered: writes every record queued so far (waits up to 10 s for the writer's lock, up to ~1 s for
    // records whose seq is taken but that are not queued yet). A no-op on the writer thread itself and in
    // synchronous mode.
    void flush();
    // Records written (buffered: taken, queued or written, less those the cap dropped: exact after flush()).
    std::int64_t count() const { return written_.load(); }
    // Whether the size cap stopped the writing (the notice is written).
    bool capped() const { return capped_.load(); }

    bool binary() const { return binary_; }
    static constexpr std::uint16_t kTraceFramesFlag = 0x5452;  // "TR": a binary trace
    static constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{1} << 30;
    static constexpr int kWriterPeriodMs = 5;
    static constexpr std::size_t kWakeRecords = 512;
    // Buffered: a thread that finds this many records queued waits for the writer (memory stays bounded).
    static constexpr std::size_t kMaxQueued = 1 << 16;

 private:
    struct Pending {
        std::int64_t seq;
        const char* kind;
        long os_tid;
        Json tid;
        Json fields;
        FieldsFn make;  // when set, builds fields
    };
    struct ThreadBuffer {
        std::mutex mu;
        std::vector<Pending> items;
    };

    ManagedThreadFn managed_thread_;
    int fd_ = -1;
    // PROFHARNESS_FAULT: the record to die in (-1: none) and the signal
    std::int64_t fault_record_ = -1;
    int fault_signal_ = 0;
    // PROFHARNESS_TRACE_MAX_BYTES: the cap, the bytes written so far, the file's path (for the notice)
    std::uint64_t max_bytes_ = kDefaultMaxBytes;
    std::uint64_t bytes_ = 0;
    std::atomic<bool> capped_{false};
    std::string path_;
    // PROFHARNESS_TRACE_FORMAT=binary: the interned strings, shapes and threads written so far
    bool binary_ = false;
    struct Interned {
        std::unordered_map<std::string, std::uint32_t> ids;
        std::vector<const std::string*> order;  // by id, for rollback
    };
    Interned strings_, shapes_, threads_;
    // The frames of one record (its new definitions first) appended to out; rollback() forgets the
    // definitions made since `mark` (a record the cap refused).
    void encode(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid, std::string& out);
    std::uint32_t intern(Interned& table, std::uint16_t frame_type, const std::string& key, std::string& out,
                         const std::string& payload_tail);
    std::uint32_t string_id(const std::string& s, std::string& out);
    void describe(const Json& v, std::string& desc, std::string& defs);
    void values(const Json& v, std::string& out, std::string& defs);
    std::int64_t last_seq_ = -1;  // the last record's seq in the file (a record carries its seq's difference)
    struct Mark { std::size_t strings, shapes, threads; std::int64_t last_seq; };
    Mark mark() const { return {strings_.order.size(), shapes_.order.size(), threads_.order.size(), last_seq_}; }
    void rollback(const Mark& m);
    // The record's bytes in the file's format (JSON line or frames), appended to out
    void format_onto(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid,
                     std::string& out);
    // A JSON line's start: {"seq":..,"kind":..,"os_tid":..,"tid":.. (the fields and "}\n" follow)
    static void line_head(std::int64_t seq, const char* kind, long os_tid, const Json& tid, std::string& out);
    // The JSON line of one record (newline included); tail is its fields as a JSON object.
    std::string line(std::int64_t seq, const char* kind, const std::string& tail, long os_tid, const Json& tid) const;
    // Writes all of [p, p + n); false on an error other than EINTR.
    bool write_all(const char* p, std::size_t n);
    // Formats record `p` (seq p.seq) onto out, applying the cap and the fault; false: capped, stop.
    bool emit(Pending& p, std::string& out);
    bool emit(std::int64_t seq, const char* kind, const Json& fields, long os_tid, const Json& tid, std::string& out);
    // Synchronous, mu_ held: emits the record as seq next_seq_ and writes it (next_seq_ moves on once written).
    void write_emitted(const char* kind, const Json& fields, long os_tid, const Json& tid);
    void enqueue(const char* kind, Json&& fields, FieldsFn make);
    ThreadBuffer& my_buffer();
    // The writer thread's turn (mu_ held): drains the buffers, writes the records in seq order up to the
    // first seq not queued yet. `final`: wait (bounded) for every seq taken so far.
    void drain_locked(bool final);
    void writer_loop();

    std::timed_mutex mu_;  // synchronous: the write; buffered: the writer's state (pending_, the file)
    std::int64_t next_seq_ = 0;  // synchronous: the next seq; buffered: the next seq to write
    std::atomic<std::int64_t> written_{0};
    // buffered mode
    std::atomic<bool> buffered_{false};
    std::atomic<std::int64_t> taken_{0};      // seqs handed out
    std::atomic<std::size_t> queued_{0};      // records in buffers (a hint to wake the writer)
    std::mutex buffers_mu_;
    std::vector<ThreadBuffer*> buffers_;      // every thread's buffer (never freed)
    std::vector<Pending> pending_;            // drained, waiting for an earlier seq
    std::condition_variable wake_;
    std::mutex wake_mu_;
    std::atomic<long> writer_tid_{0};
};

// Ends a record's line after its head ({"seq", "kind", "os_tid", "tid" written, the object still open):
// the fields of `tail` (a JSON object) after a comma, the closing brace, the newline.
void finish_record_line(std::string& head, const std::string& tail);

// A fault to inject (PROFHARNESS_FAULT's value `text`, null when unset): "<what>:<N>:<KILL|SEGV|ABRT>" gives
// true with n = N and sig = that signal (the trace writer's "record", capture_sample's "sample"); anything
// else false, n and sig untouched.
bool parse_fault(const char* text, const char* what, std::int64_t& n, int& sig);

}  // namespace profharness
