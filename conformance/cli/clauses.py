"""``profharness clauses``: list the contract clauses (the catalog in :mod:`clr_model.clauses`);
``--where ID``: every hop of one clause with its path (:mod:`conformance.cli.where`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from clr_model.clauses import CATALOG, Clause, Document, Layer
from conformance.core.errors import InputError

HELP = "list the contract clauses (id, kind, layers, title); --where ID shows where one clause lives"

_DOCUMENT_ALIASES: dict[str, Document] = {}
for _doc in Document:
    _DOCUMENT_ALIASES[_doc.value.lower()] = _doc
    _DOCUMENT_ALIASES[_doc.value.lower().removesuffix(".md")] = _doc
    _DOCUMENT_ALIASES[_doc.name.lower()] = _doc
for _doc, _prefix in (
    (Document.DO_STACK_SNAPSHOT, "dss"),
    (Document.FUNCTION_ENTER2, "fe2"),
    (Document.MOVED_REFERENCES2, "mr2"),
    (Document.CALLER_ALLOCATED_BUFFERS, "buf"),
):
    _DOCUMENT_ALIASES[_prefix] = _doc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the clauses as a JSON list")
    parser.add_argument(
        "--layer",
        metavar="L",
        help="only clauses checked by this layer: " + ", ".join(layer.value for layer in Layer),
    )
    parser.add_argument(
        "--where",
        metavar="ID",
        help="every hop of one clause with its path: catalog, model, judges, plan entries, native rows,"
        " tests, expectation entries",
    )
    parser.add_argument(
        "--document",
        metavar="D",
        help="only clauses of this document (file name, e.g. DoStackSnapshot.md, or prefix DSS/FE2/MR2/BUF)",
    )


def _parse_layer(text: str) -> Layer:
    try:
        return Layer(text.strip().lower())
    except ValueError:
        known = ", ".join(layer.value for layer in Layer)
        raise InputError(f"--layer {text!r}: unknown layer (known: {known})") from None


def _parse_document(text: str) -> Document:
    found = _DOCUMENT_ALIASES.get(text.strip().lower())
    if found is None:
        known = ", ".join(doc.value for doc in Document)
        raise InputError(f"--document {text!r}: unknown document (known: {known}, or DSS/FE2/MR2/BUF)")
    return found


def select(layer: Layer | None, document: Document | None) -> list[Clause]:
    """The catalog's clauses, in id order, filtered by layer and document."""
    return [
        c
        for c in CATALOG.values()
        if (layer is None or layer in c.layers) and (document is None or c.document is document)
    ]


def to_json(item: Clause) -> dict[str, Any]:
    return {
        "id": item.id,
        "title": item.title,
        "paraphrase": item.paraphrase,
        "document": item.document.value,
        "section": item.section,
        "kind": item.kind.value,
        "layers": sorted(layer.value for layer in item.layers),
        "quote": item.quote,
        "question": item.question,
        "model_choice": item.model_choice,
    }


def table(clauses: list[Clause]) -> str:
    rows = [
        (c.id, c.kind.value, ",".join(sorted(layer.value for layer in c.layers)), c.title) for c in clauses
    ]
    header = ("id", "kind", "layers", "title")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    lines.append(f"{len(rows)} clause(s)")
    return "\n".join(lines)


def _where(clause_id: str, as_json: bool) -> int:
    from conformance.cli import where

    wanted = clause_id.strip().upper()
    known = CATALOG.get(wanted)
    if known is None:
        raise InputError(
            f"--where {clause_id!r}: no such clause (ids look like DSS-05; list them with"
            " `profharness clauses`, or `profharness clauses --layer live`)"
        )
    hops = where.where(wanted)
    if as_json:
        print(where.dumps(where.to_json(wanted, known.title, hops)))
    else:
        print(where.render(wanted, known.title, hops))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.where:
        return _where(args.where, args.json)
    layer = _parse_layer(args.layer) if args.layer else None
    document = _parse_document(args.document) if args.document else None
    clauses = select(layer, document)
    if args.json:
        print(json.dumps([to_json(c) for c in clauses], indent=2))
    else:
        print(table(clauses))
    return 0
