// metadata_walker: keeps every rule; in ClassLoadFinished it asks the class's metadata what an APM agent asks
// beyond its name: its enclosing class (GetNestedClassProps), a custom attribute (GetCustomAttributeByName),
// whether its token is valid (IsValidToken) and the props of its first field (EnumFields, GetFieldProps):
// IMetaDataImport's later slots, which an interface cut at GetMethodProps left out of the fake runtime's
// metadata object (a call there jumped past its vtable). Whatever the answer (E_NOTIMPL included), it goes on.
#include "fixture.h"

using namespace fixture;

namespace {

class MetadataWalker final : public Profiler<Callbacks11, 11> {
 public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        return take_info(unk, COR_PRF_MONITOR_CLASS_LOADS);
    }
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID cls, HRESULT) override {
        ModuleID mod = 0;
        mdTypeDef td = 0;
        if (info->GetClassIDInfo(cls, &mod, &td) != S_OK || td == 0) return S_OK;
        IUnknown* unk = nullptr;
        if (info->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || !unk) return S_OK;
        auto* md = static_cast<IMetaDataImport*>(unk);
        mdTypeDef outer = 0;
        md->GetNestedClassProps(td, &outer);
        const void* blob = nullptr;
        ULONG size = 0;
        md->GetCustomAttributeByName(td, u"System.ObsoleteAttribute", &blob, &size);
        md->IsValidToken(td);
        HCORENUM fields = nullptr;
        mdFieldDef field = 0;
        ULONG count = 0;
        if (md->EnumFields(&fields, td, &field, 1, &count) == S_OK && count == 1) {
            WCHAR name[64];
            ULONG got = 0;
            md->GetFieldProps(field, nullptr, name, 64, &got, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
        }
        if (fields) md->CloseEnum(fields);
        md->Release();
        return S_OK;
    }
};

}  // namespace

FIXTURE_EXPORT(MetadataWalker)
