"""The recording proxy's forwarding classes (``proxy/generated.h``), from the API table:

- ``ProxyCb``: every ICorProfilerCallback* method, its name and whether it is lazy (high-volume: counted
  always, recorded only when the profiler calls the runtime inside it);
- ``InfoM``: every ICorProfilerInfo* method and its name;
- ``Hook``: every hook the proxy wraps (its counter and the name of its frame: the hook's type), those of
  :data:`WRAPPED_HOOK_KINDS`, the fast path's last (``kFirstFastHook``: hooks3.cpp's trampolines);
- ``kProxyCbMonitor``: the COR_PRF_MONITOR flag each callback needs (the table's ``monitor=``; 0 for none):
  the proxy hides a callback only the event-mask bits it added itself enable (proxy.cpp ``profiler_asked``);
- ``CallbackForwarderBase``: every callback method forwarded to the third-party profiler's interface of its
  version, through a ``CallbackScope`` (proxy.h) that records it, or hidden (counted, not forwarded) when
  the profiler did not ask for it;
- ``InfoRecorderBase``: every ICorProfilerInfo method forwarded to the runtime's interface of its version,
  through an ``InfoScope`` that records its arguments, its scalar out-values, its HRESULT and its caller (the
  return address into the profiler); an ``inspects`` method's ObjectID is judged against the shadow heap
  first (``InfoScope::inspect``), a COR_PRF_FRAME_INFO argument against the hooks and walk callbacks open on
  the thread (``InfoScope::frame_info``, FE2-05).

Methods the table marks ``proxy-by-hand`` are left out: the hand-written classes in objects.cpp implement
them (the compiler refuses to instantiate a class that forgot one). ``lazy`` callbacks and ``two-phase``
Info methods are the table's facts too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from clr_model import api
from clr_model.api import Fact, HookKind
from conformance.codegen import (
    NATIVE_DIR,
    family_interfaces,
    generated_by,
    header_opening,
    iid_switch,
    max_levels,
    method_enum,
    method_names,
    out_values,
    per_method,
    recordable,
)

OUTPUT = NATIVE_DIR / "proxy" / "generated.h"
#: The hook registrations whose hooks the proxy wraps, in counter order: FunctionEnter2-style and slow-path
#: hooks by C++ wrappers (objects.cpp), then the fast path's by hooks3.cpp's trampolines, which index their
#: kinds from ``kFirstFastHook``. (The .NET Framework 1.x hooks and the mappers are not counted hooks.)
WRAPPED_HOOK_KINDS = (HookKind.FUNCTION_ENTER2, HookKind.FUNCTION_ENTER3_WITH_INFO, HookKind.FUNCTION_ENTER3)


def hook_kinds() -> list[str]:
    """``enum class Hook``, ``kHookNames`` and ``kFirstFastHook`` (see :data:`WRAPPED_HOOK_KINDS`)."""
    hooks = [h for kind in WRAPPED_HOOK_KINDS for h in api.hooks_of([kind])]
    fast = api.hooks_of([HookKind.FUNCTION_ENTER3])
    return [
        "// The hooks the proxy wraps, named by their types (a hook's frame has its name): C++ wrappers,",
        "// then the fast path's, which hooks3.cpp's trampolines wrap (their kind k is kFirstFastHook + k).",
        "enum class Hook : int {",
        *(f"    {h}," for h in hooks),
        "    Count_",
        "};",
        "inline constexpr const char* kHookNames[] = {",
        *(f'    "{h}",' for h in hooks),
        "};",
        f"inline constexpr int kFirstFastHook = static_cast<int>(Hook::{fast[0]});",
    ]


def _forwarding(
    m: api.Method,
    scope: str,
    table: str,
    absent: str,
    *,
    read_back: bool,
    before: tuple[str, ...] = (),
    after: tuple[str, ...] = (),
) -> list[str]:
    """A generated method: ``scope`` records its arguments, then the call goes on to ``table[version]``
    (``absent``: what it returns when that interface is missing), its scalar out-values read back
    (``read_back``) before the scope records its HRESULT. ``before``: statements after the arguments;
    ``after``: after the out-values are read back (``hr_`` the call's HRESULT)."""
    target = f"static_cast<{m.interface}*>({table}[{m.version}])"
    lines = [
        f"    HRESULT STDMETHODCALLTYPE {m.name}({m.signature}) override {{",
        f"        {scope}",
        *(f'        s_.arg("{p.name}", {p.name});' for p in m.params if recordable(p.type)),
        *(f"        {line}" for line in before),
        "        s_.begin();",
        f"        if (!{table}[{m.version}]) return s_.finish({absent});",
    ]
    if read_back:
        lines += [
            f"        HRESULT hr_ = {target}->{m.name}({m.arg_names});",
            *out_values(m),
            *(f"        {line}" for line in after),
            "        return s_.finish(hr_);",
        ]
    else:
        lines.append(f"        return s_.finish({target}->{m.name}({m.arg_names}));")
    return [*lines, "    }"]


def _object_id(m: api.Method) -> str:
    """The ObjectID parameter an ``inspects`` method reads the object of."""
    (param,) = [p for p in m.params if p.type == "ObjectID"]
    return param.name


def _before_begin(m: api.Method) -> tuple[str, ...]:
    """What an ICorProfilerInfo method's scope judges before the call: an ``inspects`` method's ObjectID
    (against the shadow heap), every COR_PRF_FRAME_INFO argument (open, or a returned FunctionEnter2's)."""
    inspect = (f"s_.inspect({_object_id(m)});",) if m.has(Fact.INSPECTS) else ()
    return inspect + tuple(f"s_.frame_info({p.name});" for p in m.params if p.type == "COR_PRF_FRAME_INFO")


def _after_call(m: api.Method) -> tuple[str, ...]:
    """What an ICorProfilerInfo method's scope notes after the call: a COR_PRF_FRAME_INFO out-value (the
    GetFunction*3Info methods) is handed out afresh, no longer a returned hook's or walk callback's, and
    inside a WithInfo hook it is that hook's (FE3-01..03) for the call's FunctionID."""
    out = [p.name for p in m.params if p.type == "COR_PRF_FRAME_INFO*"]
    if not out:
        return ()
    (function,) = [p.name for p in m.params if p.type == "FunctionID"]
    return tuple(f"s_.frame_info_given({name}, {function}, hr_);" for name in out)


def render() -> str:
    cb_methods, info_methods = api.callbacks(), api.info_methods()
    about = [
        "The recording proxy's forwarding: every callback to the profiler behind it, every",
        "ICorProfilerInfo",
        "method to the runtime, each through a scope (proxy.h) that records it.",
    ]
    out = [
        *header_opening(
            generated_by(__name__),
            about,
            ["<cstdint>", "", '"profharness/flags.h"', '"proxy.h"'],
            "profharness::proxy",
        ),
        *max_levels(),
        "",
        *method_enum("ProxyCb", cb_methods),
        *method_names("kProxyCbNames", cb_methods),
        *per_method("bool", "kProxyCbLazy", cb_methods, lambda m: str(m.has(Fact.LAZY)).lower()),
        *per_method("std::uint32_t", "kProxyCbMonitor", cb_methods, lambda m: m.monitor or "0"),
        "",
        *method_enum("InfoM", info_methods),
        *method_names("kInfoNames", info_methods),
        "",
        *hook_kinds(),
        "",
        *iid_switch("callback_iid", api.CALLBACK),
        *iid_switch("info_iid", api.INFO),
        "",
    ]
    out += _forwarder_class(
        "Every callback method: forwarded to the third-party profiler's interface of its level.",
        "CallbackForwarderBase",
        api.CALLBACK,
        cb_methods,
        ("target_", "the profiler's CallbackK, or null"),
        "S_OK",
        lambda m: (
            f"CallbackScope s_(static_cast<int>(ProxyCb::{m.name}), {m.version}, "
            f"target_[{m.version}] != nullptr);\n        if (s_.hidden()) return s_.hide();"
        ),
    )
    out += _forwarder_class(
        "Every ICorProfilerInfo method: recorded, then forwarded to the runtime's interface of its level.",
        "InfoRecorderBase",
        api.INFO,
        info_methods,
        ("real_", "real_[k]: the runtime's ICorProfilerInfoK, or null"),
        "E_NOINTERFACE",
        lambda m: (
            f"InfoScope s_(static_cast<int>(InfoM::{m.name}), {str(m.has(Fact.TWO_PHASE)).lower()}, "
            "__builtin_return_address(0));"
        ),
        read_back=True,
        before=_before_begin,
        after=_after_call,
    )
    out += ["}  // namespace profharness::proxy", ""]
    return "\n".join(out)


def _forwarder_class(
    about: str,
    name: str,
    family: str,
    methods: Sequence[api.Method],
    table: tuple[str, str],
    absent: str,
    scope: Callable[[api.Method], str],
    *,
    read_back: bool = False,
    before: Callable[[api.Method], tuple[str, ...]] = lambda m: (),
    after: Callable[[api.Method], tuple[str, ...]] = lambda m: (),
) -> list[str]:
    """Class ``name``: it implements the newest interface of ``family`` and holds ``table`` (its name, and
    what its entry k is: the interface of version k, or null); every method of ``methods`` not written by
    hand is :func:`_forwarding` through it, recorded by ``scope(m)``, ``before(m)`` after its arguments,
    ``after(m)`` after the call."""
    newest = family_interfaces(family)[-1]
    lines = [
        f"// {about}",
        f"class {name} : public {newest.name} {{",
        " protected:",
        f"    void* {table[0]}[{newest.version + 1}] = {{}};  // {table[1]}",
        " public:",
    ]
    for m in methods:
        if not m.has(Fact.PROXY_BY_HAND):
            lines += _forwarding(
                m, scope(m), table[0], absent, read_back=read_back, before=before(m), after=after(m)
            )
    return [*lines, "};", ""]


def outputs() -> dict[Path, str]:
    return {OUTPUT: render()}
