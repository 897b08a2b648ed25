"""The fuzz judge's IL rule leaves the IL checks to the validator's rule by the rules' own declarations, not
by what the registry holds when it runs (issue 25's follow-up: that depended on module import order)."""

from __future__ import annotations

import pytest

from conformance.core import registry
from conformance.fuzz import judge
from conformance.validator.il_rules import FUZZ_MODULE_MARK, ILBodies


def test_the_validator_checks_the_fake_runtime_s_bodies_whatever_the_registry_holds() -> None:
    assert ("mark", FUZZ_MODULE_MARK) in ILBodies.reads
    assert judge.validator_checks_fuzz_bodies()
    with registry.isolated():
        registry._RULES.clear()  # as if nothing had been imported yet
        assert registry.rules(registry.Layer.VALIDATOR) == []
        assert judge.validator_checks_fuzz_bodies()


def test_without_the_fuzz_mark_the_judge_checks_the_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision follows the validator rule's reads: a rule that stopped reading the fake runtime's mark
    would leave the bodies to the fuzz judge (the flag is not a constant)."""
    monkeypatch.setattr(ILBodies, "reads", tuple(r for r in ILBodies.reads if r[1] != FUZZ_MODULE_MARK))
    assert not judge.validator_checks_fuzz_bodies()
