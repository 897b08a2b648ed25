"""The enter/leave hooks a profiler registered, given to the hook checker (``profharness check-hook``).

The proxy records every SetEnterLeaveFunctionHooks* call with each hook's address, the module it is in
(``dladdr``: the file and the hook's offset in it, its dynamic symbol when it has one) and its first bytes
(``conformance/native/proxy/objects.cpp``, ``hook_json``). For the hooks of the registrations of
:data:`CHECKED_KINDS` the checker runs on the hook's machine code read from that file (never loaded: the
checker relocates it into unicorn), named by its symbol (the dynamic one the proxy saw, or the
``.symtab``/``.dynsym`` function at that offset). A hook that breaks an ABI rule gives a finding with the
checker's FE2 clause.

The checker lives in :mod:`emu`, which the validator does not import (tests/test_layout.py): it runs as a
child process (``profharness check-hook LIB SYMBOL --arch x64 --json``), once per (file, symbol) however
many runs registered it.

Checked: the FunctionEnter2-style hooks (SetEnterLeaveFunctionHooks2: FunctionEnter2/Leave2/Tailcall2, the
hooks the FE2 clauses and the checker describe) and the fast path's (SetEnterLeaveFunctionHooks3:
FunctionEnter3/Leave3/Tailcall3: the checker's System V reading is a lower bound for them, as the runtime
calls them straight from JIT code). Not checked: the slow path's ...3WithInfo hooks, which call back into
the runtime (GetFunctionEnter3Info) by design, which the checker counts as leaving the object (FE2-12), and
FunctionIDMapper(2), an ordinary callback with no ABI rule of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from clr_model import api
from clr_model.api import HookKind
from clr_model.events import InfoCall, begins, int_arg
from conformance.core.errors import HarnessError
from conformance.validator.recording import Recording

#: the kinds of hook registration the checker runs on (their hooks and parameters: the API table's)
CHECKED_KINDS = (HookKind.FUNCTION_ENTER2, HookKind.FUNCTION_ENTER3)
#: seconds one check may take (100 random states of a small hook take about a second)
CHECK_TIMEOUT_S = 120.0
_CHECK = "import sys; from conformance.cli import main; sys.exit(main(sys.argv[1:]))"


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
class HookFault:
    """A rule the checker found broken: its clause and one line (what, which register or access, where)."""

    clause: str
    line: str


@dataclass(frozen=True)
class HookCheck:
    """The checker's answer for one hook: its faults, or why it could not be checked (``problem``)."""

    module: str
    symbol: str | None
    faults: tuple[HookFault, ...] = ()
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


def _fault_line(item: dict[str, object]) -> str:
    parts = [str(item.get("rule", "?")), str(item.get("detail", ""))]
    register = item.get("register")
    if register:
        parts.append(f"{register} {item.get('before')} -> {item.get('after')}")
    if item.get("instruction"):
        parts.append(f"at {item['instruction']}")
    return ": ".join(p for p in parts if p)


def run_checker(module: Path, symbol: str) -> HookCheck:
    """``profharness check-hook MODULE SYMBOL --arch x64 --json`` in a child process, its report read."""
    cmd = [sys.executable, "-c", _CHECK, "check-hook", str(module), symbol, "--arch", "x64", "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return HookCheck(str(module), symbol, problem=f"the hook checker ran over {CHECK_TIMEOUT_S:.0f} s")
    if done.returncode not in (0, 1):
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return HookCheck(str(module), symbol, problem=f"the hook checker refused it: {why}")
    try:
        report = json.loads(done.stdout)
        items = report["findings"]
        faults = tuple(HookFault(str(f["clause"]), _fault_line(f)) for f in items)
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"check-hook {module} {symbol}: unreadable report ({exc})") from None
    return HookCheck(str(module), symbol, faults=faults)


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
