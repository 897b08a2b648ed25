"""The enter/leave hooks a profiler registered, given to the hook checker (``profharness check-hook``).

The proxy records every SetEnterLeaveFunctionHooks* call with each hook's address, the module it is in
(``dladdr``: the file and the hook's offset in it, its dynamic symbol when it has one) and its first bytes
(``conformance/native/proxy/objects.cpp``, ``hook_json``). For the hooks of the registrations of
:data:`CHECKED_KINDS` the checker runs on the hook's machine code read from that file (never loaded: the
checker relocates it into unicorn), named by its symbol (the dynamic one the proxy saw, or the
``.symtab``/``.dynsym`` function at that offset). A hook that breaks an ABI rule gives a finding with the
checker's FE2 clause.

The checker (:func:`emu.hookcheck.check_hook`, a layer below the validator) runs in-process, once per
(file, symbol) however many runs registered it.

Checked: SetEnterLeaveFunctionHooks2 (FunctionEnter2/Leave2/Tailcall2, the hooks the FE2 clauses and the
checker describe) and SetEnterLeaveFunctionHooks3 (FunctionEnter3/Leave3/Tailcall3: the checker's System V
reading is a lower bound for them, as the runtime calls them straight from JIT code). Not checked: the
...3WithInfo hooks, which call back into the runtime (GetFunctionEnter3Info) by design, which the checker
counts as leaving the object (FE2-12), and FunctionIDMapper(2), an ordinary callback with no ABI rule of
its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clr_model import api
from clr_model.api import HookKind
from clr_model.events import InfoCall, begins, int_arg
from conformance.validator.recording import Recording
from emu.errors import EmuError
from emu.hookcheck import HookFinding, HookInputError, check_hook

#: the kinds of hook registration the checker runs on (their hooks and parameters: the API table's)
CHECKED_KINDS = (HookKind.FUNCTION_ENTER2, HookKind.FUNCTION_ENTER3)


@dataclass(frozen=True)
class RegisteredHook:
    """One non-NULL hook of a recorded registration call."""

    registration: str
    parameter: str
    index: int  # the call's event in the recording
    address: int
    module: str | None
    offset: int | None
    symbol: str | None


@dataclass(frozen=True)
class HookCheck:
    """The checker's answer for one hook: its faults, or why it could not be checked (``problem``)."""

    module: str
    symbol: str | None
    faults: tuple[HookFinding, ...] = ()
    problem: str | None = None


def registered_hooks(rec: Recording) -> list[RegisteredHook]:
    """Every non-NULL hook of every registration call of :data:`CHECKED_KINDS` in the recording."""
    checked = {r.method: r.parameters for r in api.hook_registrations(CHECKED_KINDS)}
    found: list[RegisteredHook] = []
    for i, ev in enumerate(rec.events):
        if not (isinstance(ev, InfoCall) and ev.name in checked and begins(ev)):
            continue
        for name in checked[ev.name]:
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
                )
            )
    return found


def symbol_at(module: Path, offset: int) -> str | None:
    """The function symbol (``.symtab``, then ``.dynsym``) whose value is ``offset`` in ``module``."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with module.open("rb") as fh:
            elf = ELFFile(fh)
            for section_name in (".symtab", ".dynsym"):
                section = elf.get_section_by_name(section_name)
                if not isinstance(section, SymbolTableSection):
                    continue
                for sym in section.iter_symbols():
                    if (
                        sym.name
                        and sym["st_info"]["type"] == "STT_FUNC"
                        and sym["st_value"] == offset
                        and sym["st_shndx"] != "SHN_UNDEF"
                    ):
                        return str(sym.name)
    except (OSError, ELFError):
        return None
    return None


def fault_line(fault: HookFinding) -> str:
    """One line of a fault: the rule, what, which register (before -> after) and the instruction."""
    parts = [fault.rule, fault.detail]
    if fault.register_name:
        before = "None" if fault.before is None else f"{fault.before:#x}"
        after = "None" if fault.after is None else f"{fault.after:#x}"
        parts.append(f"{fault.register_name} {before} -> {after}")
    if fault.instruction:
        parts.append(f"at {fault.instruction}")
    return ": ".join(p for p in parts if p)


def run_checker(module: Path, symbol: str) -> HookCheck:
    """The hook checker on ``symbol`` of ``module`` (x64 System V reading), in-process."""
    try:
        report = check_hook(module, symbol, "x64")
    except (HookInputError, EmuError) as exc:
        return HookCheck(str(module), symbol, problem=f"the hook checker refused it: {exc}")
    return HookCheck(str(module), symbol, faults=report.findings)


class HookChecks:
    """The checker's answers, one per (module, symbol) or (module, offset), asked once each."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str], HookCheck] = {}

    def check(self, hook: RegisteredHook) -> HookCheck:
        if hook.module is None or hook.offset is None:
            return HookCheck(
                hook.module or "?", None, problem=f"{hook.address:#x} is in no module the proxy could name"
            )
        module = Path(hook.module)
        symbol = hook.symbol or (symbol_at(module, hook.offset) if module.is_file() else None)
        key = (str(module), symbol or f"+{hook.offset:#x}")
        if key not in self._done:
            if not module.is_file():
                self._done[key] = HookCheck(str(module), symbol, problem=f"{module}: no such file to read")
            elif symbol is None:
                self._done[key] = HookCheck(
                    str(module),
                    None,
                    problem=f"no function symbol at {module.name}+{hook.offset:#x} (stripped?)",
                )
            else:
                self._done[key] = run_checker(module, symbol)
        return self._done[key]
