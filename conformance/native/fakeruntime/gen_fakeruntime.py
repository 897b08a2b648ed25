"""Generate the fake runtime's interface classes from tools/interfaces.txt (issue 11).

Writes ``generated.h`` beside this script:

- ``Cb``: every ICorProfilerCallback* method, its name, the callback interface level that declares it,
  whether the recorder keeps it lazily (the proxy's ``LAZY_CALLBACKS``) and the COR_PRF_MONITOR bits the
  profiler must have set for the runtime to make it (:data:`CALLBACK_MASKS`);
- ``deliver_scalar``: calls every callback whose parameters are all by-value scalars (or ``BOOL*``
  out-flags) with its arguments read from a JSON object by the API's parameter names;
- ``InfoBase``: every ICorProfilerInfo* method, recorded through a ``CallScope`` (fakeruntime.h) with the
  proxy's argument and out-value rules (``gen_proxy.py``: the same records, so the validator's reader and
  rules judge both), answered by ``answer_<Name>`` (fakeruntime.cpp) for :data:`ANSWERED` methods and
  ``E_NOTIMPL`` for the rest;
- ``MetaDataBase``: IMetaDataImport, answered by ``answer_<Name>`` for :data:`METADATA_ANSWERED` and
  ``E_NOTIMPL`` otherwise.

Methods in ``CUSTOM_INFO`` are written by hand in fakeruntime.cpp (DoStackSnapshot and the hook setters).

Run: python3 conformance/native/fakeruntime/gen_fakeruntime.py  (a test checks the output is up to date).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
NATIVE = HERE.parent
OUTPUT = HERE / "generated.h"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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

_INT_TYPES = frozenset(
    {
        "ULONG", "ULONG32", "DWORD", "UINT", "USHORT", "BOOL", "SIZE_T", "UINT_PTR", "HRESULT",
        "mdToken", "mdTypeDef", "mdMethodDef", "mdFieldDef", "mdModule", "ProcessID", "AssemblyID",
        "AppDomainID", "ModuleID", "ClassID", "ThreadID", "ContextID", "FunctionID", "ObjectID",
        "GCHandleID", "ReJITID", "COR_PRF_FRAME_INFO", "COR_PRF_JIT_CACHE", "COR_PRF_TRANSITION_REASON",
        "COR_PRF_SUSPEND_REASON", "COR_PRF_GC_REASON", "int",
    }
)


def mask_of(name: str) -> str:
    for pattern, mask in CALLBACK_MASKS:
        if re.fullmatch(pattern, name):
            return mask
    return "0"


def _deliverable(params: list) -> bool:  # type: ignore[type-arg]
    return all(p.type in _INT_TYPES or p.type == "BOOL*" for p in params)


def render() -> str:
    gen = _load(NATIVE / "tools" / "gen_interfaces.py", "_gen_interfaces_for_fake")
    proxy = _load(NATIVE / "proxy" / "gen_proxy.py", "_gen_proxy_for_fake")
    ifaces = gen.parse(gen.TABLE.read_text(), "interfaces.txt")
    callbacks = [i for i in ifaces if re.fullmatch(r"ICorProfilerCallback\d*", i.name)]
    infos = [i for i in ifaces if re.fullmatch(r"ICorProfilerInfo\d*", i.name)]
    metadata = next(i for i in ifaces if i.name == "IMetaDataImport")

    def level(name: str, stem: str) -> int:
        rest = name[len(stem):]
        return int(rest) if rest else 1

    cb_methods = [(level(i.name, "ICorProfilerCallback"), i.name, m) for i in callbacks for m in i.methods]
    info_methods = [(level(i.name, "ICorProfilerInfo"), i.name, m) for i in infos for m in i.methods]
    max_cb = level(callbacks[-1].name, "ICorProfilerCallback")
    max_info = level(infos[-1].name, "ICorProfilerInfo")
    out = [
        "// GENERATED by fakeruntime/gen_fakeruntime.py from tools/interfaces.txt: do not edit by hand.",
        "// The fake runtime's side of the profiling API: callbacks it can make, the ICorProfilerInfo it",
        "// hands the profiler (every call recorded as the recording proxy records it), IMetaDataImport.",
        "#pragma once",
        "",
        '#include "fakeruntime.h"',
        "",
        "namespace profharness::fake {",
        "",
        f"inline constexpr int kMaxCallbackLevel = {max_cb};",
        f"inline constexpr int kMaxInfoLevel = {max_info};",
        "",
        "enum class Cb : int {",
        *(f"    {m.name}," for _, _, m in cb_methods),
        "    Count_",
        "};",
        "inline constexpr const char* kCbNames[] = {",
        *(f'    "{m.name}",' for _, _, m in cb_methods),
        "};",
        "inline constexpr int kCbLevel[] = {",
        *(f"    {lvl},  // {m.name}" for lvl, _, m in cb_methods),
        "};",
        "inline constexpr bool kCbLazy[] = {",
        *(f"    {'true' if m.name in proxy.LAZY_CALLBACKS else 'false'},  // {m.name}"
          for _, _, m in cb_methods),
        "};",
        "inline constexpr DWORD kCbMask[] = {",
        *(f"    {mask_of(m.name)},  // {m.name}" for _, _, m in cb_methods),
        "};",
        "",
        "inline const GUID* callback_iid(int level) {",
        "    switch (level) {",
        *(f"        case {level(i.name, 'ICorProfilerCallback')}: return &IID_{i.name};" for i in callbacks),
        "        default: return nullptr;",
        "    }",
        "}",
        "inline const GUID* info_iid(int level) {",
        "    switch (level) {",
        *(f"        case {level(i.name, 'ICorProfilerInfo')}: return &IID_{i.name};" for i in infos),
        "        default: return nullptr;",
        "    }",
        "}",
        "",
        "// Makes callback `id` when all its parameters are scalars (BOOL* out-flags get a local);",
        "// false when it has others (arrays, GUIDs, interfaces): fakeruntime.cpp makes those by hand.",
        "inline bool deliver_scalar(void* const* levels, int id, const Json& args, HRESULT& hr) {",
        "    switch (static_cast<Cb>(id)) {",
    ]
    for lvl, iname, m in cb_methods:
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
        for loc in locals_:
            out.append(f"            {loc}")
        out.append(f"            hr = static_cast<{iname}*>(levels[{lvl}])->{m.name}({', '.join(values)});")
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
    for _, _, m in info_methods:
        if m.name in ANSWERED:
            out.append(f"    HRESULT answer_{m.name}({gen.signature(m)});")
    for _, _, m in info_methods:
        if m.name in CUSTOM_INFO:
            continue
        two = "true" if m.name in proxy.TWO_PHASE_INFO else "false"
        out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({gen.signature(m)}) override {{")
        out.append(f'        CallScope s_("{m.name}", {two});')
        for p in m.params:
            if proxy._recordable(p.type):
                out.append(f'        s_.arg("{p.name}", {p.name});')
            elif m.name not in ANSWERED:
                out.append(f"        (void){p.name};")
        out.append("        s_.begin();")
        if m.name in ANSWERED:
            names = ", ".join(p.name for p in m.params)
            out.append(f"        HRESULT hr_ = answer_{m.name}({names});")
            for p in m.params:
                if proxy._is_out_scalar(p.type, p.name):
                    out.append(f'        s_.out("{p.name}", {p.name});')
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
    for m in metadata.methods:
        if m.name in METADATA_ANSWERED:
            out.append(f"    HRESULT answer_{m.name}({gen.signature(m)});")
    for m in metadata.methods:
        sig = gen.signature(m)
        if m.ret == "void":
            unnamed = ", ".join(p.type for p in m.params)
            out.append(f"    void STDMETHODCALLTYPE {m.name}({unnamed}) override {{}}")
            continue
        if m.name in METADATA_ANSWERED:
            names = ", ".join(p.name for p in m.params)
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({sig}) override {{")
            out.append(f"        return answer_{m.name}({names});")
            out.append("    }")
        else:
            unnamed = ", ".join(p.type for p in m.params)
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({unnamed}) override {{ return E_NOTIMPL; }}")
    out += ["};", "", "}  // namespace profharness::fake", ""]
    return "\n".join(out)


def main() -> int:
    OUTPUT.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
