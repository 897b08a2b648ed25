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
    const std::uint64_t hi = id + size;
    // the first object starting above id, found once (drop and insert share it): usually the one after the
    // previous allocation (a bump allocator hands out rising addresses), else a search
    ObjectMap::iterator it;
    if (cursor_valid_ && cursor_->first < id && (std::next(cursor_) == size_.end() || std::next(cursor_)->first > id))
        it = std::next(cursor_);
    else
        it = size_.upper_bound(id);
    // drop_overlapping(id, hi) from that position: the object at or below id when its bytes reach id, every
    // object starting in (id, hi)
    if (it != size_.begin()) {
        auto below = std::prev(it);
        if (below->first + below->second > id) size_.erase(below);
    }
    while (it != size_.end() && it->first < hi) it = size_.erase(it);
    cursor_ = size_.emplace_hint(it, id, size);
    cursor_valid_ = true;
    if (left_live_ == 0) return;  // no address is left (or every one is forgotten)
    auto l = std::lower_bound(left_.begin(), left_.end(), id,
                              [](const Left& x, std::uint64_t a) { return x.addr < a; });
    if (l != left_.end() && l->addr == id && l->gc != 0) {
        l->gc = 0;  // forgotten; removed at the next GC
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

namespace {

// upper_bound / lower_bound of a rising sequence of keys: from the previous answer a few steps forward (the
// keys asked for rise by little: the objects of a moved block, the blocks in address order), else a search.
// The same answers as the map's own searches.
template <typename Map, bool Upper>
class RisingBound {
 public:
    explicit RisingBound(const Map& map) : map_(map) {}
    typename Map::const_iterator operator()(std::uint64_t key) {
        if (have_ && key >= last_) {
            for (int k = 0; k < 8; ++k) {
                if (at_ == map_.end() || !below(at_->first, key)) return remember(key);
                ++at_;
            }
        }
        at_ = Upper ? map_.upper_bound(key) : map_.lower_bound(key);
        return remember(key);
    }

 private:
    static bool below(std::uint64_t k, std::uint64_t key) { return Upper ? k <= key : k < key; }
    typename Map::const_iterator remember(std::uint64_t key) {
        have_ = true;
        last_ = key;
        return at_;
    }
    const Map& map_;
    typename Map::const_iterator at_;
    std::uint64_t last_ = 0;
    bool have_ = false;
};

}  // namespace

bool ShadowHeap::moves_onto_others() const {
    RisingBound<ObjectMap, false> first_in(size_);
    RisingBound<ObjectMap, true> above(size_);
    for (const Move& m : moved_) {
        if (m.new_start == m.old_start) continue;
        for (auto it = first_in(m.old_start); it != size_.end() && it->first < m.old_start + m.length; ++it) {
            const std::uint64_t target = m.new_start + (it->first - m.old_start);
            auto p = above(target);  // the object at or below the target, before this GC
            if (p == size_.begin()) continue;
            --p;
            if (p->first != it->first && target < p->first + p->second) return true;
        }
    }
    return false;
}

void ShadowHeap::gc_finished() {
    cursor_valid_ = false;  // objects move and die here
    // the runtime reports its blocks in address order: sorted already, mostly
    if (!std::is_sorted(moved_.begin(), moved_.end())) std::sort(moved_.begin(), moved_.end());
    if (!std::is_sorted(surviving_.begin(), surviving_.end())) std::sort(surviving_.begin(), surviving_.end());
    ++gcs_;
    if (std::any_of(moved_.begin(), moved_.end(), [](const Move& m) { return m.new_start != m.old_start; })) {
        ++compacting_gcs_;
        if (moves_onto_others()) ++reuse_gcs_;
    }
    // In place (a GC of the youngest generation moves few of many objects): objects iterate in address order
    // beside the sorted blocks. An object in a moved block is taken out (its node kept for its new place),
    // one that died is erased; what stays is what the model keeps where it is.
    using Node = ObjectMap::node_type;
    std::vector<Node> placed;                                   // nodes re-keyed to their new start
    std::vector<std::pair<std::uint64_t, std::uint64_t>> left;  // (old start, new start): moved away
    std::size_t mi = 0, si = 0;
    for (auto it = size_.begin(); it != size_.end();) {
        const std::uint64_t start = it->first;
        while (mi < moved_.size() && moved_[mi].old_start <= start) ++mi;  // moved_[mi - 1]: last at or below
        if (mi > 0 && start < moved_[mi - 1].old_start + moved_[mi - 1].length) {
            const Move& m = moved_[mi - 1];
            const std::uint64_t target = m.new_start + (start - m.old_start);
            if (target != start) left.emplace_back(start, target);
            auto next = std::next(it);
            Node node = size_.extract(it);
            node.key() = target;
            placed.push_back(std::move(node));
            it = next;
            continue;
        }
        while (si < surviving_.size() && surviving_[si].start <= start) ++si;
        const bool survived = si > 0 && start < surviving_[si - 1].start + surviving_[si - 1].length;
        if (survived || !collected_at(start)) ++it;
        else it = size_.erase(it);
    }
    // what stays where another object lives now (a moved block's new range covers it) is dropped
    for (const Move& m : moved_) drop_overlapping(m.new_start, m.new_start + m.length);
    // then every moved object at its new start (a later one wins a tie, as the model's dict assignment)
    std::vector<std::uint64_t> targets;
    targets.reserve(placed.size());
    // a moved block's objects go to rising addresses: each inserted just after the previous one when it fits
    // there (the hint), else by a search
    auto hint = size_.end();
    for (Node& node : placed) {
        targets.push_back(node.key());
        auto at = size_.insert(hint, std::move(node));
        if (!node.empty()) at->second = node.mapped();  // the key was there: a later one wins the tie
        hint = std::next(at);
    }
    // runs of rising addresses (a moved block's objects): a merge sort, not introsort (which fell to its heap
    // sort on them)
    if (!std::is_sorted(targets.begin(), targets.end())) std::stable_sort(targets.begin(), targets.end());
    // addresses objects left: the earlier ones follow their objects, the new ones (this GC) replace them
    std::vector<Left> carried;
    carried.reserve(left_live_ + left.size());
    for (const Left& l : left_) {
        if (l.gc == 0) continue;
        Left c = l;
        if (const Move* m = block_of(moved_, c.now)) c.now = m->new_start + (c.now - m->old_start);
        carried.push_back(c);
    }
    if (!std::is_sorted(left.begin(), left.end())) std::sort(left.begin(), left.end());
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
    // an address an object starts at now is no longer left; only this GC's moves can have put one there (no
    // object starts at a left address between GCs: an allocation there forgets it), so only their targets
    // are looked at, beside the sorted addresses
    left_.clear();
    auto t = targets.begin();
    for (const Left& l : merged) {
        while (t != targets.end() && *t < l.addr) ++t;
        if (t != targets.end() && *t == l.addr) continue;
        if (left_gcs_ > 0 && gcs_ - l.gc >= static_cast<std::uint64_t>(left_gcs_)) {
            ++left_dropped_;
            continue;
        }
        left_.push_back(l);
    }
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
