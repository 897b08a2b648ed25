"""The FE2 / MR2 / BUF part of the clause catalog: ids from docs/design.md, quotes from the documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clr_model.catalog import load
from clr_model.catalog.base import Clause, Document, Kind, Layer
from clr_model.clauses import CATALOG

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec"  # ../shared beside the clone
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
MINE = {c.id: c for c in (*load("fe2"), *load("mr2"), *load("buf"))}


def _normalise(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # markdown links: keep the text
    text = text.replace("`", "").replace("\\[", "[")
    return re.sub(r"\s+", " ", text).strip()


def test_design_ids_are_all_defined() -> None:
    """Ids are stable: every id the design started from (docs/design.md) is still defined."""
    sentence = re.search(r"started from the ids\s+(.*?)\s+and has grown", DESIGN.read_text(), flags=re.S)
    assert sentence is not None
    listed = {
        f"{prefix}-{n:02d}"
        for prefix, first, last in re.findall(r"(DSS|FE2|MR2|BUF)-(\d\d)\.\.(\d\d)", sentence.group(1))
        for n in range(int(first), int(last) + 1)
    }
    assert len(listed) == 27 + 13 + 17 + 10
    assert listed <= set(CATALOG), sorted(listed - set(CATALOG))


def test_catalog_holds_every_clause_of_mine() -> None:
    for clause_id, item in MINE.items():
        assert CATALOG[clause_id] == item


@pytest.mark.parametrize("item", list(MINE.values()), ids=list(MINE))
def test_clause_is_complete(item: Clause) -> None:
    prefix = item.id.split("-")[0]
    expected = {"FE2": Document.FUNCTION_ENTER2, "MR2": Document.MOVED_REFERENCES2,
                "BUF": Document.CALLER_ALLOCATED_BUFFERS}[prefix]
    assert item.document is expected
    assert item.layers, "a clause is checked somewhere"
    if item.kind is Kind.AMBIGUITY:
        assert item.question and item.model_choice, "our ambiguities all say what the model does"
    elif not item.paraphrase.startswith("Derived"):
        assert item.quote, "a normative sentence is quoted"


@pytest.mark.parametrize("item", [c for c in MINE.values() if c.quote], ids=lambda c: c.id)
def test_quote_stands_in_the_document(item: Clause) -> None:
    source = SPEC / item.document.value
    if not source.exists():
        pytest.skip(f"{source} not available")
    assert _normalise(item.quote) in _normalise(source.read_text())


@pytest.mark.parametrize("clause_id", ["FE2-13", "MR2-16", "BUF-09", "BUF-10"])
def test_brief_ambiguities_are_ambiguities(clause_id: str) -> None:
    assert MINE[clause_id].kind is Kind.AMBIGUITY
    assert Layer.MODEL in MINE[clause_id].layers


def test_layers_follow_the_design() -> None:
    for clause_id in ("FE2-06", "FE2-07", "FE2-08", "FE2-09"):
        assert {Layer.MODEL, Layer.HOOK} <= MINE[clause_id].layers
    for clause_id in ("MR2-07", "MR2-08"):
        assert {Layer.MODEL, Layer.LIVE} <= MINE[clause_id].layers
    for clause_id in ("FE2-01", "FE2-02", "FE2-03", "FE2-04"):
        assert Layer.LIVE in MINE[clause_id].layers
