"""The clause catalog: every normative sentence of the four contract documents and the harness's own
rules (``VAL-*``, each with its reason), one source of truth.

Data lives in :mod:`clr_model.catalog` (one TOML file per document); this module assembles it, checks it
(unique, well-formed ids) and answers queries. Ids are stable: never renumber a clause.
"""

from __future__ import annotations

from collections.abc import Iterable

from clr_model.catalog import FILES, load
from clr_model.catalog.base import Clause, Document, Kind, Layer
from clr_model.errors import ModelError

__all__ = ["CATALOG", "Clause", "Document", "Kind", "Layer", "UnknownClause", "clause", "with_layer"]


class UnknownClause(ModelError):
    """A clause id the catalog does not define."""


def _assemble(*parts: Iterable[Clause]) -> dict[str, Clause]:
    catalog: dict[str, Clause] = {}
    for part in parts:
        for item in part:
            if item.id in catalog:
                raise ModelError(f"clause catalog: {item.id} is defined twice")
            catalog[item.id] = item
    return dict(sorted(catalog.items()))


#: id -> clause, sorted by id.
CATALOG: dict[str, Clause] = _assemble(*(load(name) for name in FILES))


def clause(clause_id: str) -> Clause:
    """The clause with this id; :class:`UnknownClause` names the id when there is none."""
    try:
        return CATALOG[clause_id]
    except KeyError:
        raise UnknownClause(f"no clause {clause_id!r} in the catalog") from None


def with_layer(layer: Layer) -> list[Clause]:
    """Every clause checked by ``layer``, in id order."""
    return [c for c in CATALOG.values() if layer in c.layers]
