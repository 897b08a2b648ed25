// A driver of the frames v1 writer (profharness/frames.h) for tests/conformance/native/test_frames.py:
//   frames_driver crc                              prints frames_crc32 of stdin's bytes (decimal)
//   frames_driver write PATH FLAGS MAX_PAYLOAD     reads lines "TYPE HEX [HEX...]" (one frame of the parts
//                                                  concatenated; "-" is an empty part) and prints
//                                                  "OFFSET INDEX" per line (-1 -1 when refused)
//   frames_driver spam PATH                        appends frames (type = i & 0xFFFF, payload i % 4096 bytes
//                                                  of (i + k) & 0xFF) until killed
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "profharness/frames.h"

using profharness::FrameWriter;

namespace {

std::vector<unsigned char> unhex(const std::string& s) {
    std::vector<unsigned char> out;
    if (s == "-") return out;
    for (std::size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(static_cast<unsigned char>(std::stoul(s.substr(i, 2), nullptr, 16)));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::strcmp(argv[1], "crc") == 0) {
        std::string data((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        std::printf("%u\n", profharness::frames_crc32(data.data(), data.size()));
        return 0;
    }
    if (argc >= 5 && std::strcmp(argv[1], "write") == 0) {
        FrameWriter w;
        std::string error;
        if (!w.open(argv[2], static_cast<std::uint16_t>(std::atoi(argv[3])), error,
                    static_cast<std::uint32_t>(std::atol(argv[4])))) {
            std::fprintf(stderr, "%s\n", error.c_str());
            return 1;
        }
        std::string line;
        while (std::getline(std::cin, line)) {
            std::istringstream in(line);
            unsigned type = 0;
            in >> type;
            std::vector<std::vector<unsigned char>> bufs;
            std::string word;
            while (in >> word) bufs.push_back(unhex(word));
            std::vector<FrameWriter::Part> parts;
            for (const auto& b : bufs) parts.push_back({b.data(), b.size()});
            std::uint64_t index = 0;
            const std::int64_t at = w.append(static_cast<std::uint16_t>(type), parts.data(), parts.size(), &index);
            if (at < 0)
                std::printf("-1 -1\n");
            else
                std::printf("%lld %llu\n", static_cast<long long>(at), static_cast<unsigned long long>(index));
        }
        std::printf("frames %llu bytes %llu refused %llu\n", static_cast<unsigned long long>(w.frames()),
                    static_cast<unsigned long long>(w.bytes()), static_cast<unsigned long long>(w.refused()));
        return 0;
    }
    if (argc >= 3 && std::strcmp(argv[1], "spam") == 0) {
        FrameWriter w;
        std::string error;
        if (!w.open(argv[2], 7, error, 4096)) {
            std::fprintf(stderr, "%s\n", error.c_str());
            return 1;
        }
        std::printf("ready\n");
        std::fflush(stdout);
        unsigned char buf[4096];
        for (std::uint64_t i = 0;; ++i) {
            const std::size_t n = i % 4096;
            for (std::size_t k = 0; k < n; ++k) buf[k] = static_cast<unsigned char>((i + k) & 0xFF);
            if (w.append(static_cast<std::uint16_t>(i & 0xFFFF), buf, n) < 0) return 2;
        }
    }
    std::fprintf(stderr, "usage: frames_driver crc | write PATH FLAGS MAX_PAYLOAD | spam PATH\n");
    return 2;
}
