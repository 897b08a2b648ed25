// bench/trace.py's writer driver: replays the records of a JSON Lines trace through the common TraceWriter
// (conformance/native/common/trace.cpp) and times it.
//   trace_replay IN OUT MODE(sync|buffered) REPEAT
// Prints one JSON line: records, seconds on the calling thread (the writes, in bursts of 20,000 records each
// flushed before the next), seconds until every record is in the file (the same bursts and their flushes; the
// copies made before each burst left out), bytes of OUT. The format comes from PROFHARNESS_TRACE_FORMAT, as in the proxy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include "profharness/trace.h"

using namespace profharness;

int main(int argc, char** argv) {
    if (argc != 5) return 2;
    std::ifstream in(argv[1]);
    std::vector<std::pair<std::string, Json>> recs;
    std::string line, err;
    while (std::getline(in, line)) {
        Json r;
        if (!Json::parse(line, r, err) || !r.is_object()) continue;
        Json fields = Json::object();
        std::string kind;
        for (const auto& m : r.members()) {
            if (m.first == "kind") kind = m.second.as_string();
            else if (m.first != "seq" && m.first != "os_tid" && m.first != "tid") fields.set(m.first, m.second);
        }
        recs.emplace_back(kind, std::move(fields));
    }
    std::vector<std::string> kinds;  // the writer keeps the kind's pointer until it formats the record
    kinds.reserve(recs.size());
    for (auto& r : recs) kinds.push_back(r.first);
    auto* w = new TraceWriter();
    if (!w->open(argv[2], err)) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 2;
    }
    if (std::strcmp(argv[3], "buffered") == 0) w->start_writer();
    const int repeat = std::atoi(argv[4]);
    // in bursts of kBurst records, each flushed before the next (a buffered writer's queue never fills, so
    // the calling thread's time is its own cost, not the writer's back-pressure); each record's fields are
    // copied before the burst and moved into write(), as the proxy builds a record and hands it over
    constexpr std::size_t kBurst = 20000;
    double calling = 0, flushed = 0;
    const std::size_t total_records = recs.size() * static_cast<std::size_t>(repeat);
    std::vector<Json> burst;
    std::vector<const char*> burst_kinds;
    for (std::size_t done = 0; done < total_records;) {
        const std::size_t n = std::min(kBurst, total_records - done);
        burst.clear();
        burst_kinds.clear();
        for (std::size_t k = 0; k < n; ++k) {
            burst.push_back(recs[(done + k) % recs.size()].second);
            burst_kinds.push_back(kinds[(done + k) % recs.size()].c_str());
        }
        const auto b0 = std::chrono::steady_clock::now();
        for (std::size_t k = 0; k < n; ++k) w->write(burst_kinds[k], std::move(burst[k]));
        const auto b1 = std::chrono::steady_clock::now();
        calling += std::chrono::duration<double>(b1 - b0).count();
        w->flush();
        flushed += std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
        done += n;
    }
    struct stat st {};
    ::stat(argv[2], &st);
    std::printf("{\"records\":%lld,\"calling\":%.6f,\"total\":%.6f,\"bytes\":%lld}\n",
                static_cast<long long>(total_records), calling, flushed,
                static_cast<long long>(st.st_size));
    return 0;
}
