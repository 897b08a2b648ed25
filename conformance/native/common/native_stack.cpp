// The native-stack helper of profharness_common (include/profharness/native_stack.h).
#include "profharness/native_stack.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace profharness {

void* interrupted_pc(const void* ucontext) {
    if (!ucontext) return nullptr;
    return reinterpret_cast<void*>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RIP]);
}

Json native_stack_json(void* const* ips, int n, const void* exact) {
    Json frames = Json::array();
    for (int k = 0; k < n; ++k) {
        Json f = Json::object();
        f.set("ip", Json::pointer(ips[k]));
        // a return address is named by the call before it (ip - 1): after a call that does not return (abort,
        // std::terminate) it is already past the end of the caller's symbol, or at the next function's
        // start; the interrupted instruction (`exact`) by itself
        const auto at = reinterpret_cast<std::uintptr_t>(ips[k]);
        const void* look = ips[k] == exact || at == 0 ? ips[k] : reinterpret_cast<const void*>(at - 1);
        Dl_info di;
        if (dladdr(look, &di) && di.dli_fname) {
            const char* base = std::strrchr(di.dli_fname, '/');
            f.set("module", base ? base + 1 : di.dli_fname);
            f.set("offset", Json(static_cast<std::uint64_t>(at - reinterpret_cast<std::uintptr_t>(di.dli_fbase))));
            if (di.dli_sname) f.set("symbol", di.dli_sname);
        }
        frames.push(f);
    }
    return frames;
}

namespace {

// One line of /proc/self/maps: "start-end perms offset dev inode   path".
struct MapsLine {
    std::uintptr_t start = 0, end = 0;
    const char* path = nullptr;  // null: an anonymous mapping
    std::size_t path_len = 0;
};

// The line at `p` (up to `end`); `next` gets the start of the next one.
MapsLine parse_maps_line(const char* p, const char* end, const char*& next) {
    MapsLine m;
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    next = eol ? eol + 1 : end;
    char* q = nullptr;
    m.start = std::strtoull(p, &q, 16);
    if (q && *q == '-') m.end = std::strtoull(q + 1, &q, 16);
    const char* slash = static_cast<const char*>(std::memchr(p, '/', static_cast<std::size_t>(next - p)));
    if (slash) {
        m.path = slash;
        m.path_len = static_cast<std::size_t>((eol ? eol : end) - slash);
    }
    return m;
}

}  // namespace

Json native_stack_json_unlocked(void* const* ips, int n) {
    static char maps[1 << 18];
    std::size_t len = 0;
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = 0;
        while (len < sizeof maps && (r = ::read(fd, maps + len, sizeof maps - len)) > 0) len += static_cast<std::size_t>(r);
        ::close(fd);
    }
    const char* end = maps + len;
    Json frames = Json::array();
    for (int k = 0; k < n; ++k) {
        const auto ip = reinterpret_cast<std::uintptr_t>(ips[k]);
        Json f = Json::object();
        f.set("ip", Json::pointer(ips[k]));
        MapsLine hit;
        for (const char* p = maps; p < end;) {
            const MapsLine m = parse_maps_line(p, end, p);
            if (m.path && ip >= m.start && ip < m.end) {
                hit = m;
                break;
            }
        }
        if (hit.path) {
            std::uintptr_t base = hit.start;  // the module's first mapping (maps are sorted by address)
            for (const char* p = maps; p < end;) {
                const MapsLine m = parse_maps_line(p, end, p);
                if (m.path && m.path_len == hit.path_len && std::memcmp(m.path, hit.path, m.path_len) == 0) {
                    base = m.start;
                    break;
                }
            }
            const std::string path(hit.path, hit.path_len);
            const std::size_t slash = path.rfind('/');
            f.set("module", slash == std::string::npos ? path : path.substr(slash + 1));
            f.set("offset", Json(static_cast<std::uint64_t>(ip - base)));
            f.set("path", path);  // the validator names the frame from the file's symbols (no dladdr here)
        }
        frames.push(f);
    }
    return frames;
}

}  // namespace profharness
