"""The hook checker: an enter/leave hook's machine code from an ELF shared object, run under unicorn from
many randomised states as the runtime calls a hook of its kind (enter2, fast, slow: clr_model.abi.KINDS),
every broken rule reported with its clause (FunctionEnter2.md, FE2-06..12), what the runtime does not rely
on as a note, and the runs it could not emulate counted with their reasons (never findings).

- :mod:`emu.hookcheck.loader`: the object's segments, relocations, symbols and trap addresses
- :mod:`emu.hookcheck.check`: the runs, the rules, the attribution of changed registers, what is not
  emulated, the slow kind's emulated calls
- :mod:`emu.hookcheck.runtime`: the stand-in ICorProfilerInfo a slow-path hook calls, answered from the API
  table's signatures
- :mod:`emu.hookcheck.report`: findings, notes, runs not emulated and the report (JSON through pydantic,
  text table)
- :mod:`emu.hookcheck.build`: ``gcc`` builds of hook sources into a cache keyed by source hash, and the
  x86 reference hook (``reference_x86.S``)
"""

from emu.hookcheck.check import DEFAULT_BUDGET, DEFAULT_RUNS, check_hook
from emu.hookcheck.loader import HookInputError
from emu.hookcheck.report import HookFinding, HookReport, NotEmulated, render_text

__all__ = ["DEFAULT_BUDGET", "DEFAULT_RUNS", "HookFinding", "HookInputError", "HookReport", "NotEmulated",
           "check_hook", "render_text"]
