// The method bodies a profiler hands over (issue 25, il_bodies.cpp): what the proxy records so that the
// validator can check each body with the IL checker (clr_model/il.py) against the module's metadata.
//
// Recorded (every record a `call` in the shape of an ICorProfilerInfo call: args, out, hr, caller):
//   * GetILFunctionBody: out `body`, the original body's bytes (hex; pcbMethodSize of them);
//   * GetILFunctionBodyAllocator: the IMethodMalloc handed to the profiler is the proxy's wrapper; each
//     `IMethodMalloc::Alloc` is a call (args cb, out pointer, args moduleId: the allocator's module);
//   * SetILFunctionBody (ICorProfilerInfo) and `ICorProfilerFunctionControl::SetILFunctionBody`: out `body`,
//     the bytes handed over (hex): the rest of the allocation the body lies in when it came from a method
//     allocator (out `allocation`: [base, size]), else the length its header announces; out `allocated`:
//     whether it lies in memory a method allocator gave;
//   * GetReJITParameters: the ICorProfilerFunctionControl the profiler is given is the proxy's wrapper; its
//     SetCodegenFlags / SetILFunctionBody / SetILInstrumentedCodeMap are calls named
//     "ICorProfilerFunctionControl::<Method>", carrying the ReJIT's moduleId and methodId among their args;
//   * the first time a body names a module, a `proxy.il.module` mark: the module's id and file path
//     (GetModuleInfo, asked by the proxy itself), so the validator can read its metadata from disk.
// Declarations of IMethodMalloc and ICorProfilerFunctionControl (corprof.idl order) are here: the shared
// headers only forward-declare them.
#pragma once

#include <cstdint>

#include "profharness/hresults.h"
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

namespace proxy {

// The three ICorProfilerInfo methods, recorded with the bodies (`real`: the runtime's ICorProfilerInfo, or null).
HRESULT il_get_body(ICorProfilerInfo* real, ModuleID module, mdMethodDef method, LPCBYTE* header, ULONG* size,
                    const void* caller);
HRESULT il_get_allocator(ICorProfilerInfo* real, ModuleID module, IMethodMalloc** malloc, const void* caller);
HRESULT il_set_body(ICorProfilerInfo* real, ModuleID module, mdMethodDef method, LPCBYTE header, const void* caller);
// The function control GetReJITParameters hands the profiler: the proxy's wrapper around `real` (never freed:
// a profiler that keeps it past the callback still reaches the runtime's object through it).
ICorProfilerFunctionControl* il_wrap_control(ICorProfilerFunctionControl* real, ModuleID module, mdMethodDef method);

}  // namespace proxy
}  // namespace profharness
