// Experiments: caller-allocated buffer probes of ICorProfilerInfo methods (caller-allocated-buffers.md).
// Rows of this area's table; see experiments.h.
//
// buffer_probe: calls one ICorProfilerInfo method with the caller-allocated buffer pattern at a series of
// buffer sizes and records, for each call, what the runtime did to a buffer pre-filled with a sentinel.
//
//   args: method   str  one of the names in kMethods below (required)
//         frame    str  name of the managed method whose frame supplies the IDs (default "Pick"): the
//                       experiment walks the current thread (DoStackSnapshot, NULL thread) and takes the
//                       first frame, leaf first, whose metadata name is `frame`
//         extra    int  k in the size needed+k (default 3)
//         guard    int  guard elements past the end of the buffer (default 4)
//         nullSized bool also call with a NULL buffer and cBufferSizeStart = needed (a BUF-04 caller error)
//                       for methods whose runtime source checks the NULL (default true)
//
// Sizes, in order: (NULL, 0) -> needed = *pcBufferMax; then (buffer, 0), 1, needed-1, needed, needed+k
// (duplicates and negative sizes dropped). Each size is called twice, once with every byte of the buffer,
// the guard and *pcBufferMax pre-set to 0xCD and once to 0x5A, so a written element is told apart from an
// untouched one even when the runtime writes the sentinel value itself. One `call` record per size:
//   name: the method; experiment: the plan id
//   args: {"target": {...ids...}, "cBufferSizeStart", "bufferPresent", "elementSize", "guardElements", "pass"}
//   out:  {"pcBufferMax" (null when neither pass set it), "pcBufferMaxB", "hrB" (second pass),
//          "changed" (elements that differ from the sentinel in either pass), "extent" (last changed index + 1),
//          "guardIntact" (both passes), "hex" (the size elements of the 0xCD pass, lowercase hex),
//          "text" / "nulAt" (WCHAR methods: the units before the first NUL, the NUL's index or null)}
//   hr:   HRESULT of the 0xCD pass
// The experiment is meant to fire inside a callback on the managed thread whose stack holds `frame`
// (e.g. ExceptionThrown thrown from that frame): several methods are PROFILER_TO_CLR_ENTRYPOINT_SYNC and
// fail outside a callback. When the frame is not on the stack the experiment records nothing (so it can be
// planned with times 0 at a callback that also fires elsewhere) until it has run once.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "experiments.h"
#include "profharness/hresults.h"
#include "profharness/metadata.h"

namespace profharness {

namespace {

constexpr std::size_t kMaxWalkFrames = 256;
constexpr ULONG32 kMaxElements = 1u << 16;  // never allocate more than this many elements for one call
constexpr unsigned char kSentinelA = 0xCD;
constexpr unsigned char kSentinelB = 0x5A;

struct Targets {
    FunctionID function = 0;
    FunctionInfo info;  // GetFunctionInfo's; the class from GetFunctionInfo2 where that gave none
    AssemblyID assembly = 0;
    AppDomainID appDomain = 0;

    Json json() const {
        Json t = Json::object();
        t.set("functionId", Json(static_cast<std::uint64_t>(function)));
        info.set_in(t);
        t.set("assemblyId", Json(static_cast<std::uint64_t>(assembly)));
        t.set("appDomainId", Json(static_cast<std::uint64_t>(appDomain)));
        return t;
    }
};

// One buffer method: its element size and how to call it for a size, a *pcBufferMax and a buffer.
using BufferCall = HRESULT (*)(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pcMax, void* buf);

struct MethodSpec {
    const char* name;
    std::size_t elementSize;
    bool wide;             // WCHAR string buffer
    int infoLevel;         // ICorProfilerInfoN needed
    bool nullSizedSafe;    // the runtime source checks a NULL buffer with a non-zero size
    BufferCall call;
};

HRESULT call_module_info(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    LPCBYTE base = nullptr;
    AssemblyID a = 0;
    return s.info->GetModuleInfo(t.info.moduleId, &base, size, pc, static_cast<WCHAR*>(buf), &a);
}

HRESULT call_module_info2(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    LPCBYTE base = nullptr;
    AssemblyID a = 0;
    DWORD flags = 0;
    return s.info_as<ICorProfilerInfo3>(3)->GetModuleInfo2(t.info.moduleId, &base, size, pc,
                                                           static_cast<WCHAR*>(buf), &a, &flags);
}

HRESULT call_assembly_info(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    AppDomainID d = 0;
    ModuleID m = 0;
    return s.info->GetAssemblyInfo(t.assembly, size, pc, static_cast<WCHAR*>(buf), &d, &m);
}

HRESULT call_appdomain_info(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    ProcessID p = 0;
    return s.info->GetAppDomainInfo(t.appDomain, size, pc, static_cast<WCHAR*>(buf), &p);
}

HRESULT call_runtime_information(ProbeState& s, const Targets&, ULONG32 size, ULONG32* pc, void* buf) {
    USHORT id = 0, major = 0, minor = 0, build = 0, qfe = 0;
    COR_PRF_RUNTIME_TYPE type = 0;
    return s.info_as<ICorProfilerInfo3>(3)->GetRuntimeInformation(&id, &type, &major, &minor, &build, &qfe, size, pc,
                                                                  static_cast<WCHAR*>(buf));
}

HRESULT call_class_id_info2(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    ModuleID m = 0;
    mdTypeDef td = 0;
    ClassID parent = 0;
    return s.info_as<ICorProfilerInfo2>(2)->GetClassIDInfo2(t.info.classId, &m, &td, &parent, size, pc,
                                                            static_cast<ClassID*>(buf));
}

HRESULT call_function_info2(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    ClassID c = 0;
    ModuleID m = 0;
    mdToken tok = 0;
    return s.info_as<ICorProfilerInfo2>(2)->GetFunctionInfo2(t.function, 0, &c, &m, &tok, size, pc,
                                                             static_cast<ClassID*>(buf));
}

HRESULT call_code_info2(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    return s.info_as<ICorProfilerInfo2>(2)->GetCodeInfo2(t.function, size, pc, static_cast<COR_PRF_CODE_INFO*>(buf));
}

HRESULT call_il_to_native(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    return s.info->GetILToNativeMapping(t.function, size, pc, static_cast<COR_DEBUG_IL_TO_NATIVE_MAP*>(buf));
}

HRESULT call_native_code_starts(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    return s.info_as<ICorProfilerInfo9>(9)->GetNativeCodeStartAddresses(t.function, 0, size, pc,
                                                                        static_cast<UINT_PTR*>(buf));
}

HRESULT call_appdomains_containing(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    return s.info_as<ICorProfilerInfo3>(3)->GetAppDomainsContainingModule(t.info.moduleId, size, pc,
                                                                          static_cast<AppDomainID*>(buf));
}

HRESULT call_class_layout(ProbeState& s, const Targets& t, ULONG32 size, ULONG32* pc, void* buf) {
    ULONG classSize = 0;
    return s.info_as<ICorProfilerInfo2>(2)->GetClassLayout(t.info.classId, static_cast<COR_FIELD_OFFSET*>(buf), size,
                                                           pc, &classSize);
}

// The null-with-size column follows the NULL checks read in dotnet/runtime proftoeeinterfaceimpl.cpp.
const MethodSpec kMethods[] = {
    {"GetModuleInfo", sizeof(WCHAR), true, 1, true, &call_module_info},
    {"GetModuleInfo2", sizeof(WCHAR), true, 3, true, &call_module_info2},
    {"GetAssemblyInfo", sizeof(WCHAR), true, 1, true, &call_assembly_info},
    {"GetAppDomainInfo", sizeof(WCHAR), true, 1, true, &call_appdomain_info},
    {"GetRuntimeInformation", sizeof(WCHAR), true, 3, false, &call_runtime_information},
    {"GetClassIDInfo2", sizeof(ClassID), false, 2, true, &call_class_id_info2},
    {"GetFunctionInfo2", sizeof(ClassID), false, 2, true, &call_function_info2},
    {"GetCodeInfo2", sizeof(COR_PRF_CODE_INFO), false, 2, false, &call_code_info2},
    {"GetILToNativeMapping", sizeof(COR_DEBUG_IL_TO_NATIVE_MAP), false, 1, false, &call_il_to_native},
    {"GetNativeCodeStartAddresses", sizeof(UINT_PTR), false, 9, true, &call_native_code_starts},
    {"GetAppDomainsContainingModule", sizeof(AppDomainID), false, 3, true, &call_appdomains_containing},
    {"GetClassLayout", sizeof(COR_FIELD_OFFSET), false, 2, false, &call_class_layout},
};

const MethodSpec* find_method(const std::string& name) {
    for (const MethodSpec& m : kMethods)
        if (name == m.name) return &m;
    return nullptr;
}

// --- finding the IDs ---------------------------------------------------------------------------------

struct FrameList {
    FunctionID ids[kMaxWalkFrames];
    std::size_t n = 0;
};

HRESULT collect_frame(FunctionID funcId, UINT_PTR, COR_PRF_FRAME_INFO, ULONG32, BYTE[], void* clientData) {
    auto* list = static_cast<FrameList*>(clientData);
    if (list && funcId != 0 && list->n < kMaxWalkFrames) list->ids[list->n++] = funcId;
    return S_OK;
}

std::string method_name(ProbeState& s, FunctionID fid) {
    ComHolder<IMetaDataImport> md;
    mdToken tok = 0;
    HRESULT hr = function_metadata(s.info, fid, md, tok);
    if (failed(hr) || !md) return std::string();
    const MethodProps m = method_props(md.get(), tok, 256);
    return failed(m.hr) ? std::string() : m.name;
}

// Walks the current thread and fills t from the first frame named `frame`; false when it is not there.
bool find_targets(ProbeState& s, const std::string& frame, const char* exp, Targets& t) {
    auto* info2 = s.info_as<ICorProfilerInfo2>(2);
    if (!info2) return false;
    FrameList list;
    HRESULT hr = info2->DoStackSnapshot(0, &collect_frame, 0, &list, nullptr, 0);
    if (failed(hr)) return false;
    for (std::size_t i = 0; i < list.n; ++i) {
        if (method_name(s, list.ids[i]) != frame) continue;
        t.function = list.ids[i];
        hr = function_info(s.info, t.function, t.info);
        Json a = Json::object();
        a.set("functionId", Json(static_cast<std::uint64_t>(t.function)));
        Json o = Json::object();
        t.info.set_in(o).set("method", frame);
        s.call("GetFunctionInfo", exp, a, o, hr);
        if (failed(hr)) return false;
        if (t.info.classId == 0) {
            // GetFunctionInfo gives no ClassID for a method of a generic class; GetFunctionInfo2 (no frame
            // info, no type-argument buffer) gives the exact instantiation when the code is not shared.
            ClassID exact = 0;
            ModuleID m2 = 0;
            mdToken tok2 = 0;
            ULONG32 nargs = 0;
            HRESULT h2 = info2->GetFunctionInfo2(t.function, 0, &exact, &m2, &tok2, 0, &nargs, nullptr);
            Json o2 = Json::object();
            o2.set("classId", Json(static_cast<std::uint64_t>(exact))).set("pcTypeArgs", Json(nargs));
            s.call("GetFunctionInfo2", exp, a, o2, h2);
            if (!failed(h2)) t.info.classId = exact;
        }
        // The assembly and the AppDomain, through calls that fill no caller-allocated buffer.
        LPCBYTE base = nullptr;
        ULONG cch = 0;
        s.info->GetModuleInfo(t.info.moduleId, &base, 0, &cch, nullptr, &t.assembly);
        ModuleID manifest = 0;
        ULONG acch = 0;
        s.info->GetAssemblyInfo(t.assembly, 0, &acch, nullptr, &t.appDomain, &manifest);
        if (t.appDomain == 0) {
            ThreadID tid = 0;
            if (!failed(s.info->GetCurrentThreadID(&tid)))
                if (auto* i2 = s.info_as<ICorProfilerInfo2>(2)) i2->GetThreadAppDomain(tid, &t.appDomain);
        }
        return true;
    }
    return false;
}

// --- one call at one size ----------------------------------------------------------------------------

const char kHex[] = "0123456789abcdef";

struct PassResult {
    HRESULT hr = S_OK;
    ULONG32 pcMax = 0;
    bool pcSet = false;
    std::vector<unsigned char> bytes;  // (size + guard) elements
};

PassResult one_pass(ProbeState& s, const MethodSpec& m, const Targets& t, ULONG32 size, bool present,
                    std::size_t guard, unsigned char sentinel) {
    PassResult r;
    const std::size_t total = present ? (static_cast<std::size_t>(size) + guard) * m.elementSize : 0;
    r.bytes.assign(total, sentinel);
    ULONG32 pc = 0;
    std::memset(&pc, sentinel, sizeof pc);
    const ULONG32 before = pc;
    r.hr = m.call(s, t, size, &pc, present ? static_cast<void*>(r.bytes.data()) : nullptr);
    r.pcMax = pc;
    r.pcSet = pc != before;
    return r;
}

bool element_changed(const std::vector<unsigned char>& bytes, std::size_t index, std::size_t esize,
                     unsigned char sentinel) {
    for (std::size_t b = 0; b < esize; ++b)
        if (bytes[index * esize + b] != sentinel) return true;
    return false;
}

// Calls at one size (two passes) and writes the record; returns *pcBufferMax (or 0 when not set).
ULONG32 probe_size(ProbeState& s, const MethodSpec& m, const Targets& t, const char* exp, ULONG32 size,
                   bool present, std::size_t guard) {
    PassResult a = one_pass(s, m, t, size, present, guard, kSentinelA);
    PassResult b = one_pass(s, m, t, size, present, guard, kSentinelB);
    const std::size_t es = m.elementSize;
    std::uint64_t changed = 0, extent = 0;
    bool guardIntact = true;
    if (present) {
        for (std::size_t i = 0; i < static_cast<std::size_t>(size) + guard; ++i) {
            bool c = element_changed(a.bytes, i, es, kSentinelA) || element_changed(b.bytes, i, es, kSentinelB);
            if (i < size) {
                if (c) { ++changed; extent = i + 1; }
            } else if (c) {
                guardIntact = false;
            }
        }
    }
    Json args = Json::object();
    args.set("target", t.json());
    args.set("cBufferSizeStart", Json(size));
    args.set("bufferPresent", Json(present));
    args.set("elementSize", Json(static_cast<std::uint64_t>(es)));
    args.set("guardElements", Json(static_cast<std::uint64_t>(present ? guard : 0)));
    Json out = Json::object();
    out.set("pcBufferMax", a.pcSet || b.pcSet ? Json(a.pcMax) : Json());
    out.set("pcBufferMaxB", b.pcSet || a.pcSet ? Json(b.pcMax) : Json());
    out.set("hrB", Json(static_cast<std::uint32_t>(b.hr)));
    out.set("changed", Json(changed));
    out.set("extent", Json(extent));
    out.set("guardIntact", Json(guardIntact));
    std::string hex;
    if (present) {
        hex.reserve(static_cast<std::size_t>(size) * es * 2);
        for (std::size_t i = 0; i < static_cast<std::size_t>(size) * es; ++i) {
            hex.push_back(kHex[a.bytes[i] >> 4]);
            hex.push_back(kHex[a.bytes[i] & 0xF]);
        }
    }
    out.set("hex", present ? Json(hex) : Json());
    if (m.wide) {
        if (present) {
            std::vector<char16_t> units(size);
            if (size) std::memcpy(units.data(), a.bytes.data(), static_cast<std::size_t>(size) * sizeof(char16_t));
            std::size_t nul = 0;
            while (nul < units.size() && units[nul] != 0) ++nul;
            out.set("text", Json(utf16_to_utf8(units.data(), static_cast<long>(nul))));
            out.set("nulAt", nul < units.size() ? Json(static_cast<std::uint64_t>(nul)) : Json());
        } else {
            out.set("text", Json());
            out.set("nulAt", Json());
        }
    }
    s.call(m.name, exp, args, out, a.hr);
    return a.pcSet ? a.pcMax : 0;
}

std::mutex g_done_mu;
std::set<std::string> g_done;  // experiment ids that have run

void buffer_probe(ExperimentContext& ctx) {
    ProbeState& s = state();
    const char* exp = ctx.planned.id.c_str();
    const std::string method = ctx.string_arg("method", "");
    const MethodSpec* m = find_method(method);
    if (!m) {
        s.probe_error("buffer_probe: unknown method \"" + method + "\"", ctx.planned.id);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(g_done_mu);
        if (g_done.count(ctx.planned.id)) return;
    }
    if (s.info_level < m->infoLevel) {
        std::lock_guard<std::mutex> lock(g_done_mu);
        g_done.insert(ctx.planned.id);
        s.probe_error("buffer_probe: " + method + " needs ICorProfilerInfo" + std::to_string(m->infoLevel),
                      ctx.planned.id);
        return;
    }
    const std::string frame = ctx.string_arg("frame", "Pick");
    const std::int64_t extra = std::clamp<std::int64_t>(ctx.int_arg("extra", 3), 1, 64);
    const std::size_t guard = static_cast<std::size_t>(std::clamp<std::int64_t>(ctx.int_arg("guard", 4), 1, 64));
    const bool nullSized = ctx.bool_arg("nullSized", true);
    Targets t;
    if (!find_targets(s, frame, exp, t)) return;  // not this exception: wait for the frame
    {
        std::lock_guard<std::mutex> lock(g_done_mu);
        if (!g_done.insert(ctx.planned.id).second) return;
    }
    const ULONG32 needed = probe_size(s, *m, t, exp, 0, false, guard);
    if (needed > kMaxElements) {
        s.probe_error("buffer_probe: " + method + " asks for " + std::to_string(needed) + " elements; not probed",
                      ctx.planned.id);
        return;
    }
    std::vector<std::int64_t> sizes{0, 1, static_cast<std::int64_t>(needed) - 1, needed,
                                    static_cast<std::int64_t>(needed) + extra};
    std::vector<std::int64_t> done;
    for (std::int64_t size : sizes) {
        if (size < 0 || std::find(done.begin(), done.end(), size) != done.end()) continue;
        done.push_back(size);
        probe_size(s, *m, t, exp, static_cast<ULONG32>(size), true, guard);
    }
    if (nullSized && m->nullSizedSafe && needed > 0) probe_size(s, *m, t, exp, needed, false, guard);
}

const ExperimentEntry kRows[] = {
    {"buffer_probe", &buffer_probe,
     "One ICorProfilerInfo caller-allocated buffer method at sizes (NULL,0), 0, 1, needed-1, needed, needed+k, "
     "sentinel-filled buffers with guard elements. args: method str (GetModuleInfo, GetModuleInfo2, "
     "GetAssemblyInfo, GetAppDomainInfo, GetRuntimeInformation, GetClassIDInfo2, GetFunctionInfo2, GetCodeInfo2, "
     "GetILToNativeMapping, GetNativeCodeStartAddresses, GetAppDomainsContainingModule, GetClassLayout), "
     "frame str (default \"Pick\"), extra int (default 3), guard int (default 4), nullSized bool (default true)"},
};

}  // namespace

const ExperimentTable kBufferExperiments{kRows, sizeof kRows / sizeof kRows[0]};

}  // namespace profharness
