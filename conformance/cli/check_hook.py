"""``profharness check-hook LIB.so SYMBOL --arch x86|x64 [--kind enter2|fast|slow] [--json]``: an
enter/leave hook under unicorn.

The hook's machine code is taken from the ELF shared object (relocated; the functions it calls inside the
object run too) and run from ``--runs`` random states drawn from ``--seed``, as the runtime calls a hook of
``--kind`` (:mod:`emu.hookcheck.check`): ``enter2`` (default, FunctionEnter2) and ``fast`` (FunctionEnter3,
SetEnterLeaveFunctionHooks3) are called straight from JIT code; ``slow`` (the ...3WithInfo hooks) is an
ordinary C function called by the runtime's stub, whose calls to libc and ICorProfilerInfo are answered.
Every rule it breaks is a finding with its clause (FE2-06 memory, FE2-07/08 registers, FE2-09 stack,
FE2-10 no return within the budget; see :data:`clr_model.function_enter.HOOK_RULES`); what the runtime does
not rely on (the x86 EFLAGS status flags) and a call or jump out of the object from a JIT-called hook
(answered, what it calls not checked: FE2-12) are notes; runs that reached what the emulator never
provided are counted as not emulated.

Exit status: 0 every rule held in every run emulated (notes and runs not emulated included); 1 a rule was
broken (a hook that loops forever or jumps to an address it made up is a finding, not an input error); 2
the input is wrong (no such file, not an ELF object of that architecture, no such symbol, a symbol the
object imports instead of defining), in one line; 3 the checker itself failed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clr_model.abi import KINDS

HELP = "check an enter/leave hook in an ELF shared object under unicorn: every ABI rule it breaks"


def _positive(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("library", type=Path, metavar="LIB.so", help="the shared object holding the hook")
    parser.add_argument("symbol", metavar="SYMBOL", help="the hook's symbol (.symtab or .dynsym)")
    parser.add_argument("--arch", choices=("x86", "x64"), required=True,
                        help="x86: naked __stdcall (FunctionEnter2.md); x64: System V reading")
    parser.add_argument("--kind", choices=KINDS, default="enter2",
                        help="how the runtime calls the hook: enter2 (FunctionEnter2, default) or fast "
                        "(FunctionEnter3) straight from JIT code, slow (the ...3WithInfo hooks) as an "
                        "ordinary C function through the runtime's stub")
    parser.add_argument("--runs", type=_positive, default=None, help="random states to run (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random states (default 0)")
    parser.add_argument("--budget", type=_positive, default=None,
                        help="instructions one run may execute before it counts as never returning")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    from emu.hookcheck import DEFAULT_BUDGET, DEFAULT_RUNS, check_hook, render_text
    from emu.hookcheck.report import report_json

    report = check_hook(args.library, args.symbol, args.arch, kind=args.kind, runs=args.runs or DEFAULT_RUNS,
                        seed=args.seed, budget=args.budget or DEFAULT_BUDGET)
    print(report_json(report) if args.json else render_text(report))
    return 0 if report.ok else 1
