// The shadow heap (profharness/shadow_heap.h): clr_model/shadow_heap.py in C++, step for step.
#include "profharness/shadow_heap.h"

#include <algorithm>
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

// --- queries ------------------------------------------------------------------------------------------------

const ShadowHeap::Left* ShadowHeap::find_left(std::uint64_t addr) const {
    auto it = std::lower_bound(left_.begin(), left_.end(), addr,
                               [](const Left& l, std::uint64_t a) { return l.addr < a; });
    if (it == left_.end() || it->addr != addr || it->gc == 0) return nullptr;
    return &*it;
}

HeapClassification ShadowHeap::classify(std::uint64_t id) const {
    HeapClassification c;
    auto it = size_.upper_bound(id);
    if (it != size_.begin()) {
        --it;
        if (it->first == id) {
            c.verdict = HeapVerdict::Object;
            c.object_start = id;
            return c;
        }
    } else {
        it = size_.end();
    }
    if (const Left* l = find_left(id)) {
        c.verdict = HeapVerdict::Stale;
        c.object_start = l->now;
        return c;
    }
    if (it != size_.end() && id - it->first < it->second) {
        c.verdict = HeapVerdict::Interior;
        c.object_start = it->first;
        c.offset = id - it->first;
    }
    return c;
}

// --- the runtime's reports ----------------------------------------------------------------------------------

void ShadowHeap::drop_overlapping(std::uint64_t lo, std::uint64_t hi) {
    auto it = size_.upper_bound(lo);
    if (it != size_.begin()) --it;
    while (it != size_.end() && it->first < hi) {
        if (it->first + it->second > lo) it = size_.erase(it);
        else ++it;
    }
}

void ShadowHeap::allocate(std::uint64_t id, std::uint64_t size) {
    if (size < 1) size = 1;
    drop_overlapping(id, id + size);
    size_[id] = size;
    auto it = std::lower_bound(left_.begin(), left_.end(), id,
                               [](const Left& l, std::uint64_t a) { return l.addr < a; });
    if (it != left_.end() && it->addr == id && it->gc != 0) {
        it->gc = 0;  // forgotten; removed at the next GC
        --left_live_;
    }
}

void ShadowHeap::gc_started(std::uint64_t collected_mask, std::vector<GenerationRange> generations) {
    collected_ = collected_mask;
    std::sort(generations.begin(), generations.end(), [](const GenerationRange& a, const GenerationRange& b) {
        if (a.start != b.start) return a.start < b.start;
        if (a.end != b.end) return a.end < b.end;
        return a.generation < b.generation;
    });
    generations_ = std::move(generations);
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
    if (generations_.empty()) return true;
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

// The moved block whose old range holds `address` (the last one starting at or below it), or null.
template <typename M>
const M* block_of(const std::vector<M>& moved, std::uint64_t address) {
    auto it = std::upper_bound(moved.begin(), moved.end(), address,
                               [](std::uint64_t a, const M& m) { return a < m.old_start; });
    if (it == moved.begin()) return nullptr;
    --it;
    return address < it->old_start + it->length ? &*it : nullptr;
}

}  // namespace

void ShadowHeap::gc_finished() {
    std::sort(moved_.begin(), moved_.end());
    std::sort(surviving_.begin(), surviving_.end());
    ++gcs_;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> placed;  // (new start, size)
    std::vector<std::pair<std::uint64_t, std::uint64_t>> kept;    // (start, size): stay where they are
    std::vector<std::pair<std::uint64_t, std::uint64_t>> left;    // (old start, new start): moved away
    for (const auto& [start, size] : size_) {
        if (const Move* m = block_of(moved_, start)) {
            std::uint64_t target = m->new_start + (start - m->old_start);
            placed.emplace_back(target, size);
            if (target != start) left.emplace_back(start, target);
            continue;
        }
        auto s = std::upper_bound(surviving_.begin(), surviving_.end(), start,
                                  [](std::uint64_t a, const Span& sp) { return a < sp.start; });
        bool survived = false;
        if (s != surviving_.begin()) {
            --s;
            survived = start < s->start + s->length;
        }
        if (survived || !collected_at(start)) kept.emplace_back(start, size);
    }
    // placed: later entries win a tie (the model's dict assignment), so a stable sort keeps the last
    std::stable_sort(placed.begin(), placed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<std::uint64_t, std::uint64_t>> unique;
    unique.reserve(placed.size());
    for (const auto& p : placed) {
        if (!unique.empty() && unique.back().first == p.first) unique.back() = p;
        else unique.push_back(p);
    }
    placed.swap(unique);
    // the new ranges of the moved blocks, sorted (start, end)
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    ranges.reserve(moved_.size());
    for (const Move& m : moved_) ranges.emplace_back(m.new_start, m.new_start + m.length);
    std::sort(ranges.begin(), ranges.end());
    auto covered = [&ranges](std::uint64_t lo, std::uint64_t hi) {
        auto it = std::upper_bound(ranges.begin(), ranges.end(), lo,
                                   [](std::uint64_t a, const auto& r) { return a < r.first; });
        if (it != ranges.begin() && std::prev(it)->second > lo) return true;
        return it != ranges.end() && it->first < hi;
    };
    auto in_placed = [&placed](std::uint64_t a) {
        auto it = std::lower_bound(placed.begin(), placed.end(), a,
                                   [](const auto& p, std::uint64_t x) { return p.first < x; });
        return it != placed.end() && it->first == a;
    };
    std::vector<std::pair<std::uint64_t, std::uint64_t>> stay;
    for (const auto& [start, size] : kept)
        if (!in_placed(start) && !covered(start, start + size)) stay.emplace_back(start, size);
    // the new map: placed and stay are disjoint in starts, each sorted
    std::map<std::uint64_t, std::uint64_t> next;
    {
        auto a = placed.begin(), b = stay.begin();
        while (a != placed.end() || b != stay.end()) {
            if (b == stay.end() || (a != placed.end() && a->first < b->first)) next.emplace_hint(next.end(), *a++);
            else next.emplace_hint(next.end(), *b++);
        }
    }
    // addresses objects left: the earlier ones follow their objects, the new ones (this GC) replace them
    std::vector<Left> carried;
    carried.reserve(left_live_ + left.size());
    for (const Left& l : left_) {
        if (l.gc == 0) continue;
        Left c = l;
        if (const Move* m = block_of(moved_, c.now)) c.now = m->new_start + (c.now - m->old_start);
        carried.push_back(c);
    }
    std::sort(left.begin(), left.end());
    std::vector<Left> merged;
    merged.reserve(carried.size() + left.size());
    {
        auto a = carried.begin();
        auto b = left.begin();
        while (a != carried.end() || b != left.end()) {
            if (b == left.end() || (a != carried.end() && a->addr < b->first)) {
                merged.push_back(*a++);
            } else {
                if (a != carried.end() && a->addr == b->first) ++a;  // replaced by this GC's
                merged.push_back(Left{b->first, b->second, gcs_});
                ++b;
            }
        }
    }
    left_.clear();
    for (const Left& l : merged) {
        if (next.count(l.addr)) continue;
        if (left_gcs_ > 0 && gcs_ - l.gc >= static_cast<std::uint64_t>(left_gcs_)) {
            ++left_dropped_;
            continue;
        }
        left_.push_back(l);
    }
    left_live_ = left_.size();
    cap_left();
    size_.swap(next);
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
