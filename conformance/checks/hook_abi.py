"""FE2 ABI verdicts of the emu layer: the hook checker (:mod:`emu.hookcheck`) on real hooks.

Two columns: "emu x64 hooks" is the checker run (System V reading) on the project's own probe's
FunctionEnter2/Leave2/Tailcall2 hooks (``conformance/native/src/experiments_hooks.cpp``: ``enter2``,
``leave2``, ``tailcall2`` in an anonymous namespace, found by their mangled names in ``.symtab``); "emu x86
hooks" is the checker on the x86 reference hook (``emu/hookcheck/reference_x86.S``, built with
``gcc -m32`` into the harness cache).

Each clause the checker can report on that architecture gets one :class:`Judgement` per column: CONFORMS
when no run of any of the column's hooks broke it, DIVERGES with one stable line per broken rule (no
addresses) otherwise. The clauses judged at the hook's return (FE2-07/08/09) are NOT_APPLICABLE when no run
of any hook returned (every run stopped on an earlier finding): nothing was observed to judge them by.
The x86 column is the suite's hook experiment (:data:`REFERENCE_X86_HOOKS`, its judges registered with
:func:`~conformance.suite.registry.hook_judge`); the x64 column is for the probe's own tests.
"""

from __future__ import annotations

from pathlib import Path

from clr_model.abi import hook_abi
from clr_model.function_enter import HOOK_RULES, abi_clauses
from conformance.core.errors import HarnessError
from conformance.suite.registry import hook_experiment, hook_judge
from conformance.suite.verdicts import HookEvidence, Judgement, Status
from emu.hookcheck import DEFAULT_RUNS, HookReport, check_hook
from emu.hookcheck.build import REFERENCE_X86_SYMBOL, reference_x86_library

__all__ = [
    "PROBE_HOOKS",
    "REFERENCE_X86_HOOKS",
    "X64_COLUMN",
    "X86_COLUMN",
    "hook_abi_judgements",
    "judge_reports",
    "probe_hooks",
    "reference_x86_judgements",
]

#: the matrix columns of the hook checker: the x86 reference hook (the suite's hook experiment) and the
#: probe's own x64 hooks (its tests)
X86_COLUMN = "emu x86 hooks"
X64_COLUMN = "emu x64 hooks"
#: the probe's hooks: what the report calls them -> the prefix of their mangled name (the parameters follow)
PROBE_HOOKS: dict[str, str] = {
    "FunctionEnter2": "_ZN11profharness12_GLOBAL__N_16enter2E",
    "FunctionLeave2": "_ZN11profharness12_GLOBAL__N_16leave2E",
    "FunctionTailcall2": "_ZN11profharness12_GLOBAL__N_19tailcall2E",
}
#: clauses judged from the state at the hook's return
_AT_RETURN = frozenset({"FE2-07", "FE2-08", "FE2-09"})
_SEED = 0


def _clauses(arch: str) -> tuple[str, ...]:
    base = hook_abi(arch).clauses
    extra = sorted({clause for clause, _ in HOOK_RULES.values()} - set(abi_clauses("x86")))
    return (*base, *extra)


def probe_hooks(probe_so: Path) -> dict[str, str]:
    """The probe's hook symbols, FunctionEnter2/Leave2/Tailcall2 -> symbol, from its ``.symtab``."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with probe_so.open("rb") as fh:
            symtab = ELFFile(fh).get_section_by_name(".symtab")
            names = [s.name for s in symtab.iter_symbols()] if isinstance(symtab, SymbolTableSection) else []
    except (OSError, ELFError) as exc:
        raise HarnessError(f"{probe_so}: cannot read the probe's symbols: {exc}") from None
    found: dict[str, str] = {}
    for hook, prefix in PROBE_HOOKS.items():
        matches = sorted(n for n in names if n.startswith(prefix) and "." not in n)
        if not matches:
            raise HarnessError(f"{probe_so}: no symbol {prefix}... for the probe's {hook} hook (stripped?)")
        found[hook] = matches[0]
    return found


def judge_reports(reports: dict[str, HookReport], arch: str) -> list[tuple[str, Judgement]]:
    """One judgement per clause the checker reports on ``arch``, over the reports of one column."""
    out: list[tuple[str, Judgement]] = []
    returned = sum(r.returned for r in reports.values())
    runs = sum(r.runs for r in reports.values())
    names = ", ".join(reports)
    for clause in _clauses(arch):
        lines = sorted({f"{hook}: {f.line}" for hook, r in reports.items() for f in r.findings
                        if f.clause == clause})
        rules = sorted({text for c, text in HOOK_RULES.values() if c == clause})
        expected = f"{names} keep {clause} ({'; '.join(rules)} never seen)"
        if lines:
            observed = f"{len(lines)} rule(s) broken over {runs} runs: {lines[0]}"
            out.append((clause, Judgement(status=Status.DIVERGES, expected=expected, observed=observed,
                                          disagreements=tuple(lines))))
        elif clause in _AT_RETURN and returned == 0:
            out.append((clause, Judgement(status=Status.NOT_APPLICABLE, expected=expected,
                                          observed=f"none of {runs} runs returned: nothing to judge "
                                          f"{clause} by")))
        else:
            out.append((clause, Judgement(status=Status.CONFORMS, expected=expected,
                                          observed=f"kept over {runs} runs ({returned} returned)")))
    return out


REFERENCE_X86_HOOKS = hook_experiment("hookcheck:reference_enter2", column=X86_COLUMN,
                                      library=reference_x86_library, symbol=REFERENCE_X86_SYMBOL, arch="x86")
#: the clauses the reference column judges: those the checker reports on x86 and a reference hook shows
#: (FE2-10/12 need a hook that loops or calls out, which the reference hook by design never does)
REFERENCE_X86_CLAUSES = ("FE2-06", "FE2-07", "FE2-08", "FE2-09")


def _reference_judge(clause: str) -> None:
    def judge_clause(ev: HookEvidence) -> Judgement:
        return dict(judge_reports({REFERENCE_X86_SYMBOL: ev.report}, "x86"))[clause]

    name = f"judge_{clause.replace('-', '').lower()}_reference_x86"
    judge_clause.__qualname__ = judge_clause.__name__ = name
    what = "the hook checker on the x86 reference hook"
    hook_judge(clause, REFERENCE_X86_HOOKS, what=what)(judge_clause)


for _clause in REFERENCE_X86_CLAUSES:
    _reference_judge(_clause)


def reference_x86_judgements() -> list[tuple[str, Judgement]]:
    """The x86 column alone: the reference hook under the checker, for its clauses (FE2-06..09)."""
    _, report = REFERENCE_X86_HOOKS.build().run()
    return [(j.clause, j.judge(HookEvidence(report))) for j in REFERENCE_X86_HOOKS.judges]


def hook_abi_judgements(probe_so: Path) -> list[tuple[str, str, Judgement]]:
    """(clause, column, judgement): the probe's x64 hooks and the x86 reference hook under the checker."""
    x64 = {hook: check_hook(probe_so, symbol, "x64", runs=DEFAULT_RUNS, seed=_SEED)
           for hook, symbol in probe_hooks(probe_so).items()}
    _, x86 = REFERENCE_X86_HOOKS.build().run()
    return ([(c, X64_COLUMN, j) for c, j in judge_reports(x64, "x64")]
            + [(c, X86_COLUMN, j) for c, j in judge_reports({REFERENCE_X86_SYMBOL: x86}, "x86")])
