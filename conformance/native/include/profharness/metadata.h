// Metadata helper: IMetaDataImport from ICorProfilerInfo (held by a ComHolder, released on scope exit)
// and names read through it. Part of profharness_common.
#pragma once

#include <string>

#include "profharness/com.h"
#include "profharness/interfaces.h"
#include "profharness/json.h"
#include "profharness/types.h"

namespace profharness {

// A name the API wrote into a WCHAR buffer: n is the count it returned (*pch..., which counts the
// terminating NUL when the API wrote one), clamped to cch, the buffer's size.
std::string wide_name(const WCHAR* buf, ULONG n, ULONG cch);

// GetTokenAndMetaDataFromFunction(fid, IID_IMetaDataImport): the import interface and the method token.
HRESULT function_metadata(ICorProfilerInfo* info, FunctionID fid, ComHolder<IMetaDataImport>& md, mdToken& token);
// GetModuleMetaData(mod, ofRead, IID_IMetaDataImport).
HRESULT module_metadata(ICorProfilerInfo* info, ModuleID mod, ComHolder<IMetaDataImport>& md);

// What GetFunctionInfo (or GetFunctionInfo2) answers about a FunctionID besides its HRESULT: the class (0 from
// GetFunctionInfo for a method of a generic class), the module and the method's token.
struct FunctionInfo {
    ClassID classId = 0;
    ModuleID moduleId = 0;
    mdToken token = 0;
    // Sets "classId", "moduleId" and "token", the names the records give them, in the object o; o.
    Json& set_in(Json& o) const;
};
// GetFunctionInfo(fid) into `out`.
HRESULT function_info(ICorProfilerInfo* info, FunctionID fid, FunctionInfo& out);

inline constexpr ULONG kNameChars = 512;  // the WCHAR buffer the name helpers pass

// What an IMetaDataImport Get*Props call answered: its HRESULT and the name, set only on success.
struct NamedProps {
    HRESULT hr;
    std::string name;
};

// IMetaDataImport::GetTypeDefProps with a kNameChars buffer.
struct TypeDefProps : NamedProps {
    ULONG pchTypeDef = 0;
    DWORD flags = 0;
    mdToken extends = 0;
};
TypeDefProps type_def_props(IMetaDataImport* md, mdTypeDef td);

// IMetaDataImport::GetMethodProps with a buffer of cch WCHARs.
struct MethodProps : NamedProps {
    mdTypeDef owner = 0;
    ULONG pchMethod = 0;
    DWORD attr = 0;
    DWORD implFlags = 0;
};
MethodProps method_props(IMetaDataImport* md, mdMethodDef mb, ULONG cch = kNameChars);

// The name of a ClassID's type definition: GetClassIDInfo, GetModuleMetaData, GetTypeDefProps.
// Every failing HRESULT on the way (the first one) goes to *first_failure when given; "" when unnamed.
bool class_name(ICorProfilerInfo* info, ClassID cls, std::string& name, HRESULT* first_failure = nullptr);

}  // namespace profharness
