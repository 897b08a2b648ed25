// Frames v1 of profharness_common (include/profharness/frames.h).
#include "profharness/frames.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// The CRC register over n bytes by the byte table (no inversion: `c` in, the register out).
std::uint32_t crc_bytes(std::uint32_t c, const unsigned char* p, std::size_t n) {
    while (n-- > 0) c = (c >> 8) ^ kCrc.t[0][(c ^ *p++) & 0xFF];
    return c;
}

#if defined(__x86_64__)
// Carry-less multiplication folding (x86-64 PCLMULQDQ; the method of Intel's white paper "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction", for the bit-reflected polynomial): the
// register is xored into the first 16 bytes, four 16-byte lanes are folded 64 bytes ahead at a time, then
// into one lane, then 16 bytes at a time; the last lane's 16 bytes, run through the byte table from a zero
// register, give the register (folding keeps the message's remainder, so the lane stands for all the bytes
// before it). Its constants are x^k mod P for the folding distances, bit-reflected: k1 = x^(4*128+32),
// k2 = x^(4*128-32), k3 = x^(128+32), k4 = x^(128-32) (mod P, reflected, times x). Needs n >= 64; returns
// the register after the whole 16-byte blocks of [p, p + n) and sets `used` to their length.
__attribute__((target("pclmul,sse2"))) inline __m128i load(const unsigned char* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// x's low qword times k's low qword, x's high qword times k's high qword, xored with `next`.
__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

__attribute__((target("pclmul,sse2"))) std::uint32_t crc_fold(std::uint32_t c, const unsigned char* p,
                                                               std::size_t n, std::size_t& used) {
    const __m128i k12 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);  // high qword k2, low qword k1
    const __m128i k34 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);  // high qword k4, low qword k3
    const unsigned char* start = p;
    __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c)));
    __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = fold(x0, k12, load(p));
        x1 = fold(x1, k12, load(p + 16));
        x2 = fold(x2, k12, load(p + 32));
        x3 = fold(x3, k12, load(p + 48));
        p += 64;
        n -= 64;
    }
    __m128i x = fold(fold(fold(x0, k34, x1), k34, x2), k34, x3);
    while (n >= 16) {
        x = fold(x, k34, load(p));
        p += 16;
        n -= 16;
    }
    alignas(16) unsigned char lane[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(lane), x);
    used = static_cast<std::size_t>(p - start);
    return crc_bytes(0, lane, 16);
}

// Whether this CPU has PCLMULQDQ (decided once, when the library loads: frames_crc32 stays async-signal-safe).
const bool kHavePclmul = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") != 0;
}();
#endif

}  // namespace

std::uint32_t frames_crc32(const void* data, std::size_t n, std::uint32_t crc) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~crc;
#if defined(__x86_64__)
    if (kHavePclmul && n >= 64) {
        std::size_t used = 0;
        c = crc_fold(c, p, n, used);
        p += used;
        n -= used;
    }
#endif
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
