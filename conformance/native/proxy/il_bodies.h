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
// IMethodMalloc and ICorProfilerFunctionControl are declared in profharness/interfaces.h (the API table).
#pragma once

#include <cstdint>

#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/types.h"

namespace profharness {

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
