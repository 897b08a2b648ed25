// Callers (proxy.h note_caller): every recorded ICorProfilerInfo call carries the return address into the
// code that called it; the first time an address falls outside every module named so far, the module it
// falls in is named by a `proxy.module` mark {path, base, end} (dl_iterate_phdr: the module's loaded
// segments; path null for an address in no module, named by its 64 KiB block). Cheap: the ranges are an
// append-only array read without a lock; only a new range takes the lock and walks the program headers.
#include <link.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "proxy.h"

namespace profharness::proxy {

namespace {

constexpr int kMaxRanges = 1024;
struct Range {
    std::uintptr_t lo, hi;
};
Range g_ranges[kMaxRanges];
std::atomic<int> g_count{0};
std::mutex g_mu;

struct Search {
    std::uintptr_t ip;
    std::uintptr_t lo = 0, hi = 0, base = 0;
    std::string path;
    bool found = false;
};

int find_module(dl_phdr_info* info, size_t, void* data) {
    auto* s = static_cast<Search*>(data);
    std::uintptr_t lo = ~std::uintptr_t{0}, hi = 0;
    bool inside = false;
    for (int k = 0; k < info->dlpi_phnum; ++k) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[k];
        if (ph.p_type != PT_LOAD) continue;
        std::uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
        if (s->ip >= a && s->ip < b) inside = true;
    }
    if (!inside) return 0;
    s->found = true;
    s->lo = lo;
    s->hi = hi;
    s->base = info->dlpi_addr;
    s->path = info->dlpi_name ? info->dlpi_name : "";
    return 1;
}

bool known(std::uintptr_t ip) {
    const int n = g_count.load(std::memory_order_acquire);
    for (int k = 0; k < n; ++k)
        if (ip >= g_ranges[k].lo && ip < g_ranges[k].hi) return true;
    return false;
}

}  // namespace

void note_caller(const void* ip_ptr) {
    const auto ip = reinterpret_cast<std::uintptr_t>(ip_ptr);
    if (!ip || known(ip)) return;
    std::lock_guard<std::mutex> lock(g_mu);
    if (known(ip)) return;
    Search s;
    s.ip = ip;
    dl_iterate_phdr(&find_module, &s);
    Json rec = Json::object();
    rec.set("name", "proxy.module").set("payload", Json());
    if (s.found) {
        if (s.path.empty()) {  // the main program
            char buf[4096];
            ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
            s.path = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
        }
        rec.set("path", s.path);
        rec.set("base", Json(static_cast<std::uint64_t>(s.base)));
    } else {
        s.lo = ip & ~std::uintptr_t{0xFFFF};
        s.hi = s.lo + 0x10000;
        rec.set("path", Json());
        rec.set("base", Json(static_cast<std::uint64_t>(s.lo)));
    }
    rec.set("start", Json(static_cast<std::uint64_t>(s.lo))).set("end", Json(static_cast<std::uint64_t>(s.hi)));
    const int n = g_count.load(std::memory_order_relaxed);
    if (n < kMaxRanges) {
        g_ranges[n] = Range{s.lo, s.hi};
        g_count.store(n + 1, std::memory_order_release);
    }
    trace().write("mark", rec);
}

}  // namespace profharness::proxy
