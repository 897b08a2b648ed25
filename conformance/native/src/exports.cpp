// The functions a scenario P/Invokes (docs/design.md, "Exports of the probe .so"): marks, marks carrying
// object addresses, the record count. (profharness_call_back lives with the stack experiments.)
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>

#include "exports.h"
#include "profharness/hresults.h"
#include "profharness/metadata.h"
#include "state.h"

using namespace profharness;

namespace {

// Reads n bytes at addr of this process without faulting (false when unmapped).
bool read_own(std::uint64_t addr, void* out, std::size_t n) {
    struct iovec local{out, n};
    struct iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr)), n};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

}  // namespace

PROFHARNESS_EXPORT std::int32_t profharness_mark(const char16_t* name, const char16_t* payload) {
    ProbeState& s = state();
    if (!s.initialized.load(std::memory_order_acquire)) return -1;
    std::string n = utf16_to_utf8(name);
    Json f = Json::object();
    f.set("name", n);
    f.set("payload", payload ? Json(utf16_to_utf8(payload)) : Json());
    s.trace.write("mark", f);
    run_experiments_at("mark:" + n);
    return 0;
}

PROFHARNESS_EXPORT std::int64_t profharness_record_count(void) { return state().trace.count(); }

PROFHARNESS_EXPORT std::int32_t profharness_mark_ids(const char16_t* name, const std::int64_t* ids, std::int32_t count) {
    ProbeState& s = state();
    if (!s.initialized.load(std::memory_order_acquire)) return -1;
    std::string n = utf16_to_utf8(name);
    Json id_list = Json::array(), classes = Json::array(), words = Json::array(), names = Json::object();
    std::map<ClassID, bool> named;
    HRESULT first_failure = S_OK, name_failure = S_OK;
    for (std::int32_t i = 0; i < count && ids && i < (1 << 24); ++i) {
        std::uint64_t id = static_cast<std::uint64_t>(ids[i]);
        id_list.push(Json(id));
        std::uint64_t w[3] = {0, 0, 0};  // method table, first two 8-byte fields
        bool readable = id != 0 && read_own(id, w, sizeof w);
        ClassID cls = 0;
        if (readable && w[0] && s.info) {
            HRESULT hr = s.info->GetClassFromObject(static_cast<ObjectID>(id), &cls);
            if (failed(hr)) {
                cls = 0;
                if (!failed(first_failure)) first_failure = hr;
                // Outside a callback the runtime refuses GetClassFromObject (0x80131363, unsupported call sequence);
                // a non-array object's ClassID is its method table pointer (TypeHandle), the first word.
                std::uint64_t probe_word = 0;
                if (read_own(w[0], &probe_word, sizeof probe_word)) cls = static_cast<ClassID>(w[0]);
            }
        }
        classes.push(Json(static_cast<std::uint64_t>(cls)));
        Json pair = Json::array();
        if (readable) {
            pair.push(Json(static_cast<std::int64_t>(w[1]))).push(Json(static_cast<std::int64_t>(w[2])));
        }
        words.push(readable ? std::move(pair) : Json());
        if (cls && named.emplace(cls, true).second) {
            std::string class_name_text;
            Json nm;
            if (class_name(s.info, cls, class_name_text, &name_failure)) nm = Json(class_name_text);
            names.set(std::to_string(static_cast<std::uint64_t>(cls)), nm);
        }
    }
    Json f = Json::object();
    f.set("name", n);
    f.set("payload", Json());
    f.set("ids", std::move(id_list));
    f.set("class_ids", std::move(classes));
    f.set("words", std::move(words));
    f.set("class_names", std::move(names));
    f.set("class_hr", Json(static_cast<std::uint32_t>(first_failure)));
    f.set("class_name_hr", Json(static_cast<std::uint32_t>(name_failure)));
    f.set("class_source", failed(first_failure) ? "method_table" : "GetClassFromObject");
    s.trace.write("mark", f);
    run_experiments_at("mark:" + n);
    return 0;
}
