"""The hook checker's rules in the one registry (:mod:`conformance.core.registry`), layer ``hook``.

The checker applies its rules inside its own emulation (:mod:`emu.hookcheck.check`): each rule of
:data:`clr_model.function_enter.HOOK_RULES` (rule -> clause, what it checks) registers here at the line of
the checker that reports it, so ``profharness clauses --where FE2-08`` shows where the checker judges it and
the catalog's ``hook`` layer can be held equal to the registry.
"""

from __future__ import annotations

import re
from pathlib import Path

from clr_model.abi import ABI
from clr_model.clauses import Layer
from clr_model.function_enter import HOOK_RULES
from conformance.core.registry import Rule, register
from emu.hookcheck import check

_CHECK = Path(check.__file__)


def _line_of(rule: str) -> int:
    """The first line of the checker that reports ``rule`` (a ``_finding(run, "rule"`` or ``rule="rule"``)."""
    pattern = re.compile(rf'(_finding\(\s*run,\s*|rule=)"{re.escape(rule)}"')
    text = _CHECK.read_text()
    found = pattern.search(text)
    if found is None:
        raise ValueError(f"{_CHECK}: no line reports the hook rule {rule!r}")
    return text.count("\n", 0, found.start()) + 1


#: clauses a rule reports besides its own: register-preserved reports each register with the clause its
#: architecture's table gives it (:data:`clr_model.abi.ABI`: the x86 scratch registers are FE2-07's)
_ALSO: dict[str, tuple[str, ...]] = {
    "register-preserved": tuple(sorted({k.clause for abi in ABI.values() for k in abi.kept})),
}

for _name, (_clause, _what) in HOOK_RULES.items():
    for _each in dict.fromkeys((_clause, *_ALSO.get(_name, ()))):
        register(Rule(clause=_each, layer=Layer.HOOK, name=f"hookcheck:{_name}", what=_what, fn=None,
                      path=_CHECK, line=_line_of(_name)))  # fmt: skip
