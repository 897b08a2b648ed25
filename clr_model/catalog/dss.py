"""Clauses of the DSS document."""

from __future__ import annotations

from clr_model.catalog.base import Clause

CLAUSES: tuple[Clause, ...] = ()
