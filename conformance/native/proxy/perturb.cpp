// Perturbation (issue 21, `validate --perturb SEED`): the recording proxy delays chosen points of the run by
// the seeded schedule of perturb.h, so a race that depends on who runs first shows on demand and a seed
// replays it. PROFHARNESS_PROXY_PERTURB names the seed (decimal; unset: no perturbation, and every function
// here returns at once). Each kind counts its occurrences (the schedule's index), the delays it applied and
// their total; a kind's budget, and the hang limit, bound what is applied:
//   - each delay is at most a quarter of the hang limit (PROFHARNESS_PROXY_HANG_MS), so a correct profiler
//     never looks hung, and all of a run's delays together at most half of it;
//   - PROFHARNESS_PROXY_PERTURB_BUDGET_MS, when set, caps the run's total further.
// Marks: `proxy.perturb` when Initialize arrives (the seed and the limits: a run that crashes names its
// seed), `proxy.perturb.delays` at the end of the run (after Shutdown, or beside a crash or hang report):
// per kind the points seen, the delays applied and their milliseconds, and the first delays applied in order
// ([kind, index, microseconds]).
#include "perturb.h"

#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "generated.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

using perturb::Point;
constexpr int kKinds = static_cast<int>(Point::Count_);
constexpr int kLogged = 64;  // applied delays listed in the end mark

struct Applied {
    std::atomic<int> kind{-1};
    std::atomic<std::uint64_t> index{0};
    std::atomic<std::uint32_t> us{0};
};

struct State {
    bool on = false;
    std::uint64_t seed = 0;
    std::int64_t max_us = 0;    // one delay at most
    std::int64_t total_us = 0;  // every delay of the run together at most
    std::atomic<std::uint64_t> seen[kKinds] = {};
    std::atomic<std::uint64_t> applied[kKinds] = {};
    std::atomic<std::int64_t> applied_us[kKinds] = {};
    std::atomic<std::int64_t> spent_us{0};
    std::atomic<int> logged{0};
    Applied log[kLogged];
    std::atomic<bool> started{false};
    std::atomic<bool> ended{false};
};

State& state() {
    static State* s = [] {
        auto* st = new State();
        const char* seed = std::getenv("PROFHARNESS_PROXY_PERTURB");
        if (!seed || !*seed) return st;
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(seed, &end, 10);
        if (errno != 0 || !end || *end != '\0') return st;  // the harness passes a decimal integer
        st->on = true;
        st->seed = v;
        st->max_us = 50000;
        st->total_us = 0;
        for (const perturb::Rule& r : perturb::kRules) st->total_us += static_cast<std::int64_t>(r.budget_ms) * 1000;
        if (const char* h = std::getenv("PROFHARNESS_PROXY_HANG_MS")) {
            const std::int64_t hang_us = std::atoll(h) * 1000;
            if (hang_us > 0) {
                if (st->max_us > hang_us / 4) st->max_us = hang_us / 4;
                if (st->total_us > hang_us / 2) st->total_us = hang_us / 2;
            }
        }
        if (const char* b = std::getenv("PROFHARNESS_PROXY_PERTURB_BUDGET_MS"); b && *b) {
            const std::int64_t budget_us = std::atoll(b) * 1000;
            if (budget_us >= 0 && budget_us < st->total_us) st->total_us = budget_us;
        }
        return st;
    }();
    return *s;
}

void sleep_us(std::int64_t us) {
    timespec left{static_cast<time_t>(us / 1000000), static_cast<long>((us % 1000000) * 1000)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

// Takes `us` from a budget of `limit` (both microseconds), or nothing when it would exceed it.
bool take(std::atomic<std::int64_t>& spent, std::int64_t us, std::int64_t limit) {
    std::int64_t now = spent.load(std::memory_order_relaxed);
    do {
        if (now + us > limit) return false;
    } while (!spent.compare_exchange_weak(now, now + us, std::memory_order_relaxed));
    return true;
}

void at(Point point) {
    State& s = state();
    if (!s.on) return;
    const int k = static_cast<int>(point);
    const std::uint64_t index = s.seen[k].fetch_add(1, std::memory_order_relaxed);
    std::int64_t us = perturb::delay_us(s.seed, k, index);
    if (us <= 0) return;
    if (us > s.max_us) us = s.max_us;
    const std::int64_t kind_limit = static_cast<std::int64_t>(perturb::kRules[k].budget_ms) * 1000;
    if (!take(s.applied_us[k], us, kind_limit)) return;
    if (!take(s.spent_us, us, s.total_us)) {
        s.applied_us[k].fetch_sub(us, std::memory_order_relaxed);
        return;
    }
    s.applied[k].fetch_add(1, std::memory_order_relaxed);
    const int slot = s.logged.fetch_add(1, std::memory_order_relaxed);
    if (slot < kLogged) {
        s.log[slot].index.store(index, std::memory_order_relaxed);
        s.log[slot].us.store(static_cast<std::uint32_t>(us), std::memory_order_relaxed);
        s.log[slot].kind.store(k, std::memory_order_release);
    }
    sleep_us(us);
}

bool is_initialize(int cb) {
    return cb == static_cast<int>(ProxyCb::Initialize) || cb == static_cast<int>(ProxyCb::InitializeForAttach);
}

}  // namespace

bool perturbing() { return state().on; }

// state().on, read once at load (the environment the process started with): the callback points below are
// called only then
const bool g_perturb_configured = perturbing();

void perturb_callback_enter(int cb) {
    State& s = state();
    if (!s.on) return;
    if (is_initialize(cb)) {
        if (!s.started.exchange(true) && recording_enabled()) {
            Json rec = Json::object();
            rec.set("name", "proxy.perturb").set("payload", Json());
            rec.set("seed", Json(s.seed)).set("maxDelayUs", Json(s.max_us)).set("budgetUs", Json(s.total_us));
            trace().write("mark", rec);
        }
        return;
    }
    if (cb == static_cast<int>(ProxyCb::Shutdown)) at(Point::Shutdown);
    else if (cb == static_cast<int>(ProxyCb::ThreadCreated)) at(Point::ThreadCreated);
    else if (cb == static_cast<int>(ProxyCb::ThreadDestroyed)) at(Point::ThreadDestroyed);
    else at(Point::CallbackEnter);
}

void perturb_callback_return(int cb) {
    if (!state().on) return;
    at(is_initialize(cb) ? Point::InitializeReturn : Point::CallbackReturn);
}

void perturb_initialize_call() { at(Point::InitializeCall); }

void perturb_write_delays() {
    State& s = state();
    if (!s.on || !recording_enabled() || s.ended.exchange(true)) return;
    Json seen = Json::object(), applied = Json::object(), ms = Json::object();
    for (int k = 0; k < kKinds; ++k) {
        seen.set(perturb::kPointNames[k], Json(s.seen[k].load()));
        applied.set(perturb::kPointNames[k], Json(s.applied[k].load()));
        ms.set(perturb::kPointNames[k], Json(static_cast<double>(s.applied_us[k].load()) / 1000.0));
    }
    Json first = Json::array();
    const int n = s.logged.load() < kLogged ? s.logged.load() : kLogged;
    for (int k = 0; k < n; ++k) {
        const int kind = s.log[k].kind.load(std::memory_order_acquire);
        if (kind < 0) break;
        first.push(Json::array()
                       .push(Json(perturb::kPointNames[kind]))
                       .push(Json(s.log[k].index.load()))
                       .push(Json(static_cast<std::uint64_t>(s.log[k].us.load()))));
    }
    Json rec = Json::object();
    rec.set("name", "proxy.perturb.delays").set("payload", Json());
    rec.set("seed", Json(s.seed)).set("points", seen).set("delays", applied).set("delayMs", ms);
    rec.set("first", first);
    trace().write("mark", rec);
}

}  // namespace profharness::proxy
