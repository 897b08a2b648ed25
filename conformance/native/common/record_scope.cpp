// RecordScope (profharness/record_scope.h): the `call` records of a recorded call, and GUIDs as text.
#include "profharness/record_scope.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace profharness {

std::string guid_text(const GUID& g, bool braces) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%08X-%04X-%04X-%02X%02X-%02X%02X%02X%02X%02X%02X%s", braces ? "{" : "",
                  g.Data1, g.Data2, g.Data3, g.Data4[0], g.Data4[1], g.Data4[2], g.Data4[3], g.Data4[4], g.Data4[5],
                  g.Data4[6], g.Data4[7], braces ? "}" : "");
    return buf;
}

namespace {

bool hex_value(char c, unsigned& v) {
    if (c >= '0' && c <= '9') v = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') v = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v = static_cast<unsigned>(c - 'A' + 10);
    else return false;
    return true;
}

}  // namespace

bool parse_guid(const char* text, GUID& g) {
    std::string hex;
    for (const char* p = text; *p; ++p)
        if (*p != '{' && *p != '}' && *p != '-') hex.push_back(*p);
    if (hex.size() != 32) return false;
    unsigned char b[16];
    for (int i = 0; i < 16; ++i) {
        unsigned hi, lo;
        if (!hex_value(hex[2 * i], hi) || !hex_value(hex[2 * i + 1], lo)) return false;
        b[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    g.Data1 = (static_cast<std::uint32_t>(b[0]) << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    g.Data2 = static_cast<std::uint16_t>((b[4] << 8) | b[5]);
    g.Data3 = static_cast<std::uint16_t>((b[6] << 8) | b[7]);
    for (int i = 0; i < 8; ++i) g.Data4[i] = b[8 + i];
    return true;
}

Json RecordScope::enter_record(const char* name) const {
    Json rec = Json::object();
    rec.set("name", name).set("phase", "enter").set("args", args_).set("hr", Json(0u));
    for (const auto& [k, v] : fields_.members()) rec.set(k, v);
    return rec;
}

Json RecordScope::call_record(const char* name, bool two_phase, HRESULT hr, bool after_shutdown) {
    Json rec = Json::object();
    rec.set("name", name);
    if (two_phase) rec.set("phase", "return");
    rec.set("args", std::move(args_)).set("out", std::move(out_)).set("hr", Json(static_cast<std::uint32_t>(hr)));
    if (after_shutdown) rec.set("afterShutdown", true);
    for (const auto& [k, v] : fields_.members()) rec.set(k, v);
    return rec;
}

}  // namespace profharness
