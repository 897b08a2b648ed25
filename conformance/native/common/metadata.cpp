// The metadata helper of profharness_common (include/profharness/metadata.h).
#include "profharness/metadata.h"

#include "profharness/hresults.h"
#include "profharness/json.h"

namespace profharness {

std::string wide_name(const WCHAR* buf, ULONG n, ULONG cch) {
    if (n > cch) n = cch;
    if (n == 0 || !buf) return std::string();
    return utf16_to_utf8(buf, static_cast<long>(buf[n - 1] == 0 ? n - 1 : n));
}

Json& FunctionInfo::set_in(Json& o) const {
    return o.set("classId", Json(static_cast<std::uint64_t>(classId)))
        .set("moduleId", Json(static_cast<std::uint64_t>(moduleId)))
        .set("token", Json(static_cast<std::uint64_t>(token)));
}

HRESULT function_info(ICorProfilerInfo* info, FunctionID fid, FunctionInfo& out) {
    return info->GetFunctionInfo(fid, &out.classId, &out.moduleId, &out.token);
}

HRESULT function_metadata(ICorProfilerInfo* info, FunctionID fid, ComHolder<IMetaDataImport>& md, mdToken& token) {
    IUnknown* unk = nullptr;
    const HRESULT hr = info->GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport, &unk, &token);
    md.adopt(static_cast<IMetaDataImport*>(unk));  // asked for IID_IMetaDataImport
    return hr;
}

HRESULT module_metadata(ICorProfilerInfo* info, ModuleID mod, ComHolder<IMetaDataImport>& md) {
    IUnknown* unk = nullptr;
    const HRESULT hr = info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk);
    md.adopt(static_cast<IMetaDataImport*>(unk));
    return hr;
}

TypeDefProps type_def_props(IMetaDataImport* md, mdTypeDef td) {
    WCHAR buf[kNameChars];
    TypeDefProps p{};
    p.hr = md->GetTypeDefProps(td, buf, kNameChars, &p.pchTypeDef, &p.flags, &p.extends);
    if (!failed(p.hr)) p.name = wide_name(buf, p.pchTypeDef, kNameChars);
    return p;
}

MethodProps method_props(IMetaDataImport* md, mdMethodDef mb, ULONG cch) {
    WCHAR buf[kNameChars];
    if (cch > kNameChars) cch = kNameChars;
    MethodProps p{};
    PCCOR_SIGNATURE sig = nullptr;
    ULONG cbSig = 0, rva = 0;
    p.hr = md->GetMethodProps(mb, &p.owner, buf, cch, &p.pchMethod, &p.attr, &sig, &cbSig, &rva, &p.implFlags);
    if (!failed(p.hr)) p.name = wide_name(buf, p.pchMethod, cch);
    return p;
}

bool class_name(ICorProfilerInfo* info, ClassID cls, std::string& name, HRESULT* first_failure) {
    auto note = [first_failure](HRESULT hr) {
        if (first_failure && failed(hr) && !failed(*first_failure)) *first_failure = hr;
    };
    ModuleID mod = 0;
    mdTypeDef td = 0;
    HRESULT hr = info->GetClassIDInfo(cls, &mod, &td);
    note(hr);
    if (failed(hr) || !mod || !td) return false;
    ComHolder<IMetaDataImport> md;
    hr = module_metadata(info, mod, md);
    note(hr);
    if (hr != S_OK || !md) return false;
    TypeDefProps props = type_def_props(md.get(), td);
    if (failed(props.hr)) return false;
    name = props.name;
    return true;
}

}  // namespace profharness
