// Drives profharness/shadow_heap.h from JSON lines on stdin, for the differential test against the reference
// model (tests/conformance/native/test_shadow_heap_diff.py). Arguments: [left_gcs [left_max]] (0: no cap).
// Commands, one JSON object a line:
//   {"op": "allocate", "id": N, "size": N}
//   {"op": "gc_started", "collected": [g, ...], "generations": [[start, end, g], ...]}
//   {"op": "moved", "blocks": [[old, new, length], ...]}
//   {"op": "surviving", "blocks": [[start, length], ...]}
//   {"op": "gc_finished"}
//   {"op": "classify", "id": N}     prints {"verdict": str, "objectStart": N|null, "offset": N|null}
//   {"op": "objects"}               prints [[start, size], ...] in address order
// A line that is not such a command: one line on stderr, exit 2.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "profharness/json.h"
#include "profharness/shadow_heap.h"

using namespace profharness;

namespace {

[[noreturn]] void bad(long line, const std::string& what) {
    std::fprintf(stderr, "stdin:%ld: %s\n", line, what.c_str());
    std::exit(2);
}

std::uint64_t num(const Json* j, long line, const char* what) {
    if (!j || !j->is_integer()) bad(line, std::string("expected an integer ") + what);
    return j->as_uint();
}

}  // namespace

int main(int argc, char** argv) {
    int left_gcs = argc > 1 ? std::atoi(argv[1]) : ShadowHeap::kDefaultLeftGcs;
    std::size_t left_max = argc > 2 ? static_cast<std::size_t>(std::atol(argv[2])) : ShadowHeap::kDefaultLeftMax;
    ShadowHeap heap(left_gcs, left_max);
    std::string text;
    long line = 0;
    while (std::getline(std::cin, text)) {
        ++line;
        if (text.empty()) continue;
        Json cmd;
        std::string err;
        if (!Json::parse(text, cmd, err) || !cmd.is_object()) bad(line, "not a JSON object: " + err);
        const Json* op = cmd.get("op");
        if (!op || !op->is_string()) bad(line, "no \"op\"");
        const std::string& name = op->as_string();
        if (name == "allocate") {
            const std::uint64_t id = num(cmd.get("id"), line, "id");
            heap.allocate(id, num(cmd.get("size"), line, "size"));
        } else if (name == "gc_started") {
            std::uint64_t mask = 0;
            if (const Json* c = cmd.get("collected"))
                for (const Json& g : c->items()) mask |= std::uint64_t{1} << (num(&g, line, "generation") & 63u);
            std::vector<GenerationRange> gens;
            if (const Json* gs = cmd.get("generations"))
                for (const Json& g : gs->items()) {
                    if (g.items().size() != 3) bad(line, "a generation is [start, end, generation]");
                    GenerationRange r{};
                    r.start = num(&g.items()[0], line, "start");
                    r.end = num(&g.items()[1], line, "end");
                    r.generation = static_cast<int>(num(&g.items()[2], line, "generation"));
                    gens.push_back(r);
                }
            heap.gc_started(mask, std::move(gens));
        } else if (name == "moved" || name == "surviving") {
            const bool moved = name == "moved";
            const Json* blocks = cmd.get("blocks");
            if (!blocks || !blocks->is_array()) bad(line, "no \"blocks\"");
            std::vector<std::uint64_t> a, b, c;
            for (const Json& blk : blocks->items()) {
                if (blk.items().size() != (moved ? 3u : 2u)) bad(line, "a block of the wrong length");
                a.push_back(num(&blk.items()[0], line, "start"));
                b.push_back(num(&blk.items()[1], line, "start"));
                if (moved) c.push_back(num(&blk.items()[2], line, "length"));
            }
            if (moved) heap.moved(a.size(), a.data(), b.data(), c.data());
            else heap.surviving(a.size(), a.data(), b.data());
        } else if (name == "gc_finished") {
            heap.gc_finished();
        } else if (name == "classify") {
            HeapClassification c = heap.classify(num(cmd.get("id"), line, "id"));
            Json out = Json::object();
            out.set("verdict", heap_verdict_name(c.verdict));
            out.set("objectStart", c.verdict == HeapVerdict::Unknown ? Json() : Json(c.object_start));
            out.set("offset", c.verdict == HeapVerdict::Interior ? Json(c.offset) : Json());
            std::cout << out.dump() << '\n';
        } else if (name == "counts") {
            Json out = Json::object();
            out.set("gcs", Json(heap.gcs())).set("compactingGcs", Json(heap.compacting_gcs()));
            out.set("reuseGcs", Json(heap.reuse_gcs()));
            std::cout << out.dump() << '\n';
        } else if (name == "objects") {
            Json out = Json::array();
            for (const auto& [start, size] : heap.object_map()) out.push(Json::array().push(Json(start)).push(Json(size)));
            std::cout << out.dump() << '\n';
        } else {
            bad(line, "unknown op " + name);
        }
    }
    return 0;
}
