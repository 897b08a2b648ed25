"""Generate the recording proxy's forwarding classes from tools/interfaces.txt.

Writes ``generated.h`` beside this script:

- ``ProxyCb``: every ICorProfilerCallback* method, its name and the callback interface level (1..11)
  that declares it;
- ``InfoM``: every ICorProfilerInfo* method, its name and its Info level (1..N);
- ``CallbackForwarderBase``: every callback method forwarded to the third-party profiler's interface of
  that level, through a ``CallbackScope`` (proxy.h) that records it;
- ``InfoRecorderBase``: every ICorProfilerInfo method forwarded to the runtime's interface of that level,
  through an ``InfoScope`` that records its arguments, its scalar out-values and its HRESULT.

Methods in ``CUSTOM_CALLBACKS`` / ``CUSTOM_INFO`` are left out: the hand-written classes in proxy.cpp
implement them (the compiler refuses to instantiate a class that forgot one).

Run: python3 conformance/native/proxy/gen_proxy.py  (a test checks the output is up to date).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent / "tools"
OUTPUT = HERE / "generated.h"

#: Callbacks the proxy implements by hand (Initialize hands over the Info wrapper, ...).
CUSTOM_CALLBACKS = frozenset(
    {"Initialize", "InitializeForAttach", "Shutdown", "MovedReferences", "MovedReferences2"}
)
#: Info methods the proxy implements by hand (callbacks and hooks it wraps, enumerators it tracks).
CUSTOM_INFO = frozenset(
    {
        "DoStackSnapshot",
        "SetEnterLeaveFunctionHooks",
        "SetEnterLeaveFunctionHooks2",
        "SetEnterLeaveFunctionHooks3",
        "SetEnterLeaveFunctionHooks3WithInfo",
        "SetFunctionIDMapper",
        "SetFunctionIDMapper2",
        "EnumThreads",
    }
)
#: Info methods recorded at entry and at return (another thread's records, or callbacks, may come
#: between): calls that block, trigger a GC or call back.
TWO_PHASE_INFO = frozenset(
    {
        "ForceGC",
        "SuspendRuntime",
        "ResumeRuntime",
        "RequestReJIT",
        "RequestRevert",
        "RequestReJITWithInliners",
        "EnumerateObjectReferences",
        "RequestProfilerDetach",
    }
)
#: High-volume callbacks: counted always, recorded only when the profiler calls the runtime inside them.
LAZY_CALLBACKS = frozenset(
    {
        "ObjectAllocated",
        "ObjectReferences",
        "RootReferences",
        "RootReferences2",
        "ObjectsAllocatedByClass",
        "SurvivingReferences",
        "SurvivingReferences2",
        "UnmanagedToManagedTransition",
        "ManagedToUnmanagedTransition",
        "ExceptionSearchFunctionEnter",
        "ExceptionSearchFunctionLeave",
        "ExceptionSearchFilterEnter",
        "ExceptionSearchFilterLeave",
        "ExceptionUnwindFunctionEnter",
        "ExceptionUnwindFunctionLeave",
        "ExceptionUnwindFinallyEnter",
        "ExceptionUnwindFinallyLeave",
        "ExceptionOSHandlerEnter",
        "ExceptionOSHandlerLeave",
        "ClassLoadStarted",
        "ClassLoadFinished",
        "JITCompilationStarted",
        "JITCompilationFinished",
        "JITInlining",
        "JITCachedFunctionSearchStarted",
        "JITCachedFunctionSearchFinished",
        "HandleCreated",
        "HandleDestroyed",
        "ConditionalWeakTableElementReferences",
        "EventPipeEventDelivered",
        "RuntimeThreadSuspended",
        "RuntimeThreadResumed",
        "FinalizeableObjectQueued",
        "ModuleAttachedToAssembly",
    }
)
#: Scalar types an out-parameter points to that the proxy reads back after the call.
SCALARS = frozenset(
    {
        "ULONG",
        "ULONG32",
        "DWORD",
        "UINT",
        "USHORT",
        "BOOL",
        "SIZE_T",
        "UINT_PTR",
        "HANDLE",
        "mdToken",
        "mdTypeDef",
        "mdMethodDef",
        "mdFieldDef",
        "mdModule",
        "ProcessID",
        "AssemblyID",
        "AppDomainID",
        "ModuleID",
        "ClassID",
        "ThreadID",
        "ContextID",
        "FunctionID",
        "ObjectID",
        "GCHandleID",
        "ReJITID",
        "COR_PRF_FRAME_INFO",
        "EVENTPIPE_PROVIDER",
        "CorElementType",
        "COR_PRF_RUNTIME_TYPE",
        "COR_PRF_STATIC_TYPE",
        "LPCBYTE",
        "std::uint64_t",
        "void*",
        "BYTE*",
    }
)
_OUT_NAME = re.compile(r"^p[a-zA-Z]")


def _load_interfaces() -> ModuleType:
    path = TOOLS / "gen_interfaces.py"
    spec = importlib.util.spec_from_file_location("_gen_interfaces_for_proxy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _is_out_scalar(ptype: str, name: str) -> bool:
    t = ptype.strip()
    if not t.endswith("*") or t.startswith("const ") or not _OUT_NAME.match(name):
        return False
    return t[:-1].strip() in SCALARS


def _recordable(ptype: str) -> bool:
    """A by-value parameter the scope can record (structs passed by value are not)."""
    return not ptype.startswith("struct ") or ptype.endswith("*")


def render() -> str:
    gen = _load_interfaces()
    ifaces = gen.parse(gen.TABLE.read_text(), str(gen.TABLE))
    callbacks = [i for i in ifaces if re.fullmatch(r"ICorProfilerCallback\d*", i.name)]
    infos = [i for i in ifaces if re.fullmatch(r"ICorProfilerInfo\d*", i.name)]

    def level(name: str, stem: str) -> int:
        rest = name[len(stem) :]
        return int(rest) if rest else 1

    cb_methods = [(level(i.name, "ICorProfilerCallback"), i.name, m) for i in callbacks for m in i.methods]
    info_methods = [(level(i.name, "ICorProfilerInfo"), i.name, m) for i in infos for m in i.methods]
    last_cb, last_info = callbacks[-1].name, infos[-1].name
    max_cb = level(last_cb, "ICorProfilerCallback")
    max_info = level(last_info, "ICorProfilerInfo")
    out = [
        "// GENERATED by proxy/gen_proxy.py from tools/interfaces.txt: do not edit by hand.",
        "// The recording proxy's forwarding: every callback to the profiler behind it, every",
        "// ICorProfilerInfo",
        "// method to the runtime, each through a scope (proxy.h) that records it.",
        "#pragma once",
        "",
        '#include "proxy.h"',
        "",
        "namespace profharness::proxy {",
        "",
        f"inline constexpr int kMaxCallbackLevel = {max_cb};",
        f"inline constexpr int kMaxInfoLevel = {max_info};",
        "",
        "enum class ProxyCb : int {",
        *(f"    {m.name}," for _, _, m in cb_methods),
        "    Count_",
        "};",
        "inline constexpr const char* kProxyCbNames[] = {",
        *(f'    "{m.name}",' for _, _, m in cb_methods),
        "};",
        "inline constexpr bool kProxyCbLazy[] = {",
        *(f"    {'true' if m.name in LAZY_CALLBACKS else 'false'},  // {m.name}" for _, _, m in cb_methods),
        "};",
        "",
        "enum class InfoM : int {",
        *(f"    {m.name}," for _, _, m in info_methods),
        "    Count_",
        "};",
        "inline constexpr const char* kInfoNames[] = {",
        *(f'    "{m.name}",' for _, _, m in info_methods),
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
        "// Every callback method: forwarded to the third-party profiler's interface of its level.",
        f"class CallbackForwarderBase : public {last_cb} {{",
        " protected:",
        f"    void* target_[{max_cb + 1}] = {{}};  // the profiler's CallbackK, or null",
        " public:",
    ]
    for lvl, iname, m in cb_methods:
        if m.name in CUSTOM_CALLBACKS:
            continue
        sig = gen.signature(m)
        names = ", ".join(p.name for p in m.params)
        out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({sig}) override {{")
        out.append(
            f"        CallbackScope s_(static_cast<int>(ProxyCb::{m.name}), {lvl}, "
            f"target_[{lvl}] != nullptr);"
        )
        for p in m.params:
            if _recordable(p.type):
                out.append(f'        s_.arg("{p.name}", {p.name});')
        out.append("        s_.begin();")
        out.append(f"        if (!target_[{lvl}]) return s_.finish(S_OK);")
        out.append(f"        return s_.finish(static_cast<{iname}*>(target_[{lvl}])->{m.name}({names}));")
        out.append("    }")
    out += [
        "};",
        "",
        "// Every ICorProfilerInfo method: recorded, then forwarded to the runtime's interface of its level.",
        f"class InfoRecorderBase : public {last_info} {{",
        " protected:",
        f"    void* real_[{max_info + 1}] = {{}};  // real_[k]: the runtime's ICorProfilerInfoK, or null",
        " public:",
    ]
    for lvl, iname, m in info_methods:
        if m.name in CUSTOM_INFO:
            continue
        sig = gen.signature(m)
        names = ", ".join(p.name for p in m.params)
        two = "true" if m.name in TWO_PHASE_INFO else "false"
        out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({sig}) override {{")
        out.append(f"        InfoScope s_(static_cast<int>(InfoM::{m.name}), {two});")
        for p in m.params:
            if _recordable(p.type):
                out.append(f'        s_.arg("{p.name}", {p.name});')
        out.append("        s_.begin();")
        out.append(f"        if (!real_[{lvl}]) return s_.finish(E_NOINTERFACE);")
        out.append(f"        HRESULT hr_ = static_cast<{iname}*>(real_[{lvl}])->{m.name}({names});")
        for p in m.params:
            if _is_out_scalar(p.type, p.name):
                out.append(f'        s_.out("{p.name}", {p.name});')
        out.append("        return s_.finish(hr_);")
        out.append("    }")
    out += ["};", "", "}  // namespace profharness::proxy", ""]
    return "\n".join(out)


def main() -> int:
    OUTPUT.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
