// Frames v1: a framed binary sidecar file (docs/design.md "Frames"), for bytes a JSON trace should not carry
// as text (a sample's stack copy, code bytes, a binary trace's records). Its twin in Python is
// conformance/core/frames.py (the reader; a writer for tests).
//
// Layout, little-endian:
//   file header (16 bytes): magic "PHFRAMES" (8 bytes), u16 version (1), u16 flags (the owner's), u32 reserved (0)
//   then frames, each: u32 payload length, u32 CRC-32 of the payload (zlib's polynomial, crc32() below),
//                      u16 frame type (the owner's), u16 reserved (0), the payload
// A frame is referred to by its file offset (of its 12-byte header) or its index (0 for the first).
//
// Death-safe: every frame goes out in one write(2) on an O_APPEND descriptor, so a process killed at any
// instant leaves every earlier frame whole and at most one torn frame at the end; the reader keeps every
// complete frame and stops at the first torn or corrupt one, saying where.
//
// FrameWriter::append takes a spin lock (an atomic flag), copies the frame into a staging buffer allocated at
// open() and calls write(2): no allocation, no mutex, no stdio, so it is async-signal-safe in the sense that
// matters for a profiler: any thread may call it while other threads are stopped anywhere, e.g. inside a
// signal handler. It must not be called FROM a signal handler that may have interrupted an append on the
// same thread (the spin lock would never be released).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace profharness {

constexpr char kFramesMagic[8] = {'P', 'H', 'F', 'R', 'A', 'M', 'E', 'S'};
constexpr std::uint16_t kFramesVersion = 1;
constexpr std::size_t kFramesFileHeaderSize = 16;
constexpr std::size_t kFrameHeaderSize = 12;
// The staging buffer's payload capacity when open() is not told one.
constexpr std::uint32_t kFramesDefaultMaxPayload = 1u << 20;

// CRC-32 as zlib's crc32() computes it (reflected polynomial 0xEDB88320, initial and final xor ~0): pass the
// previous result as `crc` to continue over more bytes (0 to start). Slicing by 8; pure, async-signal-safe.
std::uint32_t frames_crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

class FrameWriter {
 public:
    FrameWriter() = default;
    ~FrameWriter();
    FrameWriter(const FrameWriter&) = delete;
    FrameWriter& operator=(const FrameWriter&) = delete;

    // Creates (truncates) `path`, writes the file header with `flags` and allocates the staging buffer for
    // payloads of up to `max_payload` bytes. Returns false with a one-line reason. Not async-signal-safe.
    bool open(const char* path, std::uint16_t flags, std::string& error,
              std::uint32_t max_payload = kFramesDefaultMaxPayload);
    bool is_open() const { return fd_ >= 0; }
    // Closes the file and frees the buffer (not while another thread may append).
    void close();

    // Appends one frame of `type` whose payload is the concatenation of `count` parts (a part may be empty),
    // with one write(2). Returns the frame's file offset (of its header), or -1: not open, the payload is
    // larger than max_payload, or the write failed (errno; the frame may then be torn and later frames are
    // refused, so a torn frame can only be the last). `index`, when not null, receives the frame's index.
    struct Part {
        const void* data;
        std::size_t size;
    };
    std::int64_t append(std::uint16_t type, const Part* parts, std::size_t count, std::uint64_t* index = nullptr);
    std::int64_t append(std::uint16_t type, const void* payload, std::size_t n, std::uint64_t* index = nullptr) {
        const Part part{payload, n};
        return append(type, &part, 1, index);
    }

    // Frames appended so far, and the file's size in bytes (header included).
    std::uint64_t frames() const { return frames_.load(std::memory_order_relaxed); }
    std::uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
    // Appends refused so far (too large, not open, a failed write).
    std::uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
    std::uint32_t max_payload() const { return max_payload_; }

 private:
    int fd_ = -1;
    bool failed_ = false;  // a write failed: the file may end in a torn frame; nothing more is appended
    std::uint32_t max_payload_ = 0;
    unsigned char* staging_ = nullptr;  // kFrameHeaderSize + max_payload_ bytes
    std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
    std::atomic<std::uint64_t> frames_{0};
    std::atomic<std::uint64_t> bytes_{0};
    std::atomic<std::uint64_t> refused_{0};
};

}  // namespace profharness
