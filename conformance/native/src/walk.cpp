// The walk machinery declared in walk.h: prepare / run (no allocation in the callback) / record.
#include "walk.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "events.h"
#include "profharness/metadata.h"

namespace profharness {

namespace {

thread_local Walk* t_walk = nullptr;      // the walk this thread is running (set around DoStackSnapshot)
thread_local bool t_in_call = false;      // this thread is inside DoStackSnapshot
std::atomic<Walk*> g_last_walk{nullptr};  // fallback when a callback arrives on a thread with no t_walk
std::atomic<std::int64_t> g_walk_number{0};
std::atomic<std::int64_t> g_delivery{0};

std::uint64_t read_u64(const BYTE* base, std::size_t offset) {
    std::uint64_t v;
    std::memcpy(&v, base + offset, sizeof v);
    return v;
}

// Resolves one FunctionID: GetFunctionInfo, GetModuleInfo, GetTokenAndMetaDataFromFunction,
// GetMethodProps, GetTypeDefProps (metadata.h); each recorded as a `call` record.
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
        ComHolder<IMetaDataImport> md;
        mdToken mdtok = 0;
        hr = function_metadata(s.info, fid, md, mdtok);
        {
            Json a = Json::object();
            a.set("functionId", Json(static_cast<std::uint64_t>(fid))).set("riid", "IMetaDataImport");
            Json o = Json::object();
            o.set("ppImport", Json::pointer(md.get())).set("token", Json(mdtok));
            s.call("GetTokenAndMetaDataFromFunction", exp_, a, o, hr);
        }
        if (!failed(hr) && md) {
            if (r.token.is_null()) r.token = Json(mdtok);
            const MethodProps m = method_props(md.get(), mdtok);
            {
                Json a = Json::object();
                a.set("mb", Json(mdtok)).set("cchMethod", Json(kNameChars));
                Json o = Json::object();
                o.set("pClass", Json(m.owner)).set("pchMethod", Json(m.pchMethod));
                o.set("szMethod", failed(m.hr) ? Json() : Json(m.name));
                o.set("pdwAttr", Json(m.attr)).set("pdwImplFlags", Json(m.implFlags));
                s.call("GetMethodProps", exp_, a, o, m.hr);
            }
            if (!failed(m.hr)) {
                r.method = Json(m.name);
                const TypeDefProps t = type_def_props(md.get(), m.owner);
                Json a = Json::object();
                a.set("td", Json(m.owner)).set("cchTypeDef", Json(kNameChars));
                Json o = Json::object();
                o.set("pchTypeDef", Json(t.pchTypeDef)).set("szTypeDef", failed(t.hr) ? Json() : Json(t.name));
                o.set("pdwTypeDefFlags", Json(t.flags)).set("ptkExtends", Json(t.extends));
                s.call("GetTypeDefProps", exp_, a, o, t.hr);
                if (!failed(t.hr)) r.type = Json(t.name);
            }
        }
        cache_[fid] = r;
        return r;
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
            o.set("szName", fits ? Json(wide_name(buf.data(), needed, size)) : Json());
            o.set("pAssemblyId", Json(static_cast<std::uint64_t>(asm_id)));
            s.call("GetModuleInfo", exp_, a, o, hr);
            if (fits) { result = Json(wide_name(buf.data(), needed, size)); break; }
            if (needed <= size || needed > (1u << 20)) break;
            buf.assign(needed, 0);
        }
        modules_[mod] = result;
        return result;
    }
};

}  // namespace

Resolved resolve_function(const char* experiment, FunctionID fid) {
    Resolver r(experiment);
    return r.resolve(fid);
}

Json seed_registers(const BYTE* seed, std::size_t size) {
    if (!seed || size < kContextRipOffset + 8) return Json();
    Json c = Json::object();
    c.set("rip", Json(read_u64(seed, kContextRipOffset)))
        .set("rsp", Json(read_u64(seed, kContextRspOffset)))
        .set("rbp", Json(read_u64(seed, kContextRbpOffset)));
    return c;
}

Walk::Walk(const WalkRequest& req) : req_(req), walk_(g_walk_number.fetch_add(1)) {
    frames_.reserve(kMaxFrames);
    if (req_.captureAtFrame != -1) captured_.assign(kContextBufferSize, 0);
}

void Walk::on_frame(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32 contextSize,
                    const BYTE* context, void* clientData, HRESULT reply) {
    if (frames_.size() < kMaxFrames) {
        FrameSlot f{};
        f.funcId = funcId;
        f.ip = ip;
        f.frameInfo = frameInfo;
        f.contextSize = contextSize;
        f.clientData = clientData;
        f.hasContext = context != nullptr;
        f.inCall = t_in_call && t_walk == this;
        f.reply = reply;
        // a callback on the thread inside run() is on that thread: its gettid() taken once per walk (a system
        // call per frame was ~7 us of a sampling handler's 37-frame walk)
        f.cbOsTid = f.inCall ? run_tid_ : static_cast<long>(::syscall(SYS_gettid));
        f.cbOrder = g_delivery.fetch_add(1);
        if (context && contextSize >= kContextRipOffset + 8) {
            f.rip = read_u64(context, kContextRipOffset);
            f.rsp = read_u64(context, kContextRspOffset);
            f.rbp = read_u64(context, kContextRbpOffset);
        }
        frames_.push_back(f);  // capacity reserved: no allocation
    }
    const auto index = static_cast<std::int64_t>(delivered_);
    if (captured_index_ < 0 && !captured_.empty() && context && contextSize > 0 &&
        (index == req_.captureAtFrame || (req_.captureAtFrame == kCaptureFirstManaged && funcId != 0))) {
        captured_size_ = contextSize < captured_.size() ? contextSize : captured_.size();
        std::memcpy(captured_.data(), context, captured_size_);
        captured_index_ = index;
    }
    ++delivered_;
}

HRESULT walk_snapshot_callback(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo, ULONG32 contextSize,
                               BYTE context[], void* clientData) {
    Walk* w = t_walk;
    if (!w) w = g_last_walk.load(std::memory_order_acquire);
    if (!w) return S_OK;
    const HRESULT reply = static_cast<std::int64_t>(w->delivered_) == w->req_.abortAtFrame ? w->req_.abortReply : S_OK;
    w->on_frame(funcId, ip, frameInfo, contextSize, context, clientData, reply);
    return reply;
}

HRESULT Walk::run(ICorProfilerInfo2* info2) {
    if (!info2) return E_NOINTERFACE;
    Walk* saved = t_walk;
    const bool saved_in_call = t_in_call;
    t_walk = this;
    run_tid_ = static_cast<long>(::syscall(SYS_gettid));
    g_last_walk.store(this, std::memory_order_release);
    void* client_ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(req_.clientData));
    t_in_call = true;
    hr_ = info2->DoStackSnapshot(req_.thread, &walk_snapshot_callback, req_.infoFlags, client_ptr,
                                 const_cast<BYTE*>(req_.seed), req_.contextSize);
    t_in_call = saved_in_call;
    return_order_ = g_delivery.load();
    t_walk = saved;
    // Callbacks after the return (a DSS-14 violation) still land in this walk until the next walk starts.
    ran_ = true;
    return hr_;
}

void Walk::record(const char* experiment, const std::string& at) {
    ProbeState& s = state();
    for (std::size_t i = 0; i < frames_.size(); ++i) {
        const FrameSlot& f = frames_[i];
        Json r = Json::object();
        r.set("walk", Json(walk_)).set("index", Json(static_cast<std::uint64_t>(i)));
        r.set("funcId", Json(static_cast<std::uint64_t>(f.funcId)));
        r.set("ip", Json(static_cast<std::uint64_t>(f.ip)));
        r.set("frameInfo", Json(static_cast<std::uint64_t>(f.frameInfo)));
        r.set("clientData", Json::pointer(f.clientData));
        r.set("contextSize", Json(f.contextSize));
        if (f.hasContext && f.contextSize >= kContextRipOffset + 8) {
            Json c = Json::object();
            c.set("rip", Json(f.rip)).set("rsp", Json(f.rsp)).set("rbp", Json(f.rbp));
            r.set("context", c);
        } else if (f.hasContext) {
            r.set("context", Json::object());  // a context too short to read registers from
        } else {
            r.set("context", Json());
        }
        r.set("hr", Json(static_cast<std::uint32_t>(f.reply)));
        r.set("cbOsTid", Json(static_cast<std::int64_t>(f.cbOsTid)));
        r.set("inCall", Json(f.inCall));
        r.set("cbOrder", Json(f.cbOrder));
        s.trace.write("frame", r);
    }
    if (delivered_ > frames_.size())
        s.probe_error("DoStackSnapshot: " + std::to_string(delivered_) + " frames, only the first " +
                          std::to_string(kMaxFrames) + " recorded",
                      experiment ? experiment : "");

    Json out = Json::object();
    out.set("frameCount", Json(static_cast<std::uint64_t>(delivered_)));
    out.set("returnOrder", Json(return_order_));
    if (req_.resolve) {
        Resolver resolver(experiment);
        Json frames = Json::array();
        for (const FrameSlot& f : frames_) {
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
    if (captured_index_ >= 0) {
        Json c = seed_registers(captured_.data(), captured_size_);
        if (c.is_null()) c = Json::object();
        c.set("index", Json(captured_index_)).set("size", Json(static_cast<std::uint64_t>(captured_size_)));
        out.set("captured", c);
    }
    Json args = Json::object();
    args.set("thread", Json(static_cast<std::uint64_t>(req_.thread)));
    args.set("infoFlags", Json(static_cast<std::uint64_t>(req_.infoFlags)));
    args.set("clientData", Json(req_.clientData));
    if (req_.seed) {
        Json c = seed_registers(req_.seed, req_.seedBytes ? req_.seedBytes : req_.contextSize);
        args.set("context", c.is_null() ? Json::object() : c);
    } else {
        args.set("context", Json());
    }
    args.set("contextSize", Json(static_cast<std::uint64_t>(req_.contextSize)));
    args.set("walk", Json(walk_));
    args.set("at", Json(at));
    if (req_.extraArgs.is_object())
        for (const auto& m : req_.extraArgs.members()) args.set(m.first, m.second);
    s.call("DoStackSnapshot", experiment, args, out, ran_ ? hr_ : E_NOINTERFACE);
}

HRESULT walk_and_record(ExperimentContext& ctx, Walk& walk) {
    ProbeState& s = state();
    auto* info2 = s.info_as<ICorProfilerInfo2>(2);
    if (!info2) {
        s.probe_error("DoStackSnapshot needs ICorProfilerInfo2", ctx.planned.id);
        return E_NOINTERFACE;
    }
    HRESULT hr = walk.run(info2);
    walk.record(ctx.planned.id.c_str(), ctx.point);
    return hr;
}

HRESULT walk_and_record(ExperimentContext& ctx, const WalkRequest& req) {
    Walk walk(req);
    return walk_and_record(ctx, walk);
}

}  // namespace profharness
