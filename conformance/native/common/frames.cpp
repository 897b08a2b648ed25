// Frames v1 of profharness_common (include/profharness/frames.h).
#include "profharness/frames.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace profharness {

namespace {

// The CRC tables for slicing by 8, built at compile time: kCrc[0] is the classic byte table of the
// reflected polynomial 0xEDB88320; kCrc[k][b] is the CRC of byte b followed by k zero bytes.
struct CrcTables {
    std::uint32_t t[8][256];
};

constexpr CrcTables make_crc_tables() {
    CrcTables c{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t r = b;
        for (int i = 0; i < 8; ++i) r = (r & 1) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
        c.t[0][b] = r;
    }
    for (std::uint32_t b = 0; b < 256; ++b)
        for (int k = 1; k < 8; ++k) c.t[k][b] = (c.t[k - 1][b] >> 8) ^ c.t[0][c.t[k - 1][b] & 0xFF];
    return c;
}

constexpr CrcTables kCrc = make_crc_tables();

void put_u16(unsigned char* p, std::uint16_t v) {
    p[0] = static_cast<unsigned char>(v);
    p[1] = static_cast<unsigned char>(v >> 8);
}

void put_u32(unsigned char* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Writes all of [p, p + n) (a regular file writes it in one call; a short write is continued). False on an
// error other than EINTR.
bool write_all(int fd, const unsigned char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if (w == 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

}  // namespace

std::uint32_t frames_crc32(const void* data, std::size_t n, std::uint32_t crc) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~crc;
    while (n >= 8) {
        const std::uint32_t lo = c ^ (std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
                                      std::uint32_t(p[3]) << 24);
        c = kCrc.t[7][lo & 0xFF] ^ kCrc.t[6][(lo >> 8) & 0xFF] ^ kCrc.t[5][(lo >> 16) & 0xFF] ^ kCrc.t[4][lo >> 24] ^
            kCrc.t[3][p[4]] ^ kCrc.t[2][p[5]] ^ kCrc.t[1][p[6]] ^ kCrc.t[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = (c >> 8) ^ kCrc.t[0][(c ^ *p++) & 0xFF];
    return ~c;
}

FrameWriter::~FrameWriter() { close(); }

bool FrameWriter::open(const char* path, std::uint16_t flags, std::string& error, std::uint32_t max_payload) {
    close();
    if (max_payload > UINT32_MAX - kFrameHeaderSize) {
        error = std::string("frames: payload cap ") + std::to_string(max_payload) + " is too large";
        return false;
    }
    staging_ = static_cast<unsigned char*>(std::malloc(kFrameHeaderSize + max_payload));
    if (staging_ == nullptr) {
        error = std::string("frames: cannot allocate ") + std::to_string(kFrameHeaderSize + max_payload) + " bytes";
        return false;
    }
    max_payload_ = max_payload;
    fd_ = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        error = std::string("cannot create frames file ") + path + ": " + std::strerror(errno);
        close();
        return false;
    }
    unsigned char header[kFramesFileHeaderSize];
    std::memcpy(header, kFramesMagic, 8);
    put_u16(header + 8, kFramesVersion);
    put_u16(header + 10, flags);
    put_u32(header + 12, 0);
    if (!write_all(fd_, header, sizeof header)) {
        error = std::string("cannot write frames file ") + path + ": " + std::strerror(errno);
        close();
        return false;
    }
    failed_ = false;
    frames_.store(0);
    bytes_.store(kFramesFileHeaderSize);
    refused_.store(0);
    return true;
}

void FrameWriter::close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    std::free(staging_);
    staging_ = nullptr;
    max_payload_ = 0;
}

std::int64_t FrameWriter::append(std::uint16_t type, const Part* parts, std::size_t count, std::uint64_t* index) {
    std::size_t n = 0;
    std::uint32_t crc = 0;
    for (std::size_t i = 0; i < count; ++i) {
        n += parts[i].size;
        crc = frames_crc32(parts[i].data, parts[i].size, crc);  // outside the lock: pure
    }
    while (lock_.test_and_set(std::memory_order_acquire)) sched_yield();
    std::int64_t at = -1;
    if (fd_ >= 0 && !failed_ && n <= max_payload_) {
        unsigned char* p = staging_;
        put_u32(p, static_cast<std::uint32_t>(n));
        put_u32(p + 4, crc);
        put_u16(p + 8, type);
        put_u16(p + 10, 0);
        p += kFrameHeaderSize;
        for (std::size_t i = 0; i < count; ++i) {
            if (parts[i].size) std::memcpy(p, parts[i].data, parts[i].size);
            p += parts[i].size;
        }
        const std::uint64_t offset = bytes_.load(std::memory_order_relaxed);
        if (write_all(fd_, staging_, kFrameHeaderSize + n)) {
            at = static_cast<std::int64_t>(offset);
            if (index) *index = frames_.load(std::memory_order_relaxed);
            frames_.fetch_add(1, std::memory_order_relaxed);
            bytes_.store(offset + kFrameHeaderSize + n, std::memory_order_relaxed);
        } else {
            failed_ = true;
        }
    }
    if (at < 0) refused_.fetch_add(1, std::memory_order_relaxed);
    lock_.clear(std::memory_order_release);
    return at;
}

}  // namespace profharness
