"""The fake runtime's interface classes (``fakeruntime/generated.h``, issue 11), from the API table:

- ``Cb``: every ICorProfilerCallback* method, its name, the callback interface version that declares it,
  whether the recorder keeps it lazily (the table's ``lazy``, as the proxy does) and the COR_PRF_MONITOR bits
  the profiler must have set for the runtime to make it (the table's ``monitor=``; 0: always made);
- ``deliver_scalar``: calls every callback whose parameters are all by-value scalars (or ``BOOL*``
  out-flags) with its arguments read from a JSON object by the API's parameter names;
- ``InfoBase``: every ICorProfilerInfo* method, recorded through a ``CallScope`` (fakeruntime.h) with the
  proxy's argument and out-value rules (the same records, so the validator's reader and rules judge both),
  answered by ``answer_<Name>`` (fakeruntime.cpp) for the methods the table marks ``fake-answers`` and
  ``E_NOTIMPL`` for the rest;
- ``MetaDataBase``: IMetaDataImport, answered by ``answer_<Name>`` for its ``fake-answers`` methods and
  ``E_NOTIMPL`` otherwise.

Methods the table marks ``fake-by-hand`` are written by hand in fakeruntime.cpp (Initialize and Shutdown,
DoStackSnapshot and the hook setters).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import conformance.codegen as gen
from clr_model import api
from clr_model.api import Fact

OUTPUT = gen.NATIVE_DIR / "fakeruntime" / "generated.h"

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


def _deliverable(params: Sequence[api.Param]) -> bool:
    return all(p.type in _INT_TYPES or p.type == "BOOL*" for p in params)


def render() -> str:
    infos = gen.family_interfaces(api.INFO)
    metadata = api.interface("IMetaDataImport")
    cb_methods, info_methods = api.callbacks(), api.info_methods()
    about = [
        "The fake runtime's side of the profiling API: callbacks it can make, the ICorProfilerInfo it",
        "hands the profiler (every call recorded as the recording proxy records it), IMetaDataImport.",
    ]
    out = [
        *gen.header_opening(gen.generated_by(__name__), about, ['"fakeruntime.h"'], "profharness::fake"),
        *gen.max_levels(),
        "",
        *gen.method_enum("Cb", cb_methods),
        *gen.method_names("kCbNames", cb_methods),
        *gen.per_method("int", "kCbLevel", cb_methods, lambda m: str(m.version)),
        *gen.per_method("bool", "kCbLazy", cb_methods, lambda m: str(m.has(Fact.LAZY)).lower()),
        *gen.per_method("DWORD", "kCbMask", cb_methods, lambda m: m.monitor or "0"),
        "",
        *gen.iid_switch("callback_iid", api.CALLBACK),
        *gen.iid_switch("info_iid", api.INFO),
        "",
        "// Makes callback `id` when all its parameters are scalars (BOOL* out-flags get a local);",
        "// false when it has others (arrays, GUIDs, interfaces): fakeruntime.cpp makes those by hand.",
        "inline bool deliver_scalar(void* const* levels, int id, const Json& args, HRESULT& hr) {",
        "    switch (static_cast<Cb>(id)) {",
    ]
    for m in cb_methods:
        if not _deliverable(m.params) or m.has(Fact.FAKE_BY_HAND):
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
        "// or E_NOTIMPL (behaviour: answer.not-implemented).",
        f"class InfoBase : public {infos[-1].name} {{",
        " public:",
    ]
    out += [f"    HRESULT answer_{m.name}({m.signature});" for m in info_methods if m.has(Fact.FAKE_ANSWERS)]
    for m in info_methods:
        if m.has(Fact.FAKE_BY_HAND):
            continue
        two = str(m.has(Fact.TWO_PHASE)).lower()
        out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({m.signature}) override {{")
        out.append(f'        CallScope s_("{m.name}", {two});')
        out.append("        s_.caller(__builtin_return_address(0));")
        for p in m.params:
            if gen.recordable(p.type):
                out.append(f'        s_.arg("{p.name}", {p.name});')
            elif not m.has(Fact.FAKE_ANSWERS):
                out.append(f"        (void){p.name};")
        out.append("        s_.begin();")
        if m.has(Fact.FAKE_ANSWERS):
            out.append(f"        HRESULT hr_ = answer_{m.name}({m.arg_names});")
            out += gen.out_values(m)
            out.append("        return s_.finish(hr_);")
        else:
            out.append("        return s_.finish(E_NOTIMPL);")
        out.append("    }")
    out += [
        "};",
        "",
        "// IMetaDataImport for one module: answer_<Name> for the names the fuzzer invents, E_NOTIMPL else",
        "// (behaviour: answer.not-implemented).",
        "class MetaDataBase : public IMetaDataImport {",
        " public:",
    ]
    out += [f"    HRESULT answer_{m.name}({m.signature});" for m in metadata.methods
            if m.has(Fact.FAKE_ANSWERS)]
    for m in metadata.methods:
        unnamed = ", ".join(p.type for p in m.params)
        if m.ret == "void":
            out.append(f"    void STDMETHODCALLTYPE {m.name}({unnamed}) override {{}}")
        elif m.has(Fact.FAKE_ANSWERS):
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({m.signature}) override {{")
            out.append(f"        return answer_{m.name}({m.arg_names});")
            out.append("    }")
        elif m.ret == "HRESULT":
            out.append(f"    HRESULT STDMETHODCALLTYPE {m.name}({unnamed}) override {{ return E_NOTIMPL; }}")
        else:  # IsValidToken's BOOL: no token is one the fake knows
            out.append(f"    {m.ret} STDMETHODCALLTYPE {m.name}({unnamed}) override {{ return {{}}; }}")
    out += ["};", "", "}  // namespace profharness::fake", ""]
    return "\n".join(out)


def outputs() -> dict[Path, str]:
    return {OUTPUT: render()}
