// The experiment table and its experiments. Each row: name, function, documented args.
// New experiments (cross-thread walks under SuspendRuntime, seeded walks, buffer probes, MovedReferences2
// tag checks, enter/leave hooks) are new rows here; run_experiments_at (probe.cpp) does not change.
#include "experiments.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "events.h"

namespace profharness {

// ---------------------------------------------------------------------------------------------------
// Context helpers

std::int64_t ExperimentContext::int_arg(const char* name, std::int64_t dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_integer()) {
        state().probe_error(std::string("argument ") + name + " must be an integer", planned.id);
        return dflt;
    }
    return v->as_int();
}

bool ExperimentContext::bool_arg(const char* name, bool dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_bool()) {
        state().probe_error(std::string("argument ") + name + " must be true or false", planned.id);
        return dflt;
    }
    return v->as_bool();
}

std::string ExperimentContext::string_arg(const char* name, const std::string& dflt) const {
    const Json* v = planned.args.get(name);
    if (!v || v->is_null()) return dflt;
    if (!v->is_string()) {
        state().probe_error(std::string("argument ") + name + " must be a string", planned.id);
        return dflt;
    }
    return v->as_string();
}

namespace {

// ---------------------------------------------------------------------------------------------------
// stack_snapshot

constexpr std::int64_t kDefaultClientData = 0x5EED5EED;
constexpr std::size_t kMaxFrames = 4096;

struct FrameSlot {
    FunctionID funcId;
    UINT_PTR ip;
    COR_PRF_FRAME_INFO frameInfo;
    ULONG32 contextSize;
    bool hasContext;
    std::uint64_t rip, rsp, rbp;
    void* clientData;
};

// Filled by the StackSnapshotCallback without allocating (the target thread may hold the heap lock in
// later asynchronous experiments); records are written after DoStackSnapshot returns.
struct WalkBuffer {
    std::vector<FrameSlot> frames;  // reserved to kMaxFrames before the walk
    std::size_t delivered = 0;      // callbacks seen, including those beyond kMaxFrames
    HRESULT reply = S_OK;           // what the callback returns
};

thread_local WalkBuffer* t_walk = nullptr;
std::atomic<std::int64_t> g_walk_number{0};

std::uint64_t read_u64(const BYTE* base, std::size_t offset) {
    std::uint64_t v;
    std::memcpy(&v, base + offset, sizeof v);
    return v;
}

HRESULT snapshot_callback(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32 contextSize,
                          BYTE context[], void* clientData) {
    WalkBuffer* w = t_walk;
    if (!w) return S_OK;
    if (w->frames.size() < kMaxFrames) {
        FrameSlot f{};
        f.funcId = funcId;
        f.ip = ip;
        f.frameInfo = frameInfo;
        f.contextSize = contextSize;
        f.clientData = clientData;
        f.hasContext = context != nullptr;
        if (context && contextSize >= kContextRipOffset + 8) {
            f.rip = read_u64(context, kContextRipOffset);
            f.rsp = read_u64(context, kContextRspOffset);
            f.rbp = read_u64(context, kContextRbpOffset);
        }
        w->frames.push_back(f);  // capacity reserved: no allocation
    }
    ++w->delivered;
    return w->reply;
}

struct Resolved {
    Json token, module, type, method;
};

// Resolves one FunctionID: GetFunctionInfo, GetModuleInfo, GetTokenAndMetaDataFromFunction,
// GetMethodProps, GetTypeDefProps; each recorded as a `call` record.
class Resolver {
 public:
    explicit Resolver(const char* experiment) : exp_(experiment) {}

    Resolved resolve(FunctionID fid) {
        auto hit = cache_.find(fid);
        if (hit != cache_.end()) return hit->second;
        Resolved r;
        ProbeState& s = state();
        ClassID cls = 0;
        ModuleID mod = 0;
        mdToken tok = 0;
        HRESULT hr = s.info->GetFunctionInfo(fid, &cls, &mod, &tok);
        {
            Json a = Json::object();
            a.set("functionId", Json(static_cast<std::uint64_t>(fid)));
            Json o = Json::object();
            o.set("classId", Json(static_cast<std::uint64_t>(cls)))
                .set("moduleId", Json(static_cast<std::uint64_t>(mod)))
                .set("token", Json(tok));
            s.call("GetFunctionInfo", exp_, a, o, hr);
        }
        if (!failed(hr)) {
            r.token = Json(tok);
            r.module = module_name(mod);
        }
        IUnknown* unk = nullptr;
        mdToken mdtok = 0;
        hr = s.info->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &mdtok);
        {
            Json a = Json::object();
            a.set("functionId", Json(static_cast<std::uint64_t>(fid))).set("riid", "IMetaDataImport");
            Json o = Json::object();
            o.set("ppImport", Json::pointer(unk)).set("token", Json(mdtok));
            s.call("GetTokenAndMetaDataFromFunction", exp_, a, o, hr);
        }
        if (!failed(hr) && unk) {
            auto* md = static_cast<IMetaDataImport*>(unk);
            if (r.token.is_null()) r.token = Json(mdtok);
            mdTypeDef owner = 0;
            WCHAR name[512];
            ULONG n = 0;
            DWORD attr = 0, impl = 0;
            PCCOR_SIGNATURE sig = nullptr;
            ULONG cbSig = 0, rva = 0;
            HRESULT mh = md->GetMethodProps(mdtok, &owner, name, 512, &n, &attr, &sig, &cbSig, &rva, &impl);
            {
                Json a = Json::object();
                a.set("mb", Json(mdtok)).set("cchMethod", Json(512u));
                Json o = Json::object();
                o.set("pClass", Json(owner)).set("pchMethod", Json(n));
                o.set("szMethod", failed(mh) ? Json() : Json(wide_name(name, n)));
                o.set("pdwAttr", Json(attr)).set("pdwImplFlags", Json(impl));
                s.call("GetMethodProps", exp_, a, o, mh);
            }
            if (!failed(mh)) {
                r.method = Json(wide_name(name, n));
                WCHAR tname[512];
                ULONG tn = 0;
                DWORD tflags = 0;
                mdToken ext = 0;
                HRESULT th = md->GetTypeDefProps(owner, tname, 512, &tn, &tflags, &ext);
                Json a = Json::object();
                a.set("td", Json(owner)).set("cchTypeDef", Json(512u));
                Json o = Json::object();
                o.set("pchTypeDef", Json(tn)).set("szTypeDef", failed(th) ? Json() : Json(wide_name(tname, tn)));
                o.set("pdwTypeDefFlags", Json(tflags)).set("ptkExtends", Json(ext));
                s.call("GetTypeDefProps", exp_, a, o, th);
                if (!failed(th)) r.type = Json(wide_name(tname, tn));
            }
            md->Release();
        }
        cache_[fid] = r;
        return r;
    }

    static std::string wide_name(const WCHAR* buf, ULONG n) {
        if (n == 0) return std::string();
        return utf16_to_utf8(buf, static_cast<long>(buf[n - 1] == 0 ? n - 1 : n));
    }

 private:
    const char* exp_;
    std::map<FunctionID, Resolved> cache_;
    std::map<ModuleID, Json> modules_;

    // Caller-allocated buffer pattern: a first buffer; if *pcchName says more is needed, once more.
    Json module_name(ModuleID mod) {
        auto hit = modules_.find(mod);
        if (hit != modules_.end()) return hit->second;
        ProbeState& s = state();
        std::vector<WCHAR> buf(260);
        Json result;
        for (int attempt = 0; attempt < 2; ++attempt) {
            LPCBYTE base = nullptr;
            ULONG needed = 0;
            AssemblyID asm_id = 0;
            ULONG size = static_cast<ULONG>(buf.size());
            HRESULT hr = s.info->GetModuleInfo(mod, &base, size, &needed, buf.data(), &asm_id);
            Json a = Json::object();
            a.set("moduleId", Json(static_cast<std::uint64_t>(mod))).set("cchName", Json(size));
            Json o = Json::object();
            o.set("ppBaseLoadAddress", Json::pointer(base)).set("pcchName", Json(needed));
            bool fits = !failed(hr) && needed <= size;
            o.set("szName", fits ? Json(wide_name(buf.data(), needed)) : Json());
            o.set("pAssemblyId", Json(static_cast<std::uint64_t>(asm_id)));
            s.call("GetModuleInfo", exp_, a, o, hr);
            if (fits) { result = Json(wide_name(buf.data(), needed)); break; }
            if (needed <= size || needed > (1u << 20)) break;
            buf.assign(needed, 0);
        }
        modules_[mod] = result;
        return result;
    }
};

void stack_snapshot(ExperimentContext& ctx) {
    ProbeState& s = state();
    auto* info2 = s.info_as<ICorProfilerInfo2>(2);
    const char* exp = ctx.planned.id.c_str();
    if (!info2) {
        s.probe_error("stack_snapshot needs ICorProfilerInfo2", ctx.planned.id);
        return;
    }
    const std::int64_t flags = ctx.int_arg("infoFlags", 0);
    const bool resolve = ctx.bool_arg("resolve", true);
    const std::int64_t client = ctx.int_arg("clientData", kDefaultClientData);
    const std::string thread = ctx.string_arg("thread", "self");
    if (thread != "self") {
        s.probe_error("stack_snapshot: thread must be \"self\" (other threads: a later experiment)", ctx.planned.id);
        return;
    }
    const std::int64_t walk = g_walk_number.fetch_add(1);

    WalkBuffer buffer;
    buffer.frames.reserve(kMaxFrames);
    WalkBuffer* saved = t_walk;
    t_walk = &buffer;
    void* client_ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(client));
    HRESULT hr = info2->DoStackSnapshot(0, &snapshot_callback, static_cast<ULONG32>(flags), client_ptr, nullptr, 0);
    t_walk = saved;

    for (std::size_t i = 0; i < buffer.frames.size(); ++i) {
        const FrameSlot& f = buffer.frames[i];
        Json r = Json::object();
        r.set("walk", Json(walk)).set("index", Json(static_cast<std::uint64_t>(i)));
        r.set("funcId", Json(static_cast<std::uint64_t>(f.funcId)));
        r.set("ip", Json(static_cast<std::uint64_t>(f.ip)));
        r.set("frameInfo", Json(static_cast<std::uint64_t>(f.frameInfo)));
        r.set("clientData", Json::pointer(f.clientData));
        r.set("contextSize", Json(f.contextSize));
        if (f.hasContext) {
            Json c = Json::object();
            c.set("rip", Json(f.rip)).set("rsp", Json(f.rsp)).set("rbp", Json(f.rbp));
            r.set("context", c);
        } else {
            r.set("context", Json());
        }
        r.set("hr", Json(static_cast<std::uint32_t>(buffer.reply)));
        s.trace.write("frame", r);
    }
    if (buffer.delivered > buffer.frames.size())
        s.probe_error("stack_snapshot: " + std::to_string(buffer.delivered) + " frames, only the first " +
                          std::to_string(kMaxFrames) + " recorded",
                      ctx.planned.id);

    Json out = Json::object();
    out.set("frameCount", Json(static_cast<std::uint64_t>(buffer.delivered)));
    if (resolve) {
        Resolver resolver(exp);
        Json frames = Json::array();
        for (const FrameSlot& f : buffer.frames) {
            Json fr = Json::object();
            fr.set("funcId", Json(static_cast<std::uint64_t>(f.funcId)));
            fr.set("ip", Json(static_cast<std::uint64_t>(f.ip)));
            Resolved r;
            if (f.funcId) r = resolver.resolve(f.funcId);
            fr.set("token", r.token).set("module", r.module).set("type", r.type).set("method", r.method);
            frames.push(fr);
        }
        out.set("frames", frames);
    }
    Json args = Json::object();
    args.set("thread", Json(static_cast<std::uint64_t>(0)));
    args.set("infoFlags", Json(flags));
    args.set("clientData", Json(client));
    args.set("context", Json());
    args.set("contextSize", Json(0u));
    args.set("walk", Json(walk));
    args.set("at", ctx.point);
    s.call("DoStackSnapshot", exp, args, out, hr);
}

// ---------------------------------------------------------------------------------------------------
// The table

const ExperimentEntry kExperiments[] = {
    {"stack_snapshot", &stack_snapshot,
     "DoStackSnapshot on the current thread. args: infoFlags int (default 0), resolve bool (default true), "
     "clientData int (default 0x5EED5EED), thread \"self\" (NULL ThreadID)"},
};

}  // namespace

const ExperimentTable kCoreExperiments{kExperiments, sizeof kExperiments / sizeof kExperiments[0]};

const ExperimentEntry* find_experiment(const std::string& name) {
    static const ExperimentTable* const tables[] = {&kCoreExperiments,   &kStackExperiments, &kAsyncExperiments,
                                                    &kBufferExperiments, &kGcExperiments,    &kHookExperiments};
    for (const ExperimentTable* table : tables)
        for (std::size_t i = 0; i < table->count; ++i)
            if (name == table->rows[i].name) return &table->rows[i];
    return nullptr;
}

}  // namespace profharness
