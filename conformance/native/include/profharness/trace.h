// The trace writer (docs/design.md "The trace"): JSON Lines, one write(2) per record on an O_APPEND
// descriptor, seq assigned in write order, os_tid and managed tid on every record.
// Part of profharness_common: the probe and a recording proxy write the same records.
//
// Fault injection (issue 13, tests/robustness): PROFHARNESS_FAULT=record:<N>:<KILL|SEGV|ABRT> makes the
// writer write the first half of record N, then raise that signal in the writing thread: a process dying
// in the middle of a record, on purpose, so the tests can check that every earlier record survives.
//
// Size cap (issue 13): PROFHARNESS_TRACE_MAX_BYTES (a positive decimal byte count; default 1 GiB) bounds
// the file. The record that would take it past the cap is not written; in its place goes one final
// `probe_error` record (where "trace", what names the file and the cap; fields `cap` and `bytes`), and
// every later record is dropped. That notice may take the file past the cap by its own length (about
// 300 bytes and the trace's path). A value that is not a positive byte count makes open() fail, saying so.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "profharness/json.h"

namespace profharness {

class TraceWriter {
 public:
    // The managed ThreadID of the calling thread as JSON (null when it has none). The writer's owner
    // supplies it (the probe asks ICorProfilerInfo::GetCurrentThreadID); without one every tid is null.
    using ManagedThreadFn = Json (*)();

    explicit TraceWriter(ManagedThreadFn managed_thread = nullptr) : managed_thread_(managed_thread) {}
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    // Creates (truncates) the file. Returns false with a one-line reason.
    bool open(const char* path, std::string& error);
    bool is_open() const { return fd_ >= 0; }
    // Writes one record: {"seq", "kind", "os_tid", "tid", ...fields}. fields must be an object.
    void write(const char* kind, const Json& fields);
    std::int64_t count() const { return written_.load(); }
    // Whether the size cap stopped the writing (the notice is written).
    bool capped() const { return capped_.load(); }

    static constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{1} << 30;

 private:
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
    // The JSON line of one record (newline included); tail is its fields as a JSON object.
    std::string line(const char* kind, const std::string& tail, long os_tid, const Json& tid) const;
    // Writes all of [p, p + n); false on an error other than EINTR.
    bool write_all(const char* p, std::size_t n);
    std::mutex mu_;
    std::int64_t next_seq_ = 0;
    std::atomic<std::int64_t> written_{0};
};

// Ends a record's line after its head ({"seq", "kind", "os_tid", "tid" written, the object still open):
// the fields of `tail` (a JSON object) after a comma, the closing brace, the newline.
void finish_record_line(std::string& head, const std::string& tail);

}  // namespace profharness
