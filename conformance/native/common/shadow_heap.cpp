// The shadow heap (profharness/shadow_heap.h): clr_model/shadow_heap.py in C++, the same answers on sorted arrays.
#include "profharness/shadow_heap.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace profharness {

const char* heap_verdict_name(HeapVerdict v) {
    switch (v) {
        case HeapVerdict::Object: return "object";
        case HeapVerdict::Stale: return "stale";
        case HeapVerdict::Interior: return "interior";
        default: return "unknown";
    }
}

namespace {

using Object = ShadowHeap::Object;

struct ByStart {
    bool operator()(const Object& a, const Object& b) const { return a.start < b.start; }
};

// The index of the first element of sorted `v` whose key is above `x`, searched from `from` (the previous
// answer) by galloping, forward or back: keys asked for in rising order (the objects of a moved block,
// addresses in address order) or near one another cost a few steps each.
template <typename V, typename Key>
std::size_t first_above_from(const V& v, std::size_t from, std::uint64_t x, Key key) {
    std::size_t lo = 0, hi = v.size(), step = 1;  // the answer is in [lo, hi]
    if (from > v.size()) from = v.size();
    if (from > 0 && key(v[from - 1]) > x) {  // back: the answer is at most from - 1
        hi = from - 1;
        while (hi >= step && key(v[hi - step]) > x) {
            hi -= step;
            step *= 2;
        }
        lo = hi >= step ? hi - step + 1 : 0;
    } else {  // forward: every element before `from` is at or below x
        lo = from;
        hi = lo;
        while (hi < v.size() && key(v[hi]) <= x) {
            lo = hi + 1;
            hi = lo + step;
            step *= 2;
        }
        if (hi > v.size()) hi = v.size();
    }
    while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (key(v[mid]) <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

constexpr auto start_of = [](const Object& o) { return o.start; };

// The first object starting above `id`.
std::vector<Object>::const_iterator first_above(const std::vector<Object>& objects, std::uint64_t id) {
    return std::upper_bound(objects.begin(), objects.end(), id,
                            [](std::uint64_t a, const Object& o) { return a < o.start; });
}

// Sorts `v` (stable, as std::stable_sort) by merging its rising runs pairwise, pass after pass, through
// `buffer`: what the heap sorts comes as a few rising runs (the runtime's batches of blocks with a few
// blocks of another region among them, each thread's bump allocations), which one or two merges order.
template <typename T, typename Less>
void sort_runs(std::vector<T>& v, std::vector<T>& buffer, Less less) {
    const std::size_t n = v.size();
    auto run_end = [&v, n, &less](std::size_t from) {
        std::size_t k = from + 1;
        while (k < n && !less(v[k], v[k - 1])) ++k;
        return k;
    };
    if (n < 2 || run_end(0) == n) return;
    buffer.resize(n);
    do {
        for (std::size_t a = 0; a < n;) {
            const std::size_t b = run_end(a);
            const std::size_t c = b < n ? run_end(b) : n;
            std::merge(v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b),
                       v.begin() + static_cast<std::ptrdiff_t>(b), v.begin() + static_cast<std::ptrdiff_t>(c),
                       buffer.begin() + static_cast<std::ptrdiff_t>(a), less);
            a = c;
        }
        v.swap(buffer);
    } while (run_end(0) < n);
}

// Whether sorted objects overlap one another (an object's bytes reach the next one's start).
bool overlapping(const Object* sorted, std::size_t n) {
    for (std::size_t k = 1; k < n; ++k)
        if (sorted[k - 1].start + sorted[k - 1].size > sorted[k].start) return true;
    return false;
}

}  // namespace

// --- queries ------------------------------------------------------------------------------------------------

const ShadowHeap::Left* ShadowHeap::find_left(std::uint64_t addr) const {
    auto it = std::lower_bound(left_.begin(), left_.end(), addr,
                               [](const Left& l, std::uint64_t a) { return l.addr < a; });
    if (it == left_.end() || it->addr != addr || it->gc == 0) return nullptr;
    return &*it;
}

HeapClassification ShadowHeap::classify(std::uint64_t id) {
    if (!pending_.empty()) {
        HeapClassification c;
        if (classify_pending(id, c)) return c;
        settle();
    }
    return classify_settled(id);
}

HeapClassification ShadowHeap::classify_settled(std::uint64_t id) const {
    HeapClassification c;
    auto it = first_above(objects_, id);
    const Object* below = it == objects_.begin() ? nullptr : &*std::prev(it);
    if (below && below->start == id) {
        c.verdict = HeapVerdict::Object;
        c.object_start = id;
        return c;
    }
    if (const Left* l = find_left(id)) {
        c.verdict = HeapVerdict::Stale;
        c.object_start = l->now;
        return c;
    }
    if (below && id - below->start < below->size) {
        c.verdict = HeapVerdict::Interior;
        c.object_start = below->start;
        c.offset = id - below->start;
    }
    return c;
}

// With the objects disjoint and the pending allocations disjoint from one another, the heap they make is every
// pending allocation and every object none of them overlaps, and no two of those overlap: the object at or
// below `id` is the pending one or the array's one, whichever starts higher (an array object below an
// overlapped one ends before it, below `id`). Pending allocations that came in rising order are searched as
// they are; at most kPendingScan others are sorted for it; more: false (the caller merges them).
bool ShadowHeap::classify_pending(std::uint64_t id, HeapClassification& c) const {
    if (!disjoint_) return false;
    const std::size_t n = pending_.size();
    const Object* sorted = pending_.data();
    Object copy[kPendingScan];
    if (!pending_rising_) {
        if (n > kPendingScan) return false;
        std::copy(pending_.begin(), pending_.end(), copy);
        std::sort(copy, copy + n, ByStart());
        if (overlapping(copy, n)) return false;
        sorted = copy;
    }
    const Object* end = sorted + n;
    const Object* p = std::upper_bound(sorted, end, id, [](std::uint64_t a, const Object& o) { return a < o.start; });
    const Object* below = p == sorted ? nullptr : p - 1;  // the pending allocation at or below id
    auto it = first_above(objects_, id);
    if (it != objects_.begin()) {
        const Object& o = *std::prev(it);
        // the first pending allocation whose bytes reach above o's start (their ends rise too) covers o when
        // it starts below o's end
        const Object* q = std::upper_bound(sorted, end, o.start,
                                           [](std::uint64_t a, const Object& x) { return a < x.start + x.size; });
        const bool covered = q != end && q->start < o.start + o.size;
        if (!covered && (!below || o.start > below->start)) below = &o;
    }
    c = HeapClassification{};
    if (below && below->start == id) {
        c.verdict = HeapVerdict::Object;
        c.object_start = id;
    } else if (const Left* l = find_left(id)) {
        c.verdict = HeapVerdict::Stale;
        c.object_start = l->now;
    } else if (below && id - below->start < below->size) {
        c.verdict = HeapVerdict::Interior;
        c.object_start = below->start;
        c.offset = id - below->start;
    }
    return true;
}

// --- the runtime's reports ----------------------------------------------------------------------------------

void ShadowHeap::allocate(std::uint64_t id, std::uint64_t size) {
    if (size < 1) size = 1;
    if (!pending_.empty() && id < pending_.back().start + pending_.back().size) pending_rising_ = false;
    pending_.push_back(Object{id, size});
}

void ShadowHeap::forget_left(const std::vector<Object>& allocated) {
    std::size_t hint = 0;
    for (const Object& o : allocated) {
        if (left_live_ == 0) return;  // no address is left (or every one is forgotten)
        hint = first_above_from(left_, hint, o.start, [](const Left& l) { return l.addr; });
        Left* l = hint ? &left_[hint - 1] : nullptr;
        if (l && l->addr == o.start && l->gc != 0) {
            l->gc = 0;  // forgotten; removed at the next GC
            --left_live_;
        }
    }
}

void ShadowHeap::settle() {
    if (pending_.empty()) return;
    // the shortcut: pending allocations disjoint from one another over disjoint objects drop exactly the
    // objects they overlap, whatever their order; else each in turn
    const std::vector<Object>* add = &pending_;
    if (!pending_rising_ && !std::is_sorted(pending_.begin(), pending_.end(), ByStart())) {
        // runs of rising starts (each thread's allocations): a merge sort (introsort fell to its heap sort)
        sorted_.assign(pending_.begin(), pending_.end());
        sort_runs(sorted_, run_buffer_, ByStart());
        add = &sorted_;
    }
    forget_left(*add);
    if (!disjoint_ || (!pending_rising_ && overlapping(add->data(), add->size()))) {
        settle_one_by_one();
        return;
    }
    scratch_.clear();
    scratch_.reserve(objects_.size() + add->size());
    std::size_t a = 0;  // the next pending allocation to place
    std::size_t j = 0;  // the first pending allocation whose bytes reach above the object's start
    for (const Object& o : objects_) {
        while (a < add->size() && (*add)[a].start < o.start) scratch_.push_back((*add)[a++]);
        while (j < add->size() && (*add)[j].start + (*add)[j].size <= o.start) ++j;
        if (j < add->size() && (*add)[j].start < o.start + o.size) continue;  // that memory was free: it died
        scratch_.push_back(o);
    }
    scratch_.insert(scratch_.end(), add->begin() + static_cast<std::ptrdiff_t>(a), add->end());
    objects_.swap(scratch_);
    pending_.clear();
    pending_rising_ = true;
}

void ShadowHeap::settle_one_by_one() {
    for (const Object& p : pending_) {
        // drops the object at or below p.start when its bytes reach it and every object starting in
        // (p.start, p.start + p.size), then p takes their place
        auto from = objects_.begin() + (first_above(objects_, p.start) - objects_.cbegin());
        if (from != objects_.begin() && std::prev(from)->start + std::prev(from)->size > p.start) --from;
        auto to = from;
        while (to != objects_.end() && to->start < p.start + p.size) ++to;
        if (from == to) {
            objects_.insert(from, p);
        } else {
            *from = p;
            objects_.erase(from + 1, to);
        }
    }
    pending_.clear();
    pending_rising_ = true;
    disjoint_ = !overlapping(objects_.data(), objects_.size());
}

void ShadowHeap::gc_started(std::uint64_t collected_mask, std::vector<GenerationRange> generations) {
    collected_ = collected_mask;
    std::sort(generations.begin(), generations.end(), [](const GenerationRange& a, const GenerationRange& b) {
        if (a.start != b.start) return a.start < b.start;
        if (a.end != b.end) return a.end < b.end;
        return a.generation < b.generation;
    });
    generations_ = std::move(generations);
    all_collected_ = std::all_of(generations_.begin(), generations_.end(), [collected_mask](const GenerationRange& g) {
        return g.generation >= 0 && g.generation < 64 && ((collected_mask >> g.generation) & 1u);
    });
    moved_.clear();
    surviving_.clear();
    in_gc_ = true;
}

void ShadowHeap::moved(std::size_t n, const std::uint64_t* olds, const std::uint64_t* news,
                       const std::uint64_t* lens) {
    for (std::size_t i = 0; i < n; ++i)
        if (lens[i] > 0) moved_.push_back(Move{olds[i], news[i], lens[i]});
}

void ShadowHeap::surviving(std::size_t n, const std::uint64_t* starts, const std::uint64_t* lens) {
    for (std::size_t i = 0; i < n; ++i)
        if (lens[i] > 0) surviving_.push_back(Span{starts[i], lens[i]});
}

bool ShadowHeap::collected_at(std::uint64_t address) const {
    if (all_collected_) return true;  // every range's generation (or none named)
    // the last range whose start <= address (ties: the greatest (start, end, generation))
    auto it = std::upper_bound(generations_.begin(), generations_.end(), address,
                               [](std::uint64_t a, const GenerationRange& g) { return a < g.start; });
    if (it == generations_.begin()) return true;
    --it;
    if (it->start <= address && address < it->end)
        return it->generation >= 0 && it->generation < 64 && ((collected_ >> it->generation) & 1u);
    return true;  // in no generation the runtime named: the safe side
}

namespace {

// The moved block whose old range holds `address` (the last one starting at or below it), or null; `hint`: the
// previous answer's place (first_above_from), updated.
template <typename M>
const M* block_of(const std::vector<M>& moved, std::uint64_t address, std::size_t& hint) {
    hint = first_above_from(moved, hint, address, [](const M& m) { return m.old_start; });
    if (hint == 0) return nullptr;
    const M& m = moved[hint - 1];
    return address < m.old_start + m.length ? &m : nullptr;
}

}  // namespace

bool ShadowHeap::moves_onto_others() const {
    std::size_t at = 0, below = 0;
    for (const Move& m : moved_) {
        if (m.new_start == m.old_start) continue;
        // the block's objects (from the first at or above its start), and the object at or below each target
        // before this GC: both rise through the block
        at = m.old_start ? first_above_from(objects_, at, m.old_start - 1, start_of) : 0;
        for (std::size_t k = at; k < objects_.size() && objects_[k].start < m.old_start + m.length; ++k) {
            const std::uint64_t target = m.new_start + (objects_[k].start - m.old_start);
            below = first_above_from(objects_, below, target, start_of);
            if (below == 0) continue;
            const Object& p = objects_[below - 1];
            if (p.start != objects_[k].start && target < p.start + p.size) return true;
        }
    }
    return false;
}

void ShadowHeap::drop_covered() {
    if (moved_.empty() || objects_.empty()) return;
    std::vector<Span>& ranges = ranges_;  // the moved blocks' new ranges, by start
    ranges.clear();
    for (const Move& m : moved_) ranges.push_back(Span{m.new_start, m.length});
    sort_runs(ranges, span_buffer_, std::less<Span>());
    std::vector<std::uint64_t>& reach = reach_;  // the highest end of ranges[0..k]
    reach.resize(ranges.size());
    for (std::size_t k = 0; k < ranges.size(); ++k)
        reach[k] = std::max(k ? reach[k - 1] : 0, ranges[k].start + ranges[k].length);
    // an object is covered when a range starting below its end reaches above its start; disjoint objects
    // end in rising order, so the ranges starting below the end are counted forward
    std::size_t below = 0, w = 0;
    for (const Object& o : objects_) {
        const std::uint64_t end = o.start + o.size;
        if (disjoint_) {
            while (below < ranges.size() && ranges[below].start < end) ++below;
        } else {
            below = static_cast<std::size_t>(
                std::lower_bound(ranges.begin(), ranges.end(), end,
                                 [](const Span& r, std::uint64_t e) { return r.start < e; }) - ranges.begin());
        }
        if (below > 0 && reach[below - 1] > o.start) continue;
        objects_[w++] = o;
    }
    objects_.resize(w);
}

void ShadowHeap::gc_finished() {
    settle();
    // the runtime reports its blocks in address order: sorted already, mostly
    sort_runs(moved_, move_buffer_, std::less<Move>());
    sort_runs(surviving_, span_buffer_, std::less<Span>());
    ++gcs_;
    if (std::any_of(moved_.begin(), moved_.end(), [](const Move& m) { return m.new_start != m.old_start; })) {
        ++compacting_gcs_;
        if (moves_onto_others()) ++reuse_gcs_;
    }
    // One pass in address order beside the sorted blocks: an object in a moved block goes to `placed` at its
    // new start, one that died is dropped, what stays where it is is compacted in place.
    std::vector<Object>& placed = placed_;
    placed.clear();
    moved_away_.clear();
    std::size_t mi = 0, si = 0, w = 0;
    for (std::size_t r = 0; r < objects_.size(); ++r) {
        const Object o = objects_[r];
        while (mi < moved_.size() && moved_[mi].old_start <= o.start) ++mi;  // moved_[mi - 1]: last at or below
        if (mi > 0 && o.start < moved_[mi - 1].old_start + moved_[mi - 1].length) {
            const Move& m = moved_[mi - 1];
            const std::uint64_t target = m.new_start + (o.start - m.old_start);
            if (target != o.start) moved_away_.emplace_back(o.start, target);
            placed.push_back(Object{target, o.size});
            continue;
        }
        while (si < surviving_.size() && surviving_[si].start <= o.start) ++si;
        const bool survived = si > 0 && o.start < surviving_[si - 1].start + surviving_[si - 1].length;
        if (survived || !collected_at(o.start)) objects_[w++] = o;
    }
    objects_.resize(w);
    // what stays where another object lives now (a moved block's new range covers it) is dropped
    drop_covered();
    // then every moved object at its new start (a later one wins a tie, as the model's dict assignment): a
    // moved block's objects rise, so `placed` is runs of rising starts (a merge sort, stable for the ties)
    sort_runs(placed, run_buffer_, ByStart());
    {
        std::size_t u = 0;
        for (std::size_t k = 0; k < placed.size(); ++k) {
            if (u > 0 && placed[u - 1].start == placed[k].start) placed[u - 1] = placed[k];
            else placed[u++] = placed[k];
        }
        placed.resize(u);
    }
    scratch_.clear();
    scratch_.reserve(objects_.size() + placed.size());
    {
        auto a = objects_.begin();
        auto b = placed.begin();
        while (a != objects_.end() || b != placed.end()) {
            if (b == placed.end() || (a != objects_.end() && a->start < b->start)) {
                scratch_.push_back(*a++);
            } else {
                if (a != objects_.end() && a->start == b->start) ++a;  // the moved one wins
                scratch_.push_back(*b++);
            }
        }
    }
    objects_.swap(scratch_);
    disjoint_ = !overlapping(objects_.data(), objects_.size());
    // addresses objects left: the earlier ones follow their objects (in place), the new ones (this GC) replace
    // them; an address an object starts at now is no longer left: only this GC's moves can have put one there
    // (no object starts at a left address between GCs: an allocation there forgets it), so only their
    // targets are looked at, beside the sorted addresses
    std::size_t hint = 0;
    for (Left& l : left_)
        if (l.gc != 0)
            if (const Move* m = block_of(moved_, l.now, hint)) l.now = m->new_start + (l.now - m->old_start);
    left_next_.clear();
    left_next_.reserve(left_live_ + moved_away_.size());
    auto t = placed_.begin();
    auto keep = [&](const Left& l) {
        while (t != placed_.end() && t->start < l.addr) ++t;
        if (t != placed_.end() && t->start == l.addr) return;
        if (left_gcs_ > 0 && gcs_ - l.gc >= static_cast<std::uint64_t>(left_gcs_)) {
            ++left_dropped_;
            return;
        }
        left_next_.push_back(l);
    };
    {
        auto a = left_.begin();
        auto b = moved_away_.begin();  // in address order (the pass above)
        while (a != left_.end() || b != moved_away_.end()) {
            if (a != left_.end() && a->gc == 0) {
                ++a;
            } else if (b == moved_away_.end() || (a != left_.end() && a->addr < b->first)) {
                keep(*a++);
            } else {
                if (a != left_.end() && a->addr == b->first) ++a;  // replaced by this GC's
                keep(Left{b->first, b->second, gcs_});
                ++b;
            }
        }
    }
    left_.swap(left_next_);
    left_live_ = left_.size();
    cap_left();
    in_gc_ = false;
    moved_.clear();
    surviving_.clear();
}

void ShadowHeap::cap_left() {
    if (left_max_ == 0 || left_.size() <= left_max_) return;
    // drop the oldest GC's addresses first, within one GC the highest addresses first
    std::vector<std::size_t> order(left_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const std::size_t drop = left_.size() - left_max_;
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(drop - 1), order.end(),
                     [this](std::size_t x, std::size_t y) {
                         const Left& a = left_[x];
                         const Left& b = left_[y];
                         if (a.gc != b.gc) return a.gc < b.gc;
                         return a.addr > b.addr;
                     });
    for (std::size_t k = 0; k < drop; ++k) left_[order[k]].gc = 0;
    std::vector<Left> rest;
    rest.reserve(left_max_);
    for (const Left& l : left_)
        if (l.gc != 0) rest.push_back(l);
    left_.swap(rest);
    left_dropped_ += drop;
    left_live_ = left_.size();
}

}  // namespace profharness
