// Experiments: the ReJIT protocol (issue 25 part 4). Rows of this area's table; see experiments.h.
//
//   rejit_request     RequestReJIT (or, args.revert, RequestRevert with a status array; args.inliners N >= 0,
//                     RequestReJITWithInliners with dwRejitFlags N, ICorProfilerInfo10) of the methods
//                     args.methods of the type args.type in the module whose path ends with args.module
//                     (default "app.dll", found through EnumModules), on a thread the experiment starts and
//                     joins (args.thread "own", the documented way) or on the calling thread ("here": a
//                     callback's, when planned at one). Records a `call` record named after the method it
//                     called: args {methods, tokens, moduleId, thread, point}, out {statuses (revert),
//                     statusFill: what each entry held before the call, elapsedMs}, hr. A method the metadata does not name gets token 0 and is left out of the
//                     request. args.rawTokens: methodDef values asked for as they are, after the named ones
//                     (a NULL or another table's token: ReJITError's per-method failure), named "#raw<k>". Planned at a callback with args.untilModule, it does nothing (and does not count
//                     as done) until the module is loaded, then runs once.
//   rejit_parameters  planned at GetReJITParameters: with args.body "prologue", hands the runtime, through the
//                     callback's ICorProfilerFunctionControl, the method's body with "ldc.i4 <id>; pop" put
//                     before its code (a fat header; a body with EH sections is left as it is), in a heap
//                     block the probe owns (the page: the runtime copies it); args.flags: SetCodegenFlags.
//                     Records each function-control call as a `call` record named
//                     "ICorProfilerFunctionControl::<Method>" (args moduleId, methodId, ...; hr).
//
// The probe's own GetReJITParameters, ReJITCompilationStarted, ReJITCompilationFinished and JITInlining are
// here too: the first makes its function control available to rejit_parameters while it runs; the two
// recompilation callbacks add the method's `moduleId` and `methodId` (GetFunctionInfo) to their records, so
// that a judge can tell which method a recompilation is of; JITInlining adds `callerMethodId` and
// `calleeMethodId` (the proof that a method was inlined, and where).
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "callback_base.h"
#include "experiments.h"
#include "profharness/interfaces.h"
#include "profharness/metadata.h"
#include "profiler.h"
#include "state.h"

namespace profharness {

namespace {

// what the status array holds before RequestRevert: a success code no runtime answers with
constexpr HRESULT kStatusUnwritten = 0x0DEFACED;

struct CurrentParameters {
    ICorProfilerFunctionControl* control = nullptr;
    ModuleID module = 0;
    mdMethodDef method = 0;
};
thread_local CurrentParameters t_parameters;

std::mutex g_mu;
std::set<std::string>* g_done = new std::set<std::string>();  // rejit_request entries that ran (untilModule)

std::u16string wide(const std::string& s) { return std::u16string(s.begin(), s.end()); }

// The loaded module whose path ends with `suffix` (0: none); `hr`: what EnumModules answered.
ModuleID find_module(const std::string& suffix, HRESULT& hr) {
    auto* info = state().info_as<ICorProfilerInfo3>(3);
    ICorProfilerModuleEnum* modules = nullptr;
    hr = info ? info->EnumModules(&modules) : E_NOINTERFACE;
    if (failed(hr) || !modules) return 0;
    HookedModule wanted;
    wanted.suffix = suffix;
    ModuleID found = 0, ids[32];
    ULONG got = 0;
    while (!found && !failed(modules->Next(32, ids, &got)) && got > 0)
        for (ULONG k = 0; k < got && !found; ++k)
            if (wanted.holds(ids[k])) found = ids[k];
    modules->Release();
    return found;
}

// The methodDef of `type`.`method` in `module` (the first of that name; 0 when there is none).
mdMethodDef find_method(ModuleID module, const std::string& type, const std::string& method) {
    ComHolder<IMetaDataImport> md;
    if (failed(module_metadata(state().info, module, md)) || !md.get()) return 0;
    mdTypeDef td = 0;
    const std::u16string type_name = wide(type), method_name = wide(method);
    if (failed(md->FindTypeDefByName(reinterpret_cast<LPCWSTR>(type_name.c_str()), 0, &td))) return 0;
    HCORENUM e = nullptr;
    mdMethodDef token = 0;
    ULONG n = 0;
    md->EnumMethodsWithName(&e, td, reinterpret_cast<LPCWSTR>(method_name.c_str()), &token, 1, &n);
    if (e) md->CloseEnum(e);
    return n == 1 ? token : 0;
}

void rejit_request(ExperimentContext& ctx) {
    ProbeState& s = state();
    const bool revert = ctx.bool_arg("revert", false);
    const std::int64_t inliners = ctx.int_arg("inliners", -1);  // >= 0: RequestReJITWithInliners' flags
    const char* name = revert ? "RequestRevert" : inliners >= 0 ? "RequestReJITWithInliners" : "RequestReJIT";
    auto* info = s.info_as<ICorProfilerInfo4>(4);
    auto* info10 = s.info_as<ICorProfilerInfo10>(10);
    if (!info || (inliners >= 0 && !info10)) {
        s.probe_error(std::string(name) + (inliners >= 0 ? " needs ICorProfilerInfo10" : " needs ICorProfilerInfo4"),
                      ctx.planned.id);
        return;
    }
    const bool until_module = ctx.bool_arg("untilModule", false);
    if (until_module) {
        std::lock_guard<std::mutex> lock(g_mu);
        if (g_done->count(ctx.planned.id)) return;
    }
    // Everything on one thread: the module lookup too (EnumModules refuses a managed thread outside a
    // callback: CORPROF_E_UNSUPPORTED_CALL_SEQUENCE on both runtimes).
    const std::string thread = ctx.string_arg("thread", "own");
    const std::string type = ctx.string_arg("type", "");
    const std::string suffix = ctx.string_arg("module", "app.dll");
    const Json* listed = ctx.args().get("methods");
    static const std::vector<Json> kNone;
    const std::vector<Json>& wanted = listed && listed->is_array() ? listed->items() : kNone;
    ModuleID module = 0;
    Json names = Json::array(), tokens = Json::array();
    std::vector<ModuleID> modules;
    std::vector<mdMethodDef> methods;
    std::vector<HRESULT> statuses;
    HRESULT hr = E_FAIL, enum_hr = S_OK;
    bool skipped = false;
    const auto started = std::chrono::steady_clock::now();
    auto work = [&]() {
        module = find_module(suffix, enum_hr);
        if (!module && until_module) {
            skipped = true;
            return;
        }
        if (until_module) {
            std::lock_guard<std::mutex> lock(g_mu);
            if (!g_done->insert(ctx.planned.id).second) {
                skipped = true;
                return;
            }
        }
        for (const Json& item : wanted) {
            const std::string method = item.is_string() ? item.as_string() : "";
            const mdMethodDef token = module ? find_method(module, type, method) : 0;
            names.push(Json(method));
            tokens.push(Json(static_cast<std::uint64_t>(token)));
            if (token) {
                modules.push_back(module);
                methods.push_back(token);
            }
        }
        if (const Json* raw = ctx.args().get("rawTokens"); raw && raw->is_array() && module) {
            int k = 0;
            for (const Json& item : raw->items()) {
                if (!item.is_integer()) continue;
                const auto token = static_cast<mdMethodDef>(item.as_uint());
                names.push(Json("#raw" + std::to_string(k++)));
                tokens.push(Json(static_cast<std::uint64_t>(token)));
                modules.push_back(module);
                methods.push_back(token);
            }
        }
        // a value no HRESULT the runtime returns: an entry still holding it was never written (REJIT-16)
        statuses.assign(methods.size(), kStatusUnwritten);
        const auto n = static_cast<ULONG>(methods.size());
        if (n == 0) {
            hr = E_INVALIDARG;  // not asked: nothing to name
            return;
        }
        if (revert)
            hr = info->RequestRevert(n, modules.data(), methods.data(), statuses.data());
        else if (inliners >= 0)
            hr = info10->RequestReJITWithInliners(static_cast<DWORD>(inliners), n, modules.data(), methods.data());
        else
            hr = info->RequestReJIT(n, modules.data(), methods.data());
    };
    if (thread == "here") {
        work();
    } else {
        std::thread worker(work);
        worker.join();
    }
    if (skipped) return;
    const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    Json args = Json::object();
    args.set("methods", std::move(names)).set("tokens", std::move(tokens));
    args.set("moduleId", Json(static_cast<std::uint64_t>(module))).set("thread", Json(thread));
    args.set("point", Json(ctx.point)).set("enumModulesHr", Json(static_cast<std::uint32_t>(enum_hr)));
    if (inliners >= 0) args.set("dwRejitFlags", Json(inliners));
    Json out = Json::object();
    if (revert && !methods.empty()) {
        Json st = Json::array();
        for (HRESULT h : statuses) st.push(Json(static_cast<std::uint32_t>(h)));
        out.set("statuses", std::move(st));
        out.set("statusFill", Json(static_cast<std::uint32_t>(kStatusUnwritten)));
    }
    out.set("elapsedMs", Json(ms));
    s.call(name, ctx.planned.id.c_str(), std::move(args), std::move(out), hr);
}

// The method's body with "ldc.i4 id; pop" before its code, in a fat header (nullptr: a body this does not
// rewrite, one with extra sections). `size` gets the new body's length.
BYTE* with_prologue(const BYTE* body, ULONG length, std::uint32_t id, ULONG& size) {
    if (!body || length == 0) return nullptr;
    std::uint32_t code_size, max_stack = 8, local_sig = 0, flags = 0;
    const BYTE* code;
    if ((body[0] & 0x3) == 0x2) {
        code_size = body[0] >> 2;
        code = body + 1;
    } else {
        if (length < 12) return nullptr;
        flags = static_cast<std::uint32_t>(body[0] | (body[1] << 8)) & 0x0FFF;
        if (flags & 0x8) return nullptr;  // MoreSects: EH clauses would need shifting
        max_stack = static_cast<std::uint32_t>(body[2] | (body[3] << 8));
        std::memcpy(&code_size, body + 4, 4);
        std::memcpy(&local_sig, body + 8, 4);
        code = body + 4 * (body[1] >> 4);
    }
    size = 12 + 6 + code_size;
    auto* out = new BYTE[size];
    const std::uint32_t first = 0x3003u | (flags & 0x10u);  // fat, header size 3 DWORDs, InitLocals kept
    out[0] = static_cast<BYTE>(first);
    out[1] = static_cast<BYTE>(first >> 8);
    const std::uint32_t stack = max_stack < 1 ? 1 : max_stack;
    out[2] = static_cast<BYTE>(stack);
    out[3] = static_cast<BYTE>(stack >> 8);
    const std::uint32_t new_code = code_size + 6;
    std::memcpy(out + 4, &new_code, 4);
    std::memcpy(out + 8, &local_sig, 4);
    out[12] = 0x20;  // ldc.i4
    std::memcpy(out + 13, &id, 4);
    out[17] = 0x26;  // pop
    std::memcpy(out + 18, code, code_size);
    return out;
}

void rejit_parameters(ExperimentContext& ctx) {
    ProbeState& s = state();
    const CurrentParameters p = t_parameters;
    if (!p.control) {
        s.probe_error("rejit_parameters runs only at GetReJITParameters", ctx.planned.id);
        return;
    }
    auto ids = [&](Json& args) {
        args.set("moduleId", Json(static_cast<std::uint64_t>(p.module)));
        args.set("methodId", Json(static_cast<std::uint64_t>(p.method)));
    };
    const std::int64_t flags = ctx.int_arg("flags", -1);
    if (flags >= 0) {
        Json args = Json::object();
        ids(args);
        args.set("flags", Json(flags));
        const HRESULT hr = p.control->SetCodegenFlags(static_cast<DWORD>(flags));
        s.call("ICorProfilerFunctionControl::SetCodegenFlags", ctx.planned.id.c_str(), std::move(args), Json::object(), hr);
    }
    if (ctx.string_arg("body", "none") != "prologue") return;
    LPCBYTE body = nullptr;
    ULONG length = 0;
    const HRESULT got = s.info->GetILFunctionBody(p.module, p.method, &body, &length);
    ULONG size = 0;
    static std::atomic<std::uint32_t> probes{0};
    BYTE* rewritten = failed(got) ? nullptr : with_prologue(body, length, 0x7E570000u | (++probes & 0xFFFFu), size);
    Json args = Json::object();
    ids(args);
    args.set("cbNewILMethodHeader", Json(static_cast<std::uint64_t>(size)));
    if (!rewritten) {
        args.set("skipped", Json(failed(got) ? "GetILFunctionBody failed" : "a body with extra sections"));
        s.call("ICorProfilerFunctionControl::SetILFunctionBody", ctx.planned.id.c_str(), std::move(args),
               Json::object(), got);
        return;
    }
    const HRESULT hr = p.control->SetILFunctionBody(size, rewritten);
    s.call("ICorProfilerFunctionControl::SetILFunctionBody", ctx.planned.id.c_str(), std::move(args), Json::object(), hr);
}

// The (module, methodDef) of a FunctionID for the recompilation records (`prefix` names the fields:
// "moduleId"/"methodId", or e.g. "callerModuleId"/"callerMethodId").
void add_method(CallbackEvent& ev, FunctionID function, const std::string& prefix = "") {
    ProbeState& s = state();
    ClassID cls = 0;
    ModuleID module = 0;
    mdToken token = 0;
    if (s.info && !failed(s.info->GetFunctionInfo(function, &cls, &module, &token))) {
        ev.args().set(prefix.empty() ? std::string("moduleId") : prefix + "ModuleId",
                      Json(static_cast<std::uint64_t>(module)));
        ev.args().set(prefix.empty() ? std::string("methodId") : prefix + "MethodId",
                      Json(static_cast<std::uint64_t>(token)));
    }
}

const ExperimentEntry kRows[] = {
    {"rejit_request", &rejit_request,
     "RequestReJIT (args.revert: RequestRevert with a status array; args.inliners N: RequestReJITWithInliners "
     "with flags N) of args.methods (names) of args.type in the "
     "module ending with args.module (default app.dll); args.thread \"own\" (default: a thread it starts and "
     "joins) or \"here\"; args.untilModule: wait (without counting) until the module is loaded"},
    {"rejit_parameters", &rejit_parameters,
     "at GetReJITParameters: args.body \"prologue\" hands the body with \"ldc.i4 id; pop\" prepended through the "
     "function control (bodies without extra sections); args.flags: SetCodegenFlags"},
};

}  // namespace

HRESULT Probe::GetReJITParameters(ModuleID moduleId, mdMethodDef methodId, ICorProfilerFunctionControl* control) {
    CallbackEvent ev(static_cast<int>(Cb::GetReJITParameters));
    if (ev.recording()) GetReJITParametersArgs(ev, moduleId, methodId, control);
    const CurrentParameters before = t_parameters;
    t_parameters = CurrentParameters{control, moduleId, methodId};
    const HRESULT hr = ev.finish();  // the experiments planned here run inside
    t_parameters = before;
    return hr;
}

HRESULT Probe::ReJITCompilationStarted(FunctionID functionId, ReJITID rejitId, BOOL fIsSafeToBlock) {
    CallbackEvent ev(static_cast<int>(Cb::ReJITCompilationStarted));
    if (ev.recording()) {
        ReJITCompilationStartedArgs(ev, functionId, rejitId, fIsSafeToBlock);
        add_method(ev, functionId);
    }
    return ev.finish();
}

HRESULT Probe::ReJITCompilationFinished(FunctionID functionId, ReJITID rejitId, HRESULT hrStatus,
                                        BOOL fIsSafeToBlock) {
    CallbackEvent ev(static_cast<int>(Cb::ReJITCompilationFinished));
    if (ev.recording()) {
        ReJITCompilationFinishedArgs(ev, functionId, rejitId, hrStatus, fIsSafeToBlock);
        add_method(ev, functionId);
    }
    return ev.finish();
}

HRESULT Probe::JITInlining(FunctionID callerId, FunctionID calleeId, BOOL* pfShouldInline) {
    CallbackEvent ev(static_cast<int>(Cb::JITInlining));
    if (ev.recording()) {
        JITInliningArgs(ev, callerId, calleeId, pfShouldInline);
        add_method(ev, callerId, "caller");
        add_method(ev, calleeId, "callee");
    }
    return ev.finish();
}

const ExperimentTable kRejitExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness
