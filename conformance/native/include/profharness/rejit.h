// The interfaces of corprof.idl the shared headers only forward-declare and that the IL-rewriting and ReJIT
// parts use (issue 25): IMethodMalloc (GetILFunctionBodyAllocator), ICorProfilerFunctionControl
// (GetReJITParameters) and ICorProfilerModuleEnum (EnumModules), declared in corprof.idl's method order.
// Not included by the document-written fixtures (tests/.../profilers/docs), which declare IMethodMalloc
// themselves.
#pragma once

#include "profharness/interfaces.h"
#include "profharness/types.h"

namespace profharness {

// {A0EFB28B-6EE2-4D7B-B983-A75EF7BEEDB8}
inline constexpr GUID IID_IMethodMalloc = {0xA0EFB28B, 0x6EE2, 0x4D7B, {0xB9, 0x83, 0xA7, 0x5E, 0xF7, 0xBE, 0xED, 0xB8}};
// {F0963021-E1EA-4732-8581-E01B0BD3C0C6}
inline constexpr GUID IID_ICorProfilerFunctionControl = {
    0xF0963021, 0xE1EA, 0x4732, {0x85, 0x81, 0xE0, 0x1B, 0x0B, 0xD3, 0xC0, 0xC6}};

struct IMethodMalloc : public IUnknown {
    virtual void* STDMETHODCALLTYPE Alloc(ULONG cb) = 0;
};

struct ICorProfilerFunctionControl : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE SetCodegenFlags(DWORD flags) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILFunctionBody(ULONG cbNewILMethodHeader, LPCBYTE pbNewILMethodHeader) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILInstrumentedCodeMap(ULONG cILMapEntries, COR_IL_MAP* rgILMapEntries) = 0;
};

struct ICorProfilerModuleEnum : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE Skip(ULONG celt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Reset() = 0;
    virtual HRESULT STDMETHODCALLTYPE Clone(ICorProfilerModuleEnum** ppEnum) = 0;
    virtual HRESULT STDMETHODCALLTYPE GetCount(ULONG* pcelt) = 0;
    virtual HRESULT STDMETHODCALLTYPE Next(ULONG celt, ModuleID* ids, ULONG* pceltFetched) = 0;
};

}  // namespace profharness
