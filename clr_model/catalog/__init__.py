"""Clause data: one TOML file per document (``dss.toml``, ``fe2.toml``, ...), read as package data. Assembled,
checked and queried through :mod:`clr_model.clauses`; the vocabulary (what a clause is) is :mod:`.base`.

A file names its ``document`` once and lists its clauses as ``[[clause]]`` tables with the fields of
:class:`~clr_model.catalog.base.Clause` (``layers`` a list of layer names): one table, data, not code.
"""

from __future__ import annotations

import tomllib
from importlib import resources

from pydantic import ValidationError

from clr_model.catalog.base import Clause, Document
from clr_model.errors import ModelError

#: the catalog's files, in report order
FILES: tuple[str, ...] = (
    "dss", "fe2", "mr2", "buf", "orf", "rrf", "gcs", "shd", "ini", "fgc", "sel", "att", "det", "async",
    "rejit", "rejit_monitor", "rejit_request", "rejit_inliners", "rejit_revert", "rejit_params", "rejit_fc",
    "rejit_fc_body", "rejit_fc_flags", "rejit_fc_map", "rejit_started", "rejit_finished", "rejit_error",
    "rejit_ids", "rejit_getbody", "rejit_allocator", "lds_appdomain", "lds_assembly", "lds_module",
    "lds_class", "ssc", "fe3_enter", "fe3_leave", "fe3_tailcall", "thd", "exc", "tok_function", "tok_class",
    "map_v1", "map_v2", "ict", "dyn", "il", "val",
)


def load(name: str) -> tuple[Clause, ...]:
    """The clauses of ``<name>.toml``; a malformed file is a :class:`ModelError` naming it and the clause."""
    text = resources.files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
        document = Document(data["document"])
    except (tomllib.TOMLDecodeError, KeyError, ValueError) as err:
        raise ModelError(f"clr_model/catalog/{name}.toml: {err}") from None
    clauses: list[Clause] = []
    for i, item in enumerate(data.get("clause", [])):
        try:
            clauses.append(Clause(document=document, **item))
        except (ValidationError, TypeError) as err:
            raise ModelError(f"clr_model/catalog/{name}.toml: clause {item.get('id', i)}: {err}") from None
    return tuple(clauses)
