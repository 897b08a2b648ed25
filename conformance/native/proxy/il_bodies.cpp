// The method bodies a profiler hands over, recorded (il_bodies.h says what; issue 25).
#include "il_bodies.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "generated.h"
#include "profharness/com.h"
#include "proxy.h"

namespace profharness::proxy {

namespace {

// The longest body recorded: a header announcing more is recorded up to here (the checker then says the body
// is cut short).
constexpr std::size_t kMaxBody = 1u << 20;

std::mutex g_mu;
// What the method allocators gave: base -> size (bodies are never freed: IMethodMalloc has no Free).
std::map<std::uintptr_t, std::size_t>* g_allocations = new std::map<std::uintptr_t, std::size_t>();
std::set<ModuleID>* g_modules_named = new std::set<ModuleID>();

std::string hex_of(const BYTE* p, std::size_t n) {
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * n);
    for (std::size_t k = 0; k < n; ++k) {
        out.push_back(kHex[p[k] >> 4]);
        out.push_back(kHex[p[k] & 0xF]);
    }
    return out;
}

std::uint32_t u32(const BYTE* p) {
    return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
}

// The length the body's header announces (ECMA-335 II.25.4: tiny: 1 + code size; fat: header, code, then the
// extra data sections, each at the next 4-byte boundary), never more than `limit`.
std::size_t announced_length(const BYTE* h, std::size_t limit) {
    if (!h || limit == 0) return 0;
    if ((h[0] & 0x3) == 0x2) return std::min<std::size_t>(1 + (h[0] >> 2), limit);
    if ((h[0] & 0x3) != 0x3 || limit < 12) return std::min<std::size_t>(limit, 12);
    const std::size_t header = 4u * (h[1] >> 4);
    std::size_t end = header + u32(h + 4);
    if (end > limit) return limit;
    if ((h[0] & 0x8) == 0) return end;  // no MoreSects
    for (int sections = 0; sections < 64; ++sections) {
        const std::uintptr_t at = (reinterpret_cast<std::uintptr_t>(h) + end + 3) & ~std::uintptr_t(3);
        const std::size_t start = at - reinterpret_cast<std::uintptr_t>(h);
        if (start + 4 > limit) return limit;
        const BYTE kind = h[start];
        const std::size_t size = (kind & 0x40) ? (h[start + 1] | (h[start + 2] << 8) | (std::size_t(h[start + 3]) << 16))
                                               : h[start + 1];
        end = start + (size < 4 ? 4 : size);
        if (end > limit) return limit;
        if ((kind & 0x80) == 0) return end;
    }
    return end;
}

// The allocation `p` lies in: its base and size (0, 0 when no method allocator gave it).
std::pair<std::uintptr_t, std::size_t> allocation_of(const void* p) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_allocations->upper_bound(at);
    if (it == g_allocations->begin()) return {0, 0};
    --it;
    if (at < it->first + it->second) return {it->first, it->second};
    return {0, 0};
}

// Names a module the first time a body names it: a proxy.il.module mark {moduleId, path}.
void name_module(ModuleID module) {
    if (!recording_enabled() || module == 0) return;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_modules_named->insert(module).second) return;
    }
    auto* info = static_cast<ICorProfilerInfo*>(runtime_info_of(1));
    WCHAR name[1024];
    ULONG len = 0;
    LPCBYTE base = nullptr;
    AssemblyID assembly = 0;
    std::string path;
    if (info && info->GetModuleInfo(module, &base, 1024, &len, name, &assembly) == S_OK) {
        for (ULONG k = 0; k < len && name[k]; ++k) {
            const std::uint32_t c = name[k];
            if (c < 0x80) {
                path.push_back(static_cast<char>(c));
            } else if (c < 0x800) {
                path.push_back(static_cast<char>(0xC0 | (c >> 6)));
                path.push_back(static_cast<char>(0x80 | (c & 0x3F)));
            } else {
                path.push_back(static_cast<char>(0xE0 | (c >> 12)));
                path.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
                path.push_back(static_cast<char>(0x80 | (c & 0x3F)));
            }
        }
    }
    Json rec = Json::object();
    rec.set("name", "proxy.il.module").set("payload", Json());
    rec.set("moduleId", Json(static_cast<std::uint64_t>(module)));
    rec.set("path", path.empty() ? Json() : Json(path));
    trace().write("mark", rec);
}

// The body handed over: out `body` (hex), `allocated`, `allocation`; `declared`: the length the caller gave
// (ICorProfilerFunctionControl::SetILFunctionBody), 0 when it gives none.
void record_body(InfoScope& s, const void* header, std::size_t declared) {
    const auto* h = static_cast<const BYTE*>(header);
    if (!h) return;
    const auto [base, size] = allocation_of(h);
    std::size_t length;
    if (size) {
        length = base + size - reinterpret_cast<std::uintptr_t>(h);
        s.out_value("allocation", Json::array().push(Json(static_cast<std::uint64_t>(base))).push(Json(static_cast<std::uint64_t>(size))));
    } else if (declared) {
        length = declared;
    } else {
        length = announced_length(h, kMaxBody);
    }
    if (length > kMaxBody) length = kMaxBody;
    s.out_value("allocated", Json(size != 0));
    s.out_value("body", Json(hex_of(h, length)));
}

class MallocWrapper final : public IMethodMalloc {
 public:
    MallocWrapper(IMethodMalloc* real, ModuleID module) : real_(real), module_(module) {}
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        return query_one<IMethodMalloc>(this, IID_IMethodMalloc, riid, ppv);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        const ULONG n = --refs_;
        if (n == 0) {
            real_->Release();
            delete this;
        }
        return n;
    }
    void* STDMETHODCALLTYPE Alloc(ULONG cb) override {
        InfoScope s("IMethodMalloc::Alloc", false, __builtin_return_address(0));
        s.arg("moduleId", module_);
        s.arg("cb", cb);
        s.begin();
        void* p = real_->Alloc(cb);
        if (p) {
            std::lock_guard<std::mutex> lock(g_mu);
            (*g_allocations)[reinterpret_cast<std::uintptr_t>(p)] = cb;
        }
        s.out_value("pointer", Json::pointer(p));
        s.finish(p ? S_OK : E_OUTOFMEMORY);
        return p;
    }

 private:
    IMethodMalloc* real_;
    ModuleID module_;
    std::atomic<ULONG> refs_{1};
};

class FunctionControlWrapper final : public ICorProfilerFunctionControl {
 public:
    FunctionControlWrapper(ICorProfilerFunctionControl* real, ModuleID module, mdMethodDef method)
        : real_(real), module_(module), method_(method) {
        real_->AddRef();
    }
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        return query_one<ICorProfilerFunctionControl>(this, IID_ICorProfilerFunctionControl, riid, ppv);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        const ULONG n = --refs_;
        return n;  // never freed (il_bodies.h)
    }
    HRESULT STDMETHODCALLTYPE SetCodegenFlags(DWORD flags) override {
        InfoScope s("ICorProfilerFunctionControl::SetCodegenFlags", false, __builtin_return_address(0));
        ids(s);
        s.arg("flags", flags);
        s.begin();
        return s.finish(real_->SetCodegenFlags(flags));
    }
    HRESULT STDMETHODCALLTYPE SetILFunctionBody(ULONG cb, LPCBYTE header) override {
        InfoScope s("ICorProfilerFunctionControl::SetILFunctionBody", false, __builtin_return_address(0));
        ids(s);
        s.arg("cbNewILMethodHeader", cb);
        s.arg("pbNewILMethodHeader", header);
        name_module(module_);
        record_body(s, header, cb);
        s.begin();
        return s.finish(real_->SetILFunctionBody(cb, header));
    }
    HRESULT STDMETHODCALLTYPE SetILInstrumentedCodeMap(ULONG n, COR_IL_MAP* map) override {
        InfoScope s("ICorProfilerFunctionControl::SetILInstrumentedCodeMap", false, __builtin_return_address(0));
        ids(s);
        s.arg("cILMapEntries", n);
        s.arg("rgILMapEntries", map);
        if (map && n <= 65536) {
            Json entries = Json::array();
            for (ULONG k = 0; k < n; ++k)
                entries.push(Json::array().push(Json(map[k].oldOffset)).push(Json(map[k].newOffset)).push(Json(map[k].fAccurate != 0)));
            s.out_value("map", std::move(entries));
        }
        s.begin();
        return s.finish(real_->SetILInstrumentedCodeMap(n, map));
    }

 private:
    void ids(InfoScope& s) {
        s.arg("moduleId", module_);
        s.arg("methodId", method_);
    }
    ICorProfilerFunctionControl* real_;
    ModuleID module_;
    mdMethodDef method_;
    std::atomic<ULONG> refs_{1};
};

}  // namespace

HRESULT il_get_body(ICorProfilerInfo* real, ModuleID module, mdMethodDef method, LPCBYTE* header, ULONG* size,
                    const void* caller) {
    InfoScope s(static_cast<int>(InfoM::GetILFunctionBody), false, caller);
    s.arg("moduleId", module);
    s.arg("methodId", method);
    s.arg("ppMethodHeader", header);
    s.arg("pcbMethodSize", size);
    s.begin();
    if (!real) return s.finish(E_NOINTERFACE);
    const HRESULT hr = real->GetILFunctionBody(module, method, header, size);
    s.out("ppMethodHeader", header);
    s.out("pcbMethodSize", size);
    if (hr == S_OK && header && *header && size && *size <= kMaxBody) {
        name_module(module);
        s.out_value("body", Json(hex_of(*header, *size)));
    }
    return s.finish(hr);
}

HRESULT il_get_allocator(ICorProfilerInfo* real, ModuleID module, IMethodMalloc** malloc, const void* caller) {
    InfoScope s(static_cast<int>(InfoM::GetILFunctionBodyAllocator), false, caller);
    s.arg("moduleId", module);
    s.arg("ppMalloc", malloc);
    s.begin();
    if (!real) return s.finish(E_NOINTERFACE);
    IMethodMalloc* inner = nullptr;
    const HRESULT hr = real->GetILFunctionBodyAllocator(module, &inner);
    IMethodMalloc* handed = (hr == S_OK && inner) ? new MallocWrapper(inner, module) : inner;
    if (malloc) *malloc = handed;
    s.out_value("ppMalloc", Json::pointer(handed));
    return s.finish(hr);
}

HRESULT il_set_body(ICorProfilerInfo* real, ModuleID module, mdMethodDef method, LPCBYTE header, const void* caller) {
    InfoScope s(static_cast<int>(InfoM::SetILFunctionBody), false, caller);
    s.arg("moduleId", module);
    s.arg("methodid", method);
    s.arg("pbNewILMethodHeader", header);
    name_module(module);
    record_body(s, header, 0);
    // the method's IL was compiled already (for a FunctionID naming it: this one, or another instantiation)
    if (const std::uint64_t compiled = jit_method_compiled(module, method))
        s.field("compiledMethod", Json::object().set("functionId", Json(compiled)));
    s.begin();
    if (!real) return s.finish(E_NOINTERFACE);
    return s.finish(real->SetILFunctionBody(module, method, header));
}

ICorProfilerFunctionControl* il_wrap_control(ICorProfilerFunctionControl* real, ModuleID module, mdMethodDef method) {
    if (!real) return nullptr;
    return new FunctionControlWrapper(real, module, method);
}

}  // namespace profharness::proxy
