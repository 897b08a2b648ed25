// bench/trace.py's writer driver: replays the records of a JSON Lines trace through the common TraceWriter
// (conformance/native/common/trace.cpp) and times it.
//   trace_replay IN OUT MODE(sync|buffered) REPEAT
// Prints one JSON line: records, seconds on the calling thread (the writes), seconds until every record is
// in the file (flush), bytes of OUT. The format comes from PROFHARNESS_TRACE_FORMAT, as in the proxy.
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
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < repeat; ++k)
        for (std::size_t i = 0; i < recs.size(); ++i) w->write(kinds[i].c_str(), recs[i].second);
    const auto t1 = std::chrono::steady_clock::now();
    w->flush();
    const auto t2 = std::chrono::steady_clock::now();
    struct stat st {};
    ::stat(argv[2], &st);
    std::printf("{\"records\":%lld,\"calling\":%.6f,\"total\":%.6f,\"bytes\":%lld}\n",
                static_cast<long long>(recs.size()) * repeat, std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(t2 - t0).count(), static_cast<long long>(st.st_size));
    return 0;
}
