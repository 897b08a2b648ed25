"""The enter/leave hooks a profiler registered, given to the hook checker (``profharness check-hook``).

The proxy records every SetEnterLeaveFunctionHooks* call with each hook's address, the module it is in
(``dladdr``: the file and the hook's offset in it, its dynamic symbol when it has one) and its first bytes
(``conformance/native/proxy/objects.cpp``, ``hook_json``). For the hooks of the registrations of
:data:`CHECKED_KINDS` the checker runs on the hook's machine code read from that file (never loaded: the
checker relocates it into unicorn), named by its symbol (the dynamic one the proxy saw, or the
``.symtab``/``.dynsym`` function at that offset), as the runtime calls a hook of its registration's kind
(the API table's :class:`~clr_model.api.HookKind` -> :data:`clr_model.abi.KIND_OF_REGISTRATION`):

* SetEnterLeaveFunctionHooks2 (FunctionEnter2/Leave2/Tailcall2): ``enter2``;
* SetEnterLeaveFunctionHooks3 (FunctionEnter3/Leave3/Tailcall3, the fast path called straight from JIT
  code): ``fast``;
* SetEnterLeaveFunctionHooks3WithInfo (the slow path: the runtime's stub calls the hook as an ordinary C
  function, which may call libc and GetFunctionEnter3Info): ``slow``, with a COR_PRF_ELT_INFO handle and
  its ICorProfilerInfo calls answered.

A hook that breaks an ABI rule gives a finding with the checker's FE2 clause (:attr:`HookCheck.faults`);
what the runtime does not rely on is a note (:attr:`HookCheck.notes`); a hook none of whose runs could be
emulated (every one reached what the emulator never provides: a pointer only the profiler's Initialize
sets, ...) was not checked (:attr:`HookCheck.problem`, a note, never a finding). Not checked either:
SetEnterLeaveFunctionHooks (.NET Framework 1.x) and FunctionIDMapper(2), an ordinary callback with no ABI
rule of its own.

The checker (:func:`emu.hookcheck.check_hook`, a layer below the validator) runs in-process, once per
(file, symbol, kind) however many runs registered it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clr_model import api
from clr_model.abi import KIND_OF_REGISTRATION, Kind
from clr_model.api import HookKind
from clr_model.events import InfoCall, begins, int_arg
from conformance.core.symbols import symbol_at
from conformance.validator.recording import Recording
from emu.errors import EmuError
from emu.hookcheck import HookFinding, HookInputError, check_hook

#: the kinds of hook registration the checker runs on (their hooks and parameters: the API table's)
CHECKED_KINDS = (HookKind.FUNCTION_ENTER2, HookKind.FUNCTION_ENTER3, HookKind.FUNCTION_ENTER3_WITH_INFO)


@dataclass(frozen=True)
class RegisteredHook:
    """One non-NULL hook of a recorded registration call, with how the runtime calls it (``kind``: the
    checker's, from the registration's kind in the API table)."""

    registration: str
    parameter: str
    index: int  # the call's event in the recording
    address: int
    module: str | None
    offset: int | None
    symbol: str | None
    kind: Kind = "enter2"


@dataclass(frozen=True)
class HookCheck:
    """The checker's answer for one hook: its faults, or why it could not be checked (``problem``: a
    file it cannot read, a symbol it cannot name, no run it could emulate); ``notes``: what the runtime does
    not rely on (never findings); ``not_emulated`` of ``runs``: runs that reached what the emulator never
    provides, the rules judged on the others (``reasons``: why, one line each)."""

    module: str
    symbol: str | None
    faults: tuple[HookFinding, ...] = ()
    problem: str | None = None
    kind: Kind = "enter2"
    notes: tuple[HookFinding, ...] = ()
    runs: int = 0
    not_emulated: int = 0
    reasons: tuple[str, ...] = ()


def registered_hooks(rec: Recording) -> list[RegisteredHook]:
    """Every non-NULL hook of every registration call of :data:`CHECKED_KINDS` in the recording."""
    checked = {r.method: (r.parameters, KIND_OF_REGISTRATION[r.kind])
               for r in api.hook_registrations(CHECKED_KINDS)}
    found: list[RegisteredHook] = []
    for i, ev in enumerate(rec.events):
        if not (isinstance(ev, InfoCall) and ev.name in checked and begins(ev)):
            continue
        parameters, kind = checked[ev.name]
        for name in parameters:
            hook = ev.args.get(name)
            if not isinstance(hook, dict) or not int_arg(hook, "address"):
                continue
            module, symbol = hook.get("module"), hook.get("symbol")
            found.append(
                RegisteredHook(
                    registration=ev.name,
                    parameter=name,
                    index=i,
                    address=int_arg(hook, "address") or 0,
                    module=module if isinstance(module, str) else None,
                    offset=int_arg(hook, "offset"),
                    symbol=symbol if isinstance(symbol, str) else None,
                    kind=kind,
                )
            )
    return found


def fault_line(fault: HookFinding) -> str:
    """One line of a fault (or a note): the rule, what, which register (before -> after) and the
    instruction."""
    parts = [fault.rule, fault.detail]
    if fault.register_name:
        before = "None" if fault.before is None else f"{fault.before:#x}"
        after = "None" if fault.after is None else f"{fault.after:#x}"
        parts.append(f"{fault.register_name} {before} -> {after}")
    if fault.instruction:
        parts.append(f"at {fault.instruction}")
    return ": ".join(p for p in parts if p)


def run_checker(module: Path, symbol: str, kind: Kind = "enter2") -> HookCheck:
    """The hook checker on ``symbol`` of ``module``, a hook of ``kind`` (x64), in-process."""
    try:
        report = check_hook(module, symbol, "x64", kind=kind)
    except (HookInputError, EmuError) as exc:
        return HookCheck(str(module), symbol, problem=f"the hook checker refused it: {exc}", kind=kind)
    reasons = tuple(f"{why.reason} (at {why.instruction}, {why.runs} run(s))" if why.instruction
                    else f"{why.reason} ({why.runs} run(s))" for why in report.not_emulated_reasons)
    problem = None
    if report.emulated == 0:
        problem = (f"none of its {report.runs} runs as a {kind} hook could be emulated: "
                   f"{reasons[0] if reasons else 'no reason recorded'}")
    return HookCheck(str(module), symbol, faults=report.findings, problem=problem, kind=kind,
                     notes=report.notes, runs=report.runs, not_emulated=report.not_emulated, reasons=reasons)


class HookChecks:
    """The checker's answers, one per (module, symbol or offset, kind), asked once each."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str, str], HookCheck] = {}

    def check(self, hook: RegisteredHook) -> HookCheck:
        """The checker's answer for ``hook``, as the runtime calls a hook of ``hook.kind``."""
        if hook.module is None or hook.offset is None:
            return HookCheck(
                hook.module or "?",
                None,
                problem=f"{hook.address:#x} is in no module the proxy could name",
                kind=hook.kind,
            )
        module = Path(hook.module)
        symbol = hook.symbol or (symbol_at(module, hook.offset) if module.is_file() else None)
        key = (str(module), symbol or f"+{hook.offset:#x}", hook.kind)
        if key not in self._done:
            if not module.is_file():
                self._done[key] = HookCheck(
                    str(module), symbol, problem=f"{module}: no such file to read", kind=hook.kind
                )
            elif symbol is None:
                self._done[key] = HookCheck(
                    str(module),
                    None,
                    problem=f"no function symbol at {module.name}+{hook.offset:#x} (stripped?)",
                    kind=hook.kind,
                )
            else:
                self._done[key] = run_checker(module, symbol, hook.kind)
        return self._done[key]
