"""The fake runtime's interface classes (``fakeruntime/generated.h``, issue 11), from the API table:

- ``Cb``: every ICorProfilerCallback* method, its name, the callback interface version that declares it,
  whether the recorder keeps it lazily (as the proxy does) and the COR_PRF_MONITOR bits the profiler must
  have set for the runtime to make it (:data:`CALLBACK_MASKS`);
- ``deliver_scalar``: calls every callback whose parameters are all by-value scalars (or ``BOOL*``
  out-flags) with its arguments read from a JSON object by the API's parameter names;
- ``InfoBase``: every ICorProfilerInfo* method, recorded through a ``CallScope`` (fakeruntime.h) with the
  proxy's argument and out-value rules (the same records, so the validator's reader and rules judge both),
  answered by ``answer_<Name>`` (fakeruntime.cpp) for :data:`ANSWERED` methods and ``E_NOTIMPL`` for the
  rest;
- ``MetaDataBase``: IMetaDataImport, answered by ``answer_<Name>`` for :data:`METADATA_ANSWERED` and
  ``E_NOTIMPL`` otherwise.

Methods in ``CUSTOM_INFO`` are written by hand in fakeruntime.cpp (DoStackSnapshot and the hook setters).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from clr_model import api
from conformance.codegen import (
    NATIVE_DIR,
    family_interfaces,
    generated_by,
    iid_switch,
    method_enum,
    method_names,
    out_values,
    per_method,
    recordable,
)
from conformance.codegen.proxy import LAZY_CALLBACKS, TWO_PHASE_INFO

OUTPUT = NATIVE_DIR / "fakeruntime" / "generated.h"

#: ICorProfilerInfo methods the fake runtime answers from the world state it was sent.
ANSWERED = frozenset(
    {
        "GetClassFromObject",
        "GetClassFromToken",
        "GetCodeInfo",
        "GetEventMask",
        "GetFunctionFromIP",
        "GetFunctionFromToken",
        "GetObjectSize",
        "GetThreadInfo",
        "GetCurrentThreadID",
        "GetClassIDInfo",
        "GetFunctionInfo",
        "SetEventMask",
        "GetTokenAndMetaDataFromFunction",
        "GetModuleInfo",
        "GetModuleMetaData",
        "ForceGC",
        "GetFunctionInfo2",
        "GetClassIDInfo2",
        "GetCodeInfo2",
        "GetRuntimeInformation",
        "GetModuleInfo2",
        "InitializeCurrentThread",
        "GetFunctionFromIP2",
        "GetObjectSize2",
        "GetEventMask2",
        "SetEventMask2",
        "SuspendRuntime",
        "ResumeRuntime",
    }
)
#: Written by hand (fakeruntime.cpp): what they record needs more than the generic rules.
CUSTOM_INFO = frozenset(
    {
        "DoStackSnapshot",
        "SetEnterLeaveFunctionHooks",
        "SetEnterLeaveFunctionHooks2",
        "SetEnterLeaveFunctionHooks3",
        "SetEnterLeaveFunctionHooks3WithInfo",
        "SetFunctionIDMapper",
        "SetFunctionIDMapper2",
    }
)
#: IMetaDataImport methods answered for the modules, types and methods the fuzzer invents.
METADATA_ANSWERED = frozenset({"GetScopeProps", "GetModuleFromScope", "GetTypeDefProps", "GetMethodProps"})

#: Callback name (a regular expression over the whole name) -> the COR_PRF_MONITOR bits the runtime needs
#: set before it makes the callback (corprof.idl's COR_PRF_MONITOR documentation). First match wins; a
#: callback no pattern names is always made.
CALLBACK_MASKS: tuple[tuple[str, str], ...] = (
    (r"Initialize|Shutdown|InitializeForAttach|ProfilerAttachComplete|ProfilerDetachSucceeded"
     r"|LoadAsNotificationOnly", "0"),
    (r"AppDomain\w+", "COR_PRF_MONITOR_APPDOMAIN_LOADS"),
    (r"Assembly\w+|GetAssemblyReferences", "COR_PRF_MONITOR_ASSEMBLY_LOADS"),
    (r"Module\w+", "COR_PRF_MONITOR_MODULE_LOADS"),
    (r"Class\w+", "COR_PRF_MONITOR_CLASS_LOADS"),
    (r"FunctionUnloadStarted", "COR_PRF_MONITOR_FUNCTION_UNLOADS"),
    (r"JITCached\w+", "COR_PRF_MONITOR_CACHE_SEARCHES"),
    (r"JIT\w+|DynamicMethod\w+", "COR_PRF_MONITOR_JIT_COMPILATION"),
    (r"Thread\w+", "COR_PRF_MONITOR_THREADS"),
    (r"Remoting\w+", "COR_PRF_MONITOR_REMOTING"),
    (r"\w+ToManagedTransition|\w+ToUnmanagedTransition", "COR_PRF_MONITOR_CODE_TRANSITIONS"),
    (r"Runtime\w+", "COR_PRF_MONITOR_SUSPENDS"),
    (r"ObjectAllocated|ObjectsAllocatedByClass", "COR_PRF_MONITOR_OBJECT_ALLOCATED"),
    (r"ExceptionCLR\w+", "COR_PRF_MONITOR_CLR_EXCEPTIONS"),
    (r"Exception\w+", "COR_PRF_MONITOR_EXCEPTIONS"),
    (r"COMClassic\w+", "COR_PRF_MONITOR_CCW"),
    (r"GarbageCollection\w+|MovedReferences2?|SurvivingReferences2?|ObjectReferences|RootReferences2?"
     r"|FinalizeableObjectQueued|Handle\w+|ConditionalWeakTableElementReferences", "COR_PRF_MONITOR_GC"),
)

#: by-value parameter types ``deliver_scalar`` reads from a JSON integer
_INT_TYPES = frozenset(
    {
        "ULONG", "ULONG32", "DWORD", "UINT", "USHORT", "BOOL", "SIZE_T", "UINT_PTR", "HRESULT",
        "mdToken", "mdTypeDef", "mdMethodDef", "mdFieldDef", "mdModule", "ProcessID", "AssemblyID",
        "AppDomainID", "ModuleID", "ClassID", "ThreadID", "ContextID", "FunctionID", "ObjectID",
        "GCHandleID", "ReJITID", "COR_PRF_FRAME_INFO", "COR_PRF_JIT_CACHE", "COR_PRF_TRANSITION_REASON",
        "COR_PRF_SUSPEND_REASON", "COR_PRF_GC_REASON", "int",
    }
)  # fmt: skip


def mask_of(name: str) -> str:
    for pattern, mask in CALLBACK_MASKS:
        if re.fullmatch(pattern, name):
            return mask
    return "0"


def _deliverable(params: Sequence[api.Param]) -> bool:
    return all(p.type in _INT_TYPES or p.type == "BOOL*" for p in params)


def render() -> str:
    callbacks, infos = family_interfaces(api.CALLBACK), family_interfaces(api.INFO)
    metadata = api.interface("IMetaDataImport")
    cb_methods, info_methods = api.callbacks(), api.info_methods()
    out = [
        generated_by(__name__),
        "// The fake runtime's side of the profiling API: callbacks it can make, the ICorProfilerInfo it",
        "// hands the profiler (every call recorded as the recording proxy records it), IMetaDataImport.",
        "#pragma once",
        "",
        '#include "fakeruntime.h"',
        "",
        "namespace profharness::fake {",
        "",
        f"inline constexpr int kMaxCallbackLevel = {callbacks[-1].version};",
        f"inline constexpr int kMaxInfoLevel = {infos[-1].version};",
        "",
        *method_enum("Cb", cb_methods),
        *method_names("kCbNames", cb_methods),
        *per_method("int", "kCbLevel", cb_methods, lambda m: str(m.version)),
        *per_method("bool", "kCbLazy", cb_methods, lambda m: str(m.name in LAZY_CALLBACKS).lower()),
        *per_method("DWORD", "kCbMask", cb_methods, lambda m: mask_of(m.name)),
        "",
        *iid_switch("callback_iid", api.CALLBACK),
        *iid_switch("info_iid", api.INFO),
        "",
        "// Makes callback `id` when all its parameters are scalars (BOOL* out-flags get a local);",
        "// false when it has others (arrays, GUIDs, interfaces): fakeruntime.cpp makes those by hand.",
        "inline bool deliver_scalar(void* const* levels, int id, const Json& args, HRESULT& hr) {",
        "    switch (static_cast<Cb>(id)) {",
    ]
    for m in cb_methods:
        if not _deliverable(m.params) or m.name in ("Initialize", "Shutdown"):
            continue
        values = []
        locals_ = []
        for k, p in enumerate(m.params):
            if p.type == "BOOL*":
                locals_.append(f"BOOL out{k}_ = 0;")
                values.append(f"&out{k}_")
            else:
                values.append(f'arg_of<{p.type}>(args, "{p.name}")')
        out.append(f"        case Cb::{m.name}: {{")
        out += [f"            {loc}" for loc in locals_]
        target = f"static_cast<{m.interface}*>(levels[{m.version}])"
        out.append(f"            hr = {target}->{m.name}({', '.join(values)});")
        out.append("            return true;")
        out.append("        }")
    out += [
        "        default:",
        "            return false;",
        "    }",
        "}",
        "",
        "// Every ICorProfilerInfo method: recorded (the proxy's rules), answered by answer_<Name>",
        "// or E_NOTIMPL.",
        f"class InfoBase : public {infos[-1].name} {{",
        " public:",
    ]
    out += [f"    HRESULT answer_{m.name}({m.signature});" for m in info_methods if m.name in ANSWERED]
    for m in info_methods:
        if m.name in CUSTOM_INFO:
            continue
        two = str(m.name in TWO_PHASE_INFO).lower()
        out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({m.signature}) override {{")
        out.append(f'        CallScope s_("{m.name}", {two});')
        for p in m.params:
            if recordable(p.type):
                out.append(f'        s_.arg("{p.name}", {p.name});')
            elif m.name not in ANSWERED:
                out.append(f"        (void){p.name};")
        out.append("        s_.begin();")
        if m.name in ANSWERED:
            out.append(f"        HRESULT hr_ = answer_{m.name}({m.arg_names});")
            out += out_values(m)
            out.append("        return s_.finish(hr_);")
        else:
            out.append("        return s_.finish(E_NOTIMPL);")
        out.append("    }")
    out += [
        "};",
        "",
        "// IMetaDataImport for one module: answer_<Name> for the names the fuzzer invents, E_NOTIMPL else.",
        "class MetaDataBase : public IMetaDataImport {",
        " public:",
    ]
    out += [f"    HRESULT answer_{m.name}({m.signature});" for m in metadata.methods
            if m.name in METADATA_ANSWERED]
    for m in metadata.methods:
        unnamed = ", ".join(p.type for p in m.params)
        if m.ret == "void":
            out.append(f"    void STDMETHODCALLTYPE {m.name}({unnamed}) override {{}}")
        elif m.name in METADATA_ANSWERED:
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({m.signature}) override {{")
            out.append(f"        return answer_{m.name}({m.arg_names});")
            out.append("    }")
        else:
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({unnamed}) override {{ return E_NOTIMPL; }}")
    out += ["};", "", "}  // namespace profharness::fake", ""]
    return "\n".join(out)


def outputs() -> dict[Path, str]:
    return {OUTPUT: render()}
