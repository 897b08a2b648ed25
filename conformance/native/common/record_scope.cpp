// RecordScope (profharness/record_scope.h): the `call` records of a recorded call, and GUIDs as text.
#include "profharness/record_scope.h"

#include <cstdint>
#include <cstdio>

namespace profharness {

std::string guid_text(const GUID& g, bool braces) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%08X-%04X-%04X-%02X%02X-%02X%02X%02X%02X%02X%02X%s", braces ? "{" : "",
                  g.Data1, g.Data2, g.Data3, g.Data4[0], g.Data4[1], g.Data4[2], g.Data4[3], g.Data4[4], g.Data4[5],
                  g.Data4[6], g.Data4[7], braces ? "}" : "");
    return buf;
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
